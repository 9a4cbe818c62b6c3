"""Behaviour tests for rlstruct.GymEnv: modes, seeding, dtypes, env_info as make kwargs, and every input error.

Most tests use ``StepEnv``, a gymnasium environment defined here whose
observations are known functions of the step count, so that every expected
value can be written down by hand; ``NestedEnv`` does the same with Tuple and
Dict spaces nested in each other. ``observation_spaces`` is tested here too.
"""

from __future__ import annotations

import pickle
import re
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlstruct import Agent, DictTensor, GymEnv, LocalBatcher, TemporalDictTensor
from rlstruct.gym_env import UnknownEnvironment, check_env_id, observation_spaces, resolve_env
from rlstruct.specs import ObservationSpace

spaces = gym.spaces


def message(text: str) -> str:
    """A `match` pattern for an exact substring of an error message."""
    return re.escape(text)


def no_info(n: int) -> DictTensor:
    return DictTensor(batch_size=n)


def act(*values: int) -> DictTensor:
    return DictTensor({"action": torch.tensor(values, dtype=torch.int64)})


class StepEnv(gym.Env[Any, Any]):
    """Observation = the step count in a Box of ``dtype`` (shape [2]: t and -t); reward = 10 * action.

    The episode ends after ``length`` steps (terminated, or truncated with
    ``truncate``). ``fault`` makes the environment misbehave, from step
    ``fault_at`` on (-1: already at reset): "dtype" returns float64 for a float32
    space, "range" leaves the space, "shape" returns 3 entries instead of 2,
    "reward" returns a non-number reward.
    """

    def __init__(
        self,
        length: int = 3,
        dtype: Any = np.float32,
        truncate: bool = False,
        fault: str | None = None,
        fault_at: int = -1,
    ) -> None:
        self.observation_space = spaces.Box(-100, 100, (2,), dtype=dtype)
        self.action_space = spaces.Discrete(3)
        self.length, self.dtype, self.truncate = length, dtype, truncate
        self.fault, self.fault_at = fault, fault_at

    def _obs(self) -> Any:
        faulty = self.fault is not None and self.t > self.fault_at
        dtype = np.float64 if faulty and self.fault == "dtype" else self.dtype
        obs = np.array([self.t, -self.t], dtype=dtype)
        if faulty and self.fault == "range":
            obs[0] = 1000
        if faulty and self.fault == "shape":
            obs = np.array([self.t, -self.t, 0], dtype=dtype)
        return obs

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action: Any) -> Any:
        self.t += 1
        reward: Any = 10.0 * int(action)
        if self.fault == "reward":
            reward = "ten"
        end = self.t >= self.length
        return self._obs(), reward, end and not self.truncate, end and self.truncate, {}


class AllSpacesEnv(gym.Env[Any, Any]):
    """A Dict observation holding every supported space, each a known function of the step count."""

    def __init__(self) -> None:
        self.observation_space = spaces.Dict(
            {
                "position": spaces.Box(-10.0, 10.0, (2,), dtype=np.float64),
                "cells": spaces.MultiDiscrete([3, 4]),
                "flags": spaces.MultiBinary(3),
                "inner": spaces.Dict({"room": spaces.Discrete(5)}),
            }
        )
        self.action_space = spaces.MultiDiscrete([2, 2])

    def _obs(self) -> Any:
        t = self.t
        return {
            "position": np.array([t / 4, -t / 4], dtype=np.float64),
            "cells": np.array([t % 3, t % 4], dtype=np.int64),
            "flags": np.array([t % 2, 0, 1], dtype=np.int8),
            "inner": {"room": t},
        }

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action: Any) -> Any:
        self.t += 1
        return self._obs(), float(action.sum()), self.t >= 4, False, {}


NESTED_SPACES = {
    # a Tuple holding a Box, a Discrete with a start and a Dict
    "tuple": spaces.Tuple(
        [
            spaces.Discrete(3, start=1),
            spaces.Box(-10.0, 10.0, (2,), dtype=np.float32),
            spaces.Dict({"room": spaces.Discrete(5), "flags": spaces.MultiBinary(2)}),
        ]
    ),
    # a Dict holding a Tuple (itself holding a Tuple) and a Box
    "dict": spaces.Dict(
        {
            "pair": spaces.Tuple([spaces.MultiDiscrete([2, 3]), spaces.Tuple([spaces.Discrete(4)])]),
            "position": spaces.Box(-10.0, 10.0, (1,), dtype=np.float64),
        }
    ),
}


def nested_observation(layout: str, t: int) -> Any:
    """The raw observation of ``NestedEnv(layout)`` at step ``t``: what each key must hold."""
    if layout == "tuple":
        room_and_flags = {"room": t % 5, "flags": np.array([t % 2, 1], dtype=np.int8)}
        return (1 + t % 3, np.array([t, -t], dtype=np.float32), room_and_flags)
    pair = (np.array([t % 2, t % 3], dtype=np.int64), (t % 4,))
    return {"pair": pair, "position": np.array([t / 2], dtype=np.float64)}


class NestedEnv(gym.Env[Any, Any]):
    """Observations of ``NESTED_SPACES[layout]`` given by ``nested_observation``; episodes of ``length`` steps."""

    def __init__(self, layout: str = "tuple", length: int = 3) -> None:
        self.layout, self.length = layout, length
        self.observation_space = NESTED_SPACES[layout]
        self.action_space = spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        super().reset(seed=seed)
        self.t = 0
        return nested_observation(self.layout, self.t), {}

    def step(self, action: Any) -> Any:
        self.t += 1
        return nested_observation(self.layout, self.t), 1.0, self.t >= self.length, False, {}


def nested_rows(layout: str, steps: list[int]) -> dict[str, torch.Tensor]:
    """What GymEnv must store for instances at the given step counts, key by key, worked out by hand."""
    rows = [nested_observation(layout, t) for t in steps]
    if layout == "tuple":
        return {
            "0": torch.tensor([r[0] for r in rows], dtype=torch.int64),
            "1": torch.tensor(np.stack([r[1] for r in rows])),
            "2/flags": torch.tensor(np.stack([r[2]["flags"] for r in rows])),
            "2/room": torch.tensor([r[2]["room"] for r in rows], dtype=torch.int64),
        }
    return {
        "pair/0": torch.tensor(np.stack([r["pair"][0] for r in rows])),
        "pair/1/0": torch.tensor([r["pair"][1][0] for r in rows], dtype=torch.int64),
        "position": torch.tensor(np.stack([r["position"] for r in rows])),
    }


def assert_observations(batch: DictTensor, expected: dict[str, torch.Tensor]) -> None:
    """``batch`` holds exactly the keys of ``expected`` besides rlstruct.env's, with their values and dtypes."""
    standard = {"reward", "terminated", "truncated", "done", "initial_state", "last_action"}
    assert set(batch.keys()) - standard == set(expected)
    for key, value in expected.items():
        assert batch[key].dtype == value.dtype, key
        assert batch[key].equal(value), (key, batch[key], value)


class Recorder:
    """A factory that records the kwargs of every environment it makes."""

    __name__ = "Recorder"

    def __init__(self) -> None:
        self.made: list[dict[str, Any]] = []

    def __call__(self, **kwargs: Any) -> gym.Env[Any, Any]:
        self.made.append(kwargs)
        return StepEnv(length=int(kwargs.get("length", 3)))


# ---------------------------------------------------------------------------- modes


def test_reset_returns_first_observations_with_the_required_keys() -> None:
    env = GymEnv(StepEnv, n_envs=2)
    first = env.reset(no_info(2))
    assert first["observation"].equal(torch.zeros(2, 2))
    assert first["reward"].equal(torch.zeros(2))
    assert first["initial_state"].all() and not first["done"].any()
    assert not first["terminated"].any() and not first["truncated"].any()
    assert first["last_action"].equal(torch.zeros(2, dtype=torch.int64))
    env.close()


def test_episodic_mode_repeats_the_final_observation_with_reward_0_and_done() -> None:
    env = GymEnv(StepEnv, n_envs=2)
    env.reset(DictTensor({"length": torch.tensor([1, 3])}))
    reached, observation = env.step(act(1, 2))
    assert observation is reached
    assert reached["observation"][:, 0].tolist() == [1.0, 1.0]
    assert reached["reward"].tolist() == [10.0, 20.0]
    assert reached["done"].tolist() == [True, False] and reached["terminated"].tolist() == [True, False]
    for _ in range(3):  # instance 0 has stopped: its action is ignored
        reached, _ = env.step(act(2, 1))
    assert reached["observation"][:, 0].tolist() == [1.0, 3.0]
    assert reached["reward"].tolist() == [0.0, 0.0]  # instance 1 finished at the previous step
    assert reached["done"].tolist() == [True, True] and reached["terminated"].tolist() == [True, True]
    assert reached["last_action"].tolist() == [1, 1]
    assert not reached["initial_state"].any()
    env.close()


def test_episodic_mode_keeps_truncated_on_the_repeated_steps() -> None:
    env = GymEnv(StepEnv, n_envs=1, length=1, truncate=True)
    env.reset(no_info(1))
    for _ in range(2):
        reached, _ = env.step(act(1))
        assert reached["truncated"].tolist() == [True] and reached["terminated"].tolist() == [False]
    env.close()


def test_auto_reset_mode_returns_the_final_and_the_fresh_observation() -> None:
    env = GymEnv(StepEnv, n_envs=2)
    env.reset(DictTensor({"length": torch.tensor([2, 5])}), auto_reset=True)
    reached, observation = env.step(act(1, 1))
    assert observation is reached  # nobody ended
    reached, observation = env.step(act(2, 1))
    assert reached["observation"][:, 0].tolist() == [2.0, 2.0]
    assert reached["done"].tolist() == [True, False] and reached["reward"].tolist() == [20.0, 10.0]
    assert reached["last_action"].tolist() == [2, 1]
    assert observation["observation"][:, 0].tolist() == [0.0, 2.0]
    assert observation["initial_state"].tolist() == [True, False]
    assert observation["reward"].tolist() == [0.0, 10.0]
    assert not observation["done"].any() and not observation["terminated"].any()
    assert observation["last_action"].tolist() == [0, 1]
    reached, _ = env.step(act(1, 1))
    assert reached["observation"][:, 0].tolist() == [1.0, 3.0]  # instance 0 runs its new episode
    env.close()


def test_cartpole_episodic_mode_stops_finished_instances() -> None:
    env = GymEnv("CartPole-v1", n_envs=2, seed=0)
    env.reset(no_info(2))
    push_left = act(0, 0)
    done_at: list[int | None] = [None, None]
    final: dict[int, torch.Tensor] = {}
    for step in range(30):
        reached, _ = env.step(push_left)
        for i in range(2):
            if done_at[i] is None and reached["done"][i]:
                done_at[i], final[i] = step, reached["observation"][i].clone()
            elif done_at[i] is not None:
                assert reached["observation"][i].equal(final[i])
                assert reached["reward"][i] == 0.0 and reached["terminated"][i]
    assert done_at[0] is not None and done_at[1] is not None  # constant pushes topple the pole
    env.close()


# ---------------------------------------------------------------------------- seeding


def test_cartpole_instances_get_seed_plus_index() -> None:
    env, again, shifted = (
        GymEnv("CartPole-v1", n_envs=3, seed=7),
        GymEnv("CartPole-v1", n_envs=3, seed=7),
        GymEnv("CartPole-v1", n_envs=1, seed=9),
    )
    first = env.reset(no_info(3))["observation"]
    assert len({tuple(row.tolist()) for row in first}) == 3
    assert again.reset(no_info(3))["observation"].equal(first)
    assert shifted.reset(no_info(1))["observation"].equal(first[2:])
    # later resets continue each instance's stream instead of reseeding it
    second = env.reset(no_info(3))["observation"]
    assert not second.equal(first)
    assert again.reset(no_info(3))["observation"].equal(second)
    for e in (env, again, shifted):
        e.close()


def test_a_negative_seed_is_named_before_gymnasium_sees_it() -> None:
    """Before, gymnasium's own error ('Seed must be greater or equal to zero') at the first reset."""
    with pytest.raises(
        ValueError,
        match=re.escape("GymEnv: seed must be at least 0 (gymnasium takes no negative seed), got -1"),
    ):
        GymEnv("CartPole-v1", n_envs=2, seed=-1)
    env = GymEnv("CartPole-v1", n_envs=2, seed=0)
    with pytest.raises(
        ValueError,
        match=re.escape(
            "GymEnv('CartPole-v1').reset: env_info['seed'] must hold seeds of at least 0 "
            "(gymnasium takes no negative seed), got -5 in row 1"
        ),
    ):
        env.reset(DictTensor({"seed": torch.tensor([3, -5])}))
    # unsigned seeds (NumPy's SeedSequence.generate_state gives uint32) are taken as they are
    state = np.random.SeedSequence(7).generate_state(2)
    first = env.reset(DictTensor({"seed": torch.from_numpy(state)}))["observation"]
    again = env.reset(DictTensor({"seed": torch.tensor(state.tolist(), dtype=torch.int64)}))["observation"]
    assert first.equal(again)
    env.close()


def test_the_seed_key_of_env_info_reseeds_at_every_reset_but_not_at_automatic_ones() -> None:
    env, reference = GymEnv("CartPole-v1", n_envs=2, seed=0), GymEnv("CartPole-v1", n_envs=2, seed=40)
    seeds = DictTensor({"seed": torch.tensor([40, 41])})
    first = env.reset(seeds)["observation"]
    assert first.equal(reference.reset(no_info(2))["observation"])  # seed 40 + i, as GymEnv(seed=40)
    assert env.reset(seeds)["observation"].equal(first)  # the same episodes again
    assert not env.reset(no_info(2))["observation"].equal(first)  # without the key, the streams continue
    # automatic resets within a run continue the stream: episodes do not repeat
    env.reset(seeds, auto_reset=True)
    starts = []
    for _ in range(200):
        _, following = env.step(act(1, 1))
        starts += list(following["observation"][following["initial_state"]])
    assert len(starts) >= 4 and len({tuple(r.tolist()) for r in starts}) == len(starts)
    with pytest.raises(
        TypeError,
        match=message(
            "env_info['seed'] must hold one integer per row, got dtype torch.float32 and shape [2]"
        ),
    ):
        env.reset(DictTensor({"seed": torch.tensor([1.0, 2.0])}))
    env.close()
    reference.close()


# ---------------------------------------------------------------------------- dtypes


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_box_observations_keep_the_space_dtype(dtype: torch.dtype) -> None:
    env = GymEnv(StepEnv, n_envs=2, dtype=np.float32 if dtype == torch.float32 else np.float64)
    first = env.reset(no_info(2))
    reached, _ = env.step(act(0, 1))
    for obs in (first, reached):
        assert obs["observation"].dtype == dtype and obs["observation"].shape == (2, 2)
    assert reached["observation"].equal(torch.tensor([[1.0, -1.0], [1.0, -1.0]], dtype=dtype))
    env.close()


def test_discrete_observations_are_int64() -> None:
    env = GymEnv("FrozenLake-v1", n_envs=2)
    first = env.reset(no_info(2))
    assert first["observation"].dtype == torch.int64 and first["observation"].equal(
        torch.zeros(2, dtype=torch.int64)
    )
    reached, _ = env.step(act(1, 2))
    assert reached["observation"].dtype == torch.int64 and reached["observation"].shape == (2,)
    env.close()


def test_dict_multidiscrete_and_multibinary_spaces_keep_their_dtypes() -> None:
    env = GymEnv(AllSpacesEnv, n_envs=2)
    env.reset(no_info(2))
    reached, _ = env.step(DictTensor({"action": torch.tensor([[1, 0], [1, 1]])}))
    expected = {
        "position": torch.tensor([[0.25, -0.25], [0.25, -0.25]], dtype=torch.float64),
        "cells": torch.tensor([[1, 1], [1, 1]], dtype=torch.int64),
        "flags": torch.tensor([[1, 0, 1], [1, 0, 1]], dtype=torch.int8),
        "inner/room": torch.tensor([1, 1], dtype=torch.int64),
    }
    for key, value in expected.items():
        assert reached[key].dtype == value.dtype, key
        assert reached[key].equal(value), key
    assert reached["reward"].tolist() == [1.0, 2.0]
    assert reached["last_action"].equal(torch.tensor([[1, 0], [1, 1]]))
    env.close()


@pytest.mark.parametrize("layout", ["tuple", "dict"])
def test_tuple_and_dict_spaces_nested_both_ways_give_one_key_per_leaf(layout: str) -> None:
    env = GymEnv(NestedEnv, n_envs=2, layout=layout)
    assert_observations(env.reset(no_info(2)), nested_rows(layout, [0, 0]))
    for t in (1, 2):
        reached, observation = env.step(act(1, 0))
        assert observation is reached
        assert_observations(reached, nested_rows(layout, [t, t]))
    assert list(observation_spaces(env.observation_space)) == list(nested_rows(layout, [0]))
    env.close()


@pytest.mark.parametrize("layout", ["tuple", "dict"])
def test_nested_observations_are_reset_in_auto_reset_mode(layout: str) -> None:
    env = GymEnv(NestedEnv, n_envs=2, layout=layout)
    env.reset(DictTensor({"length": torch.tensor([1, 3])}), auto_reset=True)
    reached, following = env.step(act(1, 1))
    assert_observations(reached, nested_rows(layout, [1, 1]))
    assert following["initial_state"].tolist() == [True, False]
    assert_observations(following, nested_rows(layout, [0, 1]))  # instance 0 starts again at t = 0
    env.close()


@pytest.mark.parametrize("layout", ["tuple", "dict"])
def test_step_into_writes_nested_observations_and_patches_the_resets(layout: str) -> None:
    env = GymEnv(NestedEnv, n_envs=2, layout=layout)
    first = env.reset(DictTensor({"length": torch.tensor([1, 3])}), auto_reset=True)
    reached = {key: value.numpy().copy() for key, value in first.items()}
    observation = {key: value.numpy().copy() for key, value in first.items()}
    env.step_into(act(1, 1), reached, observation)
    as_batch = DictTensor({key: torch.from_numpy(value) for key, value in reached.items()})
    assert_observations(as_batch, nested_rows(layout, [1, 1]))
    as_batch = DictTensor({key: torch.from_numpy(value) for key, value in observation.items()})
    assert_observations(as_batch, nested_rows(layout, [0, 1]))
    assert observation["initial_state"].tolist() == [True, False]
    env.close()


def test_reward_dtype_is_configurable() -> None:
    env = GymEnv(StepEnv, n_envs=1, reward_dtype=torch.float64)
    env.reset(no_info(1))
    reached, _ = env.step(act(1))
    assert reached["reward"].dtype == torch.float64 and reached["reward"].tolist() == [10.0]
    env.close()


# ---------------------------------------------------------------------------- env_info as make kwargs


def test_factory_receives_env_info_rows_merged_over_make_kwargs() -> None:
    recorder = Recorder()
    env = GymEnv(recorder, n_envs=2, length=4, colour="red")
    goal = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    env.reset(DictTensor({"length": torch.tensor([2, 5]), "goal": goal}))
    assert [m["length"] for m in recorder.made] == [2, 5]  # env_info wins over make_kwargs
    assert [type(m["length"]) for m in recorder.made] == [int, int]  # 0-d values become numbers
    assert [m["colour"] for m in recorder.made] == ["red", "red"]
    assert recorder.made[1]["goal"].equal(goal[1])  # other rows stay tensors
    env.close()


def test_a_module_factory_named_by_a_string_makes_the_instances() -> None:
    env = GymEnv("rlstruct.envs:make_cartpole_novel", n_envs=2)  # a function, not a registered id
    first = env.reset(DictTensor(batch_size=2))
    assert first["observation"].shape == (2, 2)  # cart position and pole angle only
    env.close()
    assert resolve_env("CartPole-v1") == "CartPole-v1"
    assert (
        resolve_env("rlstruct.envs:CueMemory-v0") == "rlstruct.envs:CueMemory-v0"
    )  # registered: for gym.make


def test_narrower_floats_of_env_info_arrive_as_the_decimal_the_user_wrote() -> None:
    recorder = Recorder()
    env = GymEnv(recorder, n_envs=2)
    env.reset(
        DictTensor(
            {
                "half": torch.tensor(
                    [0.1, 65504.0], dtype=torch.float16
                ),  # 0.0999755859375 as a Python float
                "brain": torch.tensor([9.8, 0.001], dtype=torch.bfloat16),  # 9.8125, 0.00099945068359375
            }
        )
    )
    assert [(m["half"], m["brain"]) for m in recorder.made] == [(0.1, 9.8), (65500.0, 0.001)]
    env.close()


def test_a_dict_entry_with_a_slash_in_its_name_is_refused_by_name() -> None:
    nested = gym.spaces.Dict({"b": gym.spaces.Discrete(2)})
    space = gym.spaces.Dict({"a/b": gym.spaces.Box(-1, 1, (1,)), "a": nested})  # both would be key 'a/b'
    with pytest.raises(
        ValueError, match=re.escape("observation_spaces: the observation entry 'a/b' has a '/' in its name")
    ):
        observation_spaces(space)
    deeper = gym.spaces.Dict({"arm": gym.spaces.Dict({"x/y": gym.spaces.Discrete(2)})})
    with pytest.raises(ValueError, match=re.escape("the observation entry 'arm/x/y' has a '/' in its name")):
        observation_spaces(deeper)


def test_float32_env_info_reaches_the_environment_as_the_decimal_the_user_wrote() -> None:
    recorder = Recorder()
    env = GymEnv(recorder, n_envs=3)
    gravity = torch.tensor([9.8, 1.62, 3.721])  # float32: 9.800000190734863 as a plain Python float
    env.reset(DictTensor({"gravity": gravity, "wind": torch.tensor([0.1, 0.2, 0.3], dtype=torch.float64)}))
    assert [m["gravity"] for m in recorder.made] == [9.8, 1.62, 3.721]
    assert [m["wind"] for m in recorder.made] == [0.1, 0.2, 0.3]  # float64 values as they are
    assert all(type(m["gravity"]) is float for m in recorder.made)
    env.close()


def test_instances_are_made_again_only_when_their_row_changes() -> None:
    recorder = Recorder()
    env = GymEnv(recorder, n_envs=3)
    env.reset(DictTensor({"length": torch.tensor([2, 3, 4])}))
    assert len(recorder.made) == 3
    env.reset(DictTensor({"length": torch.tensor([2, 3, 4])}))
    assert len(recorder.made) == 3
    env.reset(DictTensor({"length": torch.tensor([2, 9, 4])}))
    assert recorder.made[3:] == [{"length": 9}]
    env.close()


def test_instances_are_made_again_when_env_info_is_edited_in_place() -> None:
    recorder = Recorder()
    env = GymEnv(recorder, n_envs=2)
    w = DictTensor({"goal": torch.zeros(2, 3)})
    env.reset(w)
    w["goal"][1] = 5.0  # a curriculum that updates w in place
    env.reset(w)
    assert len(recorder.made) == 3
    assert recorder.made[2]["goal"].tolist() == [5.0, 5.0, 5.0]
    assert recorder.made[1]["goal"].tolist() == [0.0, 0.0, 0.0]  # what the factory got is a copy
    env.close()


def test_pendulum_gets_g_from_env_info_and_is_remade_and_reseeded_when_it_changes() -> None:
    env = GymEnv("Pendulum-v1", n_envs=2, seed=3)
    first = env.reset(DictTensor({"g": torch.tensor([10.0, 0.0], dtype=torch.float64)}))
    reached, _ = env.step(DictTensor({"action": torch.zeros(2, 1)}))
    # without gravity and torque the angular velocity (observation[2]) does not change
    assert reached["observation"][1, 2] == first["observation"][1, 2]
    assert reached["observation"][0, 2] != first["observation"][0, 2]
    again = env.reset(DictTensor({"g": torch.tensor([10.0, 5.0], dtype=torch.float64)}))
    # instance 0 was kept (its stream goes on), instance 1 was made again and seeded with seed + 1
    assert not again["observation"][0].equal(first["observation"][0])
    assert again["observation"][1].equal(first["observation"][1])
    env.close()


def test_gym_env_in_a_batcher_gets_its_env_info_rows() -> None:
    class Zero(Agent):
        def forward(
            self,
            state: DictTensor,
            observation: DictTensor,
            agent_info: DictTensor,
            history: TemporalDictTensor | None = None,
        ) -> tuple[DictTensor, DictTensor]:
            return DictTensor({"action": torch.zeros(observation.n_elems(), dtype=torch.int64)}), state

    w = DictTensor({"length": torch.tensor([1, 2, 3, 4])})
    with LocalBatcher(
        Zero, {}, GymEnv, {"env": StepEnv}, n_envs=2, n_timesteps=5, n_processes=2, mode="episodes"
    ) as batcher:
        batcher.reset(env_info=w)
        batcher.execute()
        batch = batcher.get()
    assert batch is not None
    assert batch.lengths.tolist() == [1, 2, 3, 4]
    assert batch.trajectories["observation"].dtype == torch.float32


# ---------------------------------------------------------------------------- pybullet


class RandomBoxAgent(Agent):
    """Uniform float32 actions in [-1, 1]^size."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size

    def forward(
        self,
        state: DictTensor,
        observation: DictTensor,
        agent_info: DictTensor,
        history: TemporalDictTensor | None = None,
    ) -> tuple[DictTensor, DictTensor]:
        n = observation.n_elems()
        action = torch.rand(n, self.size, generator=self.generator) * 2 - 1
        return DictTensor({"action": action}), state


def test_pybullet_half_cheetah_runs_in_a_batcher() -> None:
    pytest.importorskip("pybullet", reason="pybullet is not installed (pip install -e '.[bullet]')")
    pytest.importorskip("pybullet_envs_gymnasium", reason="pybullet-envs-gymnasium is not installed")
    with LocalBatcher(
        RandomBoxAgent,
        {"size": 6},
        GymEnv,
        {"env": "pybullet_envs_gymnasium:HalfCheetahBulletEnv-v0"},
        n_envs=2,
        n_timesteps=4,
    ) as batcher:
        batcher.reset()
        batcher.execute()
        batch = batcher.get()
    assert batch is not None
    steps = batch.trajectories
    assert steps["observation"].dtype == torch.float32 and steps["observation"].shape == (2, 4, 26)
    assert steps["action"].dtype == torch.float32 and steps["action"].shape == (2, 4, 6)
    assert steps["action"].abs().le(1).all()
    assert steps["next/last_action"].equal(steps["action"])
    assert steps["next/observation"][:, :-1].equal(steps["observation"][:, 1:])
    assert steps["next/reward"].dtype == torch.float32 and steps["next/reward"].isfinite().all()


# ---------------------------------------------------------------------------- errors


def test_constructor_arguments_are_checked() -> None:
    for bad in (0, -2, 1.5, True):
        with pytest.raises(ValueError, match=message(f"GymEnv: n_envs must be a positive int, got {bad!r}")):
            GymEnv("CartPole-v1", n_envs=bad)  # type: ignore[arg-type]
    with pytest.raises(
        TypeError, match=message("GymEnv: env must be an environment id or a callable, got an int")
    ):
        GymEnv(3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=message("GymEnv: seed must be an int, got a float")):
        GymEnv("CartPole-v1", seed=1.0)  # type: ignore[arg-type]


def test_factory_must_return_a_gymnasium_env() -> None:
    def make(**kwargs: Any) -> Any:
        return "CartPole-v1"

    env = GymEnv(make, n_envs=1)
    with pytest.raises(
        TypeError, match=message("GymEnv('make'): the factory must return a gymnasium.Env, got a str")
    ):
        env.reset(no_info(1))
    env.close()


def test_unsupported_spaces_and_mismatched_instances_raise() -> None:
    class TextInTupleEnv(StepEnv):
        def __init__(self) -> None:
            super().__init__()
            self.observation_space = spaces.Tuple([spaces.Discrete(2), spaces.Text(4)])

    env = GymEnv(TextInTupleEnv)
    with pytest.raises(
        TypeError,
        match=message(
            "GymEnv('TextInTupleEnv'): Text spaces are not supported; use Box, Discrete, MultiDiscrete, "
            "MultiBinary, or Dict and Tuple spaces of them"
        ),
    ):
        env.reset(no_info(1))
    env.close()
    env = GymEnv(lambda wide: StepEnv(dtype=np.float64 if wide else np.float32), n_envs=2)
    with pytest.raises(
        ValueError,
        match=message(
            "GymEnv('<lambda>'): instance 1 has spaces Box(-100.0, 100.0, (2,), float64) / Discrete(3), "
            "instance 0 has Box(-100.0, 100.0, (2,), float32) / Discrete(3); all instances must match"
        ),
    ):
        env.reset(DictTensor({"wide": torch.tensor([0, 1])}))
    env.close()


def test_remaking_instance_0_with_other_spaces_than_the_rest_raises() -> None:
    env = GymEnv(lambda wide: StepEnv(dtype=np.float64 if wide else np.float32), n_envs=2)
    env.reset(DictTensor({"wide": torch.tensor([0, 0])}))
    env.step(act(0, 0))
    with pytest.raises(
        ValueError,
        match=message(
            "GymEnv('<lambda>'): instance 1 has spaces Box(-100.0, 100.0, (2,), float32) / Discrete(3), "
            "instance 0 has Box(-100.0, 100.0, (2,), float64) / Discrete(3); all instances must match"
        ),
    ):
        env.reset(DictTensor({"wide": torch.tensor([1, 0])}))
    env.close()


def test_remade_instances_are_checked_like_new_ones() -> None:
    env = GymEnv(lambda bad: StepEnv(fault="range" if bad else None), n_envs=2)
    env.reset(DictTensor({"bad": torch.tensor([0, 0])}))
    env.step(act(0, 0))  # the first instances passed their checks
    with pytest.raises(
        ValueError,
        match=message(
            "GymEnv('<lambda>'), instance 1: observation key 'observation' at reset is array([1000.,"
        ),
    ):
        env.reset(DictTensor({"bad": torch.tensor([0, 1])}))
    env.close()


def test_env_info_must_be_a_dicttensor_of_n_envs_rows() -> None:
    env = GymEnv(StepEnv, n_envs=2)
    with pytest.raises(
        ValueError, match=message("GymEnv('StepEnv').reset: env_info must have 2 rows (n_envs), got 3")
    ):
        env.reset(DictTensor({"length": torch.tensor([1, 2, 3])}))
    with pytest.raises(
        TypeError, match=message("GymEnv('StepEnv').reset: env_info must be a DictTensor, got a dict")
    ):
        env.reset({"length": torch.tensor([1, 2])})  # type: ignore[arg-type]
    env.close()


def test_actions_are_checked() -> None:
    env = GymEnv(StepEnv, n_envs=2)
    with pytest.raises(RuntimeError, match=message("GymEnv('StepEnv'): step() before reset()")):
        env.step(act(0, 0))
    env.reset(no_info(2))
    with pytest.raises(
        ValueError,
        match=message("GymEnv('StepEnv').step: the agent's output must hold the key 'action', got ['move']"),
    ):
        env.step(DictTensor({"move": torch.zeros(2, dtype=torch.int64)}))
    with pytest.raises(
        ValueError, match=message("GymEnv('StepEnv').step: key 'action' must have shape [2], got [2, 1]")
    ):
        env.step(DictTensor({"action": torch.zeros(2, 1, dtype=torch.int64)}))
    with pytest.raises(
        TypeError,
        match=message(
            "GymEnv('StepEnv').step: key 'action' has dtype torch.int32, but the action space Discrete(3) needs torch.int64"
        ),
    ):
        env.step(DictTensor({"action": torch.zeros(2, dtype=torch.int32)}))
    with pytest.raises(
        TypeError, match=message("GymEnv('StepEnv').step: action must be a DictTensor, got a tensor")
    ):
        env.step(torch.zeros(2, dtype=torch.int64))  # type: ignore[arg-type]
    env.close()


def test_box_actions_are_checked() -> None:
    env = GymEnv("Pendulum-v1", n_envs=2)
    env.reset(no_info(2))
    with pytest.raises(
        ValueError, match=message("GymEnv('Pendulum-v1').step: key 'action' must have shape [2, 1], got [2]")
    ):
        env.step(DictTensor({"action": torch.zeros(2)}))
    with pytest.raises(
        TypeError, match=message("key 'action' has dtype torch.float64, but the action space")
    ):
        env.step(DictTensor({"action": torch.zeros(2, 1, dtype=torch.float64)}))
    env.close()


def test_reset_and_step_after_close_raise_and_close_twice_is_fine() -> None:
    env = GymEnv(StepEnv, n_envs=1)
    env.reset(no_info(1))
    env.close()
    env.close()
    with pytest.raises(RuntimeError, match=message("GymEnv('StepEnv'): reset() after close()")):
        env.reset(no_info(1))
    with pytest.raises(RuntimeError, match=message("GymEnv('StepEnv'): step() after close()")):
        env.step(act(0))


def faulty(n_envs: int, fault: str, fault_at: int, bad_instance: int = 1) -> GymEnv:
    """A GymEnv whose instance ``bad_instance`` misbehaves (chosen through env_info)."""

    def make(bad: int) -> StepEnv:
        return StepEnv(length=10, fault=fault if bad else None, fault_at=fault_at)

    env = GymEnv(make, n_envs=n_envs)
    if fault_at >= 0:
        env.reset(DictTensor({"bad": (torch.arange(n_envs) == bad_instance).long()}))
    return env


def test_observation_of_the_wrong_dtype_at_reset_names_env_instance_and_key() -> None:
    env = faulty(3, "dtype", fault_at=-1)
    with pytest.raises(
        ValueError,
        match=message(
            "GymEnv('make'), instance 1: observation key 'observation' at reset has dtype float64 and shape (2,), "
            "but the observation space declares float32 and (2,)"
        ),
    ):
        env.reset(DictTensor({"bad": torch.tensor([0, 1, 0])}))
    env.close()


def test_observation_of_the_wrong_dtype_after_the_first_step_is_caught() -> None:
    env = faulty(2, "dtype", fault_at=0)
    with pytest.raises(
        ValueError,
        match=message(
            "GymEnv('make'), instance 1: observation key 'observation' after the first step has dtype float64"
        ),
    ):
        env.step(act(0, 0))
    env.close()


def test_observation_of_the_wrong_dtype_at_a_later_step_is_never_cast() -> None:
    env = faulty(2, "dtype", fault_at=2)
    env.step(act(0, 0))
    env.step(act(0, 0))
    with pytest.raises(
        ValueError,
        match=message(
            "GymEnv('make'), instance 1: observation key 'observation' has dtype float64, "
            "but the observation space declares float32"
        ),
    ):
        env.step(act(0, 0))
    env.close()


@pytest.mark.parametrize("bad_instance", [1, -1])  # -1: every instance
@pytest.mark.parametrize("auto_reset", [False, True])
def test_observation_of_the_wrong_shape_at_a_later_step_is_refused_naming_the_key(
    bad_instance: int, auto_reset: bool
) -> None:
    env = GymEnv(lambda bad: StepEnv(length=10, fault="shape" if bad else None, fault_at=1), n_envs=2)
    bad = torch.tensor([bad_instance in (0, -1), bad_instance in (1, -1)]).long()
    env.reset(DictTensor({"bad": bad}), auto_reset=auto_reset)
    env.step(act(0, 0))
    first = 0 if bad_instance == -1 else bad_instance
    with pytest.raises(
        ValueError,
        match=message(
            f"GymEnv('<lambda>'), instance {first}: observation key 'observation' has shape (3,), "
            "but the observation space declares (2,)"
        ),
    ):
        env.step(act(0, 0))
    env.close()


def test_observation_outside_its_space_names_env_instance_and_key() -> None:
    env = faulty(2, "range", fault_at=0)
    with pytest.raises(
        ValueError,
        match=message(
            "GymEnv('make'), instance 1: observation key 'observation' after the first step is array([1000.,"
        ),
    ):
        env.step(act(0, 0))
    env.close()
    env = GymEnv(lambda: StepEnv(fault="range"), n_envs=1)
    with pytest.raises(
        ValueError,
        match=message("which lies outside the observation space Box(-100.0, 100.0, (2,), float32)"),
    ):
        env.reset(no_info(1))
    env.close()


def test_reward_that_is_not_a_number_raises() -> None:
    env = faulty(2, "reward", fault_at=0, bad_instance=0)
    with pytest.raises(
        ValueError,
        match=message("GymEnv('make'), instance 0: the reward of the first step is a str, expected a number"),
    ):
        env.step(act(0, 0))
    env.close()


# ---------------------------------------------------------------------------- observation_spaces


def test_observation_spaces_of_a_box_and_of_a_popgym_like_discrete_space() -> None:
    box = spaces.Box(0, 255, (84, 84, 3), dtype=np.uint8)
    assert observation_spaces(box) == {"observation": ObservationSpace("box", (84, 84, 3), torch.uint8)}
    wide = spaces.Box(-1.0, 1.0, (2, 3), dtype=np.float64)
    assert observation_spaces(wide) == {"observation": ObservationSpace("box", (2, 3), torch.float64)}
    # popgym's card and memory tasks observe a bare Discrete(4)
    assert observation_spaces(spaces.Discrete(4)) == {
        "observation": ObservationSpace("discrete", (), torch.int64, n=(4,), start=(0,))
    }


def test_observation_spaces_of_discrete_multidiscrete_and_multibinary_spaces() -> None:
    (discrete,) = observation_spaces(spaces.Discrete(5, start=-2)).values()
    assert discrete == ObservationSpace("discrete", (), torch.int64, n=(5,), start=(-2,))
    grid = spaces.MultiDiscrete(np.array([[2, 3], [4, 5]]), start=np.array([[0, 1], [2, 3]]))
    (cells,) = observation_spaces(grid).values()
    # nvec and start flattened row by row
    assert cells == ObservationSpace("multidiscrete", (2, 2), torch.int64, n=(2, 3, 4, 5), start=(0, 1, 2, 3))
    (no_start,) = observation_spaces(spaces.MultiDiscrete([2, 3], dtype=np.int32)).values()
    assert no_start == ObservationSpace("multidiscrete", (2,), torch.int32, n=(2, 3), start=(0, 0))
    (bits,) = observation_spaces(spaces.MultiBinary([2, 3])).values()
    assert bits == ObservationSpace("multibinary", (2, 3), torch.int8)


def test_observation_spaces_of_dict_and_tuple_spaces_use_gym_envs_keys() -> None:
    box = ObservationSpace("box", (2,), torch.float32)
    assert observation_spaces(NESTED_SPACES["tuple"]) == {
        "0": ObservationSpace("discrete", (), torch.int64, n=(3,), start=(1,)),
        "1": box,
        "2/flags": ObservationSpace("multibinary", (2,), torch.int8),
        "2/room": ObservationSpace("discrete", (), torch.int64, n=(5,), start=(0,)),
    }
    assert observation_spaces(NESTED_SPACES["dict"]) == {
        "pair/0": ObservationSpace("multidiscrete", (2,), torch.int64, n=(2, 3), start=(0, 0)),
        "pair/1/0": ObservationSpace("discrete", (), torch.int64, n=(4,), start=(0,)),
        "position": ObservationSpace("box", (1,), torch.float64),
    }
    # the keys, dtypes and shapes of what GymEnv stores
    env = GymEnv(AllSpacesEnv, n_envs=2)
    first = env.reset(no_info(2))
    described = observation_spaces(env.observation_space)
    assert list(described) == ["cells", "flags", "inner/room", "position"]
    for key, space in described.items():
        assert first[key].dtype == space.dtype and first[key].shape == (2, *space.shape), key
    env.close()


def test_observation_spaces_refuses_what_gym_env_refuses() -> None:
    with pytest.raises(
        TypeError,
        match=message(
            "observation_spaces: Sequence spaces are not supported; use Box, Discrete, MultiDiscrete"
        ),
    ):
        observation_spaces(spaces.Dict({"seen": spaces.Sequence(spaces.Discrete(2))}))
    with pytest.raises(
        TypeError, match=message("observation_spaces: space must be a gymnasium.Space, got a tuple")
    ):
        observation_spaces((spaces.Discrete(2),))  # type: ignore[arg-type]


def test_dict_and_tuple_action_spaces_are_refused() -> None:
    class DictActionEnv(StepEnv):
        def __init__(self) -> None:
            super().__init__()
            self.action_space = spaces.Dict({"move": spaces.Discrete(3), "force": spaces.Box(-1, 1, (1,))})

    env = GymEnv(DictActionEnv, n_envs=2)
    with pytest.raises(
        TypeError, match=message("GymEnv('DictActionEnv'): Dict action spaces are not supported; use Box")
    ):
        env.reset(no_info(2))
    env.close()


@pytest.mark.parametrize("name", ["reward", "done", "last_action"])
def test_an_observation_entry_named_as_a_flag_is_refused(name: str) -> None:
    class ClashingEnv(StepEnv):
        def __init__(self) -> None:
            super().__init__()
            self.observation_space = spaces.Dict({name: spaces.Box(-9, 9, (2,)), "x": spaces.Discrete(3)})

    env = GymEnv(ClashingEnv, n_envs=2)
    with pytest.raises(
        ValueError, match=message(f"GymEnv('ClashingEnv'): the observation entries ['{name}'] are named")
    ):
        env.reset(no_info(2))
    env.close()
    with pytest.raises(ValueError, match=message(f"observation_spaces: the observation entries ['{name}']")):
        observation_spaces(ClashingEnv().observation_space)


class ActionEnv(gym.Env[Any, Any]):
    """Takes any action of ``action_space`` and records it; episodes last ``length`` steps."""

    def __init__(self, action_space: gym.Space[Any], length: int = 5) -> None:
        self.observation_space = spaces.Box(-1, 1, (1,), dtype=np.float32)
        self.action_space, self.length, self.taken = action_space, length, []

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action: Any) -> Any:
        self.taken.append(np.asarray(action).tolist())
        self.t += 1
        return np.zeros(1, np.float32), 0.0, self.t >= self.length, False, {}


@pytest.mark.parametrize(
    ("space", "good", "bad", "shown"),
    [
        (spaces.Discrete(2), [0, 1, 1], [0, 2, 1], "of row 1 is 2"),
        (spaces.Discrete(3, start=1), [1, 3, 2], [1, 2, 0], "of row 2 is 0"),
        (
            spaces.MultiDiscrete([2, 3], start=[1, 0]),
            [[1, 0], [2, 2], [1, 1]],
            [[1, 0], [2, 2], [0, 1]],
            "of row 2 is [0, 1]",
        ),
        (spaces.MultiBinary(2), [[0, 1], [1, 1], [0, 0]], [[0, 1], [1, 2], [0, 0]], "of row 1 is [1, 2]"),
    ],
)
@pytest.mark.parametrize("auto_reset", [False, True])
def test_discrete_actions_outside_the_space_are_refused_naming_the_row(
    space: gym.Space[Any], good: list[Any], bad: list[Any], shown: str, auto_reset: bool
) -> None:
    dtype = torch.from_numpy(np.zeros(0, space.dtype)).dtype
    env = GymEnv(lambda: ActionEnv(space), n_envs=3)
    env.reset(no_info(3), auto_reset=auto_reset)
    env.step(DictTensor({"action": torch.tensor(good, dtype=dtype)}))
    assert [e.taken for e in env._envs] == [[g] for g in good]  # type: ignore[union-attr]
    with pytest.raises(
        ValueError,
        match=message(f"GymEnv('<lambda>').step: key 'action' {shown}, outside the action space {space}"),
    ):
        env.step(DictTensor({"action": torch.tensor(bad, dtype=dtype)}))
    assert [len(e.taken) for e in env._envs] == [1, 1, 1]  # type: ignore[union-attr]
    env.close()


def test_the_actions_of_finished_rows_are_not_checked() -> None:
    env = GymEnv(lambda: ActionEnv(spaces.Discrete(2, start=1), length=1), n_envs=2)
    env.reset(no_info(2))
    env.step(act(1, 2))
    _, observation = env.step(act(0, 0))  # both rows have ended: nothing is stepped
    assert observation["done"].tolist() == [True, True]
    env.close()


def test_check_env_id_takes_known_ids_and_names_the_rest() -> None:
    owner = "Scheme: env_args['env']"
    for known in ("CartPole-v1", "CartPole", "CueMemory-v0"):
        check_env_id(owner, known)
    with pytest.raises(TypeError, match=re.escape(f"{owner} must be an environment id (a str), got an int")):
        check_env_id(owner, 3)  # type: ignore[arg-type]
    # an empty module name was Python's own "Empty module name", unwrapped
    with pytest.raises(
        UnknownEnvironment, match=re.escape(f"{owner}: unknown environment ':CartPol-v1' (ValueError")
    ):
        check_env_id(owner, ":CartPol-v1")
    # two colons: gymnasium.make reads "gymnasium" and "foo:CartPole-v1", which is no id
    with pytest.raises(
        UnknownEnvironment, match=re.escape(f"{owner}: unknown environment 'gymnasium:foo:CartPole-v1'")
    ):
        check_env_id(owner, "gymnasium:foo:CartPole-v1")
    with pytest.raises(
        UnknownEnvironment, match=re.escape(f"{owner}: unknown environment 'no_such_module_x:Foo-v0'")
    ):
        check_env_id(owner, "no_such_module_x:Foo-v0")


def test_unknown_environment_hints_name_the_flag_only_on_the_command_line() -> None:
    error = gym.error.NameNotFound("not registered")
    assert "--env popgym:popgym-RepeatPreviousEasy-v0" in str(
        UnknownEnvironment("popgym-RepeatPreviousEasy-v0", error)
    )
    from_scheme = UnknownEnvironment("popgym-RepeatPreviousEasy-v0", error, "Scheme: env_args['env']")
    assert "--env" not in str(from_scheme)
    assert "the popgym extra: 'popgym:popgym-RepeatPreviousEasy-v0'" in str(from_scheme)


def test_unknown_environment_survives_pickling() -> None:
    """It crosses from a worker process or a Ray actor; its three-argument constructor made it fail to unpickle."""
    error = UnknownEnvironment("CartPol-v1", gym.error.NameNotFound("no"), "Scheme: env_args['env']")
    error.add_note("a note")
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is UnknownEnvironment and str(copy) == str(error) and copy.env == "CartPol-v1"
    assert copy.__notes__ == ["a note"]
