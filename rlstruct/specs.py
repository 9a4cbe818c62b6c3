"""Per-row shapes and dtypes, and the storage they allocate.

A ``TensorSpec`` describes one row of one key: the shape that follows the
batch dimension (and the time dimension, for temporal data) and the dtype.
``Specs`` maps keys to specs. Batchers infer specs from one probe step and
allocate their buffers once from them, in ordinary or shared memory, with
``DictTensor.zeros(specs, B)`` (``B`` rows) or
``TemporalDictTensor.zeros(specs, B, T)`` (``B x T`` steps). This module
imports nothing else of rlstruct's: the structures build on it.

Examples:
    >>> import torch
    >>> from rlstruct import DictTensor, TemporalDictTensor
    >>> specs = DictTensor({"obs": torch.zeros(2, 4), "done": torch.zeros(2, dtype=torch.bool)}).specs()
    >>> specs["obs"]
    TensorSpec(shape=(4,), dtype=torch.float32)
    >>> buffer = TemporalDictTensor.zeros(specs, 8, 16)
    >>> buffer["obs"].shape, buffer["done"].dtype
    (torch.Size([8, 16, 4]), torch.bool)
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

import torch

__all__ = ["Specs", "TensorSpec"]


@dataclass(frozen=True)
class TensorSpec:
    """Shape and dtype of one row of one key.

    Args:
        shape: the shape of one row, without the batch (or batch and time)
            dimensions; ``()`` for a scalar per row.
        dtype: the dtype of the values.
    """

    shape: tuple[int, ...]
    dtype: torch.dtype

    def __post_init__(self) -> None:
        if not isinstance(self.dtype, torch.dtype):
            raise TypeError(f"TensorSpec: dtype must be a torch.dtype, got {self.dtype!r}")
        if not isinstance(self.shape, Iterable):
            raise TypeError(f"TensorSpec: shape must be a tuple of non-negative ints, got {self.shape!r}")
        shape = tuple(self.shape)
        if not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in shape):
            raise ValueError(f"TensorSpec: shape must be a tuple of non-negative ints, got {self.shape!r}")
        object.__setattr__(self, "shape", shape)


class Specs(Mapping[str, TensorSpec]):
    """An immutable mapping from keys to ``TensorSpec``.

    Args:
        specs: the key -> spec pairs.

    Raises:
        TypeError: if a key is not a ``str`` or a value not a ``TensorSpec``.
    """

    __slots__ = ("_specs",)

    def __init__(self, specs: Mapping[str, TensorSpec] | None = None) -> None:
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
