"""PPO: proximal policy optimisation with a clipped objective (Schulman et al. 2017).

Each iteration collects ``n_envs x n_steps`` steps with the multiprocess
batcher (fixed-length trajectories whose episodes carry over), computes GAE
advantages (Schulman et al. 2016) bootstrapping from the value of the reached
observation where an episode was truncated, then runs ``n_epochs`` passes of
minibatch updates on the clipped surrogate, the value loss and an entropy
bonus, and pushes the new weights to the workers.

Run it with ``rlstruct train ppo --env CartPole-v1`` or
``python -m rlstruct.algos.ppo --env CartPole-v1``; ``--help`` lists every
field of ``Config``.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence
from typing import Any

import torch

from rlstruct.algos.config import TrainConfig, parse_config
from rlstruct.algos.evaluation import env_spaces
from rlstruct.algos.policies import ActorCritic
from rlstruct.algos.run import EpisodeReturns, Run, check_config, check_layout, explained_variance
from rlstruct.batchers import MultiprocessBatcher
from rlstruct.checkpoint import rng_state
from rlstruct.gym_env import GymEnv
from rlstruct.returns import gae

__all__ = ["Config", "main", "train"]


@dataclasses.dataclass
class Config(TrainConfig):
    """PPO's hyperparameters (defaults tuned for CartPole-v1)."""

    n_envs: int = 8
    """Environments in all, split evenly across the worker processes."""
    n_steps: int = 32
    """Steps per environment per iteration (the trajectories' T)."""
    n_epochs: int = 20
    """Passes over each iteration's data."""
    minibatch_size: int = 256
    """Steps per gradient step."""
    lr: float = 1e-3
    """Adam's learning rate at the start."""
    anneal: bool = True
    """Decay the learning rate and the clip range linearly to 0 over the run."""
    gamma: float = 0.98
    """Discount factor."""
    gae_lambda: float = 0.8
    """GAE's lambda: 0 is one-step TD, 1 is Monte Carlo."""
    clip: float = 0.2
    """The clip range of the probability ratio."""
    ent_coef: float = 0.0
    """Weight of the entropy bonus."""
    vf_coef: float = 0.5
    """Weight of the value loss."""
    max_grad_norm: float = 0.5
    """Gradients are rescaled to this global norm."""
    hidden: int = 64
    """Units of each of the two hidden layers of the policy and value networks."""
    orthogonal_init: bool = True
    """Orthogonal initial weights (see ``ActorCritic``); else torch's default initialisation."""
    torch_threads: int = 1
    """Threads of the learner's torch operations (small networks run fastest on one)."""


def train(config: Config) -> dict[str, Any]:
    """Train PPO as ``config`` says; returns the final evaluation (see ``Run.finish``).

    Raises:
        ValueError: for a non-positive size, or ``n_envs`` not a multiple of ``n_processes``.
    """
    check_config(
        config,
        n_envs=config.n_envs,
        n_steps=config.n_steps,
        n_epochs=config.n_epochs,
        minibatch_size=config.minibatch_size,
        lr=config.lr,
        hidden=config.hidden,
        torch_threads=config.torch_threads,
    )
    check_layout(config, config.n_envs, config.n_steps)
    torch.set_num_threads(config.torch_threads)
    torch.manual_seed(config.seed)
    device = torch.device(config.device)
    spaces = env_spaces(config.env)
    agent_args = {
        "obs_dim": spaces.obs_dim,
        "n_actions": spaces.n_actions,
        "action_low": spaces.action_low,
        "action_high": spaces.action_high,
        "hidden": (config.hidden, config.hidden),
        "orthogonal": config.orthogonal_init,
    }
    model = ActorCritic(**agent_args).to(device)  # type: ignore[arg-type]
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr, eps=1e-5)
    generator = torch.Generator(device).manual_seed(config.seed)
    action_key = "action" if spaces.n_actions is not None else "raw_action"

    run = Run("ppo", config, ActorCritic, agent_args)
    batcher = MultiprocessBatcher(
        ActorCritic,
        agent_args,
        GymEnv,
        {"env": config.env},
        n_envs=config.n_envs // config.n_processes,
        n_timesteps=config.n_steps,
        n_processes=config.n_processes,
        seed=config.seed,
        device=device,
    )
    episodes = EpisodeReturns(config.n_envs)
    env_steps, per_iteration = 0, config.n_envs * config.n_steps
    try:
        batcher.update(run.weights(model))
        batcher.reset()
        run.begin()
        while env_steps + per_iteration <= config.total_steps:  # never more steps than the budget
            batcher.execute()
            batch = batcher.get()
            assert batch is not None
            steps = batch.trajectories
            env_steps += per_iteration
            episodes.add(steps)
            run.episode_return = episodes.pop_mean() or run.episode_return

            # Advantages: V of the reached observation is the bootstrap (0 where terminated).
            with torch.no_grad():
                next_obs = steps["next/observation"]
                next_value = model.value_of(next_obs.flatten(0, 1))
                next_value = next_value.view(steps.n_elems(), steps.n_timesteps())
            value = steps["value"]
            advantage = gae(
                steps["next/reward"],
                value,
                next_value,
                steps["next/terminated"],
                steps["next/done"],
                config.gamma,
                config.gae_lambda,
                steps.mask(),
            )
            steps.set("advantage", advantage)
            steps.set("target", advantage + value)
            data = steps.masked_flatten()

            progress = 1.0 - (env_steps - per_iteration) / config.total_steps
            lr = config.lr * progress if config.anneal else config.lr
            clip = config.clip * progress if config.anneal else config.clip
            for group in optimizer.param_groups:
                group["lr"] = lr
            stats = update(model, optimizer, data, config, clip, action_key, generator)
            batcher.update(run.weights(model))
            run.step(
                env_steps,
                model,
                lr=lr,
                explained_variance=explained_variance(data["value"], data["target"]),
                **stats,
            )
        return run.finish(model, env_steps, optimizer=optimizer, rng=rng_state(generator, model.generator))
    finally:
        batcher.close()
        run.close()


def update(
    model: ActorCritic,
    optimizer: torch.optim.Optimizer,
    data: Any,
    config: Config,
    clip: float,
    action_key: str,
    generator: torch.Generator,
) -> dict[str, float]:
    """``n_epochs`` passes of minibatch steps on the clipped PPO loss; returns the last epoch's means."""
    n = data.n_elems()
    totals = {"policy_loss": 0.0, "value_loss": 0.0, "entropy": 0.0, "clip_fraction": 0.0}
    count = 0
    for epoch in range(config.n_epochs):
        order = torch.randperm(n, generator=generator, device=generator.device)
        for start in range(0, n, config.minibatch_size):
            mb = data[order[start : start + config.minibatch_size]]
            params, value = model.heads(model.features(mb["observation"])[0])
            log_prob = model.log_prob(params, mb[action_key])
            ratio = (log_prob - mb["log_prob"]).exp()
            advantage = mb["advantage"]
            if advantage.numel() > 1:
                advantage = (advantage - advantage.mean()) / (advantage.std() + 1e-8)
            policy_loss = -torch.min(ratio * advantage, ratio.clamp(1 - clip, 1 + clip) * advantage).mean()
            value_loss = 0.5 * (value - mb["target"]).pow(2).mean()
            entropy = model.entropy(params).mean()
            loss = policy_loss + config.vf_coef * value_loss - config.ent_coef * entropy
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm)
            optimizer.step()
            if epoch == config.n_epochs - 1:
                totals["policy_loss"] += policy_loss.detach().item()
                totals["value_loss"] += value_loss.detach().item()
                totals["entropy"] += entropy.detach().item()
                totals["clip_fraction"] += ((ratio.detach() - 1).abs() > clip).float().mean().item()
                count += 1
    return {k: v / max(count, 1) for k, v in totals.items()}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """The command line: ``python -m rlstruct.algos.ppo --env CartPole-v1 [--field value ...]``."""
    return train(parse_config(Config, argv, prog="rlstruct train ppo"))


if __name__ == "__main__":
    main(sys.argv[1:])
