"""Soft actor-critic: what SAC needs of an agent, its squashed-Gaussian half, the networks SAC builds, its losses.

SAC (``rlstruct.algos.sac``) trains any ``Agent`` that speaks ``SACAgent``:
it samples a reparameterised action in the unit box with its
log-probability, and acts with it (or uniformly at random while the learner
says so, or with its mean in evaluations). ``SquashedGaussianPolicy`` is
that half for a Gaussian squashed by tanh, ready to mix in: an agent that
inherits it writes only ``distribution``. The twin critics are the
learner's ``TwinQ`` on the agent's observation keys, or the agent's own from
``make_critics()``. ``SquashedGaussianActor`` is the agent SAC builds;
``squashed_log_prob`` and ``soft_td_target`` are the maths, and
``SACLearner`` one gradient step of the critics, the actor and the
temperature.

Examples:
    >>> import torch
    >>> from rlstruct import Agent, DictTensor
    >>> from rlstruct.learning.soft_actor_critic import SquashedGaussianPolicy, check_sac_agent
    >>> class Linear(SquashedGaussianPolicy, Agent):
    ...     def __init__(self, obs_dim, action_low, action_high) -> None:
    ...         super().__init__(action_low, action_high)
    ...         self.net = torch.nn.Linear(obs_dim, 2 * self.action_dim)
    ...     def distribution(self, observation):
    ...         mean, log_std = self.net(observation["observation"].float()).chunk(2, -1)
    ...         return mean, log_std.clamp(-20.0, 2.0)
    >>> agent = Linear(3, action_low=[-2.0], action_high=[2.0])
    >>> check_sac_agent(agent, "SAC")
    >>> obs = DictTensor({"observation": torch.zeros(4, 3)})
    >>> unit_action, log_prob = agent.sample(obs, torch.Generator().manual_seed(0))
    >>> unit_action.shape, log_prob.shape, bool((unit_action.abs() <= 1).all())
    (torch.Size([4, 1]), torch.Size([4]), True)
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol, cast, runtime_checkable

import torch

from rlstruct.agent import Agent
from rlstruct.checks import check_number, check_tensor
from rlstruct.dicttensor import DictTensor
from rlstruct.errors import AgentError, describe
from rlstruct.learning.actor_critic import greedy_rows, mlp
from rlstruct.learning.encoders import encode, encoded_keys, observation_encoder
from rlstruct.learning.protocols import check_transition_agent
from rlstruct.learning.q_learning import check_layer_sizes
from rlstruct.specs import ObservationSpace
from rlstruct.temporal import TemporalDictTensor

__all__ = [
    "LOG_STD_MAX",
    "LOG_STD_MIN",
    "SACAgent",
    "SACLearner",
    "SquashedGaussianActor",
    "SquashedGaussianPolicy",
    "TwinQ",
    "check_sac_agent",
    "own_critics",
    "soft_td_target",
    "squashed_log_prob",
]

LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0
"""The range of the actor's log standard deviation (as in the authors' implementation)."""

Observation = Mapping[str, torch.Tensor] | DictTensor
"""N observations as a learner hands them to a network: each observation key, ``[N, ...]``."""


@runtime_checkable
class SACAgent(Protocol):
    """What SAC needs of an agent, beside being an ``rlstruct.Agent`` without state or history.

    Learning: ``sample(observation, generator)`` gives a reparameterised
    action in the unit box ``[N, action_dim]`` (differentiable with respect
    to the agent's parameters) and its log-probability ``[N]``, for N
    observations handed over as a mapping of the observation's keys
    (``observation_keys`` if the agent names them, else every key of the
    environment's observation) to ``[N, ...]`` tensors; the noise comes from
    ``generator``, on the parameters' device. ``action_dim`` (an int) is the
    action's size.

    Collection: every step's output holds ``unit_action`` (float32 ``[B,
    action_dim]`` in ``[-1, 1]``: what the critics take and the replay
    keeps) and ``action`` (what the environment gets, the unit action
    scaled to its bounds). While the 0-d bool buffer ``uniform`` is True
    (the learner sets it for its first ``learning_starts`` steps; it reaches
    the workers with the weights) the actions are uniform in the unit box;
    rows whose ``agent_info["greedy"]`` is True (evaluations) act
    deterministically. ``SquashedGaussianPolicy`` does all of this from
    ``distribution``.

    Optional: ``make_critics()``, the twin critics SAC trains beside the
    agent: a module whose ``forward(observation, unit_action)`` gives the Q
    of both ``[2, N]``. Without it, SAC builds a ``TwinQ`` on the
    observation keys the agent reads.

    SAC replays single transitions: an agent with a memory (a state) or a
    history is refused.
    """

    action_dim: int
    uniform: torch.Tensor

    def sample(
        self, observation: Observation, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """A reparameterised unit action ``[N, action_dim]`` and its log-probability ``[N]``."""
        ...


def check_sac_agent(agent: object, learner: str) -> None:
    """Raise unless ``agent`` is an ``Agent`` with everything ``SACAgent`` requires.

    Args:
        agent: the agent (an instance) the learner is given.
        learner: the learner's name, for the message.

    Raises:
        AgentError: (a TypeError) if ``agent`` is not an ``rlstruct.Agent``,
            lacks ``sample``, an int ``action_dim`` or a tensor ``uniform``,
            has a ``make_critics`` that is not callable, or asks for a
            history; the message names what is missing and the learner.
    """
    missing = [] if callable(getattr(agent, "sample", None)) else ["sample"]
    action_dim = getattr(agent, "action_dim", None)
    if isinstance(action_dim, bool) or not isinstance(action_dim, int) or action_dim < 1:
        missing.append("action_dim (a positive int)")
    if not isinstance(getattr(agent, "uniform", None), torch.Tensor):
        missing.append("uniform (a bool 0-d buffer)")
    if not callable(getattr(agent, "make_critics", lambda: None)):
        missing.append("a callable make_critics")
    check_transition_agent(agent, learner, missing, "rlstruct.learning.soft_actor_critic.SACAgent")


def own_critics(actor: object, learner: str) -> torch.nn.Module | None:
    """``actor.make_critics()`` if the actor has one, checked to be a module; None if it has none.

    Raises:
        AgentError: (a TypeError) if ``make_critics()`` returns something else than a ``torch.nn.Module``.
    """
    make = getattr(actor, "make_critics", None)
    if make is None:
        return None
    made = make()
    if not isinstance(made, torch.nn.Module):
        raise AgentError(
            f"{learner}: {type(actor).__name__}.make_critics() must return a torch.nn.Module, got {describe(made)}"
        )
    return made


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
        next_q: the target critics' values at (s', a') [K, N], one row per
            critic (twin critics: [2, N]), or [N] for one critic.
        next_log_prob: log pi(a'|s') [N] of the actions a' sampled at s'.
        alpha: the entropy temperature.
        gamma: the discount factor.

    Returns:
        A new tensor [N] of ``next_q``'s dtype and device.

    Raises:
        TypeError: for an argument that is not a tensor of its dtype kind
            (bool for ``terminated``, float for the others), or a ``gamma``
            that is not a number.
        ValueError: for ``next_q`` neither ``[K, N]`` (K >= 1) nor ``[N]``,
            another tensor that is not ``[N]``, or ``gamma`` outside [0, 1].

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
    op = "soft_td_target"
    expected = f"{op}: next_q must be a float tensor [K, N] or [N]"
    if not isinstance(next_q, torch.Tensor):
        raise TypeError(f"{expected}, got {describe(next_q)}")
    if next_q.ndim not in (1, 2):
        raise ValueError(f"{expected}, got shape {list(next_q.shape)}")
    check_tensor(op, "next_q", next_q, tuple(next_q.shape), "float")
    if next_q.ndim == 2:  # the critics first: [N, 2] would be blamed on reward otherwise
        n = reward.shape[0] if isinstance(reward, torch.Tensor) and reward.ndim == 1 else next_q.shape[1]
        if next_q.shape[0] == 0 or next_q.shape[1] != n:
            raise ValueError(
                f"{op}: next_q must be [K, N], one row per critic, with N = {n} (reward's rows), "
                f"got shape {list(next_q.shape)}"
            )
    rows = tuple(next_q.shape[-1:])
    check_tensor(op, "reward", reward, rows, "float")
    check_tensor(op, "terminated", terminated, rows, "bool")
    check_tensor(op, "next_log_prob", next_log_prob, rows, "float")
    check_number(op, "gamma", gamma, 0.0, 1.0)
    if next_q.ndim == 2:
        next_q = next_q.min(0).values
    soft_value = next_q - alpha * next_log_prob
    discount = (~terminated).to(soft_value.dtype) * gamma
    return torch.addcmul(reward.to(soft_value.dtype), discount, soft_value)


class SquashedGaussianPolicy:
    """``sample``, ``forward`` and the action bounds for an agent whose ``distribution`` gives a Gaussian.

    Mix it in before ``rlstruct.Agent`` (``class MyActor(SquashedGaussianPolicy,
    Agent)``) and call ``super().__init__(action_low, action_high)``: it
    registers the buffers ``center`` and ``scale`` (the bounds' middle and
    half-width, float32 ``[k]``) and ``uniform`` (bool, False), and sets
    ``action_dim``. The actions are ``tanh(u)`` for ``u ~ N(mean,
    exp(log_std))`` in the unit box, scaled to the bounds for the
    environment; collection draws from the agent's ``generator``, which must
    be on the parameters' device.

    Args:
        action_low: the lower bound of each action dimension.
        action_high: the upper bound of each action dimension.

    Raises:
        ValueError: for bounds that are empty, of different lengths, or not ``low < high``.
    """

    center: torch.Tensor
    scale: torch.Tensor
    uniform: torch.Tensor
    generator: torch.Generator

    def __init__(self, action_low: Sequence[float], action_high: Sequence[float]) -> None:
        super().__init__()
        low = torch.tensor(list(action_low), dtype=torch.float32)
        high = torch.tensor(list(action_high), dtype=torch.float32)
        if low.ndim != 1 or low.numel() == 0 or low.shape != high.shape or not bool((low < high).all()):
            raise ValueError(
                f"{type(self).__name__}: action_low and action_high must be non-empty, of the same length "
                f"and low < high, got {list(action_low)!r} and {list(action_high)!r}"
            )
        self.action_dim = low.numel()
        module = cast(torch.nn.Module, self)
        module.register_buffer("center", (high + low) / 2)
        module.register_buffer("scale", (high - low) / 2)
        module.register_buffer("uniform", torch.tensor(False))

    def distribution(self, observation: Observation) -> tuple[torch.Tensor, torch.Tensor]:
        """(mean, log_std) ``[N, action_dim]`` of the Gaussian before squashing: what a subclass writes."""
        raise NotImplementedError(f"{type(self).__name__} must define distribution(observation)")

    def sample(
        self, observation: Observation, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """A reparametrised sample: (unit action [N, k] in [-1, 1], its log-probability [N]).

        Differentiable with respect to the parameters; the noise comes from
        ``generator``, which must be on the parameters' device.
        """
        return self.draw(*self.distribution(observation), generator)

    def draw(
        self, mean: torch.Tensor, log_std: torch.Tensor, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """A reparametrised sample of the Gaussian ``(mean, log_std)`` ``[..., k]``, squashed: (unit action, log-prob ``[...]``)."""
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

        Args:
            state: B rows, returned unchanged (the policy has no memory).
            observation: B rows, on the parameters' device.
            agent_info: z of every row; its optional bool key ``greedy`` [B].
            history: not read.

        Returns:
            ``(output, state)``: ``output`` holds ``unit_action`` and
            ``action``, float32 [B, k] on the parameters' device.
        """
        mean, log_std = self.distribution(observation)
        return self.act(mean, log_std, agent_info), state

    def act(self, mean: torch.Tensor, log_std: torch.Tensor, agent_info: DictTensor) -> DictTensor:
        """The outputs of B rows from their Gaussian ``[B, k]``: sampled, ``tanh(mean)`` where greedy, uniform if ``uniform``.

        Returns:
            ``unit_action`` and ``action``, float32 ``[B, k]`` on ``mean``'s device.
        """
        noise = torch.randn(mean.shape, generator=self.generator, device=mean.device)
        if bool(self.uniform):
            unit = torch.rand(mean.shape, generator=self.generator, device=mean.device) * 2 - 1
        else:
            unit = (mean + log_std.exp() * noise).tanh()
        greedy = greedy_rows(type(self).__name__, agent_info, mean.shape[0])
        if greedy is not None:
            unit = torch.where(greedy.unsqueeze(-1), mean.tanh(), unit)
        action = self.center + self.scale * unit
        return DictTensor({"action": action, "unit_action": unit})


class SquashedGaussianActor(SquashedGaussianPolicy, Agent):
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
        ValueError: for a non-positive ``obs_dim``, no hidden layer, or
            bounds that are empty, of different lengths, or not ``low < high``.
        TypeError: for an int ``hidden`` (a sequence of sizes is expected).

    Examples:
        >>> import torch
        >>> from rlstruct import DictTensor
        >>> from rlstruct.learning.soft_actor_critic import SquashedGaussianActor, TwinQ
        >>> actor = SquashedGaussianActor(obs_dim=3, action_low=[-2.0], action_high=[2.0], hidden=(8, 8))
        >>> z = DictTensor({"greedy": torch.tensor([False, True])})
        >>> obs = DictTensor({"observation": torch.zeros(2, 3)})
        >>> out, _ = actor(actor.initial_state(z, 2), obs, z)
        >>> sorted(out.keys()), bool((out["action"].abs() <= 2.0).all())
        (['action', 'unit_action'], True)
        >>> TwinQ(obs_dim=3, action_dim=1, hidden=(8, 8))(obs, out["unit_action"]).shape
        torch.Size([2, 2])
    """

    def __init__(
        self,
        obs_dim: int | None = None,
        action_low: Sequence[float] = (),
        action_high: Sequence[float] = (),
        hidden: Sequence[int] = (256, 256),
        observation_spaces: Mapping[str, ObservationSpace] | None = None,
        encoder: torch.nn.Module | None = None,
    ) -> None:
        super().__init__(action_low, action_high)
        check_layer_sizes("SquashedGaussianActor", hidden)
        self.encoder, obs_dim = observation_encoder(
            "SquashedGaussianActor", obs_dim, observation_spaces, encoder
        )
        self.in_features = obs_dim
        self.body = mlp([obs_dim, *hidden], torch.nn.ReLU)
        self.body.append(torch.nn.ReLU())
        self.head = torch.nn.Linear(hidden[-1], 2 * self.action_dim)

    @property
    def observation_keys(self) -> tuple[str, ...]:
        """The keys of the observation the policy reads (``("observation",)`` without an encoder)."""
        return encoded_keys(self.encoder)

    def distribution(self, observation: torch.Tensor | Observation) -> tuple[torch.Tensor, torch.Tensor]:
        """(mean, log_std) [N, k] of the Gaussian before squashing, from N observations.

        ``observation``: the observation's keys (the encoder's; ``observation``
        without one), N rows each, or the flat ``observation`` tensor ``[N,
        ...]`` itself.
        """
        features = encode(self.encoder, observation, self.in_features, "SquashedGaussianActor", self)
        mean, log_std = self.head(self.body(features)).chunk(2, -1)
        return mean, log_std.clamp(LOG_STD_MIN, LOG_STD_MAX)


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

    Raises:
        TypeError: for an int ``hidden`` (a sequence of sizes is expected).
        ValueError: for no hidden layer, a non-positive ``obs_dim``, or not
            exactly one of ``obs_dim``, ``observation_spaces`` and ``encoder``.
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
        check_layer_sizes("TwinQ", hidden)
        self.encoder, obs_dim = observation_encoder("TwinQ", obs_dim, observation_spaces, encoder)
        self.in_features = obs_dim
        sizes = [obs_dim + action_dim, *hidden, 1]
        self.weights = torch.nn.ParameterList()
        self.biases = torch.nn.ParameterList()
        for n_in, n_out in itertools.pairwise(sizes):
            bound = 1.0 / math.sqrt(n_in)
            self.weights.append(torch.nn.Parameter(torch.empty(2, n_in, n_out).uniform_(-bound, bound)))
            self.biases.append(torch.nn.Parameter(torch.empty(2, 1, n_out).uniform_(-bound, bound)))

    def forward(self, observation: torch.Tensor | Observation, unit_action: torch.Tensor) -> torch.Tensor:
        """Q of both networks [2, N] from N observations (as the actor reads them) and unit actions [N, k]."""
        x = torch.cat(
            [encode(self.encoder, observation, self.in_features, "TwinQ", self), unit_action], -1
        ).expand(2, -1, -1)
        last = len(self.weights) - 1
        for i, (weight, bias) in enumerate(zip(self.weights, self.biases, strict=True)):
            x = torch.baddbmm(bias, x, weight)
            if i < last:
                x = x.relu()
        return x.squeeze(-1)


class SACLearner:
    """SAC's gradient step over sampled transitions; holds the networks, optimisers and hyperparameters.

    Args:
        actor: the policy (trained), any ``SACAgent``.
        critic: the twin critics (trained): ``critic(observation, unit_action)`` is ``[2, N]``.
        target: their target copy (Polyak-averaged, no gradients).
        log_alpha: the log temperature, a 0-d tensor with gradients.
        critic_optimizer: over ``critic``'s parameters.
        actor_optimizer: over ``actor``'s parameters and ``log_alpha``.
        generator: the noise of the actions sampled for the losses, on the networks' device.
        gamma: the discount factor.
        tau: the Polyak rate of the target critics.
        target_entropy: the entropy the temperature aims at.
        keys: the observation keys the actor and critics read.
    """

    def __init__(
        self,
        actor: SACAgent,
        critic: torch.nn.Module,
        target: torch.nn.Module,
        log_alpha: torch.Tensor,
        critic_optimizer: torch.optim.Optimizer,
        actor_optimizer: torch.optim.Optimizer,
        generator: torch.Generator,
        *,
        gamma: float,
        tau: float,
        target_entropy: float,
        keys: Sequence[str] = ("observation",),
    ) -> None:
        self.actor, self.critic, self.target, self.log_alpha = actor, critic, target, log_alpha
        self.critic_optimizer, self.actor_optimizer = critic_optimizer, actor_optimizer
        self.generator = generator
        self.gamma, self.tau, self.target_entropy = gamma, tau, target_entropy
        self.keys = tuple(keys)
        self._critic_params: list[torch.Tensor] = list(critic.parameters())
        self._target_params: list[torch.Tensor] = list(target.parameters())

    def step(self, data: DictTensor | Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """One update of the critics, then of the actor and the temperature; in place.

        Args:
            data: transitions ``[N, ...]``: each of ``keys`` and ``next/`` of
                each, ``unit_action``, ``next/reward`` and ``next/terminated``,
                on the networks' device.

        Returns:
            0-d tensors (not synchronised): ``critic_loss``, ``actor_loss``,
            ``alpha``, ``entropy`` (minus the mean log-probability of the
            sampled actions), ``q`` (the critics' mean estimate).
        """
        observation = {k: data[k] for k in self.keys}
        next_observation = {k: data[f"next/{k}"] for k in self.keys}
        alpha = self.log_alpha.detach().exp()

        # Critics: the soft Bellman target, cut where the episode terminated (not where it was truncated).
        with torch.no_grad():
            next_action, next_log_prob = self.actor.sample(next_observation, self.generator)
            next_q = self.target(next_observation, next_action)
            target_q = soft_td_target(
                data["next/reward"], data["next/terminated"], next_q, next_log_prob, alpha, self.gamma
            )
        q = self.critic(observation, data["unit_action"])
        critic_loss = 0.5 * (q - target_q).pow(2).mean(1).sum()

        def actor_losses() -> tuple[torch.Tensor, torch.Tensor]:
            action, log_prob = self.actor.sample(observation, self.generator)
            q_pi = self.critic(observation, action).min(0).values
            return (alpha * log_prob - q_pi).mean(), log_prob.mean()

        actor_loss, mean_log_prob = self.update(critic_loss, actor_losses)
        return {
            "critic_loss": critic_loss.detach(),
            "actor_loss": actor_loss,
            "alpha": alpha,
            "entropy": -mean_log_prob,
            "q": q.detach().mean(),
        }

    def update(
        self,
        critic_loss: torch.Tensor,
        actor_losses: Callable[[], tuple[torch.Tensor, torch.Tensor]],
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Step the critics on ``critic_loss``; then the actor and the temperature; then the target critics.

        Args:
            critic_loss: the critics' 0-d loss, with its graph.
            actor_losses: called once the critics have stepped, with the
                critics' parameters frozen: the actor's 0-d loss and the mean
                log-probability of the sampled actions (the temperature's
                loss is made from it).

        Returns:
            ``(actor_loss, mean_log_prob)``, detached.
        """
        self.critic_optimizer.zero_grad(set_to_none=True)
        critic_loss.backward()
        self.critic_optimizer.step()

        # Actor and temperature: one backward pass, their parameters are disjoint.
        self.critic.requires_grad_(False)
        try:  # the critic learns again even if this step raises (an interrupt, a nan check)
            actor_loss, mean_log_prob = actor_losses()
            alpha_loss = -self.log_alpha * (mean_log_prob.detach() + self.target_entropy)
            self.actor_optimizer.zero_grad(set_to_none=True)
            (actor_loss + alpha_loss).backward()
            self.actor_optimizer.step()
        finally:
            self.critic.requires_grad_(True)

        with torch.no_grad():
            torch._foreach_lerp_(self._target_params, self._critic_params, self.tau)
        return actor_loss.detach(), mean_log_prob.detach()
