"""Tests of rlstruct.check_env: the shipped environments pass, and each broken rule is named.

Each broken environment is ``CounterEnv`` (rlstruct.testing) with one rule of
the contract broken; the test checks that ``check_env`` raises and that the
message names the rule, the key, the step and what it received.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlstruct import DictTensor, GymEnv, check_env
from rlstruct.env_check import EnvironmentCheckError
from rlstruct.testing import CounterEnv

N = 3
ZEROS = DictTensor({"action": torch.zeros(N, dtype=torch.int64)})
LENGTHS = DictTensor({"length": torch.tensor([2, 3, 5])})


def problems_of(env: Any, **kwargs: Any) -> list[str]:
    """The problems check_env finds in ``env``, stepped with ZEROS over 12 steps and LENGTHS."""
    kwargs = {"action": ZEROS, "n_steps": 12, "env_info": LENGTHS, **kwargs}
    with pytest.raises(EnvironmentCheckError) as caught:
        check_env(env, **kwargs)
    assert str(caught.value).startswith(f"{type(env).__name__} breaks the Environment contract")
    assert all(f"- {problem}" in str(caught.value) for problem in caught.value.problems)
    return caught.value.problems


# ---------------------------------------------------------------------- environments that pass


@pytest.mark.parametrize(
    ("env_id", "kwargs"),
    [
        ("CartPole-v1", {}),
        ("Pendulum-v1", {"max_episode_steps": 10}),
        ("CartPoleNoVel-v1", {}),
        ("PendulumNoVel-v1", {"max_episode_steps": 10}),
        ("CueMemory-v0", {"delay": 3}),
    ],
)
def test_the_gymnasium_environments_pass(env_id: str, kwargs: dict[str, Any]) -> None:
    env = GymEnv(env_id, n_envs=2, seed=0, **kwargs)
    try:
        check_env(env, n_steps=30)  # quiet; through step_into too, which GymEnv overrides
    finally:
        env.close()


def test_env_info_reaches_the_environment() -> None:
    env = GymEnv("Pendulum-v1", n_envs=2, seed=0, max_episode_steps=5)
    check_env(env, DictTensor({"g": torch.tensor([1.0, 20.0])}), n_steps=8)
    assert [instance.unwrapped.g for instance in env._envs] == [1.0, 20.0]  # type: ignore[union-attr]
    env.close()


@pytest.mark.parametrize("truncate", [False, True])
def test_the_counter_environment_passes(truncate: bool) -> None:
    check_env(CounterEnv(N, truncate=truncate), LENGTHS, action=ZEROS, n_steps=12)
    check_env(CounterEnv(N), action=lambda observation: ZEROS, n_steps=20)  # episodes of 5 steps


def test_random_actions_come_from_a_seeded_copy_of_the_action_space() -> None:
    env = GymEnv("CartPole-v1", n_envs=2, seed=0)
    env.reset(DictTensor(batch_size=2))
    space_before = env.action_space.np_random.bit_generator.state
    check_env(env, n_steps=5, seed=3)
    assert env.action_space.np_random.bit_generator.state == space_before
    env.close()


class InPlaceCounterEnv(CounterEnv):
    """CounterEnv with a ``step_into`` that writes what its ``step`` returns."""

    def step_into(
        self, action: DictTensor, reached: Mapping[str, np.ndarray], observation: Mapping[str, np.ndarray]
    ) -> None:
        first, second = self.step(action)
        for key in first:
            np.copyto(reached[key], first[key].numpy())
            np.copyto(observation[key], second[key].numpy())


def test_a_step_into_that_writes_what_step_returns_passes() -> None:
    check_env(InPlaceCounterEnv(N), LENGTHS, action=ZEROS, n_steps=12)


# ---------------------------------------------------------------------- one broken rule each


class MissingKey(CounterEnv):
    def reset(self, env_info: DictTensor, auto_reset: bool = False) -> DictTensor:
        return super().reset(env_info, auto_reset).get(["t", "reward", "terminated", "done", "initial_state"])


def test_a_missing_key_is_named() -> None:
    problems = problems_of(MissingKey(N))
    assert problems[0].startswith(
        "reset(auto_reset=False): lacks the key 'truncated'; every observation holds reward, "
        "terminated, truncated, done, initial_state (rlstruct.env.REQUIRED_KEYS), got keys "
        "['t', 'reward', 'terminated', 'done', 'initial_state']"
    )


class IntReward(CounterEnv):
    def step(self, action: DictTensor) -> tuple[DictTensor, DictTensor]:
        reached, observation = super().step(action)
        reached.set("reward", reached["reward"].long())
        return reached, observation


def test_an_integer_reward_is_named() -> None:
    problems = problems_of(IntReward(N))
    assert problems[0] == (
        "step 1 (auto_reset=False), reached: key 'reward' must have a floating dtype (float32 unless the "
        "environment chooses another), got torch.int64 (and 23 more times)"
    )


@pytest.mark.parametrize("dtype", [torch.float16, torch.float64])
def test_a_reward_of_another_floating_dtype_keeps_the_contract(dtype: torch.dtype) -> None:
    check_env(GymEnv(n_envs=2, seed=0, env="CartPole-v1", reward_dtype=dtype))


class RewardTurnsFloat64(CounterEnv):
    """float32 rewards at reset, float64 at every step: a batcher's buffer, made from the first, refuses the rest."""

    def step(self, action: DictTensor) -> tuple[DictTensor, DictTensor]:
        reached, observation = super().step(action)
        for dt in {id(reached): reached, id(observation): observation}.values():
            dt.set("reward", dt["reward"].double())
        return reached, observation


def test_a_reward_dtype_that_changes_after_reset_is_named() -> None:
    problems = problems_of(RewardTurnsFloat64(N))
    assert problems[0].startswith(
        "step 1 (auto_reset=False), reached: key 'reward' has dtype torch.float64, but torch.float32 at "
        "reset(auto_reset=False); dtypes must stay the same at every step"
    )


class DoneWithoutEnd(CounterEnv):
    """done stays False when an episode ends."""

    def step(self, action: DictTensor) -> tuple[DictTensor, DictTensor]:
        reached, observation = super().step(action)
        reached.set("done", torch.zeros(self.n_envs, dtype=torch.bool))
        return reached, observation


def test_done_that_is_not_terminated_or_truncated_is_named() -> None:
    problems = problems_of(DoneWithoutEnd(N))
    assert problems[0].startswith(
        "step 2 (auto_reset=False), reached: done must equal terminated | truncated; in rows [0] done is "
        "[False], terminated | truncated is [True]"
    )


class ExtraRow(CounterEnv):
    def step(self, action: DictTensor) -> tuple[DictTensor, DictTensor]:
        reached, _ = super().step(action)
        longer = DictTensor.cat([reached, reached[:1]])
        return longer, longer


def test_a_wrong_row_count_is_named() -> None:
    problems = problems_of(ExtraRow(N))
    assert problems[0].startswith(
        "step 1 (auto_reset=False), reached: must have 3 rows (n_envs, one per instance), got 4"
    )


class KeepsRunning(CounterEnv):
    """Episodic instances that go on after their episode ended."""

    def reset(self, env_info: DictTensor, auto_reset: bool = False) -> DictTensor:
        self.real_auto_reset = auto_reset
        return super().reset(env_info, auto_reset)

    def step(self, action: DictTensor) -> tuple[DictTensor, DictTensor]:
        reached, observation = super().step(action)
        if not self.real_auto_reset:
            self.stopped = torch.zeros(self.n_envs, dtype=torch.bool)
        return reached, observation


def test_an_episodic_environment_that_does_not_freeze_finished_rows_is_named() -> None:
    problems = problems_of(KeepsRunning(N))
    prefix = (
        "step 3 (auto_reset=False), reached: rows [0] had finished, so until reset they must repeat their final "
        "observation with reward 0 and done True; "
    )
    assert problems[0].startswith(prefix + "got reward [1]")
    assert any(p.startswith(prefix + "key 't' changed in rows [0]") for p in problems)


class NotInitialAfterAutoReset(CounterEnv):
    def step(self, action: DictTensor) -> tuple[DictTensor, DictTensor]:
        reached, observation = super().step(action)
        if observation is not reached:
            observation.set("initial_state", torch.zeros(self.n_envs, dtype=torch.bool))
        return reached, observation


def test_an_auto_reset_row_without_initial_state_is_named() -> None:
    problems = problems_of(NotInitialAfterAutoReset(N))
    assert problems == [
        "step 2 (auto_reset=True), observation (rows that auto-reset): a first observation must hold "
        "initial_state True, reward 0, done, terminated and truncated False; got initial_state [False] "
        "in rows [0] (and 8 more times)"
    ]


class ObservationRowsChanged(CounterEnv):
    """Auto-reset observations that differ from reached in rows that did not reset."""

    def step(self, action: DictTensor) -> tuple[DictTensor, DictTensor]:
        reached, observation = super().step(action)
        if self.auto_reset:
            observation = observation.clone()
            observation.set("episode", observation["episode"] + 100)
        return reached, observation


def test_an_auto_reset_observation_that_differs_from_reached_is_named() -> None:
    problems = problems_of(ObservationRowsChanged(N))
    assert problems[0].startswith(
        "step 1 (auto_reset=True): observation must equal reached in the rows that did not auto-reset "
        "(done False in reached); key 'episode' differs in rows [0, 1, 2]"
    )


class WrongStepInto(InPlaceCounterEnv):
    """step_into writes twice the reward step returns."""

    def step_into(
        self, action: DictTensor, reached: Mapping[str, np.ndarray], observation: Mapping[str, np.ndarray]
    ) -> None:
        super().step_into(action, reached, observation)
        reached["reward"][...] *= 2


def test_a_step_into_that_writes_other_values_than_step_is_named() -> None:
    problems = problems_of(WrongStepInto(N))
    assert problems == [
        "step_into at step 2 (auto_reset=True): reached['reward'] must receive what step returns, but "
        "differs in rows [0, 1, 2]: step_into wrote [2, 2, 2], step returned [1, 1, 1] (and 10 more times)"
    ]


class StepIntoThroughACopy(InPlaceCounterEnv):
    """step_into writes ``t`` through ``ravel``, which copies a strided view: the storage never sees it."""

    def step_into(
        self, action: DictTensor, reached: Mapping[str, np.ndarray], observation: Mapping[str, np.ndarray]
    ) -> None:
        first, second = self.step(action)
        for key in first:
            target = reached[key].ravel() if key == "t" else reached[key]
            target[...] = first[key].numpy()
            np.copyto(observation[key], second[key].numpy())


def test_a_step_into_that_leaves_cells_unwritten_is_named() -> None:
    problems = problems_of(StepIntoThroughACopy(N))
    assert problems[0].startswith(
        "step_into at step 2 (auto_reset=True): reached['t'] must receive what step returns, but differs "
        "in rows [0, 1, 2]: step_into wrote [3, 3, 3], step returned [2, 2, 2]"
    )


class Uncopyable(InPlaceCounterEnv):
    """An environment that deepcopy refuses: it holds a lock."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lock = threading.Lock()


class UncopyableWrongStepInto(Uncopyable):
    """A step_into that breaks done == terminated | truncated."""

    def step_into(
        self, action: DictTensor, reached: Mapping[str, np.ndarray], observation: Mapping[str, np.ndarray]
    ) -> None:
        super().step_into(action, reached, observation)
        reached["done"][...] = False


def test_the_step_into_of_an_environment_that_cannot_be_copied_is_checked_by_the_rules() -> None:
    check_env(Uncopyable(N), LENGTHS, action=ZEROS, n_steps=12)
    problems = problems_of(UncopyableWrongStepInto(N))
    assert problems[:1] == [
        "step_into at step 2 (auto_reset=True), reached: done must equal terminated | truncated; in rows [0] "
        "done is [False], terminated | truncated is [True] (and 8 more times)"
    ]


class GrowingShape(CounterEnv):
    def step(self, action: DictTensor) -> tuple[DictTensor, DictTensor]:
        reached, _ = super().step(action)
        if int(self.t.max()) >= 2:
            reached = reached.clone()
            reached.set("t", torch.stack([reached["t"], reached["t"]], 1))
        return reached, reached


def test_a_shape_that_changes_between_steps_is_named() -> None:
    problems = problems_of(GrowingShape(N))
    assert problems[0].startswith(
        "step 2 (auto_reset=False), reached: key 't' has shape [2] per row, but [] at reset(auto_reset=False); "
        "shapes must stay the same at every step"
    )


class NewKey(CounterEnv):
    def step(self, action: DictTensor) -> tuple[DictTensor, DictTensor]:
        reached, _ = super().step(action)
        reached = reached.merge(DictTensor({"info": torch.zeros(self.n_envs)}))
        return reached, reached


def test_a_key_that_appears_after_reset_is_named() -> None:
    problems = problems_of(NewKey(N))
    assert problems[0].startswith(
        "step 1 (auto_reset=False), reached: key 'info' was not there at reset(auto_reset=False); the keys "
        "must stay the same at every step"
    )


class OnMeta(CounterEnv):
    def step(self, action: DictTensor) -> tuple[DictTensor, DictTensor]:
        reached, _ = super().step(action)
        reached = reached.to("meta")
        return reached, reached


def test_a_tensor_off_the_cpu_is_named() -> None:
    problems = problems_of(OnMeta(N))
    assert problems[0].startswith(
        "step 1 (auto_reset=False), reached: key 't' must be on the CPU, got device meta"
    )


class SaysCuda(CounterEnv):
    """Rows on the CPU, from an environment that says they are on a CUDA device."""

    device = torch.device("cuda")


def test_keys_off_the_environments_device_are_named() -> None:
    problems = problems_of(SaysCuda(N))
    assert problems[0].startswith(
        "reset(auto_reset=False): key 't' must be on the environment's device, cuda, got device cpu"
    )


class SaysNoDevice(CounterEnv):
    device = "gpu"  # type: ignore[assignment]


def test_a_device_that_names_no_device_is_named() -> None:
    with pytest.raises(
        EnvironmentCheckError,
        match=re.escape(
            "- device (where its observations are) must be a torch.device or its name, got 'gpu'"
        ),
    ):
        check_env(SaysNoDevice(N), action=ZEROS)


class FirstRewardNotZero(CounterEnv):
    def reset(self, env_info: DictTensor, auto_reset: bool = False) -> DictTensor:
        first = super().reset(env_info, auto_reset)
        first.set("reward", torch.full((self.n_envs,), 0.5))
        first.set("initial_state", torch.tensor([True, False, True]))
        return first


def test_a_first_observation_with_a_reward_or_without_initial_state_is_named() -> None:
    problems = problems_of(FirstRewardNotZero(N))
    assert problems[0] == (
        "reset(auto_reset=False): a first observation must hold initial_state True, reward 0, done, "
        "terminated and truncated False; got initial_state [False] in rows [1], reward [0.5, 0.5, 0.5] "
        "in rows [0, 1, 2] (and 1 more time)"
    )


class NoPair(CounterEnv):
    def step(self, action: DictTensor) -> Any:
        return super().step(action)[0]


def test_a_step_that_does_not_return_a_pair_is_named() -> None:
    problems = problems_of(NoPair(N))
    assert problems == [
        "step 1 (auto_reset=False): step must return the pair (reached, observation), got a DictTensor "
        "(and 1 more time)"
    ]


class EpisodicObservationNotReached(CounterEnv):
    def step(self, action: DictTensor) -> tuple[DictTensor, DictTensor]:
        reached, _ = super().step(action)
        other = reached.clone()
        other.set("t", other["t"] * 0)
        return reached, other


def test_an_episodic_observation_that_is_not_reached_is_named() -> None:
    problems = problems_of(EpisodicObservationNotReached(N))
    assert problems[0].startswith(
        "step 1 (auto_reset=False): observation must be reached itself in episodic mode; key 't' differs in "
        "rows [0, 1, 2]"
    )


class Raises(CounterEnv):
    def step(self, action: DictTensor) -> tuple[DictTensor, DictTensor]:
        if int(self.t.max()) >= 1:
            raise RuntimeError("the simulator crashed")
        return super().step(action)


def test_an_environment_that_raises_is_named_and_its_exception_is_the_cause() -> None:
    with pytest.raises(EnvironmentCheckError) as caught:
        check_env(Raises(N), LENGTHS, action=ZEROS, n_steps=4)
    assert caught.value.problems == [
        "step 2 (auto_reset=False): raised RuntimeError: the simulator crashed",
        "step 2 (auto_reset=True): raised RuntimeError: the simulator crashed",
    ]
    assert isinstance(caught.value.__cause__, RuntimeError)


class TwoMistakes(IntReward, NewKey):
    """An integer reward, and a key that appears after reset."""


def test_the_error_is_a_value_error_listing_every_problem() -> None:
    with pytest.raises(ValueError) as caught:
        check_env(TwoMistakes(N), LENGTHS, action=ZEROS, n_steps=12)
    assert str(caught.value).splitlines() == [
        "TwoMistakes breaks the Environment contract (rlstruct.env) in 2 ways:",
        "- step 1 (auto_reset=False), reached: key 'reward' must have a floating dtype (float32 unless the "
        "environment chooses another), got torch.int64 (and 23 more times)",
        "- step 1 (auto_reset=False), reached: key 'info' was not there at reset(auto_reset=False); the keys "
        "must stay the same at every step (and 23 more times)",
    ]


def test_a_broken_n_envs_is_named() -> None:
    env = CounterEnv(N)
    env.n_envs = 0
    with pytest.raises(
        EnvironmentCheckError,
        match=re.escape("n_envs (the number of instances) must be a positive int, got 0"),
    ):
        check_env(env, action=ZEROS)


# ---------------------------------------------------------------------- bad arguments


def test_bad_arguments_raise_naming_the_argument() -> None:
    env = CounterEnv(N)
    with pytest.raises(
        TypeError, match=re.escape("check_env: env must be an rlstruct Environment, got a str")
    ):
        check_env("CartPole-v1")  # type: ignore[arg-type]
    gym_env = gym.make("CartPole-v1")
    with pytest.raises(
        TypeError,
        match=re.escape(
            "got a TimeLimit; wrap a gymnasium environment's id or maker in rlstruct.GymEnv (or GymVectorEnv)"
        ),
    ):
        check_env(gym_env)  # type: ignore[arg-type]
    gym_env.close()
    with pytest.raises(ValueError, match=re.escape("check_env: n_steps must be at least 1, got 0")):
        check_env(env, action=ZEROS, n_steps=0)
    with pytest.raises(TypeError, match=re.escape("check_env: n_steps must be an int, got a float")):
        check_env(env, action=ZEROS, n_steps=2.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=re.escape("check_env: seed must be at least 0, got -1")):
        check_env(env, action=ZEROS, seed=-1)
    with pytest.raises(TypeError, match=re.escape("check_env: env_info must be a DictTensor, got a dict")):
        check_env(env, {}, action=ZEROS)  # type: ignore[arg-type]
    with pytest.raises(
        ValueError, match=re.escape("check_env: env_info must have 3 rows (env.n_envs), got 2")
    ):
        check_env(env, DictTensor(batch_size=2), action=ZEROS)
    with pytest.raises(ValueError, match=re.escape("check_env: action must have 3 rows (env.n_envs), got 1")):
        check_env(env, action=ZEROS[:1])
    with pytest.raises(
        ValueError, match=re.escape("check_env: action must hold the key 'action', got keys ['a']")
    ):
        check_env(env, action=DictTensor({"a": torch.zeros(N)}))
    with pytest.raises(
        TypeError, match=re.escape("check_env: action must be or return a DictTensor, got a tensor")
    ):
        check_env(env, action=lambda observation: torch.zeros(N))  # type: ignore[arg-type]
    with pytest.raises(
        TypeError, match=re.escape("check_env: action must be a DictTensor, a function of the")
    ):
        check_env(env, action=3)  # type: ignore[arg-type]
    with pytest.raises(
        TypeError, match=re.escape("check_env: action is needed, since CounterEnv has no action_space")
    ):
        check_env(env)


# ---------------------------------------------------------------------- CounterEnv's own checks


@pytest.mark.parametrize(
    ("action", "error", "message"),
    [
        ({"action": torch.zeros(N, dtype=torch.int64)}, TypeError, "action must be a DictTensor, got a dict"),
        (DictTensor({"a": torch.zeros(N)}), ValueError, "action must hold the key 'action', got keys ['a']"),
        (
            DictTensor({"action": torch.zeros(N)}),
            TypeError,
            "action['action'] must be an int64 tensor, got dtype torch.float32; nothing is cast",
        ),
        (  # it would broadcast into [3, 3] rewards
            DictTensor({"action": torch.zeros(N, 1, dtype=torch.int64)}),
            ValueError,
            "action['action'] must be [n_envs] = [3] on the CPU, got [3, 1] on cpu",
        ),
        (
            DictTensor({"action": torch.zeros(N, dtype=torch.int64, device="meta")}),
            ValueError,
            "action['action'] must be [n_envs] = [3] on the CPU, got [3] on meta",
        ),
    ],
)
def test_counter_env_refuses_a_bad_action_naming_it(action: Any, error: type, message: str) -> None:
    env = CounterEnv(N)
    env.reset(LENGTHS)
    with pytest.raises(error, match=re.escape(f"CounterEnv.step: {message}")):
        env.step(action)
    reached, _ = env.step(ZEROS)  # nothing was counted by the refused step
    assert reached["t"].tolist() == [1, 1, 1]
