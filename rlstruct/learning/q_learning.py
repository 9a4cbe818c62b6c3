"""Q-learning: what DQN needs of an agent, its epsilon-greedy half, the network DQN builds and its loss.

DQN (``rlstruct.algos.dqn``) trains any ``Agent`` that speaks ``QAgent``:
it gives the Q-values of every discrete action for a batch of observations
and acts epsilon-greedily with the rate in its buffer ``epsilon``.
``EpsilonGreedyPolicy`` is that acting half, ready to mix in: an agent that
inherits it writes only ``q_values``. ``QNetwork`` is the agent DQN builds;
``q_targets`` and ``dqn_loss`` are the one-step double-Q loss, on tensors
and on an agent.

Examples:
    >>> import torch
    >>> from rlstruct import Agent, DictTensor
    >>> from rlstruct.learning.q_learning import EpsilonGreedyPolicy, check_q_agent
    >>> class Linear(EpsilonGreedyPolicy, Agent):
    ...     def __init__(self, obs_dim: int, n_actions: int) -> None:
    ...         super().__init__()
    ...         self.net = torch.nn.Linear(obs_dim, n_actions)
    ...     def q_values(self, observation):
    ...         return self.net(observation["observation"].float())
    >>> agent = Linear(4, 2)
    >>> check_q_agent(agent, "DQN")
    >>> agent.epsilon.fill_(0.0)  # greedy
    tensor(0.)
    >>> obs = DictTensor({"observation": torch.randn(3, 4)})
    >>> out, _ = agent(DictTensor(batch_size=3), obs, DictTensor(batch_size=3))
    >>> bool((out["action"] == agent.q_values(obs).argmax(1)).all())
    True
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol, cast, runtime_checkable

import torch

from rlstruct.agent import Agent
from rlstruct.checks import check_number, check_tensor, is_int
from rlstruct.dicttensor import DictTensor
from rlstruct.errors import describe
from rlstruct.learning.actor_critic import greedy_rows, mlp
from rlstruct.learning.encoders import encode, encoded_keys, observation_encoder
from rlstruct.learning.protocols import check_transition_agent
from rlstruct.specs import ObservationSpace
from rlstruct.temporal import TemporalDictTensor

__all__ = [
    "EpsilonGreedyPolicy",
    "QAgent",
    "QNetwork",
    "check_q_agent",
    "dqn_loss",
    "q_targets",
]

Observation = Mapping[str, torch.Tensor] | DictTensor
"""N observations as a learner hands them to a network: each observation key, ``[N, ...]``."""


@runtime_checkable
class QAgent(Protocol):
    """What DQN needs of an agent, beside being an ``rlstruct.Agent`` without state or history.

    Learning: ``q_values(observation)`` gives the Q-values ``[N,
    n_actions]`` (float, with gradients) of N observations, handed over as a
    mapping of the observation's keys (``observation_keys`` if the agent
    names them, else every key of the environment's observation) to ``[N,
    ...]`` tensors, as stored: a DictTensor in ``forward``, a dict of
    replayed rows in the loss. The learner keeps a copy of the agent as its
    target network (``copy.deepcopy``).

    Collection: every step's output holds ``action`` (int64 ``[B]``), taken
    epsilon-greedily: a uniform random action with probability ``epsilon``
    (a float32 0-d buffer the learner fills as its schedule says and that
    reaches the workers with the weights), the greedy one otherwise, and
    always the greedy one in rows whose ``agent_info["greedy"]`` is True
    (evaluations). ``EpsilonGreedyPolicy`` does all of this from
    ``q_values``.

    DQN replays single transitions: an agent with a memory (a state) or a
    history is refused.
    """

    epsilon: torch.Tensor

    def q_values(self, observation: Observation) -> torch.Tensor:
        """Q ``[N, n_actions]`` of N observations (each key ``[N, ...]``)."""
        ...


def check_q_agent(agent: object, learner: str) -> None:
    """Raise unless ``agent`` is an ``Agent`` with everything ``QAgent`` requires.

    Args:
        agent: the agent (an instance) the learner is given.
        learner: the learner's name, for the message.

    Raises:
        AgentError: (a TypeError) if ``agent`` is not an ``rlstruct.Agent``,
            lacks ``q_values`` or a tensor ``epsilon``, or asks for a
            history; the message names what is missing and the learner.
    """
    missing = [] if callable(getattr(agent, "q_values", None)) else ["q_values"]
    if not isinstance(getattr(agent, "epsilon", None), torch.Tensor):
        missing.append("epsilon (a float32 0-d buffer)")
    check_transition_agent(agent, learner, missing, "rlstruct.learning.q_learning.QAgent")


class EpsilonGreedyPolicy:
    """``forward`` and ``act`` for an agent that gives ``q_values``: epsilon-greedy, greedy where z says so.

    Mix it in before ``rlstruct.Agent`` (``class MyQ(EpsilonGreedyPolicy,
    Agent)``) and call ``super().__init__()``: it registers the buffer
    ``epsilon`` (float32, 1.0 at first). Draws come from the agent's
    ``generator``, on its device (the CPU, or where a batcher moved the
    agent), and are moved to the Q-values' device.
    """

    epsilon: torch.Tensor
    generator: torch.Generator

    def __init__(self) -> None:
        super().__init__()
        cast(torch.nn.Module, self).register_buffer("epsilon", torch.tensor(1.0))

    def q_values(self, observation: Observation) -> torch.Tensor:
        """Q ``[N, n_actions]`` of N observations: what a subclass writes."""
        raise NotImplementedError(f"{type(self).__name__} must define q_values(observation)")

    def act(self, q: torch.Tensor, agent_info: DictTensor) -> torch.Tensor:
        """The action of each of B rows from its Q-values ``[B, n_actions]``: random with probability ``epsilon``.

        Rows whose ``agent_info["greedy"]`` (bool ``[B]``) is True take the
        greedy action. Returns int64 ``[B]`` on ``q``'s device.
        """
        action = q.argmax(1)
        n = action.shape[0]
        drawn_on = self.generator.device  # the CPU, or where a batcher moved the agent
        explore = torch.rand(n, generator=self.generator, device=drawn_on).to(q.device) < self.epsilon
        greedy = greedy_rows(type(self).__name__, agent_info, n)
        if greedy is not None:
            explore &= ~greedy.to(q.device)
        random = torch.randint(q.shape[1], (n,), generator=self.generator, device=drawn_on).to(q.device)
        return torch.where(explore, random, action)

    def forward(
        self,
        state: DictTensor,
        observation: DictTensor,
        agent_info: DictTensor,
        history: TemporalDictTensor | None = None,
    ) -> tuple[DictTensor, DictTensor]:
        """Act epsilon-greedily on B rows: ``action`` (int64 ``[B]``); the state is returned unchanged."""
        return DictTensor({"action": self.act(self.q_values(observation), agent_info)}), state


class QNetwork(EpsilonGreedyPolicy, Agent):
    """Q-values of discrete actions from float32 observations, acting epsilon-greedily: the agent DQN builds.

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
        TypeError: for an int ``hidden`` (a sequence of sizes is expected).
        ValueError: for a non-positive ``obs_dim`` or ``n_actions``, no hidden
            layer, or not exactly one of ``obs_dim``, ``observation_spaces`` and ``encoder``.

    Examples:
        >>> import torch
        >>> from rlstruct import DictTensor
        >>> from rlstruct.learning.q_learning import QNetwork
        >>> agent = QNetwork(obs_dim=4, n_actions=2, hidden=(16,), dueling=True)
        >>> obs = DictTensor({"observation": torch.zeros(3, 4)})
        >>> agent.q_values(obs).shape
        torch.Size([3, 2])
        >>> z = DictTensor({"greedy": torch.tensor([True, True, True])})
        >>> out, _ = agent(agent.initial_state(z, 3), obs, z)
        >>> bool((out["action"] == agent.q_values(obs).argmax(1)).all())
        True
    """

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
        self.in_features = obs_dim
        self.n_actions = n_actions = check_q_sizes("QNetwork", n_actions, hidden)
        self.dueling = dueling
        self.body, self.head, self.value = q_layers(obs_dim, hidden, n_actions, dueling)

    @property
    def observation_keys(self) -> tuple[str, ...]:
        """The keys of the observation the network reads (``("observation",)`` without an encoder)."""
        return encoded_keys(self.encoder)

    def q_values(self, observation: torch.Tensor | Observation) -> torch.Tensor:
        """Q [N, n_actions] (float32, on the model's device) of N observations.

        ``observation``: the observation's keys (the encoder's; ``observation``
        without one), N rows each, or the flat ``observation`` tensor ``[N,
        ...]`` itself (any dtype).
        """
        return q_head(
            self.body(encode(self.encoder, observation, self.in_features, "QNetwork", self)),
            self.head,
            self.value,
        )


def check_q_sizes(owner: str, n_actions: int | None, hidden: Sequence[int]) -> int:
    """``n_actions``, checked to be positive, with ``hidden`` checked to name a layer at least.

    Raises:
        TypeError: for an int ``hidden``, or an ``n_actions`` that is not an int, naming ``owner``.
        ValueError: naming ``owner`` and the argument.
    """
    if n_actions is not None and not is_int(n_actions):
        raise TypeError(
            f"{owner}: n_actions must be a positive int (discrete actions), got {describe(n_actions)}"
        )
    if n_actions is None or n_actions < 1:
        raise ValueError(f"{owner}: n_actions must be a positive int (discrete actions), got {n_actions}")
    check_layer_sizes(owner, hidden)
    return int(n_actions)  # gymnasium's Discrete(n).n is a NumPy int


def check_layer_sizes(owner: str, hidden: Sequence[int]) -> None:
    """Raise unless ``hidden`` is a non-empty sequence of layer sizes (an int is refused, not read as one layer).

    Raises:
        TypeError: for an int (``hidden=64``), naming ``owner``.
        ValueError: for an empty sequence, naming ``owner``.
    """
    if isinstance(hidden, int):
        raise TypeError(
            f"{owner}: hidden must be a sequence of layer sizes such as ({hidden}, {hidden}), got the int {hidden}"
        )
    if len(hidden) < 1:
        raise ValueError(f"{owner}: hidden must name at least one layer size, got {tuple(hidden)}")


def q_layers(
    in_dim: int, hidden: Sequence[int], n_actions: int, dueling: bool
) -> tuple[torch.nn.Sequential, torch.nn.Linear, torch.nn.Linear | None]:
    """A Q-network's layers on features of ``in_dim``: the ReLU body of ``hidden`` units, the head, the value (dueling)."""
    body = torch.nn.Sequential(mlp([in_dim, *hidden], torch.nn.ReLU), torch.nn.ReLU())
    head = torch.nn.Linear(hidden[-1], n_actions)  # before the value layer: the order of the initial draws
    return body, head, torch.nn.Linear(hidden[-1], 1) if dueling else None


def q_head(x: torch.Tensor, head: torch.nn.Linear, value: torch.nn.Linear | None) -> torch.Tensor:
    """Q ``[..., n_actions]`` from the body's features ``x [..., d]``: ``V + A - mean A`` with a value layer."""
    q: torch.Tensor = head(x)
    if value is not None:
        q = value(x) + q - q.mean(-1, keepdim=True)
    return q


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

    Raises:
        TypeError: for an argument that is not a tensor of its dtype kind
            (bool for ``terminated``, float for the others), or a ``gamma``
            that is not a number.
        ValueError: for a tensor whose shape is not ``[N]`` or ``[N,
            n_actions]`` as ``next_q_target``, or ``gamma`` outside [0, 1].

    Examples:
        >>> import torch
        >>> online = torch.tensor([[1.0, 2.0], [0.0, 5.0]])
        >>> target = torch.tensor([[10.0, 20.0], [30.0, 40.0]])
        >>> q_targets(torch.tensor([1.0, 1.0]), torch.tensor([False, True]), online, target, 0.5)
        tensor([11.,  1.])
    """
    op = "q_targets"
    expected = f"{op}: next_q_target must be a float tensor [N, n_actions]"
    if not isinstance(next_q_target, torch.Tensor):
        raise TypeError(f"{expected}, got {describe(next_q_target)}")
    if next_q_target.dim() != 2:
        raise ValueError(f"{expected}, got shape {list(next_q_target.shape)}")
    check_tensor(op, "next_q_target", next_q_target, tuple(next_q_target.shape), "float")
    check_tensor(op, "next_q_online", next_q_online, tuple(next_q_target.shape), "float")
    check_tensor(op, "reward", reward, tuple(next_q_target.shape[:1]), "float")
    check_tensor(op, "terminated", terminated, tuple(next_q_target.shape[:1]), "bool")
    check_number(op, "gamma", gamma, 0.0, 1.0)
    if double:
        best = next_q_online.argmax(1, keepdim=True)
        next_q = next_q_target.gather(1, best).squeeze(1)
    else:
        next_q = next_q_target.max(1).values
    return reward.to(next_q.dtype) + gamma * next_q * (~terminated).to(next_q.dtype)


def dqn_loss(
    model: QAgent,
    target: QAgent,
    rows: Mapping[str, torch.Tensor],
    keys: Sequence[str],
    weights: torch.Tensor,
    gamma: float,
    double: bool = True,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The Huber loss between Q(s, a) and the one-step (double) Q target, on N replayed transitions.

    Args:
        model: the online agent (gradients flow into it).
        target: its target copy (read without gradients).
        rows: the transitions: each of ``keys`` and ``next/`` of each,
            ``action`` (int64 ``[N]``), ``next/reward`` ``[N]`` and
            ``next/terminated`` (bool ``[N]``).
        keys: the observation keys the agents read.
        weights: ``[N]``, each row's weight in the mean (importance
            sampling; ones for uniform replay).
        gamma: the discount factor.
        double: double-Q targets (``q_targets``); the online network's Q of
            s and s' then come from one call over both.

    Returns:
        ``(loss, q, y)``: the 0-d loss, Q(s, a) ``[N]`` (with gradients) and
        the targets ``[N]`` (without).
    """
    obs = {k: rows[k] for k in keys}
    next_obs = {k: rows[f"next/{k}"] for k in keys}
    action = rows["action"]
    n = action.shape[0]
    with torch.no_grad():
        next_q_target = target.q_values(next_obs)
    if double:
        both = {k: torch.cat([obs[k], next_obs[k]]) for k in keys}
        q_both = model.q_values(both)
        q_all, next_q_online = q_both[:n], q_both[n:].detach()
    else:
        q_all, next_q_online = model.q_values(obs), next_q_target
    y = q_targets(rows["next/reward"], rows["next/terminated"], next_q_online, next_q_target, gamma, double)
    q = q_all.gather(1, action.unsqueeze(1)).squeeze(1)
    loss = (weights * torch.nn.functional.smooth_l1_loss(q, y, reduction="none")).mean()
    return loss, q, y
