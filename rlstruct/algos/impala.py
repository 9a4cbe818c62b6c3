"""IMPALA: an asynchronous actor-learner with V-trace off-policy correction (Espeholt et al. 2018).

The multiprocess batcher runs in "stream" mode: its workers (the actors)
keep filling free slots with fixed-length trajectories of ``n_steps`` steps,
each under the weights they last loaded, while the learner takes finished
slots, computes V-trace targets from the learner's policy over the
behaviour policy that acted, takes one gradient step and publishes the new
weights. Collection and learning overlap; the policy lag of each batch (how
many updates the learner made since the batch's weights) is logged.

Run it with ``rlstruct train impala --env CartPole-v1`` or
``python -m rlstruct.algos.impala --env CartPole-v1``; ``--help`` lists every
field of ``Config``.

Examples:
    >>> from rlstruct.algos.impala import Config
    >>> config = Config(env="CartPole-v1")
    >>> config.batch_slots * config.n_envs // config.n_processes * config.n_steps  # env steps per update
    512
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence
from typing import Any

import torch

from rlstruct.agent import replay_agent
from rlstruct.algos.config import TrainConfig, check_config, check_layout, parse_config
from rlstruct.algos.evaluation import EnvSpaces, env_spaces
from rlstruct.algos.metrics import EpisodeReturns, explained_variance
from rlstruct.algos.policies import ActorCritic, actor_critic_agent
from rlstruct.algos.run import Run
from rlstruct.batchers import MultiprocessBatcher
from rlstruct.checkpoint import rng_state
from rlstruct.dicttensor import DictTensor
from rlstruct.returns import vtrace
from rlstruct.temporal import TemporalDictTensor
from rlstruct.trajectories import Trajectories

__all__ = ["Config", "learner_step", "main", "make_agent", "train", "vtrace_loss"]


@dataclasses.dataclass
class Config(TrainConfig):
    """IMPALA's hyperparameters (defaults tuned for CartPole-v1)."""

    total_steps: int = 300_000
    """Environment steps of training (all environments counted)."""
    n_envs: int = 16
    """Environments in all, split evenly across the worker processes (the actors)."""
    n_steps: int = 32
    """Steps per environment of each trajectory (the trajectories' T)."""
    n_slots: int = 4
    """Trajectory slots of the streaming buffer (more than ``n_processes``): actors wait when all are full."""
    batch_slots: int = 2
    """Finished slots the learner takes per update (each holds ``n_envs / n_processes`` trajectories)."""
    lr: float = 1e-3
    """RMSprop's learning rate at the start."""
    anneal: bool = True
    """Decay the learning rate linearly to 0 over the run."""
    gamma: float = 0.99
    """Discount factor."""
    reward_scale: float = 0.1
    """The learner multiplies rewards by this (values are learnt in scaled units; logged returns are not scaled)."""
    rho_bar: float = 1.0
    """V-trace's clip of the importance ratios weighting the TD errors and the policy gradient."""
    c_bar: float = 1.0
    """V-trace's clip of the importance ratios of the traces."""
    ent_coef: float = 0.0
    """Weight of the entropy bonus."""
    vf_coef: float = 0.5
    """Weight of the value loss."""
    max_grad_norm: float = 0.5
    """Gradients are rescaled to this global norm."""
    normalize_advantages: bool = True
    """Normalise the policy-gradient advantages of each batch to zero mean and unit variance."""
    hidden: int = 64
    """Units of each of the two hidden layers of the policy and value networks (a memory's size too)."""
    recurrent: bool = False
    """Give the policy and the value each a recurrent memory, replayed from the state stored with each slot."""
    memory: str = "gru"
    """The recurrent cell with ``recurrent``: "gru" or "lstm"."""
    normalize: bool = False
    """Normalise observations with running statistics (kept in the model: workers, checkpoint, evaluation)."""
    torch_threads: int = 1
    """Threads of the learner's torch operations (small networks run fastest on one)."""


def make_agent(config: Config, spaces: EnvSpaces) -> tuple[ActorCritic, dict[str, Any]]:
    """The agent ``train`` trains for ``config`` on an environment of ``spaces``, and its arguments.

    See ``rlstruct.algos.policies.actor_critic_agent``.
    """
    return actor_critic_agent(config, spaces)


def train(config: Config) -> dict[str, Any]:
    """Train IMPALA as ``config`` says; returns the final evaluation (see ``Run.finish``).

    Raises:
        ValueError: for a non-positive size, ``n_envs`` not a multiple of
            ``n_processes``, ``n_slots`` not above ``n_processes``, or a budget
            below one update.
    """
    check_config(
        config,
        n_envs=config.n_envs,
        n_steps=config.n_steps,
        n_slots=config.n_slots,
        batch_slots=config.batch_slots,
        lr=config.lr,
        reward_scale=config.reward_scale,
        rho_bar=config.rho_bar,
        c_bar=config.c_bar,
        hidden=config.hidden,
        torch_threads=config.torch_threads,
    )
    check_layout(config, config.n_envs, None)
    if config.checkpoint_every or config.resume is not None:
        raise ValueError(
            "impala: checkpoint_every and resume are not supported: its stream collection is asynchronous, "
            "so no checkpoint could be continued bit-identically; got "
            f"checkpoint_every={config.checkpoint_every!r}, resume={config.resume!r}"
        )
    if config.n_slots <= config.n_processes:
        raise ValueError(
            f"config.n_slots ({config.n_slots}) must be more than config.n_processes ({config.n_processes})"
        )
    per_worker = config.n_envs // config.n_processes
    per_update = config.batch_slots * per_worker * config.n_steps
    if config.total_steps < per_update:
        raise ValueError(
            f"config.total_steps ({config.total_steps}) must allow one update of "
            f"batch_slots x n_envs / n_processes x n_steps = {per_update} steps"
        )
    torch.set_num_threads(config.torch_threads)
    torch.manual_seed(config.seed)
    device = torch.device(config.device)
    spaces = env_spaces(config.env)
    model, agent_args = make_agent(config, spaces)
    model = model.to(device)
    optimizer = torch.optim.RMSprop(model.parameters(), lr=config.lr, alpha=0.99, eps=1e-5)

    run = Run("impala", config, ActorCritic, agent_args)
    batcher: MultiprocessBatcher | None = None  # closed below, with the run, even if it fails to start
    try:
        batcher = run.collector(device, config.n_envs, config.n_steps, mode="stream", n_slots=config.n_slots)
        # A slot holds the rows of one worker; the row index (in z, unused by the agent) tells which,
        # so that training episodes are followed across the slots of each worker.
        episodes = [EpisodeReturns(per_worker) for _ in range(config.n_processes)]
        env_steps = 0
        batcher.update(run.weights(model))
        batcher.reset(agent_info=DictTensor({"row": torch.arange(config.n_envs)}))
        run.begin()
        while env_steps + per_update <= config.total_steps:  # never more steps than the budget
            pieces: list[Trajectories] = []
            for _ in range(config.batch_slots):
                piece = batcher.get()
                episodes[int(piece.info["agent_info/row"][0]) // per_worker].add(piece.trajectories)
                pieces.append(piece)
            batch = pieces[0] if len(pieces) == 1 else Trajectories.cat(pieces)
            env_steps += per_update
            run.add_returns(*episodes)
            lag = (batcher.policy_version() - batch.info["policy_version"]).float()

            lr = (
                config.lr * (1.0 - (env_steps - per_update) / config.total_steps)
                if config.anneal
                else config.lr
            )
            for group in optimizer.param_groups:
                group["lr"] = lr
            stats = learner_step(model, optimizer, batch.trajectories, config, batch.info)
            model.update_obs_norm(batch.trajectories)  # after the step, which used the actors' statistics
            batcher.update(run.weights(model))
            run.step(
                env_steps,
                model,
                lr=lr,
                policy_lag_mean=float(lag.mean()),
                policy_lag_max=float(lag.max()),
                **stats,
            )
        return run.finish(model, env_steps, optimizer=optimizer, rng=rng_state(model.generator))
    finally:
        if batcher is not None:
            batcher.close()
        run.close()


def learner_step(
    model: ActorCritic,
    optimizer: torch.optim.Optimizer,
    steps: TemporalDictTensor,
    config: Config,
    info: DictTensor | None = None,
) -> dict[str, float]:
    """One gradient step of ``optimizer`` on ``vtrace_loss``; returns the loss's statistics.

    Gradients are rescaled to ``config.max_grad_norm`` before the step.
    Updates ``model`` in place. ``info`` (the batch's per-row info) is needed
    by a recurrent model.
    """
    loss, stats = vtrace_loss(model, steps, config, info)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    model.clip_grad_norm_(config.max_grad_norm)  # a recurrent agent's policy and value apart
    optimizer.step()
    return stats


def vtrace_loss(
    model: ActorCritic, steps: TemporalDictTensor, config: Config, info: DictTensor | None = None
) -> tuple[torch.Tensor, dict[str, float]]:
    """The V-trace actor-critic loss over trajectories ``[B, T]`` and its statistics.

    The behaviour policy's ``log_prob`` (stored by the actors) and the
    learner's log-probability of the same actions give the importance ratios;
    the learner's current values of ``observation`` and ``next/observation``
    give V-trace's values and bootstraps.

    Args:
        model: the learner's actor-critic (on the device of ``steps``).
        steps: the trajectories, with ``observation``, the action (``action``,
            or ``raw_action`` for continuous actions), ``log_prob``,
            ``next/observation``, ``next/reward``, ``next/terminated`` and
            ``next/done`` (float32/bool ``[B, T]`` for the scalars).
        config: ``gamma``, ``reward_scale``, ``rho_bar``, ``c_bar``,
            ``ent_coef``, ``vf_coef`` and ``normalize_advantages`` are read.
        info: the batch's per-row info; a recurrent model needs it: its
            memories are replayed (``replay_agent``) from the state stored
            when each row began, and the value of a reached observation is
            one more step of the value memory stored by the actor (computed
            with the actor's weights, which may lag the learner's).

    Raises:
        ValueError: for a recurrent model without ``info``.

    Returns:
        The scalar loss (with gradients), and ``policy_loss``, ``value_loss``,
        ``entropy``, ``explained_variance`` (of the learner's values against
        the V-trace targets) and ``rho_mean`` (the mean clipped ratio
        ``min(rho_bar, pi / mu)``).
    """
    b, t = steps.n_elems(), steps.n_timesteps()
    mask = steps.mask()
    action = steps["action" if model.discrete else "raw_action"]
    if model.recurrent:
        if info is None:
            raise ValueError("vtrace_loss: a recurrent model needs the batch's info (its initial states)")
        out = replay_agent(model, Trajectories(info, steps))
        params, value = out["logits" if model.discrete else "mean"].flatten(0, 1), out["value"]
    else:
        params, value = model.heads(model.features(steps["observation"].flatten(0, 1))[0])
    log_prob = model.log_prob(params, action.flatten(0, 1)).view(b, t)
    value = value.view(b, t)
    with torch.no_grad():
        next_value = model.values_reached(steps)
        log_rho = log_prob - steps["log_prob"]
        vs, advantage = vtrace(
            steps["next/reward"] * config.reward_scale,
            log_rho=log_rho,
            value=value,
            next_value=next_value,
            terminated=steps["next/terminated"],
            done=steps["next/done"],
            gamma=config.gamma,
            rho_bar=config.rho_bar,
            c_bar=config.c_bar,
            mask=mask,
        )
        if config.normalize_advantages:
            valid = advantage[mask]
            advantage = (advantage - valid.mean()) / (valid.std() + 1e-8)
    n_valid = mask.sum()
    policy_loss = -(log_prob * advantage * mask).sum() / n_valid
    value_loss = 0.5 * ((value - vs).pow(2) * mask).sum() / n_valid
    entropy = (model.entropy(params).view(b, t) * mask).sum() / n_valid
    loss = policy_loss + config.vf_coef * value_loss - config.ent_coef * entropy
    with torch.no_grad():
        rho = log_rho[mask].exp().clamp(max=config.rho_bar)
        stats = {
            "policy_loss": policy_loss.detach().item(),
            "value_loss": value_loss.detach().item(),
            "entropy": entropy.detach().item(),
            "explained_variance": explained_variance(value.detach()[mask], vs[mask]),
            "rho_mean": rho.mean().item(),
        }
    return loss, stats


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """The command line: ``python -m rlstruct.algos.impala --env CartPole-v1 [--field value ...]``."""
    return train(parse_config(Config, argv, prog="rlstruct train impala"))


if __name__ == "__main__":
    main(sys.argv[1:])
