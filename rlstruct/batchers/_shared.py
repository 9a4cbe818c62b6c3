"""What the main process and the workers of a ``MultiprocessBatcher`` share: weights and trajectory buffers.

Both live in shared memory (torch's file descriptors: nothing named in
``/dev/shm``) and are handed to each worker once: the weights at start, the
buffers with ``attach``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch

from rlstruct.agent import Agent
from rlstruct.dicttensor import DictTensor
from rlstruct.specs import Specs, TensorSpec
from rlstruct.temporal import TemporalDictTensor

SPINS = 1000  # how many times a worker yields before it sleeps between looks at the weights counter


class SharedWeights:
    """The agent's weights, with a sequence counter that is odd while the main process writes them.

    A worker loads them when the counter is even and differs from the
    version it holds, and reads again if the counter moved while it copied.

    Args:
        weights: the initial weights (copied).
    """

    def __init__(self, weights: Mapping[str, torch.Tensor]) -> None:
        self.tensors = {k: v.detach().clone().share_memory_() for k, v in weights.items()}
        self.counter = torch.zeros(1, dtype=torch.int64).share_memory_()

    def version(self) -> int:
        """How many writes were completed."""
        return int(self.counter[0]) // 2

    def release(self) -> None:
        """Let go of the shared memory (the tensors and the counter); ``version`` keeps its value. Safe twice."""
        self.tensors = {}
        self.counter = self.counter.clone()  # a private copy: the shared one is freed with its last reference

    def half_written(self) -> bool:
        """Whether the last write failed half-way (the counter stayed odd): no complete version to load."""
        return int(self.counter[0]) % 2 == 1

    def write(self, weights: Mapping[str, torch.Tensor]) -> None:
        """Copy ``weights`` in (main process), one copy per tensor, then count one version.

        If a copy fails or is interrupted, the counter stays odd: the tensors
        are a mix that no worker may load, and workers that want them wait
        (at most their timeout) for the next write, which completes it.
        """
        start = int(self.counter[0])
        writing = start if start % 2 else start + 1  # odd: a previous write failed half-way
        self.counter.fill_(writing)
        for key, value in self.tensors.items():
            value.copy_(weights[key])
        self.counter.fill_(writing + 1)  # even: done

    def load(self, agent: Agent, loaded: int, timeout: float, parent_alive: Callable[[], bool]) -> int:
        """Load the weights into ``agent`` if they changed since counter value ``loaded`` (worker).

        Returns:
            The counter value read: ``loaded`` if nothing changed.

        Raises:
            TimeoutError: if the counter stays odd for ``timeout`` seconds.
            EOFError: if the main process died while it was odd.
        """
        deadline, spins = time.monotonic() + timeout, 0
        while True:
            before = int(self.counter[0])
            if before == loaded:
                return loaded
            if before % 2:  # the main process is writing
                if not parent_alive():
                    raise EOFError("the main process died while writing the weights")
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the shared weights stayed half-written for {timeout:g} s")
                spins += 1
                if spins < SPINS:
                    os.sched_yield()  # a write lasts microseconds to milliseconds
                else:
                    time.sleep(0.001)  # a write that failed half-way: wait for the next one, not on a core
                continue
            agent.load_state_dict(self.tensors)
            if int(self.counter[0]) == before:
                return before


@dataclass(frozen=True)
class SharedBuffers:
    """The trajectory storage of all slots; slot ``s`` is rows ``s * n_envs`` to ``(s + 1) * n_envs``.

    Attributes:
        steps: trajectory key -> ``[n_slots * n_envs, T, ...]``.
        info: info key -> ``[n_slots * n_envs, ...]``.
        lengths: int64 ``[n_slots * n_envs]``.
        versions: int64 ``[n_slots]``: the policy version each slot's trajectory used.
        n_envs: the rows of a slot.
    """

    steps: dict[str, torch.Tensor]
    info: dict[str, torch.Tensor]
    lengths: torch.Tensor
    versions: torch.Tensor
    n_envs: int

    @classmethod
    def allocate(cls, info: DictTensor, steps: DictTensor, n_slots: int, n_timesteps: int) -> SharedBuffers:
        """Zeros shaped after one group's ``info`` and one step of its ``steps`` (``[n_envs, ...]`` each)."""
        n_envs = info.n_elems()
        rows = n_slots * n_envs
        step_specs = Specs({k: TensorSpec(tuple(v.shape[2:]), v.dtype) for k, v in steps.items()})
        return cls(
            steps=dict(TemporalDictTensor.zeros(step_specs, rows, n_timesteps, shared=True).items()),
            info=dict(DictTensor.zeros(info.specs(), rows, shared=True).items()),
            lengths=torch.zeros(rows, dtype=torch.int64).share_memory_(),
            versions=torch.zeros(n_slots, dtype=torch.int64).share_memory_(),
            n_envs=n_envs,
        )

    def rows(self, slot: int) -> slice:
        return slice(slot * self.n_envs, (slot + 1) * self.n_envs)

    def slot_steps(self, slot: int) -> dict[str, torch.Tensor]:
        """Views of one slot's trajectory storage, ``[n_envs, T, ...]`` per key."""
        rows = self.rows(slot)
        return {k: v[rows] for k, v in self.steps.items()}

    def finish(self, slot: int, info: DictTensor, lengths: torch.Tensor, version: int) -> None:
        """Write what a worker knows once its trajectory is written: its info, lengths and policy version.

        Raises:
            ValueError: if an info key's dtype or shape differs from the buffer's (an agent whose
                state changed dtype, say): nothing is cast.
        """
        rows = self.rows(slot)
        if set(info.keys()) != self.info.keys():
            raise ValueError(
                f"the info keys {sorted(info.keys())} differ from those of the buffer, made at the first "
                f"reset: {sorted(self.info)}"
            )
        for key, value in info.items():
            buffer = self.info.get(key)
            if buffer is None or buffer.dtype != value.dtype or buffer.shape[1:] != value.shape[1:]:
                expected = "no such key" if buffer is None else f"{buffer.dtype} {tuple(buffer.shape[1:])}"
                raise ValueError(
                    f"the info key {key!r} is {value.dtype} {tuple(value.shape[1:])} (dtype, row shape), "
                    f"but the buffer, made at the first reset, holds {expected}; nothing is cast"
                )
            buffer[rows] = value
        self.lengths[rows] = lengths
        self.versions[slot] = version
