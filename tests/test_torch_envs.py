"""Tests of rlstruct.torch_envs: the torch tasks step as their gymnasium ids do, and keep the contract.

The reference is gymnasium: each row of a ``TorchEnv`` is stepped beside a
``gymnasium.make(id)`` instance whose first state was copied into that row,
with the same actions, over whole episodes, and must give the same
observations, rewards, ``terminated`` and ``truncated`` at every step. In
float64 the torch dynamics are gymnasium's: CartPole and CueMemory are exact,
Pendulum within 1e-6; the rewards are float32, so within float32 rounding.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlstruct import DictTensor, LocalBatcher, MultiprocessBatcher, Trajectories, check_env
from rlstruct.testing import RandomAgent
from rlstruct.torch_env import TorchEnv
from rlstruct.torch_envs import TORCH_TASKS, TorchCartPole, TorchCueMemory, TorchPendulum, make_torch_env

CARTPOLES = ["CartPole-v1", "CartPoleNoVel-v1"]
PENDULUMS = ["Pendulum-v1", "PendulumNoVel-v1"]

Policy = Callable[[TorchEnv, np.random.Generator], np.ndarray]
"""Actions for every row of an environment, as numpy (gymnasium gets row i, the torch env all of them)."""

End = tuple[int, bool, bool]
"""How a row's episode ended: (its length, terminated, truncated)."""


def message(text: str) -> str:
    """A `match` pattern for an exact substring of an error message."""
    return re.escape(text)


@contextlib.contextmanager
def closing(envs: list[gym.Env[Any, Any]]) -> Iterator[list[gym.Env[Any, Any]]]:
    try:
        yield envs
    finally:
        for env in envs:
            env.close()


def random_actions(env: TorchEnv, rng: np.random.Generator) -> np.ndarray:
    """0 or 1 per row; for Pendulum a float32 torque [n_envs, 1] in [-3, 3], beyond its clip at +-2."""
    if isinstance(env, TorchPendulum):
        return rng.uniform(-3.0, 3.0, (env.n_envs, 1)).astype(np.float32)
    return rng.integers(0, 2, env.n_envs)


def balancing_rows_0_and_1(env: TorchEnv, rng: np.random.Generator) -> np.ndarray:
    """CartPole: rows 0 and 1 push the cart under the falling pole (from the full state), the others at random."""
    assert isinstance(env, TorchCartPole)
    actions = random_actions(env, rng)
    x, x_dot, theta, theta_dot = env.state.unbind(1)
    push_right = theta + 0.5 * theta_dot + 0.01 * x + 0.1 * x_dot > 0
    actions[:2] = push_right[:2].numpy()
    return actions


def copy_state(gym_env: gym.Env[Any, Any], env: TorchEnv, row: int) -> None:
    """Put the state of ``gym_env`` into ``row`` of ``env``."""
    inner: Any = gym_env.unwrapped  # CartPoleEnv, PendulumEnv or CueMemoryEnv
    if isinstance(env, TorchCueMemory):
        env.cue[row], env.t[row] = inner._cue, inner._t
    else:
        assert isinstance(env, (TorchCartPole, TorchPendulum))
        env.state[row] = torch.as_tensor(inner.state, dtype=env.state.dtype)


def play_side_by_side(
    gym_envs: list[gym.Env[Any, Any]],
    env: TorchEnv,
    policy: Policy = random_actions,
    env_info: DictTensor | None = None,
    seed: int = 0,
) -> list[End]:
    """Step ``env`` in episodic mode beside ``gym_envs`` (row i beside ``gym_envs[i]``) until every row ends.

    Each gymnasium instance is reset with seed ``seed + i`` and its state copied
    into row i. At every step, each running row must give gymnasium's
    observation (exactly, or within 1e-6 for Pendulum), reward (within float32
    rounding), ``terminated`` and ``truncated``; each row already over must
    repeat its previous observation and flags with reward 0.

    Returns:
        How each row's episode ended.
    """
    n = env.n_envs
    assert len(gym_envs) == n
    atol = 1e-6 if isinstance(env, TorchPendulum) else 0.0
    env.reset(DictTensor(batch_size=n) if env_info is None else env_info, auto_reset=False)
    first = []
    for row, gym_env in enumerate(gym_envs):
        first.append(gym_env.reset(seed=seed + row)[0])
        copy_state(gym_env, env, row)
    torch.testing.assert_close(
        env.observe()["observation"], torch.from_numpy(np.stack(first)), atol=atol, rtol=0
    )
    rng = np.random.default_rng(seed)
    ends: list[End | None] = [None] * n
    previous: DictTensor | None = None
    for t in range(1, 1001):
        actions = policy(env, rng)
        reached, observation = env.step(DictTensor({"action": torch.as_tensor(actions)}))
        assert observation is reached
        assert reached["observation"].dtype == torch.float32 and reached["reward"].dtype == torch.float32
        for row, gym_env in enumerate(gym_envs):
            where = f"row {row}, step {t}"
            if ends[row] is not None:  # over: its final observation again, reward 0, done True
                assert previous is not None
                for key in ("observation", "terminated", "truncated", "done"):
                    assert torch.equal(reached[key][row], previous[key][row]), f"{where}: {key}"
                assert reached["reward"][row].item() == 0.0 and reached["done"][row].item(), where
                continue
            expected, reward, terminated, truncated, _ = gym_env.step(actions[row])
            torch.testing.assert_close(
                reached["observation"][row],
                torch.from_numpy(expected),
                atol=atol,
                rtol=0,
                msg=lambda text, where=where: f"{where}: {text}",  # type: ignore[misc]
            )
            assert reached["reward"][row].item() == pytest.approx(float(reward), rel=1e-7, abs=1e-6), where
            assert reached["terminated"][row].item() is terminated, where
            assert reached["truncated"][row].item() is truncated, where
            assert reached["done"][row].item() is (terminated or truncated), where
            if terminated or truncated:
                ends[row] = (t, terminated, truncated)
        previous = reached
        if all(end is not None for end in ends):
            break
    assert all(end is not None for end in ends), f"episodes still running after 1000 steps: {ends}"
    return ends  # type: ignore[return-value]


# ---------------------------------------------------------------------------- the same steps as gymnasium


@pytest.mark.parametrize("env_id", CARTPOLES)
@pytest.mark.parametrize("limit", [None, 24])
def test_cartpole_in_float64_steps_exactly_as_gymnasium(env_id: str, limit: int | None) -> None:
    limits: dict[str, Any] = {} if limit is None else {"max_episode_steps": limit}
    env = make_torch_env(env_id, n_envs=6, dtype=torch.float64, **limits)
    with closing([gym.make(env_id, **limits) for _ in range(6)]) as gym_envs:
        ends = play_side_by_side(gym_envs, env, balancing_rows_0_and_1)
    lengths = [length for length, _, _ in ends]
    if limit is None:  # the balanced rows reach the limit of 500, the random ones fall, at different steps
        assert ends[:2] == [(500, False, True)] * 2
        assert all(terminated and not truncated for _, terminated, truncated in ends[2:])
        assert max(lengths[2:]) < 500 and len(set(lengths[2:])) > 1
    else:  # the random rows fall after 19 to 26 steps: before the limit of 24, on it, or are cut by it
        assert ends[:2] == [(24, False, True)] * 2
        kinds = {(terminated, truncated) for _, terminated, truncated in ends}
        assert kinds == {(False, True), (True, False), (True, True)}


@pytest.mark.parametrize("env_id", PENDULUMS)
@pytest.mark.parametrize("limit", [None, 7])
def test_pendulum_in_float64_steps_as_gymnasium_with_torques_beyond_the_clip(
    env_id: str, limit: int | None
) -> None:
    limits: dict[str, Any] = {} if limit is None else {"max_episode_steps": limit}
    env = make_torch_env(env_id, n_envs=4, dtype=torch.float64, **limits)
    with closing([gym.make(env_id, **limits) for _ in range(4)]) as gym_envs:
        ends = play_side_by_side(gym_envs, env)
    assert ends == [(limit or 200, False, True)] * 4  # never terminated: truncated at the limit


@pytest.mark.parametrize(
    ("limit", "end"), [(None, (12, True, False)), (5, (5, False, True)), (12, (12, True, True))]
)
def test_cue_memory_steps_exactly_as_gymnasium(limit: int | None, end: End) -> None:
    # the default delay 10: the answer at step 12 terminates; a limit of 5 cuts the episode before
    # it, and a limit of 12 falls on the answer: terminated and truncated both, as gymnasium says
    limits: dict[str, Any] = {} if limit is None else {"max_episode_steps": limit}
    env = make_torch_env("CueMemory-v0", n_envs=4, **limits)
    with closing([gym.make("CueMemory-v0", **limits) for _ in range(4)]) as gym_envs:
        ends = play_side_by_side(gym_envs, env)
    assert ends == [end] * 4


@pytest.mark.parametrize("env_id", CARTPOLES + PENDULUMS)
def test_the_float32_default_steps_as_gymnasium_within_float32_precision(env_id: str) -> None:
    env = make_torch_env(env_id, n_envs=4)
    assert isinstance(env, (TorchCartPole, TorchPendulum)) and env.state.dtype == torch.float32
    env.reset(DictTensor(batch_size=4))
    with closing([gym.make(env_id) for _ in range(4)]) as gym_envs:
        for row, gym_env in enumerate(gym_envs):
            gym_env.reset(seed=row)
            copy_state(gym_env, env, row)
        actions = random_actions(env, np.random.default_rng(0))
        reached, _ = env.step(DictTensor({"action": torch.as_tensor(actions)}))
        for row, gym_env in enumerate(gym_envs):
            expected, reward, terminated, truncated, _ = gym_env.step(actions[row])
            torch.testing.assert_close(
                reached["observation"][row], torch.from_numpy(expected), atol=1e-5, rtol=0
            )
            assert reached["reward"][row].item() == pytest.approx(float(reward), abs=1e-5)
            assert reached["terminated"][row].item() is terminated
            assert reached["truncated"][row].item() is truncated


# ---------------------------------------------------------------------------- env_info w, row by row


def test_cartpole_pole_lengths_per_row_are_gymnasium_carts_with_those_lengths() -> None:
    lengths = [0.25, 0.5, 1.0, 2.0]
    env = TorchCartPole(n_envs=4, dtype=torch.float64)
    with closing([gym.make("CartPole-v1") for _ in lengths]) as gym_envs:
        for gym_env, length in zip(gym_envs, lengths, strict=True):
            cart: Any = gym_env.unwrapped  # CartPoleEnv: its constants are attributes, set in __init__
            cart.length, cart.polemass_length = length, cart.masspole * length
        w = DictTensor({"length": torch.tensor(lengths, dtype=torch.float64)})
        play_side_by_side(gym_envs, env, env_info=w)
    # the rows differ by their pole alone: from one state, with one action, they part at once
    env.reset(w)
    env.state[:] = env.state[0]
    reached, _ = env.step(DictTensor({"action": torch.ones(4, dtype=torch.int64)}))
    assert len({tuple(row) for row in reached["observation"].tolist()}) == 4


def test_pendulum_gravity_per_row_is_gymnasium_pendulums_with_that_gravity() -> None:
    gravities = [2.0, 9.81, 10.0, 20.0]
    env = make_torch_env("Pendulum-v1", n_envs=4, dtype=torch.float64, max_episode_steps=50)
    with closing([gym.make("Pendulum-v1", g=g, max_episode_steps=50) for g in gravities]) as gym_envs:
        w = DictTensor({"g": torch.tensor(gravities, dtype=torch.float64)})
        assert play_side_by_side(gym_envs, env, env_info=w) == [(50, False, True)] * 4


def test_cue_memory_delays_per_row_give_episodes_of_delay_plus_2_steps() -> None:
    env = make_torch_env("CueMemory-v0", n_envs=2)
    with closing([gym.make("CueMemory-v0", delay=delay) for delay in (0, 3)]) as gym_envs:
        ends = play_side_by_side(gym_envs, env, env_info=DictTensor({"delay": torch.tensor([0, 3])}))
    assert ends == [(2, True, False), (5, True, False)]


@pytest.mark.parametrize(
    ("env_info", "error", "text"),
    [
        (
            {"length": torch.ones(2)},
            TypeError,
            "TorchCartPole.reset: env_info must be a DictTensor, got a dict",
        ),
        (
            DictTensor({"mass": torch.ones(2)}),
            ValueError,
            "TorchCartPole.reset: env_info keys ['mass'] are not parameters of this task; "
            "expected some of ['force_mag', 'gravity', 'length', 'masscart', 'masspole']",
        ),
        (
            DictTensor({"length": torch.ones(3)}),
            ValueError,
            "TorchCartPole.reset: env_info must have 2 rows, got 3",
        ),
        (
            DictTensor({"length": torch.ones(2, 1)}),
            TypeError,
            "TorchCartPole.reset: env_info['length'] must hold one real number per row, "
            "got dtype torch.float32 and shape [2, 1]",
        ),
        (
            DictTensor({"length": torch.ones(2, dtype=torch.bool)}),
            TypeError,
            "TorchCartPole.reset: env_info['length'] must hold one real number per row, "
            "got dtype torch.bool and shape [2]",
        ),
    ],
)
def test_bad_env_info_raises_naming_what_was_expected(
    env_info: Any, error: type[Exception], text: str
) -> None:
    with pytest.raises(error, match=message(text)):
        TorchCartPole(n_envs=2).reset(env_info)


def test_bad_actions_and_calls_out_of_order_raise() -> None:
    env = TorchCartPole(n_envs=2)
    zeros = DictTensor({"action": torch.zeros(2, dtype=torch.int64)})
    with pytest.raises(RuntimeError, match=message("TorchCartPole: step() before reset()")):
        env.step(zeros)
    env.reset(DictTensor(batch_size=2))
    with pytest.raises(
        ValueError,
        match=message("TorchCartPole.step: action must be a DictTensor with the key 'action', got ['a']"),
    ):
        env.step(DictTensor({"a": torch.zeros(2, dtype=torch.int64)}))
    with pytest.raises(ValueError, match=message("TorchCartPole.step: the action must have 2 rows, got 3")):
        env.step(DictTensor({"action": torch.zeros(3, dtype=torch.int64)}))
    with pytest.raises(
        ValueError,
        match=message(
            "TorchCartPole.step: the action is on meta, the environment on cpu; "
            "make the agent act on the environment's device"
        ),
    ):
        env.step(DictTensor({"action": torch.zeros(2, dtype=torch.int64, device="meta")}))
    env.close()
    env.close()  # twice is fine
    with pytest.raises(RuntimeError, match=message("TorchCartPole: step() after close()")):
        env.step(zeros)
    with pytest.raises(RuntimeError, match=message("TorchCartPole: reset() after close()")):
        env.reset(DictTensor(batch_size=2))
    with pytest.raises(
        ValueError, match=message("make_torch_env: env must be one of ['CartPole-v1', 'CartPoleNoVel-v1', ")
    ):
        make_torch_env("Acrobot-v1", n_envs=2)


@pytest.mark.parametrize(
    ("env_id", "wrong", "error", "expected"),
    [
        ("CartPole-v1", torch.zeros(3, 1, dtype=torch.int64), ValueError, "have shape [3], got [3, 1]"),
        ("CueMemory-v0", torch.zeros(3, 1, dtype=torch.int64), ValueError, "have shape [3], got [3, 1]"),
        ("CueMemory-v0", torch.zeros(3, dtype=torch.int32), TypeError, "be torch.int64, got torch.int32"),
        ("Pendulum-v1", torch.zeros(3, 2), ValueError, "have shape [3, 1], got [3, 2]"),  # a torque ignored
        ("Pendulum-v1", torch.zeros(3), ValueError, "have shape [3, 1], got [3]"),
    ],
)
def test_an_action_of_another_shape_or_dtype_is_refused_not_broadcast(
    env_id: str, wrong: torch.Tensor, error: type[Exception], expected: str
) -> None:
    env = make_torch_env(env_id, n_envs=3)
    env.reset(DictTensor(batch_size=3))
    name = type(env).__name__
    with pytest.raises(error, match=message(f"{name}.step: the action must {expected}")):
        env.step(DictTensor({"action": wrong}))
    env.close()


# ---------------------------------------------------------------------------- the Environment contract


def test_auto_reset_keeps_the_final_observation_apart_from_the_next_episodes_first() -> None:
    # CueMemory with delays 0, 1, 3: episodes of 2, 3 and 5 steps, answered right (+1)
    env = TorchCueMemory(n_envs=3, seed=1)
    env.reset(DictTensor({"delay": torch.tensor([0, 1, 3])}), auto_reset=True)
    done, reward = [], []
    for _ in range(6):
        cue = env.cue.clone()
        reached, observation = env.step(DictTensor({"action": cue}))
        ended = reached["done"]
        done.append(ended.tolist())
        reward.append(reached["reward"].tolist())
        assert torch.equal(reached["terminated"], ended) and not reached["truncated"].any()
        assert not reached["initial_state"].any()
        # the rows that ended: the final observation in reached (all zeros after the answer), the new
        # episode's first in observation (its cue shown, reward 0, no flag); the others: reached
        assert not reached["observation"][ended].any()
        assert torch.equal(observation["observation"][ended], torch.eye(3)[env.cue[ended]])
        assert torch.equal(observation["initial_state"], ended)
        assert not observation["reward"][ended].any()
        for key in ("done", "terminated", "truncated"):
            assert not observation[key].any(), key
        for key in reached:
            if key != "initial_state":
                assert torch.equal(observation[key][~ended], reached[key][~ended]), key
    assert done == [
        [False, False, False],
        [True, False, False],
        [False, True, False],
        [True, False, False],
        [False, False, True],
        [True, True, False],
    ]
    assert reward == [
        [0.0, 0.0, 0.0],
        [1.0, 0.0, 0.0],
        [0.0, 1.0, 0.0],
        [1.0, 0.0, 0.0],
        [0.0, 0.0, 1.0],
        [1.0, 1.0, 0.0],
    ]


def test_auto_reset_after_truncation_reports_the_reached_state_and_starts_afresh() -> None:
    # the same seed in episodic mode gives the same first episode: what auto-reset must report at its end
    auto = TorchCartPole(n_envs=3, seed=2, max_episode_steps=3)
    episodic = TorchCartPole(n_envs=3, seed=2, max_episode_steps=3)
    auto.reset(DictTensor(batch_size=3), auto_reset=True)
    episodic.reset(DictTensor(batch_size=3), auto_reset=False)
    push = DictTensor({"action": torch.tensor([0, 1, 1])})
    for t in range(1, 4):
        reached, observation = auto.step(push)
        expected, _ = episodic.step(push)
        assert reached.equal(expected), f"step {t}"
    # truncated at 3 steps, not terminated: a state to bootstrap from
    assert reached["truncated"].all() and reached["done"].all() and not reached["terminated"].any()
    assert torch.equal(reached["reward"], torch.ones(3))
    # the next episode's first observation: new states drawn in [-0.05, 0.05), flagged as such
    assert observation["initial_state"].all() and not observation["reward"].any()
    assert not (
        observation["done"].any() or observation["terminated"].any() or observation["truncated"].any()
    )
    assert observation["observation"].abs().max() <= 0.05
    assert not torch.equal(observation["observation"], reached["observation"])
    assert torch.equal(observation["observation"], auto.observe()["observation"])
    # and it runs its full 3 steps again
    assert [auto.step(push)[0]["truncated"].tolist() for _ in range(3)] == [
        [False] * 3,
        [False] * 3,
        [True] * 3,
    ]


def test_episodic_mode_repeats_the_final_observation_of_rows_already_over() -> None:
    # always pushing right: the short pole (0.5) falls first, the long one (2.0) later
    env = TorchCartPole(n_envs=2, seed=0)
    env.reset(DictTensor({"length": torch.tensor([0.5, 2.0])}), auto_reset=False)
    right = DictTensor({"action": torch.ones(2, dtype=torch.int64)})
    steps = []
    for _ in range(200):
        reached, observation = env.step(right)
        assert observation is reached
        steps.append(reached)
        if reached["done"].all():
            break
    ends = [next(t for t, step in enumerate(steps) if step["done"][row]) for row in range(2)]
    assert ends[0] < ends[1] == len(steps) - 1  # the short pole ends first, the long one last
    for row in range(2):
        final = steps[ends[row]]
        assert final["terminated"][row] and not final["truncated"][row] and final["reward"][row] == 1.0
        for later in [*steps[ends[row] + 1 :], env.step(right)[0]]:  # one more step after both ended
            assert torch.equal(later["observation"][row], final["observation"][row])
            assert later["reward"][row] == 0.0 and later["done"][row] and later["terminated"][row]
            assert not later["truncated"][row] and not later["initial_state"][row]
    # the long pole kept moving while the short one stood still
    assert steps[ends[0] + 1]["reward"][1] == 1.0
    assert not torch.equal(steps[ends[1]]["observation"][1], steps[ends[0]]["observation"][1])


def check_action(env: TorchEnv) -> Callable[[DictTensor], DictTensor]:
    """Random actions of the right kind for ``env``, from a seeded generator."""
    generator = torch.Generator().manual_seed(0)

    def act(observation: DictTensor) -> DictTensor:
        n = observation.n_elems()
        if isinstance(env, TorchPendulum):
            action = torch.rand((n, 1), generator=generator) * 4 - 2
        else:
            action = torch.randint(0, 2, (n,), generator=generator)
        return DictTensor({"action": action.to(env.device)})

    return act


CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=CUDA)])
@pytest.mark.parametrize("env_id", list(TORCH_TASKS))
def test_check_env_passes(env_id: str, device: str) -> None:
    """On a GPU too: check_env reads every key on the environment's device, as environments.md says it runs."""
    env = make_torch_env(env_id, n_envs=4, device=device)
    check_env(env, action=check_action(env), n_steps=210)  # quiet; 210 steps see Pendulum's limit of 200


# ---------------------------------------------------------------------------- seeds


def play(env: TorchEnv, n_steps: int) -> list[DictTensor]:
    """Everything ``env`` returns over a reset and ``n_steps`` auto-reset steps of random actions."""
    act = check_action(env)
    observation = env.reset(DictTensor(batch_size=env.n_envs), auto_reset=True)
    out = [observation]
    for _ in range(n_steps):
        reached, observation = env.step(act(observation))
        out += [reached, observation]
    return out


@pytest.mark.parametrize("env_id", list(TORCH_TASKS))
def test_the_same_seed_gives_the_same_trajectories_and_another_seed_other_first_states(env_id: str) -> None:
    # episodes of at most 10 steps: in 30 steps, first states are drawn in auto-reset too
    limits: dict[str, Any] = {"max_episode_steps": 10}
    first, again = (play(make_torch_env(env_id, n_envs=8, seed=3, **limits), 30) for _ in range(2))
    assert len(first) == len(again) and all(a.equal(b) for a, b in zip(first, again, strict=True))
    other = make_torch_env(env_id, n_envs=8, seed=4, **limits).reset(DictTensor(batch_size=8))
    assert not torch.equal(other["observation"], first[0]["observation"])


# ---------------------------------------------------------------------------- batchers


@pytest.mark.parametrize(("mode", "n_timesteps"), [("fixed", 16), ("episodes", 40)])
def test_multiprocess_batcher_gives_local_batcher_trajectories(mode: str, n_timesteps: int) -> None:
    args: dict[str, Any] = {
        "n_envs": 2,
        "n_timesteps": n_timesteps,
        "mode": mode,
        "seed": 11,
        "n_processes": 2,
    }
    env_args = {"env": "CartPole-v1"}
    batcher = MultiprocessBatcher(RandomAgent, {"n_actions": 2}, make_torch_env, env_args, **args)
    local = LocalBatcher(RandomAgent, {"n_actions": 2}, make_torch_env, env_args, **args)
    batches: list[Trajectories] = []
    with batcher, local:
        batcher.reset()
        local.reset()
        for _ in range(3):
            batcher.execute()
            local.execute()
            batch, expected = batcher.get(), local.get()
            assert batch is not None and expected is not None
            assert sorted(batch.trajectories.keys()) == sorted(expected.trajectories.keys())
            for key, value in expected.trajectories.items():
                assert torch.equal(batch.trajectories[key], value), key
            assert torch.equal(batch.lengths, expected.lengths) and batch.equal(expected)
            batches.append(batch)
    assert batches[0].trajectories["observation"].shape == (4, n_timesteps, 4)
    assert not batches[0].trajectories["action"].equal(batches[1].trajectories["action"])
    if mode == "episodes":  # random CartPole episodes of different lengths, all starting anew each call
        assert len(set(torch.cat([batch.lengths for batch in batches]).tolist())) > 1
        assert all(batch.trajectories["initial_state"][:, 0].all() for batch in batches)
    else:  # the episodes run on across calls: some end inside a batch and start again
        assert any(batch.trajectories["next/done"].any() for batch in batches)


@pytest.mark.parametrize(
    ("make", "error", "message"),
    [
        (lambda: TorchCartPole(2, dtype=torch.int64), TypeError, r"TorchCartPole: dtype must be a floating"),
        (
            lambda: TorchPendulum(2, velocities=1),
            TypeError,
            r"TorchPendulum: velocities must be a bool, got an int",
        ),
        (
            lambda: make_torch_env(["CartPole-v1"], 2),
            TypeError,
            r"make_torch_env: env must be a gymnasium id \(str\)",
        ),
        (lambda: TorchCueMemory(2, delay=-1), ValueError, r"delay must be an int >= 0, got -1"),
        (  # before, a ValueError, where the docstring promises a TypeError for a wrong type
            lambda: TorchCartPole(2, max_episode_steps=20.0),
            TypeError,
            r"TorchCartPole: max_episode_steps must be an int > 0 or None, got a float",
        ),
        (
            lambda: TorchCartPole(2, max_episode_steps=0),
            ValueError,
            r"TorchCartPole: max_episode_steps must be an int > 0 or None, got 0",
        ),
    ],
)
def test_bad_constructor_arguments_are_named(make: Any, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        make()


@pytest.mark.parametrize(
    ("delay", "error", "message"),
    [
        (torch.tensor([1.5, 2.0]), TypeError, r"env_info\['delay'\] must hold integers, got torch.float32"),
        (torch.tensor([1, -2]), ValueError, r"env_info\['delay'\] must be >= 0"),
    ],
)
def test_a_cue_delay_per_row_must_be_whole_and_not_negative(
    delay: torch.Tensor, error: type[Exception], message: str
) -> None:
    env = TorchCueMemory(2)
    with pytest.raises(error, match=message):
        env.reset(DictTensor({"delay": delay}))


def test_an_observation_key_named_as_a_flag_is_refused_at_reset() -> None:
    class ObservesDone(TorchCueMemory):
        def observe(self) -> dict[str, torch.Tensor]:
            return {**super().observe(), "done": torch.zeros(self.n_envs)}

    env = ObservesDone(2)
    with pytest.raises(
        ValueError, match=re.escape("ObservesDone.observe: the observation keys ['done'] are named as keys")
    ):
        env.reset(DictTensor(batch_size=2))


@pytest.mark.parametrize(
    ("observed", "error", "text"),
    [
        (lambda n: torch.zeros(n, 3), TypeError, "must return a dict of tensors [n_envs, ...], got a tensor"),
        (
            lambda n: {"observation": torch.zeros(n + 1, 3)},
            ValueError,
            "= [2, ...] on cpu, got [3, 3] on cpu",
        ),
        (lambda n: {"observation": torch.tensor(1.0)}, ValueError, "= [2, ...] on cpu, got [] on cpu"),
        (lambda n: {"observation": np.zeros((n, 3))}, TypeError, "got key 'observation' holding a ndarray"),
        (lambda n: {0: torch.zeros(n, 3)}, TypeError, "must map str keys to tensors, got key 0"),
    ],
)
def test_what_observe_returns_is_checked_at_reset(
    observed: Callable[[int], Any], error: type[Exception], text: str
) -> None:
    """Before, reset wrapped it unchecked: 3 rows in a DictTensor of 2, or a NumPy array, passed silently."""

    class Observes(TorchCueMemory):
        def observe(self) -> dict[str, torch.Tensor]:
            return observed(self.n_envs)  # type: ignore[no-any-return]

    with pytest.raises(error, match=re.escape(text)):
        Observes(2).reset(DictTensor(batch_size=2))


def test_numpy_ints_are_ints_and_a_seed_torch_cannot_take_is_named() -> None:
    env = make_torch_env("CartPole-v1", n_envs=np.int64(2), seed=np.int64(3))
    assert env.n_envs == 2 and type(env.n_envs) is int
    with pytest.raises(TypeError, match=message("TorchCartPole: n_envs must be an int, got a float")):
        make_torch_env("CartPole-v1", n_envs=2.0)
    with pytest.raises(ValueError, match=message("TorchCartPole: seed must be in [-2**63, 2**64), got")):
        make_torch_env("CartPole-v1", n_envs=2, seed=2**70)


def test_a_novel_id_takes_no_velocities_argument() -> None:
    with pytest.raises(
        TypeError, match=message("make_torch_env: 'CartPoleNoVel-v1' observes no velocities, so it takes no")
    ):
        make_torch_env("CartPoleNoVel-v1", n_envs=2, velocities=False)


class Advancing(TorchEnv):
    """Rewards ``1e8 + t`` and an end at step 3, in the form ``kind`` says (a user's slips)."""

    def __init__(self, n_envs: int, kind: str = "right", reward_dtype: torch.dtype | None = None) -> None:
        super().__init__(n_envs)
        self.kind, self.t = kind, torch.zeros(n_envs, dtype=torch.int64)
        if reward_dtype is not None:
            self.reward_dtype = reward_dtype  # type: ignore[misc]

    def start(self, rows: torch.Tensor) -> None:
        self.t.masked_fill_(rows, 0)

    def observe(self) -> dict[str, torch.Tensor]:
        return {"observation": self.t.float().unsqueeze(1)}

    def advance(self, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.t += 1
        reward, terminated = 1e8 + self.t.double() + 0.5, self.t >= 3
        kinds = {
            "right": (reward.float(), terminated),
            "float64": (reward, terminated),
            "column": (reward.float().unsqueeze(1), terminated),
            "long-terminated": (reward.float(), terminated.long()),
            "none": None,
            "triple": (reward.float(), terminated, terminated),
        }
        return kinds[self.kind]  # type: ignore[return-value]


@pytest.mark.parametrize(
    ("kind", "error", "text"),
    [
        ("float64", TypeError, ": reward must be a torch.float32 tensor [n_envs] (the task's reward_dtype"),
        ("column", ValueError, ": reward must be [n_envs] = [2] on cpu, got [2, 1] on cpu"),
        ("long-terminated", TypeError, ": terminated must be a torch.bool tensor [n_envs], got torch.int64"),
        ("none", TypeError, " must return the pair (reward, terminated), got a NoneType"),
        ("triple", TypeError, " must return the pair (reward, terminated), got a tuple of length 3"),
    ],
)
def test_step_names_what_advance_returned_of_another_dtype_or_shape(
    kind: str, error: type[Exception], text: str
) -> None:
    """Before, a float64 reward was rounded to float32 (1e8 + 1.5 became 1e8), a column broadcast,
    and an advance that returned no pair failed in the unpacking, naming neither advance nor the pair."""
    right = Advancing(2)
    right.reset(DictTensor(batch_size=2), auto_reset=True)
    assert (
        right.step(DictTensor({"action": torch.zeros(2, dtype=torch.int64)}))[0]["reward"].dtype
        == torch.float32
    )
    env = Advancing(2, kind)
    env.reset(DictTensor(batch_size=2), auto_reset=True)
    with pytest.raises(error, match=re.escape(f"Advancing.advance{text}")):
        env.step(DictTensor({"action": torch.zeros(2, dtype=torch.int64)}))


def test_a_task_that_declares_float64_rewards_keeps_them() -> None:
    env = Advancing(2, "float64", reward_dtype=torch.float64)
    env.reset(DictTensor(batch_size=2), auto_reset=True)
    reached, _ = env.step(DictTensor({"action": torch.zeros(2, dtype=torch.int64)}))
    assert reached["reward"].dtype == torch.float64
    assert reached["reward"].tolist() == [1e8 + 1.5, 1e8 + 1.5]  # float32 would round it to 1e8


@pytest.mark.parametrize("dtype", [torch.int64, torch.bool, "float64"])
def test_a_reward_dtype_that_is_not_floating_is_refused_when_the_task_is_made(dtype: Any) -> None:
    """Before, int64 rewards were kept and a str failed in torch.zeros at reset."""

    class Integral(TorchCueMemory):
        reward_dtype = dtype

    with pytest.raises(
        TypeError,
        match=re.escape(
            f"Integral: reward_dtype must be a floating torch.dtype (float32, float64, ...), got {dtype!r}"
        ),
    ):
        Integral(2)


@pytest.mark.parametrize("auto_reset", [False, True])
def test_the_first_rewards_of_a_float64_task_are_float64_too(auto_reset: bool) -> None:
    """Before, reset gave float32 zeros, which check_env and every batcher refused at step 1."""
    env = Advancing(2, "float64", reward_dtype=torch.float64)
    assert env.reset(DictTensor(batch_size=2), auto_reset=auto_reset)["reward"].dtype == torch.float64
    zeros = DictTensor({"action": torch.zeros(2, dtype=torch.int64)})
    check_env(Advancing(2, "float64", reward_dtype=torch.float64), action=lambda _: zeros)
