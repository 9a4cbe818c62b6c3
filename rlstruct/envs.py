"""The package's own tasks, registered as gymnasium ids when this module is imported.

| id | observation | limit | optimal return |
|---|---|---|---|
| ``CartPoleNoVel-v1`` | (cart position, pole angle), float32 | 500 steps | 500 |
| ``PendulumNoVel-v1`` | (cos theta, sin theta), float32 | 200 steps | about -150 (Pendulum-v1's) |
| ``CueMemory-v0`` | (cue one-hot (2), answer flag), float32 | ``delay + 2`` steps | 1.0 (memoryless: 0) |
| ``CueMemory16-v0``, ``CueMemory64-v0``, ``CueMemory256-v0`` | the same | 18, 66, 258 steps | 1.0 (memoryless: 0) |
| ``BitFlip-v0``, ``BitFlip25-v0`` | ``Dict`` of ``observation``, ``achieved_goal``, ``desired_goal`` (15 or 25 bits each), float32 | 15, 25 steps | -(d - 1) - ceil((n_bits - d) / 2) from d bits away |

The first two are the classic-control tasks with their velocities hidden: the
rewards, dynamics and limits are those of ``CartPole-v1`` and ``Pendulum-v1``,
but a policy that sees only the current observation cannot tell which way the
pole moves; history (a recurrent agent, stacked frames) gives it back.
``CueMemory-v0`` can be solved only by remembering its first observation,
over ``delay`` blank steps (10; ``gym.make("CueMemory-v0", delay=...)`` sets
another); ``CueMemory16-v0``, ``CueMemory64-v0`` and ``CueMemory256-v0`` are
the same task with delays 16, 64 and 256, under ids of their own so that a
training run (``rlstruct train ppo --env CueMemory64-v0``) and its spawned
workers make them from the id alone. Like ``CueMemory-v0`` they declare no
``max_episode_steps``: every episode ends by termination after ``delay + 2`` steps.

``BitFlip-v0`` (``BitFlipEnv``, 15 bits; ``BitFlip25-v0``: 25) is the
goal-conditioned task of hindsight experience replay (Andrychowicz et al.
2017): flip one bit a step to reach a goal pattern, rewarded -1 at every
step that does not end on the goal. Its random goals are all but never
reached by exploration, so it is learned with relabelled goals
(``rlstruct train dqn --env BitFlip-v0 --her``). A goal-conditioned task
gives hindsight replay its reward as the attribute ``torch_reward`` of its
environment (``env.unwrapped.torch_reward``, here ``bitflip_reward``): a
batched ``reward(achieved_goal, desired_goal) -> reward`` on torch tensors,
as ``HindsightReplayBuffer``'s ``reward_fn`` takes it.

``import rlstruct`` imports this module as soon as gymnasium is imported
(before or after rlstruct), and ``rlstruct/gym_env.py`` imports it, so any use
of ``rlstruct.GymEnv`` (a spawned batcher worker unpickling ``GymEnv`` too)
registers the ids. Calling ``register()`` again changes nothing.

Examples:
    >>> import gymnasium as gym
    >>> import rlstruct
    >>> env = gym.make("CartPoleNoVel-v1")
    >>> observation, _ = env.reset(seed=0)
    >>> observation.shape, observation.dtype, env.spec.max_episode_steps
    ((2,), dtype('float32'), 500)
    >>> env.close()
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.envs.classic_control.cartpole import CartPoleEnv
from gymnasium.envs.classic_control.pendulum import PendulumEnv

from rlstruct.checks import is_int

__all__ = [
    "BitFlipEnv",
    "CueMemoryEnv",
    "SelectObservation",
    "bitflip_reward",
    "make_cartpole_novel",
    "make_pendulum_novel",
    "register",
]

Observation = np.ndarray[Any, np.dtype[np.float32]]
GoalObservation = dict[str, Observation]
"""A goal-conditioned observation: ``observation``, ``achieved_goal`` and ``desired_goal``."""


class SelectObservation(gym.ObservationWrapper[Observation, Any, Observation]):
    """Keep only some entries of a flat ``Box`` observation.

    Args:
        env: an environment whose observation space is a 1-d ``Box``.
        keep: the indices of the entries to keep, in the order they appear in
            the new observation.

    Raises:
        TypeError: if the observation space is not a 1-d ``Box``, or ``keep``
            holds something else than ints (NumPy ints count).
        ValueError: for an empty ``keep`` or an index out of range.

    Examples:
        >>> env = SelectObservation(CartPoleEnv(), keep=[0, 2])
        >>> env.observation_space.shape, env.observation_space.dtype
        ((2,), dtype('float32'))
        >>> env.reset(seed=0)[0].shape
        (2,)
    """

    def __init__(self, env: gym.Env[Observation, Any], keep: Sequence[int]) -> None:
        super().__init__(env)
        space = env.observation_space
        if not isinstance(space, gym.spaces.Box) or len(space.shape) != 1:
            raise TypeError(f"SelectObservation: env must have a 1-d Box observation space, got {space}")
        given = np.asarray(keep)
        # not ints: 1.5 would keep entry 1, True entry 1 (an empty keep is the ValueError below)
        if given.dtype.kind not in "iu" and (given.size or given.ndim != 1):
            raise TypeError(f"SelectObservation: keep must be ints, got {keep!r}")
        self._keep = given.astype(np.int64)
        if (
            self._keep.ndim != 1
            or self._keep.size == 0
            or not ((self._keep >= 0) & (self._keep < space.shape[0])).all()
        ):
            raise ValueError(
                f"SelectObservation: keep must be indices in [0, {space.shape[0]}), got {keep!r}"
            )
        self.observation_space = gym.spaces.Box(
            space.low[self._keep],
            space.high[self._keep],
            dtype=space.dtype,
        )

    def observation(self, observation: Observation) -> Observation:
        """The entries ``keep`` of a flat observation, in that order (same dtype, a copy)."""
        return observation[self._keep]


def make_cartpole_novel(**kwargs: Any) -> gym.Env[Observation, Any]:
    """``CartPole-v1`` observing (cart position, pole angle), without the two velocities."""
    return SelectObservation(CartPoleEnv(**kwargs), keep=[0, 2])


def make_pendulum_novel(**kwargs: Any) -> gym.Env[Observation, Any]:
    """``Pendulum-v1`` observing (cos theta, sin theta), without the angular velocity."""
    return SelectObservation(PendulumEnv(**kwargs), keep=[0, 1])


class CueMemoryEnv(gym.Env[Observation, np.int64]):
    """Remember a cue over ``delay`` blank steps, then answer it.

    The observation is float32 ``(cue == 0, cue == 1, answer_now)``. The first
    observation shows the cue (drawn uniformly from {0, 1} at reset, from the
    reset seed); the next ``delay`` observations are all zeros; the one after
    them is ``(0, 0, 1)``: the action taken on it is the answer (``Discrete(2)``),
    worth +1 if it equals the cue and -1 otherwise, and the episode then
    terminates. Actions before the answer step are ignored and worth 0. An
    episode thus lasts ``delay + 2`` steps.

    Optimal return: 1.0 (answer the cue seen at the first step). A memoryless
    policy sees the same answer observation whatever the cue, so its answer is
    independent of the cue and its expected return is 0.

    Args:
        delay: the number of blank observations between the cue and the
            answer step (0: the answer step comes right after the cue).
        render_mode: accepted for ``gym.make``; nothing is rendered.

    Raises:
        ValueError: for a negative or non-int ``delay`` (a NumPy int is an int).

    Examples:
        >>> env = CueMemoryEnv(delay=1)
        >>> env.reset(seed=0)[0]  # the cue: 1
        array([0., 1., 0.], dtype=float32)
        >>> env.step(0)[:3]  # blank
        (array([0., 0., 0.], dtype=float32), 0.0, False)
        >>> env.step(0)[:3]  # answer now
        (array([0., 0., 1.], dtype=float32), 0.0, False)
        >>> env.step(1)[:3]  # the cue: +1, and the episode ends
        (array([0., 0., 0.], dtype=float32), 1.0, True)
    """

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012 (gymnasium's own annotation)

    def __init__(self, delay: int = 10, render_mode: str | None = None) -> None:
        if not is_int(delay) or delay < 0:
            raise ValueError(f"CueMemoryEnv: delay must be an int >= 0, got {delay!r}")
        self.delay = int(delay)  # a NumPy int counts too
        self.render_mode = render_mode
        self.observation_space = gym.spaces.Box(0.0, 1.0, shape=(3,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self._cue = 0
        self._t = 0

    def _observation(self) -> Observation:
        observation = np.zeros(3, dtype=np.float32)
        if self._t == 0:
            observation[self._cue] = 1.0
        elif self._t == self.delay + 1:
            observation[2] = 1.0
        return observation

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Observation, dict[str, Any]]:
        """Draw a new cue (from ``seed`` if given) and show it.

        Args:
            seed: seeds ``self.np_random`` (gymnasium's convention); None
                continues its stream.
            options: not read.

        Returns:
            ``(observation, info)``: the cue's float32 observation [3] and an
            empty info dict.
        """
        super().reset(seed=seed)
        self._cue = int(self.np_random.integers(2))
        self._t = 0
        return self._observation(), {}

    def step(self, action: np.int64) -> tuple[Observation, float, bool, bool, dict[str, Any]]:
        """Take one step; the action counts only on the answer step.

        Args:
            action: 0 or 1.

        Returns:
            ``(observation, reward, terminated, truncated, info)`` as in
            gymnasium: the next float32 observation [3], +1.0 / -1.0 for a
            right / wrong answer and 0.0 before it, ``terminated`` True after
            the answer, ``truncated`` always False, an empty info dict.

        Raises:
            ValueError: for an action outside {0, 1}.
            RuntimeError: for a step after the episode ended (call ``reset``).
        """
        if not self.action_space.contains(action):
            raise ValueError(f"CueMemoryEnv: action must be 0 or 1, got {action}")
        if self._t > self.delay + 1:
            raise RuntimeError("CueMemoryEnv: step() after the episode ended; call reset()")
        if self._t == self.delay + 1:
            self._t += 1
            reward = 1.0 if int(action) == self._cue else -1.0
            return np.zeros(3, dtype=np.float32), reward, True, False, {}
        self._t += 1
        return self._observation(), 0.0, False, False, {}


def bitflip_reward(achieved_goal: torch.Tensor, desired_goal: torch.Tensor) -> torch.Tensor:
    """``BitFlipEnv``'s reward, batched: 0.0 where all bits of the two goals are equal, -1.0 elsewhere.

    Module-level (picklable), so that it can be a ``HindsightReplayBuffer``'s
    ``reward_fn``; it is ``BitFlipEnv.torch_reward``.

    Args:
        achieved_goal: ``[n, n_bits]`` bit patterns, any dtype and device.
        desired_goal: ``[n, n_bits]`` bit patterns of the same dtype, on the
            same device.

    Returns:
        float32 ``[n]`` on their device, a new tensor: the reward of a step
        that ends on ``achieved_goal`` when the goal is ``desired_goal``.

    Raises:
        ValueError: if the two are not both ``[n, n_bits]`` of one shape.

    Examples:
        >>> bitflip_reward(torch.tensor([[0.0, 1.0], [1.0, 1.0]]), torch.tensor([[0.0, 1.0], [0.0, 1.0]]))
        tensor([ 0., -1.])
    """
    if achieved_goal.dim() != 2 or achieved_goal.shape != desired_goal.shape:
        raise ValueError(
            "bitflip_reward: achieved_goal and desired_goal must both be [n, n_bits], got shapes "
            f"{tuple(achieved_goal.shape)} and {tuple(desired_goal.shape)}"
        )
    return (achieved_goal == desired_goal).all(dim=1).to(torch.float32) - 1.0


class BitFlipEnv(gym.Env[dict[str, Any], np.int64]):
    """Reach a goal pattern of ``n_bits`` bits by flipping one bit a step (Andrychowicz et al. 2017).

    At reset the state and the goal are bit patterns drawn uniformly from
    ``self.np_random`` (the goal drawn again until it differs from the
    state). Action ``i`` (``Discrete(n_bits)``) flips bit ``i``. The reward is
    -1.0 at every step whose new state is not the goal and 0.0 at one whose
    new state is: an agent one flip away from the goal must leave it on the
    next step (every action flips a bit) and can come back on the one after.
    Every episode lasts ``n_bits`` steps and ends by truncation, never by
    termination: the relabelled transitions of hindsight replay keep
    ``next/terminated`` as stored, which is right only for such tasks.

    The observation is a ``Dict`` of three float32 ``Box(0, 1, (n_bits,))``:
    ``observation`` and ``achieved_goal`` (both the current bits) and
    ``desired_goal`` (the goal), as gymnasium-robotics' goal environments
    give theirs; ``GymEnv`` stores each under its name. ``info["is_success"]``
    (a bool) tells whether the state is the goal, at reset and at each step.

    Optimal return, from a start ``d`` bits away from the goal: every flip
    changes the distance by one, so the goal can be reached first at step
    ``d`` and then at every second step: ``-(d - 1) - ceil((n_bits - d) / 2)``,
    about -10.5 on average for 15 bits and -18.0 for 25 (a random policy
    scores almost ``-n_bits``).

    Args:
        n_bits: the bits of the state and the goal, and the steps of an
            episode; an int >= 1.
        render_mode: accepted for ``gym.make``; nothing is rendered.

    Raises:
        ValueError: for an ``n_bits`` that is not an int >= 1 (a NumPy int is an int).

    Examples:
        >>> env = BitFlipEnv(n_bits=3)
        >>> observation, info = env.reset(seed=6)
        >>> observation["achieved_goal"], observation["desired_goal"], info
        (array([0., 1., 1.], dtype=float32), array([0., 1., 0.], dtype=float32), {'is_success': False})
        >>> observation, reward, terminated, truncated, info = env.step(np.int64(2))  # on the goal
        >>> observation["observation"], reward, terminated, truncated, info
        (array([0., 1., 0.], dtype=float32), 0.0, False, False, {'is_success': True})
        >>> env.step(np.int64(0))[1:]  # off it again: every action flips a bit
        (-1.0, False, False, {'is_success': False})
        >>> env.step(np.int64(0))[1:]  # back on it at the last step: truncated
        (0.0, False, True, {'is_success': True})
        >>> env.torch_reward(torch.tensor([[0.0, 1.0, 0.0]]), torch.tensor([[0.0, 1.0, 0.0]]))
        tensor([0.])
    """

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012 (gymnasium's own annotation)

    torch_reward = staticmethod(bitflip_reward)

    def __init__(self, n_bits: int = 15, render_mode: str | None = None) -> None:
        if not is_int(n_bits) or n_bits < 1:
            raise ValueError(f"BitFlipEnv: n_bits must be an int >= 1, got {n_bits!r}")
        n_bits = int(n_bits)  # a NumPy int counts too
        self.n_bits = n_bits
        self.render_mode = render_mode
        bits = gym.spaces.Box(0.0, 1.0, shape=(n_bits,), dtype=np.float32)
        self.observation_space = gym.spaces.Dict(
            {"observation": bits, "achieved_goal": bits, "desired_goal": bits}
        )
        self.action_space = gym.spaces.Discrete(n_bits)
        self._state = np.zeros(n_bits, dtype=np.float32)
        self._goal = np.ones(n_bits, dtype=np.float32)
        self._t = 0

    def _observation(self) -> GoalObservation:
        return {
            "observation": self._state.copy(),
            "achieved_goal": self._state.copy(),
            "desired_goal": self._goal.copy(),
        }

    def _success(self) -> bool:
        return bool(np.array_equal(self._state, self._goal))

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[GoalObservation, dict[str, Any]]:
        """Draw a new state and a goal that differs from it (from ``seed`` if given).

        Args:
            seed: seeds ``self.np_random`` (gymnasium's convention); None
                continues its stream.
            options: not read.

        Returns:
            ``(observation, info)``: the float32 ``[n_bits]`` arrays
            ``observation``, ``achieved_goal`` (the state) and
            ``desired_goal`` (the goal), new copies; ``{"is_success": False}``.
        """
        super().reset(seed=seed)
        self._state = self.np_random.integers(0, 2, self.n_bits).astype(np.float32)
        self._goal = self._state
        while np.array_equal(self._goal, self._state):  # a start on the goal would teach nothing
            self._goal = self.np_random.integers(0, 2, self.n_bits).astype(np.float32)
        self._t = 0
        return self._observation(), {"is_success": False}

    def step(self, action: np.int64) -> tuple[GoalObservation, float, bool, bool, dict[str, Any]]:
        """Flip bit ``action``.

        Args:
            action: the bit to flip, in ``[0, n_bits)``.

        Returns:
            ``(observation, reward, terminated, truncated, info)`` as in
            gymnasium: the new observation (as ``reset``'s), 0.0 if the new
            state is the goal and -1.0 otherwise, ``terminated`` always
            False, ``truncated`` True at step ``n_bits``, and
            ``{"is_success": state == goal}``.

        Raises:
            ValueError: for an action outside ``[0, n_bits)``.
            RuntimeError: for a step after the episode ended (call ``reset``).
        """
        if not self.action_space.contains(action):
            raise ValueError(f"BitFlipEnv: action must be an int in [0, {self.n_bits}), got {action}")
        if self._t >= self.n_bits:
            raise RuntimeError("BitFlipEnv: step() after the episode ended; call reset()")
        self._state = self._state.copy()
        self._state[int(action)] = 1.0 - self._state[int(action)]
        self._t += 1
        success = self._success()
        return (
            self._observation(),
            0.0 if success else -1.0,
            False,
            self._t >= self.n_bits,
            {"is_success": success},
        )


def register() -> None:
    """Register ``CartPoleNoVel-v1``, ``PendulumNoVel-v1``, ``CueMemory-v0``, ``CueMemory{16,64,256}-v0``, ``BitFlip-v0`` and ``BitFlip25-v0``; a no-op for ids already there."""
    specs: list[dict[str, Any]] = [
        {
            "id": "CartPoleNoVel-v1",
            "entry_point": "rlstruct.envs:make_cartpole_novel",
            "max_episode_steps": 500,
            "reward_threshold": 475.0,
        },
        {
            "id": "PendulumNoVel-v1",
            "entry_point": "rlstruct.envs:make_pendulum_novel",
            "max_episode_steps": 200,
        },
        {"id": "CueMemory-v0", "entry_point": "rlstruct.envs:CueMemoryEnv", "reward_threshold": 1.0},
        *(
            {
                "id": f"CueMemory{delay}-v0",
                "entry_point": "rlstruct.envs:CueMemoryEnv",
                "reward_threshold": 1.0,
                "kwargs": {"delay": delay},
            }
            for delay in (16, 64, 256)
        ),
        *(
            {
                "id": f"BitFlip{'' if n_bits == 15 else n_bits}-v0",
                "entry_point": "rlstruct.envs:BitFlipEnv",
                "max_episode_steps": n_bits,
                "kwargs": {"n_bits": n_bits},
            }
            for n_bits in (15, 25)
        ),
    ]
    for spec in specs:
        if spec["id"] not in gym.registry:
            gym.register(**spec)


register()
