"""Ctrl-C (SIGINT) and SIGTERM during ``rlstruct train``: one line naming the run directory and how to continue it.

The command runs in its own process; the test waits (with a deadline) for the
run to write what it must have written before the signal is sent.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlstruct import load_checkpoint

DEADLINE_S = 120.0
"""How long each wait may take: for the run to write, then for it to end after the signal."""

pytestmark = pytest.mark.timeout(2 * DEADLINE_S + 30)  # both waits fit, so their own failures show


def start(tmp_path: Path, *flags: str) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "rlstruct.cli", "train", "ppo", "--env", "CartPole-v1"]
    argv += ["--total-steps", "100000000", "--run-dir", str(tmp_path), "--no-progress", *flags]
    return subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=default_sigint
    )


def default_sigint() -> None:
    """Ctrl-C reaches a command in a terminal with SIGINT's default action, which Python turns into
    KeyboardInterrupt; a suite started in the background by a non-interactive shell ignores SIGINT,
    and a child would inherit that."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def wait_for(process: subprocess.Popen[str], ready: object) -> None:
    """Poll until ``ready()`` holds; fail if the process ends or the deadline passes first."""
    end = time.monotonic() + DEADLINE_S
    while not ready():  # type: ignore[operator]
        if process.poll() is not None:
            pytest.fail(f"rlstruct train ended first: {process.communicate()}")
        if time.monotonic() > end:
            process.kill()
            pytest.fail("rlstruct train wrote nothing in time")
        time.sleep(0.05)


def finish(process: subprocess.Popen[str]) -> str:
    """The standard error of ``process`` once it has ended; kill it and fail if it outlives the deadline."""
    try:
        return process.communicate(timeout=DEADLINE_S)[1]
    except subprocess.TimeoutExpired:
        process.kill()
        _, err = process.communicate()
        pytest.fail(f"rlstruct train did not end within {DEADLINE_S} s of the signal; standard error:\n{err}")


def run_dir_of(tmp_path: Path) -> Path | None:
    found = list(tmp_path.iterdir())
    return found[0] if found else None


def trained(tmp_path: Path) -> bool:
    run_dir = run_dir_of(tmp_path)
    progress = None if run_dir is None else run_dir / "progress.csv"
    return progress is not None and progress.exists() and len(progress.read_text().splitlines()) > 1


def test_ctrl_c_without_a_checkpoint_says_where_the_run_is(tmp_path: Path) -> None:
    process = start(tmp_path)
    wait_for(process, lambda: trained(tmp_path))  # a first row logged: training is under way
    process.send_signal(signal.SIGINT)
    err = finish(process)
    run_dir = run_dir_of(tmp_path)
    assert process.returncode == 130
    assert err == (
        f"rlstruct: interrupted; run directory {run_dir}: no checkpoint to continue from "
        "(--checkpoint-every N saves them)\n"
    )


def test_sigterm_before_the_first_checkpoint_says_when_it_was_due(tmp_path: Path) -> None:
    process = start(tmp_path, "--checkpoint-every", "50000000")
    wait_for(process, lambda: trained(tmp_path))
    process.send_signal(signal.SIGTERM)
    err = finish(process)
    run_dir = run_dir_of(tmp_path)
    assert process.returncode == 128 + signal.SIGTERM
    assert err == (
        f"rlstruct: interrupted; run directory {run_dir}: no checkpoint to continue from: the first was "
        "due at 50000000 env steps (--checkpoint-every)\n"
    )


def test_sigterm_after_a_checkpoint_names_it_and_the_command_that_continues(tmp_path: Path) -> None:
    process = start(tmp_path, "--checkpoint-every", "512")
    wait_for(process, lambda: (d := run_dir_of(tmp_path)) is not None and (d / "checkpoint.pt").exists())
    process.send_signal(signal.SIGTERM)
    err = finish(process)
    run_dir = run_dir_of(tmp_path)
    assert run_dir is not None
    steps = load_checkpoint(run_dir / "checkpoint.pt")["env_steps"]  # the last one, maybe not the first
    assert process.returncode == 128 + signal.SIGTERM
    assert err == (
        f"rlstruct: interrupted; run directory {run_dir}: its last checkpoint, at {steps} env steps, "
        f"continues with: rlstruct train ppo --resume {run_dir}\n"
    )
