"""Argument checks shared by the replay buffers."""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable

from rlstruct.errors import describe


def _check_positive_int(value: object, name: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return value


def _check_number(
    value: object, name: str, low: float, high: float = math.inf, *, open_low: bool = False
) -> float:
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
    if ok:
        ok = (low < value if open_low else low <= value) and value <= high  # type: ignore[operator]
    if not ok:
        bounds = f"{'(' if open_low else '['}{low}, {high}{']' if high < math.inf else ')'}"
        raise ValueError(f"{name} must be a number in {bounds}, got {value!r}")
    return float(value)  # type: ignore[arg-type]


def _check_keys(keys: object, available: Iterable[str], op: str) -> list[str]:
    if isinstance(keys, str) or not isinstance(keys, Iterable):
        raise TypeError(f"{op}: keys must be a list of str, got {describe(keys)}")
    keys = list(keys)
    missing = [k for k in keys if k not in set(available)]
    if missing:
        raise ValueError(
            f"{op}: keys {missing} are not in the trajectories, whose keys are {sorted(available)}"
        )
    return keys
