"""``rlstruct --help``, ``--version`` and ``rlstruct train ALGO --help``: what each command and flag is, without markup."""

from __future__ import annotations

import subprocess
import sys

import pytest

import rlstruct
from rlstruct.algos import ALGORITHMS
from rlstruct.cli import main


def test_the_top_level_help_says_what_each_command_and_algorithm_is(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("rlstruct: train reinforcement-learning agents")
    for command in ("train ALGO --env ENV_ID", "eval RUN_DIR", "plot RUN_DIR", "export RUN_DIR OUT"):
        assert f"\n  {command} " in out
    lines = out.splitlines()
    for algo in ALGORITHMS:  # one line each: the name, then the first line of its module's docstring
        (line,) = [line for line in lines if line.startswith(f"  {algo} ")]
        assert f"{algo.upper()}: " in line
    assert main(["train", "--help"]) == 0
    assert capsys.readouterr().out == out


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_version(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([flag]) == 0
    assert capsys.readouterr().out == f"rlstruct {rlstruct.__version__}\n"


def test_a_reader_that_stops_early_gets_no_traceback() -> None:
    """``rlstruct --help | head -1``: the pipe is closed before the help is written."""
    child = subprocess.Popen(
        [sys.executable, "-m", "rlstruct.cli", "--help"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert child.stdout is not None and child.stderr is not None
    child.stdout.close()  # the reader is gone while the child still imports
    with child.stderr:
        stderr = child.stderr.read().decode()
    assert child.wait(timeout=120) == 141  # as the shell's SIGPIPE
    assert stderr == ""  # not BrokenPipeError's traceback


def test_a_broken_pipe_that_is_not_stdout_s_is_the_user_s_error() -> None:
    """A simulator's or an environment's pipe, while stdout's reader is still there: not a quiet 141."""
    raising = (
        "import sys\n"
        "from rlstruct import cli\n"
        "def broken(argv):\n"
        "    raise BrokenPipeError('the simulator went away')\n"
        "cli._main = broken\n"
        "sys.exit(cli.main([]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", raising], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 1
    assert "BrokenPipeError: the simulator went away" in done.stderr


@pytest.mark.parametrize("algo", ALGORITHMS)
def test_an_algorithms_help_shows_env_required_and_no_markup(
    algo: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["train", algo, "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "``" not in out
    assert "(required, unless --resume)" in out
    assert "(default: )" not in out
