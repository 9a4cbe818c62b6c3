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
from rlstruct.dicttensor import DictTensor
from rlstruct.learning.metrics import EpisodeReturns
from rlstruct.learning.on_policy import vtrace_agent_loss
from rlstruct.learning.protocols import (
    OnPolicyAgent,
    check_outputs,
    clip_gradients,
    update_obs_norm,
)
from rlstruct.trajectories import Trajectories

__all__ = ["Config", "check", "learner_step", "main", "make_agent", "train"]


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
    """Threads of the learner's torch operations (small networks run fastest on one); a recurrent
    agent's two memories run side by side besides, one thread each (``run_in_parallel``)."""


def make_agent(config: Config, spaces: EnvSpaces) -> tuple[Agent, dict[str, Any]]:
    """The agent ``train`` trains for ``config`` on an environment of ``spaces``, and its arguments.

    ``config.agent``'s class if set, else an ``ActorCritic`` (see ``rlstruct.algos.agents.on_policy_agent``).

    Raises:
        TypeError: if ``config`` is not this module's ``Config`` or ``spaces`` not an ``EnvSpaces``.
        AgentError: for an agent IMPALA cannot train.
    """
    check_config_class("impala", config, Config)
    check_spaces(spaces, "impala")
    return on_policy_agent(config, spaces, "impala")


def check(config: Config) -> EnvSpaces:
    """Make every check of ``config`` that can be made before anything starts; returns the environment's spaces.

    The common fields (``check_config``), positive sizes and rates, ``gamma``
    in [0, 1], ``ent_coef`` and ``vf_coef`` >= 0, ``memory`` one of
    ``MEMORIES``, ``n_envs`` a multiple of ``n_processes``, ``n_slots`` above
    ``n_processes``, a budget of one update at least, no ``checkpoint_every``
    or ``resume`` (IMPALA cannot continue a run), and an environment that can
    be made (made once to read its spaces, then once more to reset it and take
    a random step: ``check_env``). Nothing is started or written.

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
        check_config_class("impala", config, Config)
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
            max_grad_norm=config.max_grad_norm,
            hidden=config.hidden,
            torch_threads=config.torch_threads,
        )
        check_actor_critic(config)
        check_layout(config, config.n_envs, None)
        for name, unset in (("resume", None), ("checkpoint_every", 0)):
            if getattr(config, name) != unset:
                raise ValueError(
                    f"impala: config.{name} is not supported: its stream collection is asynchronous, so no "
                    f"checkpoint could be continued bit-identically; got {getattr(config, name)!r}"
                )
        if config.n_slots <= config.n_processes:
            raise ValueError(
                f"config.n_slots ({config.n_slots}) must be more than config.n_processes ({config.n_processes})"
            )
        per_update = config.batch_slots * (config.n_envs // config.n_processes) * config.n_steps
        if config.total_steps < per_update:
            raise ValueError(
                f"config.total_steps ({config.total_steps}) must allow one update of "
                f"batch_slots x n_envs / n_processes x n_steps = {per_update} steps"
            )
        check_run("impala", config)
        return check_env("impala", config.env)


def train(config: Config, *, hooks: Sequence[Hook] = ()) -> dict[str, Any]:
    """Train IMPALA as ``config`` says; returns the final evaluation (see ``Run.finish``).

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
    per_worker = config.n_envs // config.n_processes
    per_update = config.batch_slots * per_worker * config.n_steps
    config, device, spaces = prepare(config, spaces)
    agent, agent_args = make_agent(config, spaces)
    model = agent.to(device)
    policy = cast(OnPolicyAgent, model)
    optimizer = torch.optim.RMSprop(model.parameters(), lr=config.lr, alpha=0.99, eps=1e-5)

    with Run(
        "impala", config, type(agent), agent_args, hooks
    ) as run:  # closes its batcher too, even on failure
        run.collector(device, config.n_envs, config.n_steps, mode="stream", n_slots=config.n_slots)
        # A slot holds the rows of one worker; the row index (in z, unused by the agent) tells which,
        # so that training episodes are followed across the slots of each worker.
        episodes = [EpisodeReturns(per_worker) for _ in range(config.n_processes)]
        env_steps = 0
        run.start(model, agent_info=DictTensor({"row": torch.arange(config.n_envs)}))
        # never more steps than the budget; a hook may stop the run sooner (run.stopped)
        while env_steps + per_update <= config.total_steps and not run.stopped:
            pieces: list[Trajectories] = []
            for _ in range(config.batch_slots):
                piece = run.batcher.get()
                episodes[int(piece.info["agent_info/row"][0]) // per_worker].add(piece.trajectories)
                pieces.append(piece)
            batch = pieces[0] if len(pieces) == 1 else Trajectories.cat(pieces)
            env_steps += per_update
            run.add_returns(*episodes)
            lag = (run.batcher.policy_version() - batch.info["policy_version"]).float()

            lr = annealed(config.lr, env_steps - per_update, config.total_steps, config.anneal)
            set_learning_rate(optimizer, lr)
            check_outputs(policy, batch.trajectories, "impala")  # what the loss reads
            stats = learner_step(model, optimizer, batch, config)
            update_obs_norm(model, batch.trajectories)  # after the step, which used the actors' statistics
            run.batcher.update(run.weights(model))
            run.step(
                env_steps,
                model,
                lr=lr,
                policy_lag_mean=float(lag.mean()),
                policy_lag_max=float(lag.max()),
                **stats,
            )
        return run.finish(model, env_steps, optimizer=optimizer, rng=rng_state(model.generator))


def learner_step(
    model: Agent, optimizer: torch.optim.Optimizer, batch: Trajectories, config: Config
) -> dict[str, float]:
    """One gradient step of ``optimizer`` on the V-trace loss of ``batch``; returns the loss's statistics.

    The loss is ``rlstruct.learning.on_policy.vtrace_agent_loss`` with the
    hyperparameters of ``config``; gradients are rescaled to
    ``config.max_grad_norm`` before the step. Updates ``model`` in place.
    """
    loss, stats = vtrace_agent_loss(
        model,
        batch,
        gamma=config.gamma,
        reward_scale=config.reward_scale,
        rho_bar=config.rho_bar,
        c_bar=config.c_bar,
        vf_coef=config.vf_coef,
        ent_coef=config.ent_coef,
        normalize=config.normalize_advantages,
    )
    if diverged(stats):
        return stats  # no step on them: Run.step ends the run (TrainingDiverged), naming them
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    clip_gradients(model, config.max_grad_norm)  # ActorCritic: a recurrent one's policy and value apart
    optimizer.step()
    return stats


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """The command line: ``python -m rlstruct.algos.impala --env CartPole-v1 [--field value ...]``."""
    return train(parse_config(Config, argv, prog="rlstruct train impala", agent_fields=ACTOR_CRITIC_FIELDS))


if __name__ == "__main__":  # through the command line's entry, whose mistakes are one line (exit status 2)
    from rlstruct.cli import main as command_line

    sys.exit(command_line(["train", "impala", *sys.argv[1:]]))
