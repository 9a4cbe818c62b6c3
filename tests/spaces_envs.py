"""Small gymnasium environments with every kind of observation space, registered as ``SpacesTest/<kind>-v0``.

Worker processes import this module by name (``--env spaces_envs:SpacesTest/Discrete-v0``).
An episode lasts 8 steps; the reward is 1 when the action matches a bit of the
observation, so a learner has something to learn, but the tests only check
that every algorithm trains on every space the docs say it takes.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

OBSERVATIONS: dict[str, gym.Space[Any]] = {
    "Box": gym.spaces.Box(-1.0, 1.0, (3,), np.float32),
    "Discrete": gym.spaces.Discrete(5, start=1),
    "MultiDiscrete": gym.spaces.MultiDiscrete([2, 3]),
    "MultiBinary": gym.spaces.MultiBinary(4),
    "Dict": gym.spaces.Dict(
        {"position": gym.spaces.Box(-1.0, 1.0, (2,), np.float32), "room": gym.spaces.Discrete(3)}
    ),
    "Tuple": gym.spaces.Tuple((gym.spaces.MultiDiscrete([2, 3]), gym.spaces.MultiBinary(2))),
    "Image": gym.spaces.Box(0, 255, (8, 8, 3), np.uint8),
}
"""The observation spaces, by the name in the id."""


ACTIONS: dict[str, gym.Space[Any]] = {
    "": gym.spaces.Discrete(2),
    "Continuous": gym.spaces.Box(-1.0, 1.0, (1,), np.float32),
    "MultiDiscreteActions": gym.spaces.MultiDiscrete([2, 3]),
    "MultiBinaryActions": gym.spaces.MultiBinary(3),
}
"""The action spaces, by the suffix of the id."""


class SpacesEnv(gym.Env[Any, Any]):
    """8 steps of random observations of ``OBSERVATIONS[kind]``; actions of ``ACTIONS[actions]``."""

    def __init__(self, kind: str = "Box", continuous: bool = False, actions: str = "") -> None:
        self.observation_space = OBSERVATIONS[kind]
        self.action_space = ACTIONS["Continuous" if continuous else actions]
        self.t = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        self.observation_space.seed(int(self.np_random.integers(2**31)))
        self.t = 0
        return self.observation_space.sample(), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self.t += 1
        first = float(np.asarray(action).reshape(-1)[0])
        reward = 1.0 if (first > 0.5) == bool(self.t % 2) else 0.0
        return self.observation_space.sample(), reward, self.t >= 8, False, {}


for _kind in OBSERVATIONS:
    for _suffix in ACTIONS:
        _id = f"SpacesTest/{_kind}{_suffix}-v0"
        if _id not in gym.registry:
            gym.register(_id, entry_point=SpacesEnv, kwargs={"kind": _kind, "actions": _suffix})


class MatchEnv(gym.Env[Any, Any]):
    """Match a random choice per component: 8 steps, a ``MultiDiscrete(nvec)`` action and the choices' one-hots.

    The observation is the one-hots of a random choice of each component,
    joined (float32 ``[sum(nvec)]``); the reward is the fraction of
    components whose action matches its choice. A random policy earns
    ``mean(1 / nvec)`` a step on average, a perfect one 1: an episode's
    return is 8 for it and, with ``nvec = [3, 3]``, 8 / 3 on average at random.
    """

    def __init__(self, nvec: tuple[int, ...] = (3, 3)) -> None:
        self.nvec = np.array(nvec)
        self.observation_space = gym.spaces.Box(0.0, 1.0, (int(self.nvec.sum()),), np.float32)
        self.action_space = gym.spaces.MultiDiscrete(self.nvec)
        self.t = 0
        self.choice = np.zeros(len(nvec), np.int64)

    def _observe(self) -> np.ndarray[Any, Any]:
        self.choice = self.np_random.integers(0, self.nvec)
        observation = np.zeros(self.observation_space.shape, np.float32)
        observation[np.cumsum(self.nvec) - self.nvec + self.choice] = 1.0
        return observation

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        self.t = 0
        return self._observe(), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self.t += 1
        reward = float((np.asarray(action) == self.choice).mean())
        return self._observe(), reward, self.t >= 8, False, {}


if "SpacesTest/Match-v0" not in gym.registry:
    gym.register("SpacesTest/Match-v0", entry_point=MatchEnv)


class NaNRewardEnv(SpacesEnv):
    """``SpacesEnv`` whose rewards turn NaN after its 20th step: what a training run must not go on with."""

    def __init__(self) -> None:
        super().__init__("Box")
        self.steps = 0

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        observation, reward, terminated, truncated, info = super().step(action)
        self.steps += 1
        return observation, (float("nan") if self.steps > 20 else reward), terminated, truncated, info


class NaNRewardContinuousEnv(NaNRewardEnv):
    """``NaNRewardEnv`` with a continuous action."""

    def __init__(self) -> None:
        super().__init__()
        self.action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
