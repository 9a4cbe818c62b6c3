"""Per-row shapes and dtypes, and the storage they allocate.

A ``TensorSpec`` describes one row of one key: the shape that follows the
batch dimension (and the time dimension, for temporal data) and the dtype.
``Specs`` maps keys to specs. Batchers infer specs from one probe step and
allocate their buffers once from them, in ordinary or shared memory, with
``DictTensor.zeros(specs, B)`` (``B`` rows) or
``TemporalDictTensor.zeros(specs, B, T)`` (``B x T`` steps).

An ``ObservationSpace`` says what the values under one observation key mean
(a box of numbers, a choice among ``n``, several choices, bits), without
gymnasium: ``rlstruct.gym_env.observation_spaces`` makes them from a
gymnasium space, and networks read them to encode the key. This module
imports nothing else of rlstruct's, nor gymnasium: the structures build on it.

Examples:
    >>> import torch
    >>> from rlstruct import DictTensor, TemporalDictTensor
    >>> specs = DictTensor({"obs": torch.zeros(2, 4), "done": torch.zeros(2, dtype=torch.bool)}).specs()
    >>> specs["obs"]
    TensorSpec(shape=(4,), dtype=torch.float32)
    >>> buffer = TemporalDictTensor.zeros(specs, 8, 16)
    >>> buffer["obs"].shape, buffer["done"].dtype
    (torch.Size([8, 16, 4]), torch.bool)
    >>> ObservationSpace("discrete", (), torch.int64, n=(4,))
    ObservationSpace(kind='discrete', shape=(), dtype=torch.int64, n=(4,), start=(0,))
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

import torch

__all__ = ["OBSERVATION_KINDS", "ObservationSpace", "Specs", "TensorSpec"]


@dataclass(frozen=True)
class TensorSpec:
    """Shape and dtype of one row of one key.

    Args:
        shape: the shape of one row, without the batch (or batch and time)
            dimensions; ``()`` for a scalar per row.
        dtype: the dtype of the values.

    Raises:
        TypeError: if ``dtype`` is not a ``torch.dtype``, or ``shape`` not a tuple of ints.
        ValueError: if a dimension of ``shape`` is negative.
    """

    shape: tuple[int, ...]
    dtype: torch.dtype

    def __post_init__(self) -> None:
        if not isinstance(self.dtype, torch.dtype):
            raise TypeError(f"TensorSpec: dtype must be a torch.dtype, got {self.dtype!r}")
        if not isinstance(self.shape, Iterable):
            raise TypeError(f"TensorSpec: shape must be a tuple of non-negative ints, got {self.shape!r}")
        shape = tuple(self.shape)
        if not all(isinstance(s, numbers.Integral) and not isinstance(s, bool) for s in shape):
            raise TypeError(f"TensorSpec: shape must be a tuple of non-negative ints, got {self.shape!r}")
        if not all(s >= 0 for s in shape):
            raise ValueError(f"TensorSpec: shape must be a tuple of non-negative ints, got {self.shape!r}")
        object.__setattr__(self, "shape", tuple(int(s) for s in shape))  # NumPy ints (a space's shape) too


class Specs(Mapping[str, TensorSpec]):
    """An immutable mapping from keys to ``TensorSpec``.

    Args:
        specs: the key -> spec pairs.

    Raises:
        TypeError: if ``specs`` is not a mapping, a key not a ``str`` or a
            value not a ``TensorSpec``.
    """

    __slots__ = ("_specs",)

    def __init__(self, specs: Mapping[str, TensorSpec] | None = None) -> None:
        if specs is not None and not isinstance(specs, Mapping):
            raise TypeError(
                f"Specs: specs must be a mapping of str keys to TensorSpecs, got {type(specs).__name__}"
            )
        specs = dict(specs or {})
        for key, spec in specs.items():
            if not isinstance(key, str):
                raise TypeError(f"Specs: keys must be str, got {key!r}")
            if not isinstance(spec, TensorSpec):
                raise TypeError(
                    f"Specs: value of key {key!r} must be a TensorSpec, got {type(spec).__name__}"
                )
        self._specs: dict[str, TensorSpec] = specs

    def __getitem__(self, key: str) -> TensorSpec:
        return self._specs[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._specs)

    def __len__(self) -> int:
        return len(self._specs)

    def __repr__(self) -> str:
        return f"Specs({self._specs!r})"


OBSERVATION_KINDS = ("box", "discrete", "multidiscrete", "multibinary")
"""The kinds of ``ObservationSpace``, one per gymnasium leaf space."""


def _int_tuple(owner: str, name: str, value: object, low: int | None) -> tuple[int, ...]:
    """``value`` as a tuple of ints (Python or NumPy ints, not bools), each at least ``low`` unless it is None."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise TypeError(f"{owner}: {name} must be a tuple of ints, got {value!r}")
    items = tuple(value)
    if not all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in items):
        raise TypeError(f"{owner}: {name} must be a tuple of ints, got {value!r}")
    if low is not None and any(v < low for v in items):
        kind = {0: "non-negative", 1: "positive"}.get(low, f"at-least-{low}")
        raise ValueError(f"{owner}: {name} must be a tuple of {kind} ints, got {value!r}")
    return tuple(int(v) for v in items)  # a gymnasium space's n and shape hold NumPy ints


@dataclass(frozen=True)
class ObservationSpace:
    """What the values under one observation key are, as a network needs to know to encode them.

    The gymnasium-free twin of one leaf of an observation space (Box,
    Discrete, MultiDiscrete or MultiBinary), describing the tensor that
    ``GymEnv`` stores under the key: ``[N, *shape]`` rows of ``dtype``.
    ``rlstruct.gym_env.observation_spaces`` makes them from a gymnasium space.

    Raises:
        ValueError: if ``kind`` is unknown; if a discrete kind lacks ``n``,
            has a non-positive ``n``, or ``n`` and ``start`` do not hold one
            entry per value of a row; if ``box`` or ``multibinary`` has
            ``n`` or ``start``.
        TypeError: if ``dtype`` is not a torch.dtype (an integer one for the
            discrete kinds), or ``shape``, ``n`` or ``start`` not a tuple of ints.

    Examples:
        >>> import torch
        >>> ObservationSpace("multidiscrete", (2,), torch.int64, n=(3, 4), start=(0, -1)).n
        (3, 4)
        >>> ObservationSpace("multidiscrete", (2,), torch.int64, n=(3,))
        Traceback (most recent call last):
            ...
        ValueError: ObservationSpace: n must hold one entry per value of a row (shape (2,): 2), got (3,)
    """

    kind: str
    """``"box"``, ``"discrete"``, ``"multidiscrete"`` or ``"multibinary"`` (see ``OBSERVATION_KINDS``)."""

    shape: tuple[int, ...]
    """The shape of one row of the tensor under the key, without the batch dimension (``()`` for discrete)."""

    dtype: torch.dtype
    """The dtype of the tensor under the key, as GymEnv stores it (``torch.int64`` for discrete)."""

    n: tuple[int, ...] = ()
    """The number of values of each entry of a row: discrete ``(n,)``; multidiscrete the space's
    ``nvec`` flattened (row-major); empty for box and multibinary."""

    start: tuple[int, ...] = ()
    """The smallest value of each entry, in the order of ``n``: discrete ``(start,)``;
    multidiscrete the space's ``start`` flattened. Left empty for a discrete kind, it
    becomes zeros; empty for box and multibinary."""

    def __post_init__(self) -> None:
        owner = "ObservationSpace"
        if self.kind not in OBSERVATION_KINDS:
            raise ValueError(
                f"{owner}: kind must be one of {', '.join(map(repr, OBSERVATION_KINDS))}, got {self.kind!r}"
            )
        if not isinstance(self.dtype, torch.dtype):
            raise TypeError(f"{owner}: dtype must be a torch.dtype, got {self.dtype!r}")
        shape = _int_tuple(owner, "shape", self.shape, 0)
        n = _int_tuple(owner, "n", self.n, 1)
        start = _int_tuple(owner, "start", self.start, None)
        if self.kind in ("box", "multibinary"):
            if n or start:
                raise ValueError(
                    f"{owner}: n and start must be empty for kind {self.kind!r}, got n={n}, start={start}"
                )
        else:
            if self.dtype.is_floating_point or self.dtype.is_complex or self.dtype == torch.bool:
                raise TypeError(
                    f"{owner}: dtype must be an integer dtype for kind {self.kind!r}, got {self.dtype}"
                )
            if not n:
                raise ValueError(
                    f"{owner}: n must be given for kind {self.kind!r} (the number of values), got ()"
                )
            if self.kind == "discrete" and shape != ():
                raise ValueError(f"{owner}: shape must be () for kind 'discrete', got {shape}")
            entries = math.prod(shape)
            if len(n) != entries:
                raise ValueError(
                    f"{owner}: n must hold one entry per value of a row (shape {shape}: {entries}), got {n}"
                )
            start = start or (0,) * entries
            if len(start) != entries:
                raise ValueError(
                    f"{owner}: start must be empty or hold one entry per value of a row "
                    f"(shape {shape}: {entries}), got {start}"
                )
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "n", n)
        object.__setattr__(self, "start", start)
