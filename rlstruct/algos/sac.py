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

Examples:
    >>> import torch
    >>> from rlstruct import DictTensor
    >>> from rlstruct.algos.sac import SquashedGaussianActor, TwinQ
    >>> actor = SquashedGaussianActor(obs_dim=3, action_low=[-2.0], action_high=[2.0], hidden=(8, 8))
    >>> z = DictTensor({"greedy": torch.tensor([False, True])})
    >>> obs = DictTensor({"observation": torch.zeros(2, 3)})
    >>> out, _ = actor(actor.initial_state(z, 2), obs, z)
    >>> sorted(out.keys()), bool((out["action"].abs() <= 2.0).all())
    (['action', 'unit_action'], True)
    >>> TwinQ(obs_dim=3, action_dim=1, hidden=(8, 8))(obs["observation"], out["unit_action"]).shape
    torch.Size([2, 2])
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import math
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from rlstruct.agent import Agent
from rlstruct.algos.agents import refuse_agent
from rlstruct.algos.config import TrainConfig, check_config, check_layout, parse_config
from rlstruct.algos.evaluation import EnvSpaces, env_spaces
from rlstruct.algos.run import Run
from rlstruct.batchers import MultiprocessBatcher
from rlstruct.checkpoint import rng_state
from rlstruct.checks import check_int, check_number
from rlstruct.dicttensor import DictTensor
from rlstruct.learning.actor_critic import mlp
from rlstruct.learning.encoders import encode, encoded_keys, observation_encoder, observed
from rlstruct.learning.metrics import EpisodeReturns
from rlstruct.replay import ReplayBuffer
from rlstruct.specs import ObservationSpace
from rlstruct.temporal import TemporalDictTensor

__all__ = [
    "Config",
    "Learner",
    "SquashedGaussianActor",
    "TwinQ",
    "main",
    "make_agent",
    "soft_td_target",
    "squashed_log_prob",
    "train",
]

LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0
"""The range of the actor's log standard deviation (as in the authors' implementation)."""

REPLAY_KEYS = ["observation", "unit_action", "next/reward", "next/observation", "next/terminated"]
"""What the replay buffer keeps of each step, for a flat observation (see ``replay_keys``)."""


def replay_keys(actor: SquashedGaussianActor) -> list[str]:
    """What the replay buffer keeps of each step: the actor's observation keys, now and reached, and the rest."""
    keys = actor.observation_keys
    if keys == ("observation",):
        return REPLAY_KEYS
    return [*keys, "unit_action", "next/reward", *(f"next/{k}" for k in keys), "next/terminated"]


"""What the replay buffer keeps of each step."""


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


def squashed_log_prob(mean: torch.Tensor, log_std: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """log pi(tanh(u)) [N] for u ~ N(mean, exp(log_std)), all [N, k], in the unit box.

    The change of variables a = tanh(u) subtracts log(1 - tanh(u)^2) per
    dimension (Haarnoja et al. 2018, appendix C), written
    ``2 (log 2 - u - softplus(-2u))`` so that it stays finite where tanh(u)
    rounds to 1. The scaling to the action bounds is a constant and is left
    out: the density is that of the action in [-1, 1]^k.

    Examples:
        >>> import torch
        >>> u = torch.tensor([[0.0]])
        >>> round(float(squashed_log_prob(torch.zeros(1, 1), torch.zeros(1, 1), u)), 4)  # log N(0; 0, 1)
        -0.9189
    """
    z = (u - mean) / log_std.exp()
    gaussian = -0.5 * z.pow(2) - log_std - 0.5 * math.log(2 * math.pi)
    jacobian = 2.0 * (math.log(2.0) - u - torch.nn.functional.softplus(-2.0 * u))
    return (gaussian - jacobian).sum(-1)


def soft_td_target(
    reward: torch.Tensor,
    terminated: torch.Tensor,
    next_q: torch.Tensor,
    next_log_prob: torch.Tensor,
    alpha: torch.Tensor | float,
    gamma: float,
) -> torch.Tensor:
    """The soft Bellman target ``r + gamma (1 - terminated) (min_i Q_i(s', a') - alpha log pi(a'|s'))`` [N].

    Only a termination cuts the bootstrap; a truncated step (time limit)
    bootstraps from the observation it reached, like any other.

    Args:
        reward: ``next/reward`` [N], any float dtype (cast to ``next_q``'s dtype).
        terminated: ``next/terminated`` [N], bool.
        next_q: the target critics' values at (s', a') [2, N] (or [N] for one critic).
        next_log_prob: log pi(a'|s') [N] of the actions a' sampled at s'.
        alpha: the entropy temperature.
        gamma: the discount factor.

    Returns:
        A new tensor [N] of ``next_q``'s dtype and device.

    Examples:
        >>> import torch
        >>> soft_td_target(
        ...     torch.tensor([1.0, 1.0]),
        ...     torch.tensor([False, True]),
        ...     torch.tensor([[3.0, 3.0], [2.0, 5.0]]),
        ...     torch.tensor([-1.0, -1.0]),
        ...     alpha=0.5,
        ...     gamma=0.9,
        ... )
        tensor([3.2500, 1.0000])
    """
    if next_q.ndim == 2:
        next_q = next_q.min(0).values
    soft_value = next_q - alpha * next_log_prob
    discount = (~terminated).to(soft_value.dtype) * gamma
    return torch.addcmul(reward.to(soft_value.dtype), discount, soft_value)


class SquashedGaussianActor(Agent):
    """SAC's policy: a ReLU MLP giving the mean and log std of a Gaussian, squashed by tanh.

    Args:
        obs_dim: the size of the flat observation under ``observation``.
        action_low: the lower bound of each action dimension.
        action_high: the upper bound of each action dimension.
        hidden: the hidden layer sizes.
        observation_spaces: instead of ``obs_dim``, the observation's keys and
            their spaces, encoded by an ``ObservationEncoder`` (see
            ``rlstruct.learning.encoders``).
        encoder: instead of either, your own encoder module (``out_dim``, ``keys``).

    The agent reads ``observation`` (cast to float32; or its encoder's keys) and, from z,
    ``greedy`` (bool per row: act with ``tanh(mean)``; absent means sample).
    Its buffer ``uniform`` (a bool scalar, part of the state dict, so it
    travels with ``batcher.update(weights)``) makes the rows that are not
    greedy draw uniform random actions instead: the learner sets it for the
    first ``learning_starts`` steps. All randomness comes from
    ``self.generator``.

    Output keys (per row, float32): ``unit_action`` [k] in [-1, 1] (what the
    critics take) and ``action`` [k], the same scaled to the bounds (what the
    environment gets).

    Raises:
        ValueError: for a non-positive ``obs_dim`` or bounds that are empty,
            of different lengths, or not ``low < high``.
    """

    center: torch.Tensor
    scale: torch.Tensor
    uniform: torch.Tensor

    def __init__(
        self,
        obs_dim: int | None = None,
        action_low: Sequence[float] = (),
        action_high: Sequence[float] = (),
        hidden: Sequence[int] = (256, 256),
        observation_spaces: Mapping[str, ObservationSpace] | None = None,
        encoder: torch.nn.Module | None = None,
    ) -> None:
        super().__init__()
        self.encoder, obs_dim = observation_encoder(
            "SquashedGaussianActor", obs_dim, observation_spaces, encoder
        )
        low = torch.tensor(list(action_low), dtype=torch.float32)
        high = torch.tensor(list(action_high), dtype=torch.float32)
        if low.ndim != 1 or low.numel() == 0 or low.shape != high.shape or not bool((low < high).all()):
            raise ValueError(
                "SquashedGaussianActor: action_low and action_high must be non-empty, of the same length "
                f"and low < high, got {list(action_low)!r} and {list(action_high)!r}"
            )
        self.action_dim = low.numel()
        self.register_buffer("center", (high + low) / 2)
        self.register_buffer("scale", (high - low) / 2)
        self.register_buffer("uniform", torch.tensor(False))
        self.body = mlp([obs_dim, *hidden], torch.nn.ReLU)
        self.body.append(torch.nn.ReLU())
        self.head = torch.nn.Linear(hidden[-1], 2 * self.action_dim)

    @property
    def observation_keys(self) -> tuple[str, ...]:
        """The keys of the observation the policy reads (``("observation",)`` without an encoder)."""
        return encoded_keys(self.encoder)

    def distribution(
        self, observation: torch.Tensor | Mapping[str, torch.Tensor] | DictTensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(mean, log_std) [N, k] of the Gaussian before squashing, from N observations.

        ``observation``: the flat ``observation`` tensor ``[N, ...]``, or the
        observation's keys (the encoder's), N rows each.
        """
        mean, log_std = self.head(self.body(encode(self.encoder, observation))).chunk(2, -1)
        return mean, log_std.clamp(LOG_STD_MIN, LOG_STD_MAX)

    def sample(
        self, observation: torch.Tensor | Mapping[str, torch.Tensor], generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """A reparametrised sample: (unit action [N, k] in [-1, 1], its log-probability [N]).

        Differentiable with respect to the parameters; the noise comes from
        ``generator``, which must be on the parameters' device.
        """
        mean, log_std = self.distribution(observation)
        noise = torch.randn(mean.shape, generator=generator, device=mean.device)
        u = mean + log_std.exp() * noise
        return u.tanh(), squashed_log_prob(mean, log_std, u)

    def forward(
        self,
        state: DictTensor,
        observation: DictTensor,
        agent_info: DictTensor,
        history: TemporalDictTensor | None = None,
    ) -> tuple[DictTensor, DictTensor]:
        """Act on B rows: a squashed Gaussian sample, ``tanh(mean)`` where greedy, uniform if ``uniform``.

        The noise comes from ``self.generator``, which must be on the
        parameters' device.

        Args:
            state: B rows, returned unchanged (the policy has no memory).
            observation: B rows with the key ``observation`` ``[B, ...]`` (any
                dtype: read as flat float32), on the parameters' device.
            agent_info: z of every row; its optional bool key ``greedy`` [B].
            history: not read.

        Returns:
            ``(output, state)``: ``output`` holds ``unit_action`` and
            ``action``, float32 [B, k] on the parameters' device.
        """
        mean, log_std = self.distribution(observation)
        noise = torch.randn(mean.shape, generator=self.generator, device=mean.device)
        if bool(self.uniform):
            unit = torch.rand(mean.shape, generator=self.generator, device=mean.device) * 2 - 1
        else:
            unit = (mean + log_std.exp() * noise).tanh()
        if "greedy" in agent_info and mean.shape[0] > 0:
            unit = torch.where(agent_info["greedy"].unsqueeze(-1), mean.tanh(), unit)
        action = self.center + self.scale * unit
        return DictTensor({"action": action, "unit_action": unit}), state


class TwinQ(torch.nn.Module):
    """Two Q networks evaluated as one: each layer is a batched matrix product over the pair.

    Each network is a ReLU MLP of ``[obs_dim + action_dim, *hidden, 1]``
    units, initialised as ``torch.nn.Linear`` would be; stacking the two
    halves the Python work of a gradient step's critic calls. An
    observation that is not one flat box is encoded first (one encoder, an
    ``ObservationEncoder`` or yours, shared by the pair), and ``obs_dim`` is
    the size of its features.

    Args:
        obs_dim: the size of the flat observation under ``observation``.
        action_dim: the size of the action.
        hidden: the hidden layer sizes.
        observation_spaces: instead of ``obs_dim``, the observation's keys and their spaces.
        encoder: instead of either, your own encoder module (``out_dim``, ``keys``).
    """

    def __init__(
        self,
        obs_dim: int | None = None,
        action_dim: int = 1,
        hidden: Sequence[int] = (256, 256),
        observation_spaces: Mapping[str, ObservationSpace] | None = None,
        encoder: torch.nn.Module | None = None,
    ) -> None:
        super().__init__()
        self.encoder, obs_dim = observation_encoder("TwinQ", obs_dim, observation_spaces, encoder)
        sizes = [obs_dim + action_dim, *hidden, 1]
        self.weights = torch.nn.ParameterList()
        self.biases = torch.nn.ParameterList()
        for n_in, n_out in itertools.pairwise(sizes):
            bound = 1.0 / math.sqrt(n_in)
            self.weights.append(torch.nn.Parameter(torch.empty(2, n_in, n_out).uniform_(-bound, bound)))
            self.biases.append(torch.nn.Parameter(torch.empty(2, 1, n_out).uniform_(-bound, bound)))

    def forward(
        self, observation: torch.Tensor | Mapping[str, torch.Tensor], unit_action: torch.Tensor
    ) -> torch.Tensor:
        """Q of both networks [2, N] from N observations (as the actor reads them) and unit actions [N, k]."""
        x = torch.cat([encode(self.encoder, observation), unit_action], -1).expand(2, -1, -1)
        last = len(self.weights) - 1
        for i, (weight, bias) in enumerate(zip(self.weights, self.biases, strict=True)):
            x = torch.baddbmm(bias, x, weight)
            if i < last:
                x = x.relu()
        return x.squeeze(-1)


def make_agent(config: Config, spaces: EnvSpaces) -> tuple[SquashedGaussianActor, dict[str, Any]]:
    """The agent ``train`` trains for ``config`` on an environment of ``spaces``, and its keyword arguments.

    Returns:
        ``(SquashedGaussianActor(**agent_args), agent_args)``: a new agent on the CPU,
        initialised from torch's global generator, and the arguments that
        make its copies (the batchers') and rebuild it (``load_run``).
    """
    observation = {"obs_dim": spaces.obs_dim} if spaces.flat else {"observation_spaces": spaces.observation}
    agent_args: dict[str, Any] = {
        **observation,
        "action_low": spaces.action_low,
        "action_high": spaces.action_high,
        "hidden": (config.hidden, config.hidden),
    }
    return SquashedGaussianActor(**agent_args), agent_args


def train(config: Config) -> dict[str, Any]:
    """Train SAC as ``config`` says; returns the final evaluation (see ``Run.finish``).

    Raises:
        ValueError: for a non-positive size or rate, ``tau`` or ``gamma`` outside
            (0, 1], ``n_envs`` not a multiple of ``n_processes``, a budget
            shorter than one iteration, or an environment with discrete actions.
    """
    refuse_agent(config, "sac")
    check_config(
        config,
        n_envs=config.n_envs,
        n_steps=config.n_steps,
        gradient_steps=config.gradient_steps,
        buffer_size=config.buffer_size,
        batch_size=config.batch_size,
        lr=config.lr,
        tau=config.tau,
        gamma=config.gamma,
        init_alpha=config.init_alpha,
        hidden=config.hidden,
        torch_threads=config.torch_threads,
    )
    for name in ("tau", "gamma"):
        check_number("config", name, getattr(config, name), 0.0, 1.0, low_open=True)
    check_int("config", "learning_starts", config.learning_starts, 0)
    check_layout(config, config.n_envs, config.n_steps)
    per_iteration = config.n_envs * config.n_steps
    spaces = env_spaces(config.env)
    if spaces.action_low is None or spaces.action_high is None:
        raise ValueError(f"SAC needs continuous (Box) actions; env {config.env!r} has {spaces.n_actions}")
    torch.set_num_threads(config.torch_threads)
    torch.manual_seed(config.seed)
    device = torch.device(config.device)
    hidden = (config.hidden, config.hidden)
    actor, agent_args = make_agent(config, spaces)
    actor = actor.to(device)
    observation = {"obs_dim": spaces.obs_dim} if spaces.flat else {"observation_spaces": spaces.observation}
    critic = TwinQ(action_dim=actor.action_dim, hidden=hidden, **observation).to(device)
    target = copy.deepcopy(critic).requires_grad_(False)
    log_alpha = torch.tensor(math.log(config.init_alpha), device=device, requires_grad=True)
    target_entropy = -float(actor.action_dim) if config.target_entropy is None else config.target_entropy
    fused = device.type in ("cpu", "cuda")  # one kernel per parameter group instead of one per tensor
    critic_optimizer = torch.optim.Adam(critic.parameters(), lr=config.lr, fused=fused)
    actor_optimizer = torch.optim.Adam([*actor.parameters(), log_alpha], lr=config.lr, fused=fused)
    generator = torch.Generator(device).manual_seed(config.seed)
    buffer = ReplayBuffer(config.buffer_size, device=device, generator=generator)
    learner = Learner(actor, critic, target, log_alpha, critic_optimizer, actor_optimizer, generator)

    run = Run("sac", config, SquashedGaussianActor, agent_args)
    batcher: MultiprocessBatcher | None = None  # closed below, with the run, even if it fails to start
    try:
        batcher = run.collector(device, config.n_envs, config.n_steps)
        episodes = EpisodeReturns(config.n_envs)
        actor.uniform.fill_(config.learning_starts > 0)  # a resumed run restores the value it had reached
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
        batcher.update(run.weights(actor))
        batcher.reset()
        run.begin()
        batcher.execute()
        while True:
            batch = batcher.get()
            steps = batch.trajectories
            env_steps += per_iteration
            # The next batch is collected while the learner trains on this one (one iteration behind).
            more = env_steps + per_iteration <= config.total_steps  # never more steps than the budget
            if more:
                actor.uniform.fill_(env_steps < config.learning_starts)
                batcher.update(run.weights(actor))
                batcher.execute()
            episodes.add(steps)
            run.add_returns(episodes)
            buffer.add_trajectories(steps, replay_keys(actor))
            stats: dict[str, torch.Tensor] = {}
            if env_steps >= config.learning_starts:
                owed += per_iteration * config.gradient_steps
                while owed >= 1:
                    stats = learner.step(buffer.sample(config.batch_size).rows, config, target_entropy)
                    owed -= 1
            run.step(env_steps, actor, **{k: float(v) for k, v in stats.items()})
            if not more:
                break
            if run.checkpoint_due(env_steps):  # the batch in flight is dropped, in a resumed run alike
                batcher = run.checkpoint(
                    env_steps,
                    batcher,
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
    finally:
        if batcher is not None:
            batcher.close()
        run.close()


class Learner:
    """SAC's gradient step over sampled transitions; holds the networks and optimisers.

    Args:
        actor: the policy (trained).
        critic: the twin critics (trained).
        target: their target copy (Polyak-averaged, no gradients).
        log_alpha: the log temperature, a 0-d tensor with gradients.
        critic_optimizer: over ``critic``'s parameters.
        actor_optimizer: over ``actor``'s parameters and ``log_alpha``.
        generator: the noise of the actions sampled for the losses, on the networks' device.
    """

    def __init__(
        self,
        actor: SquashedGaussianActor,
        critic: TwinQ,
        target: TwinQ,
        log_alpha: torch.Tensor,
        critic_optimizer: torch.optim.Optimizer,
        actor_optimizer: torch.optim.Optimizer,
        generator: torch.Generator,
    ) -> None:
        self.actor, self.critic, self.target, self.log_alpha = actor, critic, target, log_alpha
        self.critic_optimizer, self.actor_optimizer = critic_optimizer, actor_optimizer
        self.generator = generator
        self._critic_params: list[torch.Tensor] = list(critic.parameters())
        self._target_params: list[torch.Tensor] = list(target.parameters())

    def step(self, data: DictTensor, config: Config, target_entropy: float) -> dict[str, torch.Tensor]:
        """One update of the critics, then of the actor and the temperature; in place.

        Args:
            data: transitions ``[N, ...]`` with the keys of ``replay_keys``, on
                the networks' device.
            config: gives ``gamma`` and ``tau``.
            target_entropy: the entropy the temperature aims at.

        Returns:
            0-d tensors (not synchronised): ``critic_loss``, ``actor_loss``,
            ``alpha``, ``entropy`` (minus the mean log-probability of the
            sampled actions), ``q`` (the critics' mean estimate).
        """
        encoder = self.actor.encoder
        observation, next_observation = observed(data, encoder), observed(data, encoder, "next/")
        alpha = self.log_alpha.detach().exp()

        # Critics: the soft Bellman target, cut where the episode terminated (not where it was truncated).
        with torch.no_grad():
            next_action, next_log_prob = self.actor.sample(next_observation, self.generator)
            next_q = self.target(next_observation, next_action)
            target_q = soft_td_target(
                data["next/reward"], data["next/terminated"], next_q, next_log_prob, alpha, config.gamma
            )
        q = self.critic(observation, data["unit_action"])
        critic_loss = 0.5 * (q - target_q).pow(2).mean(1).sum()
        self.critic_optimizer.zero_grad(set_to_none=True)
        critic_loss.backward()
        self.critic_optimizer.step()

        # Actor and temperature: one backward pass, their parameters are disjoint.
        self.critic.requires_grad_(False)
        try:  # the critic learns again even if this step raises (an interrupt, a nan check)
            action, log_prob = self.actor.sample(observation, self.generator)
            q_pi = self.critic(observation, action).min(0).values
            actor_loss = (alpha * log_prob - q_pi).mean()
            alpha_loss = -self.log_alpha * (log_prob.detach().mean() + target_entropy)
            self.actor_optimizer.zero_grad(set_to_none=True)
            (actor_loss + alpha_loss).backward()
            self.actor_optimizer.step()
        finally:
            self.critic.requires_grad_(True)

        with torch.no_grad():
            torch._foreach_lerp_(self._target_params, self._critic_params, config.tau)
        return {
            "critic_loss": critic_loss.detach(),
            "actor_loss": actor_loss.detach(),
            "alpha": alpha,
            "entropy": -log_prob.detach().mean(),
            "q": q.detach().mean(),
        }


TUNED: dict[str, dict[str, Any]] = {
    "InvertedPendulumBulletEnv-v0": {"hidden": 256, "gradient_steps": 2.0, "total_steps": 30_000},
}
"""What ``rlstruct train sac --env ID`` uses for these ids, under the flags given (docs/performance.md)."""


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """The command line: ``python -m rlstruct.algos.sac --env Pendulum-v1 [--field value ...]``."""
    config = parse_config(
        Config,
        argv,
        prog="rlstruct train sac",
        tuned=TUNED,
        check=lambda config: env_spaces(config.env),  # an unknown id is reported alone
    )
    return train(config)


if __name__ == "__main__":
    main(sys.argv[1:])
