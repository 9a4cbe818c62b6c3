"""Environments that write their steps in place (``Environment.step_into``), and the batchers that use it."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from mp_helpers import LinearAgent, StepOnlyGymEnv
from test_gym_env import AllSpacesEnv

from rlstruct import (
    Agent,
    DictTensor,
    Environment,
    GymEnv,
    LocalBatcher,
    MultiprocessBatcher,
    TemporalDictTensor,
    Trajectories,
)
from rlstruct.batchers._group import Group, GroupSpec
from rlstruct.testing import CounterEnv, RandomAgent


def arrays_like(batch: DictTensor) -> dict[str, np.ndarray]:
    return {k: np.full_like(v.numpy(), 7) for k, v in batch.items()}


class FramesEnv(gym.Env[np.ndarray, np.int64]):
    """32x32x4 uint8 frames (4096 bytes, copied row by row by step_into), 7-step episodes.

    Args:
        wrong_after: from this step on, frames are uint16 (None: never).
    """

    observation_space = gym.spaces.Box(0, 255, (32, 32, 4), np.uint8)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, wrong_after: int | None = None) -> None:
        self.t, self.steps, self.wrong_after = 0, 0, wrong_after

    def _frame(self) -> np.ndarray:
        dtype = np.uint16 if self.wrong_after is not None and self.steps >= self.wrong_after else np.uint8
        return self.np_random.integers(0, 256, (32, 32, 4)).astype(dtype)

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.t = 0
        return self._frame(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self.t += 1
        self.steps += 1
        return self._frame(), float(action), self.t >= 7, False, {}


@pytest.mark.parametrize(
    ("env", "action_shape"), [("CartPole-v1", (4,)), (AllSpacesEnv, (4, 2)), (FramesEnv, (4,))]
)
def test_step_into_writes_what_step_returns(env: Any, action_shape: tuple[int, ...]) -> None:
    """Two GymEnvs on the same seeds, one stepped by step and one by step_into: 300 steps, resets among them.

    AllSpacesEnv has a Dict observation of every supported space.
    """
    by_step, in_place = GymEnv(env, n_envs=4, seed=3), GymEnv(env, n_envs=4, seed=3)
    first = by_step.reset(DictTensor(batch_size=4), auto_reset=True)
    for key, value in in_place.reset(DictTensor(batch_size=4), auto_reset=True).items():
        assert torch.equal(value, first[key]), key
    reached, observation = arrays_like(first), arrays_like(first)
    generator = torch.Generator().manual_seed(0)
    resets = 0
    for _ in range(300):
        action = DictTensor({"action": torch.randint(0, 2, action_shape, generator=generator)})
        expected_reached, expected_observation = by_step.step(action)
        in_place.step_into(action, reached, observation)
        for key in first:
            assert np.array_equal(reached[key], expected_reached[key].numpy()), key
            assert np.array_equal(observation[key], expected_observation[key].numpy()), key
            assert reached[key].dtype == expected_reached[key].numpy().dtype, key
        resets += int(observation["initial_state"].sum())
    assert resets > 10  # the rows patched in place were exercised
    by_step.close()
    in_place.close()


def test_step_into_writes_through_strided_views() -> None:
    """The arrays may be views of [n_envs, T, ...] storage, as a batcher hands them."""
    env = GymEnv("CartPole-v1", n_envs=3, seed=0)
    first = env.reset(DictTensor(batch_size=3), auto_reset=True)
    storage = {k: np.zeros((3, 5, *v.shape[1:]), v.numpy().dtype) for k, v in first.items()}
    env.step_into(
        DictTensor({"action": torch.zeros(3, dtype=torch.int64)}),
        {k: v[:, 1] for k, v in storage.items()},
        {k: v[:, 2] for k, v in storage.items()},
    )
    assert np.array_equal(storage["observation"][:, 1], storage["observation"][:, 2])
    assert storage["observation"][:, 1].any() and not storage["observation"][:, 0].any()
    assert storage["reward"][:, 1].tolist() == [1.0, 1.0, 1.0]
    assert storage["last_action"][:, 2].tolist() == [0, 0, 0]
    env.close()


def test_step_into_refuses_episodic_mode_and_missing_keys() -> None:
    env = GymEnv("CartPole-v1", n_envs=2, seed=0)
    action = DictTensor({"action": torch.zeros(2, dtype=torch.int64)})
    with pytest.raises(RuntimeError, match=r"step_into\(\) needs reset\(env_info, auto_reset=True\)"):
        env.step_into(action, {}, {})
    first = env.reset(DictTensor(batch_size=2))
    with pytest.raises(RuntimeError, match="auto_reset=True"):
        env.step_into(action, arrays_like(first), arrays_like(first))
    first = env.reset(DictTensor(batch_size=2), auto_reset=True)
    reached = arrays_like(first)
    del reached["done"]
    with pytest.raises(ValueError, match=r"step_into: reached must map the keys .*'done'"):
        env.step_into(action, reached, arrays_like(first))
    wrong = arrays_like(first)
    wrong["reward"] = wrong["reward"].astype(np.float64)
    with pytest.raises(ValueError, match=r"step_into: observation must map the keys .*float64"):
        env.step_into(action, arrays_like(first), wrong)
    env.close()


class DriftingCartPole(gym.Wrapper[Any, Any, Any, Any]):
    """CartPole whose observations turn float64 after 30 steps: the space says float32."""

    def __init__(self) -> None:
        super().__init__(gym.make("CartPole-v1"))
        self.steps = 0

    def step(self, action: Any) -> Any:
        self.steps += 1
        observation, *rest = self.env.step(action)
        return (observation.astype(np.float64) if self.steps > 30 else observation), *rest


def test_step_into_names_an_observation_whose_dtype_changes_later() -> None:
    env = GymEnv(DriftingCartPole, n_envs=2, seed=0)
    first = env.reset(DictTensor(batch_size=2), auto_reset=True)
    reached, observation = arrays_like(first), arrays_like(first)
    action = DictTensor({"action": torch.zeros(2, dtype=torch.int64)})
    with pytest.raises(ValueError, match=r"observation key 'observation' must have dtype float32.*float64"):
        for _ in range(40):
            env.step_into(action, reached, observation)
    env.close()


def test_step_into_names_a_frame_whose_dtype_changes_later() -> None:
    env = GymEnv(FramesEnv, n_envs=2, seed=0, wrong_after=20)
    first = env.reset(DictTensor(batch_size=2), auto_reset=True)
    reached, observation = arrays_like(first), arrays_like(first)
    action = DictTensor({"action": torch.zeros(2, dtype=torch.int64)})
    with pytest.raises(ValueError, match=r"key 'observation' must have dtype uint8 .*dtype uint16"):
        for _ in range(30):
            env.step_into(action, reached, observation)
    env.close()


def test_the_base_environment_has_no_step_into() -> None:
    env = CounterEnv(n_envs=2)
    env.reset(DictTensor(batch_size=2), auto_reset=True)
    with pytest.raises(NotImplementedError, match="CounterEnv does not implement step_into; call step"):
        env.step_into(DictTensor({"action": torch.zeros(2, dtype=torch.int64)}), {}, {})
    assert Environment.step_into is CounterEnv.step_into


class CountedGymEnv(GymEnv):
    """A GymEnv that counts the calls of its two ways of stepping."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls = {"step": 0, "step_into": 0}

    def step(self, action: DictTensor) -> tuple[DictTensor, DictTensor]:
        self.calls["step"] += 1
        return super().step(action)

    def step_into(self, action: DictTensor, reached: Any, observation: Any) -> None:
        self.calls["step_into"] += 1
        super().step_into(action, reached, observation)


@pytest.mark.parametrize("auto_reset", [True, False])
def test_a_group_steps_in_place_after_one_checked_run_in_auto_reset_mode_only(auto_reset: bool) -> None:
    group = Group(RandomAgent, CountedGymEnv, GroupSpec(0, "group", {}, {"env": "CartPole-v1"}, 2, 0))
    group.reset(DictTensor(batch_size=2), DictTensor(batch_size=2), auto_reset)
    for _ in range(3):
        group.run(10)
    calls = group.env.calls  # type: ignore[attr-defined]
    if auto_reset:
        assert calls == {"step": 10, "step_into": 20}
    else:
        assert calls["step_into"] == 0 and calls["step"] > 0
    group.reset(DictTensor(batch_size=2), DictTensor(batch_size=2), auto_reset)  # checked again after a reset
    group.run(10)
    assert calls["step"] == (20 if auto_reset else calls["step"])
    group.close()


def test_a_subclass_that_overrides_step_alone_is_stepped_through_step() -> None:
    group = Group(RandomAgent, StepOnlyGymEnv, GroupSpec(0, "group", {}, {"env": "CartPole-v1"}, 2, 0))
    assert not group.steps_into
    group.close()
    assert Group(RandomAgent, CountedGymEnv, GroupSpec(0, "g", {}, {"env": "CartPole-v1"}, 2, 0)).steps_into


def batches(batcher: Any, n: int) -> list[Trajectories]:
    batcher.reset()
    out = []
    for _ in range(n):
        if batcher.mode != "stream":
            batcher.execute()
        out.append(batcher.get())
    return out


def assert_same(expected: Trajectories, got: Trajectories) -> None:
    assert list(got.trajectories.keys()) == list(expected.trajectories.keys())
    for key in expected.trajectories:
        assert torch.equal(got.trajectories[key], expected.trajectories[key]), key
    assert torch.equal(got.trajectories.lengths, expected.trajectories.lengths)
    assert list(got.info.keys()) == list(expected.info.keys())
    for key in expected.info:
        assert torch.equal(got.info[key], expected.info[key]), key


class WindowCartPoleAgent(Agent):
    """Acts on the sum of the cart positions in its window of 3 steps, plus a draw of its generator."""

    def require_history(self) -> bool | int:
        return 3

    def forward(
        self,
        state: DictTensor,
        observation: DictTensor,
        agent_info: DictTensor,
        history: TemporalDictTensor | None = None,
    ) -> tuple[DictTensor, DictTensor]:
        assert history is not None
        n = observation.n_elems()
        seen = history["observation"][..., 0].sum(1) if history.n_timesteps() else torch.zeros(n)
        noise = torch.rand(n, generator=self.generator)
        action = ((seen + observation["observation"][:, 0] + noise - 0.5) > 0).long()
        return DictTensor({"action": action, "seen": seen}), state


@pytest.mark.parametrize("layout", ["full", "compact"])
@pytest.mark.parametrize("agent", [LinearAgent, WindowCartPoleAgent], ids=["linear", "history"])
def test_a_local_batcher_writing_in_place_returns_the_batches_of_one_copying(layout: str, agent: Any) -> None:
    out = {}
    for env in (StepOnlyGymEnv, GymEnv):
        with LocalBatcher(
            agent,
            {},
            env,
            {"env": "CartPole-v1"},
            n_envs=3,
            n_timesteps=25,
            n_processes=2,
            layout=layout,
            weights=agent().state_dict(),
        ) as batcher:
            out[env] = batches(batcher, 4)
    for expected, got in zip(out[StepOnlyGymEnv], out[GymEnv], strict=True):
        assert_same(expected, got)
    assert int(out[GymEnv][-1].trajectories["initial_state"].sum()) > 0  # resets inside the batches


@pytest.mark.parametrize("mode", ["fixed", "stream"])
def test_a_multiprocess_batcher_writing_in_place_returns_the_batches_of_one_copying(mode: str) -> None:
    out = {}
    for env in (StepOnlyGymEnv, GymEnv):
        with MultiprocessBatcher(
            LinearAgent,
            {},
            env,
            {"env": "CartPole-v1"},
            n_envs=3,
            n_timesteps=30,
            n_processes=1,
            mode=mode,
            weights=LinearAgent().state_dict(),
        ) as batcher:
            out[env] = batches(batcher, 4)
    for expected, got in zip(out[StepOnlyGymEnv], out[GymEnv], strict=True):
        assert_same(expected, got)
