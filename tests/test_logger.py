"""Behaviour tests for rlstruct.logger: the CSV, TensorBoard files, config, plots, run directories and errors."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

import rlstruct.logger
from rlstruct import Logger, Progress, make_run_dir, plot_csv, plot_runs

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def message(text: str) -> str:
    return re.escape(text)


def read_csv(path: Path) -> list[list[str]]:
    with path.open(newline="") as file:
        return list(csv.reader(file))


def scalars(run_dir: Path, tag: str) -> list[tuple[int, float]]:
    events = EventAccumulator(str(run_dir))
    events.Reload()
    return [(event.step, event.value) for event in events.Scalars(tag)]


def quiet_logger(run_dir: Path, **kwargs: object) -> Logger:
    return Logger(run_dir, progress=False, **kwargs)  # type: ignore[arg-type]


def test_csv_rows_are_written_and_flushed_at_once(tmp_path: Path) -> None:
    logger = quiet_logger(tmp_path, tensorboard=False)
    logger.log(128, loss=0.1 + 0.2, updates=1)
    assert read_csv(tmp_path / "progress.csv") == [
        ["step", "loss", "updates"],
        ["128", "0.30000000000000004", "1"],
    ]
    logger.log(256, loss=torch.tensor(0.5), updates=np.int64(2))
    assert read_csv(tmp_path / "progress.csv")[2] == ["256", "0.5", "2"]  # before close
    logger.close()


def test_new_columns_widen_the_header_and_leave_empty_cells(tmp_path: Path) -> None:
    with quiet_logger(tmp_path, tensorboard=False) as logger:
        logger.log(1, loss=1.0)
        logger.log(2, return_mean=5.0)
        logger.log(3, loss=0.5, entropy=0.25)
        logger.log(4, loss=0.125)
    assert read_csv(tmp_path / "progress.csv") == [
        ["step", "loss", "return_mean", "entropy"],
        ["1", "1.0", "", ""],
        ["2", "", "5.0", ""],
        ["3", "0.5", "", "0.25"],
        ["4", "0.125", "", ""],
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["progress.csv"]  # no temporary file left


def test_tensorboard_event_files_hold_the_scalars(tmp_path: Path) -> None:
    with quiet_logger(tmp_path) as logger:
        logger.log(10, **{"loss/policy": 0.5, "return_mean": 3.0})
        logger.log(20, **{"loss/policy": 0.25})
    assert scalars(tmp_path, "loss/policy") == [(10, 0.5), (20, 0.25)]
    assert scalars(tmp_path, "return_mean") == [(10, 3.0)]


def test_a_resumed_run_appends_and_purges_what_followed_the_checkpoint(tmp_path: Path) -> None:
    with quiet_logger(tmp_path) as logger:
        for step in range(1, 6):
            logger.log(step, loss=float(step))
    # the checkpoint was taken at step 2; rows 3 to 5 are logged again by the resumed run
    with quiet_logger(tmp_path, purge_step=3) as logger:
        logger.log(3, loss=30.0, entropy=1.0)
        logger.log(4, loss=40.0)
    assert read_csv(tmp_path / "progress.csv") == [
        ["step", "loss", "entropy"],
        ["1", "1.0", ""],
        ["2", "2.0", ""],
        ["3", "30.0", "1.0"],
        ["4", "40.0", ""],
    ]
    assert scalars(tmp_path, "loss") == [(1, 1.0), (2, 2.0), (3, 30.0), (4, 40.0)]
    # TensorBoard learns of the purge from a START session log at purge_step in the new event file
    starts = [
        event.step
        for path in tmp_path.glob("events.out.tfevents.*")
        for event in EventFileLoader(str(path)).Load()
        if event.HasField("session_log") and event.session_log.status == event.session_log.START
    ]
    assert starts == [3]


def test_a_resumed_run_without_purge_step_keeps_every_row(tmp_path: Path) -> None:
    with quiet_logger(tmp_path, tensorboard=False) as logger:
        logger.log(1, loss=1.0)
    with quiet_logger(tmp_path, tensorboard=False) as logger:
        logger.log(1, loss=2.0)
    assert read_csv(tmp_path / "progress.csv") == [["step", "loss"], ["1", "1.0"], ["1", "2.0"]]


@pytest.mark.parametrize("purge_step", [None, 5])
def test_a_row_left_unfinished_by_a_killed_run_is_dropped_not_glued_to_the_next(
    tmp_path: Path, purge_step: int | None
) -> None:
    (tmp_path / "progress.csv").write_text("step,loss\n1,0.5\n2,0.2")  # killed while writing 2,0.25
    with pytest.warns(
        UserWarning,
        match=message(
            f"Logger: {str(tmp_path / 'progress.csv')!r} ends in an unfinished row, '2,0.2', left by"
        ),
    ):
        logger = quiet_logger(tmp_path, tensorboard=False, purge_step=purge_step)
    with logger:
        logger.log(6, loss=1.0)
    # was ["2", "0.26", "1.0"]: a step-2 row with the wrong loss and a cell more than the header
    assert read_csv(tmp_path / "progress.csv") == [["step", "loss"], ["1", "0.5"], ["6", "1.0"]]


def test_a_resumed_csv_with_a_step_that_is_no_int_is_named(tmp_path: Path) -> None:
    (tmp_path / "progress.csv").write_text("step,loss\n1,0.5\n\nxx,3\n")
    with pytest.raises(  # was "invalid literal for int() with base 10: 'xx'"
        ValueError,
        match=message(
            f"Logger: {str(tmp_path / 'progress.csv')!r} holds 'xx' as the step of row 2, "
            "where a non-negative int was expected"
        ),
    ):
        quiet_logger(tmp_path, tensorboard=False, purge_step=3)


@dataclasses.dataclass
class Config:
    lr: float = 3e-4
    env: str = "CartPole-v1"
    out: Path = Path("runs")


def test_config_is_written_as_json(tmp_path: Path) -> None:
    quiet_logger(tmp_path / "a", tensorboard=False, config=Config()).close()
    assert json.loads((tmp_path / "a" / "config.json").read_text()) == {
        "lr": 3e-4,
        "env": "CartPole-v1",
        "out": "runs",
    }
    quiet_logger(tmp_path / "b", tensorboard=False, config={"seed": 3, "dtype": torch.float32}).close()
    assert json.loads((tmp_path / "b" / "config.json").read_text()) == {"seed": 3, "dtype": "torch.float32"}
    quiet_logger(tmp_path / "c", tensorboard=False).close()
    assert not (tmp_path / "c" / "config.json").exists()


def test_plot_writes_a_png_of_the_learning_curve(tmp_path: Path) -> None:
    with quiet_logger(tmp_path, tensorboard=False) as logger:
        for step in range(0, 1000, 100):
            logger.log(step, loss=1.0 / (step + 1))
            if step % 200 == 0:
                logger.log(step, return_mean=step / 10)
    path = logger.plot("return_mean")  # after close: the CSV is all it needs
    assert path == tmp_path / "learning_curve.png"
    assert path.read_bytes().startswith(PNG_SIGNATURE) and path.stat().st_size > 1000
    both = plot_csv(tmp_path / "progress.csv", ["loss", "return_mean"], path=tmp_path / "both.png")
    assert both.read_bytes().startswith(PNG_SIGNATURE)
    (tmp_path / "learning_curve.png").unlink()
    assert plot_csv(tmp_path, "return_mean") == path  # a run directory: its progress.csv, its default image
    assert path.read_bytes().startswith(PNG_SIGNATURE)


def test_a_curve_of_one_point_is_drawn(tmp_path: Path) -> None:
    """A run whose only evaluation is its final one: a line of one point would be in the legend alone."""
    from matplotlib.image import imread

    with quiet_logger(tmp_path, tensorboard=False) as logger:
        logger.log(0, loss=1.0)
        logger.log(100, loss=0.5, return_mean=20.0)
    image = imread(plot_csv(tmp_path / "progress.csv", "return_mean", path=tmp_path / "one.png"))[..., :3]
    first_color = np.array([0x1F, 0x77, 0xB4]) / 255  # matplotlib's C0, the curve's
    drawn = int((np.abs(image - first_color).sum(-1) < 0.05).sum())
    assert drawn > 100  # the legend's sample alone is about 50 pixels; with the point's marker, about 150


def test_plot_runs_overlays_runs_and_plots_optional_columns_where_present(tmp_path: Path) -> None:
    for name, train in (("a", True), ("b", False)):
        with quiet_logger(tmp_path / name, tensorboard=False) as logger:
            for step in (100, 200):
                logger.log(step, wall_s=step / 100, **({"train_return_mean": 1.0} if train else {}))
                logger.log(step, eval_return_mean=step / 10)  # an evaluation row: no wall_s
    runs = [tmp_path / "a", tmp_path / "b"]
    path = plot_runs(
        runs, "eval_return_mean", optional=["train_return_mean"], x="wall_s", path=tmp_path / "o.png"
    )
    assert path == tmp_path / "o.png" and path.read_bytes().startswith(PNG_SIGNATURE)
    # one column given as a str, as y may be: not one column per character, none of them found
    one = plot_runs(
        runs, "eval_return_mean", optional="train_return_mean", x="wall_s", path=tmp_path / "s.png"
    )
    without = plot_runs(runs, "eval_return_mean", x="wall_s", path=tmp_path / "n.png")
    assert one.read_bytes() == path.read_bytes() != without.read_bytes()
    for name, value in (("optional", 5), ("y", None)):
        with pytest.raises(
            TypeError, match=message(f"plot_runs: {name} must be a column name or a list of them, got a")
        ):
            plot_runs(runs, **{"y": "eval_return_mean", name: value})
    with pytest.raises(TypeError, match=message("plot_runs: x must be a column name, got an int")):
        plot_runs(runs, "eval_return_mean", x=5)  # type: ignore[arg-type]
    # a run stopped before its first evaluation is left out, named
    (tmp_path / "early").mkdir()
    (tmp_path / "early" / "progress.csv").write_text("step,wall_s\n100,1.0\n")
    with pytest.warns(
        UserWarning,
        match=message(
            f"plot_runs: left out 1 of 3 runs, with no 'eval_return_mean' to plot against 'wall_s' (not evaluated yet?): {str(tmp_path / 'early')!r}"
        ),
    ):
        plot_runs([*runs, tmp_path / "early"], "eval_return_mean", x="wall_s", path=tmp_path / "o.png")
    with pytest.raises(ValueError, match=message("progress.csv' has no column 'eval_return_mean'")):
        plot_runs([tmp_path / "early"], "eval_return_mean", x="wall_s", path=tmp_path / "o.png")
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "progress.csv").write_text("step,loss,eval_return_mean\n1,,2.0\n")
    with pytest.raises(ValueError, match=message("progress.csv' has no value to plot against 'loss'")):
        plot_runs([tmp_path / "c"], "eval_return_mean", x="loss")  # no row has a loss to interpolate from
    with pytest.raises(ValueError, match=message("plot_runs: y must name at least one column, got none")):
        plot_runs(runs, [])
    with pytest.raises(ValueError, match=message("plot_runs: run_dirs must name at least one run directory")):
        plot_runs([], "eval_return_mean")
    with pytest.raises(
        FileNotFoundError, match=message(f"run directory {str(tmp_path / 'd')!r} does not exist")
    ):
        plot_runs([*runs, tmp_path / "d"], "eval_return_mean")
    # no suffix: .png is added, and the path returned is the file written
    assert (
        plot_runs(runs, "eval_return_mean", x="wall_s", path=tmp_path / "curves") == tmp_path / "curves.png"
    )
    assert (tmp_path / "curves.png").read_bytes().startswith(PNG_SIGNATURE)
    with pytest.raises(
        ValueError,
        match=message(f"plot_runs: path must name an image file, got the folder {str(tmp_path)!r}"),
    ):
        plot_runs(runs, "eval_return_mean", path=tmp_path)
    with pytest.raises(ValueError, match=message("plot_runs: path must name an image file, got ''")):
        plot_runs(runs, "eval_return_mean", path="")
    for one in (str(runs[0]), runs[0]):  # not a run per character
        with pytest.raises(
            TypeError,
            match=message(
                f"plot_runs: run_dirs must be a list of run directories, got the path {str(runs[0])!r}; "
                "[run_dir] for one"
            ),
        ):
            plot_runs(one, "eval_return_mean")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=message("plot_runs: run_dirs must name run directories, got ''")):
        plot_runs([*runs, ""], "eval_return_mean")  # not the current folder
    with pytest.raises(
        FileNotFoundError,
        match=message(f"plot_runs: path: the folder {str(tmp_path / 'e')!r} does not exist"),
    ):
        plot_runs(runs, "eval_return_mean", path=tmp_path / "e" / "o.png")


def test_a_row_cut_short_is_plotted_as_far_as_it_goes(tmp_path: Path) -> None:
    """A run killed while it wrote its last row (was float(None)): a short row's cells are left out, as
    empty ones are, and an unfinished last row, whose last cell may be cut ("30" of "300"), is not read."""
    from rlstruct.logger import _read_curves

    csv_path = tmp_path / "progress.csv"
    csv_path.write_text("step,env_steps,eval_return_mean,loss\n1,100,2.0,0.5\n2,200,3.0\n3,30")
    assert plot_csv(tmp_path, "eval_return_mean", x="env_steps").read_bytes().startswith(PNG_SIGNATURE)
    path = plot_runs([tmp_path], "eval_return_mean", path=tmp_path / "runs.png")
    assert path.read_bytes().startswith(PNG_SIGNATURE)
    curves = _read_curves(
        csv_path, ["eval_return_mean"], ["loss"], "env_steps", interpolate_x=False, prefix=""
    )
    assert curves == {"eval_return_mean": [(100.0, 2.0), (200.0, 3.0)], "loss": [(100.0, 0.5)]}


def test_a_cell_that_is_no_number_is_named_by_row_and_column(tmp_path: Path) -> None:
    csv_path = tmp_path / "progress.csv"
    csv_path.write_text("step,env_steps,eval_return_mean\n1,100,2.0\n2,200,high\n")
    where = (
        f"{str(csv_path)!r} holds 'high' in column 'eval_return_mean' of row 2, where a number was expected"
    )
    with pytest.raises(
        ValueError, match=message(f"plot_csv: {where}")
    ):  # was "could not convert string to float"
        plot_csv(csv_path, "eval_return_mean")
    with pytest.raises(ValueError, match=message(where)):
        plot_runs([tmp_path], "eval_return_mean", path=tmp_path / "runs.png")


def test_an_image_of_a_format_matplotlib_does_not_write_is_refused_before_reading(tmp_path: Path) -> None:
    (tmp_path / "progress.csv").write_text("step,env_steps,eval_return_mean\n1,100,2.0\n")
    for plot, name in (
        (lambda path: plot_csv(tmp_path, "eval_return_mean", path=path), "plot_csv: path"),
        (lambda path: plot_runs([tmp_path], "eval_return_mean", path=path), "plot_runs: path"),
    ):
        with pytest.raises(  # was matplotlib's "Format 'txt' is not supported", after reading the runs
            ValueError,
            match=message(f"{name} must name an image file of a format matplotlib writes (")
            + r"[a-z, ]*\bpng\b[a-z, ]*"
            + message(f"), got {str(tmp_path / 'curve.txt')!r}"),
        ):
            plot(tmp_path / "curve.txt")
        assert not (tmp_path / "curve.txt").exists()
        assert plot(tmp_path / "curve.SVG").read_bytes().lstrip().startswith(b"<?xml")


def test_progress_goes_through_the_logger(tmp_path: Path) -> None:
    stream = io.StringIO()
    with Logger(tmp_path, tensorboard=False, progress=Progress(1000, stream=stream)) as logger:
        logger.progress(500, return_mean=1.5)
    assert stream.getvalue() == "step 500/1,000 (50.0%) | - steps/s | elapsed 0:00:00 | return_mean 1.5\n"
    with quiet_logger(tmp_path, tensorboard=False) as logger:
        logger.progress(1)  # no progress line: nothing happens


def test_close_is_idempotent_and_closes_everything(tmp_path: Path) -> None:
    logger = quiet_logger(tmp_path)
    logger.log(1, loss=1.0)
    logger.close()
    logger.close()
    with pytest.raises(RuntimeError, match=message("Logger.log: the logger is closed")):
        logger.log(2, loss=1.0)
    with pytest.raises(RuntimeError, match=message("Logger.progress: the logger is closed")):
        logger.progress(2)
    with quiet_logger(tmp_path, tensorboard=False) as logger:
        pass
    with pytest.raises(RuntimeError, match="closed"):
        logger.log(2, loss=1.0)


def test_make_run_dir_never_reuses_a_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rlstruct.logger, "_timestamp", lambda: "20250101-120000")
    root = tmp_path / "runs"
    first = make_run_dir(root, "ppo-ALE/Pong-v5-0")
    (first / "progress.csv").write_text("kept")
    second = make_run_dir(root, "ppo-ALE/Pong-v5-0")
    third = make_run_dir(root, "ppo-ALE/Pong-v5-0")
    assert [first.name, second.name, third.name] == [
        "ppo-ALE_Pong-v5-0-20250101-120000",
        "ppo-ALE_Pong-v5-0-20250101-120000-1",
        "ppo-ALE_Pong-v5-0-20250101-120000-2",
    ]
    assert (first / "progress.csv").read_text() == "kept"
    assert list(second.iterdir()) == []


@pytest.mark.slow
def test_importing_rlstruct_does_not_import_tensorboard_or_matplotlib() -> None:
    code = "import sys, rlstruct; print(sorted(m for m in ('tensorboard', 'matplotlib') if m in sys.modules))"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert result.stdout.strip() == "[]"


def test_a_step_tensorboard_cannot_keep_or_an_empty_name_writes_nothing(tmp_path: Path) -> None:
    with quiet_logger(tmp_path) as logger:
        logger.log(1, loss=1.0)
        with pytest.raises(  # was a row written to progress.csv, then TensorBoard's "Value out of range"
            ValueError,
            match=message(
                "Logger.log: step must be below 2**63 (an int64, as TensorBoard keeps it), got 9223372036854775808"
            ),
        ):
            logger.log(2**63, loss=1.0)
        with pytest.raises(
            ValueError, match=message("Logger.log: a scalar's name must not be empty, got the name ''")
        ):
            logger.log(2, **{"": 1.0})  # was a column with an empty header
        logger.log(2**63 - 1, loss=2.0)
    assert read_csv(tmp_path / "progress.csv") == [["step", "loss"], ["1", "1.0"], [str(2**63 - 1), "2.0"]]


def test_a_run_dir_that_is_a_file_or_no_path_is_named(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("")
    with pytest.raises(  # was mkdir's FileExistsError: "[Errno 17] File exists"
        ValueError,
        match=message(f"Logger: run_dir {str(tmp_path / 'notes.txt')!r} is a file; expected a run directory"),
    ):
        quiet_logger(tmp_path / "notes.txt", tensorboard=False)
    with pytest.raises(  # was Path's "expected str, bytes or os.PathLike object, not NoneType"
        TypeError, match=message("Logger: run_dir must be a path (a str or os.PathLike), got a NoneType")
    ):
        quiet_logger(None, tensorboard=False)  # type: ignore[arg-type]


def test_errors_name_the_argument(tmp_path: Path) -> None:
    with pytest.raises(
        TypeError, match=message("Logger: config must be a mapping, a dataclass instance or None, got a list")
    ):
        Logger(tmp_path, config=[1, 2], tensorboard=False)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=message("got a type")):
        Logger(tmp_path, config=Config, tensorboard=False)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=message("Logger: progress must be a bool or a Progress, got a str")):
        Logger(tmp_path, progress="yes", tensorboard=False)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=message("total_steps=10 is for the default progress line")):
        Logger(tmp_path, progress=Progress(), total_steps=10, tensorboard=False)
    # the progress line's own check named its argument (Progress: total), and progress=False took any value
    for progress, total_steps in ((True, 0), (False, 0), (True, 2.5), (False, True)):
        with pytest.raises(
            ValueError,
            match=message(f"Logger: total_steps must be a positive int or None, got {total_steps!r}"),
        ):
            Logger(tmp_path, progress=progress, total_steps=total_steps, tensorboard=False)  # type: ignore[arg-type]
    numpy_total = np.int64(10)  # a NumPy int is an int
    Logger(tmp_path, progress=False, total_steps=numpy_total, tensorboard=False).close()
    with pytest.raises(
        ValueError, match=message("Logger purge_step: step must be a non-negative int, got -1")
    ):
        Logger(tmp_path, purge_step=-1, tensorboard=False)
    with quiet_logger(tmp_path, tensorboard=False) as logger:
        with pytest.raises(ValueError, match=message("Logger.log: step must be a non-negative int, got 1.0")):
            logger.log(1.0, loss=1.0)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match=message("Logger.log: expected at least one scalar")):
            logger.log(1)
        with pytest.raises(
            TypeError, match=message("Logger.log: loss must be a real number, got None (NoneType)")
        ):
            logger.log(1, loss=None)  # type: ignore[arg-type]
        with pytest.raises(
            ValueError, match=message("Logger.log: loss must be a number or a one-element tensor")
        ):
            logger.log(1, loss=torch.ones(3))  # type: ignore[arg-type]
    assert read_csv(tmp_path / "progress.csv") == []  # rejected rows wrote nothing
    other = tmp_path / "other"
    other.mkdir()
    (other / "progress.csv").write_text("time,loss\n1,2\n")
    with pytest.raises(
        ValueError, match=message("must have 'step' as its first column, got header ['time', 'loss']")
    ):
        Logger(other, tensorboard=False)
    with pytest.raises(ValueError, match=message("has no column 'reward'; its columns are ['time', 'loss']")):
        plot_csv(other / "progress.csv", "reward", x="time")
    (other / "progress.csv").write_text("step,loss,return_mean\n1,2,\n")
    with pytest.raises(ValueError, match=message("column 'return_mean' of")):
        plot_csv(other / "progress.csv", "return_mean")
    with pytest.raises(ValueError, match=message("plot_csv: y must name at least one column, got none")):
        plot_csv(other / "progress.csv", [])
    (tmp_path / "none").mkdir()
    with pytest.raises(
        FileNotFoundError,
        match=message(f"plot_csv: csv_path {str(tmp_path / 'none')!r} is a folder without a progress.csv"),
    ):
        plot_csv(tmp_path / "none", "loss")
    with pytest.raises(
        FileNotFoundError, match=message(f"plot_csv: csv_path {str(tmp_path / 'no.csv')!r} does not exist")
    ):
        plot_csv(tmp_path / "no.csv", "loss")
    with pytest.raises(ValueError, match=message("make_run_dir: name must be a non-empty str, got ''")):
        make_run_dir(tmp_path, "")
