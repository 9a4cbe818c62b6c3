"""The on-policy learners' maths on an agent: GAE targets, PPO's minibatch loss, the V-trace loss.

Each function takes an ``OnPolicyAgent`` (see ``rlstruct.learning.protocols``)
and explicit hyperparameters, and is shared by the training scripts
(``rlstruct.algos.ppo``, ``a2c``, ``impala``) and the schemes
(``rlstruct.distributed.PPO``, ``IMPALA``):

- ``add_advantages``: GAE's advantages and value targets of a collected batch;
- ``ppo_minibatches``: how PPO cuts a batch (steps, or whole rows for an
  agent with state or history);
- ``ppo_minibatch_loss``: PPO's loss on one such minibatch;
- ``vtrace_agent_loss``: IMPALA's V-trace actor-critic loss on trajectories.
"""

from __future__ import annotations

from typing import cast

import torch

from rlstruct.agent import Agent, replay_agent
from rlstruct.dicttensor import DictTensor
from rlstruct.errors import AgentError, describe
from rlstruct.learning.losses import actor_critic_loss, normalize_advantages, ppo_loss
from rlstruct.learning.metrics import explained_variance
from rlstruct.learning.protocols import (
    OnPolicyAgent,
    checked_bootstrap_values,
    is_sequential,
    policy_outputs,
    with_agent_info,
)
from rlstruct.returns import gae, vtrace
from rlstruct.trajectories import Trajectories

__all__ = [
    "add_advantages",
    "ppo_data",
    "ppo_minibatch_loss",
    "ppo_minibatches",
    "rows_per_minibatch",
    "vtrace_agent_loss",
]


def add_advantages(
    agent: OnPolicyAgent | Agent,
    batch: Trajectories,
    gamma: float,
    gae_lambda: float,
    reward: torch.Tensor | None = None,
) -> None:
    """Add GAE's ``advantage`` and the value ``target`` (advantage + value) to ``batch``'s steps ``[B, T]``, in place.

    The value of the reached observation (``agent.bootstrap_values``) is the
    bootstrap: it counts where an episode was truncated or the row ends, and
    is cut where it terminated (see ``rlstruct.gae``). The values of the
    steps are those stored at collection (``value``).

    Args:
        agent: the agent whose ``bootstrap_values`` gives the bootstraps (on the device of the batch).
        batch: trajectories whose steps hold ``value``, ``next/reward``,
            ``next/terminated`` and ``next/done``, and what ``bootstrap_values``
            reads; they gain ``advantage`` and ``target`` ``[B, T]`` in the
            dtype of ``value`` (float32 for the built-in agent), whatever the
            rewards' float dtype.
        gamma: the discount factor.
        gae_lambda: GAE's lambda.
        reward: the rewards to use ``[B, T]`` (scaled ones, say); None for ``next/reward``.
    """
    steps = batch.trajectories
    with torch.no_grad():
        next_value = checked_bootstrap_values(cast(OnPolicyAgent, agent), batch, "add_advantages")
    value = steps["value"]
    adv = gae(
        (steps["next/reward"] if reward is None else reward).to(value.dtype),  # float16/64 rewards too
        value=value,
        next_value=next_value,
        terminated=steps["next/terminated"],
        done=steps["next/done"],
        gamma=gamma,
        lam=gae_lambda,
        mask=steps.mask(),
    )
    steps.set("advantage", adv)
    steps.set("target", adv + value)


def ppo_data(agent: OnPolicyAgent | Agent, batch: Trajectories) -> Trajectories | DictTensor:
    """What PPO draws its minibatches from: the batch's whole rows, or its valid steps flattened.

    An agent with a state (a memory) or a history: the rows, so that its
    memory is replayed, and trained, through every step of a row. Any other:
    the valid steps ``[N]``, z of each step under ``agent_info/``.
    """
    if is_sequential(agent, batch):
        return batch
    return with_agent_info(batch).masked_flatten()


def ppo_minibatches(
    agent: OnPolicyAgent | Agent, batch: Trajectories, minibatch_size: int
) -> tuple[Trajectories | DictTensor, int]:
    """``ppo_data`` and how many of its elements make a minibatch of about ``minibatch_size`` steps.

    ``minibatch_size`` steps, or for rows ``rows_per_minibatch(minibatch_size, T)`` rows.
    """
    data = ppo_data(agent, batch)
    if isinstance(data, Trajectories):
        return data, rows_per_minibatch(minibatch_size, data.trajectories.n_timesteps())
    return data, minibatch_size


def rows_per_minibatch(minibatch_size: int, n_timesteps: int) -> int:
    """Rows of ``n_timesteps`` steps in a minibatch of about ``minibatch_size`` steps: at least one."""
    return max(1, minibatch_size // n_timesteps)


def ppo_minibatch_loss(
    agent: OnPolicyAgent | Agent,
    minibatch: Trajectories | DictTensor,
    *,
    clip: float,
    vf_coef: float,
    ent_coef: float,
) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO's loss on a minibatch of ``ppo_minibatches``: the agent replayed, then ``ppo_loss``.

    Args:
        agent: the agent being trained.
        minibatch: steps (a ``DictTensor``) or rows (``Trajectories``) holding
            the action under ``agent.action_key``, the behaviour ``log_prob``,
            ``advantage`` and ``target`` (``add_advantages``).
        clip: the clip range of the probability ratio.
        vf_coef: the weight of the value loss.
        ent_coef: the weight of the entropy bonus.

    Returns:
        The scalar loss (with gradients) and its terms (see ``ppo_loss``).

    Raises:
        AgentError: (a ValueError) if the agent's ``action_log_prob`` or
            ``action_entropy`` is not one number per step.
    """
    policy = cast(OnPolicyAgent, agent)
    out = policy_outputs(agent, minibatch)
    flat = minibatch.trajectories.masked_flatten() if isinstance(minibatch, Trajectories) else minibatch
    log_prob = policy.action_log_prob(out, flat[policy.action_key])
    entropy = policy.action_entropy(out)
    n = flat.n_elems()
    for what, value in (("action_log_prob", log_prob), ("action_entropy", entropy)):
        if not isinstance(value, torch.Tensor) or tuple(value.shape) != (n,):
            # ppo_loss would name its own arguments, not the agent's method
            got = f"shape {list(value.shape)}" if isinstance(value, torch.Tensor) else describe(value)
            raise AgentError(
                f"ppo cannot train {type(agent).__name__}: {what} must return [{n}], one number per step "
                f"(summed over the action's dimensions; see rlstruct.learning.OnPolicyAgent), got {got}"
            )
    return ppo_loss(
        log_prob,
        flat["log_prob"],
        flat["advantage"],
        out["value"],
        flat["target"],
        entropy,
        clip=clip,
        vf_coef=vf_coef,
        ent_coef=ent_coef,
    )


def vtrace_agent_loss(
    agent: OnPolicyAgent | Agent,
    batch: Trajectories,
    *,
    gamma: float,
    reward_scale: float,
    rho_bar: float,
    c_bar: float,
    vf_coef: float,
    ent_coef: float,
    normalize: bool,
) -> tuple[torch.Tensor, dict[str, float]]:
    """IMPALA's V-trace actor-critic loss over trajectories ``[B, T]`` (Espeholt et al. 2018).

    The agent is replayed over the batch (``replay_agent``: from the state
    and history stored with each row); the behaviour policy's ``log_prob``
    (stored by the actors) and the learner's log-probability of the same
    actions give the importance ratios; the learner's values and
    ``bootstrap_values`` (which, for an agent with memory, use what the actor
    remembered, computed with its possibly older weights) give V-trace's values
    and bootstraps.

    Args:
        agent: the learner's agent (on the device of ``batch``).
        batch: the trajectories, with the action under ``agent.action_key``,
            ``log_prob``, ``next/reward``, ``next/terminated`` and ``next/done``.
        gamma: the discount factor.
        reward_scale: rewards are multiplied by this.
        rho_bar: V-trace's clip of the ratios weighting the TD errors and the policy gradient.
        c_bar: V-trace's clip of the ratios of the traces.
        vf_coef: the weight of the value loss.
        ent_coef: the weight of the entropy bonus.
        normalize: normalise the policy-gradient advantages over the valid steps.

    Returns:
        The scalar loss (with gradients), and ``policy_loss``, ``value_loss``,
        ``entropy``, ``explained_variance`` (of the learner's values against
        the V-trace targets) and ``rho_mean`` (the mean clipped ratio
        ``min(rho_bar, pi / mu)``).
    """
    policy = cast(OnPolicyAgent, agent)
    steps = batch.trajectories
    b, t = steps.n_elems(), steps.n_timesteps()
    mask = steps.mask()
    out = replay_agent(cast(Agent, agent), batch)
    flat = DictTensor({k: v.flatten(0, 1) for k, v in out.items()})
    log_prob = policy.action_log_prob(flat, steps[policy.action_key].flatten(0, 1)).view(b, t)
    value = out["value"].view(b, t)
    with torch.no_grad():
        next_value = checked_bootstrap_values(policy, batch, "vtrace_agent_loss")
        log_rho = log_prob - steps["log_prob"]
        vs, advantage = vtrace(
            (steps["next/reward"] * reward_scale).to(value.dtype),  # float16/64 rewards too
            log_rho=log_rho,
            value=value,
            next_value=next_value,
            terminated=steps["next/terminated"],
            done=steps["next/done"],
            gamma=gamma,
            rho_bar=rho_bar,
            c_bar=c_bar,
            mask=mask,
        )
        if normalize:
            advantage = normalize_advantages(advantage, mask)
    entropy = policy.action_entropy(flat).view(b, t)
    loss, terms = actor_critic_loss(
        log_prob, advantage, value, vs, entropy, mask, vf_coef=vf_coef, ent_coef=ent_coef
    )
    with torch.no_grad():
        rho = log_rho[mask].exp().clamp(max=rho_bar)
        terms["explained_variance"] = explained_variance(value.detach()[mask], vs[mask])
        terms["rho_mean"] = rho.mean().item()
    return loss, terms
