"""DictTensor: named tensors that share a leading batch dimension and a device.

A ``DictTensor`` maps ``str`` keys to tensors of shape ``[B, ...]``: every
value has the same number of rows B, and all values live on one device. It is
the unit in which observations, actions, agent states, agent_info (z) and
env_info (w) travel through rlstruct.

Keys behave like a mapping (``keys()``, ``items()``, ``dt["obs"]``,
``"obs" in dt``, iteration over keys); rows are indexed torch-style
(``dt[3]``, ``dt[2:5]``, ``dt[long_tensor]``, ``dt[bool_mask]``), which always
returns a DictTensor and keeps the batch dimension. ``len()`` is deliberately
not defined, because "number of keys" and "number of rows" are both plausible
readings: use ``DictTensor.n_elems`` for rows.

Nothing here changes a dtype or a device behind the caller's back: operations
that would promote dtypes (``cat``, ``stack``, ``where``, row copies) raise
instead, and only ``DictTensor.to`` moves data.

Examples:
    >>> import torch
    >>> from rlstruct import DictTensor
    >>> dt = DictTensor({"obs": torch.zeros(4, 3), "reward": torch.arange(4.0)})
    >>> dt.n_elems()
    4
    >>> dt[1:3]["reward"]
    tensor([1., 2.])
    >>> DictTensor.cat([dt, dt]).n_elems()
    8
"""

from __future__ import annotations

import numbers
import operator
from collections.abc import Callable, ItemsView, Iterable, Iterator, KeysView, Mapping, Sequence, ValuesView
from typing import overload

import torch

from rlstruct.checks import check_device, is_int, unusable_device
from rlstruct.errors import describe
from rlstruct.specs import Specs, TensorSpec

__all__ = ["DictTensor", "RowIndex", "masked_dicttensor"]

RowIndex = int | slice | torch.Tensor | list[int]
"""What selects rows: an int (or a 0-d integer tensor), a slice, a 1-D int64 (or
int32) tensor, a 1-D bool mask of length B, or a list of ints."""

_INT_DTYPES = (torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64)

Device = torch.device | str | int


class DictTensor:
    """A mapping from ``str`` keys to tensors ``[B, ...]`` on one device.

    Args:
        data: the key -> tensor pairs. Every tensor has at least one dimension
            (a scalar per row is shape ``[B]``), the same size B along dim 0,
            and the same device. The tensors are stored as given, not copied.
        batch_size: the number of rows B. Required only when ``data`` is empty
            (it then defaults to 0); otherwise checked against the values.

    Raises:
        TypeError: if ``data`` is not a mapping, a key not a ``str`` or a value
            not a ``torch.Tensor``.
        ValueError: if a value has no batch dimension, the values disagree on
            B or on the device, or ``batch_size`` disagrees with them.

    Examples:
        >>> import torch
        >>> dt = DictTensor({"action": torch.tensor([0, 1, 1]), "logp": torch.zeros(3)})
        >>> sorted(dt.keys()), dt.n_elems(), dt.device
        (['action', 'logp'], 3, device(type='cpu'))
        >>> DictTensor(batch_size=5).n_elems()
        5
    """

    __slots__ = ("_batch_size", "_data", "_device", "_dtypes")

    _data: dict[str, torch.Tensor]
    _batch_size: int
    _device: torch.device | None
    # The (key, dtype) pairs in key order, computed when first needed and handed on
    # to DictTensors derived with the same keys and dtypes, so that cat and stack
    # check dtypes once per DictTensor rather than once per tensor.
    _dtypes: tuple[tuple[str, torch.dtype], ...] | None

    def __init__(
        self, data: Mapping[str, torch.Tensor] | None = None, *, batch_size: int | None = None
    ) -> None:
        if data is not None and not isinstance(data, Mapping):
            raise TypeError(
                f"DictTensor: data must be a mapping of str keys to tensors, got {describe(data)}"
            )
        data = dict(data) if data is not None else {}
        if batch_size is not None and (not is_int(batch_size) or batch_size < 0):
            raise ValueError(f"DictTensor: batch_size must be a non-negative int, got {batch_size!r}")
        batch_size = None if batch_size is None else int(batch_size)  # a NumPy int counts too
        device: torch.device | None = None
        first_key = None
        rows_from = "batch_size" if batch_size is not None else None
        for key, value in data.items():
            if not isinstance(key, str):
                raise TypeError(f"DictTensor: keys must be str, got {key!r} ({type(key).__name__})")
            if not isinstance(value, torch.Tensor):
                raise TypeError(
                    f"DictTensor: value of key {key!r} must be a torch.Tensor, got {describe(value)}"
                )
            if value.dim() == 0:
                raise ValueError(
                    f"DictTensor: value of key {key!r} must have a batch dimension (shape [B, ...]), "
                    f"got a 0-d tensor; use shape [B] for a scalar per row"
                )
            if batch_size is None:
                batch_size, device, first_key = value.shape[0], value.device, key
                rows_from = f"key {key!r}"
            elif device is None:
                device, first_key = value.device, key
            if value.shape[0] != batch_size:
                raise ValueError(
                    f"DictTensor: value of key {key!r} has {value.shape[0]} rows, expected "
                    f"{batch_size} (from {rows_from}); got shape {tuple(value.shape)}"
                )
            if value.device != device:
                raise ValueError(
                    f"DictTensor: value of key {key!r} is on {value.device}, expected {device} "
                    f"(the device of key {first_key!r}); all values must share one device"
                )
        self._data = data
        self._batch_size = 0 if batch_size is None else batch_size
        self._device = device
        self._dtypes = None

    @classmethod
    def unchecked(
        cls,
        data: dict[str, torch.Tensor],
        batch_size: int,
        device: torch.device | None,
        dtypes: tuple[tuple[str, torch.dtype], ...] | None = None,
    ) -> DictTensor:
        """Build without any validation, from values the caller knows to be consistent.

        The fast constructor, for code that made the values itself (an
        environment's step, a batcher's buffers): nothing is checked, copied
        or converted, so a mistake here surfaces later, far from its cause.
        Use ``DictTensor(data)`` anywhere the values come from elsewhere.

        Args:
            data: the key -> tensor pairs. The caller guarantees what
                ``DictTensor(data)`` would check: str keys, tensors of at least
                one dimension, ``batch_size`` rows each, all on ``device``.
                The dict itself is stored, not copied: the caller must not
                mutate it afterwards.
            batch_size: the number of rows B.
            device: the device of the values; None exactly when ``data`` is empty.
            dtypes: the ``(key, dtype)`` pairs of ``data``, in its key order
                (a cache that ``cat`` and ``stack`` compare). Give it only when
                ``data`` has exactly those keys, in that order, with those
                dtypes; None (the default) computes it when first needed.

        Returns:
            A DictTensor over ``data``.

        Examples:
            >>> values = {"reward": torch.zeros(3)}
            >>> DictTensor.unchecked(values, 3, torch.device("cpu")).n_elems()
            3
        """
        out = object.__new__(cls)
        out._data = data
        out._batch_size = batch_size
        out._device = device
        out._dtypes = dtypes
        return out

    def derive(
        self,
        data: dict[str, torch.Tensor],
        device: torch.device | None = None,
        batch_size: int | None = None,
    ) -> DictTensor:
        """Build without validation a DictTensor with this one's keys and dtypes from new values.

        The fast path for an operation applied key by key (a slice in time, a
        padding, a copy): the new DictTensor shares this one's cached dtype
        signature, so that ``cat`` and ``stack`` of the results stay cheap.
        Nothing is checked, as for ``unchecked``.

        Args:
            data: new values with exactly this DictTensor's keys, in its key
                order, with its dtypes; all with the same number of rows, on
                ``device`` (or on this DictTensor's device if ``device`` is
                None). The dict is stored, not copied: the caller must not
                mutate it afterwards.
            device: the device of the new values, if it is not this one's.
            batch_size: the number of rows. If None, read from the first
                value, or (with no keys) this DictTensor's.

        Returns:
            A DictTensor over ``data``; this DictTensor is not changed.

        Examples:
            >>> dt = DictTensor({"x": torch.arange(6).view(3, 2)})
            >>> dt.derive({"x": dt["x"][:, :1]})["x"].shape
            torch.Size([3, 1])
        """
        if batch_size is None:
            batch_size = next(iter(data.values())).shape[0] if data else self._batch_size
        return DictTensor.unchecked(data, batch_size, device or self._device, self._dtype_signature())

    def _dtype_signature(self) -> tuple[tuple[str, torch.dtype], ...]:
        if self._dtypes is None:
            self._dtypes = tuple((k, v.dtype) for k, v in self._data.items())
        return self._dtypes

    # ------------------------------------------------------------------ mapping side

    @property
    def device(self) -> torch.device | None:
        """The device of the values, or None when there are no keys."""
        return self._device

    @property
    def tensors(self) -> Mapping[str, torch.Tensor]:
        """The key -> tensor dict itself, for code on a hot path that reads many keys.

        Not a copy: it is read-only by contract. Do not add, remove or replace
        keys through it (that would bypass the checks of ``set`` and leave
        ``device`` and the cached dtypes stale); use ``set`` or a new
        DictTensor. Writing into the tensors' storage (``copy_``) is fine.

        Examples:
            >>> dt = DictTensor({"x": torch.zeros(2)})
            >>> dt.tensors["x"] is dt["x"]
            True
        """
        return self._data

    def n_elems(self) -> int:
        """The number of rows B."""
        return self._batch_size

    def keys(self) -> KeysView[str]:
        """The keys, in insertion order."""
        return self._data.keys()

    def values(self) -> ValuesView[torch.Tensor]:
        """The tensors, in key order."""
        return self._data.values()

    def items(self) -> ItemsView[str, torch.Tensor]:
        """The (key, tensor) pairs, in key order."""
        return self._data.items()

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def empty(self) -> bool:
        """Whether there are no keys (a DictTensor with keys but zero rows is not empty)."""
        return not self._data

    def _missing(self, key: object) -> KeyError:
        return KeyError(f"DictTensor has no key {key!r}; its keys are {list(self._data)}")

    def get(self, keys: str | Iterable[str], clone: bool = False) -> DictTensor:
        """Select some keys.

        Args:
            keys: one key or several.
            clone: copy the tensors instead of sharing them.

        Returns:
            A DictTensor with only ``keys``, same rows and device.

        Raises:
            TypeError: if ``keys`` is not a str or an iterable of str.
            KeyError: naming a key that is not present.
        """
        keys = key_list("DictTensor.get", keys)
        data = {}
        for key in keys:
            if key not in self._data:
                raise self._missing(key)
            data[key] = self._data[key].clone() if clone else self._data[key]
        return DictTensor.unchecked(data, self._batch_size, self._device if data else None)

    def set(self, key: str, value: torch.Tensor, *, op: str = "DictTensor.set") -> None:
        """Add or replace a key, in place. The tensor is stored, not copied.

        Args:
            key: the key.
            value: a tensor ``[B, ...]``, on this DictTensor's device (any
                device if it has no keys yet).
            op: the name the error messages begin with: a structure that
                stores through its DictTensor gives its own
                (``TemporalDictTensor.set`` does).

        Raises:
            TypeError: if ``key`` is not a str or ``value`` not a tensor.
            ValueError: if ``value`` does not have B rows or is on another device.
        """
        if not isinstance(key, str):
            raise TypeError(f"{op}: key must be str, got {key!r}")
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"{op}: value of key {key!r} must be a torch.Tensor, got {describe(value)}")
        if value.dim() == 0 or value.shape[0] != self._batch_size:
            raise ValueError(
                f"{op}: value of key {key!r} must have {self._batch_size} rows, got shape {tuple(value.shape)}"
            )
        if self._device is not None and value.device != self._device:
            raise ValueError(f"{op}: value of key {key!r} is on {value.device}, expected {self._device}")
        self._data[key] = value
        self._device = value.device
        self._dtypes = None

    def prepend_key(self, prefix: str) -> DictTensor:
        """A DictTensor whose keys are ``prefix + key``; the tensors are shared.

        Raises:
            TypeError: if ``prefix`` is not a str.
        """
        _check_prefix("DictTensor.prepend_key", prefix)
        return DictTensor.unchecked(
            {prefix + k: v for k, v in self._data.items()}, self._batch_size, self._device
        )

    def truncate_key(self, prefix: str) -> DictTensor:
        """The keys that start with ``prefix``, with ``prefix`` removed; the tensors are shared.

        Examples:
            >>> dt = DictTensor({"env/gravity": torch.ones(2), "agent/eps": torch.zeros(2)})
            >>> list(dt.truncate_key("env/").keys())
            ['gravity']

        Raises:
            TypeError: if ``prefix`` is not a str.
        """
        _check_prefix("DictTensor.truncate_key", prefix)
        data = {k[len(prefix) :]: v for k, v in self._data.items() if k.startswith(prefix)}
        return DictTensor.unchecked(data, self._batch_size, self._device if data else None)

    def merge(self, other: DictTensor) -> DictTensor:
        """The union of two DictTensors with disjoint keys (also ``self | other``).

        Raises:
            TypeError: if ``other`` is not a DictTensor.
            ValueError: if keys overlap, or B or the device differ.
        """
        if not isinstance(other, DictTensor):
            raise TypeError(f"DictTensor.merge: other must be a DictTensor, got {describe(other)}")
        common = [k for k in other._data if k in self._data]
        if common:
            raise ValueError(f"DictTensor.merge: the keys must be disjoint, both hold {common}")
        if other._batch_size != self._batch_size:
            raise ValueError(
                f"DictTensor.merge: other has {other._batch_size} rows, expected {self._batch_size}"
            )
        if self._data and other._data and other._device != self._device:
            raise ValueError(f"DictTensor.merge: other is on {other._device}, expected {self._device}")
        return DictTensor.unchecked(
            {**self._data, **other._data}, self._batch_size, self._device or other._device
        )

    def __or__(self, other: DictTensor) -> DictTensor:
        return self.merge(other)

    def specs(self) -> Specs:
        """The per-row shape and dtype of every key."""
        return Specs({k: TensorSpec(tuple(v.shape[1:]), v.dtype) for k, v in self._data.items()})

    @staticmethod
    def zeros(
        specs: Specs, batch_size: int, *, device: Device | None = None, shared: bool = False
    ) -> DictTensor:
        """Allocate a zero-filled DictTensor of ``batch_size`` rows laid out by ``specs``.

        Args:
            specs: the per-row shape and dtype of every key (``dt.specs()``
                gives those of an existing DictTensor).
            batch_size: the number of rows B.
            device: where to allocate; the default device if None.
            shared: move the storage to shared memory (CPU only), so that
                other processes can write into it.

        Returns:
            A new DictTensor whose key ``k`` holds ``[B, *specs[k].shape]`` zeros
            of dtype ``specs[k].dtype``. With no keys, an empty DictTensor of B rows.

        Raises:
            TypeError: if ``specs`` is not a ``Specs``, or ``device`` not a
                device, a str or an int.
            ValueError: if ``batch_size`` is not a non-negative int, or
                ``device`` names no device or one this torch cannot use.

        Examples:
            >>> import torch
            >>> step = DictTensor({"obs": torch.ones(2, 4), "done": torch.ones(2, dtype=torch.bool)})
            >>> buffer = DictTensor.zeros(step.specs(), 8)
            >>> buffer["obs"].shape, buffer["done"].dtype
            (torch.Size([8, 4]), torch.bool)
        """
        if not isinstance(specs, Specs):
            raise TypeError(f"DictTensor.zeros: specs must be a Specs, got {describe(specs)}")
        if not is_int(batch_size) or batch_size < 0:
            raise ValueError(f"DictTensor.zeros: batch_size must be a non-negative int, got {batch_size!r}")
        batch_size = int(batch_size)
        if device is not None:
            device = check_device("DictTensor.zeros", device)
        data = {}
        with unusable_device("DictTensor.zeros", device):
            for key, spec in specs.items():
                value = torch.zeros((batch_size, *spec.shape), dtype=spec.dtype, device=device)
                data[key] = value.share_memory_() if shared else value
        return DictTensor(data, batch_size=batch_size)

    # ------------------------------------------------------------------ rows

    def normalize_index(self, index: RowIndex) -> int | slice | torch.Tensor:
        """Check a row index and return the index that selects the same rows of any tensor ``[B, ...]``.

        This is how a structure keeps tensors of its own (such as
        ``TemporalDictTensor.lengths``) in step with ``index``: the result
        indexes them as ``index`` would index this DictTensor, keeping the
        batch dimension.

        Args:
            index: as for ``index``.

        Returns:
            ``index`` itself for a slice or a tensor; a one-row slice for an
            int or a 0-d integer tensor (negative ints counted from the end);
            an int64 tensor for a list of ints.

        Raises:
            IndexError: if an int is out of range or a bool mask has the wrong
                length (tensor indices are checked when they are used).
            TypeError, ValueError: for an index of another kind or shape.

        Examples:
            >>> dt = DictTensor({"x": torch.zeros(4)})
            >>> dt.normalize_index(-1), dt.normalize_index([0, 2])
            (slice(3, 4, None), tensor([0, 2]))
        """
        n = self._batch_size
        if isinstance(index, torch.Tensor) and index.dim() == 0 and index.dtype in _INT_DTYPES:
            index = int(index)  # as torch reads a 0-d integer tensor: an int
        if isinstance(index, bool):
            raise TypeError("DictTensor: a bool is not a row index; use a bool tensor of shape [B]")
        if isinstance(index, numbers.Integral):
            index = int(index)
            if not -n <= index < n:
                raise IndexError(f"DictTensor: row index {index} is out of range for {n} rows")
            index = index % n
            return slice(index, index + 1)
        if isinstance(index, slice):
            for name, bound in (("start", index.start), ("stop", index.stop), ("step", index.step)):
                if bound is None:
                    continue
                try:  # as Python reads a slice's bounds: ints, NumPy ints, 0-d int tensors
                    operator.index(bound)
                except TypeError:
                    raise TypeError(
                        f"DictTensor: a row slice's {name} must be an int or None, got {describe(bound)}"
                    ) from None
            if index.step is not None and index.step <= 0:
                raise ValueError(f"DictTensor: slice step must be positive, got {index.step}")
            return index
        if isinstance(index, list):
            for item in index:
                if isinstance(item, bool) or not isinstance(item, numbers.Integral):
                    raise TypeError(
                        f"DictTensor: a list row index must hold ints, got an element {item!r} "
                        f"({type(item).__name__}); use a bool tensor of shape [B] as a row mask"
                    )
            index = torch.as_tensor(index, dtype=torch.int64)
        if isinstance(index, torch.Tensor):
            if index.dim() != 1:
                raise ValueError(
                    f"DictTensor: a row index tensor must be 1-D, got shape {tuple(index.shape)}"
                )
            if index.dtype == torch.bool:
                if index.shape[0] != n:
                    raise IndexError(
                        f"DictTensor: a bool row mask must have {n} elements, got {index.shape[0]}"
                    )
                return index
            if index.dtype in (torch.int64, torch.int32):
                return index
            raise TypeError(
                f"DictTensor: a row index tensor must be int64 (or int32) or bool, got {index.dtype}"
            )
        raise TypeError(
            "DictTensor: rows are indexed by an int, a slice, a list of ints, an int64 (or int32) tensor "
            f"or a bool tensor, got {describe(index)}"
        )

    def _rows(self, index: int | slice | torch.Tensor) -> int:
        """How many rows a normalized index selects."""
        if isinstance(index, slice):
            return len(range(*index.indices(self._batch_size)))
        if isinstance(index, torch.Tensor) and index.dtype == torch.bool:
            return int(index.sum())
        assert isinstance(index, torch.Tensor)
        if index.numel() and (int(index.max()) >= self._batch_size or int(index.min()) < -self._batch_size):
            raise IndexError(
                f"DictTensor: row indices must lie in [-{self._batch_size}, {self._batch_size}), "
                f"got values from {int(index.min())} to {int(index.max())}"
            )
        return index.shape[0]

    def _select(self, index: RowIndex) -> DictTensor:
        index = self.normalize_index(index)
        if not self._data:
            return DictTensor.unchecked({}, self._rows(index), None)
        try:
            data = {k: v[index] for k, v in self._data.items()}
        except (IndexError, RuntimeError):
            self._rows(index)  # raises the clearer message if indices are out of range
            raise
        return self.derive(data)

    @overload
    def __getitem__(self, index: str) -> torch.Tensor: ...

    @overload
    def __getitem__(self, index: RowIndex) -> DictTensor: ...

    def __getitem__(self, index: str | RowIndex) -> torch.Tensor | DictTensor:
        """``dt["key"]`` is a tensor; any row index gives a DictTensor (see ``index``)."""
        if isinstance(index, str):
            try:
                return self._data[index]
            except KeyError:
                raise self._missing(index) from None
        return self._select(index)

    def index(self, index: RowIndex) -> DictTensor:
        """Select rows.

        Args:
            index: an int (one row, kept as a batch of 1), a slice, a list of
                ints, a 1-D int64 tensor (any order, repeats allowed) or a 1-D
                bool tensor of length B.

        Returns:
            A DictTensor of the selected rows. Ints and slices give views that
            share storage with this DictTensor; tensors and lists give copies.

        Raises:
            IndexError: if an index is out of range or a bool mask has the wrong length.
            TypeError, ValueError: for an index of another kind or shape.

        Examples:
            >>> dt = DictTensor({"x": torch.arange(5)})
            >>> dt.index(torch.tensor([4, 0]))["x"]
            tensor([4, 0])
            >>> dt.index(dt["x"] % 2 == 0)["x"]
            tensor([0, 2, 4])
        """
        return self._select(index)

    def slice(self, start: int, end: int | None = None) -> DictTensor:
        """Rows ``start`` to ``end`` (exclusive; one row if ``end`` is None), as views.

        Raises:
            TypeError: if ``start`` or ``end`` is not an int.
            IndexError: if ``end`` is None and ``start`` is out of range.
        """
        for name, value in (("start", start), ("end", end)):
            if (value is not None or name == "start") and (
                isinstance(value, bool) or not isinstance(value, numbers.Integral)
            ):
                raise TypeError(f"DictTensor.slice: {name} must be an int, got {describe(value)}")
        return self._select(start if end is None else slice(start, end))

    def unfold(self) -> list[DictTensor]:
        """Split into B one-row DictTensors (views)."""
        return [self._select(slice(i, i + 1)) for i in range(self._batch_size)]

    def _check_compatible(self, src: DictTensor, op: str) -> None:
        if not isinstance(src, DictTensor):
            raise TypeError(f"{op}: expected a DictTensor, got {describe(src)}")
        if src.keys() != self.keys():
            raise ValueError(f"{op}: the keys differ: expected {sorted(self._data)}, got {sorted(src._data)}")
        for key, value in src._data.items():
            mine = self._data[key]
            if value.dtype != mine.dtype:
                raise TypeError(f"{op}: key {key!r} has dtype {value.dtype}, expected {mine.dtype}")
            if value.shape[1:] != mine.shape[1:]:
                raise ValueError(
                    f"{op}: key {key!r} has rows of shape {tuple(value.shape[1:])}, "
                    f"expected {tuple(mine.shape[1:])}"
                )

    def copy_(
        self, src: DictTensor, index: RowIndex | None = None, *, op: str = "DictTensor.copy_"
    ) -> DictTensor:
        """Copy ``src`` into some rows of this DictTensor, in place.

        This is how preallocated (for example shared-memory) buffers are filled:
        ``buffer.copy_(step, rows)`` or ``buffer[rows] = step``.

        Args:
            src: a DictTensor with the same keys, dtypes and per-row shapes,
                and as many rows as ``index`` selects (or broadcastable to them).
                It may live on another device: the data is copied to this one.
            index: the rows to write; all rows if None.
            op: the name the error messages begin with: a structure that
                writes through its DictTensor gives its own
                (``TemporalDictTensor.copy_`` does).

        Returns:
            self.

        Raises:
            ValueError: if keys, per-row shapes or row counts differ.
            TypeError: if a dtype differs (values are never cast).
        """
        self._check_compatible(src, op)
        target = slice(None) if index is None else self.normalize_index(index)
        rows = self._rows(target)  # out-of-range indices raise a clear IndexError
        if src._batch_size not in (rows, 1):
            raise ValueError(f"{op}: src has {src._batch_size} rows, the index selects {rows}")
        for key, value in src._data.items():
            try:
                self._data[key][target] = value
            except RuntimeError as error:
                raise ValueError(
                    f"{op}: cannot write key {key!r} of shape {tuple(value.shape)} into the selected rows: {error}"
                ) from None
        return self

    def __setitem__(self, index: str | RowIndex, value: torch.Tensor | DictTensor) -> None:
        """``dt["key"] = tensor`` is ``set``; ``dt[rows] = other`` is ``copy_``."""
        if isinstance(index, str):
            if not isinstance(value, torch.Tensor):
                raise TypeError(
                    f"DictTensor: value of key {index!r} must be a torch.Tensor, got {describe(value)}"
                )
            self.set(index, value)
        else:
            if not isinstance(value, DictTensor):
                raise TypeError(f"DictTensor: rows are assigned from a DictTensor, got {describe(value)}")
            self.copy_(value, index)

    @staticmethod
    def _check_same(
        dicttensors: Sequence[DictTensor],
        op: str,
        *,
        check_rows: bool,
        names: Sequence[str] | None = None,
    ) -> DictTensor:
        # op is the full name used in messages, for example "DictTensor.cat"; names, the
        # arguments' names where they are not elements of one list (DictTensor.where).
        """Check that DictTensors agree on keys, dtypes, per-row shapes and device."""
        if isinstance(dicttensors, DictTensor) or not isinstance(dicttensors, Sequence):
            raise TypeError(f"{op}: expected a list of DictTensors, got {describe(dicttensors)}")
        if not dicttensors:
            raise ValueError(f"{op}: expected at least one DictTensor, got an empty list")

        def name(i: int) -> str:
            return names[i] if names is not None else f"element {i}"

        for i, dt in enumerate(dicttensors):
            if not isinstance(dt, DictTensor):
                raise TypeError(f"{op}: {name(i)} must be a DictTensor, got {describe(dt)}")
        first = dicttensors[0]
        for i, dt in enumerate(dicttensors[1:], 1):
            if dt.keys() != first.keys():
                raise ValueError(
                    f"{op}: {name(i)} has keys {sorted(dt._data)}, expected "
                    f"{sorted(first._data)} (the keys of {name(0)})"
                )
            if dt._device != first._device:
                raise ValueError(f"{op}: {name(i)} is on {dt._device}, expected {first._device}")
            if check_rows and dt._batch_size != first._batch_size:
                raise ValueError(f"{op}: {name(i)} has {dt._batch_size} rows, expected {first._batch_size}")
            for key, value in dt._data.items():
                ref = first._data[key]
                if value.dtype != ref.dtype:
                    raise TypeError(
                        f"{op}: key {key!r} of {name(i)} has dtype {value.dtype}, "
                        f"expected {ref.dtype} (the dtype in {name(0)})"
                    )
                if value.shape[1:] != ref.shape[1:]:
                    raise ValueError(
                        f"{op}: key {key!r} of {name(i)} has rows of shape "
                        f"{tuple(value.shape[1:])}, expected {tuple(ref.shape[1:])}"
                    )
        return first

    @staticmethod
    def cat(dicttensors: Sequence[DictTensor], *, op: str = "DictTensor.cat") -> DictTensor:
        """Concatenate along the rows.

        Args:
            dicttensors: a non-empty list of DictTensors with the same keys,
                dtypes, per-row shapes and device.
            op: the name the error messages begin with: a structure that
                concatenates through DictTensors gives its own
                (``TemporalDictTensor.cat`` does).

        Returns:
            A new DictTensor with the rows of all inputs, in order.

        Raises:
            TypeError: if an element is not a DictTensor or a dtype differs.
            ValueError: if the list is empty, or keys, shapes or devices differ.
        """
        first, data = DictTensor._join(dicttensors, op, torch.cat, check_rows=False)
        return first.derive(data, batch_size=sum(dt._batch_size for dt in dicttensors))

    @staticmethod
    def _join(
        dicttensors: Sequence[DictTensor],
        op: str,
        join: Callable[[list[torch.Tensor]], torch.Tensor],
        *,
        check_rows: bool,
    ) -> tuple[DictTensor, dict[str, torch.Tensor]]:
        """``join`` (torch.cat or torch.stack) key by key, with the guarantees of ``_check_same``.

        The common case is checked cheaply: a non-empty list or tuple of DictTensors
        with non-zero rows, the same device (and rows), and the same keys and dtypes
        in the same order, compared as one signature per DictTensor (torch would
        promote mixed dtypes silently). Per-row shapes are left to ``join``, which
        raises on any mismatch. Anything else, or any failure, goes through
        ``_check_same``, which raises the usual message. Zero-row inputs always take
        that route, because torch.cat skips 1-D empty tensors without comparing
        their shapes.
        """
        if isinstance(dicttensors, (list, tuple)) and dicttensors and isinstance(dicttensors[0], DictTensor):
            first = dicttensors[0]
            dtypes, device, rows = first._dtype_signature(), first._device, first._batch_size
            for dt in dicttensors:
                if not (
                    isinstance(dt, DictTensor)
                    and (dt._device is device or dt._device == device)
                    and dt._batch_size > 0
                    and (not check_rows or dt._batch_size == rows)
                    and (dt._dtypes is dtypes or dt._dtype_signature() == dtypes)
                ):
                    break
            else:
                try:
                    return first, {k: join([dt._data[k] for dt in dicttensors]) for k in first._data}
                except RuntimeError:
                    pass
        first = DictTensor._check_same(dicttensors, op, check_rows=check_rows)
        return first, {k: join([dt._data[k] for dt in dicttensors]) for k in first._data}

    @staticmethod
    def stack(dicttensors: Sequence[DictTensor], dim: int = 0) -> DictTensor:
        """Stack DictTensors with the same number of rows along a new dimension.

        Args:
            dicttensors: a non-empty list of N DictTensors with B rows each,
                the same keys, dtypes, per-row shapes and device.
            dim: 0 gives values ``[N, B, ...]`` (N rows); 1 gives ``[B, N, ...]``
                (B rows, N steps each: how per-step DictTensors become the
                data of a ``TemporalDictTensor``).

        Returns:
            A new DictTensor.

        Raises:
            TypeError, ValueError: as for ``cat``, and if row counts differ
                or ``dim`` is not 0 or 1.
        """
        if isinstance(dim, bool) or dim not in (0, 1):
            raise ValueError(f"DictTensor.stack: dim must be 0 or 1, got {dim!r}")
        first, data = DictTensor._join(
            dicttensors, "DictTensor.stack", lambda values: torch.stack(values, dim), check_rows=True
        )
        return first.derive(data, batch_size=len(dicttensors) if dim == 0 else first._batch_size)

    @staticmethod
    def where(condition: torch.Tensor, input: DictTensor, other: DictTensor) -> DictTensor:
        """Row-wise selection: row i from ``input`` where ``condition[i]``, else from ``other``.

        Args:
            condition: a bool tensor of shape [B].
            input: the DictTensor chosen where ``condition`` is True.
            other: the DictTensor chosen elsewhere; same keys, dtypes, shapes,
                rows and device as ``input``.

        Returns:
            A new DictTensor.

        Examples:
            >>> a = DictTensor({"x": torch.zeros(3, 2)})
            >>> b = DictTensor({"x": torch.ones(3, 2)})
            >>> DictTensor.where(torch.tensor([True, False, True]), a, b)["x"][:, 0]
            tensor([0., 1., 0.])
        """
        return _where(condition, input, other, "DictTensor.where", ("condition", "input", "other"))

    # ------------------------------------------------------------------ storage

    def _map(self, fn: object) -> DictTensor:
        data = {k: fn(v) for k, v in self._data.items()}  # type: ignore[operator]
        return self.derive(data, next(iter(data.values())).device if data else None)

    def to(self, device: Device, non_blocking: bool = False, *, op: str = "DictTensor.to") -> DictTensor:
        """Move to ``device`` (dtypes are kept). Values already there are not copied.

        Args:
            device: the target device.
            non_blocking: passed to ``torch.Tensor.to``; asynchronous from
                pinned CPU memory to CUDA.
            op: the name the error messages begin with: a structure that
                moves through its DictTensor gives its own
                (``TemporalDictTensor.to`` does).

        Raises:
            TypeError: if ``device`` is not a device, a str or an int (a dtype
                is refused: only ``to`` moves data, and it keeps dtypes).
            ValueError: if ``device`` is a str that names no device, or a
                device this torch cannot use (``"cuda"`` on a CPU-only build).
        """
        device = check_device(op, device)
        if self._data and device == self._device:
            # Tensor.to would return every value itself: share them, without the per-value calls
            return self.derive(dict(self._data))
        with unusable_device(op, device):
            return self._map(lambda v: v.to(device, non_blocking=non_blocking))

    def clone(self) -> DictTensor:
        """A deep copy of the values, on the same device."""
        return self._map(torch.clone)

    def detach(self) -> DictTensor:
        """The values detached from the autograd graph (storage shared)."""
        return self._map(torch.Tensor.detach)

    def pin_memory(self) -> DictTensor:
        """A copy in page-locked CPU memory, for fast ``to("cuda", non_blocking=True)``.

        Needs an accelerator-enabled torch build; raises RuntimeError otherwise.
        """
        return self._map(torch.Tensor.pin_memory)

    def share_memory_(self) -> DictTensor:
        """Move the CPU storage to shared memory, in place (a no-op on CUDA). Returns self."""
        for value in self._data.values():
            value.share_memory_()
        return self

    def is_shared(self) -> bool:
        """Whether every value lives in shared memory (True for an empty DictTensor)."""
        return all(v.is_shared() for v in self._data.values())

    def equal(self, other: DictTensor) -> bool:
        """Whether ``other`` has the same rows, keys, dtypes, shapes, devices and values (bitwise).

        Key order is not compared. NaNs compare unequal, as with ``torch.equal``.
        """
        return (
            isinstance(other, DictTensor)
            and self._batch_size == other._batch_size
            and self.keys() == other.keys()
            and all(
                v.dtype == other._data[k].dtype
                and v.shape == other._data[k].shape
                and v.device == other._data[k].device
                and torch.equal(v, other._data[k])
                for k, v in self._data.items()
            )
        )

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}: {tuple(v.shape[1:])} {v.dtype}" for k, v in self._data.items())
        return f"DictTensor(n_elems={self._batch_size}, device={self._device}, {{{fields}}})"


def masked_dicttensor(dt0: DictTensor, dt1: DictTensor, mask: torch.Tensor) -> DictTensor:
    """Rows of ``dt1`` where ``mask`` is True, of ``dt0`` elsewhere.

    The argument order of rlstructures' function of the same name; see
    ``DictTensor.where`` for the torch-style order.
    """
    return _where(mask, dt1, dt0, "masked_dicttensor", ("mask", "dt1", "dt0"))


def _where(
    condition: torch.Tensor, input: DictTensor, other: DictTensor, op: str, names: tuple[str, str, str]
) -> DictTensor:
    """``DictTensor.where``, its messages naming the caller's arguments: ``names`` of condition, input, other."""
    DictTensor._check_same([input, other], op, check_rows=True, names=names[1:])
    if not isinstance(condition, torch.Tensor) or condition.dtype != torch.bool:
        raise TypeError(f"{op}: {names[0]} must be a bool tensor, got {describe(condition)}")
    if input._device is not None and condition.device != input._device:
        raise ValueError(f"{op}: {names[0]} is on {condition.device}, expected {input._device}")
    if condition.shape != (input._batch_size,):
        raise ValueError(
            f"{op}: {names[0]} must have shape [{input._batch_size}], got {tuple(condition.shape)}"
        )
    data = {}
    for key, value in input._data.items():
        cond = condition.view((-1,) + (1,) * (value.dim() - 1))
        data[key] = torch.where(cond, value, other._data[key])
    return input.derive(data)


def key_list(op: str, keys: object) -> list[str]:
    """``keys`` (one str, or an iterable of str) as a list."""
    if isinstance(keys, str):
        return [keys]
    if isinstance(keys, Iterable):
        keys = list(keys)
        if all(isinstance(k, str) for k in keys):
            return keys
    raise TypeError(f"{op}: keys must be a str or an iterable of str, got {describe(keys)}")


def _check_prefix(op: str, prefix: object) -> None:
    if not isinstance(prefix, str):
        raise TypeError(f"{op}: prefix must be a str, got {describe(prefix)}")
