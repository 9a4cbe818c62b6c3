"""``--resume RUN_DIR``: a run interrupted after a checkpoint and resumed ends bit-identical to an uninterrupted one."""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from rlstruct import load_checkpoint
from rlstruct.algos import a2c, dqn, impala, ppo, sac
from rlstruct.algos.config import parse_config
from rlstruct.algos.run import LOCK_NAME, CannotResume, Run
from rlstruct.cli import main as cli
from rlstruct.errors import ConfigError


def parse(argv: list[str]) -> ppo.Config:
    return parse_config(ppo.Config, argv, prog="rlstruct train ppo")


class Interrupted(Exception):
    """What the test raises to stop a run right after its first checkpoint."""


def crash_after_first_checkpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    original = Run.checkpoint

    def checkpoint_then_crash(self: Run, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        raise Interrupted  # the run closes its new batcher on the way out

    monkeypatch.setattr(Run, "checkpoint", checkpoint_then_crash)


def interrupt_a_run(root: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The directory of a ppo run of 1024 steps started from the command line and stopped after its checkpoint at 512."""
    args = [
        "--env",
        "CartPole-v1",
        "--total-steps",
        "1024",
        "--checkpoint-every",
        "512",
        "--eval-episodes",
        "1",
    ]
    with monkeypatch.context() as patch:
        crash_after_first_checkpoint(patch)
        with pytest.raises(Interrupted):
            cli(["train", "ppo", *args, "--run-dir", str(root), "--no-progress"])
    return only_run(root)


@pytest.fixture(scope="module")
def interrupted_once(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The module's one interrupted run (``interrupt_a_run``), which its tests only copy."""
    with pytest.MonkeyPatch.context() as patch:
        return interrupt_a_run(tmp_path_factory.mktemp("interrupted"), patch)


@pytest.fixture
def interrupted_run(interrupted_once: Path, tmp_path: Path) -> Path:
    """A copy of the interrupted run, all files as the run left them, in this test's own directory."""
    run_dir = tmp_path / interrupted_once.name
    shutil.copytree(interrupted_once, run_dir)
    return run_dir


def only_run(root: Path) -> Path:
    (run_dir,) = root.iterdir()
    return run_dir


def assert_same_state(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert a["env_steps"] == b["env_steps"]
    assert a["model"].keys() == b["model"].keys()
    for key in a["model"]:
        assert torch.equal(a["model"][key], b["model"][key]), key
    optimizers = [key for key in a if key.endswith("optimizer")]
    assert optimizers
    for optimizer in optimizers:
        assert a[optimizer]["state"].keys() == b[optimizer]["state"].keys()
        for k, state in a[optimizer]["state"].items():
            for name, value in state.items():
                assert torch.equal(torch.as_tensor(value), torch.as_tensor(b[optimizer]["state"][k][name]))


# Every checkpoint restarts the collection (worker processes spawned anew, seconds each), so most
# cases run 4 iterations: the checkpoint at 2 is crossed, the resumed run goes on past it (a checkpoint
# wrongly due after the resume would restart its collection again) and ends where the whole run ends.
# The ppo case runs 6, so that a resumed run also takes a checkpoint of its own, at 4.
@pytest.mark.parametrize(
    ("algo", "options", "iterations"),
    [
        (ppo, {"n_envs": 4, "n_steps": 16, "minibatch_size": 32, "n_epochs": 2, "scale_rewards": True}, 6),
        (a2c, {"n_envs": 4, "n_steps": 8, "recurrent": True}, 4),
        (dqn, {"n_envs": 4, "n_steps": 16, "learning_starts": 64, "batch_size": 32, "prioritized": True}, 4),
        (
            dqn,
            {"n_envs": 4, "n_steps": 16, "learning_starts": 64, "batch_size": 32, "prioritized": True}
            | {"recurrent": True, "burn_in": 4, "td_steps": 3, "hidden": 16},
            4,
        ),
        (
            dqn,
            {"env": "BitFlip-v0", "n_envs": 2, "n_steps": 15, "learning_starts": 30, "batch_size": 32}
            | {"her": True, "hidden": 16},
            4,
        ),
        (sac, {"env": "Pendulum-v1", "n_envs": 2, "n_steps": 16, "learning_starts": 32, "batch_size": 32}, 4),
        (
            sac,
            {"env": "PendulumNoVel-v1", "n_envs": 2, "n_steps": 16, "learning_starts": 32, "batch_size": 64}
            | {"recurrent": True, "burn_in": 4, "hidden": 16, "gradient_steps": 0.25},
            4,
        ),
    ],
)
def test_a_resumed_run_ends_bit_identical_to_an_uninterrupted_one(
    algo: Any, options: dict[str, Any], iterations: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    per_iteration = options["n_envs"] * options["n_steps"]
    options = {"env": "CartPole-v1", **options}
    config = algo.Config(
        total_steps=iterations * per_iteration,
        checkpoint_every=2 * per_iteration,
        eval_every=10**9,
        eval_episodes=1,
        progress=False,
        seed=3,
        **options,
    )
    algo.train(dataclasses.replace(config, run_dir=str(tmp_path / "whole")))
    whole = load_checkpoint(only_run(tmp_path / "whole") / "checkpoint.pt")

    with monkeypatch.context() as patch:
        crash_after_first_checkpoint(patch)
        with pytest.raises(Interrupted):
            algo.train(dataclasses.replace(config, run_dir=str(tmp_path / "cut")))
    run_dir = only_run(tmp_path / "cut")
    assert load_checkpoint(run_dir / "checkpoint.pt")["env_steps"] == 2 * per_iteration
    algo.train(dataclasses.replace(config, run_dir=str(tmp_path / "cut"), resume=str(run_dir)))
    resumed = load_checkpoint(run_dir / "checkpoint.pt")

    assert resumed["env_steps"] == iterations * per_iteration
    assert_same_state(resumed, whole)
    # the same run without checkpoints restarts no collection: it ends elsewhere (the test is not vacuous)
    algo.train(dataclasses.replace(config, run_dir=str(tmp_path / "plain"), checkpoint_every=0))
    plain = load_checkpoint(only_run(tmp_path / "plain") / "checkpoint.pt")
    assert not all(torch.equal(plain["model"][k], whole["model"][k]) for k in whole["model"])
    # the resumed run's progress.csv has each training step once, then the final evaluation's row
    rows = (run_dir / "progress.csv").read_text().splitlines()[1:]
    steps = [int(row.split(",")[0]) for row in rows]
    assert steps[:-1] == list(range(per_iteration, iterations * per_iteration + 1, per_iteration))


def test_resume_takes_the_settings_of_the_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.json").write_text('{"env": "CartPole-v1", "total_steps": 1000, "lr": 0.5}\n')
    config = parse(["--resume", str(run_dir), "--no-progress"])
    assert (config.env, config.total_steps, config.lr, config.progress) == ("CartPole-v1", 1000, 0.5, False)
    assert config.resume == str(run_dir)

    with pytest.raises(SystemExit) as caught:
        parse(["--resume", str(run_dir), "--lr", "0.1", "--seed", "2"])
    assert caught.value.code == 2
    err = capsys.readouterr().err
    assert "--resume continues a run with the settings of its config.json; drop --lr --seed" in err

    with pytest.raises(SystemExit):
        parse(["--resume", str(tmp_path / "missing")])
    err = capsys.readouterr().err
    assert re.search(r"--resume: '.*missing' does not exist; expected a run directory", err)

    (tmp_path / "a_file").write_text("not a run")
    with pytest.raises(SystemExit):
        parse(["--resume", str(tmp_path / "a_file")])
    err = capsys.readouterr().err
    assert re.search(r"--resume: '.*a_file' is a file; expected a run directory", err)

    (run_dir / "config.json").write_text('{"env": "CartPole-v1", "epsilon_start": 1.0}\n')
    with pytest.raises(SystemExit):
        parse(["--resume", str(run_dir)])
    assert (
        "is not a config of rlstruct train ppo: unknown fields ['epsilon_start']" in capsys.readouterr().err
    )

    with pytest.raises(SystemExit):
        parse([])
    assert "the following arguments are required: --env" in capsys.readouterr().err


@pytest.mark.parametrize("algo", ["ppo", "a2c", "dqn"])  # IMPALA resumes no run (its own line)
@pytest.mark.parametrize(
    ("field", "value", "said"),
    [
        ("hidden", "x", "config.hidden must be an int, got a str"),
        ("hidden", -3, "config: hidden must be in (0, inf), got -3"),
    ],
)
def test_a_setting_of_config_json_that_check_refuses_is_named_in_it(
    algo: str, field: str, value: object, said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Not as a flag (``--hidden``) that the command line did not give."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.json").write_text(json.dumps({"env": "CartPole-v1", field: value}))  # edited by hand
    assert cli(["train", algo, "--resume", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"rlstruct train {algo}: --resume: {str(run_dir / 'config.json')!r}: {said} "
        f"(rlstruct train {algo} --help lists the flags)\n"
    )
    if algo != "ppo":
        return
    (run_dir / "config.json").write_text(json.dumps({"env": "CartPole-v1"}))
    assert cli(["train", "ppo", "--resume", str(run_dir), "--json", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (  # the flag given beside --resume, as itself
        f"rlstruct: --json must be a file in an existing folder, got the folder {str(tmp_path)!r}\n"
    )


def test_resuming_a_directory_without_a_checkpoint_names_it(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    config = ppo.Config(env="CartPole-v1", total_steps=256, progress=False, resume=str(run_dir))

    def stopped_early(**settings: Any) -> ppo.Config:
        """The config of a run that stopped before a checkpoint: its config.json is all it wrote."""
        ran = dataclasses.replace(config, resume=None, **settings)
        (run_dir / "config.json").write_text(json.dumps(dataclasses.asdict(ran)))
        return dataclasses.replace(ran, resume=str(run_dir))

    with pytest.raises(
        CannotResume,
        match=re.escape(
            f"ppo: config.resume {str(run_dir)!r} holds no checkpoint.pt yet: the run stopped before its "
            "end and had no config.checkpoint_every; train it again"
        ),
    ):
        ppo.train(stopped_early())
    with pytest.raises(
        CannotResume,
        match=re.escape(
            "the run stopped before its first checkpoint, due at 512 env steps (config.checkpoint_every)"
        ),
    ):
        ppo.train(stopped_early(checkpoint_every=512))
    assert [path.name for path in run_dir.iterdir()] == ["config.json"]  # nothing written


def test_check_refuses_a_resume_of_another_run_or_of_other_settings(tmp_path: Path) -> None:
    """From Python as on the command line: a run continues with the settings it started with, or not at all."""
    config = ppo.Config(env="CartPole-v1", total_steps=256, progress=False, run_dir=str(tmp_path))
    missing = tmp_path / "no" / "such" / "run"
    with pytest.raises(
        ConfigError,
        match=re.escape(f"config.resume {str(missing)!r} does not exist; expected a run directory"),
    ):
        ppo.check(dataclasses.replace(config, resume=str(missing)))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match=re.escape("config.json' does not exist; expected a run directory")):
        ppo.check(dataclasses.replace(config, resume=str(tmp_path / "empty")))
    ran = tmp_path / "ran"
    ran.mkdir()
    (ran / "config.json").write_text(json.dumps(dataclasses.asdict(config)))
    ppo.check(dataclasses.replace(config, resume=str(ran), progress=True, json=str(tmp_path / "r.json")))
    with pytest.raises(
        ConfigError,
        match=re.escape("and these differ: total_steps (512; the run's 256), lr (0.1; the run's 0.001)"),
    ):
        ppo.check(dataclasses.replace(config, resume=str(ran), total_steps=512, lr=0.1))


def test_a_resume_of_nothing_or_of_an_unreadable_config_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = ppo.Config(env="CartPole-v1", total_steps=256, progress=False, run_dir=str(tmp_path))
    with pytest.raises(ConfigError, match=re.escape("config.resume must name a run directory, got ''")):
        ppo.check(dataclasses.replace(config, resume=""))  # was the current folder's config.json
    assert cli(["train", "ppo", "--resume", ""]) == 2
    assert capsys.readouterr().err.startswith(
        "rlstruct train ppo: --resume must name a run directory, got ''"
    )
    binary = tmp_path / "binary"
    binary.mkdir()
    (binary / "config.json").write_bytes(b"\xff\xfe{}")
    path = str(binary / "config.json")
    with pytest.raises(
        ConfigError, match=re.escape(f"config.resume: {path!r} cannot be read ('utf-8' codec")
    ):
        ppo.check(dataclasses.replace(config, resume=str(binary)))
    assert cli(["train", "ppo", "--resume", str(binary)]) == 2  # was a UnicodeDecodeError's traceback
    err = capsys.readouterr().err
    assert (
        err.startswith(f"rlstruct train ppo: --resume: {path!r} is not valid JSON ('utf-8' codec")
        and err.count("\n") == 1
    )
    folder = tmp_path / "folder"
    (folder / "config.json").mkdir(parents=True)
    assert cli(["train", "ppo", "--resume", str(folder)]) == 2  # was an IsADirectoryError's traceback
    assert capsys.readouterr().err.startswith(
        f"rlstruct train ppo: --resume: {str(folder / 'config.json')!r} cannot be read (Is a directory)"
    )


def test_the_command_line_resumes_a_run(interrupted_run: Path) -> None:
    run_dir = interrupted_run
    assert cli(["train", "ppo", "--resume", str(run_dir), "--no-progress"]) == 0
    assert load_checkpoint(run_dir / "checkpoint.pt")["env_steps"] == 1024


def test_a_finished_run_and_impala_refuse_to_resume(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = ppo.Config(
        env="CartPole-v1", total_steps=256, eval_episodes=1, progress=False, run_dir=str(tmp_path)
    )
    ppo.train(config)
    run_dir = only_run(tmp_path)
    with pytest.raises(
        ValueError, match=re.escape("the run finished at 256 env steps; there is nothing to continue")
    ):
        ppo.train(dataclasses.replace(config, resume=str(run_dir)))
    # the command line says so in one line, with the usage error's status
    capsys.readouterr()
    assert cli(["train", "ppo", "--resume", str(run_dir), "--no-progress"]) == 2
    assert capsys.readouterr().err == (
        f"rlstruct: ppo: --resume {str(run_dir)!r}: the run finished at 256 env steps; "
        "there is nothing to continue\n"
    )
    with pytest.raises(ValueError, match=re.escape("config.checkpoint_every must be an int >= 0")):
        ppo.train(dataclasses.replace(config, checkpoint_every=-1))
    with pytest.raises(ValueError, match=re.escape("impala: config.checkpoint_every is not supported")):
        impala.train(impala.Config(env="CartPole-v1", checkpoint_every=1000, progress=False))
    with pytest.raises(ValueError, match=re.escape("impala: config.resume is not supported")):
        impala.train(impala.Config(env="CartPole-v1", resume=str(run_dir), progress=False))


def test_a_checkpoint_that_cannot_be_read_or_does_not_fit_is_one_line(
    interrupted_run: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = interrupted_run
    checkpoint = run_dir / "checkpoint.pt"
    stored = checkpoint.read_bytes()
    capsys.readouterr()

    config = json.loads((run_dir / "config.json").read_text())
    last = (run_dir / "progress.csv").read_text().splitlines()[-1]
    with (run_dir / "progress.csv").open("a") as file:  # as if it had run on past its checkpoint at 512
        file.write("1000," + last.split(",", 1)[1] + "\n")
    progress = (run_dir / "progress.csv").read_bytes()
    (run_dir / "config.json").write_text(json.dumps({**config, "hidden": 32}))  # edited: another network
    assert cli(["train", "ppo", "--resume", str(run_dir), "--no-progress"]) == 2
    assert (run_dir / "progress.csv").read_bytes() == progress  # refused before anything was written
    out = capsys.readouterr()
    assert out.err.count("\n") == 1 and "Traceback" not in out.err
    assert out.err.startswith(
        f"rlstruct: ppo: --resume {str(run_dir)!r}: its checkpoint.pt does not fit the model that "
        f"{str(run_dir / 'config.json')!r} describes (RuntimeError: "
    )
    assert checkpoint.read_bytes() == stored
    (run_dir / "config.json").write_text(json.dumps(config))

    for content in (b"", stored[: len(stored) // 2], b"not a checkpoint"):
        checkpoint.write_bytes(content)
        assert cli(["train", "ppo", "--resume", str(run_dir), "--no-progress"]) == 2
        out = capsys.readouterr()
        assert out.err.count("\n") == 1 and "Traceback" not in out.err
        assert out.err.startswith(
            f"rlstruct: ppo: --resume {str(run_dir)!r}: load_checkpoint: {str(checkpoint)!r} cannot be read "
            "as a checkpoint ("
        )


def eval_rows(run_dir: Path) -> list[tuple[int, str]]:
    """The (env_steps, eval_return_mean) of every evaluation row of a run's progress.csv."""
    with (run_dir / "progress.csv").open() as file:
        rows = list(csv.DictReader(file))
    return [(int(row["env_steps"]), row["eval_return_mean"]) for row in rows if row["eval_return_mean"]]


def test_an_evaluation_running_at_a_checkpoint_is_in_the_resumed_run_and_the_last_is_logged_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = ppo.Config(
        env="CartPole-v1",
        n_envs=4,
        n_steps=16,
        minibatch_size=32,
        n_epochs=1,
        total_steps=4 * 64,
        checkpoint_every=2 * 64,
        eval_every=2 * 64,  # total_steps is a multiple too
        eval_episodes=1,
        progress=False,
    )
    ppo.train(dataclasses.replace(config, run_dir=str(tmp_path / "whole")))
    whole = eval_rows(only_run(tmp_path / "whole"))
    with monkeypatch.context() as patch:
        crash_after_first_checkpoint(patch)
        with pytest.raises(Interrupted):
            ppo.train(dataclasses.replace(config, run_dir=str(tmp_path / "cut")))
    run_dir = only_run(tmp_path / "cut")
    ppo.train(dataclasses.replace(config, run_dir=str(tmp_path / "cut"), resume=str(run_dir)))
    assert [steps for steps, _ in whole] == [128, 256]  # the one at 256 is the final, logged once
    assert eval_rows(run_dir) == whole


def test_a_resumed_run_counts_its_training_time_from_its_checkpoints(
    interrupted_run: Path, tmp_path: Path
) -> None:
    """wall_s went back to about 0 at the resume while env_steps went on, and sps was their ratio (81,264 steps/s)."""
    run_dir = interrupted_run
    saved = load_checkpoint(run_dir / "checkpoint.pt")
    with (run_dir / "progress.csv").open() as file:
        before = [row for row in csv.DictReader(file) if row["wall_s"]]
    assert float(saved["wall_s"]) > 0.0 and float(before[-1]["wall_s"]) <= float(saved["wall_s"])
    assert (
        cli(["train", "ppo", "--resume", str(run_dir), "--no-progress", "--json", str(tmp_path / "r.json")])
        == 0
    )
    with (run_dir / "progress.csv").open() as file:
        rows = [row for row in csv.DictReader(file) if row["wall_s"]]
    resumed = [row for row in rows if int(row["env_steps"]) > int(saved["env_steps"])]
    walls = [float(row["wall_s"]) for row in resumed]
    assert walls[0] > float(saved["wall_s"]) and walls == sorted(walls)
    # this process trained the steps past the checkpoint in walls[0] - saved wall_s seconds at most
    first = resumed[0]
    since = float(first["wall_s"]) - float(saved["wall_s"])
    steps = int(first["env_steps"]) - int(saved["env_steps"])
    assert float(first["sps"]) == pytest.approx(steps / since, rel=1e-6)
    results = json.loads((tmp_path / "r.json").read_text())
    assert results["wall_s"] >= walls[-1] - 1e-3  # the run's training time, both processes'


def test_a_run_directory_another_process_trains_is_refused_and_a_stale_lock_is_taken_over(
    interrupted_run: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two resumes of one run at once both trained, and progress.csv got every row twice."""
    run_dir = interrupted_run
    assert not (run_dir / LOCK_NAME).exists()  # the interrupted run freed its directory
    progress = (run_dir / "progress.csv").read_bytes()
    other = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        (run_dir / LOCK_NAME).write_text(f"{other.pid}\n")  # as a run still training in another process
        assert cli(["train", "ppo", "--resume", str(run_dir), "--no-progress"]) == 2
        assert capsys.readouterr().err == (
            f"rlstruct: ppo: {str(run_dir)!r} is being trained by process {other.pid} (its {LOCK_NAME}); wait "
            f"for that run to end or stop it (delete {LOCK_NAME} if no such run is going on)\n"
        )
        assert (run_dir / "progress.csv").read_bytes() == progress  # refused before anything was written
    finally:
        other.communicate(input=b"", timeout=30)  # it ends: its lock is stale now
    seen: list[bool] = []
    begin = Run.begin

    def begin_seeing_the_lock(self: Run) -> None:
        seen.append((self.dir / LOCK_NAME).read_text() == f"{os.getpid()}\n")
        begin(self)

    monkeypatch.setattr(Run, "begin", begin_seeing_the_lock)
    assert cli(["train", "ppo", "--resume", str(run_dir), "--no-progress"]) == 0
    assert seen == [True]  # taken over while it trained
    assert not (run_dir / LOCK_NAME).exists()  # and freed at the end
