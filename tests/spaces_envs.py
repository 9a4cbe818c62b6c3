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


class SpacesEnv(gym.Env[Any, Any]):
    """8 steps of random observations of ``OBSERVATIONS[kind]``; discrete or continuous actions."""

    def __init__(self, kind: str = "Box", continuous: bool = False) -> None:
        self.observation_space = OBSERVATIONS[kind]
        self.action_space = (
            gym.spaces.Box(-1.0, 1.0, (1,), np.float32) if continuous else gym.spaces.Discrete(2)
        )
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
    for _suffix, _continuous in (("", False), ("Continuous", True)):
        _id = f"SpacesTest/{_kind}{_suffix}-v0"
        if _id not in gym.registry:
            gym.register(_id, entry_point=SpacesEnv, kwargs={"kind": _kind, "continuous": _continuous})


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
