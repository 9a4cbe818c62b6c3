"""Agents, environments and factories for the fault tests of the batchers, importable by worker processes.

They live here rather than in a test module for the reason ``mp_helpers``
gives: a spawned worker re-imports every class it is handed by module name.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Iterator, Mapping
from typing import Any

import torch

from rlstruct import Agent
from rlstruct.testing import CounterEnv, CountingAgent


def in_worker() -> bool:
    """Whether this is a worker process (the main process of a test has no parent process)."""
    return multiprocessing.parent_process() is not None


def exiting_agent(code: int) -> Agent:
    """A CountingAgent in the main process; in a worker, the process exits with ``code`` at once."""
    if in_worker():
        os._exit(code)
    return CountingAgent()


class HangingAtStartEnv(CounterEnv):
    """A CounterEnv that, in a worker, waits for ``gate`` (a multiprocessing Event) before it exists."""

    def __init__(self, n_envs: int = 1, seed: int = 0, gate: Any = None) -> None:
        if in_worker() and gate is not None:
            gate.wait()
        super().__init__(n_envs, seed)


class BreakingWeights(Mapping[str, torch.Tensor]):
    """Weights whose ``n``-th lookup raises: the checks read each key once, so a later copy fails half-way."""

    def __init__(self, weights: Mapping[str, torch.Tensor], n: int) -> None:
        self.weights, self.n, self.lookups = dict(weights), n, 0

    def __getitem__(self, key: str) -> torch.Tensor:
        self.lookups += 1
        if self.lookups == self.n:
            raise KeyboardInterrupt  # as Ctrl-C in the middle of update()
        return self.weights[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.weights)

    def __len__(self) -> int:
        return len(self.weights)
