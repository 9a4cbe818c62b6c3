"""Agent: a policy with internal state, parametrised by agent_info z, and replay_agent.

An ``Agent`` is a ``torch.nn.Module`` whose ``forward`` takes the agent's
state, the current observation and the agent_info z of every row, and returns
its output (which must hold the key ``action``) and its new state. Batchers
call it on whole batches under ``torch.no_grad()``; ``replay_agent`` calls it
again over stored trajectories, with gradients, to compute losses.

Examples:
    >>> import torch
    >>> from rlstruct import Agent, DictTensor
    >>> class EpsilonGreedy(Agent):
    ...     def forward(self, state, observation, agent_info, history=None):
    ...         n = observation.n_elems()
    ...         explore = torch.rand(n, generator=self.generator) < agent_info["epsilon"]
    ...         random = torch.randint(0, 2, (n,), generator=self.generator)
    ...         greedy = (observation["observation"][:, 0] > 0).long()
    ...         return DictTensor({"action": torch.where(explore, random, greedy)}), state
    >>> agent = EpsilonGreedy()
    >>> agent.seed(0)
    >>> z = DictTensor({"epsilon": torch.tensor([0.0, 0.0])})
    >>> obs = DictTensor({"observation": torch.tensor([[1.0], [-1.0]])})
    >>> action, state = agent(agent.initial_state(z, 2), obs, z)
    >>> action["action"]
    tensor([1, 0])
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch

from rlstruct.checks import is_int
from rlstruct.dicttensor import DictTensor
from rlstruct.errors import AgentError, describe
from rlstruct.history import history_windows
from rlstruct.temporal import TemporalDictTensor
from rlstruct.trajectories import Trajectories

__all__ = ["Agent", "act", "history_length", "observation_keys", "replay_agent"]


class Agent(torch.nn.Module, ABC):
    """A policy with internal state, called on a batch of rows at a time.

    Subclasses implement ``forward`` and, if they carry state (a recurrent
    agent), ``initial_state``. Call ``super().__init__()`` first in
    ``__init__``, as for any module.

    Randomness should come from ``self.generator`` (a ``torch.Generator`` that
    batchers seed through ``seed``), so that the same seeds give the same
    trajectories whatever else the process does with torch's global generator.

    Weights are loaded with ``load_state_dict``, which is what batchers'
    ``update(weights)`` calls.
    """

    generator: torch.Generator

    def __init__(self) -> None:
        super().__init__()
        self.generator = torch.Generator()

    def initial_state(self, agent_info: DictTensor, n: int) -> DictTensor:
        """The state of ``n`` rows at the start of an episode.

        Args:
            agent_info: z for those rows (``n`` rows).
            n: the number of rows.

        Returns:
            A DictTensor of ``n`` rows on the agent's device; by default an
            empty one (a stateless agent).
        """
        return DictTensor(batch_size=n)

    @abstractmethod
    def forward(
        self,
        state: DictTensor,
        observation: DictTensor,
        agent_info: DictTensor,
        history: TemporalDictTensor | None = None,
    ) -> tuple[DictTensor, DictTensor]:
        """Act on a batch of B rows.

        Args:
            state: the agent's state of every row (B rows, the keys of
                ``initial_state``). Rows whose episode has just begun hold the
                output of ``initial_state``.
            observation: the observation of every row (B rows). Its bool key
                ``initial_state`` marks the first step of an episode. Its
                tensors may be views of the batcher's storage, which later
                batches overwrite: clone a tensor to keep it in the state.
                Do not modify them in place.
            agent_info: z of every row (B rows).
            history: None for agents whose ``require_history()`` is False.
                Otherwise the previous steps of each row's current episode,
                ``[B, L, ...]``, left-aligned (row b holds its
                ``history.lengths[b]`` most recent steps, oldest first, then
                zeros), with the keys of a stored step (the observation and
                output keys) at every step, even when all lengths are 0. It
                never reaches back past an episode start (a step whose
                ``initial_state`` is True sees an empty window). L is n for
                ``require_history() == n``; t at step t of an ``execute()``
                for True. See docs/agents.md, "History". Do not modify it
                in place.

        Returns:
            ``(output, new_state)``: ``output`` has B rows and the key
            ``action``, plus anything else worth storing (log-probabilities,
            values, activations); ``new_state`` has B rows and the keys,
            dtypes and shapes of ``initial_state``.
        """

    def forward_sequence(
        self,
        state: DictTensor,
        observation: TemporalDictTensor,
        agent_info: DictTensor,
        history: TemporalDictTensor | None = None,
    ) -> TemporalDictTensor | None:
        """Optionally, the agent's outputs over a whole ``[B, T]`` batch in one call.

        ``replay_agent`` calls it first and steps through time with
        ``forward`` only when it returns None (the default). Override it to
        replay faster than T calls of ``forward``: a recurrent cell over the
        whole sequence, restarted where an episode begins; a causal window for
        attention over the history.

        Args:
            state: the state before step 0 (B rows, the keys of ``initial_state``).
            observation: the observations of every step, ``[B, T, ...]``, with
                the keys ``forward`` saw (the environment's keys, not the
                agent's stored outputs) and the batch's lengths. Its bool key
                ``initial_state`` marks where an episode begins: the state
                must restart from ``initial_state`` there, as in collection.
            agent_info: z of every row (B rows).
            history: for an agent wanting the last n steps, the window
                before step 0 that collection recorded (``[B, n, ...]``, every
                stored key but the ``next/`` ones, left-aligned with its
                lengths); None for other agents (with ``True`` there is
                nothing before step 0). ``rlstruct.history.history_windows``
                turns it and the steps into the window before every step.

        Returns:
            None to let ``replay_agent`` step through time, or the outputs
            ``[B, T, ...]`` with ``observation``'s lengths: at least the keys
            the agent's losses need (it may skip sampling, and so ``action``).
        """
        return None

    def require_history(self) -> bool | int:
        """Whether ``forward`` wants the history of the trajectory.

        Returns:
            False (the default: no history, and no work per step); a positive
            int n: the last n steps of the current episode, in a window of
            fixed length n that batchers keep across ``execute()`` calls in
            "fixed" mode; True: every step of the current episode since the
            start of the current ``execute()`` (unbounded, so not kept
            across calls).
        """
        return False

    def seed(self, seed: int) -> None:
        """Seed ``self.generator``. Batchers call it once per agent copy.

        Args:
            seed: an int (a Python or NumPy int), as ``torch.Generator.manual_seed`` takes.

        Raises:
            TypeError: if ``seed`` is not an int.
        """
        if not is_int(seed):
            raise TypeError(f"{type(self).__name__}.seed: seed must be an int, got {describe(seed)}")
        self.generator.manual_seed(int(seed))

    def close(self) -> None:
        """Release resources held outside the module (files, simulators). Safe to call twice."""


def act(
    owner: str,
    agent: Agent,
    state: DictTensor,
    observation: DictTensor,
    agent_info: DictTensor,
    history: TemporalDictTensor | None = None,
) -> tuple[DictTensor, DictTensor]:
    """``agent(state, observation, agent_info, history)``, checked to be the pair ``(output, new_state)``.

    Args:
        owner: who calls, named in the error ("group 0", "replay_agent").

    Raises:
        AgentError: if the agent returns anything but a tuple of two values (a
            ``forward`` that returns only its output, say); the types of the
            two are the caller's to check.
    """
    returned = agent(state, observation, agent_info, history)
    if type(returned) is not tuple or len(returned) != 2:
        raise AgentError(
            f"{owner}: {type(agent).__name__}.forward must return (output, new_state), two DictTensors, "
            f"got {describe(returned)}"
        )
    return returned


def reset_finished_states(
    agent: Agent, state: DictTensor, observation: DictTensor, agent_info: DictTensor
) -> DictTensor:
    """Replace the state of the rows that start an episode with ``agent.initial_state``.

    Rows whose ``observation["initial_state"]`` is True get a fresh state; the
    others keep theirs. Returns ``state`` itself when the agent is stateless,
    or, on the CPU, when no row starts an episode (on another device the
    rows are selected without asking the device whether any starts).

    Raises:
        TypeError, ValueError: if ``state`` no longer has the keys, dtypes or
            per-row shapes of ``agent.initial_state`` (the agent changed them).
    """
    if state.empty():
        return state
    starting = observation["initial_state"]
    if starting.device.type == "cpu" and not bool(starting.any()):  # elsewhere: no wait for the device
        return state
    initial = agent.initial_state(agent_info, state.n_elems())
    try:
        return DictTensor.where(starting, initial, state)
    except (TypeError, ValueError) as error:  # where's message names neither the agent nor its state
        raised = TypeError if isinstance(error, TypeError) else ValueError
        raise raised(
            f"{type(agent).__name__}: its state no longer fits its initial_state, where an episode "
            f"starts ({error}); a new state keeps the keys, dtypes and shapes of initial_state"
        ) from error


def history_length(agent: Agent) -> int | None:
    """How many previous steps ``agent`` wants: None for none, -1 for all, n for the last n.

    Raises:
        ValueError: if ``require_history()`` returns anything but a bool or a positive int.
    """
    wanted = agent.require_history()
    if wanted is False:
        return None
    if wanted is True:
        return -1
    if is_int(wanted) and wanted > 0:
        return int(wanted)  # a NumPy int too
    raise ValueError(
        f"{type(agent).__name__}.require_history() must return a bool or a positive int, got {wanted!r}"
    )


def observation_keys(steps: DictTensor | TemporalDictTensor) -> list[str]:
    """The keys of stored steps that the agent observed: the environment's, those that also have a ``next/`` version.

    The agent's own stored outputs (``action``, ``value``...) have none, so
    they are left out. ``replay_agent`` gives the agent these keys.
    """
    return [k for k in steps if not k.startswith("next/") and f"next/{k}" in steps]


def _window_before(batch: Trajectories, length: int) -> TemporalDictTensor | None:
    """The window before step 0 that collection recorded in ``batch.info`` (None for ``True``: nothing before).

    Raises:
        ValueError: if ``batch.info`` lacks it, or holds no key, keys the steps do not have, or another
            number of steps.
    """
    if length < 0:
        return None
    info, steps = batch.info, batch.trajectories
    if "history_length" not in info:
        raise ValueError(
            f"replay_agent: the agent wants the last {length} steps, but batch.info has no 'history_length' "
            "(with 'history/<key>', the window before step 0 that batchers record)"
        )
    before = TemporalDictTensor(info.truncate_key("history/"), info["history_length"])
    stored = sorted(k for k in steps if not k.startswith("next/"))
    if not before.keys() or not set(before.keys()) <= set(stored) or before.n_timesteps() != length:
        raise ValueError(
            f"replay_agent: batch.info's window before step 0 has the keys {sorted(before.keys())} and "
            f"{before.n_timesteps()} steps; the agent wants {length} steps of (some of) {stored}"
        )
    return before


def _replay_windows(
    batch: Trajectories, length: int, before: TemporalDictTensor | None
) -> TemporalDictTensor:
    """The window before every step (``B * T`` rows, see ``history_windows``), as collection made them.

    ``before`` is the window before step 0 (``_window_before``). Windows hold every key collection
    stored but the ``next/`` ones, whatever the agent is given as observation: the keys of ``before``
    (keys a learner added to the steps since, such as advantages, are left out).
    """
    steps = batch.trajectories
    keys = [k for k in steps if not k.startswith("next/")] if before is None else list(before.keys())
    observed = steps.get(keys)
    starts = observed["initial_state"]
    if length < 0:  # True: the steps of this trajectory only, nothing before
        return history_windows(None, observed, starts, observed.n_timesteps())
    return history_windows(before, observed, starts, length)


def _check_replayed(agent: Agent, replayed: object, steps: TemporalDictTensor) -> None:
    """Raise ``AgentError`` unless ``forward_sequence`` returned ``[B, T, ...]`` outputs of ``forward``'s shapes.

    An output the steps hold from collection (not one of the environment's
    keys) must have the shape ``forward`` gave it there (a few attribute
    reads).
    """
    name, b, t = type(agent).__name__, steps.n_elems(), steps.n_timesteps()
    if not isinstance(replayed, TemporalDictTensor) or replayed.n_elems() != b or replayed.n_timesteps() != t:
        raise AgentError(
            f"{name}.forward_sequence must return None or a TemporalDictTensor [{b}, {t}, ...], got {replayed!r}"
        )
    observed = set(observation_keys(steps))  # the environment's keys: a prediction of one may have any shape
    for key, value in replayed.items():
        if key in observed or key.startswith("next/") or key not in steps:
            continue
        if value.shape[2:] != steps[key].shape[2:]:
            raise AgentError(
                f"{name}.forward_sequence: its output {key!r} has shape {list(value.shape)}, but the steps "
                f"hold it from forward with shape {list(steps[key].shape)}; both must give the same outputs"
            )


def _check_window_keys(agent: Agent, output: DictTensor, windows: TemporalDictTensor) -> None:
    """Raise unless the replayed windows hold the agent's outputs, as the windows of collection did."""
    missing = sorted(k for k in output if k not in windows)
    if missing:
        raise ValueError(
            f"replay_agent: {type(agent).__name__} outputs {missing}, which its history windows held at "
            f"collection, but the stored steps lack them (they hold {sorted(windows.keys())}); for an agent "
            "with a history, store every key of the steps (a buffer's add(batch, keys=...) dropped them?)"
        )


def replay_agent(agent: Agent, batch: Trajectories, *, stateless: bool | None = None) -> TemporalDictTensor:
    """Re-run ``agent`` over stored trajectories, with gradients.

    The agent sees what it saw when the trajectories were collected: at step
    t, the stored observation of step t (the environment's keys: those that
    also have a ``next/`` version; not the agent's own stored outputs), z
    from ``batch.info["agent_info/..."]``, and a state that starts from
    ``batch.info["agent_state/..."]``, is carried from step to step, and is
    reset with ``initial_state`` where an episode begins. A history agent
    gets the windows it got then: for ``require_history() == n`` they start
    from ``batch.info["history/..."]`` and ``["history_length"]`` (the
    window before step 0) and never cross an episode start.

    Three ways, the first that applies:

    1. ``stateless=True``: one ``forward`` call on all ``B x T`` steps
       flattened into one batch (for agents without state or history).
    2. ``agent.forward_sequence(...)``, if it returns outputs (one call over
       the whole ``[B, T]`` batch, as the agent defines it).
    3. ``stateless=None`` (the default) and an agent without state and
       history: the flattened call of 1; otherwise ``forward`` step by step.

    Args:
        agent: the agent, usually the learner's copy with the current weights.
        batch: trajectories from a batcher (see the layout in the batchers'
            documentation).
        stateless: True forces the flattened call, False forbids it; None
            (the default) chooses as above.

    Returns:
        The agent's outputs, ``[B, T, ...]`` per key, with the lengths of
        ``batch``. Values at padding steps are whatever the agent computed
        there; mask them (``mask()``) in losses.

    Raises:
        TypeError: if ``agent`` is not an ``Agent``, ``batch`` not
            ``Trajectories`` or ``stateless`` not a bool or None.
        ValueError: if ``stateless`` is True for an agent with state or
            history, if the batch has no time steps, if the steps of an
            agent with state or history lack ``initial_state``, if ``batch.info``
            lacks the window before step 0 (or has other keys or steps) for
            an agent wanting the last n steps, or if the steps lack an
            output of a history agent (which its windows held at collection).
        AgentError: (a TypeError) if ``forward_sequence`` returns something
            else than None or a TemporalDictTensor of the batch's rows and
            steps, or an output that the steps hold from collection with
            another shape (a ``logits`` of another width).
    """
    if not isinstance(agent, Agent):
        raise TypeError(f"replay_agent: agent must be an Agent, got {describe(agent)}")
    if not isinstance(batch, Trajectories):
        # batch.trajectories alone lacks the stored state and agent_info that the replay starts from
        hint = ", the whole batch, not batch.trajectories" if isinstance(batch, TemporalDictTensor) else ""
        raise TypeError(
            f"replay_agent: batch must be Trajectories (what a batcher's get() returns{hint}), "
            f"got {describe(batch)}"
        )
    if stateless is not None and not isinstance(stateless, bool):
        raise TypeError(f"replay_agent: stateless must be True, False or None, got {describe(stateless)}")
    info, steps = batch.info, batch.trajectories
    agent_info = info.truncate_key("agent_info/")
    state = info.truncate_key("agent_state/").clone()  # a copy: agents may update their state in place
    observation = steps.get(observation_keys(steps))
    length = history_length(agent)
    b, n_timesteps = steps.n_elems(), steps.n_timesteps()
    if n_timesteps == 0:
        raise ValueError("replay_agent: the trajectories have no time steps")
    if stateless and (not state.empty() or length is not None):
        raise ValueError(
            "replay_agent: stateless=True needs an agent without state and history, got state keys "
            f"{list(state.keys())} and require_history() = {agent.require_history()!r}"
        )
    if (not state.empty() or length is not None) and "initial_state" not in observation:
        raise ValueError(
            f"replay_agent: {type(agent).__name__} has a state or a history, which restart where an "
            "episode begins, but the steps hold no observed 'initial_state' (a bool [B, T] with its "
            f"'next/initial_state', as a batcher stores them); they hold {sorted(steps.keys())}"
        )
    before = None if length is None else _window_before(batch, length)
    if not stateless:
        replayed = agent.forward_sequence(state, observation, agent_info, before)
        if replayed is not None:
            _check_replayed(agent, replayed, steps)
            return replayed
    if stateless or (stateless is None and state.empty() and length is None):
        flat = DictTensor({k: v.flatten(0, 1) for k, v in observation.items()})
        z = agent_info.index(torch.arange(b).repeat_interleave(n_timesteps))
        output, _ = act("replay_agent", agent, DictTensor(batch_size=b * n_timesteps), flat, z)
        data = {k: v.unflatten(0, (b, n_timesteps)) for k, v in output.items()}
        return TemporalDictTensor(data, steps.lengths)
    windows = None if length is None else _replay_windows(batch, length, before)
    first_rows = torch.arange(b) * n_timesteps  # window of step t of row r: row r * T + t
    columns = {k: v.unbind(1) for k, v in observation.items()}
    outputs = []
    for t in range(n_timesteps):
        at_t = DictTensor({k: v[t] for k, v in columns.items()})
        state = reset_finished_states(agent, state, at_t, agent_info)
        window = None
        if windows is not None:
            window = windows.index(first_rows + t)
            window = window.temporal_slice(0, t) if length == -1 else window
        output, state = act("replay_agent", agent, state, at_t, agent_info, window)
        if t == 0 and windows is not None:
            _check_window_keys(agent, output, windows)
        outputs.append(output)
    return TemporalDictTensor(DictTensor.stack(outputs, dim=1), steps.lengths)
