"""What the algorithms measure of a batch: the returns of the episodes that ended, and how well a value fits."""

from __future__ import annotations

import math

import torch

from rlstruct.checks import check_int
from rlstruct.temporal import TemporalDictTensor

__all__ = ["EpisodeReturns", "explained_variance"]


class EpisodeReturns:
    """The undiscounted return of every training episode that ends in the collected batches.

    Args:
        n_rows: the batcher's rows (B); a return in progress is carried from
            one batch to the next, as the episodes are.

    Raises:
        TypeError: if ``n_rows`` is not an int.
        ValueError: if it is below 1.
    """

    def __init__(self, n_rows: int) -> None:
        self._running = torch.zeros(check_int("EpisodeReturns", "n_rows", n_rows), dtype=torch.float64)
        self.finished: list[float] = []

    def add(self, steps: TemporalDictTensor) -> None:
        """Add the rewards of a batch ``[B, T]`` (``next/reward``, ``next/done``, padding masked).

        Raises:
            ValueError: if B is not ``n_rows`` (the rows' returns would be mixed up).
        """
        if steps.n_elems() != self._running.shape[0]:
            raise ValueError(
                f"EpisodeReturns.add: the batch has {steps.n_elems()} rows, expected n_rows={self._running.shape[0]}"
            )
        reward = steps["next/reward"].detach().to("cpu", torch.float64)
        done = (steps["next/done"] & steps.mask()).cpu()
        reward = torch.where(steps.mask().cpu(), reward, 0.0)  # a NaN at padding stays out of the returns
        for t in range(steps.n_timesteps()):
            self._running += reward[:, t]
            ended = done[:, t]
            if bool(ended.any()):
                self.finished.extend(self._running[ended].tolist())
                self._running[ended] = 0.0

    def pop_mean(self) -> float | None:
        """The mean return of the episodes finished since the last call (None if none)."""
        if not self.finished:
            return None
        mean = sum(self.finished) / len(self.finished)
        self.finished = []
        return mean


def explained_variance(prediction: torch.Tensor, target: torch.Tensor) -> float:
    """1 - Var[target - prediction] / Var[target] (nan when the target does not vary)."""
    var = float(target.var())
    return math.nan if var == 0 else 1.0 - float((target - prediction).var()) / var
