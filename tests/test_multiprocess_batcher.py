"""Tests of rlstruct.batchers.MultiprocessBatcher: LocalBatcher's trajectories, and workers that fail loudly.

The reference is ``LocalBatcher``: for the same seeds and layout (``n_processes``
groups of ``n_envs``), both must give bit-identical ``Trajectories``, batch after
batch, as gymnasium checks its async vector env against the sync one.

Every worker is a fresh interpreter that imports torch, a few seconds on a
small machine, so each test builds as few batchers as it can and checks
several things on each. The agents and environments the workers make live in
``mp_helpers`` (its docstring says why). Tests wait for a worker by polling
with a deadline (``wait_until``), never by sleeping a guessed time; the
environments that must block wait on events that the test sets. The only
sleeps are an idle period that the workers must survive (forkserver) and a
bounded look at a board that must not change (back-pressure).
"""

from __future__ import annotations

import contextlib
import gc
import math
import multiprocessing
import os
import re
import signal
import subprocess
import sys
import time
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from mp_helpers import (
    ENV_ROOT,
    ControlledEnv,
    FailingAgent,
    FailingEnv,
    LinearAgent,
    assert_nothing_left_in_shm,
    shm_entries,
)

from rlstruct import (
    DictTensor,
    GymEnv,
    LocalBatcher,
    MultiprocessBatcher,
    Trajectories,
    WorkerError,
    WorkerTimeout,
    derive_seed,
)
from rlstruct.batchers._slots import READY
from rlstruct.batchers._worker import IDLE_POLL_S
from rlstruct.errors import AgentError
from rlstruct.testing import CounterEnv, CountingAgent, RandomAgent

SPAWN = multiprocessing.get_context("spawn")  # for the events handed to the workers' environments
DEADLINE_S = 30.0  # how long a test waits for something that normally takes milliseconds


def message(text: str) -> str:
    """A `match` pattern for an exact substring of an error message."""
    return re.escape(text)


def ints(*values: int) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int64)


def wait_until(condition: Callable[[], bool], what: str, timeout: float = DEADLINE_S) -> None:
    """Poll ``condition`` until it holds; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout:g} s for {what}")
        time.sleep(0.005)


def run_once(batcher: LocalBatcher | MultiprocessBatcher) -> Trajectories:
    batcher.execute()
    batch = batcher.get()
    assert batch is not None
    return batch


def poll(batcher: MultiprocessBatcher) -> Trajectories:
    """``get(blocking=False)`` until the batch is there (within ``DEADLINE_S``)."""
    deadline = time.monotonic() + DEADLINE_S
    while (batch := batcher.get(blocking=False)) is None:
        assert time.monotonic() < deadline, f"no batch within {DEADLINE_S:g} s"
        time.sleep(0.005)
    return batch


def assert_same(got: Trajectories, expected: Trajectories) -> None:
    """Bitwise equality, key by key first so that a failure names the key."""
    assert sorted(got.info.keys()) == sorted(expected.info.keys())
    assert sorted(got.trajectories.keys()) == sorted(expected.trajectories.keys())
    for key, value in expected.info.items():
        assert got.info[key].dtype == value.dtype and torch.equal(got.info[key], value), f"info {key}"
    for key, value in expected.trajectories.items():
        assert got.trajectories[key].dtype == value.dtype, key
        assert torch.equal(got.trajectories[key], value), f"trajectories {key}"
    assert torch.equal(got.lengths, expected.lengths)
    assert got.equal(expected)


def without(batch: Trajectories, keys: tuple[str, ...]) -> Trajectories:
    """The batch without these trajectory keys."""
    return Trajectories(batch.info, batch.trajectories.get([k for k in batch.trajectories if k not in keys]))


def gone(pid: int) -> bool:
    """Whether process ``pid`` has ended: no /proc entry, or a zombie left for its parent to reap."""
    try:
        with open(f"/proc/{pid}/status") as status:
            return any(line.split()[1] == "Z" for line in status if line.startswith("State:"))
    except FileNotFoundError:
        return True


def process_group(pgid: int) -> list[int]:
    """The live (not zombie) processes of process group ``pgid``."""
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    state, _, group = stat.read().rsplit(")", 1)[1].split()[:3]
            except (OSError, ValueError):
                continue  # gone meanwhile
            if int(group) == pgid and state != "Z":
                members.append(int(entry))
    return members


def assert_shut_down(batcher: MultiprocessBatcher, shm_before: set[str]) -> None:
    """The batcher is closed: every call raises, its workers are reaped, and /dev/shm holds nothing new."""
    calls: list[tuple[str, Callable[[], Any]]] = [
        ("reset", batcher.reset),
        ("execute", batcher.execute),
        ("get", batcher.get),
        ("update", lambda: batcher.update({})),
    ]
    for name, call in calls:
        with pytest.raises(RuntimeError, match=message(f"MultiprocessBatcher: {name}() after close()")):
            call()
    batcher.close()  # closing again is fine
    pids = [process.pid for process in batcher._processes]
    assert len(pids) == batcher.n_processes
    assert all(process.exitcode is not None for process in batcher._processes)
    assert not [child for child in multiprocessing.active_children() if child.pid in pids]
    assert not [pid for pid in pids if os.path.exists(f"/proc/{pid}")]  # joined, so reaped
    assert_nothing_left_in_shm(shm_before)


def counter_batchers(
    mode: str, n_processes: int, n_envs: int, n_timesteps: int, seed: int, **kwargs: Any
) -> tuple[MultiprocessBatcher, LocalBatcher]:
    layout: dict[str, Any] = {"n_envs": n_envs, "n_timesteps": n_timesteps, "mode": mode, "seed": seed}
    return (
        MultiprocessBatcher(
            CountingAgent, {}, CounterEnv, {"length": 3}, n_processes=n_processes, **layout, **kwargs
        ),
        LocalBatcher(CountingAgent, {}, CounterEnv, {"length": 3}, n_processes=n_processes, **layout),
    )


# ---------------------------------------------------------------------------- same data as LocalBatcher


def test_fixed_mode_gives_local_batcher_trajectories_and_batches_that_stay_valid() -> None:
    z = DictTensor({"start": ints(0, 10, 20, 30), "epsilon": torch.tensor([0.1, 0.2, 0.3, 0.4])})
    w = DictTensor({"length": ints(2, 3, 5, 7)})
    batcher, local = counter_batchers("fixed", n_processes=2, n_envs=2, n_timesteps=4, seed=5)
    with batcher, local:
        assert batcher.n_elems() == local.n_elems() == 4
        with pytest.raises(RuntimeError, match=message("MultiprocessBatcher: call reset() before execute()")):
            batcher.execute()
        batcher.reset(z, w)
        local.reset(z, w)
        with pytest.raises(
            RuntimeError,
            match=message("MultiprocessBatcher: get() without a pending execute(); call execute() first"),
        ):
            batcher.get()
        kept: list[tuple[Trajectories, Trajectories]] = []
        for _ in range(3):
            batch = run_once(batcher)
            assert_same(batch, run_once(local))
            assert not batch.trajectories.is_shared() and not batch.info.is_shared()
            kept.append((batch, batch.clone()))
        # the state carried over: the calls continue the episodes and the counts (not vacuous)
        assert kept[1][0].trajectories["t"][:, 0].tolist() == [0, 1, 4, 4]
        assert kept[1][0].info["agent_state/count"].tolist() == [2, 11, 24, 34]
        root = derive_seed(5, "env")
        assert kept[0][0].trajectories["seed"][:, 0].tolist() == [root, root + 1, root + 2, root + 3]
        # a reset with other infos, then more batches
        z2 = DictTensor({"start": ints(100, 200, 300, 400), "epsilon": torch.zeros(4)})
        batcher.reset(z2, w)
        local.reset(z2, w)
        for _ in range(2):
            batch = run_once(batcher)
            assert_same(batch, run_once(local))
            kept.append((batch, batch.clone()))
        # every batch returned is the caller's: later execute() and get() calls left them alone
        for batch, copy in kept:
            assert batch.equal(copy)

        batcher.execute()
        with pytest.raises(
            RuntimeError,
            match=message("MultiprocessBatcher: execute() called twice; take the first batch with get()"),
        ):
            batcher.execute()
        with pytest.raises(
            ValueError, match=message("MultiprocessBatcher.get: max_staleness is for mode='stream' only")
        ):
            batcher.get(max_staleness=1)
        assert_same(batcher.get(), run_once(local))
        with pytest.raises(
            ValueError,
            match=message(
                "MultiprocessBatcher.reset: agent_info must have 4 rows (n_processes * n_envs), got 2"
            ),
        ):
            batcher.reset(DictTensor({"start": ints(1, 2)}))
        with pytest.raises(
            ValueError,
            match=message(
                "MultiprocessBatcher.reset: agent_info and env_info must keep the keys of the first reset, "
                "['epsilon', 'start'] and ['length']; got [] and ['length']"
            ),
        ):
            batcher.reset(None, w)
        with pytest.raises(
            ValueError,
            match=message(
                "MultiprocessBatcher.update: weights lack the keys [] and have unexpected keys ['w']"
            ),
        ):
            batcher.update({"w": torch.zeros(1)})
        # a reset while a batch is pending drops it, as LocalBatcher does
        batcher.execute()
        local.execute()
        batcher.reset(z, w)
        local.reset(z, w)
        with pytest.raises(RuntimeError, match=message("get() without a pending execute()")):
            batcher.get()
        assert_same(run_once(batcher), run_once(local))


def test_episodes_mode_gives_local_batcher_trajectories_with_padding_where_groups_stop_early() -> None:
    z = DictTensor({"start": ints(1, 2, 3, 4, 5, 6)})
    # worker 0's episodes all end by step 3, worker 1's run to T = 5: different stopping points
    w = DictTensor({"length": ints(1, 2, 3, 2, 6, 4)})
    batcher, local = counter_batchers("episodes", n_processes=2, n_envs=3, n_timesteps=5, seed=0)
    with batcher, local:
        batcher.reset(z, w)
        local.reset(z, w)
        for episode in range(3):
            batch = run_once(batcher)
            assert_same(batch, run_once(local))
            assert batch.lengths.tolist() == [1, 2, 3, 2, 5, 4]
            assert batch.trajectories["episode"][:, 0].tolist() == [episode] * 6
            assert not batch.trajectories["t"][:3, 3:].any()  # zeros past the ends, from the shared buffer


@pytest.mark.parametrize("start_method", ["spawn", "fork"])
@pytest.mark.parametrize(("mode", "n_timesteps"), [("fixed", 16), ("episodes", 40)])
def test_cartpole_with_a_random_agent_gives_local_batcher_trajectories(
    mode: str, n_timesteps: int, start_method: str
) -> None:
    args: dict[str, Any] = {
        "n_envs": 2,
        "n_timesteps": n_timesteps,
        "mode": mode,
        "seed": 11,
        "n_processes": 2,
    }
    batcher = MultiprocessBatcher(
        RandomAgent, {"n_actions": 2}, GymEnv, {"env": "CartPole-v1"}, start_method=start_method, **args
    )
    assert batcher.start_method == start_method
    local = LocalBatcher(RandomAgent, {"n_actions": 2}, GymEnv, {"env": "CartPole-v1"}, **args)
    with batcher, local:
        batcher.reset()
        local.reset()
        batches = []
        for _ in range(3):
            batches.append(run_once(batcher))
            assert_same(batches[-1], run_once(local))
    observations = batches[0].trajectories["observation"]
    assert observations.dtype == torch.float32 and observations.shape == (4, n_timesteps, 4)
    assert not batches[0].trajectories["action"].equal(batches[1].trajectories["action"])
    if mode == "episodes":  # random CartPole episodes of different lengths, all starting anew each call
        assert len(set(torch.cat([b.lengths for b in batches]).tolist())) > 1
        assert all(b.trajectories["initial_state"][:, 0].all() for b in batches)


def test_update_reaches_every_worker_and_matches_local_batcher_after_each_update() -> None:
    args: dict[str, Any] = {"n_envs": 2, "n_timesteps": 8, "seed": 3, "n_processes": 2}
    batcher = MultiprocessBatcher(LinearAgent, {}, GymEnv, {"env": "CartPole-v1"}, **args)
    local = LocalBatcher(LinearAgent, {}, GymEnv, {"env": "CartPole-v1"}, **args)
    initial = LinearAgent().state_dict()
    pushes_right = {"linear.weight": torch.zeros(2, 4), "linear.bias": torch.tensor([-20.0, 20.0])}
    mirrored = {"linear.weight": -initial["linear.weight"], "linear.bias": torch.tensor([0.3, 0.0])}
    with batcher, local:
        batcher.reset()
        local.reset()
        with pytest.warns(UserWarning, match="acts with the agent's own initial weights") as record:
            assert_same(run_once(batcher), run_once(local))  # version 0: the factory's weights, on purpose
        assert len(record) == 2  # one per batcher
        for version, weights in enumerate([pushes_right, mirrored], start=1):
            batcher.update(weights)
            local.update(weights)
            assert batcher.policy_version() == version
            for _ in range(2):
                batch = run_once(batcher)
                assert_same(batch, run_once(local))
                assert batch.info["policy_version"].tolist() == [version] * 4
                logits = torch.nn.functional.linear(
                    batch.trajectories["observation"], weights["linear.weight"], weights["linear.bias"]
                )
                assert torch.allclose(
                    batch.trajectories["logits"], logits
                )  # both workers use the new weights
            if version == 1:
                assert batch.trajectories["action"].eq(1).all()

        # weights that do not fit are refused whole: nothing cast, nothing copied, no new version
        refused: list[tuple[Any, type[Exception], str]] = [
            (
                {**mirrored, "linear.weight": mirrored["linear.weight"].double()},
                ValueError,
                "MultiprocessBatcher.update: weight 'linear.weight' has dtype torch.float64 and shape (2, 4), "
                "expected torch.float32 and (2, 4)",
            ),
            (
                {**mirrored, "linear.bias": torch.zeros(3)},
                ValueError,
                "MultiprocessBatcher.update: weight 'linear.bias' has dtype torch.float32 and shape (3,), "
                "expected torch.float32 and (2,)",
            ),
            (
                {"linear.weight": pushes_right["linear.weight"]},
                ValueError,
                "MultiprocessBatcher.update: weights lack the keys ['linear.bias'] and have unexpected keys []",
            ),
            (
                {**pushes_right, "linear.scale": torch.ones(2)},
                ValueError,
                "weights lack the keys [] and have unexpected keys ['linear.scale']",
            ),
            (
                {**pushes_right, "linear.bias": [-20.0, 20.0]},
                TypeError,
                "MultiprocessBatcher.update: weight 'linear.bias' must be a tensor, got a list",
            ),
            (
                [pushes_right],
                TypeError,
                "MultiprocessBatcher.update: weights must be a state_dict (a mapping of tensors), got a list",
            ),
        ]
        for weights, error, text in refused:
            with pytest.raises(error, match=message(text)):
                batcher.update(weights)
        assert batcher.policy_version() == 2
        assert all(torch.equal(batcher._weights.tensors[k], v) for k, v in mirrored.items())
        batch = run_once(batcher)
        assert_same(batch, run_once(local))
        assert batch.info["policy_version"].tolist() == [2] * 4


# ---------------------------------------------------------------------------- non-blocking acquisition


def test_execute_returns_at_once_and_get_without_blocking_waits_for_the_slowest_worker() -> None:
    gate = SPAWN.Event()
    shm_before = shm_entries()
    args: dict[str, Any] = {"n_envs": 2, "n_timesteps": 3, "seed": 0, "n_processes": 2}
    # worker 1's environments stop at their second step until the gate opens
    batcher = MultiprocessBatcher(CountingAgent, {}, ControlledEnv, {"gate": gate, "gate_seed": 2}, **args)
    local = LocalBatcher(CountingAgent, {}, CounterEnv, {}, **args)
    with batcher, local:
        batcher.reset()
        local.reset()
        # execute() returned with worker 1 held at the gate: it does not wait for the batch
        batcher.execute()
        for _ in range(3):
            assert batcher.get(blocking=False) is None
        gate.set()
        assert_same(poll(batcher), run_once(local))

        # a worker killed while it runs: get() reports it by index and environments, and closes
        gate.clear()
        batcher.execute()
        assert batcher.get(blocking=False) is None
        held = batcher._processes[1]
        os.kill(held.pid, signal.SIGKILL)
        wait_until(lambda: not held.is_alive(), "worker 1 to die")
        with pytest.raises(WorkerError, match=message("worker 1 (envs 2-3): died (exit code -9)")) as caught:
            batcher.get()
        assert caught.value.worker == 1 and caught.value.envs == range(2, 4)
        assert caught.value.worker_traceback == ""
        assert_shut_down(batcher, shm_before)


# ---------------------------------------------------------------------------- streaming


def test_stream_mode_fills_every_slot_then_waits_and_serves_each_worker_in_order() -> None:
    gate, fail = SPAWN.Event(), SPAWN.Event()
    gate.set()
    shm_before = shm_entries()
    z = DictTensor({"start": ints(0, 10, 20, 30)})
    w = DictTensor({"length": ints(2, 3, 4, 5)})
    args: dict[str, Any] = {"n_envs": 2, "n_timesteps": 3, "seed": 0, "n_processes": 2}
    batcher = MultiprocessBatcher(
        CountingAgent,
        {},
        ControlledEnv,
        {"gate": gate, "gate_seed": 0, "fail": fail, "fail_seed": 2},  # both for the end of the test
        mode="stream",
        n_slots=3,
        **args,
    )
    local = LocalBatcher(CountingAgent, {}, CounterEnv, {}, **args)

    def n_ready() -> int:
        assert batcher._board is not None
        return int((batcher._board.status == READY).sum())

    def n_published() -> int:
        assert batcher._board is not None
        return int(batcher._board.counter[0])

    def take_and_compare(
        expected: list[Trajectories], n: int, ignore: tuple[str, ...] = ()
    ) -> list[Trajectories]:
        """Take n batches; the k-th batch of worker w must be rows w of the k-th local batch (but ``ignore``)."""
        taken = [0, 0]
        batches = []
        for _ in range(n):
            batch = batcher.get()
            assert batch is not None and batch.n_elems() == 2
            seeds = batch.trajectories["seed"][:, 0] - ENV_ROOT
            worker = int(seeds[0]) // 2
            assert seeds.tolist() == [2 * worker, 2 * worker + 1]
            assert_same(
                without(batch, ignore), without(expected[taken[worker]][2 * worker : 2 * worker + 2], ignore)
            )
            taken[worker] += 1
            batches.append(batch)
        return batches

    with batcher, local:
        assert batcher.n_elems() == 2
        with pytest.raises(
            RuntimeError,
            match=message("MultiprocessBatcher: execute() is not used in 'stream' mode; call get()"),
        ):
            batcher.execute()
        with pytest.raises(RuntimeError, match=message("MultiprocessBatcher: call reset() before get()")):
            batcher.get()
        published = n_published()
        batcher.reset(z, w)

        # back-pressure: the workers fill the 3 slots, then wait for the learner
        wait_until(lambda: n_ready() == 3, "every slot to be filled")
        full = n_published()
        assert full - published == 3  # one trajectory per slot, none overwritten
        watch_until = time.monotonic() + 4 * IDLE_POLL_S  # a bounded look: nothing more is produced
        while time.monotonic() < watch_until:
            assert n_published() == full and n_ready() == 3
            time.sleep(0.01)

        # the batches continue each worker's trajectories, as LocalBatcher's groups do
        local.reset(z, w)
        expected = [run_once(local) for _ in range(6)]
        kept = [(batch, batch.clone()) for batch in take_and_compare(expected, 6)]
        for batch, copy in kept:  # their slots were filled again since: the batches are copies
            assert batch.equal(copy)

        # policy versions: slots filled before two updates are 2 versions old
        wait_until(lambda: n_ready() == 3, "every slot to be filled again")
        batcher.update({})
        batcher.update({})
        assert batcher.policy_version() == 2
        assert batcher.get().info["policy_version"].tolist() == [0, 0]
        assert batcher.discarded == 0
        fresh = batcher.get(max_staleness=1)  # skips the 2 other old slots, waits for a refilled one
        assert fresh is not None and fresh.info["policy_version"].tolist() == [2, 2]
        assert batcher.discarded == 2

        # a reset while the workers stream: new episodes with the new z, nothing left from before
        z2 = DictTensor({"start": ints(100, 200, 300, 400)})
        batcher.reset(z2, w)
        local.reset(z2, w)
        local.update({})
        local.update({})
        expected = [run_once(local) for _ in range(4)]
        # CounterEnv counts episodes since its creation, and the workers ran an unknown number of
        # trajectories into slots that the reset discarded: that count alone differs
        for batch in take_and_compare(expected, 4, ignore=("episode", "next/episode")):
            assert batch.info["policy_version"].tolist() == [2, 2]

        # a worker that raises while streaming is reported at the next get(), though the other
        # worker keeps filling slots that get() could return: after this reset, worker 0 holds a
        # slot at the gate (or it could fill all three before worker 1 claims one), worker 1 claims
        # another and raises at its first step; then worker 0 fills the two it can
        wait_until(lambda: n_ready() == 3, "every slot to be filled: no worker is stepping")
        gate.clear()
        fail.set()
        batcher.reset(z, w)
        wait_until(lambda: batcher._conns[1].poll(0), "worker 1 to report its error")
        gate.set()
        wait_until(lambda: n_ready() == 2, "worker 0 to fill the 2 slots that worker 1 does not hold")
        with pytest.raises(WorkerError, match=message("worker 1 (envs 2-3): raised an exception")) as caught:
            batcher.get()
        assert "RuntimeError: the simulator of seed 2 crashed on request" in caught.value.worker_traceback
        del caught  # its traceback holds the frames of get(), and they the slot board
    assert_shut_down(batcher, shm_before)


# ---------------------------------------------------------------------------- failures


def test_an_agent_raising_in_a_worker_is_reported_with_its_traceback_and_closes() -> None:
    shm_before = shm_entries()
    # worker 1's agent (seeded 1) raises at its 5th call: during the second batch
    batcher = MultiprocessBatcher(
        FailingAgent, {"fail_seed": 1, "fail_at": 4}, CounterEnv, {}, n_envs=2, n_timesteps=3, n_processes=2
    )
    batcher.reset()
    run_once(batcher)
    batcher.execute()
    with pytest.raises(WorkerError, match=message("worker 1 (envs 2-3): raised an exception")) as caught:
        batcher.get()
    error = caught.value
    assert error.worker == 1 and error.envs == range(2, 4)
    assert "ValueError: the agent seeded 1 divided by zero at call 4" in error.worker_traceback
    assert "mp_helpers.py" in error.worker_traceback  # where it was raised, in the worker
    assert "Traceback in worker 1:\n" + error.worker_traceback in str(error)
    assert not isinstance(error, WorkerTimeout)
    assert_shut_down(batcher, shm_before)


def test_an_environment_raising_at_reset_in_a_worker_is_reported_and_closes() -> None:
    shm_before = shm_entries()
    with MultiprocessBatcher(
        CountingAgent, {}, FailingEnv, {"fail_seed": 2}, n_envs=2, n_timesteps=3, n_processes=2
    ) as batcher:
        with pytest.raises(WorkerError, match=message("worker 1 (envs 2-3): raised an exception")) as caught:
            batcher.reset()
        assert "OSError: cannot open the level file of seed 2" in caught.value.worker_traceback
        assert "in reset" in caught.value.worker_traceback
    assert_shut_down(batcher, shm_before)


def test_a_hung_worker_raises_worker_timeout_after_the_timeout() -> None:
    never = SPAWN.Event()
    shm_before = shm_entries()
    batcher = MultiprocessBatcher(
        CountingAgent,
        {},
        ControlledEnv,
        {"gate": never, "gate_seed": 2},  # worker 1 blocks forever at its second step
        n_envs=2,
        n_timesteps=3,
        n_processes=2,
        timeout=2.0,  # shorter than starting a worker takes: start-up has its own bound, start_timeout
    )
    timeout = batcher.timeout
    batcher.reset()
    batcher.execute()
    start = time.monotonic()
    with pytest.raises(
        WorkerTimeout, match=message("worker 1 (envs 2-3): no answer within 2 s (hung or too slow)")
    ) as caught:
        batcher.get()
    elapsed = time.monotonic() - start
    assert isinstance(caught.value, WorkerError) and isinstance(caught.value, TimeoutError)
    # the timeout, plus closing the batcher: the hung worker is not waited for again (the margin
    # allows for a loaded machine, where closing took up to 5 s at a load average of 11 on 2 cores)
    assert timeout <= elapsed < timeout + 10.0
    assert_shut_down(batcher, shm_before)


def test_forkserver_workers_stay_up_while_idle_and_a_killed_idle_worker_is_reported() -> None:
    shm_before = shm_entries()
    z = DictTensor({"start": ints(0, 10, 20, 30)})
    batcher, local = counter_batchers(
        "fixed", n_processes=2, n_envs=2, n_timesteps=3, seed=0, start_method="forkserver"
    )
    with batcher, local:
        batcher.reset(z)
        local.reset(z)
        # idle through several of the workers' parent checks: the parent of a forkserver
        # worker is the fork server, which must not be taken for a dead main process
        time.sleep(3 * IDLE_POLL_S)
        assert_same(run_once(batcher), run_once(local))
        time.sleep(3 * IDLE_POLL_S)
        assert_same(run_once(batcher), run_once(local))

        idle = batcher._processes[1]
        os.kill(idle.pid, signal.SIGKILL)
        wait_until(lambda: not idle.is_alive(), "worker 1 to die")
        with pytest.raises(WorkerError, match=message("worker 1 (envs 2-3): died (exit code -9)")):
            batcher.execute()
            batcher.get()
    assert_shut_down(batcher, shm_before)


# ---------------------------------------------------------------------------- the main process goes away

PARENT_SCRIPT = """
import sys, time
from rlstruct import MultiprocessBatcher
from rlstruct.testing import CounterEnv, CountingAgent

if __name__ == "__main__":
    batcher = MultiprocessBatcher(
        CountingAgent, {}, CounterEnv, {}, n_envs=2, n_timesteps=4, n_processes=2, mode=sys.argv[1]
    )
    batcher.reset()
    if sys.argv[1] == "fixed":
        batcher.execute()
        batcher.get()
    print(*(process.pid for process in batcher._processes), flush=True)
    time.sleep(600)
"""

CTRL_C_SCRIPT = """
import signal
from rlstruct import MultiprocessBatcher
from rlstruct.testing import CounterEnv, CountingAgent

if __name__ == "__main__":
    # Python's own handler, as in a terminal: a process started where SIGINT is ignored
    # (a background job of a non-interactive shell) would otherwise inherit SIG_IGN
    signal.signal(signal.SIGINT, signal.default_int_handler)
    batcher = MultiprocessBatcher(CountingAgent, {}, CounterEnv, {}, n_envs=2, n_timesteps=20, n_processes=2)
    try:
        with batcher:
            batcher.reset()
            batcher.execute()
            batcher.get()
            print(*(process.pid for process in batcher._processes), flush=True)
            while True:
                batcher.execute()
                batcher.get()
    except KeyboardInterrupt:
        print("exit codes", *(process.exitcode for process in batcher._processes), flush=True)
        raise
"""


@contextlib.contextmanager
def running_script(
    tmp_path: Path, text: str, *args: str
) -> Iterator[tuple[subprocess.Popen[str], list[int]]]:
    """Run ``text`` as a script in its own process group; give it and the worker pids it prints.

    Whatever happens in the test, the script's process group is killed at the end.
    """
    script = tmp_path / "script.py"
    script.write_text(text)
    process = subprocess.Popen(
        [sys.executable, str(script), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        if not line:
            raise AssertionError(f"the script printed no worker pids:\n{process.communicate()[1]}")
        yield process, [int(pid) for pid in line.split()]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.communicate()


@pytest.mark.parametrize("mode", ["fixed", "stream"])
def test_workers_exit_when_the_main_process_is_killed(tmp_path: Path, mode: str) -> None:
    shm_before = shm_entries()
    with running_script(tmp_path, PARENT_SCRIPT, mode) as (parent, pids):
        assert len(pids) == 2 and not any(gone(pid) for pid in pids)
        os.kill(parent.pid, signal.SIGKILL)  # the main process only: the workers live on, orphaned
        parent.wait(timeout=DEADLINE_S)
        # idle ("fixed") or waiting for free slots ("stream"), they notice within their poll interval
        wait_until(lambda: all(gone(pid) for pid in pids), "the orphaned workers to exit", timeout=15.0)
        # multiprocessing's resource tracker (in the script's group too) then unlinks the named
        # semaphore of the slot board ("stream"): wait for it rather than kill it at the end
        wait_until(lambda: not process_group(parent.pid), "the resource tracker to exit", timeout=15.0)
    assert_nothing_left_in_shm(shm_before)


def test_ctrl_c_interrupts_the_main_process_which_closes_its_workers(tmp_path: Path) -> None:
    with running_script(tmp_path, CTRL_C_SCRIPT) as (main, pids):
        os.killpg(main.pid, signal.SIGINT)  # as Ctrl-C in a terminal: the whole process group
        out, err = main.communicate(timeout=DEADLINE_S)
    assert main.returncode == -signal.SIGINT, err
    assert "KeyboardInterrupt" in err
    # the workers ignored SIGINT and exited when the main process closed them, before it ended
    assert "exit codes 0 0" in out, err
    assert "rlstruct-worker" not in err
    assert not [pid for pid in pids if os.path.exists(f"/proc/{pid}")]


# ---------------------------------------------------------------------------- bad arguments


@pytest.mark.parametrize("batcher_class", [LocalBatcher, MultiprocessBatcher])
@pytest.mark.parametrize("name", ["n_envs", "n_timesteps", "n_processes"])
@pytest.mark.parametrize("value", [0, -1, 2.0, True, None])
def test_sizes_must_be_positive_ints_in_the_words_of_local_batcher(
    batcher_class: type, name: str, value: Any
) -> None:
    kwargs: dict[str, Any] = {"n_envs": 1, "n_timesteps": 1, "n_processes": 1, name: value}
    with pytest.raises(
        ValueError, match=message(f"{batcher_class.__name__}: {name} must be a positive int, got {value!r}")
    ):
        batcher_class(CountingAgent, {}, CounterEnv, {}, **kwargs)


def test_bad_mode_and_seed_raise_as_for_local_batcher() -> None:
    with pytest.raises(
        ValueError,
        match=message("MultiprocessBatcher: mode must be 'fixed', 'episodes' or 'stream', got 'episode'"),
    ):
        MultiprocessBatcher(CountingAgent, {}, CounterEnv, {}, n_envs=1, n_timesteps=1, mode="episode")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=message("MultiprocessBatcher: seed must be an int, got a float")):
        MultiprocessBatcher(CountingAgent, {}, CounterEnv, {}, n_envs=1, n_timesteps=1, seed=1.0)  # type: ignore[arg-type]


@pytest.mark.parametrize("n_slots", [2, 1, 2.5, True, "4"])
def test_n_slots_must_exceed_n_processes_in_stream_mode(n_slots: Any) -> None:
    with pytest.raises(
        ValueError,
        match=message(f"MultiprocessBatcher: n_slots must be an int > n_processes (2), got {n_slots!r}"),
    ):
        MultiprocessBatcher(
            CountingAgent, {}, CounterEnv, {}, n_envs=1, n_timesteps=1, mode="stream", n_slots=n_slots
        )


@pytest.mark.parametrize("mode", ["fixed", "episodes"])
def test_n_slots_is_for_stream_mode_only(mode: str) -> None:
    with pytest.raises(
        ValueError,
        match=message(
            f"MultiprocessBatcher: n_slots is for mode='stream' only, got n_slots=4 with mode={mode!r}"
        ),
    ):
        MultiprocessBatcher(CountingAgent, {}, CounterEnv, {}, n_envs=1, n_timesteps=1, mode=mode, n_slots=4)  # type: ignore[arg-type]


@pytest.mark.parametrize("timeout", [0, -1.0, math.nan, True, "5", None])
def test_timeout_must_be_a_positive_number(timeout: Any) -> None:
    with pytest.raises(
        ValueError,
        match=message(f"MultiprocessBatcher: timeout must be a positive number of seconds, got {timeout!r}"),
    ):
        MultiprocessBatcher(CountingAgent, {}, CounterEnv, {}, n_envs=1, n_timesteps=1, timeout=timeout)


def test_numpy_numbers_are_sizes_timeouts_and_staleness_of_a_streaming_batcher() -> None:
    """NumPy ints (a config read with NumPy) count as ints everywhere, as in LocalBatcher.

    n_slots (and its default, 2 * n_processes), timeout, start_timeout and
    get's max_staleness refused them as not ints, or not numbers.
    """
    for n_slots in (None, np.int64(3)):
        with MultiprocessBatcher(
            CountingAgent,
            {},
            CounterEnv,
            {},
            n_envs=np.int64(1),
            n_timesteps=np.int64(2),
            n_processes=np.int64(2),
            mode="stream",
            n_slots=n_slots,
            timeout=np.int64(30),
            start_timeout=np.float32(60.0),
        ) as batcher:
            assert (batcher.n_slots, batcher.timeout, batcher.start_timeout) == (n_slots or 4, 30.0, 60.0)
            assert type(batcher.n_slots) is int and type(batcher.timeout) is float
            batcher.reset()
            batch = batcher.get(max_staleness=np.int64(0))
            assert (batch.n_elems(), batch.trajectories.n_timesteps()) == (1, 2)
            with pytest.raises(
                ValueError,
                match=message(
                    "MultiprocessBatcher.get: max_staleness must be None or an int >= 0, got np.int64(-1)"
                ),
            ):
                batcher.get(max_staleness=np.int64(-1))


@pytest.mark.parametrize("mode", ["fixed", "stream"])
def test_get_refuses_a_blocking_that_is_not_a_bool(mode: str) -> None:
    """blocking="no" was read by its truth and waited; None was read as False. A NumPy bool is a bool."""
    with MultiprocessBatcher(
        CountingAgent, {}, CounterEnv, {}, n_envs=1, n_timesteps=2, n_processes=1, mode=mode
    ) as batcher:
        batcher.reset()
        if mode == "fixed":
            batcher.execute()
        for blocking, got in (("no", "a str"), (None, "a NoneType")):
            with pytest.raises(
                TypeError, match=message(f"MultiprocessBatcher.get: blocking must be a bool, got {got}")
            ):
                batcher.get(blocking=blocking)  # type: ignore[call-overload]
        batch = batcher.get(blocking=np.bool_(True))  # the refused calls took nothing
        assert batch is not None and batch.n_elems() == 1


def test_a_closed_batcher_still_referenced_holds_no_shared_memory() -> None:
    """close() left the shared weights (and their version counter) to the garbage collector, which frees
    nothing of a batcher still referenced; the connections to the workers were already closed."""
    batcher = MultiprocessBatcher(
        LinearAgent, {}, GymEnv, {"env": "CartPole-v1"}, n_envs=1, n_timesteps=2, n_processes=2
    )
    batcher.update(LinearAgent().state_dict())
    batcher.reset()
    batcher.execute()
    batcher.get()
    shared = [weakref.ref(batcher._weights.counter), *map(weakref.ref, batcher._weights.tensors.values())]
    batcher.close()
    gc.collect()  # frees what the closed batcher no longer holds, and nothing it does
    assert [ref() for ref in shared] == [None] * 3  # the counter, the weight and the bias
    assert all(conn.closed for conn in batcher._conns)
    assert [process.exitcode for process in batcher._processes] == [0, 0]  # still told
    assert batcher.policy_version() == 1  # still told
    batcher.close()  # twice is fine


def test_timeouts_too_long_for_one_wait_are_waited_out_in_pieces() -> None:
    """timeout=1e9, "never" in practice: multiprocessing's wait raised OverflowError past about 24 days."""
    with MultiprocessBatcher(
        CountingAgent, {}, CounterEnv, {}, n_envs=1, n_timesteps=2, timeout=1e9, start_timeout=1e12
    ) as batcher:
        batcher.reset()
        batcher.execute()
        assert batcher.get().n_elems() == 2


def test_start_method_must_be_auto_or_one_multiprocessing_knows() -> None:
    methods = multiprocessing.get_all_start_methods()
    with pytest.raises(
        ValueError,
        match=message(f"MultiprocessBatcher: start_method must be 'auto' or one of {methods}, got 'threads'"),
    ):
        MultiprocessBatcher(
            CountingAgent, {}, CounterEnv, {}, n_envs=1, n_timesteps=1, start_method="threads"
        )


AUTO_SCRIPT = """
import threading
from rlstruct import MultiprocessBatcher
from rlstruct.batchers import choose_start_method
from rlstruct.testing import CounterEnv, CountingAgent

def first_batch():
    with MultiprocessBatcher(CountingAgent, {}, CounterEnv, {}, n_envs=1, n_timesteps=2) as batcher:
        batcher.reset()
        batcher.execute()
        return batcher.start_method, batcher.get().trajectories["count"].tolist()

if __name__ == "__main__":
    print(choose_start_method(), *first_batch())
    # the first batcher's reset started multiprocessing's resource sharer thread, which forks safely
    print(choose_start_method(), *first_batch())
    release = threading.Event()
    other = threading.Thread(target=release.wait, args=(60,))
    other.start()
    print(choose_start_method(), *first_batch())
    release.set()
    other.join()
    print(choose_start_method())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="auto forks on Linux only")
def test_auto_forks_while_the_main_process_runs_one_thread_and_spawns_beside_another(tmp_path: Path) -> None:
    """In a new interpreter, whose one thread no earlier test can have added to."""
    script = tmp_path / "auto.py"
    script.write_text(AUTO_SCRIPT)
    result = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines() == [
        "fork fork [[0, 1], [0, 1]]",
        "fork fork [[0, 1], [0, 1]]",
        "spawn spawn [[0, 1], [0, 1]]",
        "fork",
    ]


def test_forked_workers_run_after_the_main_process_used_several_torch_threads() -> None:
    """The workers set torch to one thread before computing: the OpenMP pool they inherit is never entered."""
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        a = torch.randn(300, 300)
        for _ in range(3):
            for _ in range(5):
                a = (a @ a).tanh()  # parallel regions in this process, before each fork
            batcher, local = counter_batchers(
                "fixed", n_processes=2, n_envs=2, n_timesteps=3, seed=0, start_method="fork"
            )
            with batcher, local:
                batcher.reset()
                local.reset()
                for _ in range(2):
                    assert_same(run_once(batcher), run_once(local))
                    a = (a @ a).tanh()
    finally:
        torch.set_num_threads(threads)


def test_the_agent_factory_is_checked_before_any_worker_starts() -> None:
    """An AgentError (a TypeError) as LocalBatcher raises for the same factory; it was a plain TypeError."""
    before = multiprocessing.active_children()
    with pytest.raises(
        AgentError, match=message("agent_factory must return an rlstruct.Agent, got a Linear")
    ):
        MultiprocessBatcher(
            torch.nn.Linear,  # type: ignore[arg-type]
            {"in_features": 1, "out_features": 1},
            CounterEnv,
            {},
            n_envs=1,
            n_timesteps=1,
        )
    assert multiprocessing.active_children() == before


def test_z_that_requires_grad_reaches_the_workers_detached() -> None:
    temperature = torch.nn.Parameter(torch.ones(()))  # a learned z: it could not be sent with its graph
    with MultiprocessBatcher(
        CountingAgent, {}, CounterEnv, {}, n_envs=2, n_timesteps=3, n_processes=1, timeout=DEADLINE_S
    ) as batcher:
        batcher.reset(agent_info=DictTensor({"temperature": temperature.expand(2) * 2.0}))
        batch = run_once(batcher)
    assert torch.equal(batch.info["agent_info/temperature"], torch.full((2,), 2.0))
    assert batch.info["agent_info/temperature"].grad_fn is None
