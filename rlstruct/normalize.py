"""Running normalisation of observations and scaling of rewards, as modules any algorithm can use.

``ObservationNormalizer`` keeps a running mean and variance of observations
in buffers: put it inside an agent and its statistics travel with the
weights (``state_dict``, hence ``batcher.update``), are saved in checkpoints
and are used by evaluation, with no extra plumbing. The learner updates it
from the observations it collected; the agents only read it.

``RewardScaler`` divides rewards by the running standard deviation of the
discounted return, as PPO implementations commonly do (Engstrom et al. 2020,
"Implementation Matters in Deep Policy Gradients"). It lives in the learner:
the agents never see rewards.

``ValueNormalizer`` is the last step of a value head whose layer before it
learns the value in units of its targets' running scale (van Hasselt et al.
2016, "Learning values across many orders of magnitude", known as PopArt): a
value can then reach returns of 100 in a few hundred small optimiser steps.

Statistics are merged batch by batch with the parallel-variance formula of
Chan, Golub and LeVeque (1979), in float64, so that their order does not
matter and long runs do not lose precision.

Examples:
    >>> import torch
    >>> from rlstruct.normalize import ObservationNormalizer
    >>> norm = ObservationNormalizer((2,))
    >>> norm.update(torch.tensor([[1.0, 10.0], [3.0, 30.0]]))
    >>> norm.mean.tolist(), norm.var.tolist()
    ([2.0, 20.0], [1.0, 100.0])
    >>> norm(torch.tensor([[3.0, 20.0]]))
    tensor([[1., 0.]])
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

import torch

from rlstruct.checks import check_int, check_number
from rlstruct.errors import describe

__all__ = ["ObservationNormalizer", "RewardScaler", "RunningMeanStd", "ValueNormalizer"]


class RunningMeanStd(torch.nn.Module):
    """The running mean and variance of samples of shape ``shape``, in float64 buffers.

    Args:
        shape: the shape of one sample.

    Buffers (saved in ``state_dict``): ``mean`` and ``var`` (float64,
    ``shape``), ``count`` (float64 scalar, the samples seen).
    """

    mean: torch.Tensor
    var: torch.Tensor
    count: torch.Tensor

    def __init__(self, shape: Sequence[int] = ()) -> None:
        super().__init__()
        name = type(self).__name__
        if isinstance(shape, (str, bytes)) or not hasattr(shape, "__iter__"):
            raise TypeError(f"{name}: shape must be a sequence of ints, got {describe(shape)}")
        self.shape = torch.Size([check_int(name, "shape", size, low=0) for size in shape])
        self.register_buffer("mean", torch.zeros(self.shape, dtype=torch.float64))
        self.register_buffer("var", torch.ones(self.shape, dtype=torch.float64))
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        """Merge samples ``x`` ``[N, *shape]`` (any float dtype, the buffers' device) into the statistics.

        Raises:
            ValueError: if ``x``'s trailing dimensions are not ``shape``.
        """
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{type(self).__name__}.update: x must be a tensor, got {describe(x)}")
        if x.dim() == 0 or x.shape[1:] != self.shape:
            raise ValueError(
                f"{type(self).__name__}.update: x must have shape {_shape('N', self.shape)}, got {describe(x)}"
            )
        n = x.shape[0]
        if n == 0:
            return
        x = x.to(torch.float64)
        self.merge(n, x.mean(0), x.var(0, unbiased=False))

    @torch.no_grad()
    def merge(self, n: int | torch.Tensor, mean: torch.Tensor, var: torch.Tensor) -> None:
        """Merge the statistics of ``n`` other samples (their mean and biased variance, ``shape``), in place.

        What ``update`` does with a batch's own statistics, for statistics
        computed elsewhere (another process's batch: the schemes' gradient
        workers send them): merging the moments of two batches equals
        updating with both (Chan et al.'s parallel formula).
        """
        if float(n) == 0:
            return
        total = self.count + n
        delta = mean.to(torch.float64) - self.mean
        self.mean += delta * (n / total)
        self.var.copy_(
            (self.var * self.count + var.to(torch.float64) * n + delta.pow(2) * self.count * n / total)
            / total
        )
        self.count.copy_(total)


class ObservationNormalizer(RunningMeanStd):
    """``(x - mean) / sqrt(var + eps)``, clipped to ``[-clip, clip]``, from running statistics.

    Until the first ``update`` it is the identity up to the clip (mean 0,
    variance 1). The result has ``x``'s dtype (float32 observations stay
    float32); integer observations are returned as float32.

    Args:
        shape: the shape of one observation.
        clip: the bound of the normalised values (positive; ``math.inf`` for none).
        eps: added to the variance (>= 0).

    Raises:
        TypeError: if ``shape`` is not a sequence of ints, or ``clip`` or
            ``eps`` is not a number.
        ValueError: if a size or ``eps`` is negative, or ``clip`` is not positive.
    """

    def __init__(self, shape: Sequence[int], clip: float = 10.0, eps: float = 1e-8) -> None:
        super().__init__(shape)
        self.clip = check_number("ObservationNormalizer", "clip", clip, 0.0, low_open=True, allow_inf=True)
        self.eps = check_number("ObservationNormalizer", "eps", eps, 0.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalise ``x`` ``[..., *shape]``; returns a new tensor of ``x``'s float dtype, on its device.

        Raises:
            TypeError: if ``x`` is not a tensor.
            ValueError: if ``x``'s trailing dimensions are not ``shape``.
        """
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"ObservationNormalizer: x must be a tensor, got {describe(x)}")
        if x.shape[x.dim() - len(self.shape) :] != self.shape or x.dim() < len(self.shape):
            raise ValueError(
                f"ObservationNormalizer: x must have shape {_shape('...', self.shape)}, got {describe(x)}"
            )
        dtype = x.dtype if x.is_floating_point() else torch.float32
        mean = self.mean.to(dtype)
        std = (self.var + self.eps).sqrt().to(dtype)
        return ((x.to(dtype) - mean) / std).clamp(-self.clip, self.clip)


class RewardScaler(torch.nn.Module):
    """Rewards divided by the running standard deviation of the discounted return.

    The discounted return of every row is accumulated across batches (reset
    where an episode ends), and its running variance gives the scale. Rewards
    are not shifted (a shift would change which policies are optimal).

    Args:
        n_rows: the rows of the batches (B).
        gamma: the discount factor of the return, in [0, 1].
        clip: the bound of the scaled rewards (positive; ``math.inf`` for none).
        eps: added to the variance (>= 0).

    Raises:
        TypeError: if an argument is not a number (``n_rows`` an int).
        ValueError: if ``n_rows`` is below 1, ``gamma`` is outside [0, 1],
            ``clip`` is not positive or ``eps`` is negative.

    Examples:
        >>> import torch
        >>> scaler = RewardScaler(n_rows=1, gamma=0.0)
        >>> reward = torch.tensor([[2.0, 4.0]])
        >>> scaler(reward, torch.zeros(1, 2, dtype=torch.bool))  # returns 2, 4: std 1
        tensor([[2., 4.]])
    """

    returns: torch.Tensor

    def __init__(self, n_rows: int, gamma: float, clip: float = 10.0, eps: float = 1e-8) -> None:
        super().__init__()
        n_rows = check_int("RewardScaler", "n_rows", n_rows)
        self.gamma = check_number("RewardScaler", "gamma", gamma, 0.0, 1.0)
        self.clip = check_number("RewardScaler", "clip", clip, 0.0, low_open=True, allow_inf=True)
        self.eps = check_number("RewardScaler", "eps", eps, 0.0)
        self.stats = RunningMeanStd(())
        self.register_buffer("returns", torch.zeros(n_rows, dtype=torch.float64))

    @torch.no_grad()
    def forward(
        self, reward: torch.Tensor, done: torch.Tensor, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Update the statistics with a batch and return its scaled rewards.

        Args:
            reward: ``[B, T]`` rewards (float).
            done: ``[B, T]`` bool, True where an episode ended at that step.
            mask: ``[B, T]`` bool, False at padding steps (ignored); None for none.

        Returns:
            ``reward / sqrt(var + eps)`` clipped to ``[-clip, clip]``, ``[B, T]``,
            of ``reward``'s dtype and device.

        Raises:
            TypeError: if ``reward`` is not a float tensor, or ``done`` or
                ``mask`` not a bool one.
            ValueError: if the shapes (``mask``'s included) differ or B is not ``n_rows``.
        """
        if not isinstance(reward, torch.Tensor) or not reward.is_floating_point():
            raise TypeError(f"RewardScaler: reward must be a float tensor, got {describe(reward)}")
        for name, flags in (("done", done), ("mask", mask)):
            if (flags is not None or name == "done") and (
                not isinstance(flags, torch.Tensor) or flags.dtype != torch.bool
            ):
                raise TypeError(f"RewardScaler: {name} must be a bool tensor, got {describe(flags)}")
        if reward.dim() != 2 or reward.shape[0] != self.returns.shape[0] or done.shape != reward.shape:
            raise ValueError(
                f"RewardScaler: reward and done must both be [{self.returns.shape[0]}, T], got "
                f"{describe(reward)} and {describe(done)}"
            )
        if mask is not None and mask.shape != reward.shape:
            raise ValueError(
                f"RewardScaler: mask must be {list(reward.shape)} as reward, got {describe(mask)}"
            )
        if reward.shape[1] == 0:  # no step: nothing to learn from, nothing to scale
            return reward.clone()
        valid = torch.ones_like(done) if mask is None else mask
        r = reward.to(self.returns.device, torch.float64)
        seen = []
        for t in range(reward.shape[1]):
            step = valid[:, t].to(self.returns.device)
            self.returns.copy_(torch.where(step, self.returns * self.gamma + r[:, t], self.returns))
            seen.append(self.returns[step])
            self.returns[step & done[:, t].to(self.returns.device)] = 0.0
        self.stats.update(torch.cat(seen))
        std = (self.stats.var + self.eps).sqrt()
        return (reward / std.to(reward.dtype).to(reward.device)).clamp(-self.clip, self.clip)


class ValueNormalizer(torch.nn.Module):
    """A value head's last step: ``x * std + mean``, from running moments of the value's targets.

    The linear layer before it outputs the value in units of the targets'
    running standard deviation; ``forward`` maps that back to returns.
    ``update`` moves the moments towards a batch of targets (an exponential
    average at ``rate`` per update) and rescales that layer so that every
    value it gives is unchanged (PopArt). Train the value on
    ``(value - target) / std``, the error in the layer's own units.

    Until the first ``update`` it is the identity (mean 0, std 1).

    Args:
        rate: the weight of each batch in the running moments, in (0, 1].
        min_var: the floor of the variance (a batch of equal targets does
            not divide by zero).

    Buffers (saved in ``state_dict``): ``mean`` and ``mean_square`` (float64
    scalars, the running first and second moments of the targets).

    Raises:
        TypeError: if ``rate`` or ``min_var`` is not a number.
        ValueError: for a ``rate`` outside (0, 1] or a ``min_var`` that is not
            positive and finite.

    Examples:
        >>> import torch
        >>> from rlstruct.normalize import ValueNormalizer
        >>> head, norm = torch.nn.Linear(3, 1), ValueNormalizer(rate=0.5)
        >>> x = torch.ones(1, 3)
        >>> before = norm(head(x))
        >>> norm.update(torch.tensor([100.0, 120.0]), head)
        >>> round(norm.mean.item(), 1), round(norm.std.item(), 1)
        (55.0, 55.5)
        >>> torch.allclose(norm(head(x)), before, atol=1e-4)  # float32 rounding of the rescaled layer
        True
    """

    mean: torch.Tensor
    mean_square: torch.Tensor

    def __init__(self, rate: float = 0.1, min_var: float = 1e-4) -> None:
        super().__init__()
        for name, number in (("rate", rate), ("min_var", min_var)):
            if isinstance(number, bool) or not isinstance(number, numbers.Real):
                raise TypeError(f"ValueNormalizer: {name} must be a number, got {describe(number)}")
        if not 0.0 < rate <= 1.0:
            raise ValueError(f"ValueNormalizer: rate must be in (0, 1], got {rate!r}")
        if not min_var > 0.0:
            raise ValueError(f"ValueNormalizer: min_var must be positive, got {min_var!r}")
        if math.isinf(min_var):
            raise ValueError(f"ValueNormalizer: min_var must be finite, got {min_var!r}")
        self.rate, self.min_var = rate, min_var
        self.register_buffer("mean", torch.zeros((), dtype=torch.float64))
        self.register_buffer("mean_square", torch.ones((), dtype=torch.float64))

    @property
    def std(self) -> torch.Tensor:
        """The running standard deviation of the targets: a float64 scalar (1 before the first update)."""
        return (self.mean_square - self.mean.pow(2)).clamp_min(self.min_var).sqrt()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The values ``x * std + mean`` of normalised outputs ``x`` (any shape), in ``x``'s dtype and device."""
        return x * self.std.to(x.dtype) + self.mean.to(x.dtype)

    @torch.no_grad()
    def update(self, target: torch.Tensor, layer: torch.nn.Linear) -> None:
        """Move the moments towards a batch's targets and rescale ``layer`` so that its values stay the same.

        Args:
            target: the value targets of the batch's real steps, any shape
                (float, the buffers' device); an empty one changes nothing.
            layer: the linear layer whose output this module reads (one output).

        Raises:
            TypeError: if ``target`` is not a tensor.
            ValueError: if ``layer`` is not a ``torch.nn.Linear`` with one output and a bias.
        """
        if not isinstance(target, torch.Tensor):
            raise TypeError(f"ValueNormalizer.update: target must be a tensor, got {describe(target)}")
        if not isinstance(layer, torch.nn.Linear) or layer.out_features != 1 or layer.bias is None:
            raise ValueError(
                f"ValueNormalizer.update: layer must be a torch.nn.Linear with one output and a bias, got {layer!r}"
            )
        if target.numel() == 0:
            return
        target = target.to(torch.float64)
        old_mean, old_std = self.mean.clone(), self.std
        self.mean.lerp_(target.mean(), self.rate)
        self.mean_square.lerp_(target.pow(2).mean(), self.rate)
        std = self.std
        layer.weight.mul_((old_std / std).to(layer.weight.dtype))
        layer.bias.copy_(
            ((layer.bias.to(torch.float64) * old_std + old_mean - self.mean) / std).to(layer.bias.dtype)
        )


def _shape(lead: str, shape: torch.Size) -> str:
    """``[N, 3, 4]``: a shape for a message, its leading dimensions named."""
    return f"[{', '.join([lead, *map(str, shape)])}]"
