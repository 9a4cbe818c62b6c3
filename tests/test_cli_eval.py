"""``rlstruct eval``, ``rlstruct plot`` and ``rlstruct export``: saved runs rebuilt (``load_run``), evaluated, recorded, plotted and exported.

The runs are trained once per module with tiny budgets through the command
line; the tests then read their directories as a user would.
"""

from __future__ import annotations

import csv
import dataclasses
import importlib.util
import json
import math
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from rlstruct import DictTensor, GymEnv, LocalBatcher, save_checkpoint
from rlstruct import logger as logger_module
from rlstruct.algos import SavedRun, a2c, dqn, impala, load_run, ppo, sac
from rlstruct.algos.config import TrainConfig
from rlstruct.algos.evaluation import env_spaces, episode_returns, eval_seed
from rlstruct.algos.recording import CannotRender, check_renders
from rlstruct.cli import main as cli_main
from rlstruct.learning.actor_critic import ActorCritic

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
Capture = pytest.CaptureFixture[str]


def train(root: Path, algo: str, *options: str) -> tuple[Path, dict[str, Any]]:
    """Train through the command line; returns the run directory and the results it reported."""
    results = root / "results.json"
    argv = ["train", algo, *options, "--run-dir", str(root), "--json", str(results), "--no-progress"]
    assert cli_main(argv) == 0
    reported: dict[str, Any] = json.loads(results.read_text())
    return Path(reported["run_dir"]), reported


@pytest.fixture(scope="module")
def ppo_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    options = "--env CartPole-v1 --total-steps 512 --n-envs 4 --n-steps 32 --n-epochs 1 --minibatch-size 64"
    options += " --n-processes 1 --eval-every 256 --eval-episodes 3"
    return train(tmp_path_factory.mktemp("ppo"), "ppo", *options.split())


@pytest.fixture(scope="module")
def dqn_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    options = "--env CartPole-v1 --total-steps 256 --n-envs 2 --n-steps 32 --learning-starts 64"
    options += " --batch-size 32 --hidden 32 --buffer-size 1000 --eval-every 128 --eval-episodes 2"
    return train(tmp_path_factory.mktemp("dqn"), "dqn", *options.split())


@pytest.fixture(scope="module")
def sac_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    options = "--env Pendulum-v1 --total-steps 64 --n-steps 16 --learning-starts 32 --batch-size 16"
    options += " --hidden 32 --buffer-size 1000 --eval-every 64 --eval-episodes 2"
    return train(tmp_path_factory.mktemp("sac"), "sac", *options.split())


def eval_json(capsys: Capture, *argv: str) -> dict[str, Any]:
    assert cli_main(["eval", *argv, "--json"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1  # one JSON object, nothing else
    report: dict[str, Any] = json.loads(out)
    return report


def with_env(run_dir: Path, env: str, root: Path) -> Path:
    """A copy of a run directory whose config.json names another environment (of the same spaces)."""
    copy = Path(shutil.copytree(run_dir, root / f"{run_dir.name}-{env.split(':')[-1]}"))
    config = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps({**config, "env": env}))
    return copy


def one_line_error(capsys: Capture) -> str:
    out = capsys.readouterr()
    assert out.out == "" and out.err.count("\n") == 1, out
    return out.err


# ---------------------------------------------------------------------------- eval


def test_eval_replays_the_final_evaluation_the_run_reported(
    ppo_run: tuple[Path, dict[str, Any]], capsys: Capture
) -> None:
    run_dir, reported = ppo_run
    report = eval_json(capsys, str(run_dir))
    # the same Evaluator, weights and seeds as Run.finish: the same figures, exactly
    assert (report["eval_return_mean"], report["eval_return_std"]) == (
        reported["eval_return_mean"],
        reported["eval_return_std"],
    )
    assert len(report["returns"]) == report["episodes"] == 3  # the run's eval_episodes
    assert math.isclose(sum(report["returns"]) / 3, report["eval_return_mean"])
    assert {k: report[k] for k in ("algo", "env", "env_steps", "seed", "gif")} == {
        "algo": "ppo",
        "env": "CartPole-v1",
        "env_steps": 512,
        "seed": 0,
        "gif": None,
    }
    # fewer episodes: the first ones of the same evaluation (environment i is reset with the same seed)
    assert cli_main(["eval", str(run_dir), "--episodes", "2", "--seed", "0"]) == 0
    out = capsys.readouterr().out
    first = report["returns"][:2]
    mean, std = sum(first) / 2, abs(first[0] - first[1]) / 2
    assert (
        f"ppo on CartPole-v1 after 512 env steps: greedy return {mean:.1f} +- {std:.1f} over 2 episodes"
        in out
    )


@pytest.mark.parametrize(("algo", "fixture"), [("dqn", "dqn_run"), ("sac", "sac_run")])
def test_eval_loads_and_evaluates_dqn_and_sac_runs(
    algo: str, fixture: str, request: pytest.FixtureRequest, capsys: Capture
) -> None:
    run_dir, reported = request.getfixturevalue(fixture)
    capsys.readouterr()
    report = eval_json(capsys, str(run_dir))
    assert report["algo"] == algo and len(report["returns"]) == 2
    assert all(math.isfinite(r) for r in report["returns"])
    assert report["eval_return_mean"] == reported["eval_return_mean"]


def test_eval_gif_records_the_first_episode_of_the_evaluation(
    ppo_run: tuple[Path, dict[str, Any]], tmp_path: Path, capsys: Capture
) -> None:
    from PIL import Image

    # CartPole itself draws with pygame, which these tests do not require: the same CartPole drawn with numpy
    run_dir = with_env(ppo_run[0], "render_helpers:make_drawn_cartpole", tmp_path)
    gif = tmp_path / "episode.gif"
    report = eval_json(capsys, str(run_dir), "--gif", str(gif))
    assert report["eval_return_mean"] == ppo_run[1]["eval_return_mean"]  # CartPole, whoever draws it
    # CartPole pays 1 per step: a frame after the reset, then one per step
    assert report["gif"] == {
        "path": str(gif),
        "frames": report["returns"][0] + 1,
        "return": report["returns"][0],
    }
    with Image.open(gif) as image:
        assert image.format == "GIF" and image.size == (60, 40)
        assert image.n_frames > 1  # identical consecutive frames are merged: fewer than recorded


def test_eval_gif_that_names_no_file_to_write_is_one_line_before_any_episode(
    ppo_run: tuple[Path, dict[str, Any]], tmp_path: Path, capsys: Capture, monkeypatch: pytest.MonkeyPatch
) -> None:
    def played(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("an episode was played before --gif was checked")

    monkeypatch.setattr(SavedRun, "record_episode", played)
    monkeypatch.setattr(SavedRun, "evaluate", played)
    folder = tmp_path / "no" / "such"
    for gif, line in (
        (str(folder / "x.gif"), f"--gif's folder {str(folder)!r} does not exist"),
        ("", "--gif must name the file to write, got ''"),
        (str(tmp_path), f"--gif must name the file to write, got the folder {str(tmp_path)!r}"),
    ):
        assert cli_main(["eval", str(ppo_run[0]), "--gif", gif]) == 2
        assert one_line_error(capsys) == f"rlstruct eval: {line}\n"


def test_eval_gif_of_an_environment_that_cannot_render_is_one_line_and_status_2(
    ppo_run: tuple[Path, dict[str, Any]], tmp_path: Path, capsys: Capture
) -> None:
    gif = tmp_path / "episode.gif"
    blind = with_env(ppo_run[0], "render_helpers:make_blind_cartpole", tmp_path)
    assert cli_main(["eval", str(blind), "--gif", str(gif)]) == 2
    assert one_line_error(capsys) == (
        "rlstruct eval: --gif: environment 'render_helpers:make_blind_cartpole' cannot render rgb_array "
        "frames: it was made with render_mode=None\n"
    )
    if importlib.util.find_spec("pygame") is None:  # CartPole-v1 itself, here without pygame
        assert cli_main(["eval", str(ppo_run[0]), "--gif", str(gif)]) == 2
        assert one_line_error(capsys) == (
            "rlstruct eval: --gif: environment 'CartPole-v1' cannot render rgb_array frames: "
            'DependencyNotInstalled: pygame is not installed, run `pip install "gymnasium[classic-control]"`\n'
        )
    assert not gif.exists()
    # an environment that lists no rgb_array render mode (gymnasium's warning, as one line without colours)
    with pytest.raises(
        CannotRender, match=re.escape("that is not in the possible render_modes ([]).")
    ) as caught:
        check_renders("CueMemory-v0")
    assert str(caught.value).startswith(
        "environment 'CueMemory-v0' cannot render rgb_array frames: UserWarning: WARN: The environment is "
    )


def test_eval_names_the_path_and_what_is_missing(
    ppo_run: tuple[Path, dict[str, Any]], tmp_path: Path, capsys: Capture
) -> None:
    missing = tmp_path / "nope"
    assert cli_main(["eval", str(missing)]) == 2
    assert one_line_error(capsys) == f"rlstruct eval: run directory {str(missing)!r} does not exist\n"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert cli_main(["eval", str(empty)]) == 2
    assert one_line_error(capsys) == (
        f"rlstruct eval: run directory {str(empty)!r} has no config.json "
        "(rlstruct train writes it when a run starts)\n"
    )
    shutil.copy(ppo_run[0] / "config.json", empty)
    assert cli_main(["eval", str(empty)]) == 2
    assert one_line_error(capsys) == (
        f"rlstruct eval: run directory {str(empty)!r} has no checkpoint.pt "
        "(rlstruct train writes it when a run finishes: was it interrupted?)\n"
    )
    assert cli_main(["eval", str(ppo_run[0]), "--episodes", "0"]) == 2
    assert "argument --episodes: must be a positive int, got 0" in capsys.readouterr().err


def save_run(run_dir: Path, algo: Any, config: TrainConfig, seed: int = 0) -> tuple[Any, dict[str, Any]]:
    """A run directory as Run.finish leaves it, holding an agent of random weights; returns the agent and its args."""
    agent, agent_args = algo.make_agent(config, env_spaces(config.env))
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for value in agent.state_dict().values():
            if value.dtype.is_floating_point:  # weights, and the normaliser's statistics (var > 0)
                value.copy_(torch.rand(value.shape, generator=generator) + 0.5)
    run_dir.mkdir()
    (run_dir / "config.json").write_text(json.dumps(dataclasses.asdict(config)))
    save_checkpoint(run_dir / "checkpoint.pt", model=agent, env_steps=1234)
    return agent, agent_args


@pytest.mark.parametrize(
    ("algo", "options"),
    [
        (ppo, {"env": "CartPoleNoVel-v1", "recurrent": True, "memory": "lstm", "normalize": True}),
        (a2c, {"env": "CartPole-v1", "recurrent": True, "normalize": True, "hidden": 16}),
        (impala, {"env": "CartPole-v1", "recurrent": True, "memory": "gru"}),
        (dqn, {"env": "CartPole-v1", "dueling": True, "hidden": 32}),
        (sac, {"env": "Pendulum-v1", "hidden": 32}),
    ],
)
def test_load_run_rebuilds_the_agent_of_every_algorithm(
    algo: Any, options: dict[str, Any], tmp_path: Path
) -> None:
    config = algo.Config(**options)
    name = algo.__name__.rsplit(".", 1)[1]
    agent, agent_args = save_run(tmp_path / f"renamed-{name}", algo, config)
    run = load_run(tmp_path / f"renamed-{name}")  # found by its config's fields, not by the directory's name
    assert isinstance(run, SavedRun)
    assert (run.algo, run.config, run.agent_args, run.env_steps) == (name, config, agent_args, 1234)
    assert type(run.agent) is type(agent)
    expected, got = agent.state_dict(), run.agent.state_dict()
    assert expected.keys() == got.keys() and all(torch.equal(expected[k], got[k]) for k in expected)


def test_a_recurrent_normalized_run_evaluates_as_its_agent_plays(tmp_path: Path) -> None:
    config = ppo.Config(env="CartPoleNoVel-v1", recurrent=True, normalize=True, seed=3, eval_episodes=2)
    agent, agent_args = save_run(tmp_path / "run", ppo, config, seed=1)
    result = load_run(tmp_path / "run").evaluate()
    # the reference: the saved agent, greedy, in process, on the environments Run seeds for evaluation
    seed = eval_seed(3)
    with LocalBatcher(
        ActorCritic,
        agent_args,
        GymEnv,
        {"env": "CartPoleNoVel-v1"},
        n_envs=2,
        n_timesteps=500,
        mode="episodes",
        seed=seed,
        weights=agent.state_dict(),
    ) as batcher:
        batcher.reset(
            agent_info=DictTensor({"greedy": torch.ones(2, dtype=torch.bool)}),
            env_info=DictTensor({"seed": seed + torch.arange(2)}),
        )
        batcher.execute()
        assert result.returns == episode_returns(batcher.get().trajectories)
    assert result.env_steps == 1234


def test_load_run_says_which_config_it_cannot_read(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    save_run(run_dir, ppo, ppo.Config(env="CartPole-v1"))
    config = json.loads((run_dir / "config.json").read_text())
    (run_dir / "config.json").write_text(json.dumps({**config, "warp_speed": 9}))
    with pytest.raises(
        ValueError, match=re.escape("fits no algorithm's Config; the closest, ppo, has no field")
    ):
        load_run(run_dir)
    (run_dir / "config.json").write_text(json.dumps({**config, "hidden": 8}))  # not the network it holds
    with pytest.raises(ValueError, match=re.escape("does not fit the ppo agent config.json describes")):
        load_run(run_dir)
    for field, value, expected in (
        ("hidden", "x", "config.hidden must be an int, got a str"),
        ("seed", "abc", "config.seed must be an int, got a str"),
        ("eval_episodes", 0, "config: eval_episodes must be at least 1, got 0"),
    ):
        (run_dir / "config.json").write_text(json.dumps({**config, field: value}))  # edited by hand
        with pytest.raises(ValueError, match=re.escape(f"{str(run_dir / 'config.json')!r}: {expected}")):
            load_run(run_dir)


def test_load_run_names_a_damaged_config_or_checkpoint_file(tmp_path: Path, capsys: Capture) -> None:
    run_dir = tmp_path / "run"
    save_run(run_dir, ppo, ppo.Config(env="CartPole-v1"))
    config, checkpoint = run_dir / "config.json", run_dir / "checkpoint.pt"
    text, weights = config.read_text(), torch.load(checkpoint)
    config.write_bytes(b"\xff\xfe{}")  # not UTF-8: the error named neither the file nor JSON
    with pytest.raises(
        ValueError, match=re.escape(f"{str(config)!r} is not valid JSON ('utf-8' codec can't")
    ):
        load_run(run_dir)
    assert cli_main(["eval", str(run_dir)]) == 2
    assert one_line_error(capsys).startswith(f"rlstruct eval: {str(config)!r} is not valid JSON")
    config.write_text(text)
    torch.save({**weights, "model": [1.0]}, checkpoint)  # was torch's TypeError from load_state_dict
    expected = f"{str(checkpoint)!r} must hold the 'model' weights as a state dict, got a list"
    with pytest.raises(ValueError, match=re.escape(expected)):
        load_run(run_dir)
    assert cli_main(["eval", str(run_dir)]) == 2
    assert one_line_error(capsys) == f"rlstruct eval: {expected}\n"
    torch.save({**weights, "env_steps": "abc"}, checkpoint)  # was "invalid literal for int()", naming no file
    with pytest.raises(
        ValueError,
        match=re.escape(f"{str(checkpoint)!r} must hold env_steps as a non-negative int, got 'abc'"),
    ):
        load_run(run_dir)
    torch.save({**weights, "env_steps": torch.tensor(77)}, checkpoint)  # a counter kept as a tensor
    assert load_run(run_dir).env_steps == 77


def test_evaluate_takes_a_numpy_int_of_episodes_as_it_takes_a_numpy_seed(tmp_path: Path) -> None:
    save_run(tmp_path / "run", ppo, ppo.Config(env="CartPole-v1"))
    run = load_run(tmp_path / "run")
    # was "n_episodes must be a positive int, got np.int64(2)", while seed=np.int64(3) was taken
    by_numpy = run.evaluate(np.int64(2), seed=np.int64(3))
    assert by_numpy.returns == run.evaluate(2, seed=3).returns and len(by_numpy.returns) == 2
    for bad in (True, 0, 1.0):
        with pytest.raises(
            ValueError, match=re.escape(f"SavedRun.evaluate: n_episodes must be a positive int, got {bad!r}")
        ):
            run.evaluate(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("run_dir", "error", "text"),
    [
        (5, TypeError, "load_run: run_dir must be a path (a str or os.PathLike), got an int"),
        (None, TypeError, "load_run: run_dir must be a path (a str or os.PathLike), got a NoneType"),
        ("", ValueError, "load_run: run_dir must name a run directory, got ''"),  # not the folder '.'
    ],
)
def test_load_run_names_a_run_dir_that_is_no_path(run_dir: Any, error: type[Exception], text: str) -> None:
    with pytest.raises(error, match=re.escape(text)):
        load_run(run_dir)


# ---------------------------------------------------------------------------- plot


def test_plot_overlays_the_curves_of_two_runs(
    ppo_run: tuple[Path, dict[str, Any]],
    dqn_run: tuple[Path, dict[str, Any]],
    tmp_path: Path,
    capsys: Capture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    runs = [str(ppo_run[0]), str(dqn_run[0])]
    out = tmp_path / "curves.png"
    assert cli_main(["plot", *runs, "--out", str(out)]) == 0
    assert capsys.readouterr().out == f"{out}\n"
    assert out.read_bytes().startswith(PNG_SIGNATURE)
    # what was drawn: each run's evaluation and training returns, in the run's colour
    drawn: dict[str, Any] = {}

    def draw(curves: list[Any], **options: Any) -> Path:
        drawn.update(curves=curves, **options)
        return Path(options["path"])

    monkeypatch.setattr(logger_module, "_draw", draw)
    monkeypatch.chdir(tmp_path)
    assert cli_main(["plot", *runs, "--x", "wall_time"]) == 0
    assert capsys.readouterr().out == "learning_curves.png\n"  # the default, in the working directory
    names = [Path(r).name for r in runs]
    assert [(c.label, c.color, c.style) for c in drawn["curves"]] == [
        (f"{names[0]}: eval_return_mean", 0, "-"),
        (f"{names[0]}: train_return_mean", 0, "--"),
        (f"{names[1]}: eval_return_mean", 1, "-"),
        (f"{names[1]}: train_return_mean", 1, "--"),
    ]
    assert (drawn["x"], drawn["y"]) == ("wall_s", "return")
    # evaluation rows have no wall_s: the final one is drawn at the training time of its step, 512
    with (ppo_run[0] / "progress.csv").open(newline="") as file:
        wall = {int(r["step"]): float(r["wall_s"]) for r in csv.DictReader(file) if r["wall_s"]}
    assert drawn["curves"][0].points[-1] == (wall[512], ppo_run[1]["eval_return_mean"])


def test_plot_errors_name_the_path_and_what_is_missing(
    ppo_run: tuple[Path, dict[str, Any]], tmp_path: Path, capsys: Capture
) -> None:
    missing = tmp_path / "nope"
    assert cli_main(["plot", str(ppo_run[0]), str(missing)]) == 2
    assert one_line_error(capsys) == f"rlstruct plot: run directory {str(missing)!r} does not exist\n"
    assert cli_main(["plot", str(tmp_path)]) == 2
    assert one_line_error(capsys) == f"rlstruct plot: run directory {str(tmp_path)!r} has no progress.csv\n"
    assert cli_main(["plot", str(ppo_run[0]), "--y", "nope"]) == 2
    err = one_line_error(capsys)
    assert err.startswith(
        f"rlstruct plot: {str(ppo_run[0] / 'progress.csv')!r} has no column 'nope'; its columns are ['step', "
    )
    assert not (tmp_path / "learning_curves.png").exists()
    text = tmp_path / "curves.txt"  # was matplotlib's message, once the runs were read
    assert cli_main(["plot", str(ppo_run[0]), "--out", str(text)]) == 2
    assert one_line_error(capsys).startswith(
        "rlstruct plot: --out must name an image file of a format matplotlib"
    )
    damaged = tmp_path / "damaged"
    shutil.copytree(ppo_run[0], damaged)
    with (damaged / "progress.csv").open("a") as file:
        file.write("9999,1")  # a run killed as it wrote its last row
    assert cli_main(["plot", str(damaged), "--out", str(tmp_path / "curves.png")]) == 0  # was a traceback
    assert capsys.readouterr().out == f"{tmp_path / 'curves.png'}\n"


def test_an_empty_run_dir_is_named_as_typed(ppo_run: tuple[Path, dict[str, Any]], capsys: Capture) -> None:
    """Not the current folder, which '' would be as a path."""
    assert cli_main(["plot", str(ppo_run[0]), ""]) == 2
    assert one_line_error(capsys) == "rlstruct plot: RUN_DIR must name run directories, got ''\n"
    assert cli_main(["eval", ""]) == 2
    assert one_line_error(capsys) == "rlstruct eval: RUN_DIR must name a run directory, got ''\n"
    assert cli_main(["export", "", "out.pt2"]) == 2
    assert one_line_error(capsys) == "rlstruct export: RUN_DIR must name a run directory, got ''\n"


def test_an_eval_seed_that_train_refuses_is_refused_by_name(
    ppo_run: tuple[Path, dict[str, Any]], capsys: Capture
) -> None:
    run_dir = str(ppo_run[0])
    assert cli_main(["eval", run_dir, "--seed", str(2**64)]) == 2
    assert "argument --seed: must be in [-9223372036854775808, 18446744073709551615]" in one_line_error(
        capsys
    )
    run = load_run(run_dir)
    with pytest.raises(TypeError, match=re.escape("SavedRun: seed must be an int, got a float")):
        run.evaluate(1, seed=1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=re.escape("SavedRun: seed must be in [")):
        run.record_episode(seed=2**64)


def test_plot_leaves_out_a_run_not_evaluated_yet_and_names_it(tmp_path: Path, capsys: Capture) -> None:
    """A run interrupted before its first evaluation: the others are drawn; alone, it is a mistake."""
    evaluated, early = tmp_path / "evaluated", tmp_path / "early"
    for run_dir in (evaluated, early):
        run_dir.mkdir()
    (evaluated / "progress.csv").write_text(
        "step,env_steps,wall_s,eval_return_mean\n256,256,0.5,\n256,256,,20.0\n"
    )
    (early / "progress.csv").write_text("step,env_steps,wall_s\n256,256,0.5\n")
    out = tmp_path / "curves.png"
    assert cli_main(["plot", str(evaluated), str(early), "--out", str(out)]) == 0
    printed = capsys.readouterr()
    assert printed.out == f"{out}\n" and out.read_bytes().startswith(PNG_SIGNATURE)
    assert printed.err == (
        "rlstruct plot: left out 1 of 2 runs, with no 'eval_return_mean' to plot against 'env_steps' "
        f"(not evaluated yet?): {str(early)!r}\n"
    )
    assert cli_main(["plot", str(early), "--out", str(out)]) == 2
    assert one_line_error(capsys).startswith(
        f"rlstruct plot: {str(early / 'progress.csv')!r} has no column 'eval_return_mean'"
    )


# ---------------------------------------------------------------------------- help


@pytest.mark.parametrize(
    ("argv", "usage"),
    [
        (["--help"], "usage: rlstruct train {a2c,dqn,impala,ppo,sac}"),
        (["-h"], "usage: rlstruct train {a2c,dqn,impala,ppo,sac}"),
        (["train", "--help"], "usage: rlstruct train {a2c,dqn,impala,ppo,sac}"),
        (["eval", "--help"], "usage: rlstruct eval [-h] [--episodes N] [--seed S] [--gif PATH] [--json]"),
        (["eval", "-h"], "usage: rlstruct eval [-h]"),
        (["plot", "--help"], "usage: rlstruct plot [-h] [--out PATH] [--x {env_steps,wall_time}]"),
        (["plot", "-h"], "usage: rlstruct plot [-h]"),
    ],
)
def test_help_at_every_level_prints_the_usage_and_exits_0(
    argv: list[str], usage: str, capsys: Capture
) -> None:
    assert cli_main(argv) == 0
    out = capsys.readouterr()
    start = out.out.index("usage: ") if argv[0].startswith("-") or argv[0] == "train" else 0
    assert out.out[start:].startswith(usage) and out.err == ""  # the top level says what it is first
    if argv[0].startswith("-"):  # the top level names every command
        assert "rlstruct eval RUN_DIR" in out.out and "rlstruct plot RUN_DIR [RUN_DIR ...]" in out.out


def test_an_unknown_command_is_one_line_and_exits_2(capsys: Capture) -> None:
    assert cli_main(["evaluate", "runs/x"]) == 2
    assert one_line_error(capsys) == (
        "rlstruct: unknown command 'evaluate'; choose train, eval, plot or export (rlstruct --help lists them)\n"
    )


# ---------------------------------------------------------------------------- rlstruct export


def test_export_writes_a_program_that_acts_as_the_policy(
    ppo_run: tuple[Path, dict[str, Any]], tmp_path: Path, capsys: Capture
) -> None:
    from rlstruct.algos import Policy

    run_dir, _ = ppo_run
    out = tmp_path / "policy.pt2"
    assert cli_main(["export", str(run_dir), str(out), "--batch-size", "1"]) == 0
    assert capsys.readouterr().out == f"{out} (batch size 1): torch.export.load({str(out)!r}).module()\n"
    program = torch.export.load(out).module()
    policy = Policy.from_run(run_dir)
    generator = torch.Generator().manual_seed(0)
    for _ in range(20):
        observation = torch.rand(4, generator=generator) * 0.2 - 0.1
        exported = program({"observation": observation[None]})
        assert int(exported[0]) == int(policy.act(observation.numpy()))


def test_export_mistakes_are_one_line(
    ppo_run: tuple[Path, dict[str, Any]], tmp_path: Path, capsys: Capture
) -> None:
    run_dir, _ = ppo_run
    out = str(tmp_path / "p.pt2")
    cases = [
        (["nowhere", out], "rlstruct export: run directory 'nowhere' does not exist\n"),
        (["nowhere", out, "--best"], "rlstruct export: run directory 'nowhere' does not exist\n"),
        (
            [str(run_dir), str(tmp_path / "missing" / "p.pt2")],
            f"rlstruct export: OUT's folder {str(tmp_path / 'missing')!r} does not exist\n",
        ),
        (
            [str(run_dir), out, "--best"],
            f"rlstruct export: --best: {run_dir} has no best.pt (train with --save-best)\n",
        ),
        (
            [str(run_dir), out, "--batch-size", "0"],
            "rlstruct export: argument --batch-size: must be a positive int, got 0 "
            "(rlstruct export --help lists the flags)\n",
        ),
    ]
    for argv, line in cases:
        assert cli_main(["export", *argv]) == 2
        assert capsys.readouterr().err == line
    assert not Path(out).exists()
