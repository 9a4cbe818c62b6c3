"""Per-row shapes and dtypes, and the storage they allocate.

A ``TensorSpec`` describes one row of one key: the shape that follows the
batch dimension (and the time dimension, for temporal data) and the dtype.
``Specs`` maps keys to specs and allocates zero-filled storage for ``B``
rows, or ``B x T`` steps, in ordinary or shared memory. Batchers infer specs
from one probe step and allocate their buffers once from them.

Examples:
    >>> import torch
    >>> from rlstruct import DictTensor
    >>> specs = DictTensor({"obs": torch.zeros(2, 4), "done": torch.zeros(2, dtype=torch.bool)}).specs()
    >>> specs["obs"]
    TensorSpec(shape=(4,), dtype=torch.float32)
    >>> buffer = specs.zeros_temporal(8, 16)
    >>> buffer["obs"].shape, buffer["done"].dtype
    (torch.Size([8, 16, 4]), torch.bool)
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from rlstruct.dicttensor import DictTensor
    from rlstruct.temporal import TemporalDictTensor

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
    """An immutable mapping from keys to ``TensorSpec``, which allocates storage.

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

    def _alloc(
        self, lead: tuple[int, ...], device: torch.device | str | None, shared: bool
    ) -> dict[str, torch.Tensor]:
        for name, n in zip(("batch_size", "n_timesteps"), lead, strict=False):
            if not isinstance(n, int) or isinstance(n, bool) or n < 0:
                raise ValueError(f"Specs: {name} must be a non-negative int, got {n!r}")
        data = {}
        for key, spec in self._specs.items():
            value = torch.zeros(lead + spec.shape, dtype=spec.dtype, device=device)
            data[key] = value.share_memory_() if shared else value
        return data

    def zeros(
        self, batch_size: int, *, device: torch.device | str | None = None, shared: bool = False
    ) -> DictTensor:
        """Allocate a zero-filled ``DictTensor`` of ``batch_size`` rows.

        Args:
            batch_size: the number of rows B.
            device: where to allocate; the default device if None.
            shared: move the storage to shared memory (CPU only), so that
                other processes can write into it.

        Returns:
            A DictTensor whose key ``k`` holds ``[B, *self[k].shape]`` zeros of
            dtype ``self[k].dtype``. With no keys, an empty DictTensor of B rows.
        """
        from rlstruct.dicttensor import DictTensor

        return DictTensor(self._alloc((batch_size,), device, shared), batch_size=batch_size)

    def zeros_temporal(
        self,
        batch_size: int,
        n_timesteps: int,
        *,
        device: torch.device | str | None = None,
        shared: bool = False,
    ) -> TemporalDictTensor:
        """Allocate a zero-filled ``TemporalDictTensor`` of B x T steps.

        Args:
            batch_size: the number of rows B.
            n_timesteps: the number of time steps T.
            device: where to allocate; the default device if None.
            shared: move the storage, lengths included, to shared memory.

        Returns:
            A TemporalDictTensor whose key ``k`` holds ``[B, T, *self[k].shape]``
            zeros, with every length set to T (int64, shape [B]).
        """
        from rlstruct.dicttensor import DictTensor
        from rlstruct.temporal import TemporalDictTensor

        data = DictTensor(self._alloc((batch_size, n_timesteps), device, shared), batch_size=batch_size)
        lengths = torch.full((batch_size,), n_timesteps, dtype=torch.int64, device=device)
        if shared:
            lengths.share_memory_()
        return TemporalDictTensor(data, lengths, n_timesteps=n_timesteps)
