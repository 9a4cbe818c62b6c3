"""``PrioritizedReplayBuffer``: proportional prioritized replay on a ``SumTree``."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch

from rlstruct.checks import check_int, check_number
from rlstruct.errors import describe
from rlstruct.replay.sumtree import SumTree
from rlstruct.replay.uniform import ReplayBuffer, ReplaySample
from rlstruct.specs import Specs

__all__ = ["PrioritizedReplayBuffer"]


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
    at any capacity. ``benchmarks/replay.py`` times it against a binary sum
    tree walked row by row in Python; the figures are in
    ``docs/performance.md`` (Replay buffers).

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
        self._alpha = check_number("PrioritizedReplayBuffer", "alpha", alpha, 0.0)
        self._eps = check_number("PrioritizedReplayBuffer", "eps", eps, 0.0, low_open=True)
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
        self._beta = check_number("PrioritizedReplayBuffer", "beta", value, 0.0, 1.0)

    @property
    def sum_tree(self) -> SumTree:
        """The sum tree of ``p_i^alpha`` (to read; write through ``update_priorities``)."""
        return self._tree

    def sample(self, batch_size: int, beta: float | None = None) -> ReplaySample:
        """Draw ``batch_size`` rows with probability proportional to ``p^alpha``, stratified.

        Args:
            batch_size: a positive int.
            beta: the importance-sampling exponent; ``self.beta`` if None.

        Returns:
            ``ReplaySample(rows, indices, weights)``: the rows (a DictTensor of
            new tensors on ``device``), their slots (int64, shape [batch_size],
            on ``device``, for ``update_priorities``) and their
            importance-sampling weights (float32, shape [batch_size], on
            ``device``, in ``(0, 1]``).

        Raises:
            TypeError: for a ``batch_size`` that is not an int or a ``beta``
                that is not a number.
            ValueError: for a ``batch_size`` or ``beta`` out of range.
            RuntimeError: if the buffer is empty.
        """
        op = "PrioritizedReplayBuffer.sample"
        check_int(op, "batch_size", batch_size)
        beta = self._beta if beta is None else check_number(op, "beta", beta, 0.0, 1.0)
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
            return ReplaySample(self._gather(self._storage_or_raise(op), indices), indices, weights)

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
            raise TypeError(f"{op}: indices must be an int64 tensor, got {describe(indices)}")
        if not isinstance(priorities, torch.Tensor) or not priorities.is_floating_point():
            raise TypeError(f"{op}: priorities must be a floating-point tensor, got {describe(priorities)}")
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
            # aminmax gives NaN for both ends as soon as one value is NaN: name the first bad value
            bad = int(torch.nonzero(~(torch.isfinite(p) & (p >= 0)))[0])
            raise ValueError(
                f"{op}: priorities must be finite and >= 0, got priorities[{bad}] = {float(p[bad])}"
            )
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
