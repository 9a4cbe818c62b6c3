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
from typing import Any, cast

import torch

from rlstruct.agent import Agent
from rlstruct.algos.agents import ACTOR_CRITIC_FIELDS, check_spaces, on_policy_agent
from rlstruct.algos.config import (
    TrainConfig,
    annealed,
    check_actor_critic,
    check_config,
    check_config_class,
    check_env,
    check_layout,
    check_run,
    config_errors,
    parse_config,
    set_learning_rate,
)
from rlstruct.algos.evaluation import EnvSpaces
from rlstruct.algos.hooks import Hook, check_hooks
from rlstruct.algos.run import Run, diverged, prepare
from rlstruct.checkpoint import rng_state
from rlstruct.learning.metrics import EpisodeReturns, explained_variance
from rlstruct.learning.on_policy import add_advantages, ppo_minibatch_loss, ppo_minibatches
from rlstruct.learning.protocols import (
    OnPolicyAgent,
    check_outputs,
    clip_gradients,
    update_obs_norm,
)
from rlstruct.normalize import RewardScaler
from rlstruct.trajectories import Trajectories

__all__ = ["Config", "check", "main", "make_agent", "train", "update"]


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
    """Threads of the learner's torch operations (small networks run fastest on one); a recurrent
    agent's two memories run side by side besides, one thread each (``run_in_parallel``)."""


def make_agent(config: Config, spaces: EnvSpaces) -> tuple[Agent, dict[str, Any]]:
    """The agent ``train`` trains for ``config`` on an environment of ``spaces``, and its arguments.

    ``config.agent``'s class if set, else an ``ActorCritic`` (see ``rlstruct.algos.agents.on_policy_agent``).

    Raises:
        TypeError: if ``config`` is not this module's ``Config`` or ``spaces`` not an ``EnvSpaces``.
        AgentError: for an agent PPO cannot train.
    """
    check_config_class("ppo", config, Config)
    check_spaces(spaces, "ppo")
    return on_policy_agent(config, spaces, "ppo", orthogonal=config.orthogonal_init)


def check(config: Config) -> EnvSpaces:
    """Make every check of ``config`` that can be made before anything starts; returns the environment's spaces.

    The common fields (``check_config``), positive sizes, ``gamma`` and
    ``gae_lambda`` in [0, 1], ``clip`` and ``max_grad_norm`` positive,
    ``ent_coef`` and ``vf_coef`` >= 0, ``memory`` one of ``MEMORIES``
    (``check_actor_critic``: for the built-in agent, left at its default
    without ``recurrent``, and ``hidden`` within the device's memory),
    ``n_envs`` a multiple of ``n_processes``, a budget of one iteration at
    least, minibatches that one iteration can fill (``_check_minibatch``), and
    an environment that can be made (made once to read its spaces, then once
    more to reset it and take a random step: ``check_env``). Nothing is
    started or written.

    Then ``check_run``: the agent class ``config.agent`` names (its module
    is imported), and the run directory ``config.resume`` names, whose
    config.json must hold these settings.

    Raises:
        ConfigError: (a TypeError and a ValueError) naming the first field
            that is wrong, as ``config.<field>``.
        UnknownEnvironment: for an environment id gymnasium cannot make.
        AgentError: for a ``config.agent`` that cannot be found, or
            ``config.agent_args`` without one (``check_run``).
    """
    with config_errors():
        check_config_class("ppo", config, Config)
        check_config(
            config,
            n_envs=config.n_envs,
            n_steps=config.n_steps,
            n_epochs=config.n_epochs,
            minibatch_size=config.minibatch_size,
            lr=config.lr,
            clip=config.clip,
            max_grad_norm=config.max_grad_norm,
            hidden=config.hidden,
            torch_threads=config.torch_threads,
        )
        check_actor_critic(config)
        check_layout(config, config.n_envs, config.n_steps)
        _check_minibatch(config)
        check_run("ppo", config)
        return check_env("ppo", config.env)


def _check_minibatch(config: Config) -> None:
    """Raise ValueError for minibatches of more steps than an iteration has, ``n_envs x n_steps``.

    Only for the built-in feed-forward agent, which draws minibatches of
    ``minibatch_size`` steps. A recurrent one (and an agent of your own,
    which may be) draws whole rows, ``rows_per_minibatch`` of them: at least
    one, at most all ``n_envs``, so that every ``minibatch_size`` works.
    """
    per_iteration = config.n_envs * config.n_steps
    if not config.recurrent and config.agent is None and config.minibatch_size > per_iteration:
        raise ValueError(
            f"config.minibatch_size ({config.minibatch_size}) must be at most the steps of one iteration, "
            f"n_envs x n_steps = {per_iteration}"
        )


def train(config: Config, *, hooks: Sequence[Hook] = ()) -> dict[str, Any]:
    """Train PPO as ``config`` says; returns the final evaluation (see ``Run.finish``).

    Args:
        config: the run's configuration.
        hooks: callables called with a ``TrainingEvent`` after each logged
            iteration and evaluation, which may log scalars of their own and
            stop the run (see ``rlstruct.algos.hooks``).

    Raises:
        ConfigError: for a config that ``check`` refuses, before anything starts.
        UnknownEnvironment: for an environment id gymnasium cannot make.
        TypeError: if ``hooks`` is not a list or tuple of callables, before anything starts.
    """
    check_hooks(hooks)
    spaces = check(config)
    config, device, spaces = prepare(config, spaces)
    agent, agent_args = make_agent(config, spaces)
    model = agent.to(device)
    policy = cast(OnPolicyAgent, model)
    # the fused Adam step costs a third of the default one on this model (124 against 365 us on one CPU thread)
    fused = device.type in ("cpu", "cuda")
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr, eps=1e-5, fused=fused)
    generator = torch.Generator(device).manual_seed(config.seed)

    with Run("ppo", config, type(agent), agent_args, hooks) as run:  # closes its batcher too, even on failure
        run.collector(device, config.n_envs, config.n_steps)
        episodes = EpisodeReturns(config.n_envs)
        scaler = RewardScaler(config.n_envs, config.gamma).to(device) if config.scale_rewards else None
        scaled: dict[str, Any] = {} if scaler is None else {"reward_scaler": scaler}
        per_iteration = config.n_envs * config.n_steps
        env_steps = run.restore(
            generator, model.generator, model=model, optimizer=optimizer, reward_scaler=scaler
        )
        run.start(model)
        # never more steps than the budget; a hook may stop the run sooner (run.stopped)
        while env_steps + per_iteration <= config.total_steps and not run.stopped:
            run.batcher.execute()
            batch = run.batcher.get()
            steps = batch.trajectories
            check_outputs(policy, steps, "ppo")  # what the losses read
            mask = steps.mask()
            env_steps += per_iteration
            episodes.add(steps)
            run.add_returns(episodes)

            reward = None if scaler is None else scaler(steps["next/reward"], steps["next/done"], mask)
            add_advantages(model, batch, config.gamma, config.gae_lambda, reward)

            done = env_steps - per_iteration  # before this batch
            lr = annealed(config.lr, done, config.total_steps, config.anneal)
            clip = annealed(config.clip, done, config.total_steps, config.anneal)
            set_learning_rate(optimizer, lr)
            stats = update(model, optimizer, batch, config, clip, generator)
            update_obs_norm(model, steps)  # after the update, which used the statistics of collection
            run.batcher.update(run.weights(model))
            run.step(
                env_steps,
                model,
                lr=lr,
                explained_variance=explained_variance(steps["value"][mask], steps["target"][mask]),
                **stats,
            )
            if run.checkpoint_due(env_steps):
                run.checkpoint(env_steps, model, (generator, model.generator), optimizer=optimizer, **scaled)
                episodes = EpisodeReturns(config.n_envs)
        return run.finish(
            model, env_steps, optimizer=optimizer, rng=rng_state(generator, model.generator), **scaled
        )


def update(
    model: Agent,
    optimizer: torch.optim.Optimizer,
    batch: Trajectories,
    config: Config,
    clip: float,
    generator: torch.Generator,
) -> dict[str, float]:
    """``n_epochs`` passes of minibatch steps on PPO's clipped loss; returns the last epoch's means.

    The agent is any ``OnPolicyAgent``. One without state or history is
    trained on minibatches of ``minibatch_size`` steps drawn from the whole
    batch, each replayed in one ``forward`` call; one with a state (a memory)
    or a history on whole rows, replayed from their stored state (see
    ``rlstruct.learning.on_policy.ppo_minibatches``).
    """
    data, size = ppo_minibatches(model, batch, config.minibatch_size)
    n = data.n_elems()
    totals = {"policy_loss": 0.0, "value_loss": 0.0, "entropy": 0.0, "clip_fraction": 0.0}
    count = 0
    for epoch in range(config.n_epochs):
        order = torch.randperm(n, generator=generator, device=generator.device)
        for start in range(0, n, size):
            loss, terms = ppo_minibatch_loss(
                model,
                data[order[start : start + size]],
                clip=clip,
                vf_coef=config.vf_coef,
                ent_coef=config.ent_coef,
            )
            if diverged(terms):
                return terms  # no step on them: Run.step ends the run (TrainingDiverged), naming them
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            clip_gradients(
                model, config.max_grad_norm
            )  # ActorCritic: a recurrent one's policy and value apart
            optimizer.step()
            if epoch == config.n_epochs - 1:
                for key, value in terms.items():
                    totals[key] += value
                count += 1
    return {k: v / max(count, 1) for k, v in totals.items()}


TUNED: dict[str, dict[str, Any]] = {
    "Pendulum-v1": {
        "n_envs": 4,
        "n_steps": 1024,
        "gamma": 0.9,
        "gae_lambda": 0.95,
        "n_epochs": 10,
        "total_steps": 204_800,
    },
    "CartPoleNoVel-v1": {"recurrent": True, "normalize": True, "n_envs": 16, "total_steps": 100_000},
    "CueMemory-v0": {"recurrent": True, "normalize": True},
    "popgym-PositionOnlyPendulumEasy-v0": {
        "recurrent": True,
        "normalize": True,
        "gamma": 0.95,
        "gae_lambda": 0.95,
        "n_envs": 16,
    },
}
"""What ``rlstruct train ppo --env ID`` uses for these ids, under the flags given (docs/performance.md)."""


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """The command line: ``python -m rlstruct.algos.ppo --env CartPole-v1 [--field value ...]``."""
    config = parse_config(
        Config,
        argv,
        prog="rlstruct train ppo",
        tuned=TUNED,
        check=check,  # a mistake is reported alone, before the tuned settings are listed
        agent_fields=(*ACTOR_CRITIC_FIELDS, "orthogonal_init"),  # ActorCritic(orthogonal=) alone reads it
    )
    return train(config)


if __name__ == "__main__":  # through the command line's entry, whose mistakes are one line (exit status 2)
    from rlstruct.cli import main as command_line

    sys.exit(command_line(["train", "ppo", *sys.argv[1:]]))
