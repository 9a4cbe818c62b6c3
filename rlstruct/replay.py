"""Replay buffers on DictTensor storage: uniform, prioritized and hindsight relabelling.

A replay buffer keeps the last ``capacity`` transitions, one row per
transition, in one preallocated tensor per key (a ring buffer: once full, each
add overwrites the oldest rows). The first add (or ``specs=``) fixes the keys,
per-row shapes and dtypes; every later add must match them exactly, since
values are never cast. Transitions usually come from a batcher:
``add_trajectories`` keeps the valid steps of a ``TemporalDictTensor``
(``masked_flatten``), so that a row holds ``observation``, ``action``,
``next/reward``, ``next/observation``, ``next/terminated``, ... of one step.

- ``ReplayBuffer``: uniform sampling with replacement.
- ``PrioritizedReplayBuffer``: proportional prioritized replay (Schaul et al.,
  2016) on a ``SumTree``, with importance-sampling weights.
- ``HindsightReplayBuffer``: goal-conditioned transitions whose desired goal is
  replaced, at sample time, by a goal achieved later in the same episode, with
  the reward recomputed (Andrychowicz et al., 2017).

Storage lives on the buffer's ``device``: adds copy rows there from wherever
they are (that is what ``device`` asks for), and samples are new tensors on it,
never views of the storage.

Sharing between processes: with ``shared=True`` (CPU only) the storage, the
write position and size, and the priorities live in shared memory, so a buffer
handed to a spawned process (as an argument of ``multiprocessing.Process`` or
``torch.multiprocessing.spawn``) writes into the storage the parent samples
from. The concurrency rule is: every call that reads or writes the buffer
(``add``, ``sample``, ``update_priorities``, ``state_dict``,
``load_state_dict``) holds the buffer's lock, a ``multiprocessing`` lock shared
by all the processes; so any number of processes may add and sample, one call
at a time. A call that cannot take the lock within ``timeout`` seconds raises
``TimeoutError`` (a process that died while holding it leaves it taken). The
storage must exist before the buffer is handed over (pass ``specs=`` or add a
first batch). Each process keeps its own copy of the random generator, and the
lock can only travel when a process is started, not through a queue. A
non-shared buffer can be pickled too, but the other process then gets a copy.

Examples:
    >>> import torch
    >>> from rlstruct import DictTensor, ReplayBuffer
    >>> buffer = ReplayBuffer(100, generator=torch.Generator().manual_seed(0))
    >>> buffer.add(DictTensor({"observation": torch.randn(8, 3), "action": torch.arange(8)}))
    >>> len(buffer), buffer.capacity
    (8, 100)
    >>> batch = buffer.sample(32)
    >>> batch["observation"].shape, batch["action"].dtype
    (torch.Size([32, 3]), torch.int64)
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing as mp
import numbers
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import torch

from rlstruct.dicttensor import DictTensor, _describe
from rlstruct.specs import Specs, TensorSpec
from rlstruct.sumtree import SumTree
from rlstruct.temporal import TemporalDictTensor

__all__ = ["HindsightReplayBuffer", "PrioritizedReplayBuffer", "ReplayBuffer"]

_NO_LOCK = contextlib.nullcontext()

RewardFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
"""``reward_fn(achieved_goal, desired_goal) -> reward``, batched over rows."""


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
        raise TypeError(f"{op}: keys must be a list of str, got {_describe(keys)}")
    keys = list(keys)
    missing = [k for k in keys if k not in set(available)]
    if missing:
        raise ValueError(
            f"{op}: keys {missing} are not in the trajectories, whose keys are {sorted(available)}"
        )
    return keys


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
        ValueError: for a capacity that is not a positive int, ``shared`` with
            a device other than CPU, a generator on another device, or a
            timeout that is not positive.
        TypeError: for a generator or specs of the wrong type.
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
        self._capacity = _check_positive_int(capacity, f"{name}: capacity")
        self._device = torch.device(device)
        if shared and self._device.type != "cpu":
            raise ValueError(f"{name}: shared storage must be on the CPU, got device {self._device}")
        if self._device.type == "cuda" and self._device.index is None and torch.cuda.is_available():
            self._device = torch.device("cuda", torch.cuda.current_device())  # what tensors report
        if generator is None:
            generator = torch.Generator(device=self._device)
            generator.manual_seed(int(torch.randint(0, 2**62, ())))
        elif not isinstance(generator, torch.Generator):
            raise TypeError(
                f"{name}: generator must be a torch.Generator or None, got {_describe(generator)}"
            )
        elif generator.device.type != self._device.type:
            raise ValueError(
                f"{name}: generator is on {generator.device}, expected a generator on {self._device}"
            )
        self._generator = generator
        self._timeout = _check_number(timeout, f"{name}: timeout", 0.0, open_low=True)
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
                raise TypeError(f"{name}: specs must be a Specs, got {_describe(specs)}")
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
        (to ``device`` if they are elsewhere); a batch of more than
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
            raise TypeError(f"{op}: transitions must be a DictTensor, got {_describe(transitions)}")
        if transitions.empty():
            raise ValueError(f"{op}: transitions must have at least one key, got none")
        if self._storage is None:
            self._allocate(transitions.specs())
        self._check_rows(transitions, op)
        n = transitions.n_elems()
        kept = min(n, self._capacity)
        if kept == 0:
            return
        with self._locked(op):
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
            raise TypeError(f"{op}: trajectories must be a TemporalDictTensor, got {_describe(trajectories)}")
        if keys is not None:
            trajectories = trajectories.get(_check_keys(keys, trajectories.keys(), op))
        self.add(trajectories.masked_flatten())

    # ------------------------------------------------------------------ reading

    def sample(self, batch_size: int) -> DictTensor:
        """Draw ``batch_size`` rows uniformly, with replacement.

        Returns:
            A DictTensor ``[batch_size, ...]`` of new tensors on ``device``,
            with the storage's keys and dtypes.

        Raises:
            ValueError: if ``batch_size`` is not a positive int.
            RuntimeError: if the buffer is empty.
        """
        op = f"{type(self).__name__}.sample"
        _check_positive_int(batch_size, f"{op}: batch_size")
        with self._locked(op):
            size = self._size_or_raise(op)
            indices = torch.randint(size, (batch_size,), generator=self._generator, device=self._device)
            return self._storage_or_raise(op).index(indices)

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
            raise TypeError(f"{op}: state must be a dict from state_dict(), got {_describe(state)}")
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
        with self._locked(op):
            if saved is not None:
                for key, value in self._storage_or_raise(op).items():
                    value[:size].copy_(rows[key])
                    value[size:].zero_()
            self._counts[0] = int(state["position"])
            self._counts[1] = size
            self._generator.set_state(state["generator"])
            self._load_extra_state(state)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write ``state_dict()`` to ``path`` with ``torch.save``."""
        torch.save(self.state_dict(), path)

    def load(self, path: str | os.PathLike[str]) -> None:
        """Restore, in place, a buffer written by ``save`` (loaded with ``weights_only=True``).

        Raises:
            TypeError, ValueError: as ``load_state_dict``.
        """
        self.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))

    # ------------------------------------------------------------------ internals

    def _allocate(self, specs: Specs) -> None:
        self._storage = specs.zeros(self._capacity, device=self._device, shared=self._shared)

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
        pass

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


class PrioritizedReplayBuffer(ReplayBuffer):
    """Proportional prioritized replay (Schaul et al., 2016) on a sum tree.

    Row i is drawn with probability ``P(i) = p_i^alpha / sum_j p_j^alpha``,
    where ``p_i = priority_i + eps`` is the last priority given to row i by
    ``update_priorities`` (usually ``|TD error|``). A new row gets the largest
    ``p`` given so far (1 at the start), so that it is replayed at least once
    soon. ``sample`` is stratified as in the paper: the range ``[0, total)`` is
    cut into ``batch_size`` equal segments and one row is drawn in each, so a
    batch comes out ordered by slot. The importance-sampling weights
    ``w_i = (N P(i))^-beta``, N = ``len(self)``, are divided by the largest
    weight any row of the buffer could get, ``(N min_j P(j))^-beta``, which
    gives ``w_i = (p_i^alpha / min_j p_j^alpha)^-beta`` in ``(0, 1]``.

    Cost: sampling and updating walk the ``log32(capacity)`` levels of the sum
    tree (4 for a million rows) with a few tensor operations per level for the
    whole batch, so the cost is a few dozen tensor operations, nearly the same
    at any capacity. ``sample(256)`` followed by ``update_priorities`` of those
    256 rows (rows of two 8-float observations, an action and a reward) took
    2.3 ms at capacity 1e5 and 3.1 ms at capacity 1e6, single-threaded on a
    shared 2-core x86 box under a load of about 5 (a binary sum tree walked row
    by row in Python: 4.7 and 3.8 ms); measured with
    ``python benchmarks/replay.py``.

    Args:
        capacity: the number of rows kept; a positive int.
        alpha: how much priorities count, ``>= 0`` (0 is uniform sampling).
        beta: the default importance-sampling exponent of ``sample``, in
            ``[0, 1]`` (1 fully corrects the bias; usually annealed from 0.4 to 1
            by setting ``buffer.beta``).
        eps: added to every priority, ``> 0``, so that no row becomes unreachable.
        device: as for ``ReplayBuffer``; the sum tree lives there too.
        generator: as for ``ReplayBuffer``.
        shared: as for ``ReplayBuffer``; the sum tree is shared too.
        specs: as for ``ReplayBuffer``.
        timeout: as for ``ReplayBuffer``.

    Examples:
        >>> import torch
        >>> from rlstruct import DictTensor, PrioritizedReplayBuffer
        >>> buffer = PrioritizedReplayBuffer(4, alpha=1.0, beta=1.0, generator=torch.Generator().manual_seed(0))
        >>> buffer.add(DictTensor({"x": torch.arange(4)}))
        >>> buffer.update_priorities(torch.tensor([0, 1, 2, 3]), torch.tensor([1.0, 1.0, 1.0, 5.0]))
        >>> batch, indices, weights = buffer.sample(4)
        >>> indices[1:]  # stratified: one draw in each quarter of the total 8; row 3 holds 5/8
        tensor([3, 3, 3])
        >>> weights  # (p_i / min p)^-beta
        tensor([1.0000, 0.2000, 0.2000, 0.2000])
    """

    def __init__(
        self,
        capacity: int,
        *,
        alpha: float = 0.6,
        beta: float = 0.4,
        eps: float = 1e-6,
        device: torch.device | str = "cpu",
        generator: torch.Generator | None = None,
        shared: bool = False,
        specs: Specs | None = None,
        timeout: float = 30.0,
    ) -> None:
        self._alpha = _check_number(alpha, "PrioritizedReplayBuffer: alpha", 0.0)
        self._eps = _check_number(eps, "PrioritizedReplayBuffer: eps", 0.0, open_low=True)
        self.beta = beta
        super().__init__(
            capacity, device=device, generator=generator, shared=shared, specs=specs, timeout=timeout
        )
        self._tree = SumTree(self._capacity, device=self._device)
        self._max_priority = torch.ones(1, dtype=torch.float64)  # the largest p = priority + eps so far
        if self._shared:
            self._tree.share_memory_()
            self._max_priority.share_memory_()

    @property
    def alpha(self) -> float:
        """The priority exponent."""
        return self._alpha

    @property
    def eps(self) -> float:
        """What is added to every priority."""
        return self._eps

    @property
    def beta(self) -> float:
        """The default importance-sampling exponent of ``sample``, in ``[0, 1]``; settable."""
        return self._beta

    @beta.setter
    def beta(self, value: float) -> None:
        self._beta = _check_number(value, "PrioritizedReplayBuffer: beta", 0.0, 1.0)

    @property
    def sum_tree(self) -> SumTree:
        """The sum tree of ``p_i^alpha`` (to read; write through ``update_priorities``)."""
        return self._tree

    # returning the indices and weights with the rows is the interface prioritized learners expect
    def sample(  # type: ignore[override]
        self, batch_size: int, beta: float | None = None
    ) -> tuple[DictTensor, torch.Tensor, torch.Tensor]:
        """Draw ``batch_size`` rows with probability proportional to ``p^alpha``, stratified.

        Args:
            batch_size: a positive int.
            beta: the importance-sampling exponent; ``self.beta`` if None.

        Returns:
            ``(batch, indices, weights)``: the rows (a DictTensor of new tensors
            on ``device``), their slots (int64, shape [batch_size], on
            ``device``, for ``update_priorities``) and their importance-sampling
            weights (float32, shape [batch_size], on ``device``, in ``(0, 1]``).

        Raises:
            ValueError: for a ``batch_size`` or ``beta`` out of range.
            RuntimeError: if the buffer is empty.
        """
        op = "PrioritizedReplayBuffer.sample"
        _check_positive_int(batch_size, f"{op}: batch_size")
        beta = self._beta if beta is None else _check_number(beta, f"{op}: beta", 0.0, 1.0)
        with self._locked(op):
            self._size_or_raise(op)
            tree = self._tree
            segment = tree.sums[0] / batch_size
            offsets = torch.rand(
                batch_size, generator=self._generator, device=self._device, dtype=torch.float64
            )
            prefix = (torch.arange(batch_size, device=self._device, dtype=torch.float64) + offsets) * segment
            indices = tree.find(prefix)
            weights = (tree.get(indices) / tree.mins[0]).pow(-beta).to(torch.float32)
            return self._storage_or_raise(op).index(indices), indices, weights

    def update_priorities(self, indices: torch.Tensor, priorities: torch.Tensor) -> None:
        """Set the priorities of rows drawn by ``sample``, in place.

        Args:
            indices: the rows' slots, as returned by ``sample``: int64, shape
                [n], on ``device``, in ``[0, len(self))``. For a slot given
                twice, the last priority wins.
            priorities: non-negative, finite, floating, shape [n], on
                ``device`` (usually ``|TD error|``; detached here). They are
                stored as ``(priority + eps)^alpha``.

        Raises:
            TypeError: for tensors of the wrong type or dtype.
            ValueError: for mismatched shapes, another device, indices out of
                range, or negative or non-finite priorities.
        """
        op = "PrioritizedReplayBuffer.update_priorities"
        if not isinstance(indices, torch.Tensor) or indices.dtype != torch.int64:
            raise TypeError(f"{op}: indices must be an int64 tensor, got {_describe(indices)}")
        if not isinstance(priorities, torch.Tensor) or not priorities.is_floating_point():
            raise TypeError(f"{op}: priorities must be a floating-point tensor, got {_describe(priorities)}")
        if indices.dim() != 1 or priorities.shape != indices.shape:
            raise ValueError(
                f"{op}: indices and priorities must both have shape [n], got {tuple(indices.shape)} "
                f"and {tuple(priorities.shape)}"
            )
        for name, value in (("indices", indices), ("priorities", priorities)):
            if value.device != self._device:
                raise ValueError(
                    f"{op}: {name} is on {value.device}, expected {self._device} (the buffer's device)"
                )
        if indices.numel() == 0:
            return
        p = priorities.detach().to(torch.float64)
        p_low, p_high = (float(x) for x in p.aminmax())
        if not (p_low >= 0 and p_high < math.inf):  # NaN fails too
            raise ValueError(f"{op}: priorities must be finite and >= 0, got values from {p_low} to {p_high}")
        p = p + self._eps
        with self._locked(op):
            size = int(self._counts[1])
            low, high = (int(x) for x in indices.aminmax())
            if low < 0 or high >= size:
                raise ValueError(
                    f"{op}: indices must lie in [0, {size}) (the rows held), got values from {low} to {high}"
                )
            self._tree.update(indices, p.pow(self._alpha))
            self._max_priority.clamp_(min=p_high + self._eps)

    def _written(self, start: int, n: int) -> None:
        slots = (start + torch.arange(n, device=self._device)) % self._capacity
        priority = float(self._max_priority) ** self._alpha
        self._tree.update(slots, torch.full((n,), priority, dtype=torch.float64, device=self._device))

    def _extra_state(self, size: int) -> dict[str, Any]:
        leaves = self._tree.get(torch.arange(size, device=self._device))
        return {
            "alpha": self._alpha,
            "beta": self._beta,
            "eps": self._eps,
            "max_priority": float(self._max_priority),
            "priorities": leaves.to("cpu", copy=True),
        }

    def _check_extra_state(self, state: Mapping[str, Any], op: str) -> None:
        for name, mine in (("alpha", self._alpha), ("eps", self._eps)):
            if name not in state:
                raise ValueError(
                    f"{op}: the state has no {name!r}; was it saved by a PrioritizedReplayBuffer?"
                )
            if state[name] != mine:
                raise ValueError(f"{op}: the state has {name}={state[name]!r}, this buffer {name}={mine!r}")
        if state["priorities"].shape != (state["size"],):
            raise ValueError(
                f"{op}: the state holds {state['priorities'].shape[0]} priorities but size {state['size']}"
            )

    def _load_extra_state(self, state: Mapping[str, Any]) -> None:
        self.beta = state["beta"]
        self._max_priority.fill_(state["max_priority"])
        self._tree.load_(state["priorities"].to(self._device))


_STEPS_LEFT = "hindsight/steps_left"
"""The internal key of a hindsight buffer: how many steps of its episode follow a transition."""


class HindsightReplayBuffer:
    """Hindsight experience replay (Andrychowicz et al., 2017) for goal-conditioned environments.

    Transitions are stored whole episodes at a time (``add_trajectories``), as
    gymnasium-robotics' goal environments give them through ``GymEnv``: the
    keys ``observation``, ``achieved_goal`` and ``desired_goal``, and their
    ``next/`` versions. ``sample`` draws transitions uniformly and, with
    probability ``k / (k + 1)``, replaces the desired goal of a transition by a
    goal achieved later in its episode, then recomputes its reward with
    ``reward_fn``:

    - ``strategy="future"``: the achieved goal after a step drawn uniformly
      among this transition's step and the following steps of the episode
      (``next/achieved_goal`` of that step), so the goal reached by the
      transition itself can be drawn;
    - ``strategy="final"``: the goal achieved at the end of the episode.

    So each real goal comes with ``k`` relabelled ones on average. Only the
    reward is recomputed; ``next/terminated`` is kept, which is right for the
    usual goal environments, whose episodes end by truncation only.

    Episodes are delimited by ``done_key`` (``next/done``) and by the end of
    each row: a row of a batcher in ``mode="episodes"`` is one episode, a row in
    ``mode="fixed"`` may hold several (and a last, unfinished one, whose
    future goals are taken from the steps of this row only). The ring buffer
    overwrites the oldest steps first, so the later steps of a stored
    transition are always still there.

    Args:
        capacity: the number of transitions kept; a positive int.
        reward_fn: ``reward_fn(achieved_goal, desired_goal) -> reward``, batched:
            goals ``[n, *goal_shape]``, reward ``[n, ...]`` with the dtype,
            shape and device of the stored ``reward_key``. With ``shared``, it
            must be picklable (a module-level function).
        strategy: ``"future"`` or ``"final"``.
        k: relabelled goals per real goal, a non-negative int (0: no relabelling).
        achieved_goal_key: the goal the transition achieved; relabelled goals
            are taken from it, and it is ``reward_fn``'s first argument.
        desired_goal_keys: the keys holding the desired goal, all relabelled
            with the same goal; each must have the dtype and per-row shape of
            ``achieved_goal_key``.
        reward_key: the reward of the transition, recomputed.
        done_key: a bool key that is True where an episode ended, or None if
            every row of the trajectories is one episode.
        device: as for ``ReplayBuffer``.
        generator: as for ``ReplayBuffer``.
        shared: as for ``ReplayBuffer``.
        specs: as for ``ReplayBuffer``: those of the transitions as added.
        timeout: as for ``ReplayBuffer``.

    Examples:
        >>> import torch
        >>> from rlstruct import HindsightReplayBuffer, TemporalDictTensor
        >>> def reached(achieved, desired):
        ...     return (achieved == desired).all(1).float()
        >>> buffer = HindsightReplayBuffer(100, reached, k=4, generator=torch.Generator().manual_seed(0))
        >>> at = torch.arange(5.0).view(1, 5, 1)  # one episode of 5 steps on a line, goal 9
        >>> buffer.add_trajectories(
        ...     TemporalDictTensor(
        ...         {
        ...             "achieved_goal": at,
        ...             "desired_goal": torch.full((1, 5, 1), 9.0),
        ...             "next/achieved_goal": at + 1,
        ...             "next/desired_goal": torch.full((1, 5, 1), 9.0),
        ...             "next/reward": torch.zeros(1, 5),
        ...             "next/done": torch.arange(5).view(1, 5) == 4,
        ...         }
        ...     )
        ... )
        >>> batch = buffer.sample(1000)
        >>> relabelled = batch["desired_goal"][:, 0] != 9
        >>> bool((batch["desired_goal"][relabelled] >= batch["next/achieved_goal"][relabelled]).all())
        True
        >>> 0.75 < float(relabelled.float().mean()) < 0.85
        True
    """

    def __init__(
        self,
        capacity: int,
        reward_fn: RewardFn,
        *,
        strategy: str = "future",
        k: int = 4,
        achieved_goal_key: str = "next/achieved_goal",
        desired_goal_keys: Sequence[str] = ("desired_goal", "next/desired_goal"),
        reward_key: str = "next/reward",
        done_key: str | None = "next/done",
        device: torch.device | str = "cpu",
        generator: torch.Generator | None = None,
        shared: bool = False,
        specs: Specs | None = None,
        timeout: float = 30.0,
    ) -> None:
        name = "HindsightReplayBuffer"
        if not callable(reward_fn):
            raise TypeError(f"{name}: reward_fn must be callable, got {_describe(reward_fn)}")
        if strategy not in ("future", "final"):
            raise ValueError(f"{name}: strategy must be 'future' or 'final', got {strategy!r}")
        if not isinstance(k, int) or isinstance(k, bool) or k < 0:
            raise ValueError(f"{name}: k must be a non-negative int, got {k!r}")
        if isinstance(desired_goal_keys, str) or not all(isinstance(key, str) for key in desired_goal_keys):
            raise TypeError(f"{name}: desired_goal_keys must be a list of str, got {desired_goal_keys!r}")
        self.reward_fn = reward_fn
        self.strategy = strategy
        self.k = k
        self.achieved_goal_key = achieved_goal_key
        self.desired_goal_keys = tuple(desired_goal_keys)
        self.reward_key = reward_key
        self.done_key = done_key
        if specs is not None:
            if not isinstance(specs, Specs):
                raise TypeError(f"{name}: specs must be a Specs, got {_describe(specs)}")
            self._check_specs(specs, name)
            specs = Specs({**specs, _STEPS_LEFT: TensorSpec((), torch.int64)})
        self._buffer = ReplayBuffer(
            capacity, device=device, generator=generator, shared=shared, specs=specs, timeout=timeout
        )

    @property
    def capacity(self) -> int:
        """The number of transitions the buffer keeps."""
        return self._buffer.capacity

    @property
    def device(self) -> torch.device:
        """Where the storage lives and samples are returned."""
        return self._buffer.device

    def __len__(self) -> int:
        """The number of transitions held."""
        return len(self._buffer)

    def add_trajectories(self, trajectories: TemporalDictTensor, keys: Sequence[str] | None = None) -> None:
        """Append the valid steps of trajectories of whole episodes, row after row.

        Args:
            trajectories: a TemporalDictTensor ``[B, T, ...]`` holding the goal,
                reward and (unless ``done_key`` is None) done keys.
            keys: the keys to store (they must include those); all if None.

        Raises:
            TypeError: if ``trajectories`` is not a TemporalDictTensor, the done
                key is not bool, or a goal's dtype differs from the achieved goal's.
            ValueError: if a needed key is missing or a goal's shape differs; and
                as ``ReplayBuffer.add``.
        """
        op = "HindsightReplayBuffer.add_trajectories"
        if not isinstance(trajectories, TemporalDictTensor):
            raise TypeError(f"{op}: trajectories must be a TemporalDictTensor, got {_describe(trajectories)}")
        if _STEPS_LEFT in trajectories:
            raise ValueError(f"{op}: the key {_STEPS_LEFT!r} is reserved for the buffer's bookkeeping")
        steps = trajectories.n_timesteps()
        time = torch.arange(steps, device=trajectories.device)
        ends = time.unsqueeze(0) == (trajectories.lengths - 1).unsqueeze(1)  # [B, T]
        if self.done_key is not None:
            if self.done_key not in trajectories:
                raise ValueError(
                    f"{op}: done key {self.done_key!r} is not in the trajectories, whose keys are {sorted(trajectories.keys())}"
                )
            done = trajectories[self.done_key]
            if done.dtype != torch.bool or done.shape != ends.shape:
                raise TypeError(
                    f"{op}: done key {self.done_key!r} must be a bool tensor of shape {tuple(ends.shape)}, got {_describe(done)}"
                )
            ends |= done
        # the first end at or after each step, by a reversed running minimum over the end steps
        end_steps = torch.where(ends, time, steps).flip(1).cummin(1).values.flip(1)
        selected = list(trajectories.keys()) if keys is None else _check_keys(keys, trajectories.keys(), op)
        transitions = trajectories.get(selected)
        transitions.set(_STEPS_LEFT, end_steps - time)
        if len(self._buffer) == 0 and self._buffer.specs() is None:
            self._check_specs(transitions.specs(), op)
        self._buffer.add(transitions.masked_flatten())

    def sample(self, batch_size: int) -> DictTensor:
        """Draw ``batch_size`` transitions uniformly and relabel about ``k / (k + 1)`` of them.

        Returns:
            A DictTensor ``[batch_size, ...]`` of new tensors on ``device`` with
            the stored keys; in relabelled rows, the desired goal keys hold the
            new goal and ``reward_key`` holds ``reward_fn(achieved, new goal)``.

        Raises:
            ValueError: if ``batch_size`` is not a positive int, or ``reward_fn``
                returns the wrong shape or device.
            TypeError: if ``reward_fn`` returns no tensor or the wrong dtype.
            RuntimeError: if the buffer is empty.
        """
        op = "HindsightReplayBuffer.sample"
        _check_positive_int(batch_size, f"{op}: batch_size")
        buffer, generator, device = self._buffer, self._buffer.generator, self._buffer.device
        with buffer._locked(op):
            size = buffer._size_or_raise(op)
            storage = buffer._storage_or_raise(op)
            indices = torch.randint(size, (batch_size,), generator=generator, device=device)
            batch = storage.index(indices)
            steps_left = batch[_STEPS_LEFT]
            if self.strategy == "future":
                uniform = torch.rand(batch_size, generator=generator, device=device, dtype=torch.float64)
                ahead = (uniform * (steps_left + 1)).long().clamp_(max=steps_left)
            else:
                ahead = steps_left
            relabel = torch.rand(batch_size, generator=generator, device=device) < self.k / (self.k + 1)
            goal_slots = (indices + ahead) % buffer.capacity
            goals = storage[self.achieved_goal_key].index_select(0, goal_slots)
        data = {key: value for key, value in batch.items() if key != _STEPS_LEFT}
        column = relabel.view((-1,) + (1,) * (goals.dim() - 1))
        for key in self.desired_goal_keys:
            data[key] = torch.where(column, goals, data[key])
        reward = data[self.reward_key]
        new_reward = self.reward_fn(data[self.achieved_goal_key], data[self.desired_goal_keys[0]])
        if not isinstance(new_reward, torch.Tensor) or new_reward.dtype != reward.dtype:
            raise TypeError(
                f"{op}: reward_fn must return a tensor of dtype {reward.dtype} (the stored {self.reward_key!r}), got {_describe(new_reward)}"
            )
        if new_reward.shape != reward.shape or new_reward.device != reward.device:
            raise ValueError(
                f"{op}: reward_fn must return shape {tuple(reward.shape)} on {reward.device}, got {_describe(new_reward)}"
            )
        data[self.reward_key] = torch.where(
            relabel.view((-1,) + (1,) * (reward.dim() - 1)), new_reward, reward
        )
        return DictTensor(data)

    def state_dict(self) -> dict[str, Any]:
        """Contents, position and generator state (see ``ReplayBuffer.state_dict``), plus ``k`` and ``strategy``."""
        return {**self._buffer.state_dict(), "k": self.k, "strategy": self.strategy}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a state from ``state_dict``, in place; ``k`` and ``strategy`` must match."""
        op = "HindsightReplayBuffer.load_state_dict"
        if not isinstance(state, Mapping):
            raise TypeError(f"{op}: state must be a dict from state_dict(), got {_describe(state)}")
        for name, mine in (("k", self.k), ("strategy", self.strategy)):
            if state.get(name) != mine:
                raise ValueError(
                    f"{op}: the state has {name}={state.get(name)!r}, this buffer {name}={mine!r}"
                )
        self._buffer.load_state_dict(state)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write ``state_dict()`` to ``path`` with ``torch.save``."""
        torch.save(self.state_dict(), path)

    def load(self, path: str | os.PathLike[str]) -> None:
        """Restore, in place, a buffer written by ``save`` (loaded with ``weights_only=True``)."""
        self.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))

    def _check_specs(self, specs: Specs, op: str) -> None:
        """The goal and reward keys exist, and every desired goal looks like the achieved goal."""
        needed = [self.achieved_goal_key, *self.desired_goal_keys, self.reward_key]
        missing = [key for key in needed if key not in specs]
        if missing:
            raise ValueError(f"{op}: the transitions lack the keys {missing}; they have {sorted(specs)}")
        achieved = specs[self.achieved_goal_key]
        for key in self.desired_goal_keys:
            if specs[key].dtype != achieved.dtype:
                raise TypeError(
                    f"{op}: key {key!r} has dtype {specs[key].dtype}, expected {achieved.dtype} (the dtype of {self.achieved_goal_key!r})"
                )
            if specs[key].shape != achieved.shape:
                raise ValueError(
                    f"{op}: key {key!r} has rows of shape {specs[key].shape}, expected {achieved.shape} (the shape of {self.achieved_goal_key!r})"
                )
