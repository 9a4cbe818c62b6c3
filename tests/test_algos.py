"""What the algorithms share: configs and parse_config, the command line, Run, episode returns, evaluation.

The per-algorithm tests live in test_ppo, test_a2c, test_impala, test_dqn and
test_sac, the actor-critic's in test_actor_critic; the tests here hold for
every algorithm (configs and their docstrings, tuned settings, the CLI's
messages, a run's logger and batcher closing on failure, the evaluator
replaying the same episodes).
"""

from __future__ import annotations

import csv
import dataclasses
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from algo_helpers import message

from rlstruct import DictTensor, TemporalDictTensor
from rlstruct.algos import ALGORITHMS, a2c, dqn, impala, ppo, sac
from rlstruct.algos import run as run_module
from rlstruct.algos.config import TrainConfig, check_config, field_docs, parse_config
from rlstruct.algos.evaluation import env_spaces
from rlstruct.algos.run import Run, RunInterrupted
from rlstruct.batchers import MultiprocessBatcher
from rlstruct.batchers.process import State
from rlstruct.checkpoint import load_checkpoint
from rlstruct.cli import main as cli_main
from rlstruct.learning.actor_critic import ActorCritic
from rlstruct.learning.metrics import EpisodeReturns
from rlstruct.logger import Logger

# ---------------------------------------------------------------------------- configs


def test_every_config_field_has_a_docstring() -> None:
    for name in ALGORITHMS:
        module = __import__(f"rlstruct.algos.{name}", fromlist=["Config"])
        docs = field_docs(module.Config)
        missing = [f.name for f in dataclasses.fields(module.Config) if not docs.get(f.name)]
        assert missing == [], f"{name}: fields without a docstring: {missing}"


def test_parse_config_reads_flags_of_every_type() -> None:
    config = parse_config(
        ppo.Config,
        ["--env", "Pendulum-v1", "--total-steps", "300", "--lr", "0.5", "--no-anneal", "--json", "out.json"],
    )
    assert (config.env, config.total_steps, config.lr, config.anneal, config.json) == (
        "Pendulum-v1",
        300,
        0.5,
        False,
        "out.json",
    )
    assert config.n_epochs == ppo.Config.n_epochs  # untouched fields keep their default


def test_parse_config_needs_env_and_rejects_bad_values(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_config(TrainConfig, [])
    assert "--env" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_config(TrainConfig, ["--env", "CartPole-v1", "--seed", "one"])
    assert "invalid int value: 'one'" in capsys.readouterr().err


def test_help_shows_the_field_docstrings(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_config(ppo.Config, ["--help"], prog="rlstruct train ppo")
    out = " ".join(capsys.readouterr().out.split())
    assert "The clip range of the probability ratio. (default: 0.2)" in out


@pytest.mark.parametrize(
    ("changes", "text"),
    [
        ({"env": ""}, "config.env must name an environment, got ''"),
        ({"total_steps": 0}, "config: total_steps must be in (0, inf), got 0"),
        ({"n_processes": -1}, "config: n_processes must be in (0, inf), got -1"),
    ],
)
def test_check_config_names_the_field(changes: dict[str, object], text: str) -> None:
    config = dataclasses.replace(TrainConfig(env="CartPole-v1"), **changes)
    with pytest.raises(ValueError, match=message(text)):
        check_config(config)


def test_cli_rejects_an_unknown_algorithm(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["train", "nope", "--env", "CartPole-v1"]) == 2
    assert "unknown algorithm 'nope'; choose one of" in capsys.readouterr().err
    assert cli_main(["--help"]) == 0


@pytest.mark.parametrize("argv", [["--help"], ["-h"], ["train", "--help"], ["train", "-h"]])
def test_cli_help_at_every_level_prints_the_usage(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli_main(argv) == 0
    out = capsys.readouterr()
    assert out.out.startswith("rlstruct: train reinforcement-learning agents") and out.err == ""
    assert "\nusage: rlstruct train {a2c,dqn,impala,ppo,sac}" in out.out


def test_cli_names_the_likely_fix_for_an_unknown_environment_in_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli_main(["train", "ppo", "--env", "CartPol-v1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rlstruct: --env: unknown environment 'CartPol-v1' (")
    assert err.endswith("; did you mean 'CartPole-v1'?\n") and err.count("\n") == 1
    # a Bullet id typed without its module, in a fresh process (where nothing imported the module yet)
    env = "InvertedPendulumBulletEnv-v0"
    done = subprocess.run(
        [sys.executable, "-m", "rlstruct.cli", "train", "sac", "--env", env],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and done.stdout == ""
    fix = (
        "Bullet environments need the module prefix and the bullet extra: "
        f"--env pybullet_envs_gymnasium:{env} (pip install -e '.[bullet]')"
    )
    assert done.stderr.startswith(f"rlstruct: --env: unknown environment {env!r} (")
    assert done.stderr.endswith(f"; {fix}\n") and done.stderr.count("\n") == 1


def test_cli_trains_on_an_environment_made_by_a_module_level_factory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["train", "ppo", "--env", "rlstruct.envs:make_cartpole_novel", "--total-steps", "512"]
    argv += ["--n-envs", "4", "--n-steps", "32", "--n-epochs", "1", "--minibatch-size", "64"]
    argv += ["--eval-every", "256", "--eval-episodes", "2", "--run-dir", str(tmp_path), "--no-progress"]
    assert cli_main(argv) == 0
    (run_dir,) = tmp_path.iterdir()
    assert run_dir.name.startswith("ppo-make_cartpole_novel-s0-")
    assert "final greedy return" in capsys.readouterr().out
    assert env_spaces("rlstruct.envs:make_cartpole_novel").obs_dim == 2  # no velocities: the factory's env
    assert cli_main(["train", "ppo", "--env", "rlstruct.envs:make_nothing"]) == 2
    assert "unknown environment 'rlstruct.envs:make_nothing'" in capsys.readouterr().err


ACTOR_CRITIC: tuple[Any, dict[str, Any]] = (
    ActorCritic,
    {"obs_dim": 4, "n_actions": 2, "action_low": None, "action_high": None},
)


def test_a_mean_training_return_of_zero_is_shown_and_logged(tmp_path: Path) -> None:
    run = Run("ppo", ppo.Config(env="CartPole-v1", run_dir=str(tmp_path), progress=False), *ACTOR_CRITIC)
    with run:
        episodes = EpisodeReturns(2)
        episodes.finished = [0.0, 0.0]
        run.episode_return = 3.0
        run.add_returns(episodes)
        assert run.episode_return == 0.0 and episodes.finished == []
        run.add_returns(episodes)  # nothing new: the last mean stays
        assert run.episode_return == 0.0
        run.step(16, ActorCritic(**ACTOR_CRITIC[1]), loss=1.0)
    with (run.dir / "progress.csv").open() as f:
        (row,) = list(csv.DictReader(f))
    assert row["train_return_mean"] == "0.0"


def test_a_run_that_cannot_start_its_evaluator_closes_its_logger(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    closed = []

    class Recording(run_module.Logger):
        def close(self) -> None:
            closed.append(self)
            super().close()

    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("no evaluator today")

    monkeypatch.setattr(run_module, "Logger", Recording)
    monkeypatch.setattr(run_module, "Evaluator", broken)
    with pytest.raises(RuntimeError, match="no evaluator today"):
        Run("ppo", ppo.Config(env="CartPole-v1", run_dir=str(tmp_path), progress=False), *ACTOR_CRITIC)
    assert len(closed) == 1


@pytest.mark.parametrize("algo", [a2c, dqn, impala, ppo, sac])
def test_a_batcher_that_cannot_start_still_closes_the_run(
    algo: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # every algorithm makes its batcher with Run.collector
    closed = []
    close = run_module.Run.close

    def recording(self: Run) -> None:
        closed.append(self)
        close(self)

    def broken(*args: Any, **kwargs: Any) -> None:
        raise OSError("no processes today")

    monkeypatch.setattr(run_module, "MultiprocessBatcher", broken)
    monkeypatch.setattr(run_module.Run, "close", recording)
    env = "Pendulum-v1" if algo is sac else "CartPole-v1"
    with pytest.raises(OSError, match="no processes today"):
        algo.train(algo.Config(env=env, progress=False, run_dir=str(tmp_path)))
    assert len(closed) == 1


def small_run(tmp_path: Path, **options: Any) -> Run:
    config = ppo.Config(env="CartPole-v1", run_dir=str(tmp_path), progress=False, eval_episodes=1, **options)
    return Run("ppo", config, *ACTOR_CRITIC)


def assert_closed(batcher: MultiprocessBatcher) -> None:
    assert batcher.state is State.CLOSED
    assert all(process.exitcode is not None for process in batcher._processes)  # its workers ended


def test_a_run_closes_the_batcher_its_collector_made(tmp_path: Path) -> None:
    run = small_run(tmp_path)
    with pytest.raises(RuntimeError, match=message("Run.batcher: call collector() first")):
        run.batcher  # noqa: B018
    with run:
        batcher = run.collector(torch.device("cpu"), 2, 4)
        assert run.batcher is batcher
        assert all(process.is_alive() for process in batcher._processes)
        run.start(ActorCritic(**ACTOR_CRITIC[1]), execute=True)
        assert batcher.state is State.RUNNING  # collecting, not yet collected
    assert_closed(batcher)
    run.close()  # twice is fine
    assert_closed(batcher)


def test_ctrl_c_in_a_run_comes_out_naming_the_run_and_its_last_checkpoint(tmp_path: Path) -> None:
    with pytest.raises(RunInterrupted) as caught, small_run(tmp_path) as run:
        batcher = run.collector(torch.device("cpu"), 2, 4)
        raise KeyboardInterrupt
    assert_closed(batcher)
    assert isinstance(caught.value, KeyboardInterrupt)  # what code that catches Ctrl-C catches
    assert caught.value.run_dir == run.dir and caught.value.checkpoint is None
    assert str(caught.value).endswith("no checkpoint to continue from (--checkpoint-every N saves them)")
    with pytest.raises(RunInterrupted) as caught, small_run(tmp_path / "1", checkpoint_every=8) as run:
        raise KeyboardInterrupt
    assert caught.value.checkpoint is None and caught.value.every == 8
    assert str(caught.value).endswith(
        "no checkpoint to continue from: the first was due at 8 env steps (--checkpoint-every)"
    )
    with pytest.raises(RunInterrupted) as caught, small_run(tmp_path / "2", checkpoint_every=8) as run:
        run.collector(torch.device("cpu"), 2, 4)
        run.checkpoint(8, ActorCritic(**ACTOR_CRITIC[1]))
        raise KeyboardInterrupt
    assert caught.value.checkpoint == 8
    assert str(caught.value) == (
        f"interrupted; run directory {run.dir}: its last checkpoint, at 8 env steps, continues with: "
        f"rlstruct train ppo --resume {run.dir}"
    )


def test_ctrl_c_after_the_final_checkpoint_says_the_run_finished(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C while the plot is drawn: the finished checkpoint cannot be continued, but evaluated and plotted."""

    def interrupted(*args: Any, **kwargs: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(Logger, "plot", interrupted)
    with pytest.raises(RunInterrupted) as caught, small_run(tmp_path, checkpoint_every=8) as run:
        run.collector(torch.device("cpu"), 2, 4)
        model = ActorCritic(**ACTOR_CRITIC[1])
        run.checkpoint(8, model)
        run.finish(model, 16)
    assert caught.value.checkpoint == 8 and caught.value.finished == 16
    assert str(caught.value) == (
        f"interrupted; run directory {run.dir}: the run had finished, at 16 env steps, and saved its final "
        f"checkpoint: rlstruct eval {run.dir} plays it, rlstruct plot {run.dir} draws its curves"
    )
    assert load_checkpoint(run.dir / "checkpoint.pt")["finished"]


def test_printed_commands_quote_a_run_directory_with_spaces(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(RunInterrupted) as caught, small_run(tmp_path / "my runs", checkpoint_every=8) as run:
        run.collector(torch.device("cpu"), 2, 4)
        model = ActorCritic(**ACTOR_CRITIC[1])
        run.checkpoint(8, model)
        raise KeyboardInterrupt
    assert shlex.split(str(caught.value).split(" continues with: ")[1]) == [
        *["rlstruct", "train", "ppo", "--resume"],
        str(run.dir),
    ]
    with small_run(tmp_path / "my runs") as run:
        run.finish(model, 16)
    out = capsys.readouterr().out
    assert f"tensorboard --logdir {shlex.quote(str(run.dir))}," in out and " " in str(run.dir)


def test_the_summary_is_printed_before_the_json_file_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(FileNotFoundError), small_run(tmp_path, json=str(tmp_path / "gone" / "r.json")) as run:
        run.finish(ActorCritic(**ACTOR_CRITIC[1]), 16)
    assert "ppo on CartPole-v1: final greedy return" in capsys.readouterr().out  # not lost with the file


def test_a_failing_loop_still_closes_the_batcher(tmp_path: Path) -> None:
    with pytest.raises(ZeroDivisionError), small_run(tmp_path) as run:
        batcher = run.collector(torch.device("cpu"), 2, 4)
        1 / 0  # noqa: B018
    assert_closed(batcher)


def test_checkpoint_replaces_the_batcher_with_a_new_started_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    resets: list[tuple[MultiprocessBatcher, Any]] = []
    reset = MultiprocessBatcher.reset

    def recording(self: MultiprocessBatcher, agent_info: Any = None, env_info: Any = None) -> None:
        resets.append((self, agent_info))
        reset(self, agent_info, env_info)

    monkeypatch.setattr(MultiprocessBatcher, "reset", recording)
    model = ActorCritic(**ACTOR_CRITIC[1])
    rows = DictTensor({"row": torch.arange(2)})
    with small_run(tmp_path, checkpoint_every=8, total_steps=64) as run:
        with pytest.raises(RuntimeError, match=message("Run.checkpoint: call collector() first")):
            run.checkpoint(8, model)
        old = run.collector(torch.device("cpu"), 2, 4)
        assert run.restore() == 0
        run.start(model, agent_info=rows)
        run.batcher.execute()
        assert run.batcher.get().trajectories.n_timesteps() == 4
        assert run.checkpoint_due(8)
        run.checkpoint(8, model, execute=True, counter=7)
        new = run.batcher
        assert new is not old and run.segment == 1
        assert_closed(old)
        assert new.state is State.RUNNING  # reset with the model's weights and collecting
        assert new.policy_version() == 1
        assert torch.equal(new.get().info["agent_info/row"], rows["row"])  # start's agent_info again
        assert [(b, info) for b, info in resets if b in (old, new)] == [(old, rows), (new, rows)]
        saved = load_checkpoint(run.dir / "checkpoint.pt")
        assert (saved["env_steps"], saved["segment"], saved["counter"]) == (8, 1, 7)
        assert not run.checkpoint_due(8)
    assert_closed(new)


# ---------------------------------------------------------------------------- runs


def test_env_spaces_reads_discrete_and_continuous_envs() -> None:
    cartpole = env_spaces("CartPole-v1")
    assert (cartpole.obs_dim, cartpole.n_actions, cartpole.max_episode_steps) == (4, 2, 500)
    pendulum = env_spaces("Pendulum-v1")
    assert (pendulum.obs_dim, pendulum.n_actions, pendulum.action_low, pendulum.action_high) == (
        3,
        None,
        [-2.0],
        [2.0],
    )
    assert pendulum.max_episode_steps == 200


def test_episode_returns_follow_episodes_across_batches_and_ignore_padding() -> None:
    returns = EpisodeReturns(2)
    reward = torch.tensor([[1.0, 2.0, 3.0], [1.0, 1.0, 5.0]])
    done = torch.tensor([[False, True, False], [False, False, True]])
    lengths = torch.tensor([3, 2])  # row 1's done at t=2 is padding
    returns.add(TemporalDictTensor({"next/reward": reward, "next/done": done}, lengths))
    assert returns.pop_mean() == 3.0  # only row 0's episode ended: 1 + 2
    assert returns.pop_mean() is None
    returns.add(
        TemporalDictTensor({"next/reward": torch.ones(2, 1), "next/done": torch.ones(2, 1, dtype=torch.bool)})
    )
    assert returns.finished == [4.0, 3.0]  # 3 + 1 carried over; 1 + 1 + 1


def test_every_evaluation_plays_the_same_episodes() -> None:
    from rlstruct.algos.evaluation import Evaluator

    args = {"obs_dim": 4, "n_actions": 2}
    weights = ActorCritic(**args).state_dict()  # type: ignore[arg-type]
    with Evaluator(ActorCritic, args, "CartPole-v1", n_episodes=3, max_steps=500, seed=5) as evaluator:
        first = evaluator.evaluate(weights, env_steps=0)
        second = evaluator.evaluate(weights, env_steps=10)
    assert second.returns == first.returns and second.env_steps == 10
    assert len(set(first.returns)) > 1  # three different episodes, each replayed


@pytest.mark.parametrize(
    ("changes", "error", "text"),
    [
        ({"n_episodes": 0}, ValueError, "Evaluator: n_episodes must be at least 1, got 0"),
        ({"n_episodes": 2.0}, TypeError, "Evaluator: n_episodes must be an int, got a float"),
        ({"max_steps": 0}, ValueError, "Evaluator: max_steps must be at least 1, got 0"),
        ({"seed": -1}, ValueError, "Evaluator: seed must be at least 0, got -1"),
        (
            {"seed": 2**63 - 1},
            ValueError,
            f"Evaluator: seed + n_episodes must be at most 2**63, got {2**63 - 1} + 3",
        ),
    ],
)
def test_the_evaluator_names_its_own_arguments(
    changes: dict[str, Any], error: type[Exception], text: str
) -> None:
    """Not the batcher's (n_envs, n_timesteps), nor gymnasium's error on a seed past int64."""
    from rlstruct.algos.evaluation import Evaluator

    args = {"n_episodes": 3, "max_steps": 500, "seed": 5, **changes}
    with pytest.raises(error, match=message(text)):
        Evaluator(ActorCritic, {"obs_dim": 4, "n_actions": 2}, "CartPole-v1", **args)


def test_the_evaluator_checks_env_steps_and_says_when_it_is_closed() -> None:
    from rlstruct.algos.evaluation import Evaluator

    args = {"obs_dim": 4, "n_actions": 2}
    weights = ActorCritic(**args).state_dict()  # type: ignore[arg-type]
    evaluator = Evaluator(ActorCritic, args, "CartPole-v1", n_episodes=1, max_steps=5, seed=0)
    with evaluator:
        with pytest.raises(TypeError, match=message("Evaluator: env_steps must be an int, got a str")):
            evaluator.evaluate(weights, env_steps="10")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match=message("Evaluator: env_steps must be at least 0, got -1")):
            evaluator.start(weights, env_steps=-1)
        assert not evaluator.busy
        assert evaluator.start(weights, env_steps=3)
    assert evaluator.wait() is None and not evaluator.busy  # closing ended the running evaluation
    with pytest.raises(RuntimeError, match="Evaluator: closed"):
        evaluator.evaluate(weights, env_steps=4)


# ---------------------------------------------------------------------------- tuned settings


def test_tuned_settings_fill_the_flags_not_given_and_say_so(capsys: pytest.CaptureFixture[str]) -> None:
    tuned = {"InvertedPendulumBulletEnv-v0": {"hidden": 64, "gradient_steps": 2.0, "total_steps": 30_000}}
    argv = ["--env", "pybullet_envs_gymnasium:InvertedPendulumBulletEnv-v0", "--total-steps", "500"]
    config = parse_config(sac.Config, argv, tuned=tuned)
    assert (config.hidden, config.gradient_steps, config.total_steps) == (64, 2.0, 500)  # the flag wins
    assert capsys.readouterr().out == (
        "tuned settings for InvertedPendulumBulletEnv-v0: --hidden 64 --gradient-steps 2.0 "
        "(flags given override them)\n"
    )
    config = parse_config(sac.Config, ["--env", "Pendulum-v1"], tuned=tuned)  # not tuned: the defaults
    assert (config.hidden, config.gradient_steps) == (sac.Config.hidden, sac.Config.gradient_steps)
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize("module", [ppo, sac], ids=["ppo", "sac"])
def test_every_tuned_setting_names_a_field_of_the_config(module: Any) -> None:
    for env in module.TUNED:
        config = parse_config(module.Config, ["--env", env, "--no-progress"], tuned=module.TUNED)
        for name, value in module.TUNED[env].items():
            assert getattr(config, name) == value


def test_tuned_settings_that_name_no_field_are_refused() -> None:
    with pytest.raises(
        ValueError, match=re.escape("the tuned settings of 'X-v0' name no field of Config: ['hiden']")
    ):
        parse_config(sac.Config, ["--env", "X-v0"], tuned={"X-v0": {"hiden": 64}})
