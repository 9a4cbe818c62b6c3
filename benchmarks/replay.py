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
- ``sequence sample 32x80 @ 1e6 vs 1e4 steps``: ``SequenceReplayBuffer.sample(32)``
  of chunks of T = 80 steps (burn-in 40; a 4-float observation and its next
  observation, an int64 action, a float reward, a bool done, and a 64-float
  agent state per chunk) from a buffer holding 10^6 steps (12,500 chunks)
  against the same buffer holding 10^4 steps (125 chunks): a sample gathers
  32 chunks whatever the number held, so the target ratio is 1.2. With
  ``--quick``: 10^5 against 10^4 steps.
- ``sequence sample 32x80 @ 4e6 vs 1e6 steps``: the same, 4 x 10^6 steps
  (50,000 chunks) against 10^6: both too large for the processor's caches,
  where the small one of the row above fits. No target: the row shows
  whether the cost grows with the size once the chunks come from main
  memory. Not run with ``--quick``.
- ``sequence sample 32x80 @ 1e6 steps, keys side by side vs apart``: the
  same sample from the buffer of 10^6 steps (10^5 with ``--quick``), whose
  chunk store lays each row's keys side by side in one block, against a
  copy of it whose keys each have a block of their own (as ``DictTensor.zeros``
  lays them out): a chunk then comes from one stretch of main memory
  instead of seven. No target.

Usage:
    python benchmarks/replay.py [--quick] [--repeats N] [--json PATH]
"""

from __future__ import annotations

import copy
import random
from functools import partial

import torch
from _common import Row, compare, parse_args, report

from rlstruct import (
    DictTensor,
    PrioritizedReplayBuffer,
    ReplayBuffer,
    SequenceReplayBuffer,
    TemporalDictTensor,
    Trajectories,
)

BATCH = 256
ALPHA = 0.6
SEQUENCE_BATCH = 32
SEQUENCE_T = 80
SEQUENCE_BURN_IN = 40
SEQUENCE_HELD = (10_000, 1_000_000, 4_000_000)


def transitions(n: int, gen: torch.Generator) -> DictTensor:
    return DictTensor(
        {
            "observation": torch.randn(n, 8, generator=gen),
            "action": torch.randint(0, 4, (n,), generator=gen),
            "next/reward": torch.randn(n, generator=gen),
            "next/observation": torch.randn(n, 8, generator=gen),
        }
    )


def sequence_chunks(n: int, gen: torch.Generator) -> Trajectories:
    """``n`` rows of a batcher's batch of ``SEQUENCE_T`` steps, with an agent state per row."""
    shape = (n, SEQUENCE_T)
    steps = TemporalDictTensor(
        {
            "observation": torch.randn(*shape, 4, generator=gen),
            "action": torch.randint(0, 2, shape, generator=gen),
            "next/reward": torch.randn(*shape, generator=gen),
            "next/observation": torch.randn(*shape, 4, generator=gen),
            "next/done": torch.rand(*shape, generator=gen) < 0.01,
        }
    )
    return Trajectories(DictTensor({"agent_state/h": torch.randn(n, 64, generator=gen)}), steps)


def sequence_buffer(steps: int, gen: torch.Generator) -> SequenceReplayBuffer:
    """A full buffer of ``steps // SEQUENCE_T`` chunks."""
    capacity = steps // SEQUENCE_T
    buffer = SequenceReplayBuffer(
        capacity, burn_in=SEQUENCE_BURN_IN, generator=torch.Generator().manual_seed(0)
    )
    for start in range(0, capacity, 1000):
        buffer.add(sequence_chunks(min(1000, capacity - start), gen))
    return buffer


def keys_apart(buffer: SequenceReplayBuffer) -> SequenceReplayBuffer:
    """A copy of ``buffer`` whose chunk store holds each key in a block of its own, as ``DictTensor.zeros`` does."""
    apart = copy.deepcopy(buffer)
    store = apart._buffer  # the chunk store's layout is private: the baseline reaches in to undo it
    with store.locked_storage() as (held, _):
        apart_keys = DictTensor({key: value.contiguous() for key, value in held.items()})
    store._storage = apart_keys
    return apart


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

    held = {
        steps: sequence_buffer(steps, gen) for steps in ((10_000, 100_000) if args.quick else SEQUENCE_HELD)
    }
    pairs = (
        [(10_000, 100_000, 1.2)] if args.quick else [(10_000, 1_000_000, 1.2), (1_000_000, 4_000_000, None)]
    )
    for small, large, target in pairs:
        value, baseline = compare(
            [partial(held[large].sample, SEQUENCE_BATCH), partial(held[small].sample, SEQUENCE_BATCH)], budget
        )
        name = f"sequence sample 32x80 @ {large:.0e} vs {small:.0e} steps".replace("e+0", "e")
        rows.append(Row(name, value * 1e6, "us", baseline * 1e6, target=target))
    large = pairs[0][1]
    apart = keys_apart(held[large])
    value, baseline = compare(
        [partial(held[large].sample, SEQUENCE_BATCH), partial(apart.sample, SEQUENCE_BATCH)], budget
    )
    name = f"sequence sample 32x80 @ {large:.0e} steps, keys side by side vs apart".replace("e+0", "e")
    rows.append(Row(name, value * 1e6, "us", baseline * 1e6))
    report(args, rows, "rlstruct", "reference")


if __name__ == "__main__":
    main()
