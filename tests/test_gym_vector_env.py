"""Behaviour tests for rlstruct.GymVectorEnv: the same data as GymEnv, both rlstruct modes, the autoreset modes.

The reference is ``GymEnv`` on the same id and seed: gymnasium's ``"sync"``
vectorizer seeds sub-environment i with ``seed + i`` as GymEnv seeds instance
i, so that the two must agree step by step, final and first observations
included. ``CountdownVectorEnv``, a numpy vector environment defined here in
``DISABLED`` autoreset mode, has observations that are known functions of the
step count, so that its expected values can be written down by hand.
"""

from __future__ import annotations

import re
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode, SyncVectorEnv, VectorEnv
from test_gym_env import AllSpacesEnv

from rlstruct import (
    DictTensor,
    GymEnv,
    GymVectorEnv,
    LocalBatcher,
    MultiprocessBatcher,
    Trajectories,
    check_env,
)
from rlstruct.testing import RandomAgent

spaces = gym.spaces


def message(text: str) -> str:
    """A `match` pattern for an exact substring of an error message."""
    return re.escape(text)


def no_info(n: int) -> DictTensor:
    return DictTensor(batch_size=n)


def act(*values: int) -> DictTensor:
    return DictTensor({"action": torch.tensor(values, dtype=torch.int64)})


def assert_same(got: DictTensor, expected: DictTensor, where: str) -> None:
    assert sorted(got.keys()) == sorted(expected.keys()), where
    for key, value in expected.items():
        assert got[key].dtype == value.dtype, f"{where}: {key}"
        assert torch.equal(got[key], value), f"{where}: {key}"


class CountdownVectorEnv(VectorEnv[Any, Any, Any]):
    """Row i runs episodes of ``3 + i`` steps; observation = [t, episodes begun] (float32); reward = 10 * action.

    It never resets a row by itself (``DISABLED``) and refuses to step a row
    whose episode ended, as gymnasium's vectorizers do. ``resets`` records
    the mask of every reset. ``mode`` changes the declared autoreset mode (None:
    declare none); ``wrong_dtype`` returns float64 observations from the first
    step on.
    """

    def __init__(
        self, num_envs: int, mode: AutoresetMode | None = AutoresetMode.DISABLED, wrong_dtype: bool = False
    ) -> None:
        self.num_envs = num_envs
        self.metadata = {} if mode is None else {"autoreset_mode": mode}
        self.single_observation_space = spaces.Box(0.0, 100.0, (2,), np.float32)
        self.single_action_space = spaces.Discrete(3)
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, num_envs)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, num_envs)
        self.lengths = 3 + np.arange(num_envs)
        self.t = np.zeros(num_envs, dtype=np.int64)
        self.episodes = np.zeros(num_envs, dtype=np.int64)
        self.ended = np.zeros(num_envs, dtype=bool)
        self.wrong_dtype = wrong_dtype
        self.resets: list[list[bool]] = []
        self.closed = False

    def _obs(self, dtype: Any = np.float32) -> np.ndarray:
        return np.stack([self.t, self.episodes], axis=1).astype(dtype)

    def reset(self, *, seed: Any = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        mask = np.ones(self.num_envs, dtype=bool)
        if options is not None and "reset_mask" in options:
            mask = options["reset_mask"]
        self.resets.append(mask.tolist())
        self.t[mask] = 0
        self.episodes[mask] += 1
        self.ended[mask] = False
        return self._obs(), {}

    def step(self, actions: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        if self.ended.any():
            raise RuntimeError(f"rows {np.flatnonzero(self.ended).tolist()} stepped after their end")
        self.t += 1
        self.ended = self.t >= self.lengths
        dtype = np.float64 if self.wrong_dtype else np.float32
        return self._obs(dtype), 10.0 * actions, self.ended.copy(), np.zeros(self.num_envs, dtype=bool), {}

    def close(self, **kwargs: Any) -> None:
        self.closed = True


# ---------------------------------------------------------------------------- the same data as GymEnv


@pytest.mark.parametrize(
    ("env_id", "mode"),
    [
        ("CartPole-v1", AutoresetMode.SAME_STEP),
        ("CartPole-v1", AutoresetMode.DISABLED),
        ("Pendulum-v1", AutoresetMode.SAME_STEP),
    ],
)
def test_sync_mode_steps_exactly_like_gymenv_in_auto_reset_mode(env_id: str, mode: AutoresetMode) -> None:
    """60 steps of random actions, episodes ending among them: every key of both results equal, every step."""
    n = 3
    # Pendulum only truncates: at 12 steps, several times in 60
    make_kwargs: dict[str, Any] = {"max_episode_steps": 12}
    vector = GymVectorEnv(
        env_id,
        n_envs=n,
        seed=5,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": mode},
        make_kwargs=make_kwargs,
    )
    single = GymEnv(env_id, n_envs=n, seed=5, **make_kwargs)
    assert vector.autoreset_mode == mode
    assert_same(vector.reset(no_info(n), auto_reset=True), single.reset(no_info(n), auto_reset=True), "reset")
    generator = torch.Generator().manual_seed(0)
    ends = 0
    for t in range(60):
        if env_id == "CartPole-v1":
            action = DictTensor({"action": torch.randint(0, 2, (n,), generator=generator)})
        else:
            action = DictTensor({"action": 4 * torch.rand(n, 1, generator=generator) - 2})
        reached, observation = vector.step(action)
        expected_reached, expected_observation = single.step(action)
        assert_same(reached, expected_reached, f"step {t}, reached")
        assert_same(observation, expected_observation, f"step {t}, observation")
        ends += int(reached["done"].sum())
        if reached["done"].any():
            assert reached is not observation
            assert bool(observation["initial_state"][reached["done"]].all())
    assert ends >= 5  # the final and first observations were compared, not only running steps
    vector.close()
    single.close()


def test_a_dict_observation_space_gives_gymenvs_keys_and_data() -> None:
    """A factory of SyncVectorEnv over AllSpacesEnv (every supported space in a Dict), against GymEnv."""
    n = 2

    def factory(num_envs: int) -> VectorEnv[Any, Any, Any]:
        return SyncVectorEnv([AllSpacesEnv] * num_envs, autoreset_mode=AutoresetMode.SAME_STEP)

    vector, single = GymVectorEnv(factory, n_envs=n, seed=1), GymEnv(AllSpacesEnv, n_envs=n, seed=1)
    first = vector.reset(no_info(n), auto_reset=True)
    assert_same(first, single.reset(no_info(n), auto_reset=True), "reset")
    assert {k: first[k].dtype for k in ("position", "cells", "flags", "inner/room")} == {
        "position": torch.float64,
        "cells": torch.int64,
        "flags": torch.int8,
        "inner/room": torch.int64,
    }
    for t in range(6):  # episodes of 4 steps: one end
        action = DictTensor({"action": torch.tensor([[1, 0], [1, 1]])})
        reached, observation = vector.step(action)
        expected_reached, expected_observation = single.step(action)
        assert_same(reached, expected_reached, f"step {t}, reached")
        assert_same(observation, expected_observation, f"step {t}, observation")
    vector.close()


def test_async_mode_gives_what_sync_mode_gives() -> None:
    n = 2
    envs = [GymVectorEnv("CartPole-v1", n_envs=n, seed=9, vectorization_mode=m) for m in ("sync", "async")]
    assert [e.autoreset_mode for e in envs] == [AutoresetMode.SAME_STEP] * 2
    sync, asynchronous = (e.reset(no_info(n), auto_reset=True) for e in envs)
    assert_same(asynchronous, sync, "reset")
    for t in range(30):  # constant pushes: episodes end within 30 steps
        action = act(t % 2, 1)
        (sync_reached, sync_observation), (async_reached, async_observation) = (e.step(action) for e in envs)
        assert_same(async_reached, sync_reached, f"step {t}, reached")
        assert_same(async_observation, sync_observation, f"step {t}, observation")
    for env in envs:
        env.close()
        env.close()  # safe twice


# ---------------------------------------------------------------------------- episodic mode


def test_episodic_mode_repeats_the_final_observation_until_reset_as_gymenv_does() -> None:
    """Until every row has ended, GymVectorEnv and GymEnv return the same data; stopped rows ignore their action."""
    n = 3
    vector = GymVectorEnv("CartPole-v1", n_envs=n, seed=2, vectorization_mode="sync")
    single = GymEnv("CartPole-v1", n_envs=n, seed=2)
    assert_same(vector.reset(no_info(n)), single.reset(no_info(n)), "reset")
    stopped = torch.zeros(n, dtype=torch.bool)
    for t in range(200):
        # pushing right makes episodes short; a stopped row gets an action CartPole would refuse
        action = torch.where(stopped, 7, 1)
        reached, observation = vector.step(DictTensor({"action": action}))
        expected, _ = single.step(DictTensor({"action": action}))
        assert observation is reached
        assert_same(reached, expected, f"step {t}")
        assert bool(reached["done"][stopped].all()) and bool((reached["reward"][stopped] == 0).all())
        stopped = reached["done"].clone()
        if stopped.all():
            break
    assert stopped.all()
    final, _ = vector.step(act(5, 5, 5))  # every row stopped: the same final observations again, reward 0
    for key in ("observation", "terminated", "truncated", "done", "last_action"):
        assert torch.equal(final[key], reached[key]), key
    assert final["reward"].tolist() == [0.0, 0.0, 0.0]
    again = vector.reset(no_info(n))
    assert bool(again["initial_state"].all()) and not bool(again["done"].any())
    assert not torch.equal(again["observation"], reached["observation"])
    vector.close()


def test_episodic_mode_on_a_disabled_vector_env_resets_ended_rows_behind_the_scenes() -> None:
    """CountdownVectorEnv: row 0 ends after 3 steps, row 1 after 4; the stopped row 0 is reset, not stepped dead."""
    inner: list[CountdownVectorEnv] = []

    def factory(num_envs: int) -> CountdownVectorEnv:
        inner.append(CountdownVectorEnv(num_envs))
        return inner[0]

    env = GymVectorEnv(factory, n_envs=2)
    assert env.autoreset_mode == AutoresetMode.DISABLED
    first = env.reset(no_info(2))
    assert first["observation"].tolist() == [[0.0, 1.0], [0.0, 1.0]]
    rewards, observations = [], []
    for _ in range(5):
        reached, observation = env.step(act(1, 2))
        assert observation is reached
        rewards.append(reached["reward"].tolist())
        observations.append(reached["observation"].tolist())
    # row 0: t = 1, 2, 3 (end), then its final observation [3, 1] again with reward 0
    # row 1: t = 1, 2, 3, 4 (end), then [4, 1] again
    assert observations == [
        [[1.0, 1.0], [1.0, 1.0]],
        [[2.0, 1.0], [2.0, 1.0]],
        [[3.0, 1.0], [3.0, 1.0]],
        [[3.0, 1.0], [4.0, 1.0]],
        [[3.0, 1.0], [4.0, 1.0]],
    ]
    assert rewards == [[10.0, 20.0], [10.0, 20.0], [10.0, 20.0], [0.0, 20.0], [0.0, 0.0]]
    assert reached["terminated"].tolist() == [True, True] and reached["last_action"].tolist() == [1, 2]
    # the reset at reset(), then row 0 at its end, row 1 at its end
    assert inner[0].resets == [[True, True], [True, False], [False, True]]
    env.close()
    assert inner[0].closed


# ---------------------------------------------------------------------------- DISABLED mode


def test_auto_reset_on_a_disabled_vector_env_gives_the_final_and_the_first_observation() -> None:
    inner: list[CountdownVectorEnv] = []

    def factory(num_envs: int) -> CountdownVectorEnv:
        inner.append(CountdownVectorEnv(num_envs))
        return inner[0]

    env = GymVectorEnv(factory, n_envs=2, reward_dtype=torch.float64)
    env.reset(no_info(2), auto_reset=True)
    for _ in range(2):
        reached, observation = env.step(act(1, 1))
        assert observation is reached
    reached, observation = env.step(act(2, 1))  # row 0's third step: its end
    assert reached["observation"].tolist() == [[3.0, 1.0], [3.0, 1.0]]
    assert reached["terminated"].tolist() == [True, False] and reached["done"].tolist() == [True, False]
    assert reached["reward"].tolist() == [20.0, 10.0] and reached["reward"].dtype == torch.float64
    assert reached["last_action"].tolist() == [2, 1]
    # row 0 starts its second episode: t = 0, episodes begun = 2; row 1 as reached
    assert observation["observation"].tolist() == [[0.0, 2.0], [3.0, 1.0]]
    assert observation["initial_state"].tolist() == [True, False]
    assert observation["reward"].tolist() == [0.0, 10.0]
    assert observation["done"].tolist() == [False, False]
    assert observation["last_action"].tolist() == [0, 1]
    assert inner[0].resets == [[True, True], [True, False]]
    reached, observation = env.step(act(1, 1))  # row 0 steps on in its new episode, row 1 ends
    assert reached["observation"].tolist() == [[1.0, 2.0], [4.0, 1.0]]
    assert observation["observation"].tolist() == [[1.0, 2.0], [0.0, 2.0]]
    env.close()


# ---------------------------------------------------------------------------- NEXT_STEP is refused


def test_a_next_step_vector_env_is_refused_with_the_ways_out() -> None:
    ways_out = (
        "resets in NEXT_STEP mode",
        'Use vectorization_mode="sync" or "async"',
        "rlstruct.torch_envs.make_torch_env",
    )
    # CartPole-v1 has its own vector implementation, CartPoleVectorEnv, which make_vec picks by default
    with pytest.raises(
        ValueError, match=message("GymVectorEnv('CartPole-v1'): the vector environment CartPoleVectorEnv")
    ) as info:
        GymVectorEnv("CartPole-v1", n_envs=2)
    for text in ways_out:
        assert text in str(info.value)
    with pytest.raises(ValueError, match=message("resets in NEXT_STEP mode")):
        GymVectorEnv("CartPole-v1", n_envs=2, vectorization_mode="vector_entry_point")
    with pytest.raises(ValueError, match=message("SyncVectorEnv resets in NEXT_STEP mode")):
        GymVectorEnv("Pendulum-v1", n_envs=2, vector_kwargs={"autoreset_mode": AutoresetMode.NEXT_STEP})
    made: list[CountdownVectorEnv] = []

    def factory(num_envs: int) -> CountdownVectorEnv:
        made.append(CountdownVectorEnv(num_envs, mode=AutoresetMode.NEXT_STEP))
        return made[-1]

    with pytest.raises(ValueError, match=message("resets in NEXT_STEP mode")):
        GymVectorEnv(factory, n_envs=2)
    assert made[0].closed  # what was made is closed before the error


def test_a_str_id_without_a_vector_implementation_gets_same_step_by_itself() -> None:
    env = GymVectorEnv("Pendulum-v1", n_envs=2)  # make_vec picks "sync"
    assert isinstance(env.vector_env, SyncVectorEnv) and env.autoreset_mode == AutoresetMode.SAME_STEP
    env.close()


# ---------------------------------------------------------------------------- the contract and the batchers


@pytest.mark.parametrize("which", ["CartPole-v1", "Pendulum-v1", "countdown"])
def test_check_env_passes(which: str) -> None:
    if which == "countdown":
        env = GymVectorEnv(CountdownVectorEnv, n_envs=3)
    else:
        env = GymVectorEnv(
            which, n_envs=3, seed=4, vectorization_mode="sync", make_kwargs={"max_episode_steps": 30}
        )
    check_env(env, n_steps=80)
    env.close()


def run_once(batcher: LocalBatcher | MultiprocessBatcher) -> Trajectories:
    batcher.reset()
    batcher.execute()
    batch = batcher.get()
    assert batch is not None
    return batch


@pytest.mark.parametrize("mode", ["fixed", "episodes"])
def test_local_and_multiprocess_batchers_give_the_same_trajectories(mode: str) -> None:
    """And, in "fixed" mode (auto-reset, 40 steps: episodes end), the same as with GymEnv."""
    args: dict[str, Any] = {"n_envs": 2, "n_timesteps": 40, "seed": 7, "mode": mode}
    env_args = {"env": "CartPole-v1", "vectorization_mode": "sync"}
    agent_args = {"n_actions": 2}
    with (
        LocalBatcher(RandomAgent, agent_args, GymVectorEnv, env_args, n_processes=2, **args) as local,
        MultiprocessBatcher(
            RandomAgent, agent_args, GymVectorEnv, env_args, n_processes=2, **args
        ) as processes,
        LocalBatcher(
            RandomAgent, agent_args, GymEnv, {"env": "CartPole-v1"}, n_processes=2, **args
        ) as single,
    ):
        got, expected = run_once(processes), run_once(local)
        assert bool(expected.trajectories["next/done"].any())  # episodes ended within the batch
        assert got.equal(expected)
        for key, value in expected.trajectories.items():
            assert torch.equal(got.trajectories[key], value), key
        if mode == "fixed":
            assert run_once(single).equal(expected)


# ---------------------------------------------------------------------------- bad arguments


def make_countdown(num_envs: int, **kwargs: Any) -> CountdownVectorEnv:
    return CountdownVectorEnv(num_envs, **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "error", "text"),
    [
        ({"env": 3}, TypeError, "GymVectorEnv: env must be an environment id or a callable, got an int"),
        ({"n_envs": 0}, ValueError, "GymVectorEnv: n_envs must be at least 1, got 0"),
        ({"n_envs": 2.0}, TypeError, "GymVectorEnv: n_envs must be an int, got a float"),
        ({"seed": "1"}, TypeError, "GymVectorEnv: seed must be an int, got a str"),
        (  # before, gymnasium's own error at the first reset
            {"seed": -1},
            ValueError,
            "GymVectorEnv: seed must be at least 0 (gymnasium takes no negative seed), got -1",
        ),
        ({"reward_dtype": torch.int32}, TypeError, "reward_dtype must be torch.float16, float32 or float64"),
        (
            {"vector_kwargs": [1]},
            TypeError,
            "GymVectorEnv: vector_kwargs must be a mapping or None, got a list",
        ),
        ({"make_kwargs": "x"}, TypeError, "GymVectorEnv: make_kwargs must be a mapping or None, got a str"),
        (
            {"vectorization_mode": "threads"},
            ValueError,
            "vectorization_mode must be one of ['async', 'sync', 'vector_entry_point'] or None, got 'threads'",
        ),
        ({"make_kwargs": {"num_envs": 3}}, ValueError, "make_kwargs must not hold ['num_envs']; pass n_envs"),
        (
            {"env": make_countdown, "vectorization_mode": "sync"},
            ValueError,
            "vectorization_mode and vector_kwargs are for an environment id",
        ),
        (
            {"env": lambda num_envs: gym.make("CartPole-v1")},
            TypeError,
            "env must return a gymnasium.vector.VectorEnv, got a TimeLimit",
        ),
        (
            {"env": lambda num_envs: CountdownVectorEnv(num_envs + 1)},
            ValueError,
            "env returned a vector environment of num_envs=3, but n_envs is 2",
        ),
        (
            {"env": make_countdown, "make_kwargs": {"mode": None}},
            ValueError,
            "must declare metadata['autoreset_mode'] (a gymnasium.vector.AutoresetMode), got None",
        ),
    ],
)
def test_bad_constructor_arguments_are_named(
    kwargs: dict[str, Any], error: type[Exception], text: str
) -> None:
    arguments: dict[str, Any] = {"env": "Pendulum-v1", "n_envs": 2, **kwargs}
    with pytest.raises(error, match=message(text)):
        GymVectorEnv(**arguments)


def test_a_numpy_seed_is_an_int_as_for_gym_env() -> None:
    """Before, seed=np.int64(3) was refused as not an int."""
    rows = []
    for seed in (3, np.int64(3)):
        env = GymVectorEnv("CartPole-v1", n_envs=2, seed=seed, vectorization_mode="sync")
        rows.append(env.reset(DictTensor(batch_size=2))["observation"])
        env.close()
    assert rows[0].equal(rows[1])


def test_unsupported_spaces_are_named() -> None:
    def text_observations(num_envs: int) -> CountdownVectorEnv:
        env = CountdownVectorEnv(num_envs)
        env.single_observation_space = spaces.Dict({"note": spaces.Text(5)})
        return env

    def dict_actions(num_envs: int) -> CountdownVectorEnv:
        env = CountdownVectorEnv(num_envs)
        env.single_action_space = spaces.Dict({"move": spaces.Discrete(2)})
        return env

    with pytest.raises(
        TypeError, match=message("GymVectorEnv('text_observations'): Text spaces are not supported")
    ):
        GymVectorEnv(text_observations, n_envs=2)
    with pytest.raises(
        TypeError, match=message("GymVectorEnv('dict_actions'): Dict action spaces are not supported")
    ):
        GymVectorEnv(dict_actions, n_envs=2)


def test_bad_env_info_actions_and_calls_out_of_order_are_named() -> None:
    env = GymVectorEnv(make_countdown, n_envs=2)
    with pytest.raises(RuntimeError, match=message("GymVectorEnv('make_countdown'): step() before reset()")):
        env.step(act(1, 1))
    with pytest.raises(TypeError, match=message("env_info must be a DictTensor, got a dict")):
        env.reset({})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=message("env_info must have 2 rows (n_envs), got 3")):
        env.reset(no_info(3))
    with pytest.raises(
        ValueError, match=message("env_info must have no keys (a vector environment has no per-row")
    ):
        env.reset(DictTensor({"gravity": torch.ones(2)}))
    env.reset(no_info(2))
    with pytest.raises(TypeError, match=message("action must be a DictTensor, got a tensor")):
        env.step(torch.zeros(2))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=message("must hold the key 'action', got ['move']")):
        env.step(DictTensor({"move": torch.zeros(2)}))
    with pytest.raises(ValueError, match=message("key 'action' must have shape [2], got [3]")):
        env.step(act(1, 1, 1))
    with pytest.raises(
        TypeError,
        match=message(
            "key 'action' has dtype torch.int32, but the action space Discrete(3) needs torch.int64"
        ),
    ):
        env.step(DictTensor({"action": torch.ones(2, dtype=torch.int32)}))
    env.close()
    env.close()
    with pytest.raises(RuntimeError, match=message("reset() after close()")):
        env.reset(no_info(2))
    with pytest.raises(RuntimeError, match=message("step() after close()")):
        env.step(act(1, 1))


def test_an_observation_of_another_dtype_than_its_space_is_named() -> None:
    env = GymVectorEnv(make_countdown, n_envs=2, make_kwargs={"wrong_dtype": True})
    env.reset(no_info(2))
    with pytest.raises(
        ValueError,
        match=message(
            "observation key 'observation' after a step has dtype float64, but the observation space declares float32"
        ),
    ):
        env.step(act(1, 1))
    env.close()


def test_a_discrete_action_outside_the_space_is_refused_naming_the_row() -> None:
    env = GymVectorEnv("CartPole-v1", n_envs=3, vectorization_mode="sync")
    env.reset(no_info(3))
    with pytest.raises(
        ValueError,
        match=re.escape(
            "GymVectorEnv('CartPole-v1').step: key 'action' of row 2 is -1, outside the action space Discrete(2)"
        ),
    ):
        env.step(act(0, 1, -1))
    env.close()
