"""SlotBoard: who may write or read each slot of a streaming buffer, in shared memory.

Each slot is FREE (a worker may claim it), WRITING (a worker fills it), READY
(finished, waiting for the learner, stamped with a sequence number) or
READING (the learner copies it out). Transitions happen under one lock,
always with a timeout, so a worker that dies holding it cannot hang anyone.
The learner takes the READY slot with the smallest sequence number: the
oldest finished trajectory first. When no slot is FREE, workers wait
(back-pressure): the buffer never grows.
"""

from __future__ import annotations

from typing import Any

import torch

FREE, WRITING, READY, READING = 0, 1, 2, 3
LOCK_TIMEOUT_S = 10.0


class SlotBoard:
    """The state of ``n_slots`` slots, shared by the learner and the workers.

    Args:
        n_slots: the number of slots.
        ctx: the multiprocessing context whose lock guards the board.
    """

    def __init__(self, n_slots: int, ctx: Any) -> None:
        self.status = torch.full((n_slots,), FREE, dtype=torch.int64).share_memory_()
        self.order = torch.zeros(n_slots, dtype=torch.int64).share_memory_()
        self.counter = torch.zeros(1, dtype=torch.int64).share_memory_()
        self.lock = ctx.Lock()

    def _locked(self) -> Any:
        if not self.lock.acquire(timeout=LOCK_TIMEOUT_S):
            raise TimeoutError(f"the slot board's lock was not released within {LOCK_TIMEOUT_S:g} s")
        return self.lock

    def _move(self, source: int, target: int, oldest: bool) -> int | None:
        lock = self._locked()
        try:
            candidates = torch.nonzero(self.status == source).squeeze(1)
            if candidates.numel() == 0:
                return None
            slot = int(candidates[self.order[candidates].argmin()]) if oldest else int(candidates[0])
            self.status[slot] = target
            return slot
        finally:
            lock.release()

    def claim(self) -> int | None:
        """A worker takes a FREE slot to write into (None if all are taken)."""
        return self._move(FREE, WRITING, oldest=False)

    def publish(self, slot: int) -> None:
        """A worker marks ``slot`` READY, after every other finished slot."""
        lock = self._locked()
        try:
            self.counter += 1
            self.order[slot] = self.counter[0]
            self.status[slot] = READY
        finally:
            lock.release()

    def take(self) -> int | None:
        """The learner takes the oldest READY slot to read (None if none is ready)."""
        return self._move(READY, READING, oldest=True)

    def release(self, slot: int) -> None:
        """The learner gives ``slot`` back to the workers."""
        self.status[slot] = FREE

    def clear(self) -> None:
        """Every slot FREE again (when no worker is streaming)."""
        self.status.fill_(FREE)
