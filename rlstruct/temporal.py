"""TemporalDictTensor: a batch of B sequences padded to T steps, with their lengths.

Every value has shape ``[B, T, ...]``; ``lengths`` (int64, shape ``[B]``, on
the values' device) says how many leading steps of each row are real. A length
of 0 is allowed: it is the row of an environment that had already finished,
or what is left of a short row after ``TemporalDictTensor.temporal_slice``.
Steps at ``t >= lengths[b]`` are padding: they hold whatever was written there
(zeros when rlstruct allocated or padded them) and ``mask()`` is False on them.

Examples:
    >>> import torch
    >>> from rlstruct import TemporalDictTensor
    >>> tdt = TemporalDictTensor({"reward": torch.ones(2, 3)}, torch.tensor([3, 1]))
    >>> tdt.mask()
    tensor([[ True,  True,  True],
            [ True, False, False]])
    >>> tdt.temporal_index(0)["reward"]
    tensor([1., 1.])
    >>> tdt.masked_flatten()["reward"].shape
    torch.Size([4])
"""

from __future__ import annotations

import math
import numbers
from collections.abc import ItemsView, Iterable, Iterator, KeysView, Mapping, Sequence, ValuesView
from typing import overload

import torch

from rlstruct.checks import check_device, is_bool, is_int, unusable_device
from rlstruct.dicttensor import Device, DictTensor, RowIndex, key_list
from rlstruct.errors import describe
from rlstruct.specs import Specs, TensorSpec

__all__ = ["TemporalDictTensor"]


class TemporalDictTensor:
    """Named tensors ``[B, T, ...]`` on one device, plus per-row ``lengths`` [B].

    Args:
        data: the key -> tensor pairs (or a ``DictTensor`` of them). Every
            tensor has at least two dimensions, the same B and the same T.
            The tensors are stored as given, not copied, and so is a
            DictTensor: ``to_dicttensor()`` returns it, and ``set`` adds its
            key to it too.
        lengths: int64 tensor of shape [B] on the values' device, each entry in
            ``[0, T]``. None means every row is full (length T).
        n_timesteps: T; required only when ``data`` has no keys (default 0),
            otherwise checked against the values.

    Raises:
        TypeError: for a value that is not a tensor, or ``lengths`` that is not
            an int64 tensor.
        ValueError: for values without a time dimension, disagreeing B or T,
            mixed devices, ``lengths`` of the wrong shape or device, or a
            length outside ``[0, T]``.
    """

    __slots__ = ("_dt", "_lengths", "_n_timesteps")

    _dt: DictTensor
    _lengths: torch.Tensor
    _n_timesteps: int

    def __init__(
        self,
        data: Mapping[str, torch.Tensor] | DictTensor,
        lengths: torch.Tensor | None = None,
        *,
        n_timesteps: int | None = None,
    ) -> None:
        if not isinstance(data, DictTensor):
            if not isinstance(data, Mapping):
                raise TypeError(
                    f"TemporalDictTensor: data must be a mapping of tensors or a DictTensor, got {describe(data)}"
                )
            rows = lengths.shape[0] if isinstance(lengths, torch.Tensor) and lengths.dim() == 1 else None
            data = DictTensor(data, batch_size=None if data else rows)
        if n_timesteps is not None and (not is_int(n_timesteps) or n_timesteps < 0):
            raise ValueError(
                f"TemporalDictTensor: n_timesteps must be a non-negative int, got {n_timesteps!r}"
            )
        first_key = None
        for key, value in data.items():
            if value.dim() < 2:
                raise ValueError(
                    f"TemporalDictTensor: value of key {key!r} must have shape [B, T, ...], "
                    f"got shape {tuple(value.shape)}"
                )
            if n_timesteps is None:
                n_timesteps, first_key = value.shape[1], key
            if value.shape[1] != n_timesteps:
                origin = f"key {first_key!r}" if first_key is not None else "n_timesteps"
                raise ValueError(
                    f"TemporalDictTensor: value of key {key!r} has {value.shape[1]} time steps, "
                    f"expected {n_timesteps} (from {origin}); got shape {tuple(value.shape)}"
                )
        n_timesteps = 0 if n_timesteps is None else int(n_timesteps)  # a NumPy int counts too
        batch_size = data.n_elems()
        if lengths is None:
            lengths = torch.full((batch_size,), n_timesteps, dtype=torch.int64, device=data.device)
        else:
            _check_lengths(lengths, batch_size, n_timesteps, data.device)
        self._dt = data
        self._lengths = lengths
        self._n_timesteps = n_timesteps

    @classmethod
    def unchecked(cls, data: DictTensor, lengths: torch.Tensor, n_timesteps: int) -> TemporalDictTensor:
        """Build without any validation, from parts the caller knows to be consistent.

        The fast constructor, for code that made the parts itself (a batcher's
        buffers, a history's windows): nothing is checked or copied, and
        ``lengths`` is not read, so no device is waited on. Use
        ``TemporalDictTensor(data, lengths)`` anywhere the parts come from elsewhere.

        Args:
            data: the values, each ``[B, n_timesteps, ...]``. Stored, not copied.
            lengths: int64, shape ``[B]``, on the values' device, each entry in
                ``[0, n_timesteps]``. Stored, not copied.
            n_timesteps: T; the caller guarantees that every value has T steps.

        Returns:
            A TemporalDictTensor over ``data`` and ``lengths``.

        Examples:
            >>> data = DictTensor({"reward": torch.zeros(2, 3)})
            >>> TemporalDictTensor.unchecked(data, torch.tensor([3, 1]), 3).mask().sum().item()
            4
        """
        out = object.__new__(cls)
        out._dt = data
        out._lengths = lengths
        out._n_timesteps = n_timesteps
        return out

    # ------------------------------------------------------------------ mapping side

    @property
    def lengths(self) -> torch.Tensor:
        """The number of real steps of each row: int64, shape [B], on ``device``."""
        return self._lengths

    @property
    def device(self) -> torch.device:
        """The device of the values and of ``lengths``."""
        return self._lengths.device

    def n_elems(self) -> int:
        """The number of rows B."""
        return self._dt.n_elems()

    def n_timesteps(self) -> int:
        """The padded number of time steps T (at least the largest length)."""
        return self._n_timesteps

    def keys(self) -> KeysView[str]:
        """The keys, in insertion order."""
        return self._dt.keys()

    def values(self) -> ValuesView[torch.Tensor]:
        """The tensors ``[B, T, ...]``, in key order."""
        return self._dt.values()

    def items(self) -> ItemsView[str, torch.Tensor]:
        """The (key, tensor) pairs, in key order."""
        return self._dt.items()

    def __iter__(self) -> Iterator[str]:
        return iter(self._dt)

    def __contains__(self, key: object) -> bool:
        return key in self._dt

    def empty(self) -> bool:
        """Whether there are no keys."""
        return self._dt.empty()

    def to_dicttensor(self) -> DictTensor:
        """The values as a DictTensor with B rows of shape ``[T, ...]`` (shared, not copied)."""
        return self._dt

    def get(self, keys: str | Iterable[str], clone: bool = False) -> TemporalDictTensor:
        """Select some keys (lengths are shared, or cloned with ``clone``).

        Raises:
            TypeError: if ``keys`` is not a str or an iterable of str.
            KeyError: naming a key that is not present.
        """
        keys = key_list("TemporalDictTensor.get", keys)
        for key in keys:
            if key not in self._dt:
                raise self._missing(key)
        lengths = self._lengths.clone() if clone else self._lengths
        return TemporalDictTensor.unchecked(self._dt.get(keys, clone), lengths, self._n_timesteps)

    def _missing(self, key: object) -> KeyError:
        return KeyError(f"TemporalDictTensor has no key {key!r}; its keys are {list(self.keys())}")

    def set(self, key: str, value: torch.Tensor) -> None:
        """Add or replace a key, in place, with a tensor ``[B, T, ...]`` on ``device``.

        Raises:
            TypeError: if ``key`` is not a str or ``value`` not a tensor.
            ValueError: if ``value`` does not have shape ``[B, T, ...]`` or is on another device.
        """
        if isinstance(value, torch.Tensor) and (value.dim() < 2 or value.shape[1] != self._n_timesteps):
            raise ValueError(
                f"TemporalDictTensor.set: value of key {key!r} must have shape "
                f"[{self.n_elems()}, {self._n_timesteps}, ...], got {tuple(value.shape)}"
            )
        if isinstance(value, torch.Tensor) and value.device != self.device:
            raise ValueError(
                f"TemporalDictTensor.set: value of key {key!r} is on {value.device}, expected {self.device}"
            )
        self._dt.set(key, value, op="TemporalDictTensor.set")

    def specs(self) -> Specs:
        """The per-step shape (after B and T) and dtype of every key."""
        return Specs({k: TensorSpec(tuple(v.shape[2:]), v.dtype) for k, v in self._dt.items()})

    @staticmethod
    def zeros(
        specs: Specs,
        batch_size: int,
        n_timesteps: int,
        *,
        device: Device | None = None,
        shared: bool = False,
    ) -> TemporalDictTensor:
        """Allocate a zero-filled TemporalDictTensor of B x T steps laid out by ``specs``.

        Args:
            specs: the per-step shape and dtype of every key (``specs()`` of a
                DictTensor of one step, or of a TemporalDictTensor).
            batch_size: the number of rows B.
            n_timesteps: the number of time steps T.
            device: where to allocate; the default device if None.
            shared: move the storage, lengths included, to shared memory.

        Returns:
            A new TemporalDictTensor whose key ``k`` holds ``[B, T, *specs[k].shape]``
            zeros, with every length set to T (int64, shape [B]).

        Raises:
            TypeError: if ``specs`` is not a ``Specs``, or ``device`` not a
                device, a str or an int.
            ValueError: if ``batch_size`` or ``n_timesteps`` is not a
                non-negative int, or ``device`` names no device or one this
                torch cannot use.

        Examples:
            >>> import torch
            >>> step = DictTensor({"obs": torch.ones(2, 4), "done": torch.ones(2, dtype=torch.bool)})
            >>> buffer = TemporalDictTensor.zeros(step.specs(), 8, 16)
            >>> buffer["obs"].shape, buffer["done"].dtype, buffer.lengths[0].item()
            (torch.Size([8, 16, 4]), torch.bool, 16)
        """
        if not isinstance(specs, Specs):
            raise TypeError(f"TemporalDictTensor.zeros: specs must be a Specs, got {describe(specs)}")
        for name, n in (("batch_size", batch_size), ("n_timesteps", n_timesteps)):
            if not is_int(n) or n < 0:
                raise ValueError(f"TemporalDictTensor.zeros: {name} must be a non-negative int, got {n!r}")
        batch_size, n_timesteps = int(batch_size), int(n_timesteps)
        if device is not None:
            device = check_device("TemporalDictTensor.zeros", device)
        steps = Specs({k: TensorSpec((n_timesteps, *spec.shape), spec.dtype) for k, spec in specs.items()})
        with unusable_device("TemporalDictTensor.zeros", device):  # the lengths first: the error names us
            lengths = torch.full((batch_size,), n_timesteps, dtype=torch.int64, device=device)
        data = DictTensor.zeros(steps, batch_size, device=device, shared=shared)
        if shared:
            lengths.share_memory_()
        return TemporalDictTensor(data, lengths, n_timesteps=n_timesteps)

    # ------------------------------------------------------------------ time

    def mask(self) -> torch.Tensor:
        """Which steps are real: bool, shape [B, T], on ``device``.

        To mask a value of shape ``[B, T, ...]``, use ``fill_padding`` or
        ``mask.view(B, T, *[1] * (value.dim() - 2))``.
        """
        steps = torch.arange(self._n_timesteps, device=self._lengths.device)
        return steps.unsqueeze(0) < self._lengths.unsqueeze(1)

    def full(self) -> bool:
        """Whether every row has length T (True when B is 0)."""
        return bool((self._lengths == self._n_timesteps).all())

    def _check_time(self, t: int, op: str) -> int:
        if not is_int(t):
            raise TypeError(f"TemporalDictTensor.{op}: time index must be an int, got {describe(t)}")
        if not -self._n_timesteps <= t < self._n_timesteps:
            raise IndexError(
                f"TemporalDictTensor.{op}: time index {t} is out of range for {self._n_timesteps} steps"
            )
        return int(t) % self._n_timesteps

    def temporal_index(self, t: int) -> DictTensor:
        """Every row at step ``t``: a DictTensor ``[B, ...]`` (views).

        Rows whose length is at most ``t`` give their padding; see
        ``masked_temporal_index`` to keep only the running rows.
        """
        t = self._check_time(t, "temporal_index")
        data = {k: v[:, t] for k, v in self._dt.items()}
        return DictTensor.unchecked(data, self.n_elems(), self._dt.device)

    def masked_temporal_index(self, t: int) -> tuple[DictTensor, torch.Tensor]:
        """The rows still running at step ``t`` (``t < lengths``), at that step.

        Returns:
            A DictTensor of the running rows at step ``t``, and their row
            indices (int64, shape [n_running], on ``device``).
        """
        t = self._check_time(t, "masked_temporal_index")
        rows = torch.nonzero(self._lengths > t).squeeze(1)
        return self.temporal_index(t).index(rows), rows

    def temporal_multi_index(self, t: torch.Tensor) -> DictTensor:
        """Row ``b`` at step ``t[b]``: a DictTensor ``[B, ...]``.

        Args:
            t: int64 tensor of shape [B] with entries in ``[0, T)``, on ``device``.

        Examples:
            >>> tdt = TemporalDictTensor({"x": torch.arange(6).view(2, 3)})
            >>> tdt.temporal_multi_index(tdt.lengths - 1)["x"]  # last real step of each row
            tensor([2, 5])
        """
        b = self.n_elems()
        if not isinstance(t, torch.Tensor) or t.dtype != torch.int64:
            raise TypeError(
                f"TemporalDictTensor.temporal_multi_index: t must be an int64 tensor, got {describe(t)}"
            )
        if t.shape != (b,):
            raise ValueError(
                f"TemporalDictTensor.temporal_multi_index: t must have shape [{b}], got {tuple(t.shape)}"
            )
        if t.device != self.device:
            raise ValueError(
                f"TemporalDictTensor.temporal_multi_index: t is on {t.device}, expected {self.device}"
            )
        if b and (int(t.min()) < 0 or int(t.max()) >= self._n_timesteps):
            raise IndexError(
                f"TemporalDictTensor.temporal_multi_index: t must lie in [0, {self._n_timesteps}), "
                f"got values from {int(t.min())} to {int(t.max())}"
            )
        rows = torch.arange(b, device=t.device)
        data = {k: v[rows, t] for k, v in self._dt.items()}
        return DictTensor.unchecked(data, b, self._dt.device)

    def temporal_slice(self, start: int, end: int) -> TemporalDictTensor:
        """Steps ``start`` to ``end`` (exclusive) of every row, as views.

        The lengths become ``clamp(lengths - start, 0, end - start)``.

        Raises:
            ValueError: unless ``0 <= start <= end <= T``.
        """
        ints = is_int(start) and is_int(end)
        if not (ints and 0 <= start <= end <= self._n_timesteps):
            raise ValueError(
                f"TemporalDictTensor.temporal_slice: expected 0 <= start <= end <= {self._n_timesteps}, "
                f"got start={start!r}, end={end!r}"
            )
        start, end = int(start), int(end)
        data = {k: v[:, start:end] for k, v in self._dt.items()}
        lengths = (self._lengths - start).clamp(0, end - start)
        return TemporalDictTensor.unchecked(self._dt.derive(data), lengths, end - start)

    def shorten(self) -> TemporalDictTensor:
        """Drop the trailing steps that are padding in every row (T becomes max(lengths)); views."""
        longest = int(self._lengths.max()) if self.n_elems() else 0
        return self.temporal_slice(0, longest)

    def expand(self, n_timesteps: int) -> TemporalDictTensor:
        """Pad every value with zeros (same dtype and device) up to ``n_timesteps`` steps.

        Lengths are unchanged. Returns self if T already equals ``n_timesteps``.

        Raises:
            ValueError: if ``n_timesteps`` is smaller than T.
        """
        if not is_int(n_timesteps) or n_timesteps < self._n_timesteps:
            raise ValueError(
                f"TemporalDictTensor.expand: n_timesteps must be an int >= {self._n_timesteps}, got {n_timesteps!r}"
            )
        n_timesteps = int(n_timesteps)
        if n_timesteps == self._n_timesteps:
            return self
        data = {}
        for key, value in self._dt.items():
            pad = value.new_zeros((value.shape[0], n_timesteps - self._n_timesteps, *value.shape[2:]))
            data[key] = torch.cat([value, pad], dim=1)
        return TemporalDictTensor.unchecked(self._dt.derive(data), self._lengths, n_timesteps)

    def fill_padding(self, value: float | bool = 0) -> TemporalDictTensor:
        """A copy whose padding steps (``mask()`` False) hold ``value``, for values of any rank.

        A float key stores ``value`` rounded to its precision, as any write
        into it does; inf and nan are values of every float dtype.

        Raises:
            TypeError: if ``value`` is not a real number (a bool, Python's or
                NumPy's, counts as 0 or 1).
            ValueError: if ``value`` cannot be stored in a key's dtype (2.5 or
                300 in uint8, -1 in bool; a finite value beyond a float
                dtype's largest, such as 1e39 in float32 or 65519 in float16,
                which torch too refuses to write): nothing is truncated,
                wrapped or overflows to inf.
        """
        if is_bool(value):
            value = bool(value)  # a NumPy bool is no numbers.Real
        if not isinstance(value, numbers.Real):
            raise TypeError(
                f"TemporalDictTensor.fill_padding: value must be a real number, got {describe(value)}"
            )
        mask = self.mask()
        data = {}
        for key, v in self._dt.items():
            if not _fits(value, v.dtype):
                raise ValueError(
                    f"TemporalDictTensor.fill_padding: value {value!r} cannot be stored exactly in key {key!r} of dtype {v.dtype}"
                )
            keep = mask.view(mask.shape + (1,) * (v.dim() - 2))
            data[key] = v.masked_fill(~keep, value)
        return TemporalDictTensor.unchecked(self._dt.derive(data), self._lengths, self._n_timesteps)

    def masked_flatten(self) -> DictTensor:
        """The real steps of every row, row after row: a DictTensor of ``sum(lengths)`` rows.

        Key ``k`` becomes ``[sum(lengths), ...]``: what a loss over all valid
        steps needs.
        """
        mask = self.mask()
        data = {k: v[mask] for k, v in self._dt.items()}
        return DictTensor.unchecked(data, int(self._lengths.sum()), self._dt.device)

    # ------------------------------------------------------------------ rows

    @overload
    def __getitem__(self, index: str) -> torch.Tensor: ...

    @overload
    def __getitem__(self, index: RowIndex) -> TemporalDictTensor: ...

    def __getitem__(self, index: str | RowIndex) -> torch.Tensor | TemporalDictTensor:
        """``tdt["key"]`` is a tensor ``[B, T, ...]``; a row index gives a TemporalDictTensor."""
        if isinstance(index, str):
            if index not in self._dt:
                raise self._missing(index)
            return self._dt[index]
        return self.index(index)

    def index(self, index: RowIndex) -> TemporalDictTensor:
        """Select rows, as ``DictTensor.index`` (ints and slices give views)."""
        data = self._dt.index(index)
        lengths = self._lengths[self._dt.normalize_index(index)]
        return TemporalDictTensor.unchecked(data, lengths, self._n_timesteps)

    def copy_(self, src: TemporalDictTensor, index: RowIndex | None = None) -> TemporalDictTensor:
        """Copy ``src``, lengths included, into some rows of this TemporalDictTensor, in place.

        This is how a preallocated (for example shared-memory) buffer of
        sequences is filled: ``buffer.copy_(episodes, rows)`` or
        ``buffer[rows] = episodes``. A ``src`` of fewer steps than this one
        fills the first ``src.n_timesteps()`` steps of the rows; their later
        steps are set to zeros (padding), so that nothing of the rows'
        earlier contents is left.

        Args:
            src: a TemporalDictTensor with the same keys, dtypes and per-step
                shapes, at most T steps, and as many rows as ``index``
                selects (or one, written to every selected row). It may live
                on another device: the data is copied to this one.
            index: the rows to write, as for ``DictTensor.index``; all rows if None.

        Returns:
            self.

        Raises:
            TypeError: if ``src`` is not a TemporalDictTensor, or a dtype differs (values are never cast).
            ValueError: if keys, per-step shapes or row counts differ, or ``src`` has more than T steps.
            IndexError: if ``index`` selects rows out of range.

        Examples:
            >>> buffer = TemporalDictTensor.zeros(Specs({"reward": TensorSpec((), torch.float32)}), 3, 4)
            >>> episode = TemporalDictTensor({"reward": torch.ones(1, 2)})
            >>> buffer[1] = episode
            >>> buffer["reward"][1], buffer.lengths
            (tensor([1., 1., 0., 0.]), tensor([4, 2, 4]))
        """
        op = "TemporalDictTensor.copy_"
        if not isinstance(src, TemporalDictTensor):
            raise TypeError(f"{op}: src must be a TemporalDictTensor, got {describe(src)}")
        if src._n_timesteps > self._n_timesteps:
            raise ValueError(
                f"{op}: src has {src._n_timesteps} time steps, more than this TemporalDictTensor's {self._n_timesteps}"
            )
        target = slice(None) if index is None else self._dt.normalize_index(index)
        padded = src if src._n_timesteps == self._n_timesteps else src.expand(self._n_timesteps)
        self._dt.copy_(padded._dt, target, op=op)
        self._lengths[target] = src._lengths.to(self.device)
        return self

    def __setitem__(self, index: str | RowIndex, value: torch.Tensor | TemporalDictTensor) -> None:
        """``tdt["key"] = tensor`` is ``set``; ``tdt[rows] = other`` is ``copy_``."""
        if isinstance(index, str):
            if not isinstance(value, torch.Tensor):
                raise TypeError(
                    f"TemporalDictTensor: value of key {index!r} must be a torch.Tensor, got {describe(value)}"
                )
            self.set(index, value)
        else:
            if not isinstance(value, TemporalDictTensor):
                raise TypeError(
                    f"TemporalDictTensor: rows are assigned from a TemporalDictTensor, got {describe(value)}"
                )
            self.copy_(value, index)

    @staticmethod
    def cat(
        tensors: Sequence[TemporalDictTensor], *, op: str = "TemporalDictTensor.cat"
    ) -> TemporalDictTensor:
        """Concatenate along the rows, padding shorter T with zeros of the same dtype and device.

        Args:
            tensors: a non-empty list of TemporalDictTensors with the same keys,
                dtypes, per-step shapes and device.
            op: the name the error messages begin with: a structure that
                concatenates through TemporalDictTensors gives its own
                (``Trajectories.cat`` does).

        Returns:
            A new TemporalDictTensor with T = the largest T of the inputs.

        Raises:
            TypeError, ValueError: as ``DictTensor.cat``.
        """
        if not isinstance(tensors, (list, tuple)):
            raise TypeError(f"{op}: expected a list of TemporalDictTensors, got {describe(tensors)}")
        if not tensors:
            raise ValueError(f"{op}: expected at least one TemporalDictTensor, got an empty list")
        n_timesteps = 0
        for i, tdt in enumerate(tensors):
            if not isinstance(tdt, TemporalDictTensor):
                raise TypeError(f"{op}: element {i} must be a TemporalDictTensor, got {describe(tdt)}")
            n_timesteps = max(n_timesteps, tdt._n_timesteps)
        padded = [
            tdt._dt if tdt._n_timesteps == n_timesteps else tdt.expand(n_timesteps)._dt for tdt in tensors
        ]
        data = DictTensor.cat(padded, op=op)
        for i, tdt in enumerate(tensors):  # without keys, only the lengths hold a device
            if tdt.device != tensors[0].device:
                raise ValueError(f"{op}: element {i} is on {tdt.device}, expected {tensors[0].device}")
        return TemporalDictTensor.unchecked(data, torch.cat([tdt._lengths for tdt in tensors]), n_timesteps)

    # ------------------------------------------------------------------ storage

    def _with(self, data: DictTensor, lengths: torch.Tensor) -> TemporalDictTensor:
        return TemporalDictTensor.unchecked(data, lengths, self._n_timesteps)

    def to(
        self, device: Device, non_blocking: bool = False, *, op: str = "TemporalDictTensor.to"
    ) -> TemporalDictTensor:
        """Move values and lengths to ``device`` (dtypes kept); see ``DictTensor.to``.

        Args:
            device: the target device.
            non_blocking: as for ``DictTensor.to``.
            op: the name the error messages begin with (``Trajectories.to`` gives its own).

        Raises:
            TypeError, ValueError: as ``DictTensor.to``, with or without keys.
        """
        data = self._dt.to(device, non_blocking, op=op)  # checks device
        target = check_device(op, device)  # an int is a CUDA index, as torch.device
        with unusable_device(op, target):
            lengths = self._lengths.to(target, non_blocking=non_blocking)
        return self._with(data, lengths)

    def clone(self) -> TemporalDictTensor:
        """A deep copy, lengths included."""
        return self._with(self._dt.clone(), self._lengths.clone())

    def detach(self) -> TemporalDictTensor:
        """The values detached from the autograd graph (storage shared)."""
        return self._with(self._dt.detach(), self._lengths)

    def pin_memory(self) -> TemporalDictTensor:
        """A copy in page-locked memory; needs an accelerator-enabled torch build."""
        return self._with(self._dt.pin_memory(), self._lengths.pin_memory())

    def is_shared(self) -> bool:
        """Whether every value and ``lengths`` live in shared memory."""
        return self._dt.is_shared() and self._lengths.is_shared()

    def share_memory_(self) -> TemporalDictTensor:
        """Move values and lengths to shared memory, in place. Returns self."""
        self._dt.share_memory_()
        self._lengths.share_memory_()
        return self

    def equal(self, other: TemporalDictTensor) -> bool:
        """Whether ``other`` has the same T, lengths, keys, dtypes, devices and values (bitwise, padding included).

        Key order is not compared.
        """
        return (
            isinstance(other, TemporalDictTensor)
            and self._n_timesteps == other._n_timesteps
            and self._lengths.device == other._lengths.device
            and torch.equal(self._lengths, other._lengths)
            and self._dt.equal(other._dt)
        )

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}: {tuple(v.shape[2:])} {v.dtype}" for k, v in self._dt.items())
        return (
            f"TemporalDictTensor(n_elems={self.n_elems()}, n_timesteps={self._n_timesteps}, "
            f"device={self.device}, {{{fields}}})"
        )


def _check_lengths(lengths: object, batch_size: int, n_timesteps: int, device: torch.device | None) -> None:
    if not isinstance(lengths, torch.Tensor):
        raise TypeError(
            f"TemporalDictTensor: lengths must be an int64 tensor of shape [{batch_size}], got {describe(lengths)}"
        )
    if lengths.dtype != torch.int64:
        raise TypeError(f"TemporalDictTensor: lengths must have dtype torch.int64, got {lengths.dtype}")
    if lengths.shape != (batch_size,):
        raise ValueError(
            f"TemporalDictTensor: lengths must have shape [{batch_size}] (one per row), got {tuple(lengths.shape)}"
        )
    if device is not None and lengths.device != device:
        raise ValueError(
            f"TemporalDictTensor: lengths is on {lengths.device}, expected {device} (the values' device)"
        )
    if batch_size and not lengths.is_meta:  # a meta tensor has a shape but no values to check
        low, high = int(lengths.min()), int(lengths.max())
        if low < 0 or high > n_timesteps:
            bad = int(torch.nonzero((lengths < 0) | (lengths > n_timesteps))[0])
            raise ValueError(
                f"TemporalDictTensor: lengths must lie in [0, {n_timesteps}] (T), "
                f"got lengths[{bad}] = {int(lengths[bad])}"
            )


def _fits(value: float | bool, dtype: torch.dtype) -> bool:
    """Whether ``value`` can be stored in ``dtype`` without truncation, wrap-around or overflow."""
    if dtype.is_floating_point or dtype.is_complex:
        try:
            x = float(value)
        except OverflowError:  # an int beyond every float
            return False
        return not math.isfinite(x) or abs(x) <= torch.finfo(dtype).max
    if dtype == torch.bool:
        return value in (0, 1)
    if isinstance(value, float) and not value.is_integer():
        return False
    info = torch.iinfo(dtype)
    return info.min <= value <= info.max
