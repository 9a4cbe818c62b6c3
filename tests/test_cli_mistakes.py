"""``rlstruct`` command lines with a mistake: one line on standard error naming the flag as typed, exit
status 2, no traceback, nothing on standard output and no run directory; ``RLSTRUCT_DEBUG`` gives the
traceback instead.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import gymnasium
import pytest
import torch

from rlstruct.algos import a2c, dqn, impala, ppo, sac
from rlstruct.algos.config import check_device
from rlstruct.algos.evaluation import UnknownEnvironment
from rlstruct.cli import main
from rlstruct.errors import ConfigError

CARTPOLE = ["--env", "CartPole-v1"]
TRY_DISCRETE = "try a2c, dqn, impala or ppo"
TRY_CONTINUOUS = "try a2c, impala, ppo or sac"
NO_GPU = pytest.mark.skipif(torch.cuda.is_available(), reason="this torch can use a GPU")

TRAIN_MISTAKES = [
    (["ppo", *CARTPOLE, "--total-steps", "-5"], "rlstruct: --total-steps must be in (0, inf), got -5"),
    (["ppo", *CARTPOLE, "--total-steps", "0"], "rlstruct: --total-steps must be in (0, inf), got 0"),
    (["ppo", *CARTPOLE, "--lr", "-1"], "rlstruct: --lr must be in (0, inf), got -1.0"),
    (["ppo", *CARTPOLE, "--n-processes", "0"], "rlstruct: --n-processes must be in (0, inf), got 0"),
    (["ppo", *CARTPOLE, "--n-envs", "3"], "rlstruct: --n-envs (3) must be a multiple of --n-processes (2)"),
    pytest.param(
        ["ppo", *CARTPOLE, "--device", "cuda"],
        "rlstruct: --device is 'cuda' but this torch cannot use a GPU (torch.cuda.is_available() is False)",
        marks=NO_GPU,
    ),
    (
        ["ppo", *CARTPOLE, "--device", "gpu"],
        "rlstruct: --device must be 'cpu' or 'cuda' ('cuda:N' for GPU N), got 'gpu'",
    ),
    (
        ["sac", *CARTPOLE],
        f"rlstruct: sac needs continuous (Box) actions; --env 'CartPole-v1' has Discrete(2): {TRY_DISCRETE}",
    ),
    (
        ["dqn", "--env", "Pendulum-v1"],
        f"rlstruct: dqn needs discrete actions; --env 'Pendulum-v1' has Box(1,): {TRY_CONTINUOUS}",
    ),
    (
        ["impala", *CARTPOLE, "--checkpoint-every", "1000"],
        "rlstruct: impala: --checkpoint-every is not supported: its stream collection is asynchronous, "
        "so no checkpoint could be continued bit-identically; got 1000",
    ),
    (
        ["ppo", *CARTPOLE, "--recurrent", "--memory", "foo"],
        "rlstruct: --memory must be one of 'gru', 'lstm', got 'foo'",
    ),
    (["ppo", *CARTPOLE, "--gamma", "1.5"], "rlstruct: --gamma must be in [0, 1], got 1.5"),
    (["dqn", *CARTPOLE, "--stop-patience", "-1"], "rlstruct: --stop-patience must be at least 0, got -1"),
    (
        ["a2c", *CARTPOLE, "--stop-at-return", "nan"],
        "rlstruct: --stop-at-return must be in (-inf, inf), got nan",
    ),
    # tuned settings for Pendulum-v1: the mistake comes alone, before they are listed
    (["ppo", "--env", "Pendulum-v1", "--gamma", "1.5"], "rlstruct: --gamma must be in [0, 1], got 1.5"),
    (["a2c", *CARTPOLE, "--gae-lambda", "-0.1"], "rlstruct: --gae-lambda must be in [0, 1], got -0.1"),
    (["ppo", *CARTPOLE, "--clip", "0"], "rlstruct: --clip must be in (0, inf), got 0.0"),
    (
        ["sac", "--env", "Pendulum-v1", "--seed", str(2**64)],
        "rlstruct: --seed must be in [-9223372036854775808, 18446744073709551615] (torch's seeds), "
        "got 18446744073709551616",
    ),
    (
        ["ppo", *CARTPOLE, "--torch-threads", "3000000000"],
        "rlstruct: --torch-threads must be at most 2147483647, got 3000000000",
    ),
    (
        ["a2c", "--env", "os:getcwd"],
        "rlstruct: --env: env 'os:getcwd': the factory must return a gymnasium.Env, got a str",
    ),
    (["dqn", *CARTPOLE, "--eps-fraction", "0"], "rlstruct: --eps-fraction must be in (0, 1], got 0.0"),
    (
        ["dqn", *CARTPOLE, "--alpha", "0.3"],
        "rlstruct: --alpha (0.3) is a setting of prioritized replay and needs --prioritized; without it, "
        "leave --alpha at 0.6",
    ),
    (
        ["dqn", *CARTPOLE, "--beta-start", "0.1"],
        "rlstruct: --beta-start (0.1) is a setting of prioritized replay and needs --prioritized; without it, "
        "leave --beta-start at 0.4",
    ),
    (
        ["dqn", *CARTPOLE, "--her-k", "2"],
        "rlstruct: --her-k (2) is a setting of hindsight relabelling and needs --her; without it, leave --her-k at 4",
    ),
    (
        ["ppo", *CARTPOLE, "--agent", "rlstruct.testing:RandomAgent", "--recurrent"],
        "rlstruct train ppo: --recurrent is a setting of the built-in agent, which --agent replaces; give "
        "your agent's settings in --agent-args (rlstruct train ppo --help lists the flags)",
    ),
    # the other settings only the built-in agent reads, which --agent would leave unused
    (
        ["ppo", *CARTPOLE, "--agent", "rlstruct.testing:RandomAgent", "--no-orthogonal-init"],
        "rlstruct train ppo: --no-orthogonal-init is a setting of the built-in agent, which --agent replaces; "
        "give your agent's settings in --agent-args (rlstruct train ppo --help lists the flags)",
    ),
    (
        ["a2c", *CARTPOLE, "--agent", "rlstruct.testing:RandomAgent", "--no-value-norm"],
        "rlstruct train a2c: --no-value-norm is a setting of the built-in agent, which --agent replaces; "
        "give your agent's settings in --agent-args (rlstruct train a2c --help lists the flags)",
    ),
    (
        ["dqn", *CARTPOLE, "--agent", "rlstruct.testing:RandomAgent", "--hidden", "32"],
        "rlstruct train dqn: --hidden 32 is a setting of the built-in agent, which --agent replaces; "
        "give your agent's settings in --agent-args (rlstruct train dqn --help lists the flags)",
    ),
    (
        ["dqn", *CARTPOLE, "--agent", "rlstruct.testing:RandomAgent", "--no-dueling"],
        "rlstruct train dqn: --no-dueling is a setting of the built-in agent, which --agent replaces; "
        "give your agent's settings in --agent-args (rlstruct train dqn --help lists the flags)",
    ),
    (
        ["a2c", *CARTPOLE, "--agent", "torch.nn:Linear"],
        "rlstruct: --agent must name an rlstruct.Agent subclass, got the class torch.nn.modules.linear.Linear",
    ),
    (["ppo", *CARTPOLE, "--lr", "-1e-3"], "rlstruct: --lr must be in (0, inf), got -0.001"),
    (
        ["ppo", *CARTPOLE, "--total", "1000"],
        "rlstruct train ppo: unrecognized arguments: --total 1000 (rlstruct train ppo --help lists the flags)",
    ),
    (["sac", "--env", "Pendulum-v1", "--gamma", "-0.1"], "rlstruct: --gamma must be in (0, 1], got -0.1"),
    (["impala", *CARTPOLE, "--ent-coef", "-1"], "rlstruct: --ent-coef must be in [0, inf), got -1.0"),
    (["a2c", *CARTPOLE, "--max-grad-norm", "0"], "rlstruct: --max-grad-norm must be in (0, inf), got 0.0"),
    (
        ["impala", *CARTPOLE, "--n-slots", "2"],
        "rlstruct: --n-slots (2) must be more than --n-processes (2)",
    ),
    (
        ["ppo", *CARTPOLE, "--minibatch-size", "100000"],
        "rlstruct: --minibatch-size (100000) must be at most the steps of one iteration, "
        "n_envs x n_steps = 256",
    ),
    (
        ["dqn", *CARTPOLE, "--memory", "lstm"],
        "rlstruct train dqn: unrecognized arguments: --memory lstm (rlstruct train dqn --help lists the flags)",
    ),
    (
        ["sac", "--env", "Pendulum-v1", "--memory=lstm"],
        "rlstruct train sac: unrecognized arguments: --memory=lstm (rlstruct train sac --help lists the flags)",
    ),
    (
        ["sac", "--env", "Pendulum-v1", "--recurrent", "--burn-in", "16"],
        "rlstruct: --burn-in (16) must be below --n-steps (16) with --recurrent: a chunk is a row of n_steps "
        "steps, and its burn-in steps are not learned from",
    ),
    (
        ["ppo", *CARTPOLE, "--total-steps", "many"],
        "rlstruct train ppo: argument --total-steps: invalid int value: 'many' "
        "(rlstruct train ppo --help lists the flags)",
    ),
    (
        ["ppo", *CARTPOLE, "--frob", "3"],
        "rlstruct train ppo: unrecognized arguments: --frob 3 (rlstruct train ppo --help lists the flags)",
    ),
    (
        ["ppo", *CARTPOLE, "--progress", "false"],
        "rlstruct train ppo: argument --progress: takes no value (--progress or --no-progress), got 'false' "
        "(rlstruct train ppo --help lists the flags)",
    ),
    (
        ["a2c", *CARTPOLE, "--recurrent", "true"],
        "rlstruct train a2c: argument --recurrent: takes no value (--recurrent or --no-recurrent), got 'true' "
        "(rlstruct train a2c --help lists the flags)",
    ),
    (
        ["ppo", "--total-steps", "256"],
        "rlstruct train ppo: the following arguments are required: --env "
        "(rlstruct train ppo --help lists the flags)",
    ),
    (
        ["ppo", "--env", "CartPol-v1"],
        "rlstruct: --env: unknown environment 'CartPol-v1' (NameNotFound: Environment `CartPol` doesn't exist. "
        "Did you mean: `CartPole`?); did you mean 'CartPole-v1'?",
    ),
    (
        ["ppo", *CARTPOLE, "--agent", "no_such_module:Agent"],
        "rlstruct: --agent: cannot import 'no_such_module' (ModuleNotFoundError: No module named 'no_such_module')",
    ),
    (["ppo", *CARTPOLE, "--json", ""], "rlstruct: --json must be a file in an existing folder, got ''"),
    (
        ["ppo", *CARTPOLE, "--json", "/no/such/folder/results.json"],
        "rlstruct: --json must be a file in an existing folder, got '/no/such/folder/results.json'",
    ),
    (
        ["ppo", *CARTPOLE, "--memory", "lstm"],
        "rlstruct: --memory ('lstm') is a setting of the recurrent agent and needs --recurrent; without it, "
        "leave --memory at 'gru'",
    ),
    (
        ["a2c", *CARTPOLE, "--memory", "lstm"],
        "rlstruct: --memory ('lstm') is a setting of the recurrent agent and needs --recurrent; without it, "
        "leave --memory at 'gru'",
    ),
    (
        ["dqn", *CARTPOLE, "--burn-in", "4"],
        "rlstruct: --burn-in (4) is a setting of the recurrent agent and needs --recurrent; without it, "
        "leave --burn-in at 8",
    ),
    (
        ["sac", "--env", "Pendulum-v1", "--burn-in", "4"],
        "rlstruct: --burn-in (4) is a setting of the recurrent agent and needs --recurrent; without it, "
        "leave --burn-in at 8",
    ),
    (
        ["dqn", *CARTPOLE, "--buffer-size", "10"],
        "rlstruct: --buffer-size (10) must hold at least one batch of --batch-size (256) transitions",
    ),
    (
        ["sac", "--env", "Pendulum-v1", "--target-entropy", "nan"],
        "rlstruct: --target-entropy must be in (-inf, inf), got nan",
    ),
    (
        ["foo", *CARTPOLE],
        "rlstruct train: unknown algorithm 'foo'; choose one of a2c, dqn, impala, ppo, sac "
        "(rlstruct train --help lists them)",
    ),
    (
        [*CARTPOLE],
        "rlstruct train: no algorithm given; choose one of a2c, dqn, impala, ppo, sac "
        "(rlstruct train --help lists them)",
    ),
]


@pytest.mark.parametrize(("argv", "line"), TRAIN_MISTAKES)
def test_a_train_mistake_is_one_line_and_makes_no_run_directory(
    argv: list[str], line: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["train", *argv, "--run-dir", str(tmp_path), "--no-progress"]) == 2
    out = capsys.readouterr()
    assert (out.out, out.err) == ("", line + "\n")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        ([], "rlstruct: no command given; choose train, eval, plot or export (rlstruct --help lists them)"),
        (
            ["frob"],
            "rlstruct: unknown command 'frob'; choose train, eval, plot or export (rlstruct --help lists them)",
        ),
        (
            ["train"],
            "rlstruct train: no algorithm given; choose one of a2c, dqn, impala, ppo, sac "
            "(rlstruct train --help lists them)",
        ),
        (
            ["eval"],
            "rlstruct eval: the following arguments are required: RUN_DIR (rlstruct eval --help lists the flags)",
        ),
        (
            ["eval", "runs/x", "--episodes", "0"],
            "rlstruct eval: argument --episodes: must be a positive int, got 0 "
            "(rlstruct eval --help lists the flags)",
        ),
        (
            ["eval", "runs/x", "--episodes", "2.5"],
            "rlstruct eval: argument --episodes: must be a positive int, got '2.5' "
            "(rlstruct eval --help lists the flags)",
        ),
        (["plot", "runs/x", "--out", ""], "rlstruct plot: --out must name an image file, got ''"),
        (
            ["plot", "runs/x", "--out", "/no/such/folder/curves.png"],
            "rlstruct plot: --out: the folder '/no/such/folder' does not exist",
        ),
        (
            ["plot", "runs/x", "--x", "steps"],
            "rlstruct plot: argument --x: invalid choice: 'steps' (choose from 'env_steps', 'wall_time') "
            "(rlstruct plot --help lists the flags)",
        ),
    ],
)
def test_a_command_mistake_is_one_line(
    argv: list[str], line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    out = capsys.readouterr()
    assert (out.out, out.err) == ("", line + "\n")


@pytest.mark.parametrize(
    ("argv", "flag", "what"),
    [
        (["ppo", *CARTPOLE, "--hidden", "10000000000"], "--hidden (10000000000)", "a hidden layer's weights"),
        (["dqn", *CARTPOLE, "--buffer-size", str(10**13)], f"--buffer-size ({10**13})", "a replay buffer"),
        (
            ["sac", "--env", "Pendulum-v1", "--buffer-size", str(10**13)],
            f"--buffer-size ({10**13})",
            "a replay buffer",
        ),
    ],
)
def test_a_size_beyond_the_machine_s_memory_is_one_line_before_the_run_starts(
    argv: list[str], flag: str, what: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["train", *argv, "--run-dir", str(tmp_path), "--no-progress"]) == 2
    out = capsys.readouterr()
    assert out.out == ""
    assert re.fullmatch(
        rf"rlstruct: {re.escape(flag)} asks for {what} of at least [\d.]+ [kMGTP]?B, more than the [\d.]+ "
        r"[kMGTP]?B of memory of --device 'cpu'\n",
        out.err,
    ), out.err
    assert list(tmp_path.iterdir()) == []


def test_paths_that_are_folders_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "folder"
    folder.mkdir()
    runs = tmp_path / "runs"
    assert main(["train", "ppo", *CARTPOLE, "--json", str(folder), "--run-dir", str(runs)]) == 2
    assert capsys.readouterr().err == (
        f"rlstruct: --json must be a file in an existing folder, got the folder {str(folder)!r}\n"
    )
    assert not runs.exists()
    assert main(["plot", str(tmp_path), "--out", str(folder)]) == 2
    assert (
        capsys.readouterr().err
        == f"rlstruct plot: --out must name an image file, got the folder {str(folder)!r}\n"
    )
    for out, got in ((str(folder), f"the folder {str(folder)!r}"), ("", "''")):
        assert main(["export", str(tmp_path), out]) == 2
        assert capsys.readouterr().err == f"rlstruct export: OUT must name the file to write, got {got}\n"
    assert list(folder.iterdir()) == []


def test_a_run_that_runs_out_of_memory_ends_in_one_line_with_status_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def allocation_failure(config: ppo.Config) -> None:
        raise RuntimeError(
            "[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: you "
            "tried to allocate 400000000000 bytes. Error code 12 (Cannot allocate memory)"
        )

    monkeypatch.setattr(ppo, "train", allocation_failure)
    assert main(["train", "ppo", *CARTPOLE, "--run-dir", str(tmp_path), "--no-progress"]) == 1
    assert capsys.readouterr().err == (
        "rlstruct: ppo: out of memory (400000000000 bytes asked for at once); a size such as --n-envs, "
        "--hidden or --buffer-size is too large for this machine\n"
    )

    def another_failure(config: ppo.Config) -> None:
        raise RuntimeError("a bug, not a mistake")

    monkeypatch.setattr(ppo, "train", another_failure)
    with pytest.raises(RuntimeError, match="a bug, not a mistake"):  # a bug keeps its traceback
        main(["train", "ppo", *CARTPOLE, "--run-dir", str(tmp_path), "--no-progress"])


def test_a_bare_popgym_id_is_told_its_prefix() -> None:
    error = UnknownEnvironment("popgym-RepeatPreviousEasy-v0", gymnasium.error.NameNotFound("not registered"))
    assert str(error).endswith(
        "POPGym environments need the module prefix and the popgym extra: "
        "--env popgym:popgym-RepeatPreviousEasy-v0"
    )


def test_resuming_a_run_without_a_checkpoint_is_one_line_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a run killed before its first checkpoint: config.json is written, checkpoint.pt not yet
    run_dir = tmp_path / "ppo-CartPole-v1-s0-20261126-120000"
    run_dir.mkdir()
    config = {"env": "CartPole-v1", "total_steps": 1024, "checkpoint_every": 512, "run_dir": str(tmp_path)}
    (run_dir / "config.json").write_text(json.dumps(config))
    assert main(["train", "ppo", "--resume", str(run_dir), "--no-progress"]) == 2
    out = capsys.readouterr()
    assert out.out == ""
    assert out.err == (
        f"rlstruct: ppo: --resume {str(run_dir)!r} holds no checkpoint.pt yet: the run stopped before its "
        "first checkpoint, due at 512 env steps (--checkpoint-every)\n"
    )
    # IMPALA cannot resume any run
    assert main(["train", "impala", "--resume", str(run_dir)]) == 2
    assert capsys.readouterr().err.startswith("rlstruct: impala: --resume is not supported: ")
    assert sorted(tmp_path.rglob("*")) == [run_dir, run_dir / "config.json"]  # as it was


def test_a_run_dir_that_is_a_file_or_nothing_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "runs").write_text("")
    assert main(["train", "ppo", *CARTPOLE, "--run-dir", str(tmp_path / "runs")]) == 2
    assert capsys.readouterr().err == (
        f"rlstruct: --run-dir must be a folder (or one to make), got the file {str(tmp_path / 'runs')!r}\n"
    )
    monkeypatch.chdir(tmp_path)  # where a run of --run-dir '' would land
    assert main(["train", "ppo", *CARTPOLE, "--run-dir", "", "--no-progress"]) == 2
    assert capsys.readouterr().err == "rlstruct: --run-dir must be a folder (or one to make), got ''\n"
    assert list(tmp_path.iterdir()) == [tmp_path / "runs"]
    with pytest.raises(
        ConfigError, match=re.escape("config.run_dir must be a folder (or one to make), got ''")
    ):
        ppo.check(ppo.Config(env="CartPole-v1", run_dir=""))


@pytest.fixture
def read_only(tmp_path: Path) -> Iterator[Path]:
    """A folder where writing fails: one made read-only, or /sys for root, whom permissions do not stop."""
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        if not Path("/sys").is_dir():
            pytest.skip("root, and no /sys: no folder it cannot write in")
        yield Path("/sys")
        return
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o555)
    yield folder
    folder.chmod(0o755)


def test_paths_that_cannot_be_written_are_one_line_before_anything_runs(
    read_only: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = tmp_path / "runs"
    cases = [
        (["train", "ppo", *CARTPOLE, "--run-dir", str(read_only / "runs")], "rlstruct: --run-dir "),
        (
            ["train", "ppo", *CARTPOLE, "--json", str(read_only / "r.json"), "--run-dir", str(runs)],
            "rlstruct: --json ",
        ),
        (["plot", str(tmp_path), "--out", str(read_only / "c.png")], "rlstruct plot: --out "),
        (["export", str(tmp_path), str(read_only / "p.pt2")], "rlstruct export: OUT "),
        (["eval", str(tmp_path), "--gif", str(read_only / "e.gif")], "rlstruct eval: --gif "),
    ]
    for argv, flag in cases:
        assert main([*argv, *(["--no-progress"] if argv[0] == "train" else [])]) == 2, argv
        out = capsys.readouterr()
        what = "cannot hold the run's directory" if "--run-dir" in flag else "cannot be written"
        assert out.out == "" and re.fullmatch(rf"{re.escape(flag)}'[^']+' {what}: [^\n]+\n", out.err), out.err
    assert not runs.exists()


def rlstruct(tmp_path: Path, debug: str | None) -> subprocess.CompletedProcess[str]:
    """``rlstruct train ppo --total-steps -5`` in a fresh process, with ``RLSTRUCT_DEBUG`` as given."""
    env = {k: v for k, v in os.environ.items() if k != "RLSTRUCT_DEBUG"}
    if debug is not None:
        env["RLSTRUCT_DEBUG"] = debug
    argv = ["train", "ppo", *CARTPOLE, "--total-steps", "-5", "--run-dir", str(tmp_path)]
    return subprocess.run(
        [sys.executable, "-m", "rlstruct.cli", *argv], capture_output=True, text=True, env=env, timeout=120
    )


@pytest.mark.parametrize(
    ("module", "argv", "line"),
    [
        ("ppo", ["--total-steps", "-5"], "rlstruct: --total-steps must be in (0, inf), got -5"),
        ("a2c", ["--gamma", "2"], "rlstruct: --gamma must be in [0, 1], got 2.0"),
        (
            "dqn",
            ["--n-envs", "3", "--n-processes", "2"],
            "rlstruct: --n-envs (3) must be a multiple of --n-processes (2)",
        ),
        (
            "impala",
            ["--checkpoint-every", "10"],
            "rlstruct: impala: --checkpoint-every is not supported: its stream "
            "collection is asynchronous, so no checkpoint could be continued bit-identically; got 10",
        ),
        ("sac", ["--tau", "0"], "rlstruct: --tau must be in (0, 1], got 0.0"),
    ],
)
def test_python_m_an_algorithm_reports_a_mistake_as_rlstruct_train_does(
    module: str, argv: list[str], line: str, tmp_path: Path
) -> None:
    env = ["--env", "Pendulum-v1"] if module == "sac" else CARTPOLE
    done = subprocess.run(
        [sys.executable, "-m", f"rlstruct.algos.{module}", *env, *argv, "--run-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (done.returncode, done.stdout, done.stderr) == (2, "", line + "\n")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("debug", [None, "", "0"])
def test_a_process_prints_no_traceback(tmp_path: Path, debug: str | None) -> None:
    done = rlstruct(tmp_path, debug)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == "rlstruct: --total-steps must be in (0, inf), got -5\n"
    assert list(tmp_path.iterdir()) == []


def test_rlstruct_debug_gives_the_traceback(tmp_path: Path) -> None:
    done = rlstruct(tmp_path, "1")
    assert done.returncode == 1
    assert done.stderr.startswith("Traceback (most recent call last):")
    assert done.stderr.endswith(
        "rlstruct.errors.ConfigError: config: total_steps must be in (0, inf), got -5\n"
    )
    assert list(tmp_path.iterdir()) == []


def test_check_raises_a_config_error_naming_the_field_before_anything_starts(tmp_path: Path) -> None:
    config = ppo.Config(env="CartPole-v1", gamma=1.5, run_dir=str(tmp_path))
    for raised in (ppo.check, ppo.train):
        with pytest.raises(
            ConfigError, match=re.escape("config: gamma must be in [0, 1], got 1.5")
        ) as caught:
            raised(config)
        assert isinstance(caught.value, TypeError) and isinstance(caught.value, ValueError)
        assert type(caught.value.__cause__) is ValueError  # what check_number raised
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("n_envs", 8.0, "config.n_envs must be an int, got a float"),
        ("seed", "0", "config.seed must be an int, got a str"),
        ("recurrent", "yes", "config.recurrent must be a bool, got a str"),
        ("lr", True, "config.lr must be a number, got a bool"),
        ("agent_args", [1], "config.agent_args must be a dict (a JSON object) or None, got a list"),
    ],
)
def test_check_refuses_a_value_of_another_type_than_its_field(
    field: str, value: object, expected: str
) -> None:
    with pytest.raises(ConfigError, match=re.escape(expected)):
        ppo.check(ppo.Config(env="CartPole-v1", **{field: value}))


@dataclasses.dataclass
class MyPPOConfig(ppo.Config):
    """A user's own config class, which extends PPO's."""


@pytest.mark.parametrize(
    ("module", "config", "expected"),
    [
        (ppo, a2c.Config(env="CartPole-v1"), "config must be a ppo.Config, got an a2c.Config"),
        (a2c, impala.Config(env="CartPole-v1"), "config must be an a2c.Config, got an impala.Config"),
        (sac, "Pendulum-v1", "config must be a sac.Config, got a str"),
        (dqn, {"env": "CartPole-v1"}, "config must be a dqn.Config, got a dict"),
        (impala, None, "config must be an impala.Config, got a NoneType"),
        (
            a2c,
            MyPPOConfig(env="CartPole-v1"),
            "config must be an a2c.Config, got a test_cli_mistakes.MyPPOConfig",
        ),
    ],
)
def test_check_and_train_refuse_another_algorithms_config(
    module: ModuleType, config: object, expected: str
) -> None:
    """Not an AttributeError on the first field the other Config lacks."""
    for raised in (module.check, module.train):
        with pytest.raises(ConfigError, match=re.escape(expected)) as caught:
            raised(config)
        assert isinstance(caught.value, TypeError)


def test_a_factory_that_raises_is_named_with_its_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "broken_factory.py").write_text(
        "def make(**kwargs):\n    raise RuntimeError('the simulator could not start')\n"
    )
    sys.path.insert(0, str(tmp_path))
    try:
        assert (
            main(["train", "ppo", "--env", "broken_factory:make", "--run-dir", str(tmp_path / "runs")]) == 2
        )
    finally:
        sys.path.remove(str(tmp_path))
    assert capsys.readouterr().err == (
        "rlstruct: --env: env 'broken_factory:make': making it raised RuntimeError: the simulator could not start\n"
    )
    assert not (tmp_path / "runs").exists()


def test_a_first_step_gym_env_refuses_is_one_line_before_any_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A reward gymnasium's own checker refuses (a bool) is found by check, not by the run's first batch."""
    (tmp_path / "bool_reward.py").write_text(
        "import gymnasium as gym\n"
        "from gymnasium.envs.classic_control import CartPoleEnv\n\n\n"
        "class Won(gym.Wrapper):\n"
        "    def step(self, action):\n"
        "        observation, reward, terminated, truncated, info = self.env.step(action)\n"
        "        return observation, bool(reward > 0), terminated, truncated, info\n\n\n"
        "def make(**kwargs):\n"
        "    return gym.wrappers.TimeLimit(Won(CartPoleEnv()), 100)\n"
    )
    sys.path.insert(0, str(tmp_path))
    try:
        assert main(["train", "a2c", "--env", "bool_reward:make", "--run-dir", str(tmp_path / "runs")]) == 2
    finally:
        sys.path.remove(str(tmp_path))
    assert capsys.readouterr().err == (
        "rlstruct: --env: GymEnv('bool_reward:make'), instance 0: the reward of the first step is a bool, "
        "expected a number\n"
    )
    assert not (tmp_path / "runs").exists()  # it was made, with a traceback, before


def test_check_leaves_torch_alone_and_returns_the_spaces() -> None:
    state = torch.random.get_rng_state()
    for module, env in (
        (a2c, "CartPole-v1"),
        (dqn, "CartPole-v1"),
        (impala, "CartPole-v1"),
        (sac, "Pendulum-v1"),
    ):
        assert module.check(module.Config(env=env)).max_episode_steps in (200, 500)
    assert ppo.check(ppo.Config(env="CartPole-v1")).n_actions == 2
    assert torch.equal(torch.random.get_rng_state(), state)


def test_a_recurrent_agent_takes_any_minibatch_size() -> None:
    # whole rows: at least one, at most the n_envs rows of an iteration, whatever minibatch_size asks
    ppo.check(ppo.Config(env="CartPole-v1", recurrent=True, minibatch_size=100_000))
    ppo.check(ppo.Config(env="CartPole-v1", recurrent=True, minibatch_size=1))
    with pytest.raises(ConfigError, match=re.escape("config.minibatch_size (257) must be at most")):
        ppo.check(ppo.Config(env="CartPole-v1", minibatch_size=257))


def test_a_gpu_that_torch_does_not_see_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # as on a machine with one GPU
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    check_device("cuda")
    check_device("cuda:0")
    with pytest.raises(
        ValueError, match=re.escape("config.device is 'cuda:1' but torch sees 1 GPU(s): cuda:0")
    ):
        check_device("cuda:1")


def test_the_rlstruct_command_finds_a_module_of_the_current_directory(tmp_path: Path) -> None:
    """``--env module:Id`` imports ./module.py, as ``python -m`` would (here it registers CartPole)."""
    (tmp_path / "mine.py").write_text(
        'import gymnasium as gym\n\ngym.register("Mine-v0", entry_point="gymnasium.envs.classic_control:CartPoleEnv")\n'
    )
    command = Path(sys.executable).parent / "rlstruct"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [str(command), "train", "sac", "--env", "mine:Mine-v0"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        "rlstruct: sac needs continuous (Box) actions; --env 'mine:Mine-v0' has Discrete(2): "
        "try a2c, dqn, impala or ppo\n"
    )


def test_main_leaves_sys_path_as_it_found_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    before = list(sys.path)
    assert main(["train", "ppo", *CARTPOLE, "--total-steps", "-5"]) == 2
    assert sys.path == before


def test_a_gpu_out_of_memory_error_gives_its_amount() -> None:
    from rlstruct.cli import OUT_OF_MEMORY, _out_of_memory

    error = OUT_OF_MEMORY("CUDA out of memory. Tried to allocate 20.00 GiB (GPU 0; 79.1 GiB total capacity)")
    assert _out_of_memory(error).startswith("out of memory (20.00 GiB asked for at once); ")  # type: ignore[arg-type]


SPACES_MODULE = """
import gymnasium as gym, numpy as np
from gymnasium.spaces import Box, Discrete

class Constant(gym.Env):
    def __init__(self, act, obs=Box(-1, 1, (2,), np.float32)):
        self.action_space, self.observation_space = act, obs
    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(self.observation_space.shape, self.observation_space.dtype), {}
    def step(self, action):
        return np.zeros(self.observation_space.shape, self.observation_space.dtype), 1.0, False, False, {}

def f64(**kwargs): return gym.wrappers.TimeLimit(Constant(Box(-1, 1, (2,), np.float64)), 20)
def matrix(**kwargs): return gym.wrappers.TimeLimit(Constant(Box(-1, 1, (2, 2), np.float32)), 20)
def shifted(**kwargs): return gym.wrappers.TimeLimit(Constant(Discrete(3, start=-1)), 20)
def unbounded(**kwargs): return gym.wrappers.TimeLimit(Constant(Box(-np.inf, np.inf, (1,), np.float32)), 20)
def scalar(**kwargs): return gym.wrappers.TimeLimit(Constant(Discrete(2), Box(-1, 1, (), np.float32)), 20)
def long(**kwargs): return gym.wrappers.TimeLimit(Constant(Discrete(2)), 1500)
def text(**kwargs): return gym.wrappers.TimeLimit(Constant(Discrete(2), gym.spaces.Text(5)), 20)
def slashed(**kwargs):
    return gym.wrappers.TimeLimit(Constant(Discrete(2), gym.spaces.Dict({"a/b": Discrete(2)})), 20)
"""


@pytest.fixture
def spaces_module(tmp_path: Path) -> Iterator[str]:
    (tmp_path / "odd_spaces.py").write_text(SPACES_MODULE)
    sys.path.insert(0, str(tmp_path))
    yield "odd_spaces"
    sys.path.remove(str(tmp_path))
    sys.modules.pop("odd_spaces", None)


@pytest.mark.parametrize(
    ("algo", "factory", "expected"),
    [
        (
            "ppo",
            "f64",
            "the algorithms' continuous actions are one float32 vector per step, and its action space is Box(-1.0, 1.0, (2,), float64)",
        ),
        (
            "sac",
            "matrix",
            "the algorithms' continuous actions are one float32 vector per step, and its action space is Box(-1.0, 1.0, (2, 2), float32)",
        ),
        (
            "dqn",
            "shifted",
            "the algorithms' discrete actions are 0 to n - 1, and its action space Discrete(3, start=-1) starts elsewhere",
        ),
        (
            "sac",
            "unbounded",
            "sac squashes its actions into their bounds, and --env 'odd_spaces:unbounded' has bounds [-inf] to [inf]",
        ),
    ],
)
def test_action_spaces_the_learners_cannot_drive_are_one_line(
    spaces_module: str,
    algo: str,
    factory: str,
    expected: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert (
        main(["train", algo, "--env", f"{spaces_module}:{factory}", "--run-dir", str(tmp_path / "runs")]) == 2
    )
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and expected in err, err
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    ("factory", "expected"),
    [
        (
            "text",
            "rlstruct: --env: env 'odd_spaces:text': its observation space Text(1, 5, charset=",
        ),
        (
            "slashed",
            "rlstruct: --env: env 'odd_spaces:slashed': its observation space Dict('a/b': Discrete(2)): the "
            "observation entry 'a/b' has a '/' in its name",
        ),
    ],
)
def test_observation_spaces_gym_env_cannot_store_are_one_line_naming_the_env(
    spaces_module: str, factory: str, expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # they were told as the errors of 'observation_spaces', a helper the user never called, without the env
    assert (
        main(["train", "ppo", "--env", f"{spaces_module}:{factory}", "--run-dir", str(tmp_path / "runs")])
        == 2
    )
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(expected), err
    assert "observation_spaces" not in err
    assert not (tmp_path / "runs").exists()


def test_a_scalar_observation_and_a_factory_s_own_time_limit(spaces_module: str) -> None:
    from rlstruct.algos.evaluation import env_spaces

    assert env_spaces(f"{spaces_module}:long").max_episode_steps == 1500  # read from its TimeLimit wrapper
    config = ppo.Config(env=f"{spaces_module}:scalar", n_envs=2, n_steps=16, minibatch_size=16, n_epochs=1)
    assert ppo.check(config).obs_dim == 1
    agent, _ = ppo.make_agent(config, ppo.check(config))
    from rlstruct import DictTensor

    out, _ = agent(
        agent.initial_state(DictTensor(batch_size=3), 3),
        DictTensor({"observation": torch.zeros(3)}),
        DictTensor(batch_size=3),
    )
    assert out["action"].shape == (3,)


DEPRECATED_IDS = (
    "import sys, warnings, gymnasium as gym\n"
    "for name in ('Kept-v0', 'Kept-v1', 'Dropped-v2'):\n"
    "    gym.register(name, entry_point='gymnasium.envs.classic_control:CartPoleEnv')\n"
    "warnings.simplefilter('always')\n"
)


@pytest.mark.parametrize(
    ("env", "line"),
    [
        ("Dropped-v1", "rlstruct: --env: unknown environment 'Dropped-v1' (DeprecatedEnv: "),
        (
            "Kept-v0",
            "rlstruct: sac needs continuous (Box) actions; --env 'Kept-v0' has Discrete(2): try a2c, dqn, impala or ppo",
        ),
    ],
)
def test_gymnasium_s_warnings_on_making_an_id_come_only_if_it_can_be_made(
    env: str, line: str, tmp_path: Path
) -> None:
    argv = ["train", "sac", "--env", env, "--run-dir", str(tmp_path)]
    script = DEPRECATED_IDS + f"from rlstruct.cli import main\nsys.exit(main({argv!r}))\n"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    if env == "Dropped-v1":  # the mistake alone, not gymnasium's warning that the version is old before it
        assert done.stderr.startswith(line) and done.stderr.count("\n") == 1
    else:  # made: the warning stays, then the mistake
        assert "Kept-v0 is out of date" in done.stderr and done.stderr.endswith(line + "\n")


def test_a_registered_id_whose_package_is_missing_says_so() -> None:
    error = UnknownEnvironment(
        "LunarLander-v3", gymnasium.error.DependencyNotInstalled("Box2D is not installed")
    )
    assert (
        str(error)
        == "environment 'LunarLander-v3' needs a package that is not installed: Box2D is not installed"
    )


def test_the_vector_backend_refuses_a_factory_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        main(["train", "ppo", "--env", "rlstruct.envs:make_cartpole_novel", "--env-backend", "vector"]) == 2
    )
    assert capsys.readouterr().err == (
        "rlstruct: --env-backend 'vector': --env 'rlstruct.envs:make_cartpole_novel' names a factory, and "
        "gymnasium.make_vec needs a registered id: use --env-backend 'gymnasium'\n"
    )


def test_eval_json_keeps_what_an_environment_prints_out_of_stdout(capfd: pytest.CaptureFixture[str]) -> None:
    from rlstruct.cli import _stdout_to_stderr

    with _stdout_to_stderr():
        os.write(1, b"argv[0]=\n")  # as pybullet's C code does
    print("{}")
    out, err = capfd.readouterr()
    assert out == "{}\n" and err == "argv[0]=\n"
