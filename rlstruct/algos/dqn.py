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

Run it with ``rlstruct train dqn --env CartPole-v1`` or
``python -m rlstruct.algos.dqn --env CartPole-v1``; ``--help`` lists every
field of ``Config``.
"""

from __future__ import annotations

import copy
import dataclasses
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from rlstruct.agent import Agent
from rlstruct.algos.agents import refuse_agent
from rlstruct.algos.config import (
    TrainConfig,
    annealed,
    check_config,
    check_layout,
    parse_config,
    set_learning_rate,
)
from rlstruct.algos.evaluation import EnvSpaces, env_spaces
from rlstruct.algos.run import Run
from rlstruct.batchers import MultiprocessBatcher
from rlstruct.checkpoint import rng_state
from rlstruct.checks import check_int, check_number
from rlstruct.dicttensor import DictTensor
from rlstruct.learning.actor_critic import mlp
from rlstruct.learning.encoders import encode, encoded_keys, observation_encoder, observed
from rlstruct.learning.metrics import EpisodeReturns
from rlstruct.replay import PrioritizedReplayBuffer, ReplayBuffer
from rlstruct.specs import ObservationSpace
from rlstruct.temporal import TemporalDictTensor

__all__ = ["Config", "QNetwork", "linear_schedule", "main", "make_agent", "q_targets", "train"]

TRANSITION_KEYS = ("observation", "action", "next/observation", "next/reward", "next/terminated")
"""What the replay buffer keeps of each step, for a flat observation (see ``transition_keys``)."""


def transition_keys(model: QNetwork) -> tuple[str, ...]:
    """What the replay buffer keeps of each step: the network's observation keys, now and reached, and the rest."""
    keys = model.observation_keys
    if keys == ("observation",):
        return TRANSITION_KEYS
    return (*keys, "action", *(f"next/{k}" for k in keys), "next/reward", "next/terminated")


def _both(
    a: torch.Tensor | dict[str, torch.Tensor], b: torch.Tensor | dict[str, torch.Tensor]
) -> torch.Tensor | dict[str, torch.Tensor]:
    """The observations ``a`` then ``b`` in one batch."""
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return torch.cat([a, b])
    assert isinstance(a, dict) and isinstance(b, dict)
    return {k: torch.cat([a[k], b[k]]) for k in a}


class QNetwork(Agent):
    """Q-values of discrete actions from float32 observations, acting epsilon-greedily.

    The exploration rate is the buffer ``epsilon`` (a float32 scalar, part of
    the ``state_dict``), so a learner sets it with ``model.epsilon.fill_(e)``
    and it reaches the batcher's copies with the weights
    (``batcher.update(model.state_dict())``). Rows whose
    ``agent_info["greedy"]`` is True always take the greedy action; random
    draws come from ``self.generator``.

    Args:
        obs_dim: the size of the flat observation under ``observation``.
        n_actions: the number of discrete actions.
        hidden: the sizes of the hidden layers (ReLU).
        dueling: end with a value stream V(s) and an advantage stream A(s, a),
            combined as ``Q = V + A - mean_a A`` (Wang et al. 2016).
        observation_spaces: instead of ``obs_dim``, the observation's keys and
            their spaces, encoded by an ``ObservationEncoder`` (one-hot,
            joined keys, a CNN for images; see ``rlstruct.learning.encoders``).
        encoder: instead of either, your own encoder module (``out_dim``, ``keys``).

    Output keys (per row): ``action`` (int64).

    Raises:
        ValueError: for a non-positive ``obs_dim`` or ``n_actions``, no hidden
            layer, or not exactly one of ``obs_dim``, ``observation_spaces`` and ``encoder``.

    Examples:
        >>> import torch
        >>> from rlstruct import DictTensor
        >>> from rlstruct.algos.dqn import QNetwork
        >>> agent = QNetwork(obs_dim=4, n_actions=2, hidden=(16,), dueling=True)
        >>> obs = DictTensor({"observation": torch.zeros(3, 4)})
        >>> agent.q_values(obs["observation"]).shape
        torch.Size([3, 2])
        >>> z = DictTensor({"greedy": torch.tensor([True, True, True])})
        >>> out, _ = agent(agent.initial_state(z, 3), obs, z)
        >>> bool((out["action"] == agent.q_values(obs["observation"]).argmax(1)).all())
        True
    """

    epsilon: torch.Tensor

    def __init__(
        self,
        obs_dim: int | None = None,
        n_actions: int | None = None,
        hidden: Sequence[int] = (64, 64),
        dueling: bool = False,
        observation_spaces: Mapping[str, ObservationSpace] | None = None,
        encoder: torch.nn.Module | None = None,
    ) -> None:
        super().__init__()
        self.encoder, obs_dim = observation_encoder("QNetwork", obs_dim, observation_spaces, encoder)
        if n_actions is None or n_actions < 1:
            raise ValueError(
                f"QNetwork: n_actions must be a positive int (discrete actions), got {n_actions}"
            )
        if len(hidden) < 1:
            raise ValueError(f"QNetwork: hidden must name at least one layer size, got {tuple(hidden)}")
        self.n_actions = n_actions
        self.dueling = dueling
        self.register_buffer("epsilon", torch.tensor(1.0))
        self.body = torch.nn.Sequential(mlp([obs_dim, *hidden], torch.nn.ReLU), torch.nn.ReLU())
        self.head = torch.nn.Linear(hidden[-1], n_actions)
        self.value = torch.nn.Linear(hidden[-1], 1) if dueling else None

    @property
    def observation_keys(self) -> tuple[str, ...]:
        """The keys of the observation the network reads (``("observation",)`` without an encoder)."""
        return encoded_keys(self.encoder)

    def q_values(self, observation: torch.Tensor | Mapping[str, torch.Tensor] | DictTensor) -> torch.Tensor:
        """Q [N, n_actions] (float32, on the model's device) of N observations.

        ``observation``: the flat ``observation`` tensor ``[N, ...]`` (any
        dtype), or the observation's keys (the encoder's), N rows each.
        """
        x = self.body(encode(self.encoder, observation))
        q: torch.Tensor = self.head(x)
        if self.value is not None:
            q = self.value(x) + q - q.mean(1, keepdim=True)
        return q

    def forward(
        self,
        state: DictTensor,
        observation: DictTensor,
        agent_info: DictTensor,
        history: TemporalDictTensor | None = None,
    ) -> tuple[DictTensor, DictTensor]:
        """Act epsilon-greedily on B rows: a uniform random action with probability ``epsilon``.

        Both draws come from ``self.generator`` (on the CPU) and are moved to
        the Q-values' device.

        Args:
            state: B rows, returned unchanged (the network has no memory).
            observation: B rows with the key ``observation`` ``[B, ...]`` (any
                dtype: read as flat float32).
            agent_info: z of every row; rows whose optional bool key
                ``greedy`` [B] is True take the greedy action.
            history: not read.

        Returns:
            ``(output, state)``: ``output`` holds ``action``, int64 [B] on the
            model's device.
        """
        q = self.q_values(observation)
        action = q.argmax(1)
        n = action.shape[0]
        explore = torch.rand(n, generator=self.generator).to(q.device) < self.epsilon
        if "greedy" in agent_info and n > 0:
            explore &= ~agent_info["greedy"].to(q.device)
        random = torch.randint(self.n_actions, (n,), generator=self.generator).to(q.device)
        return DictTensor({"action": torch.where(explore, random, action)}), state


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


def q_targets(
    reward: torch.Tensor,
    terminated: torch.Tensor,
    next_q_online: torch.Tensor,
    next_q_target: torch.Tensor,
    gamma: float,
    double: bool = True,
) -> torch.Tensor:
    """One-step Q-learning targets ``r + gamma * (1 - terminated) * Q_target(s', a')``.

    With ``double``, ``a' = argmax_a Q_online(s', a)`` (van Hasselt et al. 2016);
    without, ``a' = argmax_a Q_target(s', a)`` (Mnih et al. 2015). Only
    termination cuts the bootstrap: a step truncated by a time limit still
    bootstraps from its ``s'``.

    Args:
        reward: [N], floating.
        terminated: [N], bool.
        next_q_online: [N, n_actions], the online network's Q of ``s'``.
        next_q_target: [N, n_actions], the target network's Q of ``s'``.
        gamma: the discount factor.
        double: choose ``a'`` with the online network.

    Returns:
        The targets [N], of ``next_q_target``'s dtype and device (a new tensor).

    Examples:
        >>> import torch
        >>> online = torch.tensor([[1.0, 2.0], [0.0, 5.0]])
        >>> target = torch.tensor([[10.0, 20.0], [30.0, 40.0]])
        >>> q_targets(torch.tensor([1.0, 1.0]), torch.tensor([False, True]), online, target, 0.5)
        tensor([11.,  1.])
    """
    if double:
        best = next_q_online.argmax(1, keepdim=True)
        next_q = next_q_target.gather(1, best).squeeze(1)
    else:
        next_q = next_q_target.max(1).values
    return reward.to(next_q.dtype) + gamma * next_q * (~terminated).to(next_q.dtype)


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
    hidden: int = 256
    """Units of each of the two hidden layers."""
    torch_threads: int = 1
    """Threads of the learner's torch operations (small networks run fastest on one)."""


def _check(config: Config) -> None:
    check_config(
        config,
        n_envs=config.n_envs,
        n_steps=config.n_steps,
        buffer_size=config.buffer_size,
        train_ratio=config.train_ratio,
        batch_size=config.batch_size,
        lr=config.lr,
        target_update_every=config.target_update_every,
        tau=config.tau,
        eps_fraction=config.eps_fraction,
        max_grad_norm=config.max_grad_norm,
        hidden=config.hidden,
        torch_threads=config.torch_threads,
    )
    for name in ("gamma", "eps_start", "eps_end", "beta_start", "tau", "eps_fraction"):
        check_number("config", name, getattr(config, name), 0.0, 1.0)
    check_number("config", "alpha", config.alpha, 0.0)
    check_int("config", "learning_starts", config.learning_starts, 0)
    check_layout(config, config.n_envs, config.n_steps)


def make_agent(config: Config, spaces: EnvSpaces) -> tuple[QNetwork, dict[str, Any]]:
    """The agent ``train`` trains for ``config`` on an environment of ``spaces``, and its keyword arguments.

    Returns:
        ``(QNetwork(**agent_args), agent_args)``: a new agent on the CPU,
        initialised from torch's global generator, and the arguments that
        make its copies (the batchers') and rebuild it (``load_run``).
    """
    observation = {"obs_dim": spaces.obs_dim} if spaces.flat else {"observation_spaces": spaces.observation}
    agent_args: dict[str, Any] = {
        **observation,
        "n_actions": spaces.n_actions,
        "hidden": (config.hidden, config.hidden),
        "dueling": config.dueling,
    }
    return QNetwork(**agent_args), agent_args


def train(config: Config) -> dict[str, Any]:
    """Train DQN as ``config`` says; returns the final evaluation (see ``Run.finish``).

    Raises:
        ValueError: for a size or rate out of range, ``n_envs`` not a multiple of
            ``n_processes``, or an environment without discrete actions.
    """
    refuse_agent(config, "dqn")
    _check(config)
    spaces = env_spaces(config.env)
    if spaces.n_actions is None:
        raise ValueError(f"config.env: DQN needs discrete actions, got {config.env!r} with continuous ones")
    torch.set_num_threads(config.torch_threads)
    torch.manual_seed(config.seed)
    device = torch.device(config.device)
    model, agent_args = make_agent(config, spaces)
    model = model.to(device)
    target = copy.deepcopy(model).requires_grad_(False)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr, fused=True)  # fewest kernels per step
    generator = torch.Generator(device).manual_seed(config.seed)
    buffer: ReplayBuffer
    if config.prioritized:
        buffer = PrioritizedReplayBuffer(
            config.buffer_size, alpha=config.alpha, beta=config.beta_start, device=device, generator=generator
        )
    else:
        buffer = ReplayBuffer(config.buffer_size, device=device, generator=generator)

    run = Run("dqn", config, QNetwork, agent_args)
    batcher: MultiprocessBatcher | None = None  # closed below, with the run, even if it fails to start
    try:
        batcher = run.collector(device, config.n_envs, config.n_steps)
        episodes = EpisodeReturns(config.n_envs)
        per_iteration = config.n_envs * config.n_steps
        n_updates = max(1, round(config.train_ratio * per_iteration))
        model.epsilon.fill_(config.eps_start)  # a resumed run restores the epsilon it had reached
        env_steps = run.restore(
            generator, model.generator, model=model, target=target, optimizer=optimizer, buffer=buffer
        )
        grad_steps = 0 if run.resumed is None else int(run.resumed["grad_steps"])
        batcher.update(run.weights(model))
        batcher.reset()
        run.begin()
        batcher.execute()
        while True:
            batch = batcher.get()
            steps = batch.trajectories
            env_steps += per_iteration
            buffer.add_trajectories(steps, keys=transition_keys(model))
            episodes.add(steps)
            run.add_returns(episodes)
            progress = env_steps / config.total_steps
            more = env_steps + per_iteration <= config.total_steps  # never more steps than the budget

            # The workers collect the next batch while the learner trains (off-policy: one iteration stale).
            if more:
                eps = linear_schedule(config.eps_start, config.eps_end, config.eps_fraction, progress)
                model.epsilon.fill_(eps)
                batcher.update(run.weights(model))
                batcher.execute()

            stats: dict[str, float] = {"epsilon": float(model.epsilon)}
            if env_steps >= config.learning_starts:
                set_learning_rate(
                    optimizer,
                    annealed(config.lr, env_steps - per_iteration, config.total_steps, config.anneal),
                )
                if isinstance(buffer, PrioritizedReplayBuffer):
                    buffer.beta = config.beta_start + (1.0 - config.beta_start) * progress
                    stats["beta"] = buffer.beta
                stats.update(learn(model, target, optimizer, buffer, config, n_updates, grad_steps))
                stats["lr"] = optimizer.param_groups[0]["lr"]
                grad_steps += n_updates
            run.step(env_steps, model, **stats)
            if not more:
                break
            if run.checkpoint_due(env_steps):  # the batch in flight is dropped, in a resumed run alike
                batcher = run.checkpoint(
                    env_steps,
                    batcher,
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
    finally:
        if batcher is not None:
            batcher.close()
        run.close()


def learn(
    model: QNetwork,
    target: QNetwork,
    optimizer: torch.optim.Optimizer,
    buffer: ReplayBuffer,
    config: Config,
    n_updates: int,
    grad_steps: int,
) -> dict[str, float]:
    """``n_updates`` gradient steps on replayed transitions; returns the mean loss, Q and |TD error|.

    Uniform replay draws all the steps' minibatches in one call (the buffer
    does not change between them); prioritized replay draws each after the
    previous step's priority update.
    """
    prioritized = buffer if isinstance(buffer, PrioritizedReplayBuffer) else None
    if prioritized is None:
        drawn = buffer.sample(n_updates * config.batch_size)
        uniform = {
            key: drawn.rows[key].view(n_updates, config.batch_size, *drawn.rows[key].shape[1:])
            for key in transition_keys(model)
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
        obs, next_obs = observed(rows, model.encoder), observed(rows, model.encoder, "next/")
        action, reward, terminated = rows["action"], rows["next/reward"], rows["next/terminated"]
        n = action.shape[0]
        with torch.no_grad():
            next_q_target = target.q_values(next_obs)
        if config.double:  # one forward pass of the online network over s and s'
            q_both = model.q_values(_both(obs, next_obs))
            q_all, next_q_online = q_both[:n], q_both[n:].detach()
        else:
            q_all, next_q_online = model.q_values(obs), next_q_target
        y = q_targets(reward, terminated, next_q_online, next_q_target, config.gamma, config.double)
        q = q_all.gather(1, action.unsqueeze(1)).squeeze(1)
        loss_rows = torch.nn.functional.smooth_l1_loss(q, y, reduction="none")
        loss = (weights * loss_rows).mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm)
        optimizer.step()
        td = (q - y).detach().abs()
        if prioritized is not None:
            prioritized.update_priorities(indices, td)
        if (grad_steps + i + 1) % config.target_update_every == 0:
            with torch.no_grad():
                for t, p in zip(target.parameters(), model.parameters(), strict=True):
                    t.lerp_(p, config.tau)
        total_loss += loss.detach()
        total_q += q.detach().mean()
        total_td += td.mean()
    return {
        "loss": float(total_loss) / n_updates,
        "q_mean": float(total_q) / n_updates,
        "td_abs": float(total_td) / n_updates,
    }


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """The command line: ``python -m rlstruct.algos.dqn --env CartPole-v1 [--field value ...]``."""
    return train(parse_config(Config, argv, prog="rlstruct train dqn"))


if __name__ == "__main__":
    main(sys.argv[1:])
