"""The multitask answers of docs/agents.md and docs/batchers.md ("Multitask: z ... row by row"), pinned.

Each test checks one documented answer, for ``LocalBatcher`` and
``MultiprocessBatcher`` alike, with 2 groups (worker processes) of 3
environment instances: which rows of z and w a group sees, and in what order;
that the z handed to ``forward`` is a private copy that later resets do not
change; that a reset without z or w means an empty one, not the previous one;
how to see that w reached the environment; and that polling with
``get(blocking=False)`` works in "episodes" mode. A change in any of these
must change the pages too.
"""

from __future__ import annotations

import multiprocessing
import time
from typing import Any

import pytest
import torch
from mp_helpers import ENV_ROOT, ControlledEnv, EpsilonAgent

from rlstruct import Agent, DictTensor, GymEnv, LocalBatcher, MultiprocessBatcher, Trajectories
from rlstruct.seeding import derive_seed
from rlstruct.temporal import TemporalDictTensor
from rlstruct.testing import CounterEnv

SPAWN = multiprocessing.get_context("spawn")  # for the events handed to the workers' environments
AGENT_ROOT = derive_seed(0, "agent")
N_PROCESSES, N_ENVS = 2, 3
ROWS = N_PROCESSES * N_ENVS
ARGS: dict[str, Any] = {"n_envs": N_ENVS, "n_timesteps": 4, "n_processes": N_PROCESSES, "seed": 0}
BATCHERS = [LocalBatcher, MultiprocessBatcher]
DEADLINE_S = 30.0


class TaskEcho(Agent):
    """Acts 0 and outputs what it was handed: its z rows, its group, and facts about its z tensor.

    Outputs: ``task_seen`` (a clone of z's ``task``, -1 where z has none),
    ``z_keys`` (how many keys z has), ``group`` (from its seed), ``z_ptr``
    (the address of z's ``task`` storage), ``z_shared`` (whether it is in
    shared memory), ``first_task`` (the ``task`` of its first call, kept
    without a clone, read again now).
    """

    def __init__(self) -> None:
        super().__init__()
        self.first_task: torch.Tensor | None = None

    def forward(
        self,
        state: DictTensor,
        observation: DictTensor,
        agent_info: DictTensor,
        history: TemporalDictTensor | None = None,
    ) -> tuple[DictTensor, DictTensor]:
        n = observation.n_elems()
        has_task = "task" in agent_info
        task = agent_info["task"] if has_task else torch.full((n,), -1)
        if self.first_task is None and has_task:
            self.first_task = task  # no clone: the documented answer says it stays valid
        first = self.first_task if self.first_task is not None else torch.full((n,), -1)
        output = {
            "action": torch.zeros(n, dtype=torch.int64),
            "task_seen": task.clone(),
            "z_keys": torch.full((n,), len(list(agent_info.keys()))),
            "group": torch.full((n,), self.generator.initial_seed() - AGENT_ROOT),
            "z_ptr": torch.full((n,), task.untyped_storage().data_ptr()),
            "z_shared": torch.full((n,), task.is_shared()),
            "first_task": first.clone(),
        }
        return DictTensor(output), state


class LengthRequiredEnv(CounterEnv):
    """A CounterEnv that reads w's ``length`` at every reset, so a w without it raises KeyError."""

    def reset(self, env_info: DictTensor, auto_reset: bool = False) -> DictTensor:
        env_info["length"]
        return super().reset(env_info, auto_reset)


def z_of(*tasks: int) -> DictTensor:
    return DictTensor({"task": torch.tensor(tasks)})


def w_of(*lengths: int) -> DictTensor:
    return DictTensor({"length": torch.tensor(lengths)})


Z = z_of(0, 10, 20, 30, 40, 50)
W = w_of(1, 2, 3, 4, 5, 6)


def run_once(batcher: LocalBatcher | MultiprocessBatcher) -> Trajectories:
    batcher.execute()
    return batcher.get()


def poll(batcher: LocalBatcher | MultiprocessBatcher) -> Trajectories:
    deadline = time.monotonic() + DEADLINE_S
    while (batch := batcher.get(blocking=False)) is None:
        assert time.monotonic() < deadline, f"no batch within {DEADLINE_S:g} s"
        time.sleep(0.002)
    return batch


def column(values: list[int], steps: int) -> torch.Tensor:
    """``values`` repeated at every step: ``[ROWS, steps]``."""
    return torch.tensor(values).unsqueeze(1).expand(-1, steps)


# ---------------------------------------------------------------------------- (a) rows


@pytest.mark.parametrize("mode", ["fixed", "episodes"])
def test_group_g_sees_rows_g_times_n_envs_onwards_of_z_and_w_in_order(mode: str) -> None:
    batches = []
    for cls in BATCHERS:
        with cls(TaskEcho, {}, CounterEnv, {}, mode=mode, **ARGS) as batcher:
            batcher.reset(agent_info=Z, env_info=W)
            batch = run_once(batcher)
        steps, t = batch.trajectories, batch.trajectories.n_timesteps()
        mask = steps.mask()
        # the agent copy of group g acted for rows 3g..3g+2, and saw those rows of z, in order
        assert torch.equal(steps["group"][mask], column([0, 0, 0, 1, 1, 1], t)[mask])
        assert torch.equal(steps["task_seen"][mask], column(Z["task"].tolist(), t)[mask])
        # instance i of group g is row 3g+i: seeded derive_seed(seed, "env") + 3g + i, reset with row 3g+i of w
        assert torch.equal(steps["seed"][:, 0] - ENV_ROOT, torch.arange(ROWS))
        assert torch.equal(steps["length"][:, 0], W["length"])  # CounterEnv echoes w's length
        assert torch.equal(batch.info["agent_info/task"], Z["task"])
        assert torch.equal(batch.info["env_info/length"], W["length"])
        if mode == "episodes":
            assert steps.lengths.tolist() == [1, 2, 3, 4, 4, 4]  # w's lengths, cut at T = 4
        batches.append(batch)
    local, multiprocess = batches  # the same rows, but for z_ptr (an address in each process)
    for key in ("task_seen", "group", "first_task", "z_keys", "seed", "length", "t"):
        assert torch.equal(local.trajectories[key], multiprocess.trajectories[key]), key


# ---------------------------------------------------------------------------- (b) the z in forward


@pytest.mark.parametrize("cls", BATCHERS)
def test_the_z_in_forward_is_a_private_copy_that_later_resets_do_not_overwrite(cls: type) -> None:
    with cls(TaskEcho, {}, CounterEnv, {}, **ARGS) as batcher:
        batcher.reset(agent_info=Z, env_info=W)
        first = run_once(batcher).trajectories
        second = run_once(batcher).trajectories  # "fixed": the same episodes go on
        batcher.reset(agent_info=z_of(1, 2, 3, 4, 5, 6), env_info=W)
        third = run_once(batcher).trajectories
    # one tensor for every call of a group until the next reset, in ordinary memory
    for steps in (first, second):
        for rows in (slice(0, 3), slice(3, 6)):
            assert steps["z_ptr"][rows].unique().numel() == 1
    assert torch.equal(first["z_ptr"], second["z_ptr"])
    assert not first["z_shared"].any() and not third["z_shared"].any()
    # the new z reaches the agent; the z kept without a clone from the first call has not changed
    assert third["task_seen"][:, 0].tolist() == [1, 2, 3, 4, 5, 6]
    assert torch.equal(third["first_task"], column(Z["task"].tolist(), 4))


@pytest.mark.parametrize("cls", BATCHERS)
def test_in_episodes_mode_every_execute_makes_a_new_copy_and_a_kept_z_stays_as_it_was(cls: type) -> None:
    args = {**ARGS, "mode": "episodes", "n_timesteps": 1}
    with cls(TaskEcho, {}, CounterEnv, {}, **args) as batcher:
        batcher.reset(agent_info=Z, env_info=W)
        run_once(batcher)
        again = run_once(batcher).trajectories  # new episodes, with the same z
        batcher.reset(agent_info=z_of(1, 2, 3, 4, 5, 6), env_info=W)
        other = run_once(batcher).trajectories
    assert not again["z_shared"].any()
    assert again["task_seen"][:, 0].tolist() == Z["task"].tolist()
    assert other["task_seen"][:, 0].tolist() == [1, 2, 3, 4, 5, 6]
    assert other["first_task"][:, 0].tolist() == Z["task"].tolist()


class KeepsW(CounterEnv):
    """A CounterEnv that keeps the w of its reset without a copy, and shows it as ``kept`` at every step."""

    def reset(self, env_info: DictTensor, auto_reset: bool = False) -> DictTensor:
        self.kept, self.shared = env_info["length"], env_info["length"].is_shared()
        return super().reset(env_info, auto_reset)

    def _observation(self, reward: torch.Tensor, ended: torch.Tensor, initial: torch.Tensor) -> DictTensor:
        observation = super()._observation(reward, ended, initial)
        observation.set("kept", self.kept.clone())
        observation.set("shared", torch.full((self.n_envs,), self.shared))
        return observation


@pytest.mark.parametrize("cls", BATCHERS)
def test_the_w_of_an_environment_reset_is_a_private_copy_that_later_edits_do_not_reach(cls: type) -> None:
    with cls(TaskEcho, {}, KeepsW, {}, **ARGS) as batcher:
        w = w_of(1, 2, 3, 4, 5, 6)
        batcher.reset(agent_info=Z, env_info=w)
        run_once(batcher)
        w["length"][:] = 9  # after the reset: changes nothing
        steps = run_once(batcher).trajectories
    assert steps["kept"][:, -1].tolist() == [1, 2, 3, 4, 5, 6]
    assert not steps["shared"].any()  # the group's copy, not the shared-memory tensor a worker received


# ---------------------------------------------------------------------------- (c) reset without z or w


@pytest.mark.parametrize("cls", BATCHERS)
def test_a_reset_that_leaves_z_or_w_out_after_a_batch_raises_and_changes_nothing(cls: type) -> None:
    name = cls.__name__
    with cls(TaskEcho, {}, CounterEnv, {}, **ARGS) as batcher:
        batcher.reset(agent_info=Z, env_info=W)
        run_once(batcher)
        expected = {
            "z": (W, None, r"got \[\] and \['length'\]"),
            "w": (None, Z, r"got \['task'\] and \[\]"),
        }
        for env_info, agent_info, got in expected.values():
            with pytest.raises(
                ValueError,
                match=rf"{name}\.reset: agent_info and env_info must keep "
                rf"the keys of the first reset, \['task'\] and \['length'\]; {got}",
            ):
                batcher.reset(agent_info=agent_info, env_info=env_info)
        # nothing changed: the previous episodes go on with the previous z
        batch = run_once(batcher)
    assert torch.equal(batch.info["agent_info/task"], Z["task"])
    assert batch.trajectories["task_seen"][:, 0].tolist() == Z["task"].tolist()
    assert batch.trajectories["t"][:, 0].tolist() != [0] * ROWS  # not restarted


@pytest.mark.parametrize("cls", BATCHERS)
def test_before_the_first_batch_a_left_out_z_is_an_empty_one(cls: type) -> None:
    with cls(TaskEcho, {}, CounterEnv, {}, **ARGS) as batcher:
        batcher.reset(agent_info=Z, env_info=W)
        batcher.reset(env_info=W)  # no batch taken yet: accepted, with an empty z
        steps = run_once(batcher).trajectories
    assert steps["z_keys"].unique().tolist() == [0]
    assert steps["task_seen"].unique().tolist() == [-1]


def test_before_the_first_batch_a_missing_key_raises_key_error_where_it_is_read() -> None:
    # LocalBatcher: a missing w at the reset, a missing z at execute()
    with LocalBatcher(EpsilonAgent, {}, LengthRequiredEnv, {}, **ARGS) as batcher:
        with pytest.raises(KeyError, match="length"):
            batcher.reset(agent_info=DictTensor({"epsilon": torch.zeros(ROWS)}))
        batcher.reset(env_info=W)
        with pytest.raises(KeyError, match="epsilon"):
            batcher.execute()
    # MultiprocessBatcher: both at the reset, in the probe step of the main process
    with MultiprocessBatcher(EpsilonAgent, {}, LengthRequiredEnv, {}, **ARGS) as batcher:
        with pytest.raises(KeyError, match="length"):
            batcher.reset(agent_info=DictTensor({"epsilon": torch.zeros(ROWS)}))
        with pytest.raises(KeyError, match="epsilon"):
            batcher.reset(env_info=W)
        batcher.reset(agent_info=DictTensor({"epsilon": torch.zeros(ROWS)}), env_info=W)
        assert run_once(batcher).info["env_info/length"].tolist() == W["length"].tolist()


# ---------------------------------------------------------------------------- (d) did w arrive


def test_gym_env_makes_each_instance_with_its_row_of_w() -> None:
    w = DictTensor({"sutton_barto_reward": torch.tensor([False, True]).repeat(3)})
    args = {**ARGS, "n_timesteps": 500, "mode": "episodes"}
    with LocalBatcher(TaskEcho, {}, GymEnv, {"env": "CartPole-v1"}, **args) as batcher:
        batcher.reset(agent_info=Z, env_info=w)
        batch = run_once(batcher)
    with (
        LocalBatcher(TaskEcho, {}, GymEnv, {"env": "CartPole-v1"}, **args) as batcher,
        pytest.raises(TypeError, match="gravity"),  # a key the environment does not take
    ):
        batcher.reset(agent_info=Z, env_info=DictTensor({"gravity": torch.ones(ROWS)}))
    steps = batch.trajectories
    returns = (steps["next/reward"] * steps.mask()).sum(1)
    assert torch.equal(batch.info["env_info/sutton_barto_reward"], w["sutton_barto_reward"])
    # always pushing left, the pole falls: 1 per step, or 0 per step and -1 at the fall
    assert returns[1::2].tolist() == [-1.0] * 3
    assert torch.equal(returns[0::2], steps.lengths[0::2].float())


# ---------------------------------------------------------------------------- (e) polling in "episodes" mode


def test_get_without_blocking_works_in_episodes_mode() -> None:
    gate = SPAWN.Event()
    args = {**ARGS, "mode": "episodes"}
    # worker 1's environments stop at their second step until the gate opens
    env_args = {"gate": gate, "gate_seed": N_ENVS}
    with (
        MultiprocessBatcher(TaskEcho, {}, ControlledEnv, env_args, **args) as batcher,
        LocalBatcher(TaskEcho, {}, CounterEnv, {}, **args) as local,
    ):
        batcher.reset(agent_info=Z, env_info=W)
        local.reset(agent_info=Z, env_info=W)
        for _ in range(2):  # every execute() starts new episodes; both are polled
            gate.clear()
            batcher.execute()
            assert batcher.get(blocking=False) is None
            assert batcher.get(blocking=False) is None
            gate.set()
            got = poll(batcher)
            local.execute()
            expected = local.get(blocking=False)  # in process: the batch is there at once
            assert expected is not None
            assert got.trajectories.lengths.tolist() == [1, 2, 3, 4, 4, 4]
            for key in ("task_seen", "group", "t", "length", "next/reward"):
                assert torch.equal(got.trajectories[key], expected.trajectories[key]), key


def test_in_episodes_mode_both_batchers_work_from_the_z_copied_at_reset() -> None:
    """Editing z in place after a reset changes nothing that follows, in either batcher."""
    args = {**ARGS, "mode": "episodes", "n_timesteps": 1}
    seen = {}
    for cls in BATCHERS:
        with cls(TaskEcho, {}, CounterEnv, {}, **args) as batcher:
            z = z_of(0, 10, 20, 30, 40, 50)
            batcher.reset(agent_info=z, env_info=W)
            run_once(batcher)
            z["task"][:] = 7
            seen[cls.__name__] = run_once(batcher).trajectories["task_seen"][:, 0].tolist()
    assert seen == {"LocalBatcher": [0, 10, 20, 30, 40, 50], "MultiprocessBatcher": [0, 10, 20, 30, 40, 50]}
