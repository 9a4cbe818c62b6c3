"""PPO: proximal policy optimisation with a clipped objective (Schulman et al. 2017).

Each iteration collects ``n_envs x n_steps`` steps with the multiprocess
batcher (fixed-length trajectories whose episodes carry over), computes GAE
advantages (Schulman et al. 2016) bootstrapping from the value of the reached
observation where an episode was truncated, then runs ``n_epochs`` passes of
minibatch updates on the clipped surrogate, the value loss and an entropy
bonus, and pushes the new weights to the workers.

With ``--recurrent`` the agent has a memory (a GRU, or an LSTM with
``--memory lstm``) for its policy and another for its value. Minibatches
are then whole rows of ``n_steps`` steps: each is replayed in one call of
the memories (``replay_agent`` -> ``ActorCritic.forward_sequence``) from the
state stored when its row began, restarting where an episode begins; the
value of a reached observation is one more step of the value memory carried
through collection. ``--normalize`` normalises observations with running
statistics that travel to the workers with the weights; ``--scale-rewards``
divides rewards by the running deviation of the discounted return.

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

from rlstruct.agent import replay_agent
from rlstruct.algos.config import TrainConfig, check_config, check_layout, parse_config
from rlstruct.algos.evaluation import EnvSpaces, env_spaces
from rlstruct.algos.metrics import EpisodeReturns, explained_variance
from rlstruct.algos.policies import ActorCritic, actor_critic_agent
from rlstruct.algos.run import Run
from rlstruct.batchers import MultiprocessBatcher
from rlstruct.checkpoint import rng_state
from rlstruct.dicttensor import DictTensor
from rlstruct.normalize import RewardScaler
from rlstruct.returns import gae
from rlstruct.temporal import TemporalDictTensor
from rlstruct.trajectories import Trajectories

__all__ = ["Config", "add_advantages", "main", "make_agent", "ppo_loss", "train"]


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
    """Units of each of the two hidden layers of the policy and value networks (a memory's size too)."""
    recurrent: bool = False
    """Give the policy and the value each a recurrent memory (minibatches are then whole rows)."""
    memory: str = "gru"
    """The recurrent cell with ``recurrent``: "gru" or "lstm"."""
    normalize: bool = False
    """Normalise observations with running statistics (kept in the model: workers, checkpoint, evaluation)."""
    scale_rewards: bool = False
    """Divide rewards by the running standard deviation of the discounted return."""
    orthogonal_init: bool = True
    """Orthogonal initial weights (see ``ActorCritic``); else torch's default initialisation."""
    torch_threads: int = 1
    """Threads of the learner's torch operations (small networks run fastest on one)."""


def make_agent(config: Config, spaces: EnvSpaces) -> tuple[ActorCritic, dict[str, Any]]:
    """The agent ``train`` trains for ``config`` on an environment of ``spaces``, and its arguments.

    See ``rlstruct.algos.policies.actor_critic_agent``.
    """
    return actor_critic_agent(config, spaces, orthogonal=config.orthogonal_init)


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
    model, agent_args = make_agent(config, spaces)
    model = model.to(device)
    # the fused Adam step costs a third of the default one on this model (124 against 365 us on one CPU thread)
    fused = device.type in ("cpu", "cuda")
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr, eps=1e-5, fused=fused)
    generator = torch.Generator(device).manual_seed(config.seed)
    action_key = "action" if spaces.n_actions is not None else "raw_action"

    run = Run("ppo", config, ActorCritic, agent_args)
    batcher: MultiprocessBatcher | None = None  # closed below, with the run, even if it fails to start
    try:
        batcher = run.collector(device, config.n_envs, config.n_steps)
        episodes = EpisodeReturns(config.n_envs)
        scaler = RewardScaler(config.n_envs, config.gamma).to(device) if config.scale_rewards else None
        scaled: dict[str, Any] = {} if scaler is None else {"reward_scaler": scaler}
        per_iteration = config.n_envs * config.n_steps
        env_steps = run.restore(
            generator, model.generator, model=model, optimizer=optimizer, reward_scaler=scaler
        )
        batcher.update(run.weights(model))
        batcher.reset()
        run.begin()
        while env_steps + per_iteration <= config.total_steps:  # never more steps than the budget
            batcher.execute()
            batch = batcher.get()
            steps = batch.trajectories
            mask = steps.mask()
            env_steps += per_iteration
            episodes.add(steps)
            run.add_returns(episodes)

            reward = None if scaler is None else scaler(steps["next/reward"], steps["next/done"], mask)
            add_advantages(model, steps, config.gamma, config.gae_lambda, reward)

            progress = 1.0 - (env_steps - per_iteration) / config.total_steps
            lr = config.lr * progress if config.anneal else config.lr
            clip = config.clip * progress if config.anneal else config.clip
            for group in optimizer.param_groups:
                group["lr"] = lr
            stats = update(model, optimizer, batch, config, clip, action_key, generator)
            model.update_obs_norm(steps)  # after the update, which used the statistics of collection
            batcher.update(run.weights(model))
            run.step(
                env_steps,
                model,
                lr=lr,
                explained_variance=explained_variance(steps["value"][mask], steps["target"][mask]),
                **stats,
            )
            if run.checkpoint_due(env_steps):
                batcher = run.checkpoint(
                    env_steps, batcher, model, (generator, model.generator), optimizer=optimizer, **scaled
                )
                episodes = EpisodeReturns(config.n_envs)
        return run.finish(
            model, env_steps, optimizer=optimizer, rng=rng_state(generator, model.generator), **scaled
        )
    finally:
        if batcher is not None:
            batcher.close()
        run.close()


def update(
    model: ActorCritic,
    optimizer: torch.optim.Optimizer,
    batch: Trajectories,
    config: Config,
    clip: float,
    action_key: str,
    generator: torch.Generator,
) -> dict[str, float]:
    """``n_epochs`` passes of minibatch steps on the clipped PPO loss; returns the last epoch's means.

    A feed-forward model's minibatches are ``minibatch_size`` steps drawn from
    the whole batch. A recurrent model's are whole rows,
    ``max(1, minibatch_size // n_steps)`` of them, replayed by ``replay_agent``
    from their stored initial state (the memories' one-call path), so the
    memories are trained through every step of a row.
    """
    steps = batch.trajectories
    if model.recurrent:
        data: Trajectories | DictTensor = batch
        n, size = steps.n_elems(), max(1, config.minibatch_size // steps.n_timesteps())
    else:
        data = steps.masked_flatten()
        n, size = data.n_elems(), config.minibatch_size
    totals = {"policy_loss": 0.0, "value_loss": 0.0, "entropy": 0.0, "clip_fraction": 0.0}
    count = 0
    for epoch in range(config.n_epochs):
        order = torch.randperm(n, generator=generator, device=generator.device)
        for start in range(0, n, size):
            minibatch = data[order[start : start + size]]
            if isinstance(minibatch, Trajectories):
                out = replay_agent(model, minibatch)
                mask = minibatch.trajectories.mask()
                params, values = out["logits" if model.discrete else "mean"][mask], out["value"][mask]
                flat = minibatch.trajectories.masked_flatten()
                loss, terms = ppo_objective(
                    model, params, values, flat, clip, config.vf_coef, config.ent_coef, action_key
                )
            else:
                loss, terms = ppo_loss(model, minibatch, clip, config.vf_coef, config.ent_coef, action_key)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            model.clip_grad_norm_(config.max_grad_norm)  # a recurrent model's policy and value apart
            optimizer.step()
            if epoch == config.n_epochs - 1:
                for key, value in terms.items():
                    totals[key] += value
                count += 1
    return {k: v / max(count, 1) for k, v in totals.items()}


def add_advantages(
    model: ActorCritic,
    steps: TemporalDictTensor,
    gamma: float,
    gae_lambda: float,
    reward: torch.Tensor | None = None,
) -> None:
    """Add GAE's ``advantage`` and the value ``target`` (advantage + value) to ``steps`` ``[B, T]``, in place.

    The value of the reached observation (``next/observation``) is the
    bootstrap: it counts where an episode was truncated or the row ends, and is
    cut where it terminated (see ``rlstruct.gae``). For a recurrent model it is
    one more step of the value memory stored with each step (``h_v``, ``c_v``).

    Args:
        model: the actor-critic whose ``value_of`` gives the bootstraps (on the device of ``steps``).
        steps: trajectories with ``value``, ``next/observation``, ``next/reward``,
            ``next/terminated`` and ``next/done``; gains float32 ``advantage`` and ``target`` ``[B, T]``.
        gamma: the discount factor.
        gae_lambda: GAE's lambda.
        reward: the rewards to use ``[B, T]`` (scaled ones, say); None for ``next/reward``.
    """
    with torch.no_grad():
        next_value = model.values_reached(steps)
    value = steps["value"]
    adv = gae(
        steps["next/reward"] if reward is None else reward,
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


def ppo_loss(
    model: ActorCritic,
    minibatch: DictTensor,
    clip: float,
    vf_coef: float,
    ent_coef: float,
    action_key: str = "action",
) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO's loss on a minibatch of steps: clipped surrogate + ``vf_coef`` x value loss - ``ent_coef`` x entropy.

    Advantages are normalised within the minibatch (when it has more than one step).

    Args:
        model: the actor-critic being trained.
        minibatch: N steps with ``observation``, the action under ``action_key``
            (``raw_action`` for continuous actions), the behaviour ``log_prob``,
            ``advantage`` and ``target`` (float32 ``[N]``).
        clip: the clip range of the probability ratio.
        vf_coef: the weight of the value loss.
        ent_coef: the weight of the entropy bonus.
        action_key: the key of the actions in ``minibatch``.

    Returns:
        The scalar loss (with gradients) and its terms as floats:
        ``policy_loss``, ``value_loss``, ``entropy``, ``clip_fraction``.
    """
    params, value = model.heads(model.features(minibatch["observation"])[0])
    return ppo_objective(model, params, value, minibatch, clip, vf_coef, ent_coef, action_key)


def ppo_objective(
    model: ActorCritic,
    params: torch.Tensor,
    value: torch.Tensor,
    minibatch: DictTensor,
    clip: float,
    vf_coef: float,
    ent_coef: float,
    action_key: str = "action",
) -> tuple[torch.Tensor, dict[str, float]]:
    """``ppo_loss`` from the model's outputs already computed: ``params`` [N, k] and ``value`` [N]."""
    log_prob = model.log_prob(params, minibatch[action_key])
    ratio = (log_prob - minibatch["log_prob"]).exp()
    advantage = minibatch["advantage"]
    if advantage.numel() > 1:
        advantage = (advantage - advantage.mean()) / (advantage.std() + 1e-8)
    policy_loss = -torch.min(ratio * advantage, ratio.clamp(1 - clip, 1 + clip) * advantage).mean()
    value_loss = 0.5 * (value - minibatch["target"]).pow(2).mean()
    entropy = model.entropy(params).mean()
    loss = policy_loss + vf_coef * value_loss - ent_coef * entropy
    terms = {
        "policy_loss": policy_loss.detach().item(),
        "value_loss": value_loss.detach().item(),
        "entropy": entropy.detach().item(),
        "clip_fraction": ((ratio.detach() - 1).abs() > clip).float().mean().item(),
    }
    return loss, terms


TUNED: dict[str, dict[str, Any]] = {
    "Pendulum-v1": {
        "n_envs": 4,
        "n_steps": 1024,
        "gamma": 0.9,
        "gae_lambda": 0.95,
        "n_epochs": 10,
        "total_steps": 204_800,
    },
    "CartPoleNoVel-v1": {"recurrent": True, "normalize": True, "total_steps": 100_000},
    "CueMemory-v0": {"recurrent": True, "normalize": True},
}
"""What ``rlstruct train ppo --env ID`` uses for these ids, under the flags given (docs/performance.md)."""


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """The command line: ``python -m rlstruct.algos.ppo --env CartPole-v1 [--field value ...]``."""
    config = parse_config(
        Config,
        argv,
        prog="rlstruct train ppo",
        tuned=TUNED,
        check=lambda config: env_spaces(config.env),  # an unknown id is reported alone
    )
    return train(config)


if __name__ == "__main__":
    main(sys.argv[1:])
