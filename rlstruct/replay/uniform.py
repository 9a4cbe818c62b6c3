"""``ReplayBuffer``: the last ``capacity`` transitions, sampled uniformly; ``ReplaySample``, what every buffer's ``sample`` returns."""

from __future__ import annotations

import contextlib
import math
import multiprocessing as mp
import os
import pickle
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import torch

from rlstruct.checks import check_device, check_int, check_keys, check_number
from rlstruct.dicttensor import DictTensor
from rlstruct.errors import describe
from rlstruct.specs import Specs
from rlstruct.temporal import TemporalDictTensor

__all__ = ["ReplayBuffer", "ReplaySample"]

_NO_LOCK = contextlib.nullcontext()


class ReplaySample(NamedTuple):
    """What every replay buffer's ``sample`` returns; unpack it as ``rows, indices, weights``.

    Attributes:
        rows: the drawn transitions, a DictTensor ``[batch_size, ...]`` of new
            tensors (never views of the storage) on the buffer's ``device``,
            with the stored keys and dtypes.
        indices: the slots the rows were drawn from: int64, shape
            ``[batch_size]``, on ``device`` (what
            ``PrioritizedReplayBuffer.update_priorities`` takes).
        weights: the importance-sampling weights of the rows: float32, shape
            ``[batch_size]``, on ``device``, in ``(0, 1]``; all ones for uniform
            and hindsight sampling, so that a weighted loss is the plain one.
    """

    rows: DictTensor
    indices: torch.Tensor
    weights: torch.Tensor


class ReplayBuffer:
    """The last ``capacity`` transitions, sampled uniformly with replacement.

    Args:
        capacity: the number of rows kept; a positive int.
        device: where the storage lives and samples are returned.
        generator: the random generator of ``sample``, on ``device``. If None,
            a new one seeded from torch's global generator (so
            ``torch.manual_seed`` makes the buffer reproducible).
        shared: keep the storage and counters in shared memory (CPU only), so
            that a spawned process given the buffer writes into the same
            storage; see the module's notes on concurrency.
        specs: the keys, per-row shapes and dtypes, to allocate the storage now
            rather than at the first add (needed before a shared buffer is
            handed to another process).
        timeout: how long, in seconds, a call waits for the lock of a shared
            buffer before raising ``TimeoutError``.

    Raises:
        ValueError: for a capacity below 1, a device name torch does not
            know, a device that cannot hold data here (``"meta"``, or
            ``"cuda"`` without CUDA), ``shared`` with a device other than CPU, a generator on
            another device, or a timeout that is not positive.
        TypeError: for a capacity that is not an int, a device or a timeout
            of the wrong type, or a generator or specs of the wrong type.
    """

    def __init__(
        self,
        capacity: int,
        *,
        device: torch.device | str = "cpu",
        generator: torch.Generator | None = None,
        shared: bool = False,
        specs: Specs | None = None,
        timeout: float = 30.0,
    ) -> None:
        name = type(self).__name__
        self._capacity = check_int(name, "capacity", capacity)
        if shared and check_device(name, device).type != "cpu":
            raise ValueError(f"{name}: shared storage must be on the CPU, got device {device}")
        self._device = check_device(name, device, usable=True)  # as tensors report it: cuda:0 for "cuda"
        if generator is None:
            generator = torch.Generator(device=self._device)
            generator.manual_seed(int(torch.randint(0, 2**62, ())))
        elif not isinstance(generator, torch.Generator):
            raise TypeError(f"{name}: generator must be a torch.Generator or None, got {describe(generator)}")
        elif generator.device.type != self._device.type:
            raise ValueError(
                f"{name}: generator is on {generator.device}, expected a generator on {self._device}"
            )
        self._generator = generator
        self._timeout = check_number(name, "timeout", timeout, 0.0, low_open=True)
        self._shared = bool(shared)
        # [write position, size]; on the CPU whatever the device, so that reading them never syncs
        self._counters = torch.zeros(2, dtype=torch.int64)
        self._lock: Any = None
        if self._shared:
            self._counters.share_memory_()
            self._lock = mp.get_context("spawn").Lock()
        self._counts = self._counters.numpy()  # a view, read and written without torch's per-op cost
        self._storage: DictTensor | None = None
        if specs is not None:
            if not isinstance(specs, Specs):
                raise TypeError(f"{name}: specs must be a Specs, got {describe(specs)}")
            self._allocate(specs)

    # ------------------------------------------------------------------ properties

    @property
    def capacity(self) -> int:
        """The number of rows the buffer keeps."""
        return self._capacity

    @property
    def device(self) -> torch.device:
        """Where the storage lives and samples are returned."""
        return self._device

    @property
    def shared(self) -> bool:
        """Whether the storage lives in shared memory."""
        return self._shared

    @property
    def generator(self) -> torch.Generator:
        """The random generator of ``sample``."""
        return self._generator

    def __len__(self) -> int:
        """The number of rows held: ``min(rows added, capacity)``."""
        return int(self._counts[1])

    def specs(self) -> Specs | None:
        """The per-row shapes and dtypes of the storage, or None before the first add."""
        return None if self._storage is None else self._storage.specs()

    def __repr__(self) -> str:
        keys = "no storage yet" if self._storage is None else f"keys {list(self._storage.keys())}"
        return f"{type(self).__name__}(capacity={self._capacity}, size={len(self)}, device={self._device}, {keys})"

    # ------------------------------------------------------------------ writing

    def add(self, transitions: DictTensor) -> None:
        """Append rows, overwriting the oldest ones once the buffer is full.

        The first add (unless ``specs`` was given) allocates the storage with
        the keys, per-row shapes and dtypes of ``transitions``. Rows are copied
        (to ``device`` if they are elsewhere), without their autograd history:
        a stored value never requires grad; a batch of more than
        ``capacity`` rows keeps its last ``capacity`` rows, as if they had been
        added one by one.

        Args:
            transitions: a DictTensor ``[n, ...]`` with the storage's keys,
                per-row shapes and dtypes, on any device.

        Raises:
            TypeError: if ``transitions`` is not a DictTensor, or a dtype differs.
            ValueError: if ``transitions`` has no keys, or keys or shapes differ.
            TimeoutError: if the lock of a shared buffer cannot be taken in time.
        """
        op = f"{type(self).__name__}.add"
        if not isinstance(transitions, DictTensor):
            raise TypeError(f"{op}: transitions must be a DictTensor, got {describe(transitions)}")
        if transitions.empty():
            raise ValueError(f"{op}: transitions must have at least one key, got none")
        if self._storage is None:
            self._allocate(transitions.specs())
        self._check_rows(transitions, op)
        n = transitions.n_elems()
        kept = min(n, self._capacity)
        if kept == 0:
            return
        with self._locked(op), torch.no_grad():  # a copy of a value that requires grad would join its graph
            position, size = int(self._counts[0]), int(self._counts[1])
            start = (position + n - kept) % self._capacity
            first = min(kept, self._capacity - start)
            storage = self._storage_or_raise(op)
            for key, value in transitions.items():
                value = value[n - kept :]
                storage[key][start : start + first].copy_(value[:first])
                if first < kept:
                    storage[key][: kept - first].copy_(value[first:])
            self._counts[0] = (position + n) % self._capacity
            self._counts[1] = min(size + n, self._capacity)
            self._written(start, kept)

    def add_trajectories(self, trajectories: TemporalDictTensor, keys: Sequence[str] | None = None) -> None:
        """Append the valid steps of trajectories (``masked_flatten``), row after row.

        Args:
            trajectories: a TemporalDictTensor ``[B, T, ...]``, for example a
                batcher's ``batch.trajectories``.
            keys: the keys to store; all of them if None.

        Raises:
            TypeError: if ``trajectories`` is not a TemporalDictTensor.
            ValueError: if a key is missing; and as ``add``.
        """
        op = f"{type(self).__name__}.add_trajectories"
        if not isinstance(trajectories, TemporalDictTensor):
            raise TypeError(f"{op}: trajectories must be a TemporalDictTensor, got {describe(trajectories)}")
        if keys is not None:
            trajectories = trajectories.get(
                check_keys(op, "keys", keys, trajectories.keys(), "the trajectories")
            )
        self.add(trajectories.masked_flatten())

    # ------------------------------------------------------------------ reading

    def sample(self, batch_size: int) -> ReplaySample:
        """Draw ``batch_size`` rows uniformly, with replacement.

        Returns:
            ``ReplaySample(rows, indices, weights)``: the rows (a DictTensor
            ``[batch_size, ...]`` of new tensors on ``device``, with the
            storage's keys and dtypes), their slots (int64 ``[batch_size]``) and
            weights of one (float32 ``[batch_size]``), both on ``device``.

        Raises:
            TypeError: if ``batch_size`` is not an int.
            ValueError: if ``batch_size`` is below 1.
            RuntimeError: if the buffer is empty.
        """
        op = f"{type(self).__name__}.sample"
        check_int(op, "batch_size", batch_size)
        with self._locked(op):
            size = self._size_or_raise(op)
            indices = torch.randint(size, (batch_size,), generator=self._generator, device=self._device)
            rows = self._gather(self._storage_or_raise(op), indices)
        return ReplaySample(rows, indices, torch.ones(batch_size, dtype=torch.float32, device=self._device))

    # ------------------------------------------------------------------ saving

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to restore the buffer exactly: contents, position, generator state.

        Returns:
            A dict of Python numbers and CPU tensors (the ``len(self)`` rows in
            use, copied), loadable with ``torch.load(..., weights_only=True)``.
        """
        with self._locked(f"{type(self).__name__}.state_dict"):
            position, size = int(self._counts[0]), int(self._counts[1])
            storage = None
            if self._storage is not None:
                storage = {k: v[:size].to("cpu", copy=True) for k, v in self._storage.items()}
            state = {
                "capacity": self._capacity,
                "position": position,
                "size": size,
                "storage": storage,
                "generator": self._generator.get_state(),
            }
            state.update(self._extra_state(size))
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore contents, position and generator state saved by ``state_dict``, in place.

        The storage keeps its device and stays shared if it is; an empty buffer
        allocates it from the saved keys, shapes and dtypes.

        Raises:
            TypeError: if ``state`` is not a mapping, or a saved dtype differs
                from the storage's.
            ValueError: if the capacity, keys or shapes differ, or the state is
                incomplete.
        """
        op = f"{type(self).__name__}.load_state_dict"
        if not isinstance(state, Mapping):
            raise TypeError(f"{op}: state must be a dict from state_dict(), got {describe(state)}")
        missing = [k for k in ("capacity", "position", "size", "storage", "generator") if k not in state]
        if missing:
            raise ValueError(f"{op}: state lacks the entries {missing}; was it made by state_dict()?")
        if state["capacity"] != self._capacity:
            raise ValueError(
                f"{op}: the state has capacity {state['capacity']}, this buffer {self._capacity}"
            )
        self._check_extra_state(state, op)
        saved = state["storage"]
        size = int(state["size"])
        if saved is not None:
            rows = DictTensor(saved)
            if rows.n_elems() != size:
                raise ValueError(f"{op}: the state holds {rows.n_elems()} rows but size {size}")
            if self._storage is None:
                self._allocate(rows.specs())
            self._check_rows(rows, op)
        with self._locked(op), torch.no_grad():  # a saved value that requires grad is stored without it
            if saved is not None:
                for key, value in self._storage_or_raise(op).items():
                    value[:size].copy_(rows[key])
                    value[size:].zero_()
            self._counts[0] = int(state["position"])
            self._counts[1] = size
            self._generator.set_state(state["generator"])
            self._load_extra_state(state)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write ``state_dict()`` to ``path`` with ``torch.save``.

        Raises:
            TypeError: if ``path`` is not a str or ``os.PathLike``.
            ValueError: if ``path`` is empty.
            FileNotFoundError: if the folder of ``path`` does not exist.
            IsADirectoryError: if ``path`` is a folder.
        """
        path = save_path(f"{type(self).__name__}.save", path)
        torch.save(self.state_dict(), path)

    def load(self, path: str | os.PathLike[str]) -> None:
        """Restore, in place, a buffer written by ``save`` (loaded with ``weights_only=True``).

        Raises:
            TypeError: if ``path`` is not a str or ``os.PathLike``; and as ``load_state_dict``.
            FileNotFoundError: if there is no file at ``path``.
            IsADirectoryError: if ``path`` is a folder.
            ValueError: if ``path`` is empty or the file is not one ``save`` writes; and as
                ``load_state_dict``.
        """
        self.load_state_dict(read_state(f"{type(self).__name__}.load", path))

    # ------------------------------------------------------------------ internals

    def _allocate(self, specs: Specs) -> None:
        self._storage = interleaved_zeros(specs, self._capacity, device=self._device, shared=self._shared)

    def _check_rows(self, rows: DictTensor, op: str) -> None:
        """Rows must have exactly the storage's keys, per-row shapes and dtypes."""
        storage = self._storage_or_raise(op)
        if rows.keys() != storage.keys():
            missing = sorted(set(storage.keys()) - set(rows.keys()))
            extra = sorted(set(rows.keys()) - set(storage.keys()))
            raise ValueError(
                f"{op}: expected the keys of the buffer's storage {sorted(storage.keys())}, "
                f"got {sorted(rows.keys())} (missing {missing}, unexpected {extra})"
            )
        for key, value in rows.items():
            expected = storage[key]
            if value.dtype != expected.dtype:
                raise TypeError(
                    f"{op}: key {key!r} has dtype {value.dtype}, expected {expected.dtype} "
                    "(the dtype of the buffer's storage; values are never cast)"
                )
            if value.shape[1:] != expected.shape[1:]:
                raise ValueError(
                    f"{op}: key {key!r} has rows of shape {tuple(value.shape[1:])}, "
                    f"expected {tuple(expected.shape[1:])} (the buffer's storage)"
                )

    @contextlib.contextmanager
    def locked_storage(self, op: str = "ReplayBuffer.locked_storage") -> Iterator[tuple[DictTensor, int]]:
        """The storage and how many of its rows hold transitions, with a shared buffer's lock held meanwhile.

        For samplers built on the buffer (``HindsightReplayBuffer``): read
        rows ``[0, size)`` of the storage inside the block, write nothing.

        Args:
            op: the name error messages start with.

        Raises:
            RuntimeError: if the buffer is empty.
            TimeoutError: if a shared buffer's lock cannot be taken within its timeout.
        """
        with self._locked(op):
            size = self._size_or_raise(op)
            yield self._storage_or_raise(op), size

    def _gather(self, storage: DictTensor, indices: torch.Tensor) -> DictTensor:
        """Rows ``indices`` of the storage (int64 [n], in range, on ``device``), as new tensors.

        ``index_select`` per key copies each row whole; the advanced indexing
        of ``DictTensor.index`` (``value[indices]``) copies element by element,
        which costs several times more once rows hold hundreds of values (the
        chunks of a ``SequenceReplayBuffer``) and miss the cache.
        """
        return storage.derive({key: value.index_select(0, indices) for key, value in storage.items()})

    def _storage_or_raise(self, op: str) -> DictTensor:
        if self._storage is None:
            raise RuntimeError(f"{op}: the buffer has no storage yet; add transitions first")
        return self._storage

    def _size_or_raise(self, op: str) -> int:
        size = int(self._counts[1])
        if size == 0:
            raise RuntimeError(f"{op}: cannot sample from an empty buffer; add transitions first")
        return size

    def _locked(self, op: str) -> contextlib.AbstractContextManager[None]:
        """Hold the lock of a shared buffer (nothing to hold for a private one)."""
        return _NO_LOCK if self._lock is None else self._hold_lock(op)

    @contextlib.contextmanager
    def _hold_lock(self, op: str) -> Iterator[None]:
        if not self._lock.acquire(timeout=self._timeout):
            raise TimeoutError(
                f"{op}: could not take the shared buffer's lock within {self._timeout} s; another process "
                "holds it (it may have died or hung while adding)"
            )
        try:
            yield
        finally:
            self._lock.release()

    def _written(self, start: int, n: int) -> None:
        """Called under the lock after ``n`` rows were written from slot ``start`` (wrapping)."""

    def _extra_state(self, size: int) -> dict[str, Any]:
        return {}

    def _check_extra_state(self, state: Mapping[str, Any], op: str) -> None:
        if "priorities" in state:  # loading it here would drop them
            raise ValueError(
                f"{op}: the state holds priorities (saved by a PrioritizedReplayBuffer); load it into one"
            )

    def _load_extra_state(self, state: Mapping[str, Any]) -> None:
        pass

    def __getstate__(self) -> dict[str, Any]:
        if self._shared and self._storage is None:
            raise RuntimeError(
                f"{type(self).__name__}: a shared buffer needs its storage before it is handed to another "
                "process; pass specs= or add a first batch"
            )
        state = self.__dict__.copy()
        # a generator pickled as such would go through torch's shared-memory reductions, which fail on
        # its state tensor: send its device and state as plain bytes instead
        del state["_counts"]  # rebuilt from the (shared) tensor on the other side
        generator = state.pop("_generator")
        state["_generator_state"] = (str(generator.device), generator.get_state().numpy().tobytes())
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        device, generator_state = state.pop("_generator_state")
        generator = torch.Generator(device=device)
        generator.set_state(torch.frombuffer(bytearray(generator_state), dtype=torch.uint8))
        state["_generator"] = generator
        self.__dict__.update(state)
        self._counts = self._counters.numpy()


@contextlib.contextmanager
def told_as(inner: str, op: str) -> Iterator[None]:
    """Re-raise the ``TypeError`` or ``ValueError`` of a wrapped buffer's call ``inner`` as ``op``'s.

    A buffer built on another (``HindsightReplayBuffer``,
    ``SequenceReplayBuffer``) names the method its user called, not the one
    of its storage.
    """
    try:
        yield
    except (TypeError, ValueError) as error:
        raise type(error)(str(error).replace(f"{inner}:", f"{op}:", 1)) from error


def _file_path(op: str, path: object, must: str, suggest: str | None = None) -> Path:
    """``path`` as a ``Path``, refused if it is no str or ``os.PathLike``, empty, or a folder.

    ``must`` says what it must do ("name the file to write"); for a folder,
    ``suggest`` names a file in it to give instead.
    """
    if not isinstance(path, str | os.PathLike):
        raise TypeError(f"{op}: path must be a str or os.PathLike, got {describe(path)}")
    if os.fspath(path) in ("", b""):
        raise ValueError(f"{op}: path must {must}, got ''")
    file = Path(os.fsdecode(path))
    if file.is_dir():
        hint = f" (such as {str(file / suggest)!r})" if suggest else ""
        raise IsADirectoryError(f"{op}: path must {must}, got the folder {str(file)!r}{hint}")
    return file


def save_path(op: str, path: object) -> Path:
    """``path`` as the file a buffer's ``save`` writes, checked before the state is gathered.

    Raises:
        TypeError: if ``path`` is not a str or ``os.PathLike``.
        ValueError: if ``path`` is empty.
        FileNotFoundError: if the folder of ``path`` does not exist (torch would say only
            "Parent directory ... does not exist", as a RuntimeError).
        IsADirectoryError: if ``path`` is a folder.
    """
    file = _file_path(op, path, "name the file to write", suggest="buffer.pt")
    if not file.parent.is_dir():
        raise FileNotFoundError(f"{op}: the folder of path {str(file)!r} does not exist")
    return file


def read_state(op: str, path: object) -> Any:
    """The state a buffer's ``save`` wrote to ``path``, read on the CPU with ``weights_only=True``.

    Raises:
        TypeError: if ``path`` is not a str or ``os.PathLike``.
        FileNotFoundError: if there is no file at ``path``.
        IsADirectoryError: if ``path`` is a folder.
        ValueError: if ``path`` is empty, or the file is not one ``torch.save`` writes, or holds
            objects ``weights_only`` refuses (torch's reason is kept).
    """
    file = _file_path(op, path, "name a file written by save")
    if not file.is_file():
        raise FileNotFoundError(f"{op}: there is no file {str(file)!r}")
    if file.stat().st_size == 0:
        raise ValueError(f"{op}: {str(file)!r} is empty, not a buffer written by save")
    try:
        return torch.load(file, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, EOFError, KeyError, RuntimeError) as error:
        reason = " ".join(str(error).split())
        raise ValueError(
            f"{op}: {str(file)!r} is not a buffer written by save ({type(error).__name__}: {reason[:300]})"
        ) from error


def interleaved_zeros(specs: Specs, rows: int, *, device: torch.device, shared: bool) -> DictTensor:
    """Zeros laid out by ``specs`` as ``DictTensor.zeros`` lays them, but each row's keys side by side.

    Key ``k`` is a view ``[rows, *specs[k].shape]`` into one byte tensor
    ``[rows, width]``: row ``i`` of every key lies in bytes ``[i * width,
    (i + 1) * width)``, each key at an offset aligned to its element size.
    A sample of n rows from a buffer too large for the processor's caches
    then brings n stretches of main memory in, not n per key
    (``benchmarks/replay.py``). A key with no values per row gets a tensor
    of its own.
    """
    offsets: dict[str, int] = {}
    width, align = 0, 1
    numel = {key: math.prod(spec.shape) for key, spec in specs.items()}
    for key, spec in specs.items():
        size = spec.dtype.itemsize
        if numel[key] > 0:
            offsets[key] = -(-width // size) * size  # the next offset aligned to the element size
            width = offsets[key] + numel[key] * size
            align = max(align, size)
    block = torch.zeros((rows, -(-width // align) * align), dtype=torch.uint8, device=device)
    data = {}
    for key, spec in specs.items():
        if key in offsets:
            start = offsets[key]
            view = block[:, start : start + numel[key] * spec.dtype.itemsize]
            data[key] = view.view(spec.dtype).view(rows, *spec.shape)
        else:
            data[key] = torch.zeros((rows, *spec.shape), dtype=spec.dtype, device=device)
    if shared:  # the storage moves in place: the views move with the block
        block.share_memory_()
        for key in specs.keys() - offsets.keys():
            data[key].share_memory_()
    return DictTensor(data, batch_size=rows)
