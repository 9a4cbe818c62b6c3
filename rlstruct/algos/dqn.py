"""DQN: deep Q-learning with double-Q targets, a dueling head (by default) and optional prioritized replay.

Each iteration takes ``n_envs x n_steps`` epsilon-greedy steps from the
multiprocess batcher (fixed-length trajectories whose episodes carry over),
stores them as transitions in a replay buffer, starts the workers on the next
batch, and meanwhile takes ``train_ratio`` gradient steps per env step on the
Huber loss between Q(s, a) and the double-Q target (Mnih et al. 2015; van
Hasselt et al. 2016). A target network follows the online one every
``target_update_every`` gradient steps (a copy, or a Polyak blend with
``tau < 1``). The head is split into a value and advantages (Wang et al.
2016; ``--no-dueling`` for one head of Q-values); ``--prioritized`` replays transitions in proportion to their
TD error with importance-sampling weights (Schaul et al. 2016).

With ``--recurrent`` the Q-network has a memory (a GRU: ``RecurrentQNetwork``)
and the replay keeps whole rows of ``n_steps`` steps (chunks) with the memory
each began with (``SequenceReplayBuffer``). A gradient step replays
``batch_size / n_steps`` chunks from their stored state, the first
``burn_in`` steps of each only warming the memory, and learns on the rest
with ``td_steps``-step double-Q targets (R2D2, Kapturowski et al. 2019);
prioritized replay then ranks chunks by ``0.9 max + 0.1 mean`` of their
|TD errors|.

With ``--her`` (goal-conditioned environments, such as ``BitFlip-v0``) the
replay is a ``HindsightReplayBuffer``: each sampled transition has, with
probability ``her_k / (her_k + 1)``, its desired goal replaced by a goal its
episode achieved later and its reward recomputed by the environment's
``torch_reward`` (hindsight experience replay, Andrychowicz et al. 2017).

Run it with ``rlstruct train dqn --env CartPole-v1`` or
``python -m rlstruct.algos.dqn --env CartPole-v1``; ``--help`` lists every
field of ``Config``.
"""

from __future__ import annotations

import copy
import dataclasses
import sys
from collections.abc import Mapping, Sequence
from typing import Any, cast

import torch

from rlstruct.agent import Agent
from rlstruct.algos.agents import agent_observation_keys, check_spaces, observation_args, own_agent
from rlstruct.algos.config import (
    TrainConfig,
    annealed,
    check_config,
    check_config_class,
    check_env,
    check_hidden,
    check_layout,
    check_only_with,
    check_recurrent_only,
    check_replay,
    check_run,
    config_errors,
    parse_config,
    set_learning_rate,
)
from rlstruct.algos.evaluation import EnvSpaces, hindsight_reward
from rlstruct.algos.hooks import Hook, check_hooks
from rlstruct.algos.run import Run, prepare
from rlstruct.checkpoint import rng_state
from rlstruct.checks import check_int, check_number
from rlstruct.learning.metrics import EpisodeReturns
from rlstruct.learning.protocols import check_chunk_outputs, check_replayed_outputs
from rlstruct.learning.q_learning import QAgent, QNetwork, check_q_agent, dqn_loss, q_targets
from rlstruct.learning.recurrent_q import (
    RecurrentQAgent,
    RecurrentQNetwork,
    check_recurrent_q_agent,
    recurrent_dqn_loss,
)
from rlstruct.replay import (
    HindsightReplayBuffer,
    PrioritizedReplayBuffer,
    ReplayBuffer,
    SequenceReplayBuffer,
    sequence_priorities,
)

__all__ = [
    "GOAL_KEYS",
    "Config",
    "QNetwork",
    "check",
    "linear_schedule",
    "main",
    "make_agent",
    "q_targets",
    "train",
]
# QNetwork and q_targets are rlstruct.learning.q_learning's, named here too


def transition_keys(keys: Sequence[str]) -> tuple[str, ...]:
    """What the replay buffer keeps of each step: the agent's observation ``keys``, now and reached, and the rest."""
    return (*keys, "action", *(f"next/{k}" for k in keys), "next/reward", "next/terminated")


def sequence_keys(keys: Sequence[str]) -> tuple[str, ...]:
    """What the sequence replay keeps of each step with ``recurrent``: ``transition_keys``, episode ends and starts.

    ``initial_state`` with its ``next/`` version, so that ``replay_agent`` reads it as part of the
    observation, as it does for a collected batch.
    """
    return (*transition_keys(keys), "next/done", "initial_state", "next/initial_state")


GOAL_KEYS = ("achieved_goal", "desired_goal")
"""The observation keys ``her`` needs: the goal a step achieved and the goal it was after."""


def hindsight_keys(keys: Sequence[str]) -> tuple[str, ...]:
    """What the hindsight replay keeps of each step with ``her``: ``transition_keys``, both goals now and reached, episode ends.

    The goals are kept even where the agent does not read them (an agent of
    yours may read ``desired_goal`` only): the buffer relabels from them.
    """
    kept = transition_keys(keys)
    goals = (*GOAL_KEYS, *(f"next/{k}" for k in GOAL_KEYS), "next/done")
    return (*kept, *(key for key in goals if key not in kept))


def linear_schedule(start: float, end: float, fraction: float, progress: float) -> float:
    """``start`` moving linearly to ``end`` over the first ``fraction`` of training, then ``end``.

    Args:
        start: the value at progress 0.
        end: the value from progress ``fraction`` on.
        fraction: the part of training over which the value moves, in ``(0, 1]``.
        progress: how far training is, in ``[0, 1]``.

    Examples:
        >>> linear_schedule(1.0, 0.5, 0.5, 0.25), linear_schedule(1.0, 0.5, 0.5, 0.9)
        (0.75, 0.5)
    """
    return end + (start - end) * max(1.0 - progress / fraction, 0.0)


@dataclasses.dataclass
class Config(TrainConfig):
    """DQN's hyperparameters (defaults tuned for CartPole-v1)."""

    total_steps: int = 100_000
    """Environment steps of training (all environments counted)."""
    n_processes: int = 1
    """Worker processes of the collection batcher (one leaves a core to the gradient steps)."""
    n_envs: int = 4
    """Environments in all, split evenly across the worker processes."""
    n_steps: int = 64
    """Steps per environment per iteration (the trajectories' T)."""
    buffer_size: int = 100_000
    """Transitions the replay buffer keeps."""
    learning_starts: int = 1_000
    """Env steps collected before the first gradient step."""
    train_ratio: float = 0.25
    """Gradient steps per env step collected (at least one per batch)."""
    batch_size: int = 256
    """Transitions per gradient step."""
    lr: float = 5e-4
    """Adam's learning rate at the start."""
    anneal: bool = True
    """Decay the learning rate linearly to 0 over the run, so the greedy policy settles."""
    gamma: float = 0.99
    """Discount factor."""
    double: bool = True
    """Double-DQN targets: the online network picks the next action, the target network values it."""
    dueling: bool = True
    """A dueling head: Q = V + A - mean(A) (``--no-dueling``: one head of Q-values)."""
    target_update_every: int = 100
    """Gradient steps between target-network updates."""
    tau: float = 1.0
    """Each target update moves the target network this far to the online one (1: a copy)."""
    eps_start: float = 1.0
    """Exploration rate at the start."""
    eps_end: float = 0.05
    """Exploration rate at the end of the schedule."""
    eps_fraction: float = 0.2
    """Part of the run over which epsilon decreases linearly from eps_start to eps_end."""
    prioritized: bool = False
    """Prioritized replay (proportional, by |TD error|) with importance-sampling weights."""
    alpha: float = 0.6
    """Priority exponent of prioritized replay."""
    beta_start: float = 0.4
    """Importance-sampling exponent at the start, annealed linearly to 1 over the run."""
    max_grad_norm: float = 10.0
    """Gradients are rescaled to this global norm."""
    recurrent: bool = False
    """A Q-network with a memory (a GRU), trained on chunks of ``n_steps`` steps replayed from their stored state."""
    burn_in: int = 8
    """With ``recurrent``: the first steps of each replayed chunk, which only warm the memory (no loss)."""
    td_steps: int = 1
    """With ``recurrent``: the steps of the Q-learning targets, cut where an episode or a chunk ends (1 without)."""
    her: bool = False
    """Hindsight relabelling (goal-conditioned environments, whose observation has achieved_goal and desired_goal): a replayed transition has, with probability her_k / (her_k + 1), its desired goal replaced by a goal achieved later in its episode, and its reward recomputed by the environment's torch_reward."""
    her_k: int = 4
    """With ``her``: relabelled goals per real goal (0: none)."""
    her_strategy: str = "future"
    """With ``her``: where the relabelled goals come from: "future" (the goal reached at a step of the episode drawn from the transition's on) or "final" (at the episode's last step)."""
    hidden: int = 256
    """Units of each of the two hidden layers."""
    torch_threads: int = 1
    """Threads of the learner's torch operations (small networks run fastest on one)."""


def check(config: Config) -> EnvSpaces:
    """Make every check of ``config`` that can be made before anything starts; returns the environment's spaces.

    The common fields (``check_config``), positive sizes and rates, the
    discount, exploration rates and ``beta_start`` in [0, 1], ``tau`` and
    ``eps_fraction`` in (0, 1], ``alpha`` >= 0, ``learning_starts`` an int >=
    0, ``n_envs`` a multiple of ``n_processes``, a budget of one iteration at
    least, and an environment with discrete actions (made once to read its
    spaces, then once more to reset it and take a random step: ``check_env``).
    With ``her``: neither ``recurrent`` nor ``prioritized``, an observation
    with ``GOAL_KEYS`` of one shape and dtype, and a ``torch_reward``
    (``hindsight_reward``: the environment made once more). Without
    ``recurrent``, ``burn_in`` and ``td_steps`` at their defaults (without
    ``prioritized``, ``alpha`` and ``beta_start``; without ``her``, ``her_k``
    and ``her_strategy``); a buffer of
    at least one batch, and a buffer and a hidden layer (for the built-in
    network) that fit ``device``'s memory (``check_replay``,
    ``check_hidden``). Nothing is started or written.

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
        check_config_class("dqn", config, Config)
        check_config(
            config,
            n_envs=config.n_envs,
            n_steps=config.n_steps,
            buffer_size=config.buffer_size,
            train_ratio=config.train_ratio,
            batch_size=config.batch_size,
            lr=config.lr,
            target_update_every=config.target_update_every,
            max_grad_norm=config.max_grad_norm,
            hidden=config.hidden,
            torch_threads=config.torch_threads,
        )
        for name in ("gamma", "eps_start", "eps_end", "beta_start"):
            check_number("config", name, getattr(config, name), 0.0, 1.0)
        for name in ("tau", "eps_fraction"):
            check_number("config", name, getattr(config, name), 0.0, 1.0, low_open=True)
        check_number("config", "alpha", config.alpha, 0.0)
        check_int("config", "learning_starts", config.learning_starts, 0)
        check_int("config", "burn_in", config.burn_in, 0)
        check_int("config", "td_steps", config.td_steps, 1)
        check_int("config", "her_k", config.her_k, 0)
        if config.her_strategy not in ("future", "final"):
            raise ValueError(f"config.her_strategy must be 'future' or 'final', got {config.her_strategy!r}")
        for flag in ("recurrent", "prioritized"):
            if config.her and getattr(config, flag):
                raise ValueError(
                    f"config.her cannot be combined with config.{flag}: hindsight relabelling replays single "
                    "transitions, drawn uniformly"
                )
        if config.recurrent and config.burn_in >= config.n_steps:
            raise ValueError(
                f"config.burn_in ({config.burn_in}) must be below config.n_steps ({config.n_steps}) with config.recurrent: "
                "a chunk is a row of n_steps steps, and its burn-in steps are not learned from"
            )
        if not config.recurrent and config.td_steps != 1:
            raise ValueError(
                f"config.td_steps ({config.td_steps}) above 1 needs recurrent (--recurrent): the replay of "
                "single transitions gives one-step targets (with --no-recurrent, give --td-steps 1 too)"
            )
        check_recurrent_only(config, "burn_in")
        check_only_with(config, "her", "hindsight relabelling", "her_k", "her_strategy")
        check_only_with(config, "prioritized", "prioritized replay", "alpha", "beta_start")
        check_layout(config, config.n_envs, config.n_steps)
        if config.agent is None:
            check_hidden(config)
        check_run("dqn", config)
        spaces = check_env("dqn", config.env)
        check_replay(config, spaces)
        if config.her:
            check_goals(config.env, spaces)
            hindsight_reward(config.env)
        return spaces


def check_goals(env: str, spaces: EnvSpaces) -> None:
    """Raise a ValueError naming ``config.her`` unless ``spaces`` observes ``GOAL_KEYS``, alike in shape and dtype."""
    observation = spaces.observation
    missing = [key for key in GOAL_KEYS if key not in observation]
    if missing:
        raise ValueError(
            f"config.her needs an observation with the keys {list(GOAL_KEYS)} (a Dict observation space with "
            f"those entries, as goal-conditioned environments have); config.env {env!r} observes "
            f"{sorted(observation)}, without {missing}"
        )
    achieved, desired = (observation[key] for key in GOAL_KEYS)
    if (achieved.shape, achieved.dtype) != (desired.shape, desired.dtype):
        raise ValueError(
            f"config.her needs achieved_goal and desired_goal of one shape and dtype: config.env {env!r} has "
            f"{achieved.shape} {achieved.dtype} and {desired.shape} {desired.dtype}"
        )


def make_agent(config: Config, spaces: EnvSpaces) -> tuple[Agent, dict[str, Any]]:
    """The agent ``train`` trains for ``config`` on an environment of ``spaces``, and its keyword arguments.

    ``config.agent``'s class, made with ``config.agent_args`` and checked to
    speak ``QAgent`` (``RecurrentQAgent`` with ``recurrent``; see
    ``rlstruct.algos.agents.own_agent``), else a ``QNetwork``
    (``RecurrentQNetwork`` with ``recurrent``).

    Returns:
        ``(agent, agent_args)``: a new agent on the CPU, initialised from
        torch's global generator, and the arguments that make its copies
        (the batchers') and rebuild it (``load_run``).

    Raises:
        TypeError: if ``config`` is not this module's ``Config`` or ``spaces`` not an ``EnvSpaces``.
        AgentError: for an agent DQN cannot train.
    """
    check_config_class("dqn", config, Config)
    check_spaces(spaces, "dqn")
    own = own_agent(config, spaces, "dqn", check_recurrent_q_agent if config.recurrent else check_q_agent)
    if own is not None:
        return own
    agent_args: dict[str, Any] = {
        **observation_args(spaces),
        "n_actions": spaces.n_actions,
        "hidden": (config.hidden, config.hidden),
        "dueling": config.dueling,
    }
    network = RecurrentQNetwork if config.recurrent else QNetwork
    return network(**agent_args), agent_args


def train(config: Config, *, hooks: Sequence[Hook] = ()) -> dict[str, Any]:
    """Train DQN as ``config`` says; returns the final evaluation (see ``Run.finish``).

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
    q_agent = cast(QAgent, model)
    observed = agent_observation_keys(model, spaces)  # what the replay keeps and the loss reads
    keys = hindsight_keys(observed) if config.her else transition_keys(observed)
    target = copy.deepcopy(model).requires_grad_(False)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr, fused=True)  # fewest kernels per step
    generator = torch.Generator(device).manual_seed(config.seed)
    buffer: ReplayBuffer | SequenceReplayBuffer | HindsightReplayBuffer
    if config.her:
        buffer = HindsightReplayBuffer(
            config.buffer_size,
            hindsight_reward(config.env),
            strategy=config.her_strategy,
            k=config.her_k,
            device=device,
            generator=generator,
        )
    elif config.recurrent:
        buffer = SequenceReplayBuffer(
            max(1, config.buffer_size // config.n_steps),
            burn_in=config.burn_in,
            prioritized=config.prioritized,
            alpha=config.alpha,
            beta=config.beta_start,
            device=device,
            generator=generator,
        )
    elif config.prioritized:
        buffer = PrioritizedReplayBuffer(
            config.buffer_size, alpha=config.alpha, beta=config.beta_start, device=device, generator=generator
        )
    else:
        buffer = ReplayBuffer(config.buffer_size, device=device, generator=generator)

    with Run("dqn", config, type(agent), agent_args, hooks) as run:  # closes its batcher too, even on failure
        run.collector(device, config.n_envs, config.n_steps)
        episodes = EpisodeReturns(config.n_envs)
        per_iteration = config.n_envs * config.n_steps
        n_updates = max(1, round(config.train_ratio * per_iteration))
        q_agent.epsilon.fill_(config.eps_start)  # a resumed run restores the epsilon it had reached
        env_steps = run.restore(
            generator, model.generator, model=model, target=target, optimizer=optimizer, buffer=buffer
        )
        grad_steps = 0 if run.resumed is None else int(run.resumed["grad_steps"])
        run.start(model, execute=True)
        while True:
            batch = run.batcher.get()
            steps = batch.trajectories
            env_steps += per_iteration
            if isinstance(buffer, SequenceReplayBuffer):
                check_chunk_outputs(agent, batch, "dqn", ("action",))
                buffer.add(batch, keys=sequence_keys(observed))
            else:
                check_replayed_outputs(agent, batch, "dqn", ("action",))
                buffer.add_trajectories(steps, keys=keys)
            episodes.add(steps)
            run.add_returns(episodes)
            progress = env_steps / config.total_steps
            more = env_steps + per_iteration <= config.total_steps  # never more steps than the budget

            # The workers collect the next batch while the learner trains (off-policy: one iteration stale).
            if more:
                eps = linear_schedule(config.eps_start, config.eps_end, config.eps_fraction, progress)
                q_agent.epsilon.fill_(eps)
                run.batcher.update(run.weights(model))
                run.batcher.execute()

            stats: dict[str, float] = {"epsilon": float(q_agent.epsilon)}
            if env_steps >= config.learning_starts:
                set_learning_rate(
                    optimizer,
                    annealed(config.lr, env_steps - per_iteration, config.total_steps, config.anneal),
                )
                if isinstance(buffer, PrioritizedReplayBuffer | SequenceReplayBuffer) and config.prioritized:
                    buffer.beta = config.beta_start + (1.0 - config.beta_start) * progress
                    stats["beta"] = buffer.beta
                if isinstance(buffer, SequenceReplayBuffer):
                    stats.update(
                        learn_chunks(model, target, optimizer, buffer, config, n_updates, grad_steps)
                    )
                else:
                    stats.update(
                        learn(model, target, optimizer, buffer, config, n_updates, grad_steps, observed)
                    )
                stats["lr"] = optimizer.param_groups[0]["lr"]
                grad_steps += n_updates
            run.step(env_steps, model, **stats)
            if not more or run.stopped:  # the budget is spent, or a hook asked to stop
                break
            if run.checkpoint_due(env_steps):  # the batch in flight is dropped, in a resumed run alike
                run.checkpoint(
                    env_steps,
                    model,
                    (generator, model.generator),
                    target=target,
                    optimizer=optimizer,
                    buffer=buffer,
                    grad_steps=grad_steps,
                    execute=True,
                )
                episodes = EpisodeReturns(config.n_envs)
        return run.finish(
            model,
            env_steps,
            target=target,
            optimizer=optimizer,
            grad_steps=grad_steps,
            rng=rng_state(generator, model.generator),
        )


def follow(target: Agent, model: Agent, config: Config, grad_steps: int) -> None:
    """Move the target network ``tau`` of the way to the online one, every ``target_update_every`` gradient steps."""
    if grad_steps % config.target_update_every == 0:
        with torch.no_grad():
            for t, p in zip(target.parameters(), model.parameters(), strict=True):
                t.lerp_(p, config.tau)


def learn_chunks(
    model: Agent,
    target: Agent,
    optimizer: torch.optim.Optimizer,
    buffer: SequenceReplayBuffer,
    config: Config,
    n_updates: int,
    grad_steps: int,
) -> dict[str, float]:
    """``n_updates`` gradient steps on replayed chunks (``recurrent``); returns the mean loss, Q and |TD error|.

    Each step draws ``batch_size / n_steps`` chunks (at least one), replays
    them from their stored state (``recurrent_dqn_loss``) and, with
    prioritized replay, gives each chunk ``sequence_priorities`` of its TD
    errors.
    """
    chunks = max(1, round(config.batch_size / config.n_steps))
    total_loss = torch.zeros((), device=buffer.device)
    total_q, total_td = torch.zeros_like(total_loss), torch.zeros_like(total_loss)
    for i in range(n_updates):
        batch, indices, weights, counted = buffer.sample(chunks)
        loss, q, y = recurrent_dqn_loss(
            cast(RecurrentQAgent, model),
            cast(RecurrentQAgent, target),
            batch,
            counted,
            weights,
            config.gamma,
            config.td_steps,
            config.double,
            config.burn_in,
        )
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm)
        optimizer.step()
        td = (q - y).detach().abs()
        if buffer.prioritized:
            buffer.update_priorities(indices, sequence_priorities(td, counted))
        follow(target, model, config, grad_steps + i + 1)
        n = counted.sum().clamp(min=1)
        total_loss += loss.detach()
        total_q += (q.detach() * counted).sum() / n
        total_td += (td * counted).sum() / n
    return {
        "loss": float(total_loss) / n_updates,
        "q_mean": float(total_q) / n_updates,
        "td_abs": float(total_td) / n_updates,
    }


def learn(
    model: Agent,
    target: Agent,
    optimizer: torch.optim.Optimizer,
    buffer: ReplayBuffer | HindsightReplayBuffer,
    config: Config,
    n_updates: int,
    grad_steps: int,
    observed: Sequence[str] = ("observation",),
) -> dict[str, float]:
    """``n_updates`` gradient steps on replayed transitions; returns the mean loss, Q and |TD error|.

    ``model`` and ``target`` speak ``QAgent``; ``observed`` are the
    observation keys they read (``dqn_loss``).

    Uniform replay (hindsight replay too, whose relabelled goals and rewards
    come with the sample) draws all the steps' minibatches in one call (the
    buffer does not change between them); prioritized replay draws each after
    the previous step's priority update.
    """
    prioritized = buffer if isinstance(buffer, PrioritizedReplayBuffer) else None
    if prioritized is None:
        drawn = buffer.sample(n_updates * config.batch_size)
        uniform = {
            key: drawn.rows[key].view(n_updates, config.batch_size, *drawn.rows[key].shape[1:])
            for key in transition_keys(observed)
        }
        uniform_weights = drawn.weights.view(n_updates, config.batch_size)  # ones
    total_loss = torch.zeros((), device=buffer.device)
    total_q, total_td = torch.zeros_like(total_loss), torch.zeros_like(total_loss)
    for i in range(n_updates):
        rows: Mapping[str, torch.Tensor]
        if prioritized is not None:
            sampled, indices, weights = prioritized.sample(config.batch_size)
            rows = sampled.tensors
        else:
            rows = {key: x[i] for key, x in uniform.items()}
            weights = uniform_weights[i]
        loss, q, y = dqn_loss(
            cast(QAgent, model), cast(QAgent, target), rows, observed, weights, config.gamma, config.double
        )
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm)
        optimizer.step()
        td = (q - y).detach().abs()
        if prioritized is not None:
            prioritized.update_priorities(indices, td)
        follow(target, model, config, grad_steps + i + 1)
        total_loss += loss.detach()
        total_q += q.detach().mean()
        total_td += td.mean()
    return {
        "loss": float(total_loss) / n_updates,
        "q_mean": float(total_q) / n_updates,
        "td_abs": float(total_td) / n_updates,
    }


TUNED: dict[str, dict[str, Any]] = {
    "CartPoleNoVel-v1": {
        "recurrent": True,
        "hidden": 128,
        "n_steps": 32,
        "td_steps": 3,
        "total_steps": 200_000,
    },
    "BitFlip-v0": {
        "her": True,
        "n_steps": 60,
        "gamma": 0.98,
        "batch_size": 128,
        "lr": 1e-3,
        "eps_fraction": 0.1,
        "buffer_size": 200_000,
        "total_steps": 200_000,
    },
}
"""What ``rlstruct train dqn --env ID`` uses for these ids, under the flags given (docs/performance.md)."""


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """The command line: ``python -m rlstruct.algos.dqn --env CartPole-v1 [--field value ...]``."""
    config = parse_config(
        Config,
        argv,
        prog="rlstruct train dqn",
        tuned=TUNED,
        check=check,
        agent_fields=("hidden", "dueling"),  # the QNetwork's: --agent replaces it
    )
    return train(config)


if __name__ == "__main__":  # through the command line's entry, whose mistakes are one line (exit status 2)
    from rlstruct.cli import main as command_line

    sys.exit(command_line(["train", "dqn", *sys.argv[1:]]))
