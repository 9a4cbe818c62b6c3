"""Q-learning with a memory (R2D2-style): the recurrent Q-network DQN builds with ``recurrent``, and its loss.

A recurrent agent cannot be replayed one transition at a time: its Q-values
depend on the steps before. DQN with ``recurrent`` therefore stores whole
rows of collected steps (chunks, ``rlstruct.replay.SequenceReplayBuffer``)
with the memory the agent had when each row began, and replays a sampled
chunk from that stored state (Kapturowski et al. 2019). The first
``burn_in`` steps of a chunk only warm the memory up (no gradient, no loss):
the stored state was made by older weights, and a few steps of the current
ones bring it closer to what they would have carried.

An agent DQN trains this way speaks ``RecurrentQAgent``: beside acting
epsilon-greedily with a state (``EpsilonGreedyPolicy``'s ``act``), it
replays a chunk with ``q_sequence``. ``RecurrentQNetwork`` is the one DQN
builds; ``n_step_targets`` and ``recurrent_dqn_loss`` are the loss.

Examples:
    >>> import torch
    >>> from rlstruct import DictTensor
    >>> from rlstruct.learning.recurrent_q import RecurrentQNetwork
    >>> agent = RecurrentQNetwork(obs_dim=2, n_actions=3, hidden=(16, 16))
    >>> z = DictTensor({"greedy": torch.ones(4, dtype=torch.bool)})
    >>> state = agent.initial_state(z, 4)
    >>> out, state = agent(state, DictTensor({"observation": torch.randn(4, 2)}), z)
    >>> out["action"].shape, state["h"].shape
    (torch.Size([4]), torch.Size([4, 16]))
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable

import torch

from rlstruct.agent import Agent
from rlstruct.checks import check_int, check_number, check_tensor
from rlstruct.dicttensor import DictTensor
from rlstruct.errors import describe
from rlstruct.learning.actor_critic import run_memory
from rlstruct.learning.encoders import encode, encoded_keys, observation_encoder
from rlstruct.learning.protocols import check_chunk_agent
from rlstruct.learning.q_learning import EpsilonGreedyPolicy, check_q_sizes, q_head, q_layers
from rlstruct.specs import ObservationSpace
from rlstruct.temporal import TemporalDictTensor
from rlstruct.trajectories import Trajectories

__all__ = [
    "RecurrentQAgent",
    "RecurrentQNetwork",
    "check_recurrent_q_agent",
    "memory_step",
    "n_step_targets",
    "recurrent_dqn_loss",
    "replay_chunk",
    "sequence_features",
]


@runtime_checkable
class RecurrentQAgent(Protocol):
    """What DQN with ``recurrent`` needs of an agent, beside being an ``rlstruct.Agent`` with a state.

    Collection: as ``QAgent`` (``action`` int64 ``[B]``, epsilon-greedy with
    the 0-d buffer ``epsilon``, greedy where ``agent_info["greedy"]``), and a
    state from ``initial_state`` that ``forward`` carries from step to step.

    Learning: ``q_sequence(batch, burn_in)`` replays a chunk ``[B, T]`` from
    the state stored in ``batch.info["agent_state/..."]``, restarting the
    memory where ``initial_state`` is True, and returns the Q-values of each
    step's ``observation`` and of its ``next/observation`` (the memory one
    step further, so a truncated episode bootstraps from what its last step
    reached), each ``[B, T, n_actions]``. Steps before ``burn_in`` run
    without gradients.
    """

    epsilon: torch.Tensor

    def q_sequence(self, batch: Trajectories, burn_in: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """Q ``[B, T, n_actions]`` of each step's observation and of its ``next/`` observation."""
        ...


def check_recurrent_q_agent(agent: object, learner: str) -> None:
    """Raise unless ``agent`` is an ``Agent`` with what ``RecurrentQAgent`` requires.

    Raises:
        AgentError: (a TypeError) naming what is missing and the learner.
    """
    missing = [] if callable(getattr(agent, "q_sequence", None)) else ["q_sequence"]
    if not isinstance(getattr(agent, "epsilon", None), torch.Tensor):
        missing.append("epsilon (a float32 0-d buffer)")
    check_chunk_agent(agent, learner, missing, "rlstruct.learning.recurrent_q.RecurrentQAgent")


def sequence_features(
    encoder: torch.nn.Module | None, steps: TemporalDictTensor, prefix: str = ""
) -> torch.Tensor:
    """The encoded observations ``[B, T, d]`` of stored steps (``prefix`` "next/" for the reached ones).

    Args:
        encoder: the network's encoder, or None for a flat ``observation``.
        steps: ``[B, T]`` steps holding the encoder's keys (``observation`` without one), each with ``prefix``.
        prefix: "" for the observations of the steps, "next/" for those they reached.
    """
    b, t = steps.n_elems(), steps.n_timesteps()
    if encoder is None:
        flat: torch.Tensor | dict[str, torch.Tensor] = steps[f"{prefix}observation"].flatten(0, 1)
    else:
        flat = {k: steps[f"{prefix}{k}"].flatten(0, 1) for k in encoded_keys(encoder)}
    return encode(encoder, flat, owner="sequence_features", network=encoder).view(b, t, -1)


def memory_step(
    memory: torch.nn.GRU, encoder: torch.nn.Module | None, h: torch.Tensor, observation: DictTensor
) -> torch.Tensor:
    """One step of a GRU memory for B rows: its new state ``[B, H]`` (also its output) from ``h [B, H]``.

    Args:
        memory: a one-layer, batch-first GRU.
        encoder: the network's encoder, or None for a flat ``observation``.
        h: the memory before the step.
        observation: B rows of the observation's keys.
    """
    x = encode(
        encoder,
        observation if encoder is not None else observation["observation"],
        owner="memory_step",
        network=memory,
    )
    _, after = memory(x.unsqueeze(1), h.unsqueeze(0))
    return after.squeeze(0)  # type: ignore[no-any-return]


def replay_chunk(
    memory: torch.nn.GRU,
    encoder: torch.nn.Module | None,
    batch: Trajectories,
    burn_in: int,
    name: str,
    state: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Run a GRU memory over replayed chunks ``[B, T]``: its output at each step and one step further.

    The memory starts from ``state`` (``batch.info["agent_state/h"]`` if
    None: the state the agent had when the chunk began), restarts from zeros
    where ``initial_state`` is True (``run_memory``), and runs the first
    ``burn_in`` steps without gradients. The second output is the memory one
    more step on, over each step's ``next/`` observation: what the step
    reached, so that a truncated episode bootstraps from its real last
    observation.

    Args:
        memory: a one-layer, batch-first GRU.
        encoder: the network's encoder, or None for a flat ``observation``.
        batch: the chunks (``initial_state`` and the observations, now and ``next/``).
        burn_in: the steps that only warm the memory, in ``[0, T)``.
        name: who asks, for the message.
        state: ``[B, H]`` the memory before step 0, instead of the stored one.

    Returns:
        ``(out, after)``, each ``[B, T, H]``.

    Raises:
        ValueError: for a ``burn_in`` outside ``[0, T)``.
    """
    steps = batch.trajectories
    if not 0 <= burn_in < steps.n_timesteps():
        raise ValueError(
            f"{name}: burn_in must be in [0, T) for chunks of T = {steps.n_timesteps()} steps, got {burn_in}"
        )
    x = sequence_features(encoder, steps)
    starts = steps["initial_state"]
    h0 = batch.info["agent_state/h"] if state is None else state
    if burn_in > 0:
        with torch.no_grad():
            warm = run_memory(memory, x[:, :burn_in], [h0], starts[:, :burn_in])
        rest = run_memory(memory, x[:, burn_in:], [warm[:, -1]], starts[:, burn_in:])
        out = torch.cat([warm, rest], 1)
    else:
        out = run_memory(memory, x, [h0], starts)
    b, t, size = out.shape
    reached = sequence_features(encoder, steps, "next/").flatten(0, 1).unsqueeze(1)
    after, _ = memory(reached, out.flatten(0, 1).unsqueeze(0))
    return out, after.view(b, t, size)


class RecurrentQNetwork(EpsilonGreedyPolicy, Agent):
    """A GRU over the observations, then Q-values of discrete actions: the agent DQN builds with ``recurrent``.

    The memory is one GRU of ``hidden[0]`` units; the Q-values come from an
    MLP (ReLU) over its output, with a dueling head if ``dueling``. Acting is
    epsilon-greedy as ``QNetwork``'s (the buffer ``epsilon``; greedy rows
    where ``agent_info["greedy"]``).

    Args:
        obs_dim: the size of the flat observation under ``observation``.
        n_actions: the number of discrete actions.
        hidden: the memory's size, then the sizes of the MLP's hidden layers
            (one size: a memory and one layer of that size).
        dueling: ``Q = V + A - mean_a A`` (Wang et al. 2016).
        observation_spaces: instead of ``obs_dim``, the observation's keys
            and spaces (see ``rlstruct.learning.encoders``).
        encoder: instead of either, your own encoder module.

    State: ``h``, float32 ``[B, hidden[0]]`` (zeros at an episode's start).
    Output keys (per row): ``action`` (int64).

    Raises:
        TypeError: for an int ``hidden`` (a sequence of sizes is expected).
        ValueError: for a non-positive ``n_actions``, no hidden size, or
            not exactly one of ``obs_dim``,
            ``observation_spaces`` and ``encoder``.
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
        self.encoder, obs_dim = observation_encoder("RecurrentQNetwork", obs_dim, observation_spaces, encoder)
        self.n_actions = n_actions = check_q_sizes("RecurrentQNetwork", n_actions, hidden)
        self.memory = torch.nn.GRU(obs_dim, hidden[0], batch_first=True)
        self.body, self.head, self.value = q_layers(hidden[0], hidden[1:] or hidden, n_actions, dueling)

    @property
    def observation_keys(self) -> tuple[str, ...]:
        """The keys of the observation the network reads (``("observation",)`` without an encoder)."""
        return encoded_keys(self.encoder)

    def initial_state(self, agent_info: DictTensor, n: int) -> DictTensor:
        """The memory of ``n`` rows at an episode's start: ``h``, zeros ``[n, hidden[0]]``."""
        device = self.head.weight.device
        return DictTensor({"h": torch.zeros(n, self.memory.hidden_size, device=device)})

    def heads(self, features: torch.Tensor) -> torch.Tensor:
        """Q ``[..., n_actions]`` from the memory's outputs ``[..., hidden[0]]``."""
        return q_head(self.body(features), self.head, self.value)

    def forward(
        self,
        state: DictTensor,
        observation: DictTensor,
        agent_info: DictTensor,
        history: TemporalDictTensor | None = None,
    ) -> tuple[DictTensor, DictTensor]:
        """One step of B rows: the memory moves on, and the action is epsilon-greedy on its Q-values."""
        h = memory_step(self.memory, self.encoder, state["h"], observation)
        return DictTensor({"action": self.act(self.heads(h), agent_info)}), DictTensor({"h": h})

    def q_sequence(self, batch: Trajectories, burn_in: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """Q ``[B, T, n_actions]`` of each step's observation and of its ``next/observation``.

        The memory starts from ``batch.info["agent_state/h"]``, restarts from
        zeros where ``initial_state`` is True (``run_memory``), and runs its
        first ``burn_in`` steps without gradients. The reached observation of
        step t is one more step of the memory after step t.
        """
        out, after = replay_chunk(self.memory, self.encoder, batch, burn_in, "RecurrentQNetwork.q_sequence")
        return self.heads(out), self.heads(after)


def _shifted(x: torch.Tensor, k: int, fill: float | bool) -> torch.Tensor:
    """``x [B, T]`` moved k steps left (``y[:, t] = x[:, t + k]``), ``fill`` past the end."""
    if k == 0:
        return x
    pad = torch.full_like(x[:, :k], fill)
    return torch.cat([x[:, k:], pad], 1)


def n_step_targets(
    reward: torch.Tensor,
    terminated: torch.Tensor,
    done: torch.Tensor,
    valid: torch.Tensor,
    next_value: torch.Tensor,
    gamma: float,
    n: int,
) -> torch.Tensor:
    """n-step Q-learning targets inside chunks ``[B, T]``, cut where an episode or the chunk ends.

    ``y_t = r_t + gamma r_{t+1} + ... + gamma^(k-1) r_{t+k-1} + gamma^k (1 -
    terminated_{t+k-1}) next_value_{t+k-1}``, with ``k = n`` unless the
    episode ends (``done``) or the chunk's valid steps end first. Truncated
    episodes still bootstrap from what their last step reached.

    Args:
        reward: ``[B, T]`` rewards of the steps (float).
        terminated: ``[B, T]`` bool, the step ended its episode by termination.
        done: ``[B, T]`` bool, the step ended its episode (terminated or truncated).
        valid: ``[B, T]`` bool, the chunk's real steps (a prefix of each row).
        next_value: ``[B, T]`` the bootstrap value of each step's reached observation.
        gamma: the discount factor.
        n: the number of steps, at least 1.

    Returns:
        The targets ``[B, T]`` (0 at padding steps), of ``next_value``'s dtype.

    Raises:
        TypeError: for an argument that is not a tensor of its dtype kind
            (float for ``reward`` and ``next_value``, bool for the others),
            or ``n`` or ``gamma`` not a number.
        ValueError: for ``n`` below 1, ``gamma`` outside [0, 1], or a tensor
            that is not ``[B, T]`` as ``next_value``.

    Examples:
        >>> import torch
        >>> r = torch.ones(1, 3)
        >>> no = torch.zeros(1, 3, dtype=torch.bool)
        >>> v = torch.full((1, 3), 10.0)
        >>> n_step_targets(r, no, no, ~no, v, 0.5, 2)
        tensor([[4., 4., 6.]])
    """
    op = "n_step_targets"
    check_int(op, "n", n)
    check_number(op, "gamma", gamma, 0.0, 1.0)
    if not isinstance(next_value, torch.Tensor):
        raise TypeError(f"{op}: next_value must be a float tensor [B, T], got {describe(next_value)}")
    if next_value.dim() != 2:
        raise ValueError(
            f"{op}: next_value must be a float tensor [B, T], got shape {list(next_value.shape)}"
        )
    shape = tuple(next_value.shape)
    check_tensor(op, "next_value", next_value, shape, "float")
    check_tensor(op, "reward", reward, shape, "float")
    for name, flags in (("terminated", terminated), ("done", done), ("valid", valid)):
        check_tensor(op, name, flags, shape, "bool")
    dtype = next_value.dtype
    y = torch.zeros_like(next_value)
    discount = torch.ones_like(next_value)
    open_ = valid.clone()
    zero = torch.zeros((), dtype=dtype, device=next_value.device)
    for k in range(n):  # where(), not a product with the flags: a NaN at padding stays out (0 * NaN is NaN)
        y = y + torch.where(open_, discount * _shifted(reward, k, 0.0).to(dtype), zero)
        discount = discount * gamma
        last = _shifted(done, k, True) | ~_shifted(valid, k + 1, False)
        if k == n - 1:
            last = torch.ones_like(last)
        stop = open_ & last & ~_shifted(terminated, k, True)
        y = y + torch.where(stop, discount * _shifted(next_value, k, 0.0), zero)
        open_ = open_ & ~last
    return y


def recurrent_dqn_loss(
    model: RecurrentQAgent,
    target: RecurrentQAgent,
    batch: Trajectories,
    learn: torch.Tensor,
    weights: torch.Tensor,
    gamma: float,
    n_step: int = 1,
    double: bool = True,
    burn_in: int = 0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The Huber loss between Q(s, a) and n-step (double) Q targets over replayed chunks.

    Args:
        model: the online agent (gradients flow into it).
        target: its target copy (read without gradients), replayed from the same stored state.
        batch: the chunks ``[B, T]``: ``action``, ``next/reward``,
            ``next/terminated``, ``next/done``, the observations and
            ``initial_state``; the stored state in ``info``.
        learn: ``[B, T]`` bool, the steps the loss counts (valid, past the burn-in).
        weights: ``[B]``, each chunk's weight (importance sampling; ones for uniform replay).
        gamma: the discount factor.
        n_step: the steps of the targets (``n_step_targets``).
        double: the online network picks the bootstrap's action, the target network values it.
        burn_in: the chunk's first steps that only warm the memories.

    Returns:
        ``(loss, q, y)``: the 0-d loss (the sum over learned steps of the
        chunk's weight times the Huber loss, divided by the number of learned
        steps), Q(s, a) ``[B, T]`` (with gradients) and the targets ``[B, T]``
        (without).

    Raises:
        TypeError: if ``learn`` is not bool, ``weights`` not float,
            ``n_step`` or ``burn_in`` not an int, or ``gamma`` not a number.
        ValueError: if ``learn`` is not ``[B, T]`` or ``weights`` not ``[B]``
            as the chunks, ``gamma`` is outside [0, 1], ``n_step`` below 1,
            ``burn_in`` below 0 or not below T; if the agent's
            ``q_sequence`` returns Q-values of another shape than
            ``[B, T, n_actions]`` for both the observations and the reached ones.
    """
    op = "recurrent_dqn_loss"
    steps = batch.trajectories
    b, t = steps.n_elems(), steps.n_timesteps()
    check_tensor(op, "learn", learn, (b, t), "bool")
    check_tensor(op, "weights", weights, (b,), "float")
    check_number(op, "gamma", gamma, 0.0, 1.0)
    check_int(op, "n_step", n_step)
    if check_int(op, "burn_in", burn_in, 0) >= t:
        raise ValueError(f"{op}: burn_in must be below the chunks' T = {t}, got {burn_in}")
    q_all, q_next_online = model.q_sequence(batch, burn_in)
    if q_all.dim() != 3 or q_all.shape[:2] != (b, t) or q_next_online.shape != q_all.shape:
        raise ValueError(
            f"recurrent_dqn_loss: q_sequence must return two [B, T, n_actions] tensors for chunks of "
            f"B = {b}, T = {t}, got {tuple(q_all.shape)} and {tuple(q_next_online.shape)}"
        )
    with torch.no_grad():
        _, q_next_target = target.q_sequence(batch, burn_in)
        if double:
            best = q_next_online.detach().argmax(-1, keepdim=True)
            next_value = q_next_target.gather(-1, best).squeeze(-1)
        else:
            next_value = q_next_target.max(-1).values
        y = n_step_targets(
            steps["next/reward"],
            steps["next/terminated"],
            steps["next/done"],
            steps.mask(),
            next_value,
            gamma,
            n_step,
        )
    q = q_all.gather(-1, steps["action"].unsqueeze(-1)).squeeze(-1)
    huber = torch.nn.functional.smooth_l1_loss(q, y, reduction="none")
    weighted = huber * weights.to(huber.dtype).unsqueeze(1)
    # the learned steps selected, not multiplied by 0 and 1: a NaN at another step stays out of the loss
    loss = torch.where(learn, weighted, torch.zeros((), dtype=huber.dtype)).sum() / learn.sum().clamp(min=1)
    return loss, q, y
