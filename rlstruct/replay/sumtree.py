"""SumTree: priorities of a fixed number of slots, with prefix-sum search and minimum in a few tensor ops.

The tree behind ``PrioritizedReplayBuffer``, written in plain torch and
vectorised over a batch: ``update`` and ``find`` walk the levels of the tree
once, each level handling every element of the batch in a few tensor
operations, so a batch of 256 costs a few dozen tensor operations, not 256
Python iterations.

Each node has ``BRANCHING`` (32) children rather than 2. At batch sizes of a
few hundred, the cost of a level is the fixed cost of its tensor operations,
not the arithmetic, so a tree of ``log32(capacity)`` levels (4 for a million
slots) walks five times fewer of them than a binary tree of ``log2(capacity)``
(20). Level ``d`` holds the nodes at depth ``d`` (level 0 is the root); the
children of node ``i`` of level ``d`` are nodes ``32 i`` to ``32 i + 31`` of
level ``d + 1``, and slot ``s`` is leaf ``s`` of the last level. Levels are
padded to a multiple of 32 with empty nodes. A second tree of the same shape
keeps minima (empty nodes hold ``+inf``), so the smallest priority is read at
its root. A parent is always recomputed from its children, never adjusted by a
difference, so rounding errors do not accumulate over millions of updates.

All values are float64 on the tree's device, in one flat tensor per tree (the
levels are views of it), so ``share_memory_`` puts a whole tree in one
shared-memory segment.

Examples:
    >>> import torch
    >>> from rlstruct.replay.sumtree import SumTree
    >>> tree = SumTree(4)
    >>> tree.update(torch.tensor([0, 1, 2]), torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64))
    >>> tree.total(), tree.min()
    (6.0, 1.0)
    >>> tree.find(torch.tensor([0.5, 1.5, 5.9], dtype=torch.float64))
    tensor([0, 1, 2])
"""

from __future__ import annotations

from typing import Any

import torch

from rlstruct.checks import check_device, check_int

__all__ = ["BRANCHING", "SumTree"]

BRANCHING = 32
"""The number of children of a node."""


def _level_sizes(capacity: int) -> list[int]:
    """The number of nodes of each level, root first: each level but the root a multiple of BRANCHING."""
    sizes = [-(-capacity // BRANCHING) * BRANCHING]
    while sizes[0] > 1:
        parents = sizes[0] // BRANCHING
        sizes.insert(0, parents if parents == 1 else -(-parents // BRANCHING) * BRANCHING)
    return sizes


class SumTree:
    """Non-negative priorities of ``capacity`` slots, their running sums and minimum.

    Args:
        capacity: the number of slots (leaves); a positive int.
        device: where the trees live.

    Every slot starts with priority 0 and does not count in ``min()`` until it
    is given a priority.

    Raises:
        TypeError: for a capacity that is not an int (a NumPy int is one), or
            a device of the wrong type.
        ValueError: for a capacity below 1, or a device torch does not know
            or that cannot hold data here.
    """

    def __init__(self, capacity: int, *, device: torch.device | str = "cpu") -> None:
        capacity = check_int("SumTree", "capacity", capacity)
        device = check_device("SumTree", device, usable=True)
        self.capacity = capacity
        self._sizes = _level_sizes(capacity)
        total = sum(self._sizes)
        self._flat_sums = torch.zeros(total, dtype=torch.float64, device=device)
        self._flat_mins = torch.full((total,), torch.inf, dtype=torch.float64, device=device)
        self._make_levels()

    def _make_levels(self) -> None:
        self.sums = list(torch.split(self._flat_sums, self._sizes))
        self.mins = list(torch.split(self._flat_mins, self._sizes))

    def __getstate__(self) -> dict[str, Any]:
        # views are rebuilt on the other side, so that they keep sharing the flat tensors
        return {k: v for k, v in self.__dict__.items() if k not in ("sums", "mins")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._make_levels()

    @property
    def depth(self) -> int:
        """The number of levels below the root."""
        return len(self._sizes) - 1

    @property
    def device(self) -> torch.device:
        """The device of the trees."""
        return self._flat_sums.device

    def share_memory_(self) -> SumTree:
        """Move both trees to shared memory, in place (CPU only). Returns self."""
        self._flat_sums.share_memory_()
        self._flat_mins.share_memory_()
        self._make_levels()
        return self

    def total(self) -> float:
        """The sum of all priorities."""
        return float(self.sums[0][0])

    def min(self) -> float:
        """The smallest priority among the slots given one (``inf`` if none was)."""
        return float(self.mins[0][0])

    def get(self, slots: torch.Tensor) -> torch.Tensor:
        """The priorities of ``slots`` (int64 on ``device``): float64, same shape."""
        return self.sums[-1][slots]

    def update(self, slots: torch.Tensor, priorities: torch.Tensor) -> None:
        """Set the priorities of some slots, in place, and refresh their ancestors.

        Args:
            slots: int64, shape [n], on ``device``, entries in ``[0, capacity)``.
                Repeated slots are allowed: the last occurrence wins.
            priorities: float64, shape [n], on ``device``, non-negative.

        The caller checks the arguments (this is the hot path of a buffer).
        """
        if slots.numel() == 0:
            return
        unique, inverse = torch.unique(slots, return_inverse=True)
        if unique.numel() != slots.numel():  # keep the last occurrence of each slot
            order = torch.arange(slots.numel(), device=slots.device)
            last = torch.zeros_like(unique).scatter_reduce_(0, inverse, order, "amax")
            slots, priorities = unique, priorities[last]
        self.sums[-1][slots] = priorities
        self.mins[-1][slots] = priorities
        nodes = slots
        for level in reversed(range(self.depth)):
            nodes = nodes // BRANCHING  # a repeated parent gets the same value twice: harmless
            self.sums[level][nodes] = self.sums[level + 1].view(-1, BRANCHING)[nodes].sum(1)
            self.mins[level][nodes] = self.mins[level + 1].view(-1, BRANCHING)[nodes].amin(1)

    def load_(self, priorities: torch.Tensor) -> None:
        """Give slots ``0 .. n-1`` these priorities and clear the others, in place; rebuilds the trees.

        Args:
            priorities: float64, shape [n] with ``n <= capacity``, on ``device``, non-negative.

        The trees come out exactly as if the priorities had been set by ``update``.
        """
        self._flat_sums.zero_()
        self._flat_mins.fill_(torch.inf)
        n = priorities.shape[0]
        self.sums[-1][:n] = priorities
        self.mins[-1][:n] = priorities
        for level in reversed(range(self.depth)):
            children = self.sums[level + 1].view(-1, BRANCHING)
            self.sums[level][: children.shape[0]] = children.sum(1)
            self.mins[level][: children.shape[0]] = self.mins[level + 1].view(-1, BRANCHING).amin(1)

    def find(self, prefix: torch.Tensor) -> torch.Tensor:
        """For each value u, the slot s where the running sum of priorities first exceeds u.

        Slot s is chosen with ``sum(p[:s]) <= u < sum(p[:s + 1])``: drawing u
        uniformly in ``[0, total())`` picks slot s with probability
        ``p[s] / total()``. A slot of priority 0 is never returned, even when
        rounding puts u at or past the total.

        Args:
            prefix: float64, shape [n], on ``device``, entries in ``[0, total())``.

        Returns:
            The slots: int64, shape [n], on ``device``.
        """
        nodes = torch.zeros_like(prefix, dtype=torch.int64)
        u = prefix.unsqueeze(1)
        zero = torch.zeros((), dtype=prefix.dtype, device=prefix.device)
        for level in range(1, self.depth + 1):
            children = self.sums[level].view(-1, BRANCHING)[nodes]  # [n, BRANCHING]
            running = children.cumsum(1)
            # keep u below the node's sum, which rounding may reach: then the first child whose running
            # sum exceeds u exists, and has a positive priority since the running sum grows there
            u = torch.minimum(u, running[:, -1:].nextafter(zero))
            child = (running <= u).sum(1, keepdim=True)
            u = u - (running - children).gather(1, child)
            nodes = nodes * BRANCHING + child.squeeze(1)
        return nodes
