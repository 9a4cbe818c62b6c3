"""Helpers shared by the benchmark scripts: the CLI, interleaved timing, the table and the JSON rows.

A benchmark times a candidate and a baseline side by side (:func:`compare`), turns
each pair into a :class:`Row` and hands the rows to :func:`report`, which prints the
table and, with ``--json PATH``, writes them as a list of

    {"name", "value", "unit", "baseline", "ratio", "target", "higher_is_better"}

where ``ratio = value / baseline`` and ``target`` bounds the ratio (null if none).
Benchmarks are reports, not tests: a missed target is shown, never an error.
"""

from __future__ import annotations

import argparse
import csv
import gc
import json
import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Budget:
    """How long to measure: ``repeats`` timed loops per function, each lasting at least ``min_time`` s."""

    repeats: int
    min_time: float


def parse_args(
    description: str | None,
    default_repeats: int = 41,
    extra: Callable[[argparse.ArgumentParser], None] | None = None,
) -> tuple[argparse.Namespace, Budget]:
    """Parse ``--json PATH``, ``--quick`` and ``--repeats N``; return the arguments and the budget.

    ``extra``, if given, adds a benchmark's own options to the parser first.
    """
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the rows as JSON to PATH")
    parser.add_argument("--quick", action="store_true", help="a tiny budget (for CI): a few seconds in all")
    parser.add_argument("--repeats", type=int, metavar="N", help="timed loops per function (median taken)")
    if extra is not None:
        extra(parser)
    args = parser.parse_args()
    if args.repeats is not None and args.repeats < 1:
        parser.error("--repeats must be at least 1")
    repeats = args.repeats or (5 if args.quick else default_repeats)
    return args, Budget(repeats=repeats, min_time=0.001 if args.quick else 0.005)


def _loop_time(fn: Callable[[], object], number: int) -> float:
    start = time.perf_counter()
    for _ in range(number):
        fn()
    return time.perf_counter() - start


def _calls_per_loop(fn: Callable[[], object], min_time: float) -> int:
    """How many calls make a loop of at least ``min_time`` seconds (the probing also warms ``fn`` up)."""
    number = 1
    while True:
        elapsed = _loop_time(fn, number)
        if elapsed >= min_time / 4:
            return max(1, math.ceil(number * min_time / elapsed))
        number *= 10


def compare(fns: Sequence[Callable[[], object]], budget: Budget) -> list[float]:
    """Median seconds per call of each function, measured side by side.

    Every repeat times one loop of each function, in alternating order, so that
    drifts of a noisy machine (frequency, neighbours) hit all of them alike.
    The garbage collector is off while timing, as in :mod:`timeit`.
    """
    numbers = [_calls_per_loop(fn, budget.min_time) for fn in fns]
    samples: list[list[float]] = [[] for _ in fns]
    gc_enabled = gc.isenabled()
    gc.disable()
    try:
        for repeat in range(budget.repeats):
            order = range(len(fns)) if repeat % 2 == 0 else reversed(range(len(fns)))
            for i in order:
                samples[i].append(_loop_time(fns[i], numbers[i]) / numbers[i])
    finally:
        if gc_enabled:
            gc.enable()
    return [statistics.median(s) for s in samples]


@dataclass(frozen=True)
class Row:
    """One result: ``value`` of the candidate, ``baseline`` of the reference, in ``unit``."""

    name: str
    value: float
    unit: str
    baseline: float | None = None
    target: float | None = None
    higher_is_better: bool = False

    @property
    def ratio(self) -> float | None:
        return self.value / self.baseline if self.baseline else None

    @property
    def ok(self) -> bool | None:
        """Whether the ratio meets the target (None without a target)."""
        if self.target is None or self.ratio is None:
            return None
        return self.ratio >= self.target if self.higher_is_better else self.ratio <= self.target

    def to_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "value": self.value,
            "unit": self.unit,
            "baseline": self.baseline,
            "ratio": self.ratio,
            "target": self.target,
            "higher_is_better": self.higher_is_better,
        }


def _fmt(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def print_table(rows: Sequence[Row], value_label: str = "value", baseline_label: str = "baseline") -> None:
    """Print name, value, baseline, ratio, target and ok/MISS, one line per row."""
    unit = rows[0].unit if rows and all(r.unit == rows[0].unit for r in rows) else ""
    suffix = f" ({unit}{'/call' if unit in ('s', 'ms', 'us', 'ns') else ''})" if unit else ""
    header = ["name", value_label + suffix, baseline_label + suffix, "ratio", "target", "status"]
    lines = [
        [
            r.name,
            _fmt(r.value, ".2f"),
            _fmt(r.baseline, ".2f"),
            _fmt(r.ratio, ".2f"),
            _fmt(r.target, ".2f"),
            {None: "", True: "ok", False: "MISS"}[r.ok],
        ]
        for r in rows
    ]
    widths = [max(len(line[i]) for line in [header, *lines]) for i in range(len(header))]
    for line in [header, *lines]:
        cells = [line[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(line[1:], widths[1:], strict=True)]
        print("  ".join(cells).rstrip())


def write_json(path: Path, rows: Sequence[Row]) -> None:
    """Write the rows as a JSON list (see the module docstring for the fields)."""
    path.write_text(json.dumps([r.to_json() for r in rows], indent=2) + "\n")


def report(
    args: argparse.Namespace,
    rows: Sequence[Row],
    value_label: str = "value",
    baseline_label: str = "baseline",
) -> None:
    """Print the table and honour ``--json``."""
    print_table(rows, value_label, baseline_label)
    missed = [r.name for r in rows if r.ok is False]
    if missed:
        print(f"\n{len(missed)} of {len(rows)} rows miss their target: {', '.join(missed)}")
    if args.json is not None:
        write_json(args.json, rows)
        print(f"wrote {args.json}")


def evaluations(run_dir: str | Path) -> list[tuple[int, float]]:
    """``(env_steps, eval_return_mean)`` of every evaluation a training run logged in its progress.csv."""
    with (Path(run_dir) / "progress.csv").open() as file:
        return [
            (int(row["env_steps"]), float(row["eval_return_mean"]))
            for row in csv.DictReader(file)
            if row["eval_return_mean"]
        ]


def first_reaching(curve: Sequence[tuple[int, float]], threshold: float) -> int | None:
    """The env steps of the first evaluation at or above ``threshold`` (None if none)."""
    return next((steps for steps, mean in curve if mean >= threshold), None)
