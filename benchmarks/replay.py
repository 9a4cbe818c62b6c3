"""Replay buffers: the cost of a learner's step of sampling (and updating priorities).

Rows (median microseconds per call, single-threaded torch, transitions of an
8-float observation, its next observation, an int64 action and a float reward):

- ``uniform sample 256``: ``ReplayBuffer.sample(256)`` against the same gather
  written as a comprehension over a plain dict of tensors (target ratio 1.3).
- ``prioritized sample+update 256 @ N``: ``PrioritizedReplayBuffer.sample(256)``
  then ``update_priorities`` of the 256 rows, at capacity N, against the
  textbook binary sum tree in pure Python (one Python loop per row and level,
  as in the usual segment-tree implementations), doing the same stratified
  draws and updates. No target: the row shows what vectorising buys.

Usage:
    python benchmarks/replay.py [--quick] [--repeats N] [--json PATH]
"""

from __future__ import annotations

import random

import torch
from _common import Row, compare, parse_args, report

from rlstruct import DictTensor, PrioritizedReplayBuffer, ReplayBuffer

BATCH = 256
ALPHA = 0.6


def transitions(n: int, gen: torch.Generator) -> DictTensor:
    return DictTensor(
        {
            "observation": torch.randn(n, 8, generator=gen),
            "action": torch.randint(0, 4, (n,), generator=gen),
            "next/reward": torch.randn(n, generator=gen),
            "next/observation": torch.randn(n, 8, generator=gen),
        }
    )


class PythonSumTree:
    """A binary sum tree over Python lists, walked one row at a time (the baseline)."""

    def __init__(self, priorities: list[float]) -> None:
        self.size = 1
        while self.size < len(priorities):
            self.size *= 2
        self.tree = [0.0] * (2 * self.size)
        self.tree[self.size : self.size + len(priorities)] = priorities
        for node in reversed(range(1, self.size)):
            self.tree[node] = self.tree[2 * node] + self.tree[2 * node + 1]

    def find(self, u: float) -> int:
        node = 1
        while node < self.size:
            left = self.tree[2 * node]
            if u < left:
                node = 2 * node
            else:
                u -= left
                node = 2 * node + 1
        return node - self.size

    def update(self, slot: int, priority: float) -> None:
        node = slot + self.size
        self.tree[node] = priority
        node //= 2
        while node:
            self.tree[node] = self.tree[2 * node] + self.tree[2 * node + 1]
            node //= 2


def python_step(tree: PythonSumTree, rng: random.Random) -> None:
    segment = tree.tree[1] / BATCH
    slots = [tree.find((i + rng.random()) * segment) for i in range(BATCH)]
    for slot in slots:
        tree.update(slot, (rng.random() + 1e-6) ** ALPHA)


def main() -> None:
    args, budget = parse_args(__doc__)
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(0)
    capacities = [10_000] if args.quick else [100_000, 1_000_000]
    rows: list[Row] = []

    uniform = ReplayBuffer(capacities[-1], generator=torch.Generator().manual_seed(0))
    uniform.add(transitions(capacities[-1], gen))
    plain = dict(transitions(capacities[-1], gen).items())
    (value, baseline) = compare(
        [
            lambda: uniform.sample(BATCH),
            lambda: (
                ids := torch.randint(capacities[-1], (BATCH,), generator=gen),
                {k: v[ids] for k, v in plain.items()},
            ),
        ],
        budget,
    )
    rows.append(Row("uniform sample 256", value * 1e6, "us", baseline * 1e6, target=1.3))

    for capacity in capacities:
        buffer = PrioritizedReplayBuffer(capacity, alpha=ALPHA, generator=torch.Generator().manual_seed(0))
        buffer.add(transitions(capacity, gen))
        buffer.update_priorities(torch.arange(capacity), torch.rand(capacity, generator=gen))
        tree = PythonSumTree(buffer.sum_tree.get(torch.arange(capacity)).tolist())
        rng = random.Random(0)

        def vectorised(buffer: PrioritizedReplayBuffer = buffer) -> None:
            _, indices, _ = buffer.sample(BATCH)
            buffer.update_priorities(indices, torch.rand(BATCH, generator=gen))

        value, baseline = compare([vectorised, lambda tree=tree, rng=rng: python_step(tree, rng)], budget)
        name = f"prioritized sample+update 256 @ {capacity:.0e}".replace("e+0", "e")
        rows.append(Row(name, value * 1e6, "us", baseline * 1e6))
    report(args, rows, "rlstruct", "reference")


if __name__ == "__main__":
    main()
