"""DictTensor and TemporalDictTensor against a plain ``dict[str, torch.Tensor]``.

Each row times one operation on a DictTensor (1024 rows, 5 keys of mixed shapes and
dtypes) and the same operation written as a comprehension over a plain dict, side by
side in every repeat, and reports the median microseconds per call of both and their
ratio DictTensor / plain dict, against a target ratio of 1.3 (single-threaded torch).
The two sides are checked to compute the same values before they are timed.

Usage:
    python benchmarks/structures.py [--quick] [--repeats N] [--json PATH]
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from _common import Row, compare, parse_args, report

from rlstruct import DictTensor, TemporalDictTensor

TARGET = 1.3
ROWS = 1024

Plain = dict[str, torch.Tensor]
Case = tuple[str, Callable[[], object], Callable[[], object]]


def make_data(shape: tuple[int, ...], gen: torch.Generator) -> Plain:
    """Five keys of mixed dtypes and per-row shapes; ``shape`` is [B] or [B, T]."""
    return {
        "obs": torch.randn(*shape, 4, generator=gen),
        "action": torch.randint(0, 2, shape, generator=gen),
        "reward": torch.randn(shape, generator=gen),
        "done": torch.rand(shape, generator=gen) < 0.1,
        "logits": torch.randn(*shape, 2, generator=gen),
    }


def dicttensor_cases(gen: torch.Generator) -> list[Case]:
    plain = make_data((ROWS,), gen)
    dt = DictTensor(plain)
    ids = torch.randint(0, ROWS, (256,), generator=gen)
    mask = torch.rand(ROWS, generator=gen) < 0.5
    parts = [make_data((ROWS // 8,), gen) for _ in range(8)]
    dt_parts = [DictTensor(p) for p in parts]
    return [
        # dt[i] keeps the batch dimension, so its plain equivalent is a one-row slice
        ("index int", lambda: dt[517], lambda: {k: v[517:518] for k, v in plain.items()}),
        ("index slice", lambda: dt[100:900], lambda: {k: v[100:900] for k, v in plain.items()}),
        ("index 256 long", lambda: dt[ids], lambda: {k: v[ids] for k, v in plain.items()}),
        ("index bool mask", lambda: dt[mask], lambda: {k: v[mask] for k, v in plain.items()}),
        (
            "cat 8 x 128",
            lambda: DictTensor.cat(dt_parts),
            lambda: {k: torch.cat([p[k] for p in parts]) for k in parts[0]},
        ),
        (
            # parts made fresh on every call, as when a learner gathers slices of a buffer
            "cat 8 fresh slices",
            lambda: DictTensor.cat([dt[i : i + 128] for i in range(0, ROWS, 128)]),
            lambda: {k: torch.cat([v[i : i + 128] for i in range(0, ROWS, 128)]) for k, v in plain.items()},
        ),
        ("clone", dt.clone, lambda: {k: v.clone() for k, v in plain.items()}),
        ("to cpu", lambda: dt.to("cpu"), lambda: {k: v.to("cpu") for k, v in plain.items()}),
    ]


def temporal_cases(gen: torch.Generator) -> list[Case]:
    parts = [make_data((16, 32), gen) for _ in range(8)]
    lengths = [torch.randint(1, 33, (16,), generator=gen) for _ in range(8)]
    tdt_parts = [TemporalDictTensor(p, n) for p, n in zip(parts, lengths, strict=True)]
    plain = {k: torch.cat([p[k] for p in parts]) for k in parts[0]}
    tdt = TemporalDictTensor(plain, torch.cat(lengths))
    return [
        (
            "temporal_index [128, 32]",
            lambda: tdt.temporal_index(7),
            lambda: {k: v[:, 7] for k, v in plain.items()},
        ),
        (
            "temporal cat 8 x [16, 32]",
            lambda: TemporalDictTensor.cat(tdt_parts),
            lambda: ({k: torch.cat([p[k] for p in parts]) for k in parts[0]}, torch.cat(lengths)),
        ),
    ]


def as_plain(result: object) -> object:
    """The plain-dict form of a result, to compare the two sides."""
    if isinstance(result, TemporalDictTensor):
        return dict(result.items()), result.lengths
    if isinstance(result, DictTensor):
        return dict(result.items())
    return result


def check_same(name: str, got: object, expected: object) -> None:
    def flat(x: object) -> list[torch.Tensor]:
        if isinstance(x, torch.Tensor):
            return [x]
        if isinstance(x, tuple):
            return [t for item in x for t in flat(item)]
        assert isinstance(x, dict)
        return [x[k] for k in sorted(x)]

    pairs = zip(flat(as_plain(got)), flat(expected), strict=True)
    if not all(a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b) for a, b in pairs):
        raise AssertionError(f"{name}: DictTensor and plain dict disagree")


def main() -> None:
    args, budget = parse_args(__doc__)
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(0)
    rows = []
    for name, structured, plain in dicttensor_cases(gen) + temporal_cases(gen):
        check_same(name, structured(), plain())
        t_structured, t_plain = compare([structured, plain], budget)
        rows.append(Row(name, t_structured * 1e6, "us", t_plain * 1e6, TARGET))
    print(f"torch {torch.__version__}, 1 thread, median of {budget.repeats} repeats\n")
    report(args, rows, "DictTensor", "plain dict")


if __name__ == "__main__":
    main()
