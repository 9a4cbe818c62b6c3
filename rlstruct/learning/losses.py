"""The on-policy losses as functions of tensors, with every hyperparameter explicit.

- ``ppo_loss``: PPO's clipped surrogate, value loss and entropy bonus on a
  minibatch of N steps (Schulman et al. 2017);
- ``actor_critic_loss``: the policy gradient with a value baseline, masked
  over ``[B, T]`` trajectories, which A2C (advantages from GAE) and IMPALA
  (V-trace's advantages and targets, Espeholt et al. 2018) share;
- ``normalize_advantages``: zero mean and unit deviation over the valid steps.

They take the log-probabilities, values and entropies an agent computed
(see ``rlstruct.learning.protocols``), so they know nothing of the agent.

Examples:
    >>> import torch
    >>> log_prob = torch.log(torch.tensor([0.5, 0.5]))
    >>> loss, terms = ppo_loss(
    ...     log_prob, log_prob, advantage=torch.tensor([1.0, -1.0]), value=torch.zeros(2),
    ...     target=torch.ones(2), entropy=torch.zeros(2), clip=0.2, vf_coef=0.5, ent_coef=0.0,
    ... )
    >>> terms["value_loss"], terms["clip_fraction"]  # 0.5 * mean((0 - 1)^2); ratios of 1
    (0.5, 0.0)
"""

from __future__ import annotations

import torch

from rlstruct.errors import describe

__all__ = ["actor_critic_loss", "normalize_advantages", "ppo_loss"]


def normalize_advantages(advantage: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """``(advantage - mean) / (std + 1e-8)``, the statistics taken over the valid steps (``mask``), or all.

    With fewer than two valid steps (no standard deviation) the advantages
    are returned as they are, as ``ppo_loss`` does for a minibatch of one step.

    Args:
        advantage: float ``[N]`` or ``[B, T]``.
        mask: bool of the same shape, True at valid steps; None for all.

    Returns:
        A new tensor of the same shape, dtype and device.

    Raises:
        TypeError: if ``advantage`` is not a float tensor or ``mask`` not a bool one.
        ValueError: if ``mask`` has another shape than ``advantage``.

    Examples:
        >>> normalize_advantages(torch.tensor([[1.0, 3.0, 9.0]]), torch.tensor([[True, True, False]]))
        tensor([[-0.7071,  0.7071,  4.9497]])
        >>> normalize_advantages(torch.tensor([[1.0, 2.0]]), torch.tensor([[True, False]]))
        tensor([[1., 2.]])
    """
    _check_steps("normalize_advantages", {"advantage": advantage}, mask)
    valid = advantage if mask is None else advantage[mask]
    if valid.numel() < 2:
        return advantage.clone()
    return (advantage - valid.mean()) / (valid.std() + 1e-8)


def ppo_loss(
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantage: torch.Tensor,
    value: torch.Tensor,
    target: torch.Tensor,
    entropy: torch.Tensor,
    *,
    clip: float,
    vf_coef: float,
    ent_coef: float,
) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO's loss on N steps: clipped surrogate + ``vf_coef`` x value loss - ``ent_coef`` x entropy.

    Advantages are normalised within the minibatch when it has more than one step.

    Args:
        log_prob: log pi(a) ``[N]`` under the policy being trained (with gradients).
        old_log_prob: log mu(a) ``[N]`` under the policy that collected the steps.
        advantage: ``[N]``.
        value: the values being trained ``[N]`` (with gradients).
        target: their targets ``[N]``.
        entropy: the policy's entropy ``[N]`` (with gradients).
        clip: the clip range of the probability ratio.
        vf_coef: the weight of the value loss ``0.5 * (value - target)^2``.
        ent_coef: the weight of the entropy bonus.

    Returns:
        The scalar loss (with gradients) and its terms as floats:
        ``policy_loss``, ``value_loss``, ``entropy``, ``clip_fraction`` (the
        share of ratios outside ``[1 - clip, 1 + clip]``).

    Raises:
        TypeError: if an input is not a float tensor.
        ValueError: for a minibatch of no step (every mean would be NaN), or
            an input whose shape is not ``log_prob``'s (a ``value`` of
            ``[N, 1]`` would broadcast against ``target`` to ``[N, N]``).
    """
    _check_steps(
        "ppo_loss",
        {
            "log_prob": log_prob,
            "old_log_prob": old_log_prob,
            "advantage": advantage,
            "value": value,
            "target": target,
            "entropy": entropy,
        },
    )
    if log_prob.numel() == 0:
        raise ValueError("ppo_loss: the minibatch must hold at least one step, got none")
    ratio = (log_prob - old_log_prob).exp()
    if advantage.numel() > 1:
        advantage = normalize_advantages(advantage)
    policy_loss = -torch.min(ratio * advantage, ratio.clamp(1 - clip, 1 + clip) * advantage).mean()
    value_loss = 0.5 * (value - target).pow(2).mean()
    entropy_mean = entropy.mean()
    loss = policy_loss + vf_coef * value_loss - ent_coef * entropy_mean
    terms = {
        "policy_loss": policy_loss.detach().item(),
        "value_loss": value_loss.detach().item(),
        "entropy": entropy_mean.detach().item(),
        "clip_fraction": ((ratio.detach() - 1).abs() > clip).float().mean().item(),
    }
    return loss, terms


def actor_critic_loss(
    log_prob: torch.Tensor,
    advantage: torch.Tensor,
    value: torch.Tensor,
    target: torch.Tensor,
    entropy: torch.Tensor,
    mask: torch.Tensor,
    *,
    vf_coef: float,
    ent_coef: float,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The policy gradient with a value baseline over trajectories ``[B, T]``, averaged over the valid steps.

    ``-log_prob * advantage + vf_coef * 0.5 * (value - target)^2 - ent_coef * entropy``,
    each term summed over the steps where ``mask`` is True and divided by
    their number. Padding steps are selected out, not multiplied by 0: a
    NaN or inf among these inputs at a padding step (a target or an
    advantage of ``fill_padding(float("nan"))``) reaches neither the loss
    nor their gradients. (A NaN the network computes from a NaN observation
    still makes its weights' gradients NaN: replay padding that holds
    numbers.) With no valid step every term is 0.

    Args:
        log_prob: log pi(a) ``[B, T]`` (with gradients).
        advantage: ``[B, T]``, without gradients.
        value: the values being trained ``[B, T]`` (with gradients).
        target: their targets ``[B, T]``.
        entropy: the policy's entropy ``[B, T]`` (with gradients).
        mask: bool ``[B, T]``, True at valid steps.
        vf_coef: the weight of the value loss.
        ent_coef: the weight of the entropy bonus.

    Returns:
        The scalar loss (with gradients) and ``policy_loss``, ``value_loss``
        and ``entropy`` as floats.

    Raises:
        TypeError: if ``mask`` is not a bool tensor, or another input not a float one.
        ValueError: if the inputs and ``mask`` do not all have ``log_prob``'s shape.
    """
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        raise TypeError(f"actor_critic_loss: mask must be a bool tensor, got {describe(mask)}")
    _check_steps(
        "actor_critic_loss",
        {"log_prob": log_prob, "advantage": advantage, "value": value, "target": target, "entropy": entropy},
        mask,
    )
    n_valid = mask.sum().clamp(min=1)

    def valid(x: torch.Tensor) -> torch.Tensor:  # 0 at padding, in the forward pass and the backward pass
        return torch.where(mask, x, torch.zeros((), dtype=x.dtype, device=x.device))

    policy_loss = -(valid(log_prob) * valid(advantage)).sum() / n_valid
    value_loss = 0.5 * (valid(value) - valid(target)).pow(2).sum() / n_valid
    entropy_mean = valid(entropy).sum() / n_valid
    loss = policy_loss + vf_coef * value_loss - ent_coef * entropy_mean
    terms = {
        "policy_loss": policy_loss.detach().item(),
        "value_loss": value_loss.detach().item(),
        "entropy": entropy_mean.detach().item(),
    }
    return loss, terms


def _check_steps(fn: str, floats: dict[str, torch.Tensor], mask: torch.Tensor | None = None) -> None:
    """Raise unless ``floats`` are float tensors of one shape, the first one's, and ``mask`` (bool) too when given.

    Tensors of different shapes would broadcast against each other (``[N]``
    and ``[N, 1]`` to ``[N, N]``) and give a wrong loss without an error.
    """
    if mask is not None and (not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool):
        raise TypeError(f"{fn}: mask must be a bool tensor, got {describe(mask)}")
    first = next(iter(floats))
    for name, x in floats.items():
        if not isinstance(x, torch.Tensor) or not x.is_floating_point():
            raise TypeError(f"{fn}: {name} must be a float tensor, got {describe(x)}")
        if x.shape != floats[first].shape:
            shape = list(floats[first].shape)
            raise ValueError(f"{fn}: {name} must have the shape of {first}, {shape}, got {describe(x)}")
    if mask is not None and mask.shape != floats[first].shape:
        shape = list(floats[first].shape)
        raise ValueError(f"{fn}: mask must have the shape of {first}, {shape}, got {describe(mask)}")
