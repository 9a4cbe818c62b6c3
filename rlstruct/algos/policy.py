"""Policy: an agent acting on one raw observation at a time, outside a batcher, and its export.

Batchers run an agent on batches of rows, keyed as ``GymEnv`` stores them. A
deployed policy meets one environment and its raw observations instead: a
numpy array, or a dict or tuple of them for a ``Dict`` or ``Tuple`` space.
``Policy`` turns each into the one-row ``DictTensor`` a batcher would have
handed the agent (the keys of ``rlstruct.gym_env.observation_spaces``, plus
``initial_state``), calls the agent with the z of evaluations (``greedy``
True; or False, to sample), carries the agent's state and history window
from call to call until ``reset()``, and returns the action as the
environment's ``step`` takes it. ``Policy.from_run`` makes one from a run
directory (``load_run``).

``Policy.export`` writes the greedy policy as a ``torch.export`` program
(``.pt2``) that ``torch.export.load`` runs without rlstruct: the
deployment file.

Examples:
    >>> import gymnasium as gym
    >>> import torch
    >>> from rlstruct.algos import Policy
    >>> from rlstruct.learning.actor_critic import ActorCritic
    >>> env = gym.make("CartPole-v1")
    >>> _ = torch.manual_seed(0)
    >>> policy = Policy(ActorCritic(obs_dim=4, n_actions=2), env.observation_space)
    >>> observation, _ = env.reset(seed=0)
    >>> action = policy.act(observation)
    >>> action.dtype, env.action_space.contains(action)
    (dtype('int64'), True)
    >>> observation, reward, terminated, truncated, _ = env.step(action)
    >>> policy.act(observation[:2])
    Traceback (most recent call last):
        ...
    ValueError: Policy.act: observation must have shape (4,) and dtype torch.float32, as its box space declares; got shape (2,)
    >>> env.close()
"""

from __future__ import annotations

import copy
import itertools
import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from rlstruct.agent import Agent, act, history_length
from rlstruct.algos.evaluation import env_spaces
from rlstruct.algos.saved import SavedRun, load_run
from rlstruct.checks import check_int
from rlstruct.dicttensor import DictTensor
from rlstruct.errors import describe
from rlstruct.gym_env import observation_spaces
from rlstruct.history import empty_window, window_after
from rlstruct.specs import ObservationSpace
from rlstruct.temporal import TemporalDictTensor

__all__ = ["Policy"]

_DISCRETE = ("discrete", "multidiscrete")
"""The kinds whose values are integers of any width (an environment's ints), stored as their space's dtype."""


def _device(agent: torch.nn.Module) -> torch.device:
    """The device of the agent's first parameter or buffer; the CPU for an agent without either."""
    first = next(itertools.chain(agent.parameters(), agent.buffers()), None)
    return torch.device("cpu") if first is None else first.device


def _path(key: str, composite: bool) -> str:
    """How an error names the entry of a raw observation: ``observation``, ``observation['pos']``, ``[...][0]``."""
    if not composite:
        return "observation"
    return "observation" + "".join(f"[{int(p)}]" if p.isdigit() else f"[{p!r}]" for p in key.split("/"))


class Policy:
    """An agent acting on one raw observation at a time: what a gymnasium loop or a deployment needs.

    Each ``act`` gives the agent what a batcher running one environment
    would: the observation as one row under the keys ``GymEnv`` stores (no
    ``reward``, ``done`` or ``last_action``, which a policy does not see),
    ``initial_state`` True at the first step after ``reset()``, the agent's
    state carried from the previous step (``initial_state`` of the agent at
    an episode's first step), and, for an agent that asks for one, its
    history window: the previous steps of the episode, each with the keys
    the policy has of it (the observation's, ``initial_state`` and the
    agent's outputs), the last n for ``require_history() == n``, all of them
    for True. The agent's output keys are learnt from one call before the
    first step, whose effects are undone, as batchers do. Calls run under
    ``torch.no_grad()``.

    Args:
        agent: the agent, used as it is (not copied): an update of its
            weights reaches the next ``act``. Observations are moved to the
            device of its parameters.
        observation_space: the environment's observation space
            (``env.observation_space``), or its keys and their
            ``ObservationSpace`` (``EnvSpaces.observation``).
        greedy: act deterministically: every call's z holds ``greedy`` True,
            as evaluations do (the agents of the algorithms then take their
            most likely action, or their mean). False samples, from the
            agent's generator (``agent.seed`` seeds it).
        agent_info: more of z for the one row (a ``DictTensor`` of one row,
            without ``greedy``), for an agent that reads other keys.

    Raises:
        TypeError: if ``agent`` is not an ``rlstruct.Agent``,
            ``observation_space`` neither a gymnasium space nor a mapping of
            str to ``ObservationSpace`` (or a space ``GymEnv`` cannot store),
            ``greedy`` not a bool, or ``agent_info`` not a DictTensor.
        ValueError: if ``observation_space`` has no key, ``agent_info`` has
            another number of rows than 1 or the key ``greedy``, or the agent
            asks for a history in a way ``require_history`` does not allow.
    """

    def __init__(
        self,
        agent: Agent,
        observation_space: gym.Space[Any] | Mapping[str, ObservationSpace],
        *,
        greedy: bool = True,
        agent_info: DictTensor | None = None,
    ) -> None:
        if not isinstance(agent, Agent):
            raise TypeError(f"Policy: agent must be an rlstruct.Agent, got {describe(agent)}")
        if isinstance(observation_space, gym.Space):
            spaces = observation_spaces(observation_space)
        elif isinstance(observation_space, Mapping) and all(
            isinstance(k, str) and isinstance(v, ObservationSpace) for k, v in observation_space.items()
        ):
            spaces = dict(observation_space)
        else:
            raise TypeError(
                "Policy: observation_space must be a gymnasium space or a mapping of str to "
                f"ObservationSpace, got {describe(observation_space)}"
            )
        if not spaces:
            raise ValueError("Policy: observation_space must have at least one key, got an empty mapping")
        if not isinstance(greedy, bool):
            raise TypeError(f"Policy: greedy must be a bool, got {describe(greedy)}")
        if agent_info is None:
            agent_info = DictTensor(batch_size=1)
        if not isinstance(agent_info, DictTensor):
            raise TypeError(f"Policy: agent_info must be a DictTensor of one row, got {describe(agent_info)}")
        if agent_info.n_elems() != 1 or "greedy" in agent_info:
            raise ValueError(
                "Policy: agent_info must be a DictTensor of one row without the key 'greedy' (give greedy=), "
                f"got {agent_info.n_elems()} rows with the keys {list(agent_info.keys())}"
            )
        self.agent = agent
        """The agent that acts (not a copy)."""
        self.spaces: dict[str, ObservationSpace] = spaces
        """The observation's keys, as ``GymEnv`` stores them, and their spaces."""
        self.greedy = greedy
        """Whether the agent acts greedily (z's ``greedy`` is True)."""
        self._extra_info = agent_info
        self._agent_info = self._z(greedy, 1)
        self._history = history_length(agent)  # None, -1 (every step) or n
        self._window_spec: dict[str, tuple[torch.dtype, tuple[int, ...]]] | None = None
        self.reset()

    @classmethod
    def from_run(cls, run: SavedRun | str | os.PathLike[str], *, greedy: bool = True) -> Policy:
        """The policy of a run: its trained agent (``load_run``) on its environment's observations.

        Args:
            run: a ``SavedRun``, or what ``load_run`` takes (a run directory).
            greedy: see ``Policy``.

        Raises:
            FileNotFoundError: if the run directory or one of its files is
                missing (see ``load_run``).
            ValueError: if the run cannot be rebuilt (see ``load_run``).
        """
        saved = run if isinstance(run, SavedRun) else load_run(run)
        return cls(saved.agent, env_spaces(saved.config.env).observation, greedy=greedy)

    def _z(self, greedy: bool, n: int) -> DictTensor:
        """z of ``n`` rows: ``agent_info``'s row repeated, and ``greedy``."""
        extra = self._extra_info.index(torch.zeros(n, dtype=torch.int64))
        return extra | DictTensor({"greedy": torch.full((n,), greedy)})

    @property
    def state(self) -> DictTensor | None:
        """The agent's state after the last ``act`` (one row), or None before the first step of an episode."""
        return self._state

    def reset(self) -> None:
        """Start a new episode: the next ``act`` is its first step (the agent's state and history start anew).

        Call it after the environment's ``reset``. Safe to call twice.
        """
        self._state: DictTensor | None = None
        self._window: TemporalDictTensor | None = None
        self._steps: list[DictTensor] = []

    def act(self, observation: Any) -> Any:
        """The agent's action on one raw observation, in the form the environment's ``step`` takes.

        Args:
            observation: one observation as the environment returns it, not
                batched: a numpy array, a tensor or a number for a Box,
                Discrete, MultiDiscrete or MultiBinary space; a dict (Dict
                space) or a tuple (Tuple space) of them, nested as the
                space. Each entry must have the shape and dtype its space
                declares (nothing is cast), except that a Discrete or
                MultiDiscrete entry may be of any integer dtype.

        Returns:
            The agent's ``action`` for the row, copied to a numpy array on
            the CPU with its dtype and shape (float32 ``[k]`` for a Box
            action, int64 ``[k]`` for a MultiDiscrete or MultiBinary one), or
            a numpy scalar for a 0-d action (``np.int64`` for a Discrete
            one): what ``GymEnv`` takes for the environment's ``step`` (it
            converts a multi-discrete action to the space's integer dtype).

        Raises:
            TypeError: if ``observation`` (or an entry of it) is not of a
                type or dtype its space allows; the message names the entry,
                what was expected and what was received.
            ValueError: if ``observation`` lacks an entry, an entry has
                another shape than its space (a batch of observations
                included), holds NaN or, for a Discrete or MultiDiscrete
                space, a value outside it; if the agent's initial state,
                output or window do not fit one row.
        """
        agent = self.agent
        device = _device(agent)
        z = self._agent_info.to(device)
        starting = self._state is None
        row = self._observation(observation, device)
        row = row | DictTensor({"initial_state": torch.full((1,), starting, device=device)})
        state = agent.initial_state(z, 1) if self._state is None else self._state
        if not isinstance(state, DictTensor) or state.n_elems() != 1:
            raise ValueError(
                f"Policy.act: {type(agent).__name__}.initial_state(agent_info, 1) must return a DictTensor "
                f"of one row, got {state!r}"
            )
        with torch.no_grad():
            window = self._window_before(row, state, z, starting, device)
            output, new_state = act("Policy.act", agent, state, row, z, window)
        action = self._action(output)
        self._state = new_state
        if window is not None:
            self._remember(row | output)
        return action

    def _observation(self, observation: Any, device: torch.device) -> DictTensor:
        """The raw observation as one row under the keys of ``spaces``, each checked and on ``device``."""
        composite = self.spaces.keys() != {"observation"} or isinstance(observation, Mapping)
        if composite and not isinstance(observation, (Mapping, tuple, list)):
            raise TypeError(
                f"Policy.act: observation must be the environment's dict or tuple observation, with the keys "
                f"{list(self.spaces)} (joined by '/'), got {describe(observation)}"
            )
        data = {}
        for key, space in self.spaces.items():
            value = observation
            if composite:
                for part in key.split("/"):
                    if isinstance(value, Mapping) and part in value:
                        value = value[part]
                    elif isinstance(value, (tuple, list)) and part.isdigit() and int(part) < len(value):
                        value = value[int(part)]
                    else:
                        raise ValueError(
                            f"Policy.act: observation lacks the entry {_path(key, True)} (the observation "
                            f"space has the keys {list(self.spaces)}), got {describe(value)} there"
                        )
            data[key] = self._entry(value, space, _path(key, composite)).to(device).unsqueeze(0)
        return DictTensor(data)

    @staticmethod
    def _entry(value: Any, space: ObservationSpace, name: str) -> torch.Tensor:
        """One entry of a raw observation as a tensor of its space's dtype and shape (integers cast for discrete)."""
        expected = f"shape {space.shape} and dtype {space.dtype}, as its {space.kind} space declares"
        if isinstance(value, torch.Tensor):
            tensor = value
        else:
            array = (
                np.asarray(value) if isinstance(value, (np.ndarray, np.generic, int, float, bool)) else None
            )
            if array is None or array.dtype == object:
                raise TypeError(
                    f"Policy.act: {name} must be a numpy array or a tensor of {expected}; got {describe(value)}"
                )
            if array.dtype.kind not in "biufc":  # str, datetime, ...: no tensor holds them
                raise TypeError(
                    f"Policy.act: {name} must have {expected}; got a numpy array of dtype {array.dtype}"
                )
            if not (array.flags.c_contiguous and array.flags.writeable and array.dtype.isnative):
                # torch takes neither another byte order nor, without a warning, a read-only array
                array = np.array(array, dtype=array.dtype.newbyteorder("="), order="C")
            try:
                tensor = torch.from_numpy(array)
            except TypeError as error:  # a dtype torch has not: longdouble, ...
                raise TypeError(
                    f"Policy.act: {name} must have {expected}; got a numpy array of dtype {array.dtype}"
                ) from error
        if space.kind in _DISCRETE and not tensor.dtype.is_floating_point and tensor.dtype != torch.bool:
            tensor = tensor.to(space.dtype)  # an environment's int, int32...: the same_kind cast GymEnv makes
        if tensor.dtype != space.dtype:
            raise TypeError(f"Policy.act: {name} must have {expected}; got dtype {tensor.dtype}")
        if tuple(tensor.shape) != space.shape:
            batched = (
                " (act takes one observation, not a batch)" if tuple(tensor.shape[1:]) == space.shape else ""
            )
            raise ValueError(
                f"Policy.act: {name} must have {expected}; got shape {tuple(tensor.shape)}{batched}"
            )
        if tensor.is_floating_point():  # outside every space: said here, not by the agent's sampling
            outside, holds = tensor.isnan(), f"no NaN (a {space.kind} space holds none)"
        elif space.kind in _DISCRETE:  # not an index an agent's embedding or one-hot takes
            low = torch.tensor(space.start, dtype=tensor.dtype, device=tensor.device).view(space.shape)
            high = low + torch.tensor(space.n, dtype=tensor.dtype, device=tensor.device).view(space.shape)
            outside, holds = (
                (tensor < low) | (tensor >= high),
                f"values of its {space.kind} space (n={space.n}, start={space.start})",
            )
        else:
            outside, holds = None, ""
        if outside is not None and bool(outside.any()):
            where = tuple(torch.nonzero(outside)[0].tolist())
            raise ValueError(
                f"Policy.act: {name} must hold {holds}; got {tensor[where].item()} at index {where}"
            )
        return tensor

    def _window_before(
        self, row: DictTensor, state: DictTensor, z: DictTensor, starting: bool, device: torch.device
    ) -> TemporalDictTensor | None:
        """The history window before this step (None for an agent without one); at an episode's start, empty."""
        if self._history is None:
            return None
        if self._window_spec is None:  # learn the output keys from one call, its effects undone
            observed = {k: (v.dtype, tuple(v.shape[1:])) for k, v in row.items()}
            probe_window = empty_window(observed, 1, max(self._history, 0), device)
            generator = self.agent.generator.get_state()
            output, _ = act("Policy.act", self.agent, state.clone(), row, z, probe_window)
            self.agent.generator.set_state(generator)
            self._action(output)
            self._window_spec = observed | {k: (v.dtype, tuple(v.shape[1:])) for k, v in output.items()}
        if starting:
            self._steps = []
            self._window = empty_window(self._window_spec, 1, max(self._history, 0), device)
        if self._history > 0:
            return self._window
        if not self._steps:
            return empty_window(self._window_spec, 1, 0, device)
        steps = DictTensor.stack(self._steps, dim=1)
        return TemporalDictTensor(steps, torch.tensor([len(self._steps)], device=device))

    def _remember(self, step: DictTensor) -> None:
        """This step joins the window: appended (the oldest dropped past n), or kept with every other."""
        assert self._window_spec is not None
        step = step.get(list(self._window_spec))
        if self._history is not None and self._history > 0:
            assert self._window is not None
            self._window = window_after(self._window, step)
        else:
            self._steps.append(step)

    def _action(self, output: Any) -> Any:
        """The row of ``output["action"]`` as numpy (a scalar for a 0-d action), checked."""
        name = type(self.agent).__name__
        if not isinstance(output, DictTensor) or "action" not in output:
            raise ValueError(
                f"Policy.act: {name}'s output must be a DictTensor with the key 'action', got "
                f"{list(output.keys()) if isinstance(output, DictTensor) else describe(output)}"
            )
        action = output["action"]
        if action.shape[0] != 1:
            raise ValueError(f"Policy.act: {name}'s 'action' must have one row, got {describe(action)}")
        return np.array(action[0].detach().cpu().numpy())[()]

    def export(self, path: str | os.PathLike[str], *, batch_size: int = 1) -> Path:
        """Write the greedy policy as a ``torch.export`` program, for ``torch.export.load`` without rlstruct.

        The program is the agent's ``forward`` on ``batch_size`` rows with
        z's ``greedy`` True (and ``agent_info``'s keys), traced once by
        ``torch.export`` from a copy of the agent that needs no gradients and
        reads its flags (0-d bool buffers) as the Python bools they hold, so
        that ``forward`` may branch on them (SAC's actor does, on
        ``uniform``); it must not branch on other tensors' values. Its random
        draws, which greedy rows discard, need fixed shapes: hence a fixed
        ``batch_size``. It runs on the agent's device.

        Loaded with ``program = torch.export.load(path).module()``, it is
        called with ``observation``, a dict of the observation's keys (the
        keys of ``spaces``), each ``[batch_size, *shape]`` of its space's
        dtype:

        - an agent without state: ``action = program(observation)``;
        - an agent with state (a recurrent one): ``action, state =
          program(observation, state)``, where ``observation`` also holds the
          bool key ``initial_state`` ``[batch_size]`` and ``state`` the keys,
          dtypes and shapes of ``agent.initial_state`` (``h_pi``, ``h_v``,
          float32 ``[batch_size, hidden]`` for a recurrent ``ActorCritic``).
          Rows whose ``initial_state`` is True start from the agent's initial
          state whatever ``state`` holds there (zeros will do).

        ``action`` is the agent's ``action``, ``[batch_size, ...]``.

        Args:
            path: the file to write (``.pt2`` by convention); replaced if it exists.
            batch_size: the rows of every call of the program.

        Returns:
            ``path``, as a ``Path``.

        Raises:
            TypeError: if ``path`` is not a str or ``os.PathLike``, or
                ``batch_size`` is not an int.
            FileNotFoundError: if ``path``'s folder does not exist.
            ValueError: if ``path`` is ``""`` or a folder, ``batch_size`` is below 1, the agent wants a
                history window (which the program does not carry: act with
                ``Policy`` instead), or ``torch.export`` cannot trace the
                agent's ``forward`` (the message holds torch's first line).

        Examples:
            >>> import tempfile
            >>> import numpy as np
            >>> import torch
            >>> from rlstruct.algos import Policy
            >>> from rlstruct.learning.q_learning import QNetwork
            >>> from rlstruct.specs import ObservationSpace
            >>> _ = torch.manual_seed(0)
            >>> space = {"observation": ObservationSpace("box", (4,), torch.float32)}
            >>> policy = Policy(QNetwork(obs_dim=4, n_actions=2), space)
            >>> with tempfile.TemporaryDirectory() as folder:
            ...     program = torch.export.load(policy.export(f"{folder}/q.pt2")).module()
            >>> observation = np.ones(4, dtype=np.float32)
            >>> program({"observation": torch.from_numpy(observation)[None]})[0] == policy.act(observation)
            tensor(True)
        """
        size = check_int("Policy.export", "batch_size", batch_size)
        _check_file_to_write(path)  # before the trace, and not a crash of torch.export.save
        name = type(self.agent).__name__
        if self._history is not None:
            raise ValueError(
                f"Policy.export: {name} asks for a history window (require_history() = "
                f"{self.agent.require_history()!r}), which an exported program does not carry; act with "
                "Policy instead"
            )
        program = _GreedyProgram(self.agent, self._z(True, size), size)
        device = _device(self.agent)
        observation = {k: _example(space, size, device) for k, space in self.spaces.items()}
        example: tuple[Any, ...] = (observation,)
        if program.initial:
            observation["initial_state"] = torch.ones(size, dtype=torch.bool, device=device)
            example = (observation, {k: v.clone() for k, v in program.initial.items()})
        try:
            with warnings.catch_warnings():
                # torch.nn.GRU and LSTM refresh their list of weights while export swaps them: harmless here
                warnings.filterwarnings("ignore", r"The tensor attributes .*_flat_weights", UserWarning)
                exported = torch.export.export(program, example)
        except Exception as error:  # what torch.export raises varies: one line, and the cause chained
            first = str(error).strip().split("\n")[0]
            raise ValueError(
                f"Policy.export: torch.export cannot trace {name}.forward (greedy, {size} rows): "
                f"{type(error).__name__}: {first}"
            ) from error
        torch.export.save(exported, path)
        return Path(path)


def _check_file_to_write(path: object) -> None:
    """Raise naming ``path`` unless it is a file ``Policy.export`` can write: a path, not a folder, in one."""
    if not isinstance(path, str | os.PathLike):
        raise TypeError(f"Policy.export: path must be a path (a str or os.PathLike), got {describe(path)}")
    target = Path(path)
    if os.fspath(path) == "" or target.is_dir():
        got = "''" if os.fspath(path) == "" else f"the folder {str(target)!r}"
        raise ValueError(f"Policy.export: path must name the file to write, got {got}")
    if not target.resolve().parent.is_dir():
        raise FileNotFoundError(f"Policy.export: path's folder {str(target.parent)!r} does not exist")


def _example(space: ObservationSpace, n: int, device: torch.device) -> torch.Tensor:
    """``n`` rows of a value ``space`` holds (the first value of each discrete entry): an export's example."""
    value = torch.zeros((n, *space.shape), dtype=space.dtype, device=device)
    if space.kind in _DISCRETE:
        value += torch.tensor(space.start, dtype=space.dtype, device=device).view(space.shape or ())
    return value


def _frozen(agent: Agent) -> Agent:
    """A copy of ``agent`` that needs no gradients, whose flags (0-d bool buffers) are Python bools.

    ``torch.export`` cannot follow a Python branch on a tensor's value; a
    flag that the exported program cannot change anyway is read as the bool
    it holds now (SAC's actor branches on its ``uniform``).
    """
    frozen = copy.deepcopy(agent).requires_grad_(False)
    for module in frozen.modules():
        for name, buffer in list(module.named_buffers(recurse=False)):
            if buffer.dim() == 0 and buffer.dtype == torch.bool:
                delattr(module, name)
                setattr(module, name, bool(buffer))
    return frozen


class _GreedyProgram(torch.nn.Module):
    """What ``Policy.export`` traces: the frozen agent's forward on ``n`` greedy rows, episode starts reset.

    z and the initial state are plain tensors (constants); see ``Policy.export`` for the signature.
    """

    def __init__(self, agent: Agent, agent_info: DictTensor, n: int) -> None:
        super().__init__()
        self.agent = _frozen(agent)
        device = _device(self.agent)
        self.agent_info = agent_info.to(device)
        self.n = n
        self.initial: dict[str, torch.Tensor] = dict(self.agent.initial_state(self.agent_info, n).items())

    def forward(
        self, observation: dict[str, torch.Tensor], state: dict[str, torch.Tensor] | None = None
    ) -> torch.Tensor | tuple[torch.Tensor, dict[str, torch.Tensor]]:
        keys = dict(observation)
        if state is None:
            memory = DictTensor(batch_size=self.n)
            keys["initial_state"] = torch.zeros(self.n, dtype=torch.bool, device=self.agent_info.device)
        else:
            starting = observation["initial_state"]
            memory = DictTensor(
                {
                    k: torch.where(starting.view(-1, *[1] * (v.dim() - 1)), self.initial[k], v)
                    for k, v in state.items()
                }
            )
        output, new_state = self.agent(memory, DictTensor(keys), self.agent_info)
        action: torch.Tensor = output["action"]
        if state is None:
            return action
        return action, dict(new_state.items())
