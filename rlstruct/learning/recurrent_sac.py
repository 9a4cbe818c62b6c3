"""Soft actor-critic with a memory: the recurrent actor and critics SAC builds with ``recurrent``, and their step.

SAC with ``recurrent`` stores rows of collected steps (chunks, in a
``rlstruct.replay.SequenceReplayBuffer``) with the memory the actor had when
each row began, and learns on sampled chunks as recurrent DQN does
(``rlstruct.learning.recurrent_q``): the actor's memory restarts from the
stored state, its first ``burn_in`` steps only warm the memory (no gradient,
no loss), and the bootstrap of each step comes from the memory one step
further, over what the step reached.

The actor and the critics have memories of their own. The critics are not
run while collecting, so no state of theirs is stored: their memory starts
each chunk from zeros and warms up over the same burn-in.

An agent SAC trains this way speaks ``RecurrentSACAgent``: it acts as a
``SACAgent`` does, with a state, and replays a chunk with
``sample_sequence``. ``RecurrentSquashedGaussianActor`` is the one SAC
builds, ``RecurrentTwinQ`` its critics, and ``RecurrentSACLearner`` one
gradient step on a batch of chunks.

Examples:
    >>> import torch
    >>> from rlstruct import DictTensor
    >>> from rlstruct.learning.recurrent_sac import RecurrentSquashedGaussianActor
    >>> actor = RecurrentSquashedGaussianActor(obs_dim=2, action_low=[-2.0], action_high=[2.0], hidden=(16, 16))
    >>> z = DictTensor({"greedy": torch.ones(3, dtype=torch.bool)})
    >>> out, state = actor(actor.initial_state(z, 3), DictTensor({"observation": torch.randn(3, 2)}), z)
    >>> out["action"].shape, state["h"].shape
    (torch.Size([3, 1]), torch.Size([3, 16]))
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable

import torch

from rlstruct.agent import Agent
from rlstruct.dicttensor import DictTensor
from rlstruct.learning.actor_critic import mlp
from rlstruct.learning.encoders import encoded_keys, observation_encoder
from rlstruct.learning.protocols import check_chunk_agent
from rlstruct.learning.q_learning import check_layer_sizes
from rlstruct.learning.recurrent_q import memory_step, replay_chunk
from rlstruct.learning.soft_actor_critic import (
    LOG_STD_MAX,
    LOG_STD_MIN,
    SACLearner,
    SquashedGaussianPolicy,
    TwinQ,
    soft_td_target,
)
from rlstruct.specs import ObservationSpace
from rlstruct.temporal import TemporalDictTensor
from rlstruct.trajectories import Trajectories

__all__ = [
    "RecurrentSACAgent",
    "RecurrentSACLearner",
    "RecurrentSquashedGaussianActor",
    "RecurrentTwinQ",
    "SequenceDraw",
    "check_recurrent_sac_agent",
]

SequenceDraw = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]
"""What ``sample_sequence`` returns: ``(unit_action [B, T, k], log_prob [B, T], next_unit_action, next_log_prob)``."""


@runtime_checkable
class RecurrentSACAgent(Protocol):
    """What SAC with ``recurrent`` needs of an agent, beside being an ``rlstruct.Agent`` with a state.

    Collection: as ``SACAgent`` (``unit_action`` and ``action``, the
    ``uniform`` buffer, greedy rows), with a state from ``initial_state``
    that ``forward`` carries from step to step.

    Learning: ``sample_sequence(batch, burn_in, generator)`` replays chunks
    ``[B, T]`` from the state stored in ``batch.info["agent_state/..."]``,
    restarting the memory where ``initial_state`` is True, and returns a
    reparameterised unit action ``[B, T, action_dim]`` and its
    log-probability ``[B, T]`` at each step, then the same at each step's
    ``next/`` observation (the memory one step further). Steps before
    ``burn_in`` run without gradients.

    Optional: ``make_critics()``, a module with ``features(batch, burn_in)``
    (the critics' memory ``[B, T, d]`` at each step and one step further)
    and ``forward(features [N, d], unit_action [N, k])``, the Q of both
    critics ``[2, N]``. Without it, SAC builds a ``RecurrentTwinQ``.
    """

    action_dim: int
    uniform: torch.Tensor

    def sample_sequence(self, batch: Trajectories, burn_in: int, generator: torch.Generator) -> SequenceDraw:
        """Unit actions and log-probabilities at each step and at each step's ``next/`` observation."""
        ...


def check_recurrent_sac_agent(agent: object, learner: str) -> None:
    """Raise unless ``agent`` is an ``Agent`` with what ``RecurrentSACAgent`` requires.

    Raises:
        AgentError: (a TypeError) naming what is missing and the learner.
    """
    missing = [] if callable(getattr(agent, "sample_sequence", None)) else ["sample_sequence"]
    action_dim = getattr(agent, "action_dim", None)
    if isinstance(action_dim, bool) or not isinstance(action_dim, int) or action_dim < 1:
        missing.append("action_dim (a positive int)")
    if not isinstance(getattr(agent, "uniform", None), torch.Tensor):
        missing.append("uniform (a bool 0-d buffer)")
    if not callable(getattr(agent, "make_critics", lambda: None)):
        missing.append("a callable make_critics")
    check_chunk_agent(agent, learner, missing, "rlstruct.learning.recurrent_sac.RecurrentSACAgent")


class RecurrentSquashedGaussianActor(SquashedGaussianPolicy, Agent):
    """A GRU over the observations, then a squashed Gaussian: the actor SAC builds with ``recurrent``.

    The memory is one GRU of ``hidden[0]`` units; a ReLU MLP over its output
    gives the Gaussian's mean and log std. Acting is ``SquashedGaussianPolicy``'s
    (``uniform``, greedy rows, the agent's ``generator``).

    Args:
        obs_dim: the size of the flat observation under ``observation``.
        action_low: the lower bound of each action dimension.
        action_high: the upper bound of each action dimension.
        hidden: the memory's size, then the MLP's hidden layer sizes (one
            size: a memory and one layer of that size).
        observation_spaces: instead of ``obs_dim``, the observation's keys
            and spaces (see ``rlstruct.learning.encoders``).
        encoder: instead of either, your own encoder module.

    State: ``h``, float32 ``[B, hidden[0]]`` (zeros at an episode's start).
    Output keys (per row, float32): ``unit_action`` [k] and ``action`` [k].

    Raises:
        TypeError: for an int ``hidden`` (a sequence of sizes is expected).
        ValueError: for no hidden size, not exactly one of ``obs_dim``,
            ``observation_spaces`` and ``encoder``, or bounds that are empty,
            of different lengths, or not ``low < high``.
    """

    def __init__(
        self,
        obs_dim: int | None = None,
        action_low: Sequence[float] = (),
        action_high: Sequence[float] = (),
        hidden: Sequence[int] = (64, 64),
        observation_spaces: Mapping[str, ObservationSpace] | None = None,
        encoder: torch.nn.Module | None = None,
    ) -> None:
        super().__init__(action_low, action_high)
        check_layer_sizes("RecurrentSquashedGaussianActor", hidden)  # the memory's size first
        self.encoder, obs_dim = observation_encoder(
            "RecurrentSquashedGaussianActor", obs_dim, observation_spaces, encoder
        )
        layers = list(hidden[1:] or hidden)
        self.memory = torch.nn.GRU(obs_dim, hidden[0], batch_first=True)
        self.body = mlp([hidden[0], *layers], torch.nn.ReLU)
        self.body.append(torch.nn.ReLU())
        self.head = torch.nn.Linear(layers[-1], 2 * self.action_dim)

    @property
    def observation_keys(self) -> tuple[str, ...]:
        """The keys of the observation the actor reads (``("observation",)`` without an encoder)."""
        return encoded_keys(self.encoder)

    def initial_state(self, agent_info: DictTensor, n: int) -> DictTensor:
        """The memory of ``n`` rows at an episode's start: ``h``, zeros ``[n, hidden[0]]``."""
        return DictTensor({"h": torch.zeros(n, self.memory.hidden_size, device=self.head.weight.device)})

    def gaussian(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(mean, log_std) ``[..., k]`` of the Gaussian before squashing, from the memory's outputs."""
        mean, log_std = self.head(self.body(features)).chunk(2, -1)
        return mean, log_std.clamp(LOG_STD_MIN, LOG_STD_MAX)

    def distribution(
        self, observation: Mapping[str, torch.Tensor] | DictTensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Not defined: the Gaussian depends on the steps before (``forward`` or ``sample_sequence``)."""
        raise TypeError(
            "RecurrentSquashedGaussianActor has a memory: its Gaussian depends on the steps before, so it "
            "acts with forward(state, ...) and learns with sample_sequence(batch, burn_in, generator)"
        )

    def forward(
        self,
        state: DictTensor,
        observation: DictTensor,
        agent_info: DictTensor,
        history: TemporalDictTensor | None = None,
    ) -> tuple[DictTensor, DictTensor]:
        """One step of B rows: the memory moves on, and the action is drawn from its Gaussian."""
        h = memory_step(self.memory, self.encoder, state["h"], observation)
        return self.act(*self.gaussian(h), agent_info), DictTensor({"h": h})

    def sample_sequence(self, batch: Trajectories, burn_in: int, generator: torch.Generator) -> SequenceDraw:
        """Reparameterised unit actions and log-probabilities at each step of chunks and one step further.

        The memory is replayed by ``replay_chunk`` (from the stored
        ``agent_state/h``, burn-in without gradients); the noise comes from
        ``generator``, on the parameters' device.

        Returns:
            ``(unit_action [B, T, k], log_prob [B, T], next_unit_action, next_log_prob)``.
        """
        out, after = replay_chunk(
            self.memory, self.encoder, batch, burn_in, "RecurrentSquashedGaussianActor.sample_sequence"
        )
        unit, log_prob = self.draw(*self.gaussian(out), generator)
        next_unit, next_log_prob = self.draw(*self.gaussian(after), generator)
        return unit, log_prob, next_unit, next_log_prob


class RecurrentTwinQ(torch.nn.Module):
    """A GRU over the observations, then two Q networks: the critics SAC builds with ``recurrent``.

    The memory (one GRU of ``hidden[0]`` units, shared by the pair) starts
    each replayed chunk from zeros and restarts at episode starts; its
    output and the unit action go through a ``TwinQ`` of ``hidden[1:]``
    units (``hidden`` again if there is one size).

    Args:
        obs_dim: the size of the flat observation under ``observation``.
        action_dim: the size of the action.
        hidden: the memory's size, then the sizes of each Q network's hidden layers.
        observation_spaces: instead of ``obs_dim``, the observation's keys and their spaces.
        encoder: instead of either, your own encoder module.

    Raises:
        TypeError: for an int ``hidden`` (a sequence of sizes is expected).
        ValueError: for no hidden size, or not exactly one of ``obs_dim``,
            ``observation_spaces`` and ``encoder``.
    """

    def __init__(
        self,
        obs_dim: int | None = None,
        action_dim: int = 1,
        hidden: Sequence[int] = (64, 64),
        observation_spaces: Mapping[str, ObservationSpace] | None = None,
        encoder: torch.nn.Module | None = None,
    ) -> None:
        super().__init__()
        check_layer_sizes("RecurrentTwinQ", hidden)  # the memory's size first
        self.encoder, obs_dim = observation_encoder("RecurrentTwinQ", obs_dim, observation_spaces, encoder)
        self.memory = torch.nn.GRU(obs_dim, hidden[0], batch_first=True)
        self.q = TwinQ(obs_dim=hidden[0], action_dim=action_dim, hidden=hidden[1:] or hidden)

    def features(self, batch: Trajectories, burn_in: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The memory ``[B, T, hidden[0]]`` at each step of chunks and one step further (``replay_chunk``)."""
        steps = batch.trajectories
        zeros = torch.zeros(steps.n_elems(), self.memory.hidden_size, device=self.q.weights[0].device)
        return replay_chunk(self.memory, self.encoder, batch, burn_in, "RecurrentTwinQ.features", zeros)

    def forward(self, features: torch.Tensor, unit_action: torch.Tensor) -> torch.Tensor:
        """Q of both networks ``[2, N]`` from N memory outputs ``[N, hidden[0]]`` and unit actions ``[N, k]``."""
        return self.q(features, unit_action)  # type: ignore[no-any-return]


class RecurrentSACLearner(SACLearner):
    """SAC's gradient step over replayed chunks; ``SACLearner`` with a memory in the actor and the critics.

    Args: as ``SACLearner``'s, with ``actor`` a ``RecurrentSACAgent`` and
    ``critic``/``target`` modules with ``features`` (as ``RecurrentTwinQ``).
    """

    def step_chunks(self, batch: Trajectories, learn: torch.Tensor, burn_in: int) -> dict[str, torch.Tensor]:
        """One update of the critics, then of the actor and the temperature, on chunks ``[B, T]``; in place.

        Args:
            batch: the chunks (``SequenceSample.batch``): the observations now
                and ``next/``, ``unit_action``, ``next/reward``,
                ``next/terminated``, ``initial_state``, and the actor's stored
                state in ``info``, on the networks' device.
            learn: ``[B, T]`` bool, the steps the losses count (valid, past the burn-in).
            burn_in: the first steps of each chunk, which only warm the memories.

        The actor's loss reads the critics' memory as it was before their
        step (it is not run a second time) through their heads as they are
        after it: one GRU pass fewer per step than rerunning the whole
        critics, which ``SACLearner.step`` does on transitions.

        Returns:
            0-d tensors, as ``SACLearner.step``'s, averaged over the learned steps.
        """
        steps = batch.trajectories
        counted = learn.to(torch.float32)
        n = counted.sum().clamp(min=1)
        actor = self.actor
        alpha = self.log_alpha.detach().exp()
        unit, log_prob, next_unit, next_log_prob = actor.sample_sequence(batch, burn_in, self.generator)  # type: ignore[attr-defined]
        with torch.no_grad():
            _, reached = self.target.features(batch, burn_in)  # type: ignore[operator]
            next_q = self.target(reached.flatten(0, 1), next_unit.detach().flatten(0, 1))
            target_q = soft_td_target(
                steps["next/reward"].flatten(),
                steps["next/terminated"].flatten(),
                next_q,
                next_log_prob.detach().flatten(),
                alpha,
                self.gamma,
            )
        features, _ = self.critic.features(batch, burn_in)  # type: ignore[operator]
        flat_features = features.flatten(0, 1)
        q = self.critic(flat_features, steps["unit_action"].flatten(0, 1))
        learned = learn.flatten()

        def counted_sum(x: torch.Tensor) -> torch.Tensor:  # over the learned steps: a NaN elsewhere stays out
            return torch.where(learned, x, torch.zeros((), dtype=x.dtype, device=x.device)).sum()

        critic_loss = 0.5 * counted_sum((q - target_q).pow(2)) / n

        def actor_losses() -> tuple[torch.Tensor, torch.Tensor]:
            q_pi = self.critic(flat_features.detach(), unit.flatten(0, 1)).min(0).values
            actor_loss = counted_sum(alpha * log_prob.flatten() - q_pi) / n
            return actor_loss, counted_sum(log_prob.flatten()) / n

        actor_loss, mean_log_prob = self.update(critic_loss, actor_losses)
        return {
            "critic_loss": critic_loss.detach(),
            "actor_loss": actor_loss,
            "alpha": alpha,
            "entropy": -mean_log_prob,
            "q": counted_sum(q.detach()) / (2 * n),
        }
