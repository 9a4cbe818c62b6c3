"""Logger: a run directory with a CSV file, TensorBoard event files, a progress line and a learning curve.

A run directory holds everything one training run leaves behind::

    runs/ppo-CartPole-v1-0-20250101-120000/
        config.json                 the run's configuration
        progress.csv                one row per Logger.log call
        events.out.tfevents.*       the same scalars, for TensorBoard
        checkpoint.pt               Logger.checkpoint_path, for save_checkpoint
        learning_curve.png          Logger.plot at the end

``progress.csv`` has a ``step`` column, then one column per scalar name in the
order the names first appeared. Every row is flushed as it is written, so a
run that crashes keeps its data. When a call brings a new name, the file is
rewritten once with the wider header (atomically, through a temporary file);
earlier rows hold an empty cell in the new column, as do rows that do not give
every name.

TensorBoard and matplotlib are imported only when a ``Logger`` or a plot
needs them, so ``import rlstruct`` stays fast.

Examples:
    >>> import csv, io, tempfile
    >>> from pathlib import Path
    >>> from rlstruct import Logger
    >>> run_dir = Path(tempfile.mkdtemp()) / "run"
    >>> with Logger(run_dir, config={"lr": 0.001}, tensorboard=False, progress=False) as logger:
    ...     logger.log(100, loss=0.5)
    ...     logger.log(200, loss=0.25, return_mean=12.0)
    >>> print((run_dir / "progress.csv").read_text(), end="")
    step,loss,return_mean
    100,0.5,
    200,0.25,12.0
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import os
import re
import tempfile
import time
import warnings
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, NamedTuple, TypeGuard

import numpy as np

from rlstruct.checks import cannot_write, is_int
from rlstruct.errors import describe
from rlstruct.progress import Progress, scalar_value, step_value

if TYPE_CHECKING:
    from _typeshed import DataclassInstance
    from torch.utils.tensorboard import SummaryWriter

__all__ = ["Logger", "make_run_dir", "plot_csv", "plot_runs"]

CSV_NAME = "progress.csv"
CONFIG_NAME = "config.json"
CHECKPOINT_NAME = "checkpoint.pt"
PLOT_NAME = "learning_curve.png"
LOCK_NAME = "run.lock"
"""The file a run keeps in its directory while it trains, holding its process id."""

AXIS_LABELS = {"env_steps": "env steps", "wall_s": "training wall time (s)"}
"""How a figure's x axis names these columns of ``progress.csv``; any other column by its name."""


def _timestamp() -> str:
    return time.strftime("%Y%m%d-%H%M%S")


def make_run_dir(root: str | os.PathLike[str], name: str) -> Path:
    """Create a new, empty run directory ``root/<name>-<YYYYmmdd-HHMMSS>`` and return its path.

    An existing directory is never reused: if the name is taken (two runs
    started in the same second), ``-1``, ``-2``, ... is appended. ``root`` is
    created if needed.

    Args:
        root: the directory that holds the runs, such as ``"runs"``.
        name: what the run is, such as ``f"ppo-{env_id}-{seed}"``. Characters
            other than letters, digits, ``.``, ``_``, ``=``, ``+`` and ``-``
            (such as the ``/`` of ``"ALE/Pong-v5"``) become ``_``.

    Raises:
        ValueError: if ``name`` is empty or not a str.

    Examples:
        >>> import tempfile
        >>> from rlstruct import make_run_dir
        >>> root = tempfile.mkdtemp()
        >>> first, second = make_run_dir(root, "ppo-ALE/Pong-v5-0"), make_run_dir(root, "ppo-ALE/Pong-v5-0")
        >>> first.name.startswith("ppo-ALE_Pong-v5-0-"), first != second, first.is_dir()
        (True, True, True)
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"make_run_dir: name must be a non-empty str, got {name!r}")
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    base = f"{re.sub(r'[^A-Za-z0-9._=+-]', '_', name)}-{_timestamp()}"
    for attempt in range(1_000_000):
        path = root / (base if attempt == 0 else f"{base}-{attempt}")
        try:
            path.mkdir()
        except FileExistsError:
            continue
        return path
    raise RuntimeError(f"make_run_dir: every name {base}-N in {str(root)!r} is taken")


def _write_atomically(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", newline="") as file:
            file.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _csv_text(rows: Iterable[Sequence[str]]) -> str:
    buffer = io.StringIO(newline="")
    csv.writer(buffer).writerows(rows)
    return buffer.getvalue()


def _format(value: int | float) -> str:
    return str(value) if isinstance(value, int) else repr(value)


class Logger:
    """Logs scalars of one run to ``progress.csv`` and TensorBoard, and shows a progress line.

    Args:
        run_dir: the run directory (created if missing; see ``make_run_dir``).
            If it already holds a ``progress.csv`` (a resumed run), rows are
            appended to it.
        config: the run's configuration, a mapping or a dataclass instance,
            written to ``config.json`` (values JSON cannot hold, such as paths
            or dtypes, are written as their ``str``). None writes nothing.
        tensorboard: also write TensorBoard event files into ``run_dir``,
            from the first ``log`` on (TensorBoard's writer runs a thread,
            made then, so that worker processes started before it can fork).
        progress: True for a ``Progress`` line on ``sys.stderr`` with
            ``total_steps`` as its total, False for none, or a ``Progress``
            of your own.
        total_steps: the step at which the run ends, shown by the progress line.
        purge_step: when resuming from a checkpoint taken at step k, k + 1:
            rows of ``progress.csv`` and TensorBoard scalars at this step or
            later, logged by the interrupted run after its checkpoint, are
            discarded, so that the resumed run does not log them twice.

    Raises:
        TypeError: if ``run_dir`` is not a path, ``config`` is neither a
            mapping nor a dataclass instance, or ``progress`` neither a bool
            nor a ``Progress``.
        ValueError: if ``run_dir`` is an existing file, ``total_steps`` is
            not a positive int or None, or is given with a ``Progress`` of
            your own, ``purge_step`` is not a
            non-negative int, or an existing ``progress.csv`` has no ``step``
            first column (or, with ``purge_step``, a row whose step is not an
            int).
        ImportError: if ``tensorboard`` is True and the ``tensorboard``
            package is missing.

    Warns:
        UserWarning: when an existing ``progress.csv`` ends in an unfinished
            row (a run killed as it wrote it), which is dropped rather than
            joined to the next row written.
    """

    def __init__(
        self,
        run_dir: str | os.PathLike[str],
        *,
        config: Mapping[str, Any] | DataclassInstance | None = None,
        tensorboard: bool = True,
        progress: bool | Progress = True,
        total_steps: int | None = None,
        purge_step: int | None = None,
    ) -> None:
        if config is None or isinstance(config, Mapping):
            config_data = None if config is None else dict(config)
        elif _is_dataclass_instance(config):
            config_data = dataclasses.asdict(config)
        else:
            raise TypeError(
                f"Logger: config must be a mapping, a dataclass instance or None, got a {type(config).__name__}"
            )
        if total_steps is not None and not (is_int(total_steps) and total_steps > 0):  # a NumPy int counts
            raise ValueError(f"Logger: total_steps must be a positive int or None, got {total_steps!r}")
        if isinstance(progress, Progress):
            if total_steps is not None:
                raise ValueError(
                    f"Logger: total_steps={total_steps!r} is for the default progress line; "
                    "give the total to your Progress instead"
                )
            self._progress: Progress | None = progress
        elif isinstance(progress, bool):
            self._progress = Progress(total_steps) if progress else None
        else:
            raise TypeError(f"Logger: progress must be a bool or a Progress, got a {type(progress).__name__}")
        if purge_step is not None:
            purge_step = step_value(purge_step, "Logger purge_step")
        if not isinstance(run_dir, str | os.PathLike):
            raise TypeError(f"Logger: run_dir must be a path (a str or os.PathLike), got {describe(run_dir)}")
        self.run_dir = Path(run_dir)
        if self.run_dir.exists() and not self.run_dir.is_dir():  # mkdir would say only "File exists"
            raise ValueError(f"Logger: run_dir {str(self.run_dir)!r} is a file; expected a run directory")
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.csv_path = self.run_dir / CSV_NAME
        self.checkpoint_path = self.run_dir / CHECKPOINT_NAME
        if config_data is not None:
            _write_atomically(
                self.run_dir / CONFIG_NAME, json.dumps(config_data, indent=2, default=str) + "\n"
            )
        self._columns = self._resume_csv(purge_step)
        # TensorBoard's writer runs a thread: made at the first row, so that worker processes
        # started before it (a run's collectors and evaluator) can fork (see choose_start_method)
        if tensorboard:
            _summary_writer_class()  # a missing package is reported now, not at the first row
        self._tensorboard, self._purge_step = tensorboard, purge_step
        self._writer: SummaryWriter | None = None
        self._csv = self.csv_path.open("a", newline="")
        self._closed = False

    def _resume_csv(self, purge_step: int | None) -> list[str]:
        """The columns of an existing progress.csv, without the rows at ``purge_step`` or later."""
        if not self.csv_path.exists():
            return ["step"]
        with self.csv_path.open(newline="") as file:
            text = file.read()
        complete = _finished_rows(text)
        if complete != text:  # a run killed as it wrote a row: the next would be glued to it
            warnings.warn(
                f"Logger: {str(self.csv_path)!r} ends in an unfinished row, {text[len(complete) :]!r}, "
                "left by a run stopped as it wrote it; the row is dropped",
                stacklevel=3,
            )
            text = complete
            _write_atomically(self.csv_path, text)
        rows = [row for row in csv.reader(io.StringIO(text, newline="")) if row]
        if not rows:
            return ["step"]
        if rows[0][:1] != ["step"]:
            raise ValueError(
                f"Logger: {str(self.csv_path)!r} must have 'step' as its first column, got header {rows[0]}"
            )
        if purge_step is not None:
            kept = [
                row
                for number, row in enumerate(rows[1:], start=1)
                if self._row_step(row, number) < purge_step
            ]
            if len(kept) < len(rows) - 1:
                _write_atomically(self.csv_path, _csv_text([rows[0], *kept]))
        return rows[0]

    def _row_step(self, row: list[str], row_number: int) -> int:
        """The step of a row of an existing progress.csv (row 1 the first under the header)."""
        try:
            return int(row[0])
        except ValueError:
            raise ValueError(
                f"Logger: {str(self.csv_path)!r} holds {row[0]!r} as the step of row {row_number}, "
                "where a non-negative int was expected"
            ) from None

    def log(self, step: int, **scalars: float) -> None:
        """Write one row to ``progress.csv`` (flushed at once) and each scalar to TensorBoard.

        Args:
            step: the x-axis value of the row, usually the number of
                environment steps so far (a non-negative int).
            **scalars: the values by name: numbers or one-element tensors
                (read with ``.item()``, which waits for a CUDA tensor).
                Integers are written as integers, floats in full precision.
                Names may hold ``/`` to group scalars in TensorBoard
                (``loss/policy``).

        Raises:
            ValueError: if ``step`` is not a non-negative int below 2**63, no
                scalar is given, a name is empty, or a value is a tensor with
                more than one element.
            TypeError: if a value is not a real number.
            RuntimeError: after ``close``.
        """
        if self._closed:
            raise RuntimeError("Logger.log: the logger is closed")
        step = step_value(step, "Logger.log")
        if not scalars:
            raise ValueError("Logger.log: expected at least one scalar, as name=value, got none")
        if "" in scalars:  # a column without a name, that no plot could ask for
            raise ValueError("Logger.log: a scalar's name must not be empty, got the name ''")
        values = {name: scalar_value(name, value, "Logger.log") for name, value in scalars.items()}
        new = [name for name in values if name not in self._columns]
        if new:
            self._widen(new)
        row = [str(step)] + [_format(values[c]) if c in values else "" for c in self._columns[1:]]
        csv.writer(self._csv).writerow(row)
        self._csv.flush()
        if self._tensorboard and self._writer is None:
            self._writer = _summary_writer(self.run_dir, self._purge_step)
        if self._writer is not None:
            for name, value in values.items():
                self._writer.add_scalar(name, value, step)
            self._writer.flush()

    def _widen(self, new: list[str]) -> None:
        """Rewrite progress.csv with ``new`` columns added to the header and empty cells below."""
        self._csv.close()
        with self.csv_path.open(newline="") as file:
            rows = list(csv.reader(file))[1:]
        self._columns = [*self._columns, *new]
        padding = [""] * len(new)
        _write_atomically(self.csv_path, _csv_text([self._columns, *(row + padding for row in rows)]))
        self._csv = self.csv_path.open("a", newline="")

    def progress(self, step: int, **shown: float) -> None:
        """Update the progress line (see ``Progress.update``); does nothing if there is none.

        Raises:
            RuntimeError: after ``close``.
        """
        if self._closed:
            raise RuntimeError("Logger.progress: the logger is closed")
        if self._progress is not None:
            self._progress.update(step, **shown)

    def plot(
        self, y: str | Sequence[str], *, x: str = "step", path: str | os.PathLike[str] | None = None
    ) -> Path:
        """Plot columns of ``progress.csv`` into ``run_dir/learning_curve.png``; see ``plot_csv``.

        Works after ``close`` too.
        """
        return plot_csv(self.csv_path, y, x=x, path=self.run_dir / PLOT_NAME if path is None else path)

    def close(self) -> None:
        """Finish the progress line and close the CSV and TensorBoard files. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        if self._progress is not None:
            self._progress.close()
        self._csv.close()
        if self._writer is not None:
            self._writer.close()

    def __enter__(self) -> Logger:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


def _is_dataclass_instance(value: object) -> TypeGuard[DataclassInstance]:
    return dataclasses.is_dataclass(value) and not isinstance(value, type)


def _summary_writer_class() -> type[SummaryWriter]:
    """TensorBoard's writer class (importing it starts no thread), or an ImportError saying what to install."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as error:
        raise ImportError(
            "Logger: tensorboard=True needs the tensorboard package (pip install tensorboard); "
            "or pass tensorboard=False"
        ) from error
    return SummaryWriter


def _summary_writer(run_dir: Path, purge_step: int | None) -> SummaryWriter:
    return _summary_writer_class()(log_dir=str(run_dir), purge_step=purge_step)


def plot_csv(
    csv_path: str | os.PathLike[str],
    y: str | Sequence[str],
    *,
    x: str = "step",
    path: str | os.PathLike[str] | None = None,
) -> Path:
    """Plot columns of a ``progress.csv`` against another, one curve per column, into an image file.

    Rows with an empty cell in ``x`` or in a curve's column are left out of
    that curve. The figure is drawn without pyplot (no display needed, no
    global state). The x axis is labelled by its column (``env_steps`` as
    "env steps", ``wall_s`` as "training wall time (s)"), the y axis by what
    the curves are: "return" when every column is a return, else the one
    column's name, else "value", with a legend naming each column that the
    axis does not; ``plot_runs`` labels the same way.

    Args:
        csv_path: a CSV file written by ``Logger``, or a run directory (its
            ``progress.csv`` is plotted).
        y: the column or columns to plot, such as ``"return_mean"``.
        x: the column on the x axis.
        path: the image file to write (its suffix picks the format: ``.png``,
            ``.svg``, ``.pdf``; none: ``.png`` is added); ``learning_curve.png``
            next to ``csv_path`` by default.

    Returns:
        The path of the image.

    Raises:
        ValueError: if ``y`` is empty, a column is missing from the file, a
            column in ``y`` has no value where ``x`` has one, a cell read is
            not a number (the message names its row and column), or ``path``
            is empty, a folder or of a format matplotlib does not write.
        FileNotFoundError: if ``csv_path`` does not exist, is a folder without
            a ``progress.csv``, or ``path``'s folder does not exist.
    """
    csv_path = Path(csv_path)
    if csv_path.is_dir():  # a run directory
        if not (csv_path / CSV_NAME).is_file():
            raise FileNotFoundError(
                f"plot_csv: csv_path {str(csv_path)!r} is a folder without a {CSV_NAME}; expected a CSV file "
                "or a run directory"
            )
        csv_path = csv_path / CSV_NAME
    elif not csv_path.exists():
        raise FileNotFoundError(f"plot_csv: csv_path {str(csv_path)!r} does not exist")
    names = [y] if isinstance(y, str) else list(y)
    if not names:
        raise ValueError("plot_csv: y must name at least one column, got none")
    curves = _read_curves(csv_path, names, (), x, interpolate_x=False, prefix="plot_csv: ")
    image = csv_path.with_name(PLOT_NAME) if path is None else _image_path(path, "plot_csv: path")
    y_label = _y_label(names)
    return _draw(
        [
            _Curve(name, points, 0 if len(names) == 1 else i, "-")
            for i, (name, points) in enumerate(curves.items())
        ],
        x=x,
        y=y_label,
        title=csv_path.parent.name,
        legend=len(names) > 1 or y_label != names[0],  # every curve named, on the axis or in the legend
        path=image,
    )


def plot_runs(
    run_dirs: Sequence[str | os.PathLike[str]],
    y: str | Sequence[str],
    *,
    optional: str | Sequence[str] = (),
    x: str = "env_steps",
    path: str | os.PathLike[str] = "learning_curves.png",
) -> Path:
    """Overlay the curves of several runs' ``progress.csv`` in one image, a colour per run.

    Each run directory's ``progress.csv`` gives one curve per column of
    ``y`` and of ``optional`` (plotted for the runs whose file has it), all
    in the run's colour, the first column as a solid line and the others
    dashed. A run with nothing to plot of a column of ``y`` (a run stopped
    before its first evaluation has no ``eval_return_mean``) is left out,
    with a ``UserWarning`` naming it, as long as another run is drawn. The legend names each curve
    ``<run directory name>: <column>`` (the whole path as given where two
    runs share a name).

    A row with no value in ``x`` takes one interpolated linearly, by its
    ``step``, between the rows that have one: the evaluation rows of a run
    carry ``env_steps`` but no ``wall_s``, and so get the training time at
    which their weights were taken. Rows with no value in a curve's column
    are left out of that curve.

    The axes are labelled as ``plot_csv`` labels them: "env steps" or
    "training wall time (s)" on x, "return" on y when every curve is a
    return, else the one column's name, else "value".

    Args:
        run_dirs: the run directories, each holding a ``progress.csv``.
        y: the column or columns to plot for every run, such as
            ``"eval_return_mean"``.
        optional: the column or columns to plot where present, such as
            ``"train_return_mean"``.
        x: the column on the x axis, such as ``"env_steps"`` or ``"wall_s"``.
        path: the image file to write (its suffix picks the format; none:
            ``.png`` is added).

    Returns:
        The path of the image.

    Raises:
        TypeError: if ``run_dirs`` is one path rather than a list of them,
            or ``y``, ``optional`` or ``x`` is not a column name (or, but
            ``x``, a list of them).
        FileNotFoundError: if a run directory does not exist or has no
            ``progress.csv`` (the message names it), or ``path``'s folder
            does not exist.
        ValueError: if ``run_dirs`` or ``y`` is empty or a run directory is
            ``""``, no run has every
            column of ``y`` and ``x`` with a value to plot (the message names
            the first run's file and lists its columns), a cell read is not
            a number, or ``path`` is empty, a folder or of a format matplotlib
            does not write.

    Warns:
        UserWarning: naming the runs left out, when others are drawn.
    """
    image = _image_path(path, "plot_runs: path")
    names, extra = _column_names("y", y), _column_names("optional", optional)  # a str: one column
    if not isinstance(x, str):
        raise TypeError(f"plot_runs: x must be a column name, got {describe(x)}")
    if not names:
        raise ValueError("plot_runs: y must name at least one column, got none")
    if isinstance(run_dirs, str | os.PathLike):  # not its characters, one run each
        raise TypeError(
            f"plot_runs: run_dirs must be a list of run directories, got the path {os.fspath(run_dirs)!r}; "
            "[run_dir] for one"
        )
    given = list(run_dirs)
    if not given:
        raise ValueError("plot_runs: run_dirs must name at least one run directory, got none")
    if "" in given:  # not the current folder
        raise ValueError("plot_runs: run_dirs must name run directories, got ''")
    dirs = [Path(d) for d in given]
    for run_dir in dirs:
        if not run_dir.is_dir():
            what = "is not a directory" if run_dir.exists() else "does not exist"
            raise FileNotFoundError(f"run directory {str(run_dir)!r} {what}")
        if not (run_dir / CSV_NAME).is_file():
            raise FileNotFoundError(f"run directory {str(run_dir)!r} has no {CSV_NAME}")
    short = [d.name or str(d) for d in dirs]
    labels = [str(d) if short.count(s) > 1 else s for d, s in zip(dirs, short, strict=True)]
    curves: list[_Curve] = []
    plotted: set[str] = set()
    left_out: list[tuple[Path, ValueError]] = []
    for run, (run_dir, label) in enumerate(zip(dirs, labels, strict=True)):
        try:
            columns = _read_curves(run_dir / CSV_NAME, names, extra, x, interpolate_x=True, prefix="")
        except ValueError as error:  # a column it lacks, or has no value of
            left_out.append((run_dir, error))
            continue
        for i, (name, points) in enumerate(columns.items()):
            curves.append(_Curve(f"{label}: {name}", points, run, "-" if i == 0 else "--"))
            plotted.add(name)
    if not curves:
        raise left_out[0][1]
    if left_out:
        warnings.warn(
            f"plot_runs: left out {len(left_out)} of {len(dirs)} runs, with no {', '.join(map(repr, names))} "
            f"to plot against {x!r} (not evaluated yet?): {', '.join(repr(str(d)) for d, _ in left_out)}",
            UserWarning,
            stacklevel=2,
        )
    return _draw(
        curves,
        x=x,
        y=_y_label(sorted(plotted)),
        title="",
        legend=True,
        path=image,
    )


def _y_label(names: Sequence[str]) -> str:
    """What the curves of columns ``names`` are, for the y axis.

    "return" when every one is a return (``eval_return_mean``,
    ``train_return_mean``), else the column's name when there is one, else
    "value". ``plot_csv`` and ``plot_runs`` (``rlstruct plot``) label alike.
    """
    if all("return" in name for name in names):
        return "return"
    return names[0] if len(names) == 1 else "value"


class _Curve(NamedTuple):
    label: str
    points: list[tuple[float, float]]
    color: int  # the index of its colour in matplotlib's cycle
    style: str  # its line style


def _finished_rows(text: str) -> str:
    """``text`` without an unfinished last row (one that no newline ends)."""
    return text[: text.rfind("\n") + 1]


def _read_curves(
    csv_path: Path,
    names: Sequence[str],
    optional: Sequence[str],
    x: str,
    *,
    interpolate_x: bool,
    prefix: str,
) -> dict[str, list[tuple[float, float]]]:
    """The (x, y) points of each column of ``names`` (required) and ``optional`` (if present), by column."""
    with csv_path.open(newline="") as file:
        text = file.read()
    # a row being written, or cut short by a killed run, is left out: its last cell may be cut too
    text = _finished_rows(text)
    reader = csv.DictReader(io.StringIO(text, newline=""), restval="")  # a short row lacks its last cells
    rows = list(reader)
    columns = list(reader.fieldnames or [])
    missing = [name for name in [x, *names] if name not in columns]
    if missing:
        raise ValueError(f"{prefix}{str(csv_path)!r} has no column {missing[0]!r}; its columns are {columns}")
    plotted = [*names, *(o for o in optional if o in columns and o not in names)]
    read = {x, *plotted, *(["step"] if interpolate_x and "step" in columns else [])}
    table = {name: _numbers(csv_path, rows, name, prefix) for name in read}
    xs = table[x]
    if interpolate_x and "step" in columns:
        known = sorted(
            (step, value)
            for step, value in zip(table["step"], xs, strict=True)
            if step is not None and value is not None
        )
        if known:
            steps, values = zip(*known, strict=True)
            xs = [
                value if value is not None or step is None else float(np.interp(step, steps, values))
                for value, step in zip(xs, table["step"], strict=True)
            ]
    curves = {}
    for name in plotted:
        points = [(v, w) for v, w in zip(xs, table[name], strict=True) if v is not None and w is not None]
        if not points:
            raise ValueError(
                f"{prefix}column {name!r} of {str(csv_path)!r} has no value to plot against {x!r}"
            )
        curves[name] = points
    return curves


def _numbers(csv_path: Path, rows: Sequence[Mapping[str, str]], name: str, prefix: str) -> list[float | None]:
    """The cells of column ``name`` as floats, None where empty; a ValueError names a cell that is no number."""
    numbers: list[float | None] = []
    for row_number, row in enumerate(rows, start=1):
        cell = row[name]
        try:
            numbers.append(None if cell == "" else float(cell))
        except ValueError:
            raise ValueError(
                f"{prefix}{str(csv_path)!r} holds {cell!r} in column {name!r} of row {row_number}, "
                "where a number was expected"
            ) from None
    return numbers


def _column_names(name: str, value: object) -> list[str]:
    """``plot_runs``'s ``value`` of the argument ``name`` as a list of columns: one str, or several."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, Iterable) and not isinstance(value, Mapping):
        columns = list(value)
        if all(isinstance(column, str) for column in columns):
            return columns
    raise TypeError(f"plot_runs: {name} must be a column name or a list of them, got {describe(value)}")


def _image_path(path: str | os.PathLike[str], name: str) -> Path:
    """``path`` as the image file to write: ``.png`` added if it has no suffix.

    Args:
        path: the file; its folder must exist.
        name: how the caller's argument is called, for the messages.

    Raises:
        ValueError: if ``path`` is empty, an existing folder, a file of a
            format matplotlib does not write (``.txt``), or a file that cannot
            be written (``cannot_write``).
        FileNotFoundError: if its folder does not exist.

    Examples:
        >>> _image_path("curves", "path")
        PosixPath('curves.png')
    """
    if str(path) == "":
        raise ValueError(f"{name} must name an image file, got ''")
    image = Path(path)
    if image.is_dir():
        raise ValueError(f"{name} must name an image file, got the folder {str(image)!r}")
    if not image.resolve().parent.is_dir():
        raise FileNotFoundError(f"{name}: the folder {str(image.parent)!r} does not exist")
    image = image if image.suffix else image.with_name(image.name + ".png")
    from matplotlib.backend_bases import FigureCanvasBase

    formats = FigureCanvasBase.get_supported_filetypes()
    if image.suffix[1:].lower() not in formats:  # found before the runs are read, not by matplotlib
        raise ValueError(
            f"{name} must name an image file of a format matplotlib writes ({', '.join(sorted(formats))}), "
            f"got {str(image)!r}"
        )
    if why := cannot_write(image):  # found before the runs are read, not by matplotlib
        raise ValueError(f"{name} {str(image)!r} cannot be written: {why}")
    return image


def _draw(curves: Sequence[_Curve], *, x: str, y: str, title: str, legend: bool, path: Path) -> Path:
    """Draw ``curves`` into one figure and write it to ``path`` (matplotlib imported here, pyplot never)."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(6.4, 4.0), layout="constrained")
    axes = figure.subplots()
    for curve in curves:
        xs, ys = zip(*curve.points, strict=True)
        marker = "o" if len(xs) == 1 else None  # a line of one point is not drawn
        axes.plot(xs, ys, label=curve.label, color=f"C{curve.color}", linestyle=curve.style, marker=marker)
    axes.set_xlabel(AXIS_LABELS.get(x, x))
    axes.set_ylabel(y)
    if title:
        axes.set_title(title)
    axes.grid(alpha=0.3)
    if legend:
        axes.legend(fontsize="small")
    figure.savefig(path)
    return path
