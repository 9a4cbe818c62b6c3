"""SAC: soft actor-critic with twin Q critics and an auto-tuned temperature (Haarnoja et al. 2018).

The actor is a Gaussian squashed by tanh and scaled to the action bounds; two
Q critics, each with a Polyak-averaged target copy, learn the soft Bellman
target from the smaller of the two target values; the entropy temperature
alpha is tuned so that the policy's entropy stays near ``-|A|``.

Each iteration the multiprocess batcher collects ``n_envs x n_steps`` steps
("fixed" mode: episodes carry over, environments reset themselves) while the
learner takes ``gradient_steps`` gradient steps per env step of the previous
batch, sampled from a uniform replay buffer. The first ``learning_starts``
steps are uniform random actions, drawn by the agents themselves.

Run it with ``rlstruct train sac --env Pendulum-v1`` or
``python -m rlstruct.algos.sac --env Pendulum-v1``; ``--help`` lists every
field of ``Config``.

The networks, the losses and what SAC needs of an agent of your own
(``SACAgent``) are in ``rlstruct.learning.soft_actor_critic``.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import sys
from collections.abc import Sequence
from typing import Any, cast

import torch

from rlstruct.agent import Agent
from rlstruct.algos.agents import agent_observation_keys, check_spaces, observation_args, own_agent
from rlstruct.algos.config import (
    TrainConfig,
    check_config,
    check_config_class,
    check_env,
    check_hidden,
    check_layout,
    check_recurrent_only,
    check_replay,
    check_run,
    config_errors,
    parse_config,
)
from rlstruct.algos.evaluation import EnvSpaces
from rlstruct.algos.hooks import Hook, check_hooks
from rlstruct.algos.run import Run, prepare
from rlstruct.checkpoint import rng_state
from rlstruct.checks import check_int, check_number
from rlstruct.errors import AgentError, describe
from rlstruct.learning.metrics import EpisodeReturns
from rlstruct.learning.protocols import check_chunk_outputs, check_replayed_outputs
from rlstruct.learning.recurrent_sac import (
    RecurrentSACLearner,
    RecurrentSquashedGaussianActor,
    RecurrentTwinQ,
    check_recurrent_sac_agent,
)
from rlstruct.learning.soft_actor_critic import (
    SACAgent,
    SACLearner,
    SquashedGaussianActor,
    TwinQ,
    check_sac_agent,
    own_critics,
    soft_td_target,
    squashed_log_prob,
)
from rlstruct.replay import ReplayBuffer, SequenceReplayBuffer

__all__ = [
    "Config",
    "SACLearner",
    "SquashedGaussianActor",
    "TwinQ",
    "check",
    "critics",
    "main",
    "make_agent",
    "soft_td_target",
    "squashed_log_prob",
    "train",
]
# the networks and the maths are rlstruct.learning.soft_actor_critic's, named here too


def replay_keys(keys: Sequence[str]) -> list[str]:
    """What the replay buffer keeps of each step: the agent's observation ``keys``, now and reached, and the rest."""
    return [*keys, "unit_action", "next/reward", *(f"next/{k}" for k in keys), "next/terminated"]


def sequence_keys(keys: Sequence[str]) -> list[str]:
    """What the sequence replay keeps of each step with ``recurrent``: ``replay_keys`` and the episode starts."""
    return [*replay_keys(keys), "initial_state", "next/initial_state"]


@dataclasses.dataclass
class Config(TrainConfig):
    """SAC's hyperparameters (defaults tuned for Pendulum-v1)."""

    total_steps: int = 10_000
    """Environment steps of training (all environments counted)."""
    n_processes: int = 1
    """Worker processes of the collection batcher."""
    n_envs: int = 1
    """Environments in all, split evenly across the worker processes."""
    n_steps: int = 16
    """Steps per environment per iteration (the trajectories' T)."""
    gradient_steps: float = 1.0
    """Gradient steps per env step collected (the update-to-data ratio)."""
    learning_starts: int = 1_000
    """Env steps of uniform random actions before the first gradient step."""
    buffer_size: int = 1_000_000
    """Transitions the replay buffer keeps."""
    batch_size: int = 256
    """Transitions per gradient step."""
    lr: float = 1e-3
    """Adam's learning rate for the actor, the critics and the temperature."""
    gamma: float = 0.99
    """Discount factor."""
    tau: float = 0.005
    """Polyak rate of the target critics: target += tau * (critic - target) after each gradient step."""
    init_alpha: float = 1.0
    """The entropy temperature at the start."""
    target_entropy: float | None = None
    """The entropy the temperature aims at; None means -|A| (minus the action dimension)."""
    hidden: int = 256
    """Units of each of the two hidden layers of the actor and of each critic."""
    torch_threads: int = 1
    """Threads of the learner's torch operations (small networks run fastest on one)."""
    recurrent: bool = False
    """An actor and critics with memories (GRUs), trained on chunks of ``n_steps`` steps replayed from the actor's stored state."""
    burn_in: int = 8
    """With ``recurrent``: the first steps of each replayed chunk, which only warm the memories (no loss)."""


def make_agent(config: Config, spaces: EnvSpaces) -> tuple[Agent, dict[str, Any]]:
    """The agent ``train`` trains for ``config`` on an environment of ``spaces``, and its keyword arguments.

    ``config.agent``'s class, made with ``config.agent_args`` and checked to
    speak ``SACAgent`` (``RecurrentSACAgent`` with ``recurrent``; see
    ``rlstruct.algos.agents.own_agent``), else a ``SquashedGaussianActor``
    (``RecurrentSquashedGaussianActor`` with ``recurrent``).

    Returns:
        ``(agent, agent_args)``: a new agent on the CPU, initialised from
        torch's global generator, and the arguments that make its copies
        (the batchers') and rebuild it (``load_run``).

    Raises:
        TypeError: if ``config`` is not this module's ``Config`` or ``spaces`` not an ``EnvSpaces``.
        AgentError: for an agent SAC cannot train.
    """
    check_config_class("sac", config, Config)
    check_spaces(spaces, "sac")
    own = own_agent(config, spaces, "sac", check_recurrent_sac_agent if config.recurrent else check_sac_agent)
    if own is not None:
        return own
    agent_args: dict[str, Any] = {
        **observation_args(spaces),
        "action_low": spaces.action_low,
        "action_high": spaces.action_high,
        "hidden": (config.hidden, config.hidden),
    }
    actor = RecurrentSquashedGaussianActor if config.recurrent else SquashedGaussianActor
    return actor(**agent_args), agent_args


def critics(config: Config, spaces: EnvSpaces, actor: Agent) -> torch.nn.Module:
    """The twin critics SAC trains beside ``actor``: its own ``make_critics()``, else a ``TwinQ``.

    The ``TwinQ`` has two hidden layers of ``config.hidden`` units (with
    ``recurrent``, a ``RecurrentTwinQ``: a memory of ``config.hidden`` units,
    then the pair with one such layer each) and reads the observation keys
    the actor reads (``agent_observation_keys``), made from torch's global
    generator on the CPU.

    Raises:
        AgentError: if ``make_critics()`` returns something else than a
            module, or, with ``recurrent``, a module without ``features``.
    """
    made = own_critics(actor, "sac")
    if made is not None:
        if config.recurrent and not callable(getattr(made, "features", None)):
            raise AgentError(
                f"sac with recurrent: {type(actor).__name__}.make_critics() must return critics with "
                "features(batch, burn_in) (see rlstruct.learning.recurrent_sac.RecurrentTwinQ), got "
                f"{describe(made)}"
            )
        return made
    hidden = (config.hidden, config.hidden)
    action_dim = cast(SACAgent, actor).action_dim
    keys = agent_observation_keys(actor, spaces)
    network = RecurrentTwinQ if config.recurrent else TwinQ
    if keys == ("observation",) and spaces.flat:
        return network(obs_dim=spaces.obs_dim, action_dim=action_dim, hidden=hidden)
    read = {key: spaces.observation[key] for key in keys}
    return network(action_dim=action_dim, hidden=hidden, observation_spaces=read)


def check(config: Config) -> EnvSpaces:
    """Make every check of ``config`` that can be made before anything starts; returns the environment's spaces.

    The common fields (``check_config``), positive sizes and rates, ``tau``
    and ``gamma`` in (0, 1], ``learning_starts`` an int >= 0, ``n_envs`` a
    multiple of ``n_processes``, a budget of one iteration at least, and an
    environment with continuous (Box) actions (made once to read its spaces,
    then once more to reset it and take a random step: ``check_env``).
    ``target_entropy`` finite if given; without ``recurrent``, ``burn_in`` at
    its default; a buffer of at least one batch, and a buffer and a hidden
    layer that fit ``device``'s memory (``check_replay``, ``check_hidden``).
    Nothing is started or written.

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
        check_config_class("sac", config, Config)
        check_config(
            config,
            n_envs=config.n_envs,
            n_steps=config.n_steps,
            gradient_steps=config.gradient_steps,
            buffer_size=config.buffer_size,
            batch_size=config.batch_size,
            lr=config.lr,
            init_alpha=config.init_alpha,
            hidden=config.hidden,
            torch_threads=config.torch_threads,
        )
        for name in ("tau", "gamma"):
            check_number("config", name, getattr(config, name), 0.0, 1.0, low_open=True)
        check_int("config", "learning_starts", config.learning_starts, 0)
        check_int("config", "burn_in", config.burn_in, 0)
        if config.recurrent and config.burn_in >= config.n_steps:
            raise ValueError(
                f"config.burn_in ({config.burn_in}) must be below config.n_steps ({config.n_steps}) with config.recurrent: "
                "a chunk is a row of n_steps steps, and its burn-in steps are not learned from"
            )
        check_recurrent_only(config, "burn_in")
        if config.target_entropy is not None:
            check_number("config", "target_entropy", config.target_entropy)
        check_layout(config, config.n_envs, config.n_steps)
        check_hidden(config)  # the critics SAC builds for any agent without make_critics()
        check_run("sac", config)
        spaces = check_env("sac", config.env)
        bounds = [*(spaces.action_low or ()), *(spaces.action_high or ())]
        if not all(math.isfinite(bound) for bound in bounds):
            raise ValueError(
                f"sac squashes its actions into their bounds, and config.env {config.env!r} has bounds "
                f"{spaces.action_low} to {spaces.action_high}: give the action space finite bounds"
            )
        check_replay(config, spaces)
        return spaces


def train(config: Config, *, hooks: Sequence[Hook] = ()) -> dict[str, Any]:
    """Train SAC as ``config`` says; returns the final evaluation (see ``Run.finish``).

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
    actor = agent.to(device)
    policy = cast(SACAgent, actor)
    observed = agent_observation_keys(actor, spaces)  # what the replay keeps and the networks read
    critic = critics(config, spaces, actor).to(device)
    target = copy.deepcopy(critic).requires_grad_(False)
    log_alpha = torch.tensor(math.log(config.init_alpha), device=device, requires_grad=True)
    target_entropy = -float(policy.action_dim) if config.target_entropy is None else config.target_entropy
    fused = device.type in ("cpu", "cuda")  # one kernel per parameter group instead of one per tensor
    critic_optimizer = torch.optim.Adam(critic.parameters(), lr=config.lr, fused=fused)
    actor_optimizer = torch.optim.Adam([*actor.parameters(), log_alpha], lr=config.lr, fused=fused)
    generator = torch.Generator(device).manual_seed(config.seed)
    buffer: ReplayBuffer | SequenceReplayBuffer
    if config.recurrent:
        buffer = SequenceReplayBuffer(
            max(1, config.buffer_size // config.n_steps),
            burn_in=config.burn_in,
            device=device,
            generator=generator,
        )
    else:
        buffer = ReplayBuffer(config.buffer_size, device=device, generator=generator)
    learner = (RecurrentSACLearner if config.recurrent else SACLearner)(
        policy,
        critic,
        target,
        log_alpha,
        critic_optimizer,
        actor_optimizer,
        generator,
        gamma=config.gamma,
        tau=config.tau,
        target_entropy=target_entropy,
        keys=observed,
    )

    with Run("sac", config, type(agent), agent_args, hooks) as run:  # closes its batcher too, even on failure
        run.collector(device, config.n_envs, config.n_steps)
        episodes = EpisodeReturns(config.n_envs)
        policy.uniform.fill_(config.learning_starts > 0)  # a resumed run restores the value it had reached
        # what the checkpoints hold besides the actor, its temperature and the counters
        trained = {
            "critic": critic,
            "target": target,
            "critic_optimizer": critic_optimizer,
            "actor_optimizer": actor_optimizer,
        }
        generators = (generator, actor.generator)
        env_steps = run.restore(*generators, model=actor, buffer=buffer, **trained)
        owed = 0.0 if run.resumed is None else float(run.resumed["owed"])  # gradient steps due, not taken
        if run.resumed is not None:
            with torch.no_grad():
                log_alpha.copy_(run.resumed["log_alpha"])
        run.start(actor, execute=True)
        while True:
            batch = run.batcher.get()
            steps = batch.trajectories
            env_steps += per_iteration
            # The next batch is collected while the learner trains on this one (one iteration behind).
            more = env_steps + per_iteration <= config.total_steps  # never more steps than the budget
            if more:
                policy.uniform.fill_(env_steps < config.learning_starts)
                run.batcher.update(run.weights(actor))
                run.batcher.execute()
            episodes.add(steps)
            run.add_returns(episodes)
            if isinstance(buffer, SequenceReplayBuffer):
                check_chunk_outputs(agent, batch, "sac", ("action", "unit_action"))
                buffer.add(batch, keys=sequence_keys(observed))
            else:
                check_replayed_outputs(agent, batch, "sac", ("action", "unit_action"))
                buffer.add_trajectories(steps, replay_keys(observed))
            stats: dict[str, torch.Tensor] = {}
            if env_steps >= config.learning_starts:
                owed += per_iteration * config.gradient_steps
                while owed >= 1:
                    stats = learn(learner, buffer, config)
                    owed -= 1
            run.step(env_steps, actor, **{k: float(v) for k, v in stats.items()})
            if not more or run.stopped:  # the budget is spent, or a hook asked to stop
                break
            if run.checkpoint_due(env_steps):  # the batch in flight is dropped, in a resumed run alike
                run.checkpoint(
                    env_steps,
                    actor,
                    generators,
                    execute=True,
                    log_alpha=log_alpha.detach(),
                    buffer=buffer,
                    owed=owed,
                    **trained,
                )
                episodes = EpisodeReturns(config.n_envs)
        return run.finish(
            actor, env_steps, log_alpha=log_alpha.detach(), rng=rng_state(*generators), **trained
        )


def learn(
    learner: SACLearner, buffer: ReplayBuffer | SequenceReplayBuffer, config: Config
) -> dict[str, torch.Tensor]:
    """One gradient step: on ``batch_size`` transitions, or with ``recurrent`` on ``batch_size / n_steps`` chunks."""
    if isinstance(buffer, SequenceReplayBuffer):
        sample = buffer.sample(max(1, round(config.batch_size / config.n_steps)))
        return cast(RecurrentSACLearner, learner).step_chunks(sample.batch, sample.learn, config.burn_in)
    return learner.step(buffer.sample(config.batch_size).rows)


TUNED: dict[str, dict[str, Any]] = {
    "InvertedPendulumBulletEnv-v0": {"hidden": 256, "gradient_steps": 2.0, "total_steps": 30_000},
    "PendulumNoVel-v1": {
        "recurrent": True,
        "n_steps": 32,
        "hidden": 64,
        "gamma": 0.98,
        "total_steps": 60_000,
    },
}
"""What ``rlstruct train sac --env ID`` uses for these ids, under the flags given (docs/performance.md)."""


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """The command line: ``python -m rlstruct.algos.sac --env Pendulum-v1 [--field value ...]``."""
    config = parse_config(
        Config,
        argv,
        prog="rlstruct train sac",
        tuned=TUNED,
        check=check,  # a mistake is reported alone, before the tuned settings are listed
    )
    return train(config)


if __name__ == "__main__":  # through the command line's entry, whose mistakes are one line (exit status 2)
    from rlstruct.cli import main as command_line

    sys.exit(command_line(["train", "sac", *sys.argv[1:]]))
