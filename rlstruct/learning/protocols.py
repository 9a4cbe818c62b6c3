"""What a learner needs of an agent: the on-policy protocol, its check, and the agent's outputs again.

A2C, PPO and IMPALA (``rlstruct.algos``) and the schemes' ``PPO`` and
``IMPALA`` (``rlstruct.distributed``) train any ``Agent`` that speaks
``OnPolicyAgent``; ``ActorCritic`` is one. ``check_on_policy_agent`` refuses
an agent that does not, naming what it lacks and the learner that needs it,
before any process starts; ``check_outputs`` does the same for the keys of
the first batch its agents collected. ``policy_outputs`` replays the agent
over stored steps, with gradients, the way every on-policy learner does.

Examples:
    >>> from rlstruct.learning import ActorCritic, check_on_policy_agent
    >>> check_on_policy_agent(ActorCritic(obs_dim=4, n_actions=2), "PPO")
    >>> check_on_policy_agent(torch.nn.Linear(4, 2), "PPO")
    Traceback (most recent call last):
    ...
    rlstruct.errors.AgentError: PPO trains an Agent (rlstruct.Agent), got a Linear
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol, cast, runtime_checkable

import torch

from rlstruct.agent import Agent, history_length, observation_keys, replay_agent
from rlstruct.dicttensor import DictTensor
from rlstruct.errors import AgentError, describe
from rlstruct.temporal import TemporalDictTensor
from rlstruct.trajectories import Trajectories

__all__ = [
    "ON_POLICY_METHODS",
    "ON_POLICY_OUTPUTS",
    "OnPolicyAgent",
    "check_chunk_agent",
    "check_chunk_outputs",
    "check_on_policy_agent",
    "check_outputs",
    "check_replayed_outputs",
    "check_step_values",
    "check_transition_agent",
    "checked_bootstrap_values",
    "clip_gradients",
    "is_sequential",
    "merge_observation_moments",
    "observation_moments",
    "policy_outputs",
    "update_obs_norm",
    "update_value_norm",
    "value_scale",
    "with_agent_info",
]


@runtime_checkable
class OnPolicyAgent(Protocol):
    """What A2C, PPO and IMPALA need of an agent, beside being an ``rlstruct.Agent``.

    Collection: every step's output holds ``log_prob`` (float32 ``[B]``, the
    log-probability of the action under ``action_key`` given the policy that
    chose it) and ``value`` (float32 ``[B]``, the value of the observation),
    beside what the environment reads (``action``).

    Learning: the learner replays the agent over stored steps with gradients
    (``policy_outputs``: one ``forward`` call on flat steps for an agent
    without state or history; ``replay_agent`` over whole rows otherwise,
    through ``forward_sequence`` where the agent has it) and asks the agent
    for the log-probability and entropy of the stored actions under those
    outputs, and for the values that bootstrap the returns.

    Optional, used when present: ``clip_grad_norm_(max_norm)`` (otherwise
    the gradients of all parameters are rescaled together),
    ``update_obs_norm(steps)`` (running observation statistics, called after
    each update with the batch it used; in a scheme,
    ``observation_moments(steps)`` where the batch is and
    ``merge_observation_moments(moments)`` where the update is),
    ``value_scale()`` and ``update_value_norm(target)`` (a value learned in
    units of its targets' running scale, PopArt; A2C divides the value error
    by the scale and calls the update after each step) and
    ``forward_sequence`` (one call over a ``[B, T]`` batch; see
    ``replay_agent``).

    ``ActorCritic`` implements this protocol; docs/agents.md writes another.
    """

    @property
    def action_key(self) -> str:
        """The output key of the action whose log-probability is stored ("action", or "raw_action" before a clamp)."""
        ...

    def action_log_prob(self, output: DictTensor, action: torch.Tensor) -> torch.Tensor:
        """log pi(action | output) ``[N]`` for N outputs of ``forward`` or ``forward_sequence``, flattened."""
        ...

    def action_entropy(self, output: DictTensor) -> torch.Tensor:
        """The entropy ``[N]`` of the policy of N outputs, flattened."""
        ...

    def bootstrap_values(self, batch: Trajectories) -> torch.Tensor:
        """V ``[B, T]`` of the observation reached after every step (``next/observation``), without gradients.

        A learner cuts it where an episode terminated; it counts where the
        episode was truncated or the row ends. An agent with state or history
        computes it from what it remembered after the step (stored outputs,
        ``batch.info``).
        """
        ...


ON_POLICY_METHODS = ("action_log_prob", "action_entropy", "bootstrap_values")
"""The methods ``OnPolicyAgent`` requires."""

ON_POLICY_OUTPUTS = ("log_prob", "value")
"""The output keys ``OnPolicyAgent`` requires at every step, beside its ``action_key``."""


def check_on_policy_agent(agent: object, learner: str) -> None:
    """Raise unless ``agent`` is an ``Agent`` with everything ``OnPolicyAgent`` requires.

    Args:
        agent: the agent (an instance) the learner is given.
        learner: the learner's name, for the message ("PPO", "the scheme's IMPALA").

    Raises:
        AgentError: (a TypeError) if ``agent`` is not an ``rlstruct.Agent``,
            or lacks one of ``ON_POLICY_METHODS`` or a str ``action_key``; the
            message names what is missing and the learner that needs it.
    """
    if not isinstance(agent, Agent):
        raise AgentError(f"{learner} trains an Agent (rlstruct.Agent), got {describe(agent)}")
    missing = [name for name in ON_POLICY_METHODS if not callable(getattr(agent, name, None))]
    if not isinstance(getattr(agent, "action_key", None), str):
        missing.insert(0, "action_key (a str attribute)")
    if missing:
        raise AgentError(
            f"{learner} cannot train {type(agent).__name__}: it lacks {', '.join(missing)} "
            "(see rlstruct.learning.OnPolicyAgent)"
        )


def check_outputs(agent: OnPolicyAgent, keys: Iterable[str] | TemporalDictTensor, learner: str) -> None:
    """Raise unless the outputs the agent stored hold what ``learner`` reads.

    Args:
        agent: the learner's agent.
        keys: the batch's keys, or its steps ``[B, T]``: then ``log_prob``
            and ``value`` must also be float32 ``[B, T]``, one number per
            step (a ``value`` of ``[B, T, 1]`` would broadcast against the
            returns in the losses).
        learner: the learner's name, for the message.

    Raises:
        AgentError: (a ValueError) naming the missing output keys, or the
            output of another shape or dtype, the agent and the learner.
    """
    stored = set(keys)
    needed = [agent.action_key, *ON_POLICY_OUTPUTS]
    missing = [key for key in needed if key not in stored]
    if missing:
        raise AgentError(
            f"{learner} cannot train {type(agent).__name__}: its outputs lack {missing} "
            f"(every step must output {needed}; see rlstruct.learning.OnPolicyAgent), got {sorted(stored)}"
        )
    if isinstance(keys, TemporalDictTensor):
        shape = (keys.n_elems(), keys.n_timesteps())
        for key in ON_POLICY_OUTPUTS:
            check_step_values(agent, learner, f"its output {key!r}", keys[key], shape)


def check_step_values(
    agent: object, learner: str, what: str, value: torch.Tensor, shape: tuple[int, ...]
) -> None:
    """Raise unless ``value`` (an agent's ``log_prob``, ``value`` or bootstrap values) is float32 of ``shape``.

    Raises:
        AgentError: (a ValueError) naming ``what``, the agent and the learner.
    """
    if value.dtype != torch.float32 or tuple(value.shape) != shape:
        raise AgentError(
            f"{learner} cannot train {type(agent).__name__}: {what} must be float32 {list(shape)}, one "
            f"number per step (see rlstruct.learning.OnPolicyAgent), got {value.dtype} {list(value.shape)}"
        )


def checked_bootstrap_values(agent: OnPolicyAgent, batch: Trajectories, learner: str) -> torch.Tensor:
    """``agent.bootstrap_values(batch)``, checked to be float32 ``[B, T]``.

    Raises:
        AgentError: (a ValueError) for values of another shape or dtype,
            naming ``bootstrap_values``, the agent and the learner.
    """
    values = agent.bootstrap_values(batch)
    steps = batch.trajectories
    what = f"{type(agent).__name__}.bootstrap_values(batch)"
    check_step_values(agent, learner, what, values, (steps.n_elems(), steps.n_timesteps()))
    return values


def check_transition_agent(agent: object, learner: str, missing: list[str], protocol: str) -> None:
    """Raise unless ``agent`` is an ``Agent`` that an off-policy learner (DQN, SAC) can replay step by step.

    Args:
        agent: the agent (an instance) the learner is given.
        learner: the learner's name, for the message.
        missing: what the learner found missing from the agent (empty if nothing).
        protocol: the protocol's full name, for the message.

    Raises:
        AgentError: (a TypeError) if ``agent`` is not an ``rlstruct.Agent``,
            ``missing`` names anything, or the agent asks for a history.
    """
    if not isinstance(agent, Agent):
        raise AgentError(f"{learner} trains an Agent (rlstruct.Agent), got {describe(agent)}")
    name = type(agent).__name__
    if missing:
        raise AgentError(f"{learner} cannot train {name}: it lacks {', '.join(missing)} (see {protocol})")
    if history_length(agent) is not None:
        raise AgentError(
            f"{learner} cannot train {name}: it asks for a history, and {learner} replays single transitions"
        )


def check_chunk_agent(agent: object, learner: str, missing: list[str], protocol: str) -> None:
    """Raise unless ``agent`` is an ``Agent`` with a state that an off-policy learner with ``recurrent`` replays.

    Args:
        agent: the agent (an instance) the learner is given.
        learner: the learner's name, for the message.
        missing: what the learner found missing from the agent (empty if nothing).
        protocol: the protocol's full name, for the message.

    Raises:
        AgentError: (a TypeError) if ``agent`` is not an ``rlstruct.Agent``,
            ``missing`` names anything, or its ``initial_state`` is empty
            (chunks are replayed from the state stored at their start).
    """
    if not isinstance(agent, Agent):
        raise AgentError(f"{learner} trains an Agent (rlstruct.Agent), got {describe(agent)}")
    name = type(agent).__name__
    if missing:
        raise AgentError(
            f"{learner} with recurrent cannot train {name}: it lacks {', '.join(missing)} (see {protocol})"
        )
    if agent.initial_state(DictTensor(batch_size=1), 1).empty():
        raise AgentError(
            f"{learner} with recurrent cannot train {name}: it keeps no state (its initial_state is empty), "
            "and chunks are replayed from the state stored at their start"
        )


def check_replayed_outputs(agent: object, batch: Trajectories, learner: str, needed: Sequence[str]) -> None:
    """Raise unless the first batch of an off-policy learner's agent (DQN, SAC) is one it can replay.

    Args:
        agent: the learner's agent.
        batch: the first batch its copies collected.
        learner: the learner's name, for the message.
        needed: the output keys the learner stores (``("action",)`` for DQN).

    Raises:
        AgentError: (a ValueError) if the agent kept a state (off-policy
            learners replay single transitions, not rows of a memory), or its
            outputs lack one of ``needed``.
    """
    name = type(agent).__name__
    state = batch.info.truncate_key("agent_state/")
    if not state.empty():
        raise AgentError(
            f"{learner} cannot train {name}: it keeps a state {sorted(state.keys())}, and {learner} "
            "replays single transitions (give it no initial_state, or train it with ppo, a2c or impala; "
            "dqn and sac with --recurrent replay a memory)"
        )
    stored = set(batch.trajectories.keys())
    missing = [key for key in needed if key not in stored]
    if missing:
        raise AgentError(
            f"{learner} cannot train {name}: its outputs lack {missing} (every step must output "
            f"{list(needed)}), got {sorted(stored)}"
        )


def check_chunk_outputs(agent: object, batch: Trajectories, learner: str, needed: Sequence[str]) -> None:
    """Raise unless the first batch of an off-policy learner's recurrent agent (``--recurrent``) can be replayed.

    Args:
        agent: the learner's agent.
        batch: the first batch its copies collected.
        learner: the learner's name, for the message.
        needed: the output keys the learner stores.

    Raises:
        AgentError: (a ValueError) if the agent kept no state (chunks are
            replayed from the state stored at their start), or its outputs
            lack one of ``needed``.
    """
    name = type(agent).__name__
    if batch.info.truncate_key("agent_state/").empty():
        raise AgentError(
            f"{learner} with recurrent cannot train {name}: it keeps no state (initial_state is empty), and "
            "chunks are replayed from the state stored at their start (train it without --recurrent)"
        )
    stored = set(batch.trajectories.keys())
    missing = [key for key in needed if key not in stored]
    if missing:
        raise AgentError(f"{learner} cannot train {name}: its outputs lack {missing}, got {sorted(stored)}")


def is_sequential(agent: OnPolicyAgent | Agent, batch: Trajectories) -> bool:
    """Whether ``agent`` must be replayed over whole rows: it has a state (stored in ``batch.info``) or a history."""
    return (
        not batch.info.truncate_key("agent_state/").empty() or history_length(cast(Agent, agent)) is not None
    )


def with_agent_info(batch: Trajectories) -> TemporalDictTensor:
    """The steps of ``batch`` ``[B, T]`` with z of every row repeated at each of its steps (``agent_info/...``).

    What ``policy_outputs`` needs of flat steps, once flattened; the steps
    themselves are returned when z is empty.
    """
    steps = batch.trajectories
    z = batch.info.truncate_key("agent_info/")
    if z.empty():
        return steps
    t = steps.n_timesteps()
    data = dict(steps.items())
    for key, value in z.items():
        data[f"agent_info/{key}"] = value.unsqueeze(1).expand(-1, t, *value.shape[1:])
    return TemporalDictTensor(data, steps.lengths)


def policy_outputs(agent: OnPolicyAgent | Agent, data: Trajectories | DictTensor) -> DictTensor:
    """The agent's outputs again, with gradients, for N stored steps, flattened to ``[N, ...]``.

    Args:
        agent: the learner's agent.
        data: whole rows (``Trajectories``, replayed by ``replay_agent`` from
            their stored state and history; the valid steps are returned, row
            by row), or flat steps (a ``DictTensor`` of N steps, for an agent
            without state or history: one ``forward`` call with z from the
            steps' ``agent_info/`` keys, see ``with_agent_info``).

    Returns:
        The outputs, one row per step; for rows, the valid steps in the
        order of ``masked_flatten``.
    """
    module = cast(Agent, agent)
    if isinstance(data, Trajectories):
        return replay_agent(module, data).masked_flatten()
    keys = observation_keys(data)
    z = data.truncate_key("agent_info/")
    output: DictTensor = module(DictTensor(batch_size=data.n_elems()), data.get(keys), z)[0]
    return output


def clip_gradients(agent: OnPolicyAgent | torch.nn.Module, max_norm: float) -> None:
    """Rescale the agent's gradients to ``max_norm``: its own ``clip_grad_norm_`` if it has one, else all together."""
    own = getattr(agent, "clip_grad_norm_", None)
    if callable(own):
        own(max_norm)
    else:
        torch.nn.utils.clip_grad_norm_(cast(torch.nn.Module, agent).parameters(), max_norm)


def update_obs_norm(agent: object, steps: TemporalDictTensor) -> None:
    """Call the agent's ``update_obs_norm(steps)`` if it has one (running observation statistics); else nothing."""
    own = getattr(agent, "update_obs_norm", None)
    if callable(own):
        own(steps)


def value_scale(agent: object) -> torch.Tensor | None:
    """The agent's ``value_scale()`` (the scale its value is learned in) if it has the method, else None."""
    own = getattr(agent, "value_scale", None)
    scale: torch.Tensor | None = own() if callable(own) else None
    return scale


def update_value_norm(agent: object, target: torch.Tensor) -> None:
    """Call the agent's ``update_value_norm(target)`` if it has one (a value's running scale); else nothing."""
    own = getattr(agent, "update_value_norm", None)
    if callable(own):
        own(target)


def observation_moments(agent: object, steps: TemporalDictTensor) -> dict[str, torch.Tensor] | None:
    """The agent's ``observation_moments(steps)`` if it has the method (running statistics), else None."""
    own = getattr(agent, "observation_moments", None)
    moments: dict[str, torch.Tensor] | None = own(steps) if callable(own) else None
    return moments


def merge_observation_moments(agent: object, moments: dict[str, torch.Tensor] | None) -> None:
    """Call the agent's ``merge_observation_moments(moments)``, when it has the method and ``moments`` is not None."""
    own = getattr(agent, "merge_observation_moments", None)
    if moments is not None and callable(own):
        own(moments)
