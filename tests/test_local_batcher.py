"""Behaviour tests for rlstruct.batchers.LocalBatcher, on environments whose trajectories are known by hand.

CounterEnv's observation ``t`` is the step count of the episode, its reward is
action + 1, and its episode length comes from env_info ``length``; CountingAgent
outputs the count of its state, which starts at agent_info ``start``. Every
expected tensor below follows from those two rules.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

import numpy as np
import pytest
import torch
from gymnasium.envs.classic_control import CartPoleEnv
from mp_helpers import ENV_ROOT, EpsilonAgent, FailingAgent, HistorySumAgent

from rlstruct import (
    Agent,
    Batcher,
    DictTensor,
    Environment,
    GymEnv,
    LocalBatcher,
    MultiprocessBatcher,
    TemporalDictTensor,
    TensorSpec,
    Trajectories,
    derive_seed,
)
from rlstruct.errors import AgentError
from rlstruct.testing import CounterEnv, CountingAgent, RandomAgent


def message(text: str) -> str:
    """A `match` pattern for an exact substring of an error message."""
    return re.escape(text)


def ints(*values: int) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int64)


def run_once(batcher: LocalBatcher) -> Trajectories:
    batcher.execute()
    return batcher.get()


def counter_batcher(
    agent: Any = CountingAgent,
    agent_args: dict[str, Any] | None = None,
    env_args: dict[str, Any] | None = None,
    **kwargs: Any,
) -> LocalBatcher:
    kwargs.setdefault("n_envs", 2)
    kwargs.setdefault("n_timesteps", 4)
    return LocalBatcher(agent, agent_args or {}, CounterEnv, env_args or {}, **kwargs)


class ClosingCounterEnv(CounterEnv):
    """A CounterEnv that records the n_envs of every instance closed, so that tests can count closes."""

    closed: ClassVar[list[int]] = []

    def close(self) -> None:
        ClosingCounterEnv.closed.append(self.n_envs)


class ConstantAgent(Agent):
    """Outputs action 0 plus the extra outputs given to the constructor (a key -> value-at-step function)."""

    def __init__(self, extra: Any = None, rows: int | None = None, state_rows: int | None = None) -> None:
        super().__init__()
        self.extra = extra
        self.rows = rows
        self.state_rows = state_rows
        self.calls = 0

    def forward(
        self,
        state: DictTensor,
        observation: DictTensor,
        agent_info: DictTensor,
        history: TemporalDictTensor | None = None,
    ) -> tuple[DictTensor, DictTensor]:
        n = observation.n_elems()
        rows = self.rows if self.rows is not None else n
        output = {"action": torch.zeros(rows, dtype=torch.int64)}
        if self.extra is not None:
            output.update(self.extra(self.calls, n))
        self.calls += 1
        state_rows = self.state_rows if self.state_rows is not None else n
        return DictTensor(output), DictTensor(batch_size=state_rows)


class NoActionAgent(Agent):
    def forward(
        self,
        state: DictTensor,
        observation: DictTensor,
        agent_info: DictTensor,
        history: TemporalDictTensor | None = None,
    ) -> tuple[DictTensor, DictTensor]:
        return DictTensor({"move": torch.zeros(observation.n_elems())}), state


class TupleAgent(Agent):
    def forward(
        self,
        state: DictTensor,
        observation: DictTensor,
        agent_info: DictTensor,
        history: TemporalDictTensor | None = None,
    ) -> Any:
        return {"action": torch.zeros(observation.n_elems(), dtype=torch.int64)}, state


class BadInitialStateAgent(Agent):
    def initial_state(self, agent_info: DictTensor, n: int) -> DictTensor:
        return DictTensor({"h": torch.zeros(n + 1)})

    def forward(
        self,
        state: DictTensor,
        observation: DictTensor,
        agent_info: DictTensor,
        history: TemporalDictTensor | None = None,
    ) -> tuple[DictTensor, DictTensor]:
        return DictTensor({"action": torch.zeros(observation.n_elems(), dtype=torch.int64)}), state


class DriftingAgent(CountingAgent):
    """A CountingAgent that goes wrong after its first step: ``how`` is "dict" (a plain dict output),
    "state" (a float64 count), "later state" (the same from its second step) or "last state" (a float64
    new state at every third step only, its output kept)."""

    def __init__(self, how: str) -> None:
        super().__init__()
        self.how, self.calls = how, 0

    def forward(
        self,
        state: DictTensor,
        observation: DictTensor,
        agent_info: DictTensor,
        history: TemporalDictTensor | None = None,
    ) -> Any:
        output, new_state = super().forward(state, observation, agent_info, history)
        self.calls += 1
        if self.calls > 1 and self.how == "dict":
            return dict(output.items()), new_state
        if self.how == "state" or (self.how == "later state" and self.calls > 1):
            return output, DictTensor({"count": new_state["count"].double()})
        if self.how == "last state" and self.calls % 3 == 0:  # the last step of a 3-step batch
            output.set("count", output["count"].long())
            return output, DictTensor({"count": new_state["count"].double()})
        return output, new_state


class BiasAgent(Agent):
    """Action = argmax of a Linear(1, 2) layer's output (weights zero: the bias decides)."""

    def __init__(self, bias: tuple[float, float] = (1.0, 0.0)) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(1, 2)
        with torch.no_grad():
            self.linear.weight.zero_()
            self.linear.bias.copy_(torch.tensor(bias))

    def forward(
        self,
        state: DictTensor,
        observation: DictTensor,
        agent_info: DictTensor,
        history: TemporalDictTensor | None = None,
    ) -> tuple[DictTensor, DictTensor]:
        logits = self.linear(observation["t"].float().unsqueeze(1))
        return DictTensor({"action": logits.argmax(1), "logits": logits}), state


class BrokenEnv(Environment):
    """An Environment that breaks the contract in one chosen way, at reset or at a given step."""

    def __init__(self, n_envs: int, seed: int, fault: str, at_step: int = 0) -> None:
        self.n_envs = n_envs
        self.fault = fault
        self.at_step = at_step

    def _observation(self, n: int | None = None, initial: bool = False) -> DictTensor:
        n = self.n_envs if n is None else n
        obs = {
            "x": torch.zeros(n),
            "reward": torch.zeros(n),
            "terminated": torch.zeros(n, dtype=torch.bool),
            "truncated": torch.zeros(n, dtype=torch.bool),
            "done": torch.zeros(n, dtype=torch.bool),
            "initial_state": torch.full((n,), initial),
        }
        return DictTensor(obs)

    def _faulty(self) -> Any:
        if self.fault == "not a DictTensor":
            return {"x": torch.zeros(self.n_envs)}
        if self.fault == "rows":
            return self._observation(self.n_envs + 1)
        obs = self._observation()
        if self.fault == "missing keys":
            return obs.get(["x", "reward", "terminated"])
        if self.fault == "done dtype":
            obs.set("done", torch.zeros(self.n_envs))
            return obs
        if self.fault == "x dtype":
            obs.set("x", torch.zeros(self.n_envs, dtype=torch.float64))
            return obs
        raise AssertionError(self.fault)

    def reset(self, env_info: DictTensor, auto_reset: bool = False) -> DictTensor:
        self.t = 0
        if self.at_step is None:
            return self._faulty()
        return self._observation(initial=True)

    def step(self, action: DictTensor) -> tuple[DictTensor, DictTensor]:
        self.t += 1
        obs = self._faulty() if self.t - 1 == self.at_step else self._observation()
        return obs, obs


# ---------------------------------------------------------------------------- episodes mode


def test_episodes_mode_lengths_end_at_the_first_done_and_mask_covers_them() -> None:
    with counter_batcher(n_envs=3, n_timesteps=4, mode="episodes") as batcher:
        batcher.reset(env_info=DictTensor({"length": ints(2, 5, 3)}))
        batch = run_once(batcher)
    steps = batch.trajectories
    assert batch.lengths.tolist() == [2, 4, 3]  # the 5-step episode is cut at T = 4
    assert steps.mask().tolist() == [
        [True, True, False, False],
        [True, True, True, True],
        [True, True, True, False],
    ]
    assert steps["t"][1].tolist() == [0, 1, 2, 3]
    assert steps["next/t"][1].tolist() == [1, 2, 3, 4]
    # the last real step of a finished episode is the terminal transition
    assert steps["next/done"][0, 1] and steps["next/terminated"][2, 2]
    assert not steps["next/done"][1].any()
    assert steps["initial_state"][:, 0].all() and not steps["initial_state"][:, 1:].any()
    assert steps["next/reward"].masked_select(steps.mask()).eq(1.0).all()  # action 0 -> reward 1


def test_episodes_mode_pads_with_zeros_after_the_loop_stops() -> None:
    with counter_batcher(n_envs=2, n_timesteps=5, mode="episodes") as batcher:
        batcher.reset(env_info=DictTensor({"length": ints(5, 5)}))
        full = run_once(batcher)
        assert full.lengths.tolist() == [5, 5]
        assert full.trajectories["t"][0].tolist() == [0, 1, 2, 3, 4]
        batcher.reset(env_info=DictTensor({"length": ints(1, 2)}))
        short = run_once(batcher)
    assert short.lengths.tolist() == [1, 2]
    # the loop stopped after step 1: steps 2.. are zeros in every key, not the previous call's steps
    for key, value in short.trajectories.items():
        assert not value[:, 2:].any(), key
    # row 0 finished at step 0: its step 1 is padding too, zeros whatever the other rows did
    for key, value in short.trajectories.items():
        assert not value[0, 1:].any(), key
    assert short.trajectories["t"][1, 1] == 1 and short.trajectories["next/done"][1, 1]


def test_episodes_mode_starts_new_episodes_at_every_execute() -> None:
    with counter_batcher(n_envs=2, n_timesteps=3, mode="episodes") as batcher:
        batcher.reset(DictTensor({"start": ints(10, 20)}), DictTensor({"length": ints(2, 9)}))
        first, second = run_once(batcher), run_once(batcher)
    for batch, episode in ((first, 0), (second, 1)):
        assert batch.trajectories["episode"][:, 0].tolist() == [episode, episode]
        assert batch.trajectories["t"][:, 0].tolist() == [0, 0]
        assert batch.trajectories["count"][:, 0].tolist() == [10, 20]
        assert batch.info["agent_state/count"].tolist() == [10, 20]
        assert batch.lengths.tolist() == [2, 3]


# ---------------------------------------------------------------------------- fixed mode


def test_fixed_mode_carries_state_and_environment_over_execute_calls() -> None:
    with counter_batcher(n_envs=2, n_timesteps=4, env_args={"length": 3}) as batcher:
        batcher.reset(DictTensor({"start": ints(100, 200)}))
        first, second = run_once(batcher), run_once(batcher)
    assert first.lengths.tolist() == [4, 4] and second.lengths.tolist() == [4, 4]
    # episodes of 3 steps, auto-reset: t = 0 1 2 | 0 1 2 | 0 1 ...
    assert first.trajectories["t"][0].tolist() == [0, 1, 2, 0]
    assert second.trajectories["t"][0].tolist() == [1, 2, 0, 1]
    # the count continues across calls and restarts at "start" with every episode
    assert first.trajectories["count"].tolist() == [[100, 101, 102, 100], [200, 201, 202, 200]]
    assert second.trajectories["count"].tolist() == [[101, 102, 100, 101], [201, 202, 200, 201]]
    assert first.trajectories["initial_state"][0].tolist() == [True, False, False, True]
    assert second.trajectories["initial_state"][0].tolist() == [False, False, True, False]
    # agent_state/ is the state at the start of the trajectory, before any reset at step 0
    assert first.info["agent_state/count"].tolist() == [100, 200]
    assert second.info["agent_state/count"].tolist() == [101, 201]
    assert second.trajectories["episode"][0].tolist() == [1, 1, 2, 2]


def test_fixed_mode_agent_state_info_is_the_pre_reset_state_when_an_episode_starts_at_step_0() -> None:
    with counter_batcher(n_envs=1, n_timesteps=3, env_args={"length": 3}) as batcher:
        batcher.reset(DictTensor({"start": ints(7)}))
        run_once(batcher)
        batch = run_once(batcher)  # starts exactly on a new episode
    assert batch.trajectories["initial_state"][0].tolist() == [True, False, False]
    assert batch.info["agent_state/count"].tolist() == [10]  # 7, 8, 9 then +1: not yet reset
    assert batch.trajectories["count"][0].tolist() == [7, 8, 9]


def test_fixed_mode_reset_restarts_episodes_and_state_with_the_new_infos() -> None:
    with counter_batcher(n_envs=2, n_timesteps=2, env_args={"length": 10}) as batcher:
        batcher.reset(DictTensor({"start": ints(0, 0)}))
        run_once(batcher)
        batcher.reset(DictTensor({"start": ints(50, 60)}))
        batch = run_once(batcher)
    assert batch.trajectories["t"].tolist() == [[0, 1], [0, 1]]
    assert batch.trajectories["count"].tolist() == [[50, 51], [60, 61]]
    assert batch.trajectories["episode"][:, 0].tolist() == [1, 1]
    assert batch.info["agent_info/start"].tolist() == [50, 60]


def test_auto_reset_keeps_the_final_observation_in_next_and_the_fresh_one_at_the_next_step() -> None:
    with counter_batcher(agent=ConstantAgent, n_envs=1, n_timesteps=4, env_args={"length": 2}) as batcher:
        batcher.reset()
        steps = run_once(batcher).trajectories
    assert steps["next/t"][0].tolist() == [1, 2, 1, 2]  # 2 = the final observation of each episode
    assert steps["next/done"][0].tolist() == [False, True, False, True]
    assert steps["next/reward"][0].tolist() == [1.0, 1.0, 1.0, 1.0]
    # the step after a done acts on the first observation of the new episode
    assert steps["t"][0].tolist() == [0, 1, 0, 1]
    assert steps["initial_state"][0].tolist() == [True, False, True, False]
    assert steps["reward"][0].tolist() == [0.0, 1.0, 0.0, 1.0]
    assert not steps["done"].any()
    assert steps["episode"][0].tolist() == [0, 0, 1, 1]


@pytest.mark.parametrize("truncate", [False, True])
def test_terminated_and_truncated_are_told_apart(truncate: bool) -> None:
    with counter_batcher(n_envs=1, n_timesteps=3, mode="episodes", env_args={"truncate": truncate}) as b:
        b.reset(env_info=DictTensor({"length": ints(2)}))
        steps = run_once(b).trajectories
    assert steps["next/done"][0, :2].tolist() == [False, True]
    assert steps["next/truncated"][0, :2].tolist() == [False, truncate]
    assert steps["next/terminated"][0, :2].tolist() == [False, not truncate]


# ---------------------------------------------------------------------------- z and w


def test_agent_info_and_env_info_reach_the_info_row_by_row() -> None:
    with counter_batcher(n_envs=3, n_timesteps=2, mode="episodes") as batcher:
        z = DictTensor({"start": ints(5, 6, 7), "epsilon": torch.tensor([0.1, 0.2, 0.3])})
        w = DictTensor({"length": ints(1, 2, 2), "level": torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])})
        batcher.reset(z, w)
        batch = run_once(batcher)
    assert batch.info.equal(
        DictTensor(
            {
                "agent_info/start": ints(5, 6, 7),
                "agent_info/epsilon": torch.tensor([0.1, 0.2, 0.3]),
                "env_info/length": ints(1, 2, 2),
                "env_info/level": torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]),
                "agent_state/count": ints(5, 6, 7),
                "policy_version": ints(0, 0, 0),
            }
        )
    )
    assert batch.trajectories["count"][:, 0].tolist() == [5, 6, 7]
    assert batch.trajectories["length"][:, 0].tolist() == [1, 2, 2]
    assert batch.lengths.tolist() == [1, 2, 2]


def test_groups_get_the_rows_of_their_global_env_indices() -> None:
    z = DictTensor({"start": ints(10, 20, 30, 40)})
    w = DictTensor({"length": ints(1, 2, 3, 4)})
    with counter_batcher(n_envs=2, n_timesteps=3, n_processes=2, mode="episodes", seed=100) as batcher:
        assert batcher.n_elems() == 4
        batcher.reset(z, w)
        batch = run_once(batcher)
    assert batch.n_elems() == 4
    assert batch.info["agent_info/start"].tolist() == [10, 20, 30, 40]
    assert batch.info["env_info/length"].tolist() == [1, 2, 3, 4]
    assert batch.lengths.tolist() == [1, 2, 3, 3]
    assert batch.trajectories["count"][:, 0].tolist() == [10, 20, 30, 40]
    root = derive_seed(100, "env")
    assert batch.trajectories["seed"][:, 0].tolist() == [root, root + 1, root + 2, root + 3]  # + global index
    # the same rows in one group of 4 give the same trajectories, padding included (zeros past
    # each row's end), although group 0 stops after step 1 and a single group runs to step 2
    with counter_batcher(n_envs=4, n_timesteps=3, mode="episodes", seed=100) as single:
        single.reset(z, w)
        one_group = run_once(single)
    assert one_group.info.equal(batch.info)
    assert one_group.trajectories.equal(batch.trajectories)
    assert not batch.trajectories["t"][:2, 2].any()


def test_fixed_mode_with_two_groups_carries_each_group_over() -> None:
    z = DictTensor({"start": ints(0, 10, 20, 30)})
    with counter_batcher(n_envs=2, n_timesteps=3, n_processes=2, env_args={"length": 2}) as batcher:
        batcher.reset(z)
        run_once(batcher)
        batch = run_once(batcher)
    assert batch.trajectories["t"][:, 0].tolist() == [1, 1, 1, 1]
    assert batch.trajectories["count"][:, 0].tolist() == [1, 11, 21, 31]
    assert batch.trajectories["count"][:, 1].tolist() == [0, 10, 20, 30]


# ---------------------------------------------------------------------------- seeding


def test_same_seeds_give_identical_trajectories_and_other_seeds_do_not() -> None:
    def collect(seed: int) -> list[Trajectories]:
        with counter_batcher(
            RandomAgent, {"n_actions": 3}, n_envs=2, n_timesteps=6, n_processes=2, seed=seed
        ) as batcher:
            batcher.reset()
            return [run_once(batcher), run_once(batcher)]

    a, b, c = collect(3), collect(3), collect(4)
    assert a[0].equal(b[0]) and a[1].equal(b[1])
    assert not a[0].trajectories["action"].equal(c[0].trajectories["action"])
    # the two groups' agents have their own streams
    actions = a[0].trajectories["action"]
    assert not actions[:2].equal(actions[2:])


def test_gym_env_instances_are_seeded_by_global_index() -> None:
    def first_observations(seed: int) -> torch.Tensor:
        with LocalBatcher(
            RandomAgent, {}, GymEnv, {"env": "CartPole-v1"}, n_envs=2, n_timesteps=2, n_processes=2, seed=seed
        ) as batcher:
            batcher.reset()
            return run_once(batcher).trajectories["observation"][:, 0]

    obs = first_observations(5)
    assert obs.dtype == torch.float32 and obs.shape == (4, 4)
    assert len({tuple(row.tolist()) for row in obs}) == 4  # every instance its own stream
    assert obs.equal(first_observations(5))
    # global instance i gets derive_seed(5, "env") + i: the same as one GymEnv of 4 instances seeded with that root
    env = GymEnv("CartPole-v1", n_envs=4, seed=derive_seed(5, "env"))
    assert env.reset(DictTensor(batch_size=4))["observation"].equal(obs)
    env.close()
    # consecutive base seeds share no instance: instance 1 of seed 5 is not instance 0 of seed 6
    others = first_observations(6)
    assert not any(row.equal(other) for row in obs for other in others)


# ---------------------------------------------------------------------------- dtypes and history


def test_gym_env_dtypes_are_kept_in_the_trajectories() -> None:
    with LocalBatcher(
        RandomAgent, {"n_actions": 4}, GymEnv, {"env": "FrozenLake-v1"}, n_envs=2, n_timesteps=3
    ) as batcher:
        batcher.reset()
        steps = run_once(batcher).trajectories
    assert steps["observation"].dtype == torch.int64 and steps["observation"].shape == (2, 3)
    assert steps["next/observation"].dtype == torch.int64
    assert steps["action"].dtype == torch.int64 and steps["last_action"].dtype == torch.int64
    assert steps["next/last_action"].equal(steps["action"])
    assert steps["next/reward"].dtype == torch.float32
    assert steps["observation"].ge(0).all() and steps["observation"].lt(16).all()


@pytest.mark.parametrize(
    ("history", "expected"),
    [(2, ([0, 1, 2, 0, 1], [2, 0, 1, 2, 0])), (True, ([0, 1, 2, 0, 1], [0, 0, 1, 2, 0]))],
)
def test_history_agents_see_the_wanted_number_of_previous_steps(
    history: bool | int, expected: tuple[list[int], list[int]]
) -> None:
    with counter_batcher(
        agent_args={"history": history}, n_envs=2, n_timesteps=5, env_args={"length": 3}
    ) as batcher:
        batcher.reset()
        first, second = run_once(batcher), run_once(batcher)
    # episodes of 3 steps: t = 0 1 2 | 0 1 in the first batch, 2 | 0 1 2 | 0 in the second. The window
    # empties at each episode start; n = 2 carries over the execute() (2 steps before the second batch's
    # t = 2), True holds only the steps of the current execute() (none before its first step)
    assert first.trajectories["t"][0].tolist() == [0, 1, 2, 0, 1]
    for batch, lengths in zip((first, second), expected, strict=True):
        assert batch.trajectories["history_length"].tolist() == [lengths, lengths]


def test_history_holds_the_previous_observations() -> None:
    with counter_batcher(HistorySumAgent, n_envs=1, n_timesteps=5, env_args={"length": 10}) as batcher:
        batcher.reset()
        first, second = run_once(batcher), run_once(batcher)
    assert first.trajectories["t"][0].tolist() == [0, 1, 2, 3, 4]
    assert first.trajectories["seen"][0].tolist() == [0, 0, 1, 3, 5]
    assert second.trajectories["t"][0].tolist() == [5, 6, 7, 8, 9]
    assert second.trajectories["seen"][0].tolist() == [7, 9, 11, 13, 15]  # 3 + 4 carried over, 4 + 5, ...


# ---------------------------------------------------------------------------- update and ownership


def test_update_changes_the_behaviour_of_every_group() -> None:
    with counter_batcher(BiasAgent, {"bias": (1.0, 0.0)}, n_envs=2, n_timesteps=2, n_processes=2) as batcher:
        batcher.reset()
        with pytest.warns(UserWarning, match="acts with the agent's own initial weights"):
            before = run_once(batcher)  # with the factory's bias, on purpose
        batcher.update({"linear.weight": torch.zeros(2, 1), "linear.bias": torch.tensor([0.0, 1.0])})
        after = run_once(batcher)
    assert before.trajectories["action"].eq(0).all()
    assert after.trajectories["action"].eq(1).all()
    assert after.trajectories["next/reward"].eq(2.0).all()  # the environments saw the new actions


def test_get_returns_tensors_that_the_next_execute_does_not_overwrite() -> None:
    with counter_batcher(n_envs=2, n_timesteps=3, env_args={"length": 100}) as batcher:
        batcher.reset()
        first = run_once(batcher)
        kept = first.clone()
        run_once(batcher)
    assert first.equal(kept)


def test_trajectories_are_on_the_cpu_with_the_documented_keys() -> None:
    with counter_batcher(n_envs=2, n_timesteps=2) as batcher:
        batcher.reset()
        batch = run_once(batcher)
    observation_keys = {"t", "seed", "episode", "length", "reward", "terminated", "truncated", "done"}
    observation_keys.add("initial_state")
    expected = observation_keys | {"action", "count"} | {f"next/{k}" for k in observation_keys}
    assert set(batch.trajectories.keys()) == expected
    assert set(batch.info.keys()) == {"agent_state/count", "policy_version"}
    assert batch.device == torch.device("cpu") == batcher.device


# ---------------------------------------------------------------------------- lifecycle errors


def test_get_before_execute_and_twice_raises() -> None:
    with counter_batcher() as batcher:
        batcher.reset()
        with pytest.raises(RuntimeError, match=message("LocalBatcher: get() without a pending execute()")):
            batcher.get()
        run_once(batcher)
        with pytest.raises(RuntimeError, match=message("get() without a pending execute(); call execute()")):
            batcher.get()


def test_execute_before_reset_raises() -> None:
    batcher = counter_batcher()
    with pytest.raises(RuntimeError, match=message("LocalBatcher: call reset() before execute()")):
        batcher.execute()
    batcher.close()


def test_execute_twice_without_get_raises() -> None:
    with counter_batcher() as batcher:
        batcher.reset()
        batcher.execute()
        with pytest.raises(
            RuntimeError,
            match=message("LocalBatcher: execute() called twice; take the first batch with get()"),
        ):
            batcher.execute()
        assert batcher.get() is not None


def test_reset_drops_a_pending_batch() -> None:
    with counter_batcher() as batcher:
        batcher.reset()
        batcher.execute()
        batcher.reset()
        with pytest.raises(RuntimeError, match=message("get() without a pending execute()")):
            batcher.get()


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda b: b.reset(), "reset"),
        (lambda b: b.execute(), "execute"),
        (lambda b: b.get(), "get"),
        (lambda b: b.update({}), "update"),
    ],
)
def test_calls_after_close_raise(call: Any, name: str) -> None:
    batcher = counter_batcher()
    batcher.reset()
    batcher.close()
    with pytest.raises(RuntimeError, match=message(f"LocalBatcher: {name}() after close()")):
        call(batcher)


def test_close_twice_is_fine_and_the_context_manager_closes_every_group() -> None:
    ClosingCounterEnv.closed.clear()
    batcher = LocalBatcher(CountingAgent, {}, ClosingCounterEnv, {}, n_envs=3, n_timesteps=2, n_processes=2)
    batcher.close()
    batcher.close()
    assert ClosingCounterEnv.closed == [3, 3]
    ClosingCounterEnv.closed.clear()
    with LocalBatcher(CountingAgent, {}, ClosingCounterEnv, {}, n_envs=1, n_timesteps=2, n_processes=2) as b:
        b.reset()
        run_once(b)
    assert ClosingCounterEnv.closed == [1, 1]
    with pytest.raises(RuntimeError, match=message("LocalBatcher: execute() after close()")):
        b.execute()


def test_a_failing_group_closes_the_groups_already_made() -> None:
    ClosingCounterEnv.closed.clear()
    made: list[int] = []

    def env_factory(n_envs: int, seed: int) -> Environment:
        made.append(seed)
        if len(made) == 2:
            raise OSError("simulator crashed")
        return ClosingCounterEnv(n_envs, seed)

    with pytest.raises(OSError, match=message("simulator crashed")):
        LocalBatcher(CountingAgent, {}, env_factory, {}, n_envs=2, n_timesteps=2, n_processes=3)
    root = derive_seed(0, "env")
    assert made == [root, root + 2]  # group g gets the env root + g * n_envs
    assert ClosingCounterEnv.closed == [2]


# ---------------------------------------------------------------------------- argument errors


@pytest.mark.parametrize("name", ["n_envs", "n_timesteps", "n_processes"])
@pytest.mark.parametrize("value", [0, -1, 2.0, True, None])
def test_sizes_must_be_positive_ints(name: str, value: Any) -> None:
    kwargs: dict[str, Any] = {"n_envs": 1, "n_timesteps": 1, "n_processes": 1, name: value}
    with pytest.raises(
        ValueError, match=message(f"LocalBatcher: {name} must be a positive int, got {value!r}")
    ):
        LocalBatcher(CountingAgent, {}, CounterEnv, {}, **kwargs)


def test_bad_mode_and_seed_raise() -> None:
    with pytest.raises(
        ValueError, match=message("LocalBatcher: mode must be 'fixed', 'episodes' or 'stream', got 'episode'")
    ):
        counter_batcher(mode="episode")
    with pytest.raises(TypeError, match=message("LocalBatcher: seed must be an int, got a float")):
        counter_batcher(seed=1.0)


def test_factories_must_make_an_agent_and_an_environment() -> None:
    with pytest.raises(
        AgentError, match=message("agent_factory must return an rlstruct.Agent, got a Linear")
    ):
        LocalBatcher(lambda: torch.nn.Linear(1, 1), {}, CounterEnv, {}, n_envs=1, n_timesteps=1)  # type: ignore[arg-type, return-value]
    with pytest.raises(
        TypeError, match=message("env_factory must return an rlstruct.Environment, got a dict")
    ):
        LocalBatcher(CountingAgent, {}, lambda n_envs, seed: {}, {}, n_envs=1, n_timesteps=1)  # type: ignore[arg-type, return-value]
    with pytest.raises(ValueError, match=message("env_factory was asked for 2 instances but made 3")):
        LocalBatcher(CountingAgent, {}, lambda n_envs, seed: CounterEnv(3), {}, n_envs=2, n_timesteps=1)


def test_infos_must_be_dicttensors_with_one_row_per_env() -> None:
    with counter_batcher(n_envs=2, n_processes=2) as batcher:
        with pytest.raises(
            ValueError,
            match=message("LocalBatcher.reset: agent_info must have 4 rows (n_processes * n_envs), got 2"),
        ):
            batcher.reset(DictTensor({"start": ints(1, 2)}))
        with pytest.raises(
            ValueError,
            match=message("LocalBatcher.reset: env_info must have 4 rows (n_processes * n_envs), got 5"),
        ):
            batcher.reset(env_info=DictTensor({"length": ints(1, 2, 3, 4, 5)}))
        with pytest.raises(
            TypeError, match=message("LocalBatcher.reset: agent_info must be a DictTensor, got a dict")
        ):
            batcher.reset({"start": ints(1, 2, 3, 4)})  # type: ignore[arg-type]
        with pytest.raises(
            TypeError,
            match=message("LocalBatcher.reset: env_info must be a DictTensor, got a tensor of shape (4,)"),
        ):
            batcher.reset(env_info=ints(1, 2, 3, 4))  # type: ignore[arg-type]


def test_info_keys_must_not_change_between_resets() -> None:
    with counter_batcher(n_envs=2) as batcher:
        batcher.reset(DictTensor({"start": ints(1, 2)}), DictTensor({"length": ints(3, 3)}))
        batcher.execute()
        batcher.get()
        batcher.reset(
            DictTensor({"start": ints(5, 6)}), DictTensor({"length": ints(4, 4)})
        )  # same keys: fine
        with pytest.raises(
            ValueError,
            match=message(
                "LocalBatcher.reset: agent_info and env_info must keep the keys of the first reset, "
                "['start'] and ['length']; got [] and ['length']"
            ),
        ):
            batcher.reset(None, DictTensor({"length": ints(3, 3)}))


# ---------------------------------------------------------------------------- agent errors


def test_agent_output_without_action_raises() -> None:
    with counter_batcher(NoActionAgent) as batcher:
        batcher.reset()
        with pytest.raises(
            ValueError, match=message("group 0: the agent's output must hold the key 'action', got ['move']")
        ):
            batcher.execute()


@pytest.mark.parametrize(
    ("agent", "args"),
    [(TupleAgent, {}), (DriftingAgent, {"how": "dict"})],  # at the first step; at a later one
)
def test_agent_output_must_be_a_pair_of_dicttensors(agent: type[Agent], args: dict[str, Any]) -> None:
    with counter_batcher(agent, args, n_envs=2) as batcher:
        batcher.reset()
        with pytest.raises(
            TypeError,
            match=message(
                "group 0: the agent must return (DictTensor, DictTensor), got (a dict, a DictTensor)"
            ),
        ):
            batcher.execute()


def test_agent_output_and_state_rows_are_checked() -> None:
    with counter_batcher(ConstantAgent, {"rows": 3}, n_envs=2) as batcher:
        batcher.reset()
        with pytest.raises(ValueError, match=message("group 0: the agent's output has 3 rows, expected 2")):
            batcher.execute()
    with counter_batcher(ConstantAgent, {"state_rows": 1}, n_envs=2, n_processes=2) as batcher:
        batcher.reset()
        with pytest.raises(
            ValueError, match=message("group 0: the agent's new state has 1 rows, expected 2")
        ):
            batcher.execute()


def test_a_new_state_of_another_dtype_than_the_state_given_is_named() -> None:
    with counter_batcher(DriftingAgent, {"how": "state"}, n_envs=2) as batcher:
        batcher.reset()
        with pytest.raises(
            ValueError,
            match=message(
                "group 0: the agent's new state key 'count' is (torch.float64, ()) (dtype, per-row shape), "
                "but (torch.int64, ()) in its initial_state"
            ),
        ):
            batcher.execute()


@pytest.mark.parametrize("n_processes", [1, 2])
def test_a_state_whose_dtype_changed_after_the_first_step_is_named_at_the_next_batch(
    n_processes: int,
) -> None:
    # the first batch's first step is right; the state it ends with is float64, carried into the next
    layout = {"n_envs": 2, "n_timesteps": 3, "n_processes": n_processes}
    env_args = {"length": 100}  # no episode starts inside a batch
    with counter_batcher(DriftingAgent, {"how": "last state"}, env_args, **layout) as batcher:
        batcher.reset()
        batcher.execute()
        assert batcher.get().info["agent_state/count"].dtype == torch.int64
        with pytest.raises(
            ValueError, match=message("state key 'count' is (torch.float64, ()) (dtype, per-row shape), but")
        ):
            batcher.execute()


def test_a_state_whose_dtype_changed_is_named_where_an_episode_starts() -> None:
    with counter_batcher(DriftingAgent, {"how": "later state"}, {"length": 2}, n_timesteps=4) as batcher:
        batcher.reset()
        with pytest.raises(
            TypeError, match=message("DriftingAgent: its state no longer fits its initial_state")
        ):
            batcher.execute()


def test_z_that_requires_grad_is_taken_detached() -> None:
    temperature = torch.nn.Parameter(torch.ones(()))
    with counter_batcher() as batcher:
        batcher.reset(agent_info=DictTensor({"temperature": temperature.expand(2) * 1.0}))
        batcher.execute()
        stored = batcher.get().info["agent_info/temperature"]
    assert not stored.requires_grad and stored.grad_fn is None
    assert torch.equal(stored, torch.ones(2))


def test_a_gymnasium_class_as_env_factory_is_named_with_the_way_to_wrap_it() -> None:
    with pytest.raises(
        TypeError,
        match=message(
            "LocalBatcher: env_factory must make an rlstruct Environment, got the gymnasium environment class "
            "CartPoleEnv; pass GymEnv with env_args={'env': CartPoleEnv, ...}"
        ),
    ):
        LocalBatcher(RandomAgent, {"n_actions": 2}, CartPoleEnv, {}, n_envs=2, n_timesteps=3)  # type: ignore[arg-type]


def test_agent_initial_state_rows_are_checked() -> None:
    batcher = counter_batcher(BadInitialStateAgent, n_envs=2)
    with pytest.raises(
        ValueError, match=message("group 0: agent.initial_state must return a DictTensor of 2 rows, got")
    ):
        batcher.reset()
    batcher.close()


def test_agent_output_key_clashing_with_an_observation_key_raises() -> None:
    def extra(step: int, n: int) -> dict[str, torch.Tensor]:
        return {"t": torch.zeros(n, dtype=torch.int64)}

    with counter_batcher(ConstantAgent, {"extra": extra}) as batcher:
        batcher.reset()
        with pytest.raises(
            ValueError,
            match=message("group 0: the agent's output keys ['t'] are also observation keys; rename them"),
        ):
            batcher.execute()


@pytest.mark.parametrize("layout", ["full", "compact"])
def test_agent_output_key_clashing_with_a_next_key_raises_naming_it(layout: str) -> None:
    """An output next/t would overwrite (or, of another shape, break) the next/t of the observation t.

    It was taken for a key the buffer lacked; next/stored is compact's own.
    """

    def extra(step: int, n: int) -> dict[str, torch.Tensor]:
        return {"next/t": torch.zeros(n, dtype=torch.int64), "next/stored": torch.zeros(n, dtype=torch.bool)}

    with counter_batcher(ConstantAgent, {"extra": extra}, layout=layout) as batcher:
        batcher.reset()
        keys = ["next/t", "next/stored"] if layout == "compact" else ["next/t"]
        with pytest.raises(
            ValueError,
            match=message(
                f"group 0: the agent's output keys {keys} are keys the trajectories keep for what the action "
                f"led to (next/<observation key>{', next/stored' if layout == 'compact' else ''}); rename them"
            ),
        ):
            batcher.execute()


@pytest.mark.parametrize(
    ("later", "got"),
    [
        (lambda n: torch.zeros(n, 2, dtype=torch.float64), "(torch.float64, (2, 2))"),
        (lambda n: torch.zeros(n, 3), "(torch.float32, (2, 3))"),
    ],
)
def test_agent_changing_an_output_dtype_or_shape_later_raises_naming_key_and_step(
    later: Any, got: str
) -> None:
    def extra(step: int, n: int) -> dict[str, torch.Tensor]:
        return {"value": torch.zeros(n, 2) if step < 2 else later(n)}

    with counter_batcher(ConstantAgent, {"extra": extra}, n_envs=2, n_timesteps=4) as batcher:
        batcher.reset()
        with pytest.raises(
            ValueError,
            match=message(
                f"group 0: at step 2 the output key 'value' is {got} (dtype, shape), "
                "but the buffer, made from the first step, holds (torch.float32, (2, 2)); "
                "nothing is cast into the buffer"
            ),
        ):
            batcher.execute()


def test_agent_adding_an_output_key_later_raises() -> None:
    def extra(step: int, n: int) -> dict[str, torch.Tensor]:
        return {"late": torch.zeros(n)} if step == 1 else {}

    with counter_batcher(ConstantAgent, {"extra": extra}) as batcher:
        batcher.reset()
        with pytest.raises(
            ValueError,
            match=message(
                "at step 1 the output key 'late' is (torch.float32, (2,)) (dtype, shape), but the buffer, made from the first step, holds no such key"
            ),
        ):
            batcher.execute()


@pytest.mark.parametrize("bad", [0, -1, 1.5, "all"])
def test_require_history_must_return_a_bool_or_a_positive_int(bad: Any) -> None:
    with pytest.raises(
        ValueError,
        match=message(f"CountingAgent.require_history() must return a bool or a positive int, got {bad!r}"),
    ):
        counter_batcher(agent_args={"history": bad})


# ---------------------------------------------------------------------------- environment contract errors


@pytest.mark.parametrize(
    ("fault", "error", "text"),
    [
        (
            "not a DictTensor",
            TypeError,
            "group 0: the environment returned a dict {when}, expected a DictTensor",
        ),
        ("rows", ValueError, "group 0: the environment returned 3 rows {when}, expected 2"),
        (
            "missing keys",
            ValueError,
            "group 0: the observation {when} lacks the keys ['truncated', 'done', 'initial_state']",
        ),
        (
            "done dtype",
            TypeError,
            "group 0: observation key 'done' {when} has dtype torch.float32, expected torch.bool",
        ),
    ],
)
@pytest.mark.parametrize(("at_step", "when"), [(None, "at reset"), (0, "after a step")])
def test_environments_breaking_the_contract_are_reported(
    fault: str, error: type[Exception], text: str, at_step: int | None, when: str
) -> None:
    with LocalBatcher(
        CountingAgent, {}, BrokenEnv, {"fault": fault, "at_step": at_step}, n_envs=2, n_timesteps=3
    ) as batcher:
        if at_step is not None:
            batcher.reset()
        with pytest.raises(error, match=message(text.format(when=when))):
            batcher.execute() if at_step is not None else batcher.reset()


def test_environment_changing_an_observation_dtype_later_raises() -> None:
    with LocalBatcher(
        CountingAgent, {}, BrokenEnv, {"fault": "x dtype", "at_step": 1}, n_envs=2, n_timesteps=3
    ) as batcher:
        batcher.reset()
        with pytest.raises(
            ValueError,
            match=message(
                "group 0: at step 1 the next key 'x' is (torch.float64, (2,)) (dtype, shape), but the buffer, made from the first step, holds (torch.float32, (2,))"
            ),
        ):
            batcher.execute()


class RandomInitAgent(BiasAgent):
    """BiasAgent with randomly initialised weights: every construction draws new ones."""

    def __init__(self) -> None:
        super().__init__()
        torch.nn.init.normal_(self.linear.weight)


def test_policy_version_counts_updates_and_every_group_starts_with_the_same_weights() -> None:
    with LocalBatcher(
        RandomInitAgent, {}, CounterEnv, {"length": 3}, n_envs=2, n_timesteps=2, n_processes=2
    ) as batcher:
        first, second = (group.agent.state_dict() for group in batcher._groups)
        assert all(torch.equal(first[k], second[k]) for k in first)
        batcher.reset()
        with pytest.warns(UserWarning, match="acts with the agent's own initial weights"):
            assert run_once(batcher).info["policy_version"].tolist() == [0, 0, 0, 0]
        assert batcher.policy_version() == 0
        batcher.update({k: v + 1 for k, v in first.items()})
        batcher.update({k: v + 2 for k, v in first.items()})
        assert batcher.policy_version() == 2
        assert run_once(batcher).info["policy_version"].tolist() == [2, 2, 2, 2]


def test_update_rejects_weights_that_would_be_cast_or_do_not_fit() -> None:
    with LocalBatcher(RandomInitAgent, {}, CounterEnv, {}, n_envs=1, n_timesteps=1) as batcher:
        weights = batcher._groups[0].agent.state_dict()
        wrong_dtype = {k: v.double() for k, v in weights.items()}
        with pytest.raises(
            ValueError, match=message("LocalBatcher.update: weight 'linear.weight' has dtype torch.float64")
        ):
            batcher.update(wrong_dtype)
        with pytest.raises(
            ValueError, match=message("LocalBatcher.update: weights lack the keys ['linear.bias']")
        ):
            batcher.update({"linear.weight": weights["linear.weight"]})


@pytest.mark.parametrize("batcher", [LocalBatcher, MultiprocessBatcher])
@pytest.mark.parametrize(("key", "value"), [("seed", 3), ("n_envs", 4)])
def test_env_args_may_not_set_what_the_batcher_sets(batcher: Any, key: str, value: int) -> None:
    with pytest.raises(
        ValueError,
        match=message(
            f"{batcher.__name__}: env_args must not hold {key!r}: the batcher sets it (got {value})"
        ),
    ):
        batcher(CountingAgent, {}, CounterEnv, {key: value}, n_envs=1, n_timesteps=1)  # nothing started


# ---------------------------------------------------------------------------- the Batcher protocol and device


def test_local_batcher_is_a_batcher_whose_get_never_returns_none() -> None:
    with counter_batcher(n_envs=2, n_processes=2) as batcher:
        assert isinstance(batcher, Batcher)
        assert (batcher.n_envs, batcher.n_timesteps, batcher.n_processes) == (2, 4, 2)
        assert (batcher.mode, batcher.device, batcher.policy_version()) == ("fixed", torch.device("cpu"), 0)
        batcher.reset()
        batcher.execute()
        batch = batcher.get(blocking=False)  # in process, the batch is always ready
        assert batch is not None and batch.n_elems() == 4
    assert not isinstance(CounterEnv(), Batcher)


def test_device_is_checked_at_construction() -> None:
    with pytest.raises(
        ValueError, match=message("LocalBatcher: device must hold data; 'meta' tensors have none, got 'meta'")
    ):
        counter_batcher(device="meta")
    with pytest.raises(
        ValueError,
        match=message("LocalBatcher: device must name a torch device such as 'cpu' or 'cuda:0', got 'gpu'"),
    ):
        counter_batcher(device="gpu")
    with pytest.raises(
        TypeError, match=message("LocalBatcher: device must be a str, a torch.device or an int, got a float")
    ):
        counter_batcher(device=0.5)


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_device_is_refused_on_a_machine_without_it() -> None:
    with pytest.raises(
        ValueError, match=message("LocalBatcher: device 'cuda' cannot be used on this machine")
    ):
        counter_batcher(device="cuda")


# ---------------------------------------------------------------------------- stream mode


@pytest.mark.parametrize(("agent", "agent_args"), [(CountingAgent, {}), (RandomAgent, {"n_actions": 3})])
def test_stream_gets_are_the_rows_of_the_fixed_batches_group_by_group(agent: Any, agent_args: Any) -> None:
    z = DictTensor({"start": ints(0, 10, 20, 30)})
    w = DictTensor({"length": ints(2, 3, 4, 5)})  # episodes end within and across trajectories
    layout: dict[str, Any] = {"n_envs": 2, "n_timesteps": 3, "n_processes": 2, "seed": 7}
    with (
        counter_batcher(agent, agent_args, mode="stream", **layout) as stream,
        counter_batcher(agent, agent_args, **layout) as fixed,
    ):
        assert stream.n_elems() == 2 and fixed.n_elems() == 4
        stream.reset(z, w)
        fixed.reset(z, w)
        expected = []
        for k in range(3):
            expected.append(run_once(fixed))
            if k == 1:
                fixed.update({})
        for k in range(6):
            if k == 4:
                stream.update({})
            batch = stream.get()
            group, round_ = k % 2, k // 2
            root = derive_seed(7, "env") + 2 * group
            assert batch.trajectories["seed"][:, 0].tolist() == [root, root + 1]
            assert batch.equal(expected[round_][2 * group : 2 * group + 2])
        assert expected[2].info["policy_version"].tolist() == [1, 1, 1, 1]
        # the rounds continue each other: a stream that restarted its groups would not match
        assert not expected[1].trajectories["t"].equal(expected[0].trajectories["t"])


def test_stream_mode_has_no_execute_and_starts_from_group_0_at_every_reset() -> None:
    with counter_batcher(mode="stream", n_envs=2, n_processes=2, n_timesteps=4) as batcher:
        with pytest.raises(
            RuntimeError, match=message("LocalBatcher: execute() is not used in 'stream' mode; call get()")
        ):
            batcher.execute()
        with pytest.raises(RuntimeError, match=message("LocalBatcher: call reset() before get()")):
            batcher.get()
        with pytest.raises(
            ValueError,
            match=message("LocalBatcher.reset: agent_info must have 4 rows (n_processes * n_envs), got 2"),
        ):
            batcher.reset(DictTensor({"start": ints(1, 2)}))
        batcher.reset()
        seeds = [(batcher.get().trajectories["seed"][:, 0] - ENV_ROOT).tolist() for _ in range(3)]
        assert seeds == [[0, 1], [2, 3], [0, 1]]
        batcher.get()  # group 1's second trajectory: the next get would be group 0's
        batcher.reset()
        again = batcher.get()
        assert (again.trajectories["seed"][:, 0] - ENV_ROOT).tolist() == [0, 1]
        assert again.trajectories["t"][:, 0].tolist() == [0, 0]  # new episodes (length 5, T = 4)
        assert again.trajectories["initial_state"][:, 0].all()


@pytest.mark.parametrize("mode", ["fixed", "stream"])
def test_get_refuses_a_blocking_that_is_not_a_bool(mode: str) -> None:
    """blocking="no" was read by its truth (True), and None as False; a NumPy bool is a bool."""
    with counter_batcher(mode=mode) as batcher:
        batcher.reset()
        if mode == "fixed":
            batcher.execute()
        for blocking, got in (("no", "a str"), (None, "a NoneType"), (1, "an int")):
            with pytest.raises(
                TypeError, match=message(f"LocalBatcher.get: blocking must be a bool, got {got}")
            ):
                batcher.get(blocking=blocking)  # type: ignore[call-overload]
        assert batcher.get(blocking=np.bool_(False)).n_elems() == 2  # the refused calls took nothing


def test_max_staleness_is_for_stream_mode_only_and_discards_nothing_in_process() -> None:
    with counter_batcher(mode="stream") as stream:
        stream.reset()
        stream.update({})
        stream.update({})
        batch = stream.get(max_staleness=0)
        assert batch.info["policy_version"].tolist() == [2, 2]
        assert stream.discarded == 0
        with pytest.raises(
            ValueError, match=message("LocalBatcher.get: max_staleness must be None or an int >= 0, got -1")
        ):
            stream.get(max_staleness=-1)
        assert stream.get(max_staleness=np.int64(0)).n_elems() == 2  # a NumPy int is an int
    for mode in ("fixed", "episodes"):
        with counter_batcher(mode=mode) as batcher:
            batcher.reset()
            batcher.execute()
            with pytest.raises(
                ValueError, match=message("LocalBatcher.get: max_staleness is for mode='stream' only")
            ):
                batcher.get(max_staleness=1)
            assert batcher.get().n_elems() == 2  # the refused call did not take the batch


def test_a_stream_get_that_raised_needs_a_reset() -> None:
    with LocalBatcher(
        FailingAgent, {"fail_seed": 1}, CounterEnv, {}, n_envs=1, n_timesteps=2, n_processes=2, mode="stream"
    ) as batcher:
        batcher.reset()
        assert batcher.get().trajectories["seed"][:, 0].tolist() == [ENV_ROOT]
        with pytest.raises(ValueError, match=message("the agent seeded 1 divided by zero at call 0")):
            batcher.get()  # group 1, whose agent is seeded 1
        with pytest.raises(RuntimeError, match=message("LocalBatcher: call reset() before get()")):
            batcher.get()
        batcher.reset()
        assert batcher.get().trajectories["seed"][:, 0].tolist() == [ENV_ROOT]


def test_stream_mode_warns_about_initial_weights_at_the_first_get_where_the_agents_act() -> None:
    with LocalBatcher(RandomInitAgent, {}, CounterEnv, {}, n_envs=1, n_timesteps=2, mode="stream") as batcher:
        batcher.reset()  # nothing acted yet: no warning (warnings are errors in the tests)
        with pytest.warns(UserWarning, match="acts with the agent's own initial weights"):
            batcher.get()
        batcher.get()  # once only


# ---------------------------------------------------------------------------- z and w across resets


@pytest.mark.parametrize("mode", ["fixed", "stream"])
def test_a_reset_whose_agent_raised_fixes_nothing(mode: str) -> None:
    def acquire(batcher: LocalBatcher) -> Trajectories:
        if mode == "fixed":
            batcher.execute()
        return batcher.get()

    with counter_batcher(EpsilonAgent, n_envs=2, mode=mode) as batcher:
        batcher.reset(DictTensor({"epsilom": torch.zeros(2)}))  # misspelt: the agent reads "epsilon"
        with pytest.raises(KeyError, match=message("DictTensor has no key 'epsilon'")):
            acquire(batcher)
        # another dtype than the reset before, too: nothing was fixed while no batch was acquired
        batcher.reset(DictTensor({"epsilon": torch.tensor([0.25, 0.5], dtype=torch.float64)}))
        batcher.reset(DictTensor({"epsilon": torch.tensor([0.5, 0.75])}))
        batch = acquire(batcher)
        assert batch.trajectories["epsilon"][:, 0].tolist() == [0.5, 0.75]
        assert batch.info["agent_info/epsilon"].dtype == torch.float32


def test_later_resets_keep_the_dtypes_and_row_shapes_of_z_and_w() -> None:
    epsilon = torch.tensor([0.5, 0.75])
    with counter_batcher(EpsilonAgent, n_envs=2) as batcher:
        batcher.reset(DictTensor({"epsilon": epsilon}), DictTensor({"length": ints(3, 3)}))
        run_once(batcher)
        with pytest.raises(
            ValueError,
            match=message(
                "LocalBatcher.reset: agent_info key 'epsilon' must keep the dtype and row shape of the first "
                "reset, torch.float32 and (); got torch.float64 and () (nothing is cast)"
            ),
        ):
            batcher.reset(DictTensor({"epsilon": epsilon.double()}), DictTensor({"length": ints(3, 3)}))
        with pytest.raises(
            ValueError,
            match=message(
                "LocalBatcher.reset: agent_info key 'epsilon' must keep the dtype and row shape of the first "
                "reset, torch.float32 and (); got torch.float32 and (2,) (nothing is cast)"
            ),
        ):
            batcher.reset(DictTensor({"epsilon": torch.ones(2, 2)}), DictTensor({"length": ints(3, 3)}))
        with pytest.raises(
            ValueError,
            match=message(
                "LocalBatcher.reset: env_info key 'length' must keep the dtype and row shape of the first "
                "reset, torch.int64 and (); got torch.int32 and ()"
            ),
        ):
            batcher.reset(DictTensor({"epsilon": epsilon}), DictTensor({"length": ints(3, 3).int()}))
        # the refused resets changed nothing: the trajectories go on where they were
        assert run_once(batcher).trajectories["t"][:, 0].tolist() == [1, 1]


def test_an_error_of_initial_state_where_an_episode_starts_is_its_own() -> None:
    class NeedsStart(CountingAgent):
        def initial_state(self, agent_info: DictTensor, n: int) -> DictTensor:
            if self.calls_made:
                raise KeyError("agent_info needs 'start'")  # raised where an episode starts again
            self.calls_made = True
            return super().initial_state(agent_info, n)

        calls_made = False

    with counter_batcher(NeedsStart, {}, {"length": 2}, n_timesteps=4) as batcher:
        batcher.reset()
        with pytest.raises(KeyError, match="agent_info needs 'start'"):
            batcher.execute()


def test_numpy_ints_are_sizes_and_seeds_of_batchers_and_gym_envs() -> None:
    env = GymEnv("CartPole-v1", n_envs=np.int64(2), seed=np.int64(1))
    assert env.n_envs == 2 and type(env.n_envs) is int
    env.close()
    with counter_batcher(n_envs=np.int64(2), n_timesteps=np.int64(3), seed=np.int64(0)) as batcher:
        assert (batcher.n_envs, batcher.n_timesteps) == (2, 3)
        batcher.reset()
        batcher.execute()
        assert batcher.get().trajectories.n_timesteps() == 3
    assert TensorSpec((np.int64(3),), torch.float32).shape == (3,)


@pytest.mark.parametrize("name", ["agent_args", "env_args"])
def test_arguments_that_are_not_a_dict_are_named_by_both_batchers(name: str) -> None:
    for cls in (LocalBatcher, MultiprocessBatcher):
        args: list[Any] = [CountingAgent, {}, CounterEnv, {}]
        args[1 if name == "agent_args" else 3] = None
        with pytest.raises(
            TypeError,
            match=message(f"{cls.__name__}: {name} must be a dict of keyword arguments (str keys), got a"),
        ):
            cls(*args, n_envs=2, n_timesteps=3)
