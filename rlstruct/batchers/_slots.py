"""SlotBoard: who may write or read each slot of a streaming buffer, in shared memory.

Each slot is FREE (a worker may claim it), WRITING (a worker fills it), READY
(finished, waiting for the learner, stamped with a sequence number) or
READING (the learner copies it out). Transitions happen under one lock,
always taken with the batcher's timeout, so a worker that dies holding it
cannot hang anyone; a worker waiting for it also leaves if the main process
died (holding it, say). The learner takes the READY slot with the smallest
sequence number: the oldest finished trajectory first. When no slot is FREE,
workers wait (back-pressure): the buffer never grows.

Nobody polls: two counting semaphores hold the number of FREE and of READY
slots, so a worker blocks on ``free`` until the learner releases a slot and
the learner blocks on ``ready`` until a worker publishes one. Each wait
lasts at most ``WAIT_S`` before the waiter looks at its pipe, the other
processes' liveness and its deadline, then waits again.

Each worker also stamps the board with ``time.monotonic()`` (one clock for
every process of the machine) whenever it publishes a slot or waits for a
free one: a worker whose stamp grows older than the timeout is filling one
trajectory for longer than that, i.e. it hangs or is far too slow, and the
learner can name it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch

FREE, WRITING, READY, READING = 0, 1, 2, 3
LOOK_S = 0.5  # how often a worker waiting for the lock checks that the main process is alive
WAIT_S = 0.05  # the longest one wait for a FREE or READY slot lasts before the waiter looks around


class SlotBoard:
    """The state of ``n_slots`` slots and the liveness of ``n_workers`` workers, shared by all processes.

    Args:
        n_slots: the number of slots.
        n_workers: the number of workers.
        ctx: the multiprocessing context whose lock guards the board.
        timeout: how long anyone waits for the lock before raising ``TimeoutError``.
    """

    def __init__(self, n_slots: int, n_workers: int, ctx: Any, timeout: float) -> None:
        self.status = torch.full((n_slots,), FREE, dtype=torch.int64).share_memory_()
        self.order = torch.zeros(n_slots, dtype=torch.int64).share_memory_()
        self.counter = torch.zeros(1, dtype=torch.int64).share_memory_()
        self.beats = torch.zeros(n_workers, dtype=torch.float64).share_memory_()
        self.lock = ctx.Lock()
        self.free = ctx.Semaphore(n_slots)  # one token per FREE slot not yet claimed
        self.ready = ctx.Semaphore(0)  # one token per READY slot not yet taken
        self.n_slots = n_slots
        self.timeout = timeout
        self.watch: Callable[[], bool] | None = None
        """In a worker: whether the main process is alive, checked while waiting for the lock."""

    def _locked(self) -> Any:
        deadline = time.monotonic() + self.timeout
        while not self.lock.acquire(timeout=min(LOOK_S, max(0.0, deadline - time.monotonic()))):
            if self.watch is not None and not self.watch():
                raise EOFError("the main process died holding the slot board's lock")
            if time.monotonic() >= deadline:
                raise TimeoutError(f"the slot board's lock was not released within {self.timeout:g} s")
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

    def claim(self, wait: float = 0.0) -> int | None:
        """A worker takes a FREE slot to write into, waiting at most ``wait`` seconds for one (else None)."""
        if not self.free.acquire(timeout=wait):
            return None
        return self._move(FREE, WRITING, oldest=False)  # None after a token of wake()

    def publish(self, slot: int, worker: int) -> None:
        """Worker ``worker`` marks ``slot`` READY, after every other finished slot."""
        lock = self._locked()
        try:
            self.counter += 1
            self.order[slot] = self.counter[0]
            self.status[slot] = READY
        finally:
            lock.release()
        self.ready.release()
        self.beat(worker)

    def take(self, wait: float = 0.0) -> int | None:
        """The learner takes the oldest READY slot to read, waiting at most ``wait`` seconds for one (else None)."""
        if not self.ready.acquire(timeout=wait):
            return None
        return self._move(READY, READING, oldest=True)

    def release(self, slot: int) -> None:
        """The learner gives ``slot`` back to the workers."""
        lock = self._locked()
        try:
            self.status[slot] = FREE
        finally:
            lock.release()
        self.free.release()

    def wake(self, n_workers: int) -> None:
        """Wake ``n_workers`` workers waiting for a free slot, so that they read their pipe now.

        The tokens it adds match no FREE slot (``claim`` then returns None);
        ``clear`` removes them.
        """
        for _ in range(n_workers):
            self.free.release()

    def clear(self) -> None:
        """Every slot FREE again and every worker alive as of now (when no worker is streaming)."""
        lock = self._locked()
        try:
            for semaphore in (self.free, self.ready):
                while semaphore.acquire(block=False):
                    pass
            self.status.fill_(FREE)
            for _ in range(self.n_slots):
                self.free.release()
            self.beats.fill_(time.monotonic())
        finally:
            lock.release()

    def beat(self, worker: int) -> None:
        """Worker ``worker`` shows it is alive: it just published, or it waits for a free slot."""
        self.beats[worker] = time.monotonic()

    def silent(self, timeout: float) -> list[int]:
        """The workers that showed no sign of life for more than ``timeout`` seconds, the oldest first."""
        quiet = time.monotonic() - self.beats
        return [int(w) for w in torch.argsort(quiet, descending=True) if float(quiet[w]) > timeout]
