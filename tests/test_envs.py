"""Tests of rlstruct.envs: the memory tasks hide what they say, keep the rest, and register once."""

from __future__ import annotations

import re
import warnings

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlstruct import DictTensor, GymEnv, LocalBatcher, MultiprocessBatcher
from rlstruct.algos.evaluation import env_spaces
from rlstruct.envs import CueMemoryEnv, SelectObservation, register
from rlstruct.testing import RandomAgent

IDS = [
    "CartPoleNoVel-v1",
    "PendulumNoVel-v1",
    "CueMemory-v0",
    "CueMemory16-v0",
    "CueMemory64-v0",
    "CueMemory256-v0",
]


@pytest.mark.parametrize(
    ("env_id", "shape", "limit"),
    [("CartPoleNoVel-v1", (2,), 500), ("PendulumNoVel-v1", (2,), 200), ("CueMemory-v0", (3,), None)],
)
def test_spaces_dtypes_and_limits(env_id: str, shape: tuple[int, ...], limit: int | None) -> None:
    env = gym.make(env_id)
    try:
        assert env.observation_space.shape == shape and env.observation_space.dtype == np.float32
        assert env.spec is not None and env.spec.max_episode_steps == limit
        observation, _ = env.reset(seed=0)
        assert observation.shape == shape and observation.dtype == np.float32
        assert env.observation_space.contains(observation)
        observation, *_ = env.step(env.action_space.sample())
        assert observation.shape == shape and observation.dtype == np.float32
    finally:
        env.close()


def _play(env: gym.Env, actions: list) -> list[tuple]:  # type: ignore[type-arg]
    """(observation, reward, terminated, truncated) after reset(seed=5) and each action."""
    observation, _ = env.reset(seed=5)
    out = [(observation, 0.0, False, False)]
    for action in actions:
        observation, reward, terminated, truncated, _ = env.step(action)
        out.append((observation, float(reward), terminated, truncated))
        if terminated or truncated:
            break
    return out


@pytest.mark.parametrize(
    ("env_id", "base_id", "kept", "hidden"),
    [("CartPoleNoVel-v1", "CartPole-v1", [0, 2], [1, 3]), ("PendulumNoVel-v1", "Pendulum-v1", [0, 1], [2])],
)
def test_velocities_are_hidden_and_the_rest_is_the_base_env(
    env_id: str, base_id: str, kept: list[int], hidden: list[int]
) -> None:
    novel, base = gym.make(env_id), gym.make(base_id)
    rng = np.random.default_rng(0)
    if isinstance(base.action_space, gym.spaces.Discrete):
        actions: list = [int(a) for a in rng.integers(0, 2, 600)]  # type: ignore[type-arg]
    else:
        actions = [rng.uniform(-2, 2, (1,)).astype(np.float32) for _ in range(600)]
    got, expected = _play(novel, actions), _play(base, actions)
    novel.close()
    base.close()
    assert len(got) == len(expected) > 5
    velocities = np.stack([e[0][hidden] for e in expected])
    assert np.abs(velocities).max() > 0.1  # there was something to hide
    for (obs, reward, terminated, truncated), (full, full_reward, full_terminated, full_truncated) in zip(
        got, expected, strict=True
    ):
        np.testing.assert_array_equal(obs, full[kept])  # the same state, velocities left out
        assert (reward, terminated, truncated) == (full_reward, full_terminated, full_truncated)


def test_pendulum_novel_is_truncated_at_200_steps_and_cartpole_novel_reports_500() -> None:
    env = gym.make("PendulumNoVel-v1")
    steps = _play(env, [np.zeros(1, dtype=np.float32)] * 300)
    env.close()
    assert len(steps) == 201 and steps[-1][3] and not any(s[3] for s in steps[:-1])
    assert env_spaces("CartPoleNoVel-v1").obs_dim == 2
    assert env_spaces("CartPoleNoVel-v1").max_episode_steps == 500
    assert env_spaces("PendulumNoVel-v1").obs_dim == 2


def test_select_observation_rejects_bad_input() -> None:
    cartpole = gym.make("CartPole-v1")
    with pytest.raises(ValueError, match=r"keep must be indices in \[0, 4\), got \[4\]"):
        SelectObservation(cartpole, keep=[4])
    with pytest.raises(ValueError, match="keep must be indices"):
        SelectObservation(cartpole, keep=[])
    for keep in ([1.5], [True, False], ["0"], 1.5):
        with pytest.raises(TypeError, match=re.escape(f"SelectObservation: keep must be ints, got {keep}")):
            SelectObservation(cartpole, keep=keep)  # type: ignore[arg-type]
    assert SelectObservation(cartpole, keep=np.array([3, 0], dtype=np.int32)).observation_space.shape == (2,)
    cartpole.close()
    with pytest.raises(TypeError, match="1-d Box observation space"):
        SelectObservation(gym.make("FrozenLake-v1"), keep=[0])


def _answer_episode(seed: int, delay: int, answer: int | None) -> tuple[int, list[np.ndarray], float, int]:
    """Play one CueMemory episode: (the cue, the observations, the return, the steps); answer None: the cue."""
    env = CueMemoryEnv(delay=delay)
    observation, _ = env.reset(seed=seed)
    cue = int(observation[:2].argmax())
    observations, total, steps = [observation], 0.0, 0
    while True:
        action = cue if answer is None else answer
        observation, reward, terminated, truncated, _ = env.step(np.int64(action))
        total, steps = total + reward, steps + 1
        if terminated or truncated:
            break
        observations.append(observation)
    assert terminated and not truncated
    return cue, observations, total, steps


def test_cue_memory_rewards_the_right_answer_and_hides_the_cue() -> None:
    for seed in range(20):
        cue, observations, right, steps = _answer_episode(seed, delay=4, answer=None)
        assert right == 1.0 and steps == 4 + 2
        _, _, wrong, _ = _answer_episode(seed, delay=4, answer=1 - cue)
        assert wrong == -1.0
        np.testing.assert_array_equal(observations[0], np.eye(3, dtype=np.float32)[cue])
        for blank in observations[1:-1]:  # the delay: nothing tells the cue
            np.testing.assert_array_equal(blank, np.zeros(3, dtype=np.float32))
        np.testing.assert_array_equal(observations[-1], np.array([0, 0, 1], dtype=np.float32))
    # delay 0: the answer step comes right after the cue
    assert _answer_episode(0, delay=0, answer=None)[2:] == (1.0, 2)


def test_cue_memory_memoryless_constant_policies_score_zero_on_average() -> None:
    for action in (0, 1):
        returns = [_answer_episode(seed, delay=2, answer=action)[2] for seed in range(2000)]
        assert abs(np.mean(returns)) < 0.1  # the cue is uniform: standard error about 0.022


def test_cue_memory_takes_a_numpy_int_delay_as_an_int() -> None:
    """Before, ``delay=np.int64(3)`` (as a sweep over np.arange makes) was refused as not an int."""
    env = CueMemoryEnv(delay=np.int64(3))  # type: ignore[arg-type]
    assert env.delay == 3 and type(env.delay) is int
    steps = GymEnv("CueMemory-v0", n_envs=1, delay=np.int32(1))
    steps.reset(DictTensor(batch_size=1))
    for _ in range(3):  # delay + 2 steps
        reached, _ = steps.step(DictTensor({"action": torch.zeros(1, dtype=torch.int64)}))
    assert bool(reached["terminated"][0])
    steps.close()


def test_cue_memory_is_deterministic_given_the_seed_and_checks_its_input() -> None:
    cues = [_answer_episode(seed, delay=1, answer=0)[0] for seed in range(50)]
    assert cues == [_answer_episode(seed, delay=1, answer=0)[0] for seed in range(50)]
    assert 0 < sum(cues) < 50
    with pytest.raises(ValueError, match="delay must be an int >= 0, got -1"):
        CueMemoryEnv(delay=-1)
    env = CueMemoryEnv(delay=0)
    env.reset(seed=0)
    with pytest.raises(ValueError, match="action must be 0 or 1, got 2"):
        env.step(np.int64(2))
    env.step(np.int64(0))
    env.step(np.int64(0))
    with pytest.raises(RuntimeError, match=r"step\(\) after the episode ended"):
        env.step(np.int64(0))
    assert gym.make("CueMemory-v0", delay=3).unwrapped.delay == 3  # type: ignore[attr-defined]


@pytest.mark.parametrize("delay", [16, 64, 256])
def test_cue_memory_ids_of_longer_delays_make_that_delay(delay: int) -> None:
    env = gym.make(f"CueMemory{delay}-v0")
    try:
        assert env.unwrapped.delay == delay  # type: ignore[attr-defined]
        # as CueMemory-v0's, the episodes end by termination, without a time limit
        assert env.spec is not None and env.spec.max_episode_steps is None
        env.reset(seed=0)
        steps, terminated = 0, False
        while not terminated:
            _, _, terminated, truncated, _ = env.step(np.int64(0))
            steps += 1
            assert not truncated
        assert steps == delay + 2  # the cue, delay blanks, the answer step
    finally:
        env.close()


def test_registering_again_neither_warns_nor_changes_the_specs() -> None:
    before = {env_id: gym.registry[env_id] for env_id in IDS}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        register()
        register()
    assert all(gym.registry[env_id] is spec for env_id, spec in before.items())


def test_gym_env_and_local_batcher_pass_the_cue_delay() -> None:
    env = GymEnv("CueMemory-v0", n_envs=3, seed=0, delay=2)
    first = env.reset(DictTensor(batch_size=3))
    assert first["observation"].shape == (3, 3) and first["observation"].dtype == torch.float32
    env.close()
    with LocalBatcher(
        RandomAgent,
        {},
        GymEnv,
        {"env": "CueMemory-v0", "delay": 3},
        n_envs=4,
        n_timesteps=10,
        mode="episodes",
    ) as batcher:
        batcher.reset()
        batcher.execute()
        batch = batcher.get()
    assert batch is not None
    assert batch.lengths.tolist() == [5] * 4
    assert set(batch.trajectories["next/reward"][:, 4].tolist()) <= {-1.0, 1.0}


def test_multiprocess_batcher_workers_find_the_ids() -> None:
    args = {"n_envs": 2, "n_timesteps": 6, "seed": 1, "n_processes": 2}
    env_args = {"env": "CartPoleNoVel-v1"}
    with (
        MultiprocessBatcher(RandomAgent, {}, GymEnv, env_args, **args) as batcher,  # spawned workers
        LocalBatcher(RandomAgent, {}, GymEnv, env_args, **args) as local,
    ):
        batcher.reset()
        local.reset()
        batcher.execute()
        local.execute()
        got, expected = batcher.get(), local.get()
    assert got is not None and expected is not None
    assert got.trajectories["observation"].shape == (4, 6, 2)
    for key in expected.trajectories:
        assert got.trajectories[key].equal(expected.trajectories[key]), key
