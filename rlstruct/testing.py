"""Small agents and environments whose trajectories can be checked by hand.

They serve rlstruct's own tests and tutorials, and are handy for testing a
learner or a new batcher: everything they output follows from the seeds,
z and w by simple arithmetic.

Examples:
    >>> import torch
    >>> from rlstruct import DictTensor
    >>> env = CounterEnv(n_envs=2, seed=10)
    >>> first = env.reset(DictTensor({"length": torch.tensor([1, 3])}))
    >>> first["t"], first["seed"]
    (tensor([0, 0]), tensor([10, 11]))
    >>> reached, observation = env.step(DictTensor({"action": torch.zeros(2, dtype=torch.int64)}))
    >>> reached["t"], reached["terminated"]
    (tensor([1, 1]), tensor([ True, False]))
"""

from __future__ import annotations

import torch

from rlstruct.agent import Agent
from rlstruct.dicttensor import DictTensor
from rlstruct.env import Environment
from rlstruct.errors import describe
from rlstruct.temporal import TemporalDictTensor

__all__ = ["CounterEnv", "CountingAgent", "RandomAgent"]


class CounterEnv(Environment):
    """Instances whose observation ``t`` counts the steps of the current episode.

    Each step gives ``reward`` = the action (as float32) + 1. An episode lasts
    ``length`` steps, taken from env_info key ``length`` (int64) if present,
    else from the constructor; it ends ``terminated`` or, with
    ``truncate=True``, ``truncated``. Observation keys: ``t`` (int64),
    ``seed`` (int64: ``seed + i`` for instance i, so seeding is visible),
    ``episode`` (int64: episodes started by this instance since creation),
    ``length`` (int64), and the keys every Environment has.

    Args:
        n_envs: the number of instances.
        seed: the seed of instance 0.
        length: the default episode length.
        truncate: end episodes as truncated (a time limit) instead of terminated.
    """

    def __init__(self, n_envs: int = 1, seed: int = 0, length: int = 5, truncate: bool = False) -> None:
        self.n_envs = n_envs
        self.seeds = seed + torch.arange(n_envs)
        self.default_length = length
        self.truncate = truncate
        self.episode = torch.full((n_envs,), -1, dtype=torch.int64)

    def _observation(self, reward: torch.Tensor, ended: torch.Tensor, initial: torch.Tensor) -> DictTensor:
        ended_terminal = ended & (not self.truncate)
        return DictTensor(
            {
                "t": self.t.clone(),
                "seed": self.seeds.clone(),
                "episode": self.episode.clone(),
                "length": self.length.clone(),
                "reward": reward,
                "terminated": ended_terminal,
                "truncated": ended & self.truncate,
                "done": ended.clone(),
                "initial_state": initial,
            }
        )

    def reset(self, env_info: DictTensor, auto_reset: bool = False) -> DictTensor:
        """Start episode ``episode + 1`` in every instance, at ``t`` = 0.

        Args:
            env_info: w, ``n_envs`` rows; its optional key ``length`` (int64
                [n_envs]) sets each instance's episode length.
            auto_reset: start the next episode of an instance when one ends
                (True), or stop it until the next ``reset`` (False).

        Returns:
            The first observation: ``n_envs`` rows on the CPU, ``t`` 0,
            ``reward`` 0.0, ``initial_state`` True.
        """
        n = self.n_envs
        if "length" in env_info:
            self.length = env_info["length"].clone()
        else:
            self.length = torch.full((n,), self.default_length, dtype=torch.int64)
        self.auto_reset = auto_reset
        self.t = torch.zeros(n, dtype=torch.int64)
        self.episode += 1
        self.stopped = torch.zeros(n, dtype=torch.bool)
        no = torch.zeros(n, dtype=torch.bool)
        return self._observation(torch.zeros(n), no, torch.ones(n, dtype=torch.bool))

    def _action(self, action: DictTensor) -> torch.Tensor:
        """``action["action"]``, checked to be int64 ``[n_envs]`` on the CPU, as ``step`` documents."""
        if not isinstance(action, DictTensor):
            raise TypeError(f"CounterEnv.step: action must be a DictTensor, got {describe(action)}")
        if "action" not in action:
            raise ValueError(
                f"CounterEnv.step: action must hold the key 'action', got keys {list(action.keys())}"
            )
        value = action["action"]
        if value.dtype != torch.int64:
            raise TypeError(
                f"CounterEnv.step: action['action'] must be an int64 tensor, got dtype {value.dtype}; nothing is cast"
            )
        if tuple(value.shape) != (self.n_envs,) or value.device.type != "cpu":
            raise ValueError(
                f"CounterEnv.step: action['action'] must be [n_envs] = [{self.n_envs}] on the CPU, "
                f"got {list(value.shape)} on {value.device}"
            )
        return value

    def step(self, action: DictTensor) -> tuple[DictTensor, DictTensor]:
        """Count one more step in every running instance; rewards ``action + 1``.

        Args:
            action: ``n_envs`` rows with the key ``action`` (int64 [n_envs]).

        Returns:
            ``(reached, observation)``, ``n_envs`` rows each on the CPU: the
            step's outcome and the observation to act on next, the same
            unless an instance ended with ``auto_reset``, where
            ``observation`` is the next episode's first (``t`` 0,
            ``initial_state`` True). A stopped instance keeps its ``t`` and
            rewards 0.0.

        Raises:
            TypeError: for an action that is not a DictTensor, or whose key
                ``action`` is not an int64 tensor (nothing is cast).
            ValueError: for an action without the key ``action``, or whose
                key ``action`` is not ``[n_envs]`` on the CPU (another shape
                would broadcast into the rewards).
        """
        value = self._action(action)
        running = ~self.stopped
        reward = torch.where(running, value.float() + 1, torch.zeros(()))
        self.t = torch.where(running, self.t + 1, self.t)
        ended = self.t >= self.length
        reached = self._observation(reward, ended, torch.zeros(self.n_envs, dtype=torch.bool))
        if not self.auto_reset:
            self.stopped = ended
            return reached, reached
        if not bool(ended.any()):
            return reached, reached
        self.t = torch.where(ended, 0, self.t)
        self.episode = torch.where(ended, self.episode + 1, self.episode)
        no = torch.zeros(self.n_envs, dtype=torch.bool)
        return reached, self._observation(torch.where(ended, 0.0, reward), no, ended)


class RandomAgent(Agent):
    """Uniformly random discrete actions from ``self.generator``; ``epsilon`` in z is ignored.

    Output keys: ``action`` (int64).

    Args:
        n_actions: the number of actions.
    """

    def __init__(self, n_actions: int = 2) -> None:
        super().__init__()
        self.n_actions = n_actions

    def forward(
        self,
        state: DictTensor,
        observation: DictTensor,
        agent_info: DictTensor,
        history: TemporalDictTensor | None = None,
    ) -> tuple[DictTensor, DictTensor]:
        """Draw an action uniformly in ``[0, n_actions)`` for each of B rows.

        Args:
            state: B rows, returned unchanged.
            observation: B rows; only their number is read.
            agent_info: not read.
            history: not read.

        Returns:
            ``(output, state)``: ``output`` holds ``action``, int64 [B] on the
            generator's device (the CPU, or where a batcher moved the agent:
            the environment's device).
        """
        n = observation.n_elems()
        draw = torch.randint(0, self.n_actions, (n,), generator=self.generator, device=self.generator.device)
        return DictTensor({"action": draw}), state


class CountingAgent(Agent):
    """A stateful agent that counts the steps it has taken in the current episode.

    State key ``count`` (int64) starts at ``agent_info["start"]`` (or 0) and
    grows by 1 per step. Output keys: ``action`` (the constant ``action`` of
    the constructor, int64), ``count`` (the state it acted from) and, when
    it wants history, ``history_length`` (how many previous steps it saw:
    the window's ``lengths``).

    Args:
        action: the action it always takes.
        history: what ``require_history()`` returns.
    """

    def __init__(self, action: int = 0, history: bool | int = False) -> None:
        super().__init__()
        self.action = action
        self.history = history

    def initial_state(self, agent_info: DictTensor, n: int) -> DictTensor:
        """``count``, int64 [n]: a copy of ``agent_info["start"]``, or zeros on the CPU."""
        start = agent_info["start"].clone() if "start" in agent_info else torch.zeros(n, dtype=torch.int64)
        return DictTensor({"count": start})

    def require_history(self) -> bool | int:
        """The constructor's ``history``, read as ``Agent.require_history`` describes."""
        return self.history

    def forward(
        self,
        state: DictTensor,
        observation: DictTensor,
        agent_info: DictTensor,
        history: TemporalDictTensor | None = None,
    ) -> tuple[DictTensor, DictTensor]:
        """Take the constant action and count one step.

        Args:
            state: B rows with ``count`` (int64 [B]).
            observation: B rows; only their number is read.
            agent_info: not read.
            history: the window before the step, when ``require_history()``
                asks for one; its ``lengths`` are output.

        Returns:
            ``(output, new_state)``: ``output`` holds ``action`` and ``count``
            (int64 [B]) and, with a history, ``history_length``;
            ``new_state`` holds ``count + 1``.
        """
        n = observation.n_elems()
        output = {
            "action": torch.full((n,), self.action, dtype=torch.int64),
            "count": state["count"].clone(),
        }
        if history is not None:
            output["history_length"] = history.lengths.clone()
        return DictTensor(output), DictTensor({"count": state["count"] + 1})
