"""``BitFlip-v0`` and DQN with hindsight relabelling (``--her``): the task's spaces, rewards, truncation
and seeding, its batched reward, the checks of ``her``, relabelled samples of DQN's own buffer, and a
smoke run whose saved agent replays its final evaluation.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from algo_helpers import assert_the_run_replays_its_final_evaluation, message
from gymnasium.utils.env_checker import check_env

from rlstruct import DictTensor, GymEnv, LocalBatcher
from rlstruct.algos import dqn
from rlstruct.algos.evaluation import env_spaces
from rlstruct.envs import BitFlipEnv, bitflip_reward
from rlstruct.replay import HindsightReplayBuffer
from rlstruct.testing import RandomAgent


class GoalsWithoutReward(BitFlipEnv):
    """Goal keys in its observation, but no batched reward: what ``--her`` cannot relabel."""

    torch_reward = None  # type: ignore[assignment]


# ---------------------------------------------------------------------------- the task


def test_spaces_are_three_float32_bit_boxes_and_observation_is_the_achieved_goal() -> None:
    env = BitFlipEnv(n_bits=6)
    bits = gym.spaces.Box(0.0, 1.0, (6,), np.float32)
    assert isinstance(env.observation_space, gym.spaces.Dict)
    assert dict(env.observation_space.spaces) == {
        "observation": bits,
        "achieved_goal": bits,
        "desired_goal": bits,
    }
    assert env.action_space == gym.spaces.Discrete(6)
    observation, info = env.reset(seed=0)
    assert env.observation_space.contains(observation)
    assert info == {"is_success": False}
    for _ in range(6):
        np.testing.assert_array_equal(observation["observation"], observation["achieved_goal"])
        observation, *_ = env.step(np.int64(env.action_space.sample()))
        assert env.observation_space.contains(observation)


def test_an_episode_by_hand() -> None:
    env = BitFlipEnv(n_bits=3)
    observation, _ = env.reset(seed=6)
    # start 011, goal 010: one flip (bit 2) away
    np.testing.assert_array_equal(observation["achieved_goal"], [0.0, 1.0, 1.0])
    np.testing.assert_array_equal(observation["desired_goal"], [0.0, 1.0, 0.0])
    steps = [env.step(np.int64(a)) for a in (2, 1, 1)]  # 010 (goal), 000, 010 (goal)
    states = [s[0]["achieved_goal"].tolist() for s in steps]
    assert states == [[0.0, 1.0, 0.0], [0.0, 0.0, 0.0], [0.0, 1.0, 0.0]]
    assert [s[1] for s in steps] == [0.0, -1.0, 0.0]  # 0 where the new state is the goal, -1 elsewhere
    assert [s[2] for s in steps] == [False, False, False]  # never terminated
    assert [s[3] for s in steps] == [False, False, True]  # truncated after n_bits steps
    assert [s[4]["is_success"] for s in steps] == [True, False, True]
    assert all(type(s[4]["is_success"]) is bool for s in steps)
    assert all(np.array_equal(s[0]["desired_goal"], [0.0, 1.0, 0.0]) for s in steps)  # the goal stays
    with pytest.raises(RuntimeError, match=message("step() after the episode ended; call reset()")):
        env.step(np.int64(0))


def test_the_goal_differs_from_the_start() -> None:
    env = BitFlipEnv(n_bits=1)
    for seed in range(30):
        observation, _ = env.reset(seed=seed)
        assert observation["desired_goal"][0] == 1.0 - observation["achieved_goal"][0]
        # one bit: the only action reaches the goal, and the one step ends the episode
        assert env.step(np.int64(0))[1:4] == (0.0, False, True)


def play(env_id: str, seed: int, actions: list[int]) -> list[tuple[Any, ...]]:
    """The observations (as tuples, by key), rewards, flags and successes of one episode from ``reset(seed)``."""
    env = gym.make(env_id)
    observation, _ = env.reset(seed=seed)
    out: list[tuple[Any, ...]] = [tuple(tuple(observation[k].tolist()) for k in sorted(observation))]
    for action in actions:
        observation, *rest, info = env.step(np.int64(action))
        out.append(
            (*(tuple(observation[k].tolist()) for k in sorted(observation)), *rest, info["is_success"])
        )
    env.close()
    return out


def test_same_seed_same_episode() -> None:
    actions = [int(a) for a in np.random.default_rng(0).integers(0, 15, 15)]
    first = play("BitFlip-v0", 3, actions)
    assert first == play("BitFlip-v0", 3, actions)
    assert first != play("BitFlip-v0", 4, actions)
    starts = {play("BitFlip-v0", seed, [])[0] for seed in range(20)}
    assert len(starts) == 20  # 2^30 start-goal pairs: any repeat would be a seeding fault


@pytest.mark.parametrize("n_bits", [0, -3, 2.0, True, "15"])
def test_bad_n_bits_are_refused(n_bits: object) -> None:
    with pytest.raises(ValueError, match=message(f"BitFlipEnv: n_bits must be an int >= 1, got {n_bits!r}")):
        BitFlipEnv(n_bits=n_bits)  # type: ignore[arg-type]


def test_a_numpy_int_n_bits_is_an_int() -> None:
    """Before, ``n_bits=np.int64(4)`` was refused as not an int."""
    env = BitFlipEnv(n_bits=np.int64(4))  # type: ignore[arg-type]
    assert env.n_bits == 4 and type(env.n_bits) is int
    assert env.reset(seed=0)[0]["observation"].shape == (4,)


def test_an_action_out_of_range_is_refused() -> None:
    env = BitFlipEnv(n_bits=4)
    env.reset(seed=0)
    with pytest.raises(ValueError, match=message("BitFlipEnv: action must be an int in [0, 4), got 4")):
        env.step(np.int64(4))


@pytest.mark.parametrize("n_bits", [2, 15])  # one bit truncates after one step, which the checker refuses
def test_gymnasium_env_checker_passes(n_bits: int) -> None:
    check_env(BitFlipEnv(n_bits=n_bits), skip_render_check=True)


@pytest.mark.parametrize(("env_id", "n_bits"), [("BitFlip-v0", 15), ("BitFlip25-v0", 25)])
def test_registered_ids(env_id: str, n_bits: int) -> None:
    env = gym.make(env_id)
    assert env.unwrapped.n_bits == n_bits  # type: ignore[attr-defined]
    assert env.spec is not None and env.spec.max_episode_steps == n_bits
    env.close()
    spaces = env_spaces(env_id)
    assert sorted(spaces.observation) == ["achieved_goal", "desired_goal", "observation"]
    assert spaces.n_actions == n_bits and spaces.max_episode_steps == n_bits


# ---------------------------------------------------------------------------- the batched reward


def test_bitflip_reward_by_hand() -> None:
    achieved = torch.tensor([[0, 1, 1], [0, 1, 1], [1, 1, 1], [0, 0, 0]], dtype=torch.float32)
    desired = torch.tensor([[0, 1, 1], [0, 1, 0], [0, 0, 0], [0, 0, 0]], dtype=torch.float32)
    reward = bitflip_reward(achieved, desired)
    # equal, one bit off, all bits off, equal
    assert reward.tolist() == [0.0, -1.0, -1.0, 0.0]
    assert reward.dtype == torch.float32 and reward.shape == (4,)
    assert bitflip_reward(achieved.long(), desired.long()).dtype == torch.float32
    assert BitFlipEnv.torch_reward is bitflip_reward
    with pytest.raises(ValueError, match=message("must both be [n, n_bits], got shapes (4, 3) and (4, 2)")):
        bitflip_reward(achieved, desired[:, :2])


def test_gym_env_stores_the_goals_and_bitflip_reward_gives_the_env_rewards() -> None:
    with LocalBatcher(
        RandomAgent, {}, GymEnv, {"env": "BitFlip-v0", "n_bits": 4}, n_envs=3, n_timesteps=12, seed=1
    ) as batcher:
        batcher.reset()
        batcher.execute()
        batch = batcher.get()
    assert batch is not None
    steps = batch.trajectories
    for key in ("observation", "achieved_goal", "desired_goal"):
        assert steps[key].shape == (3, 12, 4) and steps[key].dtype == torch.float32
        assert steps[f"next/{key}"].shape == (3, 12, 4)
    # every fourth step ends an episode, by truncation ("fixed" mode resets without a step of its own)
    ends = torch.zeros(3, 12, dtype=torch.bool)
    ends[:, 3::4] = True
    assert steps["next/done"].equal(ends) and steps["next/truncated"].equal(ends)
    assert not steps["next/terminated"].any()
    reached = bitflip_reward(
        steps["next/achieved_goal"].flatten(0, 1), steps["next/desired_goal"].flatten(0, 1)
    )
    assert reached.view(3, 12).equal(steps["next/reward"])


# ---------------------------------------------------------------------------- DQN --her


def config(tmp_path: Path, **changes: Any) -> dqn.Config:
    base = dqn.Config(
        env="BitFlip-v0",
        her=True,
        total_steps=480,
        n_envs=2,
        n_steps=30,  # two whole episodes of 15 steps a row
        learning_starts=120,
        batch_size=32,
        hidden=16,
        eval_every=240,
        eval_episodes=2,
        run_dir=str(tmp_path / "runs"),
        progress=False,
    )
    return dataclasses.replace(base, **changes)


def test_hindsight_keys_add_the_goals_and_the_episode_ends() -> None:
    observed = ("achieved_goal", "desired_goal", "observation")
    assert dqn.hindsight_keys(observed) == (*dqn.transition_keys(observed), "next/done")
    assert dqn.hindsight_keys(("observation", "desired_goal")) == (
        *dqn.transition_keys(("observation", "desired_goal")),
        "achieved_goal",
        "next/achieved_goal",
        "next/done",
    )


@pytest.mark.parametrize(
    ("changes", "text"),
    [
        (
            {"recurrent": True},
            "config.her cannot be combined with config.recurrent: hindsight relabelling replays single "
            "transitions, drawn uniformly",
        ),
        (
            {"prioritized": True},
            "config.her cannot be combined with config.prioritized: hindsight relabelling replays single "
            "transitions, drawn uniformly",
        ),
        (
            {"env": "CartPole-v1"},
            "config.her needs an observation with the keys ['achieved_goal', 'desired_goal'] (a Dict "
            "observation space with those entries, as goal-conditioned environments have); config.env "
            "'CartPole-v1' observes ['observation'], without ['achieved_goal', 'desired_goal']",
        ),
        (
            {"env": "test_hindsight_dqn:GoalsWithoutReward"},
            "config.her needs the environment's batched reward, to recompute the rewards of relabelled "
            "goals: config.env 'test_hindsight_dqn:GoalsWithoutReward' (GoalsWithoutReward) has no "
            "callable torch_reward(achieved_goal, desired_goal) -> reward (see rlstruct.envs.BitFlipEnv)",
        ),
        ({"her_strategy": "last"}, "config.her_strategy must be 'future' or 'final', got 'last'"),
        ({"her_k": -1}, "config: her_k must be at least 0, got -1"),
    ],
)
def test_her_configs_are_checked_before_anything_starts(
    tmp_path: Path, changes: dict[str, Any], text: str
) -> None:
    with pytest.raises(ValueError, match=message(text)):
        dqn.train(config(tmp_path, **changes))
    assert not (tmp_path / "runs").exists()


def test_the_goal_checks_pass_without_her(tmp_path: Path) -> None:
    dqn.check(config(tmp_path, her=False, env="test_hindsight_dqn:GoalsWithoutReward", prioritized=True))


def test_dqn_with_her_smoke_run_replays_its_final_evaluation(tmp_path: Path) -> None:
    results = dqn.train(config(tmp_path))
    assert results["env_steps"] == 480
    assert_the_run_replays_its_final_evaluation(results)
    checkpoint = torch.load(Path(results["run_dir"]) / "checkpoint.pt", weights_only=True)
    assert checkpoint["grad_steps"] == 7 * 15  # every batch of 60 steps from 120 on: 0.25 x 60 steps


def test_dqn_relabels_its_replay_with_rewards_of_bitflip_reward(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    buffers: list[object] = []
    learn = dqn.learn

    def recording_learn(model: Any, target: Any, optimizer: Any, buffer: Any, *args: Any) -> dict[str, float]:
        buffers.append(buffer)
        return learn(model, target, optimizer, buffer, *args)

    monkeypatch.setattr(dqn, "learn", recording_learn)
    dqn.train(config(tmp_path, her_k=4, eval_every=10**9))
    buffer = buffers[-1]
    assert isinstance(buffer, HindsightReplayBuffer) and len(buffer) == 480
    assert (buffer.k, buffer.strategy, buffer.capacity) == (4, "future", 100_000)
    stored = buffer.state_dict()["storage"]
    assert set(dqn.hindsight_keys(("achieved_goal", "desired_goal", "observation"))) <= set(stored)

    sample = buffer.sample(4096)
    rows = sample.rows
    # every reward, relabelled or not, is the reward of the goal the row now holds
    assert rows["next/reward"].equal(bitflip_reward(rows["next/achieved_goal"], rows["desired_goal"]))
    assert rows["desired_goal"].equal(rows["next/desired_goal"])  # both relabelled alike
    relabelled = (rows["desired_goal"] != stored["desired_goal"][sample.indices]).any(1)
    # k / (k + 1) = 0.8 relabelled, less the few goals drawn equal to the real one
    assert 0.7 < float(relabelled.float().mean()) <= 0.8 + 0.03
    # with "future", the transition's own reached goal can be drawn: relabelled rewards of 0 are common,
    # while the real goals of these 15-bit episodes were all but never reached
    assert float((rows["next/reward"][relabelled] == 0.0).float().mean()) > 0.1
    assert float((rows["next/reward"][~relabelled] == 0.0).float().mean()) < 0.05
    # the original rows are the stored ones
    for key in ("observation", "action", "next/observation", "next/terminated"):
        assert rows[key].equal(stored[key][sample.indices]), key
    assert isinstance(rows, DictTensor)
