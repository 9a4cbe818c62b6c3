"""A2C: synchronous advantage actor-critic (Mnih et al. 2016), recurrent-capable.

Each iteration collects ``n_envs x n_steps`` steps with the multiprocess
batcher, re-runs the agent over them with gradients (``replay_agent``: step
by step from the stored initial state for a recurrent agent, with the state
reset where an episode begins; one flat call otherwise), and takes one
gradient step on the policy-gradient loss with GAE advantages (lambda 1 gives
the n-step returns of the paper), the value loss and an entropy bonus. With
``value_norm`` (the default) the value is learned in units of its targets'
running scale (PopArt): the value error is divided by that scale, which
moves towards each batch's targets after the step.

Run it with ``rlstruct train a2c --env CartPole-v1`` (``--recurrent`` for a
GRU agent) or ``python -m rlstruct.algos.a2c``; ``--help`` lists every field.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence
from typing import Any, ClassVar, cast

import torch

from rlstruct.agent import Agent, replay_agent
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
from rlstruct.learning.losses import actor_critic_loss, normalize_advantages
from rlstruct.learning.metrics import EpisodeReturns, explained_variance
from rlstruct.learning.protocols import (
    OnPolicyAgent,
    check_outputs,
    check_step_values,
    checked_bootstrap_values,
    clip_gradients,
    update_obs_norm,
    update_value_norm,
    value_scale,
)
from rlstruct.normalize import RewardScaler
from rlstruct.returns import gae

__all__ = ["Config", "check", "main", "make_agent", "train"]


@dataclasses.dataclass
class Config(TrainConfig):
    """A2C's hyperparameters (defaults tuned for CartPole-v1)."""

    ADDED_FIELDS: ClassVar[dict[str, Any]] = {"value_norm": False}
    """A run saved before ``value_norm`` learned its value in returns."""

    total_steps: int = 100_000
    """Environment steps of training (all environments counted)."""
    n_envs: int = 8
    """Environments in all, split evenly across the worker processes."""
    n_steps: int = 64
    """Steps per environment per update (the trajectories' T)."""
    lr: float = 3e-4
    """RMSprop's learning rate at the start."""
    anneal: bool = True
    """Decay the learning rate linearly to 0 over the run."""
    gamma: float = 0.99
    """Discount factor."""
    gae_lambda: float = 0.95
    """GAE's lambda; 1 gives the n-step returns of the paper, bootstrapped at the end of the batch."""
    ent_coef: float = 0.0
    """Weight of the entropy bonus."""
    vf_coef: float = 0.25
    """Weight of the value loss."""
    max_grad_norm: float = 0.5
    """Gradients are rescaled to this global norm."""
    normalize_advantages: bool = True
    """Normalise the advantages of each batch to zero mean and unit variance."""
    value_norm: bool = True
    """Learn the value in units of its targets' running scale (PopArt: ``rlstruct.normalize.ValueNormalizer``)."""
    hidden: int = 64
    """Units of each of the two hidden layers (the GRU's size too, with ``recurrent``)."""
    recurrent: bool = False
    """Give the policy and the value each a recurrent memory that the batcher carries from step to step."""
    memory: str = "gru"
    """The recurrent cell with ``recurrent``: "gru" or "lstm"."""
    normalize: bool = False
    """Normalise observations with running statistics (kept in the model: workers, checkpoint, evaluation)."""
    scale_rewards: bool = False
    """Divide rewards by the running standard deviation of the discounted return."""
    torch_threads: int = 1
    """Threads of the learner's torch operations (small networks run fastest on one); a recurrent
    agent's two memories run side by side besides, one thread each (``run_in_parallel``)."""


def make_agent(config: Config, spaces: EnvSpaces) -> tuple[Agent, dict[str, Any]]:
    """The agent ``train`` trains for ``config`` on an environment of ``spaces``, and its arguments.

    ``config.agent``'s class if set, else an ``ActorCritic`` (see ``rlstruct.algos.agents.on_policy_agent``)
    whose value head ends in a ``ValueNormalizer`` with ``config.value_norm``.

    Raises:
        TypeError: if ``config`` is not this module's ``Config`` or ``spaces`` not an ``EnvSpaces``.
        AgentError: for an agent A2C cannot train.
    """
    check_config_class("a2c", config, Config)
    check_spaces(spaces, "a2c")
    return on_policy_agent(config, spaces, "a2c", value_norm=config.value_norm)


def check(config: Config) -> EnvSpaces:
    """Make every check of ``config`` that can be made before anything starts; returns the environment's spaces.

    The common fields (``check_config``), positive sizes, ``gamma`` and
    ``gae_lambda`` in [0, 1], ``max_grad_norm`` positive, ``ent_coef`` and
    ``vf_coef`` >= 0, ``memory`` one of ``MEMORIES``, ``n_envs`` a multiple of
    ``n_processes``, a budget of one iteration at least, and an environment
    that can be made (made once to read its spaces, then once more to reset it
    and take a random step: ``check_env``). Nothing is started or written.

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
        check_config_class("a2c", config, Config)
        check_config(
            config,
            n_envs=config.n_envs,
            n_steps=config.n_steps,
            lr=config.lr,
            max_grad_norm=config.max_grad_norm,
            hidden=config.hidden,
            torch_threads=config.torch_threads,
        )
        check_actor_critic(config)
        check_layout(config, config.n_envs, config.n_steps)
        check_run("a2c", config)
        return check_env("a2c", config.env)


def train(config: Config, *, hooks: Sequence[Hook] = ()) -> dict[str, Any]:
    """Train A2C as ``config`` says; returns the final evaluation (see ``Run.finish``).

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
    per_iteration = config.n_envs * config.n_steps
    config, device, spaces = prepare(config, spaces)
    agent, agent_args = make_agent(config, spaces)
    model = agent.to(device)
    policy = cast(OnPolicyAgent, model)
    optimizer = torch.optim.RMSprop(model.parameters(), lr=config.lr, alpha=0.99, eps=1e-5)

    with Run("a2c", config, type(agent), agent_args, hooks) as run:  # closes its batcher too, even on failure
        run.collector(device, config.n_envs, config.n_steps)
        episodes = EpisodeReturns(config.n_envs)
        scaler = RewardScaler(config.n_envs, config.gamma).to(device) if config.scale_rewards else None
        scaled: dict[str, Any] = {} if scaler is None else {"reward_scaler": scaler}
        env_steps = run.restore(model.generator, model=model, optimizer=optimizer, reward_scaler=scaler)
        run.start(model)
        while env_steps + per_iteration <= config.total_steps and not run.stopped:
            run.batcher.execute()
            batch = run.batcher.get()
            steps = batch.trajectories
            check_outputs(policy, steps, "a2c")  # what the loss reads
            env_steps += per_iteration
            episodes.add(steps)
            run.add_returns(episodes)

            # The agent's outputs again, with gradients, in one call (ActorCritic.forward_sequence).
            out = replay_agent(model, batch)
            mask = steps.mask()
            b, t = steps.n_elems(), steps.n_timesteps()
            value = out["value"]
            check_step_values(policy, "a2c", "its replayed output 'value'", value, (b, t))
            with torch.no_grad():
                next_value = checked_bootstrap_values(policy, batch, "a2c")
                reward = (
                    steps["next/reward"]
                    if scaler is None
                    else scaler(steps["next/reward"], steps["next/done"], mask)
                )
                advantage = gae(
                    reward,
                    value=value.detach(),
                    next_value=next_value,
                    terminated=steps["next/terminated"],
                    done=steps["next/done"],
                    gamma=config.gamma,
                    lam=config.gae_lambda,
                    mask=mask,
                )
                target = advantage + value.detach()
                if config.normalize_advantages:
                    advantage = normalize_advantages(advantage, mask)
            flat = DictTensor({k: v.flatten(0, 1) for k, v in out.items()})
            log_prob = policy.action_log_prob(flat, steps[policy.action_key].flatten(0, 1)).view(b, t)
            entropy = policy.action_entropy(flat).view(b, t)
            scale = value_scale(model)  # the value head's own units (PopArt), or None
            loss, terms = actor_critic_loss(
                log_prob,
                advantage,
                value if scale is None else value / scale,
                target if scale is None else target / scale,
                entropy,
                mask,
                vf_coef=config.vf_coef,
                ent_coef=config.ent_coef,
            )

            if diverged(terms):  # no step on them: the row is written and the run ends (TrainingDiverged)
                run.step(env_steps, model, **terms)
            lr = annealed(config.lr, env_steps - per_iteration, config.total_steps, config.anneal)
            set_learning_rate(optimizer, lr)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            clip_gradients(
                model, config.max_grad_norm
            )  # ActorCritic: a recurrent one's policy and value apart
            optimizer.step()
            update_obs_norm(model, steps)  # after the step, which used the statistics of collection
            update_value_norm(model, target[mask])  # after the step too: the next batch's scale
            run.batcher.update(run.weights(model))
            run.step(
                env_steps,
                model,
                lr=lr,
                explained_variance=explained_variance(value.detach()[mask], target[mask]),
                **terms,
            )
            if run.checkpoint_due(env_steps):
                run.checkpoint(env_steps, model, (model.generator,), optimizer=optimizer, **scaled)
                episodes = EpisodeReturns(config.n_envs)
        return run.finish(model, env_steps, optimizer=optimizer, rng=rng_state(model.generator), **scaled)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """The command line: ``python -m rlstruct.algos.a2c --env CartPole-v1 [--field value ...]``."""
    # ActorCritic(value_norm=) alone reads value_norm: an agent of yours has update_value_norm or not
    agent_fields = (*ACTOR_CRITIC_FIELDS, "value_norm")
    # check: a resumed run's config.json is checked as that file, not as flags
    config = parse_config(Config, argv, prog="rlstruct train a2c", check=check, agent_fields=agent_fields)
    return train(config)


if __name__ == "__main__":  # through the command line's entry, whose mistakes are one line (exit status 2)
    from rlstruct.cli import main as command_line

    sys.exit(command_line(["train", "a2c", *sys.argv[1:]]))
