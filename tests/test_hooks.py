"""Training hooks (rlstruct.algos.hooks): the events of every algorithm, stopping early, the best model, own metrics.

Also the end of a run that every hook leans on: the final line's times and
the learning curve's axis labels (``Run.finish``, ``rlstruct.logger``).
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import multiprocessing
import re
from pathlib import Path
from typing import Any

import pytest
import torch
from algo_helpers import message

from rlstruct.algos import a2c, dqn, impala, load_run, ppo, sac
from rlstruct.algos.evaluation import EvalResult
from rlstruct.algos.hooks import EarlyStop, HookRunner, SaveBest, TrainingEvent, check_hooks
from rlstruct.algos.run import TrainingDiverged
from rlstruct.checkpoint import load_checkpoint, save_checkpoint
from rlstruct.cli import main as cli_main
from rlstruct.logger import plot_csv, plot_runs

LOCAL = {"n_processes": 1, "eval_episodes": 2, "progress": False}
"""What keeps the runs here small: one worker, two evaluation episodes, no progress line."""


def small_config(algo: Any, tmp_path: Path, **changes: Any) -> Any:
    """A config of ``algo`` for a run of a few hundred env steps on CartPole (SAC: Pendulum)."""
    sizes: dict[Any, dict[str, Any]] = {
        ppo: {"n_envs": 2, "n_steps": 32, "n_epochs": 1, "minibatch_size": 32},
        a2c: {"n_envs": 2, "n_steps": 16},
        impala: {"n_envs": 2, "n_steps": 16, "n_slots": 3, "batch_slots": 1},
        dqn: {"n_envs": 2, "n_steps": 32, "learning_starts": 64, "batch_size": 32, "hidden": 16},
        sac: {"n_envs": 1, "n_steps": 32, "learning_starts": 64, "batch_size": 32, "hidden": 16},
    }
    env = "Pendulum-v1" if algo is sac else "CartPole-v1"
    options = {"total_steps": 512, "eval_every": 128, "run_dir": str(tmp_path), **LOCAL, **sizes[algo]}
    return algo.Config(env=env, **(options | changes))


def rows(run_dir: str | Path) -> list[dict[str, str]]:
    with (Path(run_dir) / "progress.csv").open(newline="") as file:
        return list(csv.DictReader(file))


def an_evaluation(mean: float, env_steps: int) -> Any:
    """What ``HookRunner.evaluation`` takes for an evaluation of one episode of return ``mean``."""
    model = torch.nn.Linear(2, 1)
    result = EvalResult(env_steps, [mean])
    scalars = {"env_steps": env_steps, "eval_return_mean": mean, "eval_return_std": 0.0}
    return result, model.state_dict(), scalars, model


def runner(hooks: list[Any], run_dir: Path, resumed_from: int | None = None) -> HookRunner:
    return HookRunner(hooks, algo="ppo", run_dir=run_dir, total_steps=1000, resumed_from=resumed_from)


# ---------------------------------------------------------------------------- the events


class Recorder:
    """A hook that keeps every event, with a copy of what it carried."""

    def __init__(self) -> None:
        self.events: list[TrainingEvent] = []
        self.weights: list[dict[str, torch.Tensor] | None] = []

    def __call__(self, event: TrainingEvent) -> None:
        self.events.append(event)
        self.weights.append(
            None if event.weights is None else {k: v.clone() for k, v in event.weights.items()}
        )


@pytest.mark.parametrize("algo", [a2c, dqn, impala, ppo, sac], ids=lambda m: m.__name__.split(".")[-1])
def test_every_algorithm_calls_its_hooks_with_the_documented_fields(algo: Any, tmp_path: Path) -> None:
    recorder = Recorder()
    results = algo.train(small_config(algo, tmp_path), hooks=[recorder])
    name, run_dir = algo.__name__.split(".")[-1], Path(results["run_dir"])
    events = recorder.events
    iterations = [e for e in events if e.kind == "iteration"]
    evaluations = [e for e in events if e.kind == "evaluation"]
    assert len(iterations) + len(evaluations) == len(events) and iterations and evaluations
    for event in events:
        assert (event.algo, event.run_dir, event.total_steps, event.resumed_from) == (
            name,
            run_dir,
            512,
            None,
        )
        assert isinstance(event.model, torch.nn.Module)
    # an iteration: the row being logged, no evaluation
    steps = [e.env_steps for e in iterations]
    assert steps == sorted(set(steps)) and steps[-1] == results["env_steps"] == 512
    logged = [r for r in rows(run_dir) if r["sps"]]
    assert [int(r["env_steps"]) for r in logged] == steps  # one event per row
    for event, row in zip(iterations, logged, strict=True):
        assert {"env_steps", "wall_s", "sps"} <= set(event.scalars)
        assert event.scalars["env_steps"] == event.env_steps
        assert {k: float(v) for k, v in event.scalars.items()} == {k: float(row[k]) for k in event.scalars}
        assert (event.evaluation, event.weights, event.final) == (None, None, False)
    # an evaluation: its result, the weights it played, the last one final
    assert [e.final for e in evaluations] == [False] * (len(evaluations) - 1) + [True]
    for event in evaluations:
        assert isinstance(event.evaluation, EvalResult) and event.weights is not None
        assert event.env_steps == event.evaluation.env_steps
        assert event.scalars["eval_return_mean"] == event.evaluation.mean
        assert set(event.weights) == set(event.model.state_dict())
    final = recorder.weights[-1]
    assert final is not None
    saved = load_checkpoint(run_dir / "checkpoint.pt")["model"]
    assert all(torch.equal(final[k], saved[k].cpu()) for k in saved)  # the final evaluation's are the trained
    assert evaluations[-1].evaluation is not None
    assert evaluations[-1].evaluation.mean == results["eval_return_mean"]
    assert results["stopped_early"] is False and results["stop_reason"] is None


def test_hooks_log_scalars_of_their_own_into_the_row_of_their_event(tmp_path: Path) -> None:
    def own(event: TrainingEvent) -> None:
        if event.kind == "iteration":
            event.log(thousands=event.env_steps / 1000)
        else:
            assert event.evaluation is not None
            event.log(eval_length=torch.tensor(event.evaluation.mean))  # a one-element tensor is a number too

    results = ppo.train(small_config(ppo, tmp_path), hooks=(own,))
    logged = rows(results["run_dir"])
    iterations = [r for r in logged if r["sps"]]
    evaluations = [r for r in logged if r["eval_return_mean"]]
    assert [float(r["thousands"]) for r in iterations] == [int(r["step"]) / 1000 for r in iterations]
    assert [r["eval_length"] for r in evaluations] == [r["eval_return_mean"] for r in evaluations]
    assert all(r["eval_length"] == "" for r in iterations)  # each scalar in its event's row only
    assert [float(r["eval_length"]) for r in evaluations][-1] == results["eval_return_mean"]


def test_log_refuses_the_rows_own_names_and_late_calls(tmp_path: Path) -> None:
    kept: list[TrainingEvent] = []

    def clash(event: TrainingEvent) -> None:
        kept.append(event)
        with pytest.raises(ValueError, match=message("TrainingEvent.log: 'eval_return_mean' is in this row")):
            event.log(eval_return_mean=1.0)
        with pytest.raises(
            TypeError, match=message("TrainingEvent.log: mine must be a real number, got 'x'")
        ):
            event.log(mine="x")  # type: ignore[arg-type]
        with pytest.raises(
            ValueError, match=message("expected at least one scalar, as name=value, got none")
        ):
            event.log()
        with pytest.raises(TypeError, match=message("reason must be a non-empty str, got an int")):
            event.stop(3)  # type: ignore[arg-type]

    runner([clash], tmp_path).evaluation(*an_evaluation(10.0, 100))
    with pytest.raises(RuntimeError, match=message("the row at 100 env steps is written already")):
        kept[0].log(late=1.0)


# ---------------------------------------------------------------------------- stopping early


def test_a_stop_ends_the_run_cleanly_and_the_results_say_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def stop_at_256(event: TrainingEvent) -> None:
        if event.kind == "iteration" and event.env_steps >= 256:
            event.stop("enough for this test")

    seen: list[TrainingEvent] = []
    config = small_config(ppo, tmp_path, total_steps=4096, json=str(tmp_path / "results.json"))
    results = ppo.train(config, hooks=[stop_at_256, seen.append])
    assert results["env_steps"] == 256 < config.total_steps
    assert (results["stopped_early"], results["stop_reason"]) == (True, "enough for this test")
    assert json.loads((tmp_path / "results.json").read_text()) == results
    out = capsys.readouterr().out
    assert "\nstopped early at 256 of 4096 env steps: enough for this test\n" in out
    # the run directory is complete: the final evaluation, checkpoint and plot happened
    run_dir = Path(results["run_dir"])
    assert {"config.json", "progress.csv", "checkpoint.pt", "learning_curve.png"} <= {
        p.name for p in run_dir.iterdir()
    }
    checkpoint = load_checkpoint(run_dir / "checkpoint.pt")
    assert (checkpoint["env_steps"], checkpoint["finished"]) == (256, True)
    assert max(int(r["step"]) for r in rows(run_dir)) == 256
    assert seen[-1].final and seen[-1].env_steps == 256  # the final evaluation, with its event
    assert load_run(run_dir).evaluate().mean == results["eval_return_mean"]
    assert not [e for e in seen if e.kind == "iteration" and e.env_steps > 256]


def test_early_stop_stops_at_a_target_and_after_evaluations_without_improvement(tmp_path: Path) -> None:
    at_target = runner([EarlyStop(target=200.0)], tmp_path)
    at_target.evaluation(*an_evaluation(150.0, 100))
    assert at_target.stop_reason is None
    at_target.evaluation(*an_evaluation(200.0, 200))
    assert at_target.stop_reason == (
        "the evaluation return 200.0 at 200 env steps reached the target 200 (EarlyStop)"
    )
    stalls = EarlyStop(patience=2, min_delta=1.0)
    stalled = runner([stalls], tmp_path)
    for steps, mean in ((100, 10.0), (200, 20.0), (300, 21.0), (400, 19.0)):
        assert stalled.stop_reason is None
        stalled.evaluation(*an_evaluation(mean, steps))
    assert (stalls.best, stalls.since_best) == (20.0, 2)  # 21 is not 1 better than 20
    assert stalled.stop_reason == (
        "the evaluation return has not beaten 20.0 for 2 evaluations, at 400 env steps (EarlyStop)"
    )
    # once the training loop is over, a stop changes nothing
    over = runner([EarlyStop(target=1.0)], tmp_path)
    over.finishing()
    over.evaluation(*an_evaluation(5.0, 100), final=True)
    assert over.stop_reason is None


def test_early_stop_takes_up_a_resumed_runs_evaluations_up_to_its_checkpoint(tmp_path: Path) -> None:
    (tmp_path / "progress.csv").write_text(
        "step,env_steps,eval_return_mean,sps\n"
        "100,100,,5\n100,100,30.0,\n200,200,20.0,\n300,300,25.0,\n"
        "400,400,99.0,\n"  # after the checkpoint at 300: the resumed run logs it again
    )
    stop = EarlyStop(patience=3)
    hooks = runner([stop], tmp_path, resumed_from=300)
    hooks.iteration(310, {"env_steps": 310}, torch.nn.Linear(1, 1))
    assert (stop.best, stop.since_best) == (30.0, 2)
    hooks.evaluation(*an_evaluation(29.0, 400))
    assert hooks.stop_reason is not None and "not beaten 30.0 for 3 evaluations" in hooks.stop_reason
    fresh = tmp_path / "other"  # another call of train: a fresh state
    runner([stop], fresh).evaluation(*an_evaluation(1.0, 100))
    assert (stop.best, stop.since_best) == (1.0, 0)
    # the same instance resuming the same directory again (the run crashed after 400): the rows
    # past the checkpoint are purged, and it takes up the state at the checkpoint, not its own
    again = runner([stop], tmp_path, resumed_from=300)
    again.iteration(310, {"env_steps": 310}, torch.nn.Linear(1, 1))
    assert (stop.best, stop.since_best) == (30.0, 2)
    assert again.stop_reason is None


def test_early_stop_counts_an_evaluation_that_is_not_a_number_as_no_improvement(tmp_path: Path) -> None:
    stop = EarlyStop(patience=2)
    hooks = runner([stop], tmp_path)
    for steps, mean in ((100, math.nan), (200, 10.0), (300, 20.0)):
        hooks.evaluation(*an_evaluation(mean, steps))
    assert (stop.best, stop.since_best) == (20.0, 0)
    assert hooks.stop_reason is None


def test_the_command_line_stops_early_and_saves_the_best_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["train", "ppo", "--env", "CartPole-v1", "--total-steps", "100000", "--n-envs", "2"]
    argv += ["--n-steps", "32", "--n-epochs", "1", "--minibatch-size", "32", "--n-processes", "1"]
    argv += ["--eval-every", "128", "--eval-episodes", "2", "--run-dir", str(tmp_path / "runs")]
    argv += ["--stop-at-return", "1", "--save-best", "--json", str(tmp_path / "r.json"), "--no-progress"]
    assert cli_main(argv) == 0
    results = json.loads((tmp_path / "r.json").read_text())
    assert results["stopped_early"] and results["env_steps"] < 100_000
    assert results["stop_reason"].startswith("the evaluation return ")
    assert results["stop_reason"].endswith(" reached the target 1 (EarlyStop)")
    run_dir = Path(results["run_dir"])
    config = json.loads((run_dir / "config.json").read_text())
    assert (config["stop_at_return"], config["stop_patience"], config["save_best"]) == (1.0, 0, True)
    capsys.readouterr()
    assert cli_main(["eval", str(run_dir / "best.pt"), "--json"]) == 0
    played = json.loads(capsys.readouterr().out)
    best = load_checkpoint(run_dir / "best.pt")
    assert (played["env_steps"], played["eval_return_mean"]) == (best["env_steps"], best["eval_return_mean"])
    assert played["run_dir"] == str(run_dir)


# ---------------------------------------------------------------------------- the best model


def test_save_best_holds_exactly_the_weights_of_the_best_evaluation(tmp_path: Path) -> None:
    recorder = Recorder()
    config = small_config(ppo, tmp_path, total_steps=2048, eval_every=256, lr=3e-3)
    results = ppo.train(config, hooks=[SaveBest(), recorder])
    run_dir = Path(results["run_dir"])
    evaluated = [
        (event.evaluation, weights)
        for event, weights in zip(recorder.events, recorder.weights, strict=True)
        if event.evaluation is not None
    ]
    means = [e.mean for e, _ in evaluated]
    assert len(set(means)) > 1  # evaluations that differ, or nothing is tested
    first_best = means.index(max(means))  # a tie keeps the earlier weights
    best_result, best_weights = evaluated[first_best]
    assert best_weights is not None
    saved = load_checkpoint(run_dir / "best.pt")
    assert (saved["env_steps"], saved["eval_return_mean"]) == (best_result.env_steps, best_result.mean)
    assert saved["returns"] == best_result.returns
    assert saved["model"].keys() == best_weights.keys()
    assert all(torch.equal(saved["model"][k], best_weights[k]) for k in best_weights)
    # the evaluation log agrees, and the saved weights play the same episodes again
    logged = [
        (int(r["env_steps"]), float(r["eval_return_mean"])) for r in rows(run_dir) if r["eval_return_mean"]
    ]
    assert max(mean for _, mean in logged) == saved["eval_return_mean"]
    assert (best_result.env_steps, best_result.mean) in logged
    replayed = load_run(run_dir / "best.pt")
    assert replayed.env_steps == saved["env_steps"] and replayed.run_dir == run_dir
    assert replayed.evaluate().mean == saved["eval_return_mean"]
    final = load_checkpoint(run_dir / "checkpoint.pt")["model"]
    if best_result.env_steps < results["env_steps"]:  # the trained weights moved on from the best ones
        assert not all(torch.equal(final[k], best_weights[k]) for k in final)


def test_save_best_takes_up_the_best_of_a_resumed_runs_file(tmp_path: Path) -> None:
    save_checkpoint(tmp_path / "best.pt", model={"w": torch.zeros(1)}, env_steps=300, eval_return_mean=50.0)
    best = SaveBest()
    hooks = runner([best], tmp_path, resumed_from=300)
    hooks.evaluation(*an_evaluation(40.0, 400))
    assert (best.best, best.env_steps) == (50.0, 300)
    assert load_checkpoint(tmp_path / "best.pt")["env_steps"] == 300  # not overwritten by a worse one
    hooks.evaluation(*an_evaluation(60.0, 500))
    assert (best.best, load_checkpoint(tmp_path / "best.pt")["env_steps"]) == (60.0, 500)


# ---------------------------------------------------------------------------- mistakes


def test_a_hook_that_raises_ends_the_run_and_leaves_no_worker_alive(tmp_path: Path) -> None:
    before = set(multiprocessing.active_children())

    def broken(event: TrainingEvent) -> None:
        if event.env_steps >= 128:
            raise ZeroDivisionError("a bug in my hook")

    with pytest.raises(ZeroDivisionError, match="a bug in my hook"):
        dqn.train(small_config(dqn, tmp_path), hooks=[broken])
    assert set(multiprocessing.active_children()) <= before  # the collector's and evaluator's workers ended


@pytest.mark.parametrize(
    ("hooks", "text"),
    [
        (
            print,
            "hooks must be a list or tuple of callables, each taking a TrainingEvent (hooks=[f] for one); "
            "got a builtin_function_or_method",
        ),
        (
            None,
            "hooks must be a list or tuple of callables, each taking a TrainingEvent (hooks=[f] for one); "
            "got a NoneType",
        ),
        ([print, 3], "hooks[1] must be a callable taking a TrainingEvent, got an int"),
    ],
)
def test_hooks_that_are_not_callables_are_refused_before_anything_starts(
    hooks: Any, text: str, tmp_path: Path
) -> None:
    with pytest.raises(TypeError, match=message(text)):
        check_hooks(hooks)
    for algo in (ppo, sac):
        with pytest.raises(TypeError, match=message(text)):
            algo.train(small_config(algo, tmp_path), hooks=hooks)
    assert list(tmp_path.iterdir()) == []  # no run directory


@pytest.mark.parametrize(
    ("make", "error", "text"),
    [
        (lambda: EarlyStop(), ValueError, "EarlyStop: give target (a return to stop at), patience"),
        (lambda: EarlyStop(patience=0), ValueError, "EarlyStop: patience must be at least 1, got 0"),
        (lambda: EarlyStop(target=math.nan), ValueError, "EarlyStop: target must be in (-inf, inf), got nan"),
        (
            lambda: EarlyStop(target="high"),  # type: ignore[arg-type]
            TypeError,
            "EarlyStop: target must be a number, got a str",
        ),
        (lambda: EarlyStop(3, min_delta=-1), ValueError, "EarlyStop: min_delta must be in [0, inf), got -1"),
        (lambda: SaveBest("runs/best.pt"), ValueError, "SaveBest: filename must be a plain file name"),
        (lambda: SaveBest("checkpoint.pt"), ValueError, "SaveBest: filename must not be 'checkpoint.pt'"),
        (
            lambda: SaveBest("progress.csv"),
            ValueError,
            "SaveBest: filename must not be 'progress.csv', a file the run writes itself "
            "(config.json, progress.csv, learning_curve.png, run.lock)",
        ),
        (lambda: SaveBest("config.json"), ValueError, "SaveBest: filename must not be 'config.json'"),
        (
            lambda: SaveBest(5),  # type: ignore[arg-type]
            TypeError,
            "SaveBest: filename must be a str such as 'best.pt', got an int",
        ),
    ],
)
def test_the_ready_hooks_check_their_arguments(make: Any, error: type[Exception], text: str) -> None:
    with pytest.raises(error, match=message(text)):
        make()


# ---------------------------------------------------------------------------- the final line and the plot


def test_the_final_line_gives_the_training_set_up_and_total_times(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from matplotlib.figure import Figure

    figures: list[Figure] = []
    savefig = Figure.savefig

    def keep(self: Figure, *args: Any, **kwargs: Any) -> None:
        figures.append(self)
        savefig(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", keep)
    results = a2c.train(small_config(a2c, tmp_path))
    line = capsys.readouterr().out.splitlines()[0]
    times = r"\(training ([\d.]+) s, set-up ([\d.]+) s, total ([\d.]+) s\)"
    found = re.fullmatch(
        r"a2c on CartPole-v1: final greedy return [\d.]+ \+- [\d.]+ over 2 episodes after 512 env steps "
        + times,
        line,
    )
    assert found is not None, line
    assert results["total_s"] >= results["wall_s"] + results["setup_s"]
    for shown, key in zip(found.groups(), ("wall_s", "setup_s", "total_s"), strict=True):
        assert float(shown) == pytest.approx(results[key], abs=0.06)  # .1f of what results rounds to .3f
    # the run's learning curve: env steps against the returns, as rlstruct plot labels them
    (axes,) = figures[-1].axes
    assert (axes.get_xlabel(), axes.get_ylabel()) == ("env steps", "return")
    legend = axes.get_legend()
    assert legend is not None
    assert [t.get_text() for t in legend.get_texts()] == ["eval_return_mean", "train_return_mean"]
    figures.clear()
    plot_runs(
        [results["run_dir"]], ["eval_return_mean"], optional=["train_return_mean"], path=tmp_path / "a.png"
    )
    (axes,) = figures[-1].axes
    assert (axes.get_xlabel(), axes.get_ylabel()) == ("env steps", "return")


def test_plot_labels_name_the_columns_as_the_command_line_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from matplotlib.figure import Figure

    labels: list[tuple[str, str]] = []
    savefig = Figure.savefig

    def keep(self: Figure, *args: Any, **kwargs: Any) -> None:
        labels.append((self.axes[0].get_xlabel(), self.axes[0].get_ylabel()))
        savefig(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", keep)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "progress.csv").write_text(
        "step,env_steps,wall_s,loss,eval_return_mean\n10,10,0.5,1.0,\n10,10,,,3.0\n20,20,1.0,0.5,4.0\n"
    )
    csv_path = tmp_path / "run" / "progress.csv"
    plot_csv(csv_path, "eval_return_mean", x="env_steps", path=tmp_path / "1.png")
    plot_csv(csv_path, "loss", x="wall_s", path=tmp_path / "2.png")
    plot_csv(csv_path, ["loss", "eval_return_mean"], path=tmp_path / "3.png")
    plot_runs([tmp_path / "run"], "loss", x="wall_s", path=tmp_path / "4.png")
    assert labels == [
        ("env steps", "return"),
        ("training wall time (s)", "loss"),
        ("step", "value"),
        ("training wall time (s)", "loss"),
    ]


# ---------------------------------------------------------------------------- a run that diverges


@pytest.mark.parametrize("algo", [a2c, dqn, impala, ppo, sac], ids=lambda m: m.__name__.split(".")[-1])
def test_a_run_whose_losses_stop_being_finite_ends_with_one_error_naming_them(
    algo: Any, tmp_path: Path
) -> None:
    env = "spaces_envs:NaNRewardContinuousEnv" if algo is sac else "spaces_envs:NaNRewardEnv"
    config = dataclasses.replace(small_config(algo, tmp_path), env=env, total_steps=2048)
    with pytest.raises(TrainingDiverged) as raised:
        algo.train(config)
    error, name = raised.value, algo.__name__.split(".")[-1]
    assert error.env_steps < 2048 and error.run_dir.parent == tmp_path
    assert error.values and all(math.isnan(v) for v in error.values.values())
    first = next(iter(error.values))
    assert re.search(rf"{name}: training diverged at \d+ env steps \({first} is nan", str(error))
    last = rows(error.run_dir)[-1]  # the row that holds them is written first
    assert int(last["env_steps"]) == error.env_steps
    assert all(last[key] == "nan" for key in error.values)
    assert not multiprocessing.active_children()


def test_rlstruct_train_reports_a_diverged_run_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["--env", "spaces_envs:NaNRewardEnv", "--run-dir", str(tmp_path), "--total-steps", "2048"]
    small = ["--n-processes", "1", "--n-envs", "2", "--n-steps", "32", "--minibatch-size", "32"]
    status = cli_main(["train", "ppo", *args, *small, "--no-progress"])
    err = capsys.readouterr().err
    assert status == 1
    assert err.count("\n") == 1 and err.startswith("rlstruct: ppo: training diverged at "), err


def test_a_metric_that_may_be_nan_alone_ends_nothing() -> None:
    """explained_variance is NaN when the value targets do not vary: a healthy run goes on."""
    from rlstruct.algos.run import diverged

    assert diverged({"value_loss": 0.5, "explained_variance": math.nan}) == []
    assert diverged({"value_loss": math.inf, "explained_variance": math.nan}) == [
        "explained_variance",
        "value_loss",
    ]
    assert diverged({"loss": 1.0, "train_return_mean": math.nan}) == ["train_return_mean"]
    assert diverged({"loss": -math.inf}) == ["loss"]
