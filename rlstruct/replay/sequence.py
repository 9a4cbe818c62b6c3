"""``SequenceReplayBuffer``: chunks of T steps with the agent's state at their start, for agents with memory.

A recurrent agent learns from sequences, not from single transitions: it must
see the steps in order, starting from the memory it had when they were
collected (R2D2, Kapturowski et al., 2019). The buffer keeps the last
``capacity`` chunks; a chunk is one row of a batcher's batch: its T steps
(``batch.trajectories``, padding included), its length, and its whole
``batch.info`` row, which holds the agent's state at the chunk's first step
(``agent_state/...``), its ``agent_info/...`` and ``env_info/...``. A sample is
a ``Trajectories`` again, so that ``replay_agent(agent, sample.batch)`` reruns
the current agent over the chunks from their stored states.

The stored state is stale: the weights have changed since it was computed.
R2D2's burn-in lets the memory warm up from it over the first ``burn_in``
steps of each chunk, whose outputs the loss then ignores: a sample's ``learn``
mask is True at the valid steps ``t >= burn_in`` only. With prioritized
sampling, a chunk's priority is R2D2's mix of the largest and the mean
``|TD error|`` over its learned steps (``sequence_priorities``).

Storage: the chunks are the rows of a ``ReplayBuffer`` (a
``PrioritizedReplayBuffer`` when ``prioritized``), each chunk flattened into
one row with the keys ``steps/<key>`` (``[T, ...]`` per row), ``length``
(int64) and ``info/<key>``. Saving, loading, shared memory, the lock and the
sum tree are that buffer's, and a sample gathers ``batch_size`` rows of
``T`` steps: its cost does not grow with the number of chunks held
(``benchmarks/replay.py``).

Examples:
    >>> import torch
    >>> from rlstruct import DictTensor, SequenceReplayBuffer, TemporalDictTensor, Trajectories
    >>> steps = TemporalDictTensor(
    ...     {"observation": torch.randn(3, 6, 4), "next/observation": torch.randn(3, 6, 4)},
    ...     torch.tensor([6, 4, 0]),
    ... )
    >>> info = DictTensor({"agent_state/h": torch.randn(3, 8)})
    >>> buffer = SequenceReplayBuffer(100, burn_in=2, generator=torch.Generator().manual_seed(0))
    >>> buffer.add(Trajectories(info, steps))  # the third row is empty: skipped
    >>> len(buffer), buffer.steps_held(), buffer.n_timesteps
    (2, 10, 6)
    >>> sample = buffer.sample(5)
    >>> sample.batch.trajectories["observation"].shape, sample.batch.info["agent_state/h"].shape
    (torch.Size([5, 6, 4]), torch.Size([5, 8]))
    >>> sample.indices.tolist(), sample.batch.lengths.tolist()
    ([0, 1, 1, 0, 1], [6, 4, 4, 6, 4])
    >>> sample.learn[1].int().tolist()  # a chunk of length 4: burn-in, learned, padding
    [0, 0, 1, 1, 0, 0]
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import torch

from rlstruct.checks import check_int, check_keys, check_number
from rlstruct.dicttensor import DictTensor
from rlstruct.errors import describe
from rlstruct.replay.prioritized import PrioritizedReplayBuffer
from rlstruct.replay.uniform import ReplayBuffer, read_state, save_path, told_as
from rlstruct.specs import Specs
from rlstruct.temporal import TemporalDictTensor
from rlstruct.trajectories import Trajectories

__all__ = ["SequenceReplayBuffer", "SequenceSample", "sequence_priorities"]

_STEPS = "steps/"
"""The prefix, in the chunk store, of the keys of ``batch.trajectories``."""
_INFO = "info/"
"""The prefix, in the chunk store, of the keys of ``batch.info``."""
_LENGTH = "length"
"""The key, in the chunk store, of a chunk's number of valid steps."""


class SequenceSample(NamedTuple):
    """What ``SequenceReplayBuffer.sample`` returns; unpack it as ``batch, indices, weights, learn``.

    Attributes:
        batch: the drawn chunks, a ``Trajectories`` of ``batch_size`` rows and
            T steps, of new tensors on the buffer's ``device``: ``info`` with
            the keys and dtypes of the batches' ``info`` (the agent's state at
            each chunk's first step), ``trajectories`` with the stored keys,
            dtypes and lengths. ``replay_agent(agent, batch)`` replays it.
        indices: the chunks' slots: int64 ``[batch_size]``, on ``device``
            (what ``update_priorities`` takes).
        weights: the importance-sampling weights: float32 ``[batch_size]``,
            on ``device``, in ``(0, 1]``; all ones unless prioritized.
        learn: the steps the loss uses: bool ``[batch_size, T]``, on
            ``device``; True where ``burn_in <= t < length``.
    """

    batch: Trajectories
    indices: torch.Tensor
    weights: torch.Tensor
    learn: torch.Tensor


def sequence_priorities(td_abs: torch.Tensor, learn: torch.Tensor, eta: float = 0.9) -> torch.Tensor:
    """The priority of each chunk: ``eta * max + (1 - eta) * mean`` of ``|TD error|`` over its learned steps.

    R2D2's mix (Kapturowski et al., 2019, section 2.3): the mean alone
    averages a single large error away over a long sequence, and the max
    alone makes every chunk look alike once a few steps are bad. A chunk
    with no learned step gets 0.

    Args:
        td_abs: the TD errors, floating ``[B, T]``; their absolute values
            are taken (so signed errors may be given too), detached. Values
            where ``learn`` is False are ignored, NaN included.
        learn: the steps that count, bool ``[B, T]`` on the device of
            ``td_abs`` (a sample's ``learn``).
        eta: the weight of the max, in ``[0, 1]``.

    Returns:
        A new tensor ``[B]``, with the dtype and device of ``td_abs``, ``>= 0``.

    Raises:
        TypeError: if ``td_abs`` is not a floating-point tensor, ``learn`` not
            a bool tensor, or ``eta`` not a number.
        ValueError: if the shapes are not both ``[B, T]``, the devices differ,
            or ``eta`` is outside ``[0, 1]``.

    Examples:
        >>> import torch
        >>> td = torch.tensor([[1.0, -2.0, 3.0, 4.0], [5.0, 0.0, 0.0, 0.0]])
        >>> learn = torch.tensor([[False, False, True, True], [False, False, False, False]])
        >>> sequence_priorities(td, learn)  # 0.9 * 4 + 0.1 * (3 + 4) / 2 = 3.95; no learned step: 0
        tensor([3.9500, 0.0000])
    """
    op = "sequence_priorities"
    if not isinstance(td_abs, torch.Tensor) or not td_abs.is_floating_point():
        raise TypeError(f"{op}: td_abs must be a floating-point tensor, got {describe(td_abs)}")
    if not isinstance(learn, torch.Tensor) or learn.dtype != torch.bool:
        raise TypeError(f"{op}: learn must be a bool tensor, got {describe(learn)}")
    if td_abs.dim() != 2 or learn.shape != td_abs.shape:
        raise ValueError(
            f"{op}: td_abs and learn must both have shape [B, T], got {tuple(td_abs.shape)} "
            f"and {tuple(learn.shape)}"
        )
    if learn.device != td_abs.device:
        raise ValueError(f"{op}: learn is on {learn.device}, expected {td_abs.device} (the device of td_abs)")
    eta = check_number(op, "eta", eta, 0.0, 1.0)
    if td_abs.shape[1] == 0:  # no step: no step learned from
        return td_abs.new_zeros(td_abs.shape[0])
    td = torch.where(learn, td_abs.detach().abs(), 0.0)  # 0 where not learned: below every |TD|
    count = learn.sum(1).clamp(min=1).to(td.dtype)
    return eta * td.amax(1) + (1.0 - eta) * td.sum(1) / count


class SequenceReplayBuffer:
    """The last ``capacity`` chunks of T steps, each with the agent's state at its start.

    ``add`` stores each non-empty row of a batcher's batch as one chunk;
    ``sample`` draws whole chunks, uniformly with replacement or, with
    ``prioritized``, in proportion to ``p^alpha`` as ``PrioritizedReplayBuffer``
    does (stratified, with importance-sampling weights), and marks the steps
    to learn from. Every add must have the same T, the first add (or a load)
    fixes it, with the keys, per-step shapes and dtypes; values are never cast.

    Args:
        capacity: the number of chunks kept; a positive int.
        burn_in: the first steps of each chunk that only warm the agent's
            memory up from the stored state: a non-negative int, below T
            (checked at the first add).
        prioritized: sample chunks by priority (``update_priorities``) rather
            than uniformly.
        alpha: the priority exponent, ``>= 0``; used when ``prioritized``.
        beta: the importance-sampling exponent, in ``[0, 1]``; used when
            ``prioritized`` (settable as ``buffer.beta``, to anneal it).
        device: where the chunks are stored and samples returned.
        generator: the random generator of ``sample``, on ``device``; if
            None, one seeded from torch's global generator.
        shared: keep the chunks, counters and priorities in shared memory
            (CPU only), as for ``ReplayBuffer``; add a first batch before
            handing the buffer to another process.
        timeout: how long, in seconds, a call waits for the lock of a shared
            buffer before raising ``TimeoutError``.

    Raises:
        TypeError: for a ``capacity`` or ``burn_in`` that is not an int, an
            ``alpha``, ``beta`` or ``timeout`` that is not a number, or a
            generator of the wrong type.
        ValueError: for a ``capacity`` below 1, a negative ``burn_in``, an
            ``alpha`` or ``beta`` out of range, a device that cannot hold
            data here (as ``ReplayBuffer``), ``shared`` off the CPU, or a
            generator on another device.
    """

    def __init__(
        self,
        capacity: int,
        *,
        burn_in: int = 0,
        prioritized: bool = False,
        alpha: float = 0.6,
        beta: float = 0.4,
        device: torch.device | str = "cpu",
        generator: torch.Generator | None = None,
        shared: bool = False,
        timeout: float = 30.0,
    ) -> None:
        name = "SequenceReplayBuffer"
        check_int(name, "capacity", capacity)
        self._burn_in = check_int(name, "burn_in", burn_in, 0)
        alpha = check_number(name, "alpha", alpha, 0.0)
        self._beta = check_number(name, "beta", beta, 0.0, 1.0)
        self._prioritized = bool(prioritized)
        kind = PrioritizedReplayBuffer if self._prioritized else ReplayBuffer
        extra: dict[str, Any] = {"alpha": alpha, "beta": beta} if self._prioritized else {}
        try:
            self._buffer: ReplayBuffer = kind(
                capacity, device=device, generator=generator, shared=shared, timeout=timeout, **extra
            )
        except (TypeError, ValueError) as error:  # the storage's checks, told as this buffer's
            raise type(error)(str(error).replace(f"{kind.__name__}:", f"{name}:", 1)) from error
        self._alpha = alpha
        self._n_timesteps: int | None = None  # T, once the first add or load fixed it

    def __getstate__(self) -> dict[str, Any]:
        if self.shared and len(self._buffer) == 0 and self._n_timesteps is None:
            raise RuntimeError(
                "SequenceReplayBuffer: a shared buffer needs its storage before it is handed to another "
                "process; add a first batch"
            )
        return self.__dict__.copy()

    # ------------------------------------------------------------------ properties

    @property
    def capacity(self) -> int:
        """The number of chunks the buffer keeps."""
        return self._buffer.capacity

    @property
    def burn_in(self) -> int:
        """The first steps of each chunk that only warm the memory up (``learn`` is False there)."""
        return self._burn_in

    @property
    def n_timesteps(self) -> int | None:
        """T, the steps of every chunk, or None before the first chunk is stored."""
        if self._n_timesteps is None:
            specs = self._buffer.specs()
            if specs is not None:
                self._n_timesteps = _steps_of(specs)
        return self._n_timesteps

    @property
    def prioritized(self) -> bool:
        """Whether chunks are sampled by priority."""
        return self._prioritized

    @property
    def alpha(self) -> float:
        """The priority exponent (used when ``prioritized``)."""
        return self._alpha

    @property
    def beta(self) -> float:
        """The importance-sampling exponent of ``sample``, in ``[0, 1]``; settable (used when ``prioritized``)."""
        if isinstance(self._buffer, PrioritizedReplayBuffer):
            return self._buffer.beta
        return self._beta

    @beta.setter
    def beta(self, value: float) -> None:
        self._beta = check_number("SequenceReplayBuffer", "beta", value, 0.0, 1.0)
        if isinstance(self._buffer, PrioritizedReplayBuffer):
            self._buffer.beta = self._beta

    @property
    def device(self) -> torch.device:
        """Where the chunks are stored and samples returned."""
        return self._buffer.device

    @property
    def generator(self) -> torch.Generator:
        """The random generator of ``sample``."""
        return self._buffer.generator

    @property
    def shared(self) -> bool:
        """Whether the chunks live in shared memory."""
        return self._buffer.shared

    def __len__(self) -> int:
        """The number of chunks held: ``min(chunks added, capacity)``."""
        return len(self._buffer)

    def steps_held(self) -> int:
        """The number of valid steps in the chunks held: the sum of their lengths (reads them all)."""
        if len(self._buffer) == 0:
            return 0
        with self._buffer.locked_storage("SequenceReplayBuffer.steps_held") as (storage, size):
            return int(storage[_LENGTH][:size].sum())

    def __repr__(self) -> str:
        return (
            f"SequenceReplayBuffer(capacity={self.capacity}, size={len(self)}, "
            f"n_timesteps={self.n_timesteps}, burn_in={self._burn_in}, "
            f"prioritized={self._prioritized}, device={self.device})"
        )

    # ------------------------------------------------------------------ writing

    def add(self, batch: Trajectories, keys: Sequence[str] | None = None) -> None:
        """Store each row of ``batch`` longer than ``burn_in`` as one chunk, overwriting the oldest once full.

        A chunk keeps the row's T steps (padding included, as the batch has
        them), its length and its whole ``info`` row. Rows are copied (to
        ``device`` if they are elsewhere); ``batch`` is not changed. More than
        ``capacity`` rows keep the last ``capacity`` of them.

        Args:
            batch: a batcher's ``Trajectories``: ``info`` ``[B]`` and
                ``trajectories`` ``[B, T, ...]``, on any device. T must be the
                T of the chunks held, and above ``burn_in``.
            keys: the keys of ``batch.trajectories`` to store; all if None.
                To replay an agent with ``replay_agent``, keep its
                observation keys, ``initial_state`` and the ``next/`` version
                of each; for an agent with a history, every key (its windows
                hold its outputs too). ``info`` is always stored whole.

        Raises:
            TypeError: if ``batch`` is not a ``Trajectories``, ``keys`` not a
                list of str, or a dtype differs from the stored one.
            ValueError: if a key of ``keys`` is missing, no key is left, T
                differs from the stored chunks' or is not above ``burn_in``,
                or the keys or per-step shapes differ from the stored ones.
            TimeoutError: if the lock of a shared buffer cannot be taken in time.
        """
        op = "SequenceReplayBuffer.add"
        if not isinstance(batch, Trajectories):
            raise TypeError(f"{op}: batch must be a Trajectories (a batcher's batch), got {describe(batch)}")
        steps = batch.trajectories
        if keys is not None:
            steps = steps.get(check_keys(op, "keys", keys, steps.keys(), "the batch's trajectories"))
        if steps.empty():
            raise ValueError(f"{op}: the batch's trajectories must have at least one key to store, got none")
        n_timesteps = steps.n_timesteps()
        held = self.n_timesteps
        if held is not None and n_timesteps != held:
            raise ValueError(
                f"{op}: the batch has T={n_timesteps} steps per row, expected T={held} (the steps of the "
                "chunks held; every add must have the same T)"
            )
        if self._burn_in >= n_timesteps:
            raise ValueError(
                f"{op}: burn_in={self._burn_in} must be below the batch's T={n_timesteps}, or no step "
                "would be learned from"
            )
        data = {_STEPS + key: value for key, value in steps.items()}
        data[_LENGTH] = steps.lengths
        data.update((_INFO + key, value) for key, value in batch.info.items())
        chunks = DictTensor(data)
        specs = self._buffer.specs()
        if specs is not None:
            _check_specs(chunks.specs(), specs, op)
        kept = steps.lengths > self._burn_in  # a row of burn-in alone has nothing to learn from
        if not bool(kept.any()):
            return
        if not bool(kept.all()):
            chunks = chunks.index(kept)
        self._buffer.add(chunks)
        self._n_timesteps = n_timesteps

    # ------------------------------------------------------------------ reading

    def sample(self, batch_size: int) -> SequenceSample:
        """Draw ``batch_size`` chunks, with replacement: uniformly, or by priority if ``prioritized``.

        Args:
            batch_size: a positive int.

        Returns:
            ``SequenceSample(batch, indices, weights, learn)``: the chunks (a
            ``Trajectories`` ``[batch_size, T]`` of new tensors on ``device``),
            their slots (int64 ``[batch_size]``), their importance-sampling
            weights (float32 ``[batch_size]``, ones unless prioritized) and
            the steps to learn from (bool ``[batch_size, T]``), all on
            ``device``.

        Raises:
            TypeError: if ``batch_size`` is not an int.
            ValueError: if ``batch_size`` is below 1.
            RuntimeError: if the buffer is empty.
            TimeoutError: if the lock of a shared buffer cannot be taken in time.
        """
        op = "SequenceReplayBuffer.sample"
        check_int(op, "batch_size", batch_size)
        n_timesteps = self.n_timesteps
        if len(self._buffer) == 0 or n_timesteps is None:
            raise RuntimeError(f"{op}: cannot sample from an empty buffer; add a batch first")
        rows, indices, weights = self._buffer.sample(batch_size)
        lengths = rows[_LENGTH]
        steps = TemporalDictTensor.unchecked(rows.truncate_key(_STEPS), lengths, n_timesteps)
        batch = Trajectories(rows.truncate_key(_INFO), steps)
        time = torch.arange(n_timesteps, device=lengths.device)
        learn = (time >= self._burn_in) & (time < lengths.unsqueeze(1))
        return SequenceSample(batch, indices, weights, learn)

    def update_priorities(self, indices: torch.Tensor, priorities: torch.Tensor) -> None:
        """Set the priorities of chunks drawn by ``sample``, in place (a prioritized buffer only).

        Args:
            indices: the chunks' slots, a sample's ``indices``: int64 ``[n]``
                on ``device``.
            priorities: non-negative, finite, floating ``[n]`` on ``device``,
                usually ``sequence_priorities(|TD error|, sample.learn)``.

        Raises:
            RuntimeError: if the buffer is not ``prioritized``.
            TypeError, ValueError: as ``PrioritizedReplayBuffer.update_priorities``
                (the message names this method; the indices must lie in
                ``[0, len(self))``, the chunks held).
        """
        op = "SequenceReplayBuffer.update_priorities"
        if not isinstance(self._buffer, PrioritizedReplayBuffer):
            raise RuntimeError(
                f"{op}: the buffer samples uniformly; build it with prioritized=True to sample by priority"
            )
        try:
            self._buffer.update_priorities(indices, priorities)
        except (TypeError, ValueError) as error:  # named as the method called, not the one inside
            said = str(error).replace("PrioritizedReplayBuffer.update_priorities", op)
            raise type(error)(said.replace("(the rows held)", "(the chunks held)")) from None

    # ------------------------------------------------------------------ saving

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to restore the buffer exactly (see ``ReplayBuffer.state_dict``).

        Returns:
            The chunk store's state (chunks, position, generator state, and
            priorities if prioritized), plus ``burn_in``, ``n_timesteps`` and
            ``prioritized``: Python values and CPU tensors, loadable with
            ``torch.load(..., weights_only=True)``.
        """
        return {
            **self._buffer.state_dict(),
            "burn_in": self._burn_in,
            "n_timesteps": self.n_timesteps,
            "prioritized": self._prioritized,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore, in place, a state from ``state_dict``.

        Raises:
            TypeError: if ``state`` is not a mapping; and as
                ``ReplayBuffer.load_state_dict``.
            ValueError: if ``burn_in``, ``prioritized``, the chunks' T (once
                this buffer has chunks) or the capacity differ, or the state
                is incomplete.
        """
        op = "SequenceReplayBuffer.load_state_dict"
        if not isinstance(state, Mapping):
            raise TypeError(f"{op}: state must be a dict from state_dict(), got {describe(state)}")
        missing = [k for k in ("burn_in", "capacity", "n_timesteps", "prioritized") if k not in state]
        if missing:
            raise ValueError(
                f"{op}: state lacks the entries {missing}; was it made by SequenceReplayBuffer.state_dict()?"
            )
        for name, mine in (
            ("burn_in", self._burn_in),
            ("capacity", self.capacity),
            ("prioritized", self._prioritized),
        ):
            if state[name] != mine:
                raise ValueError(f"{op}: the state has {name}={state[name]!r}, this buffer {name}={mine!r}")
        held, saved = self.n_timesteps, state["n_timesteps"]
        if held is not None and saved is not None and saved != held:
            raise ValueError(f"{op}: the state holds chunks of T={saved} steps, this buffer T={held}")
        with told_as(f"{type(self._buffer).__name__}.load_state_dict", op):
            self._buffer.load_state_dict(state)
        self._n_timesteps = None  # read again from the storage, allocated by the load if it was not

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write ``state_dict()`` to ``path`` with ``torch.save``.

        Raises:
            TypeError, ValueError, FileNotFoundError, IsADirectoryError: as ``ReplayBuffer.save``.
        """
        path = save_path(f"{type(self).__name__}.save", path)
        torch.save(self.state_dict(), path)

    def load(self, path: str | os.PathLike[str]) -> None:
        """Restore, in place, a buffer written by ``save`` (loaded with ``weights_only=True``).

        Raises:
            TypeError, ValueError, FileNotFoundError, IsADirectoryError: as
                ``ReplayBuffer.load``, and as ``load_state_dict``.
        """
        self.load_state_dict(read_state(f"{type(self).__name__}.load", path))


def _steps_of(specs: Specs) -> int:
    """T, read from the per-row shape of a ``steps/`` key of the chunk store."""
    return next(spec.shape[0] for key, spec in specs.items() if key.startswith(_STEPS))


def _name(key: str) -> str:
    """A chunk store key as the batch names it: ``steps/obs`` -> ``'obs'``, ``info/agent_state/h`` -> ``info 'agent_state/h'``."""
    if key.startswith(_STEPS):
        return repr(key[len(_STEPS) :])
    if key.startswith(_INFO):
        return f"info {key[len(_INFO) :]!r}"
    return key


def _check_specs(got: Specs, expected: Specs, op: str) -> None:
    """The chunks of a batch must have the stored keys, per-step shapes and dtypes; errors name the batch's keys."""
    for prefix, where in ((_STEPS, "trajectories"), (_INFO, "info")):
        have = sorted(k[len(prefix) :] for k in got if k.startswith(prefix))
        want = sorted(k[len(prefix) :] for k in expected if k.startswith(prefix))
        if have != want:
            raise ValueError(
                f"{op}: the batch's {where} has the keys {have}, expected {want} (those of the chunks "
                f"held: missing {sorted(set(want) - set(have))}, unexpected {sorted(set(have) - set(want))})"
            )
    for key, spec in got.items():
        stored = expected[key]
        per = "steps" if key.startswith(_STEPS) else "rows"
        # the steps' shapes start with T, checked already: name the per-step shape
        shape, stored_shape = (
            (spec.shape[1:], stored.shape[1:]) if per == "steps" else (spec.shape, stored.shape)
        )
        if spec.dtype != stored.dtype:
            raise TypeError(
                f"{op}: key {_name(key)} has dtype {spec.dtype}, expected {stored.dtype} (the dtype of the "
                "chunks held; values are never cast)"
            )
        if shape != stored_shape:
            raise ValueError(
                f"{op}: key {_name(key)} has {per} of shape "
                f"{shape}, expected {stored_shape} (the chunks held)"
            )
