"""The batchers under faults and bad input: each promise of docs/multiprocess.md and docs/batchers.md kept.

Every test here stands for a way a batcher was once broken: a refused reset
that still fixed the keys, z and w cast silently, a hung worker a poll never
reported, a stream that went on with half its workers, a worker that died
before it ran with no reason given, factories that cannot be pickled, a
device that cannot be used. Waits poll with a deadline; environments that
must block wait on events the test holds.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import re
import sys
import threading
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from fault_helpers import BreakingWeights, HangingAtStartEnv, exiting_agent
from mp_helpers import (
    ControlledEnv,
    EpsilonAgent,
    FailingAgent,
    LinearAgent,
    assert_nothing_left_in_shm,
    shm_entries,
)

from rlstruct import DictTensor, GymEnv, LocalBatcher, MultiprocessBatcher, WorkerError, WorkerTimeout
from rlstruct.batchers._slots import SlotBoard
from rlstruct.testing import CounterEnv, CountingAgent

SPAWN = multiprocessing.get_context("spawn")
DEADLINE_S = 30.0  # how long a test waits for something that normally takes milliseconds
BATCHERS = [LocalBatcher, MultiprocessBatcher]


def message(text: str) -> str:
    return re.escape(text)


def epsilon(*values: float, dtype: torch.dtype = torch.float32) -> DictTensor:
    return DictTensor({"epsilon": torch.tensor(values, dtype=dtype)})


def run_once(batcher: Any) -> Any:
    batcher.execute()
    return batcher.get()


@pytest.fixture
def no_new_children() -> Iterator[None]:
    """The test starts no process that it leaves running."""
    before = {p.pid for p in multiprocessing.active_children()}
    yield
    assert {p.pid for p in multiprocessing.active_children()} <= before


# ---------------------------------------------------------------------------- z and w


@pytest.mark.parametrize("batcher_class", BATCHERS)
def test_a_reset_that_raised_fixes_nothing_and_the_batcher_stays_usable(batcher_class: type) -> None:
    with batcher_class(EpsilonAgent, {}, CounterEnv, {}, n_envs=2, n_timesteps=3, n_processes=2) as batcher:
        misspelt = DictTensor({"epsilom": torch.full((4,), 0.5)})
        with pytest.raises(KeyError, match="epsilon"):  # at reset (the probe step) or at the first step
            batcher.reset(misspelt)
            run_once(batcher)
        if batcher_class is MultiprocessBatcher:
            pids = [p.pid for p in batcher._processes]
            assert all(p.is_alive() for p in batcher._processes)
            if sys.version_info >= (3, 11):
                with pytest.raises(KeyError) as caught:
                    batcher.reset(misspelt)
                assert "probe step" in "".join(caught.value.__notes__)
        with pytest.raises(RuntimeError, match=message("call reset() before execute()")):
            batcher.execute()
        batcher.reset(epsilon(0.1, 0.2, 0.3, 0.4))  # the right key: accepted
        batch = run_once(batcher)
        assert torch.equal(batch.info["agent_info/epsilon"], torch.tensor([0.1, 0.2, 0.3, 0.4]))
        assert torch.equal(batch.trajectories["epsilon"][:, 0], torch.tensor([0.1, 0.2, 0.3, 0.4]))
        if batcher_class is MultiprocessBatcher:
            assert [p.pid for p in batcher._processes] == pids  # the same workers all along


def test_the_multiprocess_batcher_keeps_the_dtypes_of_z_and_w_as_the_local_one_does() -> None:
    z = epsilon(0.1, 0.2, 0.3, 0.4, dtype=torch.float64)
    w = DictTensor(
        {
            "length": torch.tensor([2, 3, 4, 5]),
            "gravity": torch.tensor([9.8, 9.8, 1.6, 1.6], dtype=torch.float64),
        }
    )
    batches = []
    for batcher_class in BATCHERS:
        with batcher_class(
            EpsilonAgent, {}, CounterEnv, {}, n_envs=2, n_timesteps=3, n_processes=2
        ) as batcher:
            batcher.reset(z, w)
            batches.append(run_once(batcher))
            batcher.reset(z, w)  # the same dtypes again: fine
            batches.append(run_once(batcher))
    for batch in batches:
        assert batch.info["agent_info/epsilon"].dtype == torch.float64
        assert torch.equal(batch.info["agent_info/epsilon"], z["epsilon"])
        assert batch.info["env_info/length"].dtype == torch.int64
        assert batch.info["env_info/gravity"].dtype == torch.float64
        assert torch.equal(batch.info["env_info/gravity"], w["gravity"])
        assert batch.trajectories["epsilon"].dtype == torch.float64
    assert batches[0].equal(batches[2]) and batches[1].equal(batches[3])


@pytest.mark.parametrize("batcher_class", BATCHERS)
def test_a_later_z_or_w_of_another_dtype_or_shape_is_refused_naming_the_key(batcher_class: type) -> None:
    name = batcher_class.__name__
    w = DictTensor({"length": torch.tensor([2, 3, 4, 5])})
    with batcher_class(EpsilonAgent, {}, CounterEnv, {}, n_envs=2, n_timesteps=3, n_processes=2) as batcher:
        batcher.reset(DictTensor({"epsilon": torch.zeros(4, 3, dtype=torch.float64)}))  # no batch yet: free
        batcher.reset(epsilon(0.1, 0.2, 0.3, 0.4), w)
        first = run_once(batcher)
        assert first.info["agent_info/epsilon"].dtype == torch.float32
        with pytest.raises(
            ValueError,
            match=message(
                f"{name}.reset: agent_info key 'epsilon' must keep the dtype and row shape of the first "
                "reset, torch.float32 and (); got torch.float64 and () (nothing is cast)"
            ),
        ):
            batcher.reset(epsilon(0.1, 0.2, 0.3, 0.4, dtype=torch.float64), w)
        with pytest.raises(
            ValueError,
            match=message(
                f"{name}.reset: agent_info key 'epsilon' must keep the dtype and row shape of the first "
                "reset, torch.float32 and (); got torch.float32 and (2,) (nothing is cast)"
            ),
        ):
            batcher.reset(DictTensor({"epsilon": torch.zeros(4, 2)}), w)
        with pytest.raises(
            ValueError,
            match=message(
                f"{name}.reset: env_info key 'length' must keep the dtype and row shape of the first "
                "reset, torch.int64 and (); got torch.float32 and () (nothing is cast)"
            ),
        ):
            batcher.reset(epsilon(0.1, 0.2, 0.3, 0.4), DictTensor({"length": torch.tensor([2.0, 3, 4, 5])}))
        # refused before anything ran: the batcher goes on, the workers alive
        batcher.reset(epsilon(0.5, 0.6, 0.7, 0.8), w)
        again = run_once(batcher)
        assert torch.equal(again.info["agent_info/epsilon"], torch.tensor([0.5, 0.6, 0.7, 0.8]))
        assert torch.equal(again.info["env_info/length"], first.info["env_info/length"])


# ---------------------------------------------------------------------------- hung workers


def worker_1_hangs(never: Any, **kwargs: Any) -> MultiprocessBatcher:
    """2 workers of 2 CounterEnvs; worker 1 blocks forever at its second step (``never`` is never set)."""
    return MultiprocessBatcher(
        CountingAgent,
        {},
        ControlledEnv,
        {"gate": never, "gate_seed": 2},
        n_envs=2,
        n_timesteps=3,
        n_processes=2,
        **kwargs,
    )


def test_a_poll_raises_worker_timeout_once_the_timeout_has_passed_since_execute(
    no_new_children: None,
) -> None:
    never = SPAWN.Event()
    shm_before = shm_entries()
    batcher = worker_1_hangs(never, timeout=1.0)
    batcher.reset()
    batcher.execute()
    start = time.monotonic()
    with pytest.raises(WorkerTimeout, match=message("worker 1 (envs 2-3): no answer within 1 s")) as caught:
        while batcher.get(blocking=False) is None:
            assert time.monotonic() - start < DEADLINE_S, "the poll never reported the hung worker"
            time.sleep(0.01)  # the caller's other work between polls
    assert caught.value.worker == 1
    assert time.monotonic() - start >= 1.0 - 0.05
    with pytest.raises(RuntimeError, match=message("get() after close()")):
        batcher.get(blocking=False)
    assert_nothing_left_in_shm(shm_before)


def test_every_worker_hung_is_reported_without_waiting_for_the_others_to_close(no_new_children: None) -> None:
    never = SPAWN.Event()
    batcher = MultiprocessBatcher(
        CountingAgent, {}, ControlledEnv, {"gate": never}, n_envs=2, n_timesteps=3, n_processes=2, timeout=1.0
    )
    batcher.reset()
    batcher.execute()
    start = time.monotonic()
    with pytest.raises(WorkerTimeout, match=message("no answer within 1 s")):
        batcher.get()
    # the other hung worker is given half a second, not close()'s 5, to exit before the error is raised
    assert time.monotonic() - start < 1.0 + 0.5 + 2.0
    assert not any(p.is_alive() for p in batcher._pool.processes)


def test_an_error_in_one_worker_is_reported_at_once_while_another_still_runs(no_new_children: None) -> None:
    never, fail = SPAWN.Event(), SPAWN.Event()
    fail.set()
    batcher = MultiprocessBatcher(
        CountingAgent,
        {},
        ControlledEnv,  # worker 0 blocks at its second step; worker 1 raises at its first
        {"gate": never, "gate_seed": 0, "fail": fail, "fail_seed": 2},
        n_envs=2,
        n_timesteps=3,
        timeout=DEADLINE_S,
    )
    batcher.reset()
    batcher.execute()
    start = time.monotonic()
    with pytest.raises(WorkerError, match=message("worker 1 (envs 2-3): raised an exception")) as caught:
        batcher.get()
    assert not isinstance(caught.value, WorkerTimeout)
    assert time.monotonic() - start < DEADLINE_S / 2  # not after worker 0's timeout
    assert "the simulator of seed 2 crashed on request" in caught.value.worker_traceback
    with pytest.raises(
        RuntimeError,
        match=message(
            "MultiprocessBatcher: reset() after close(); it closed itself when a worker failed "
            "(WorkerError: worker 1 (envs 2-3): raised an exception)"
        ),
    ):
        batcher.reset()  # the user never called close(): say who did


def test_a_silent_stream_worker_is_reported_by_name_while_the_other_one_keeps_publishing(
    no_new_children: None,
) -> None:
    never = SPAWN.Event()
    shm_before = shm_entries()
    batcher = worker_1_hangs(never, mode="stream", timeout=1.5)
    taken = 0
    start = time.monotonic()
    with pytest.raises(
        WorkerTimeout, match=message("worker 1 (envs 2-3): published nothing for more than 1.5 s")
    ) as caught:
        batcher.reset()
        while time.monotonic() - start < DEADLINE_S:
            assert batcher.get().n_elems() == 2
            taken += 1
    assert caught.value.worker == 1 and caught.value.envs == range(2, 4)
    assert taken > 0  # worker 0's slots kept coming until then
    assert_nothing_left_in_shm(shm_before)


def test_a_stream_learner_that_takes_its_time_is_not_a_hung_worker() -> None:
    """Workers that wait for a free slot show they are alive: a learner away for twice the timeout is fine."""
    with MultiprocessBatcher(
        CountingAgent, {}, CounterEnv, {}, n_envs=2, n_timesteps=3, n_processes=2, mode="stream", timeout=0.5
    ) as batcher:
        batcher.reset()
        with pytest.raises(
            ValueError,
            match=message("MultiprocessBatcher.get: max_staleness must be None or an int >= 0, got -1"),
        ):
            batcher.get(max_staleness=-1)
        batcher.get()
        away = time.monotonic() + 1.0
        while time.monotonic() < away:
            time.sleep(0.05)  # the learner's own work; every slot fills meanwhile
        for _ in range(4):
            batcher.get()


# ---------------------------------------------------------------------------- workers that cannot start


def test_a_worker_that_cannot_import_the_agent_class_reports_why(no_new_children: None) -> None:
    ghost = types.ModuleType("ghost_agents")  # exists in this process only, as a notebook's classes
    exec(
        "from rlstruct.testing import CountingAgent\nclass GhostAgent(CountingAgent):\n    pass\n",
        ghost.__dict__,
    )
    sys.modules["ghost_agents"] = ghost
    try:
        # spawned workers import their classes by name (a forked one would inherit the module)
        batcher = MultiprocessBatcher(
            ghost.GhostAgent, {}, CounterEnv, {}, n_envs=2, n_timesteps=3, start_method="spawn"
        )
        with pytest.raises(WorkerError, match=r"worker [01] \(envs [02]-[13]\): could not start") as caught:
            batcher.reset()
    finally:
        del sys.modules["ghost_agents"]
    assert "ModuleNotFoundError: No module named 'ghost_agents'" in caught.value.worker_traceback
    assert "ModuleNotFoundError" in str(caught.value)


def test_a_worker_that_dies_before_it_runs_is_reported_with_its_exit_code(no_new_children: None) -> None:
    batcher = MultiprocessBatcher(exiting_agent, {"code": 3}, CounterEnv, {}, n_envs=2, n_timesteps=3)
    with pytest.raises(WorkerError, match=message("died before it started (exit code 3)")):
        batcher.reset()


def test_start_up_has_its_own_bound(no_new_children: None) -> None:
    # a timeout far below what starting a worker takes (it imports torch, a second or more): only
    # start_timeout bounds the start; 0.25 s still leaves a loaded machine time for the steps after it
    with MultiprocessBatcher(
        CountingAgent, {}, CounterEnv, {}, n_envs=2, n_timesteps=3, timeout=0.25, start_timeout=DEADLINE_S
    ) as batcher:
        batcher.reset()
        assert run_once(batcher).trajectories["count"].shape == (4, 3)
    gate = SPAWN.Event()
    batcher = MultiprocessBatcher(
        CountingAgent, {}, HangingAtStartEnv, {"gate": gate}, n_envs=2, n_timesteps=3, start_timeout=2.0
    )
    with pytest.raises(WorkerTimeout, match=message("did not start within start_timeout=2 s")):
        batcher.reset()


def test_a_worker_that_cannot_be_started_stops_the_ones_already_started(
    monkeypatch: pytest.MonkeyPatch, no_new_children: None
) -> None:
    """Starting worker 1 raises (as spawning from an unguarded __main__ does): the error reaches the
    caller, and worker 0, already running, is stopped when the half-made batcher is collected."""
    start = multiprocessing.process.BaseProcess.start
    started: list[Any] = []

    def start_once(process: Any) -> None:
        if started:
            raise RuntimeError("cannot start another process")
        start(process)
        started.append(process)

    monkeypatch.setattr(multiprocessing.process.BaseProcess, "start", start_once)
    with pytest.raises(RuntimeError, match="cannot start another process"):
        MultiprocessBatcher(CountingAgent, {}, CounterEnv, {}, n_envs=1, n_timesteps=2)
    gc.collect()  # runs the finalizer of the batcher that was never returned
    started[0].join(DEADLINE_S)
    assert started[0].exitcode is not None


# ---------------------------------------------------------------------------- bad arguments


def make_cartpole(n_envs: int, seed: int) -> GymEnv:
    return GymEnv("CartPole-v1", n_envs=n_envs, seed=seed)


@pytest.mark.parametrize(
    ("arguments", "text"),
    [
        (
            {"agent_factory": lambda: CountingAgent()},
            "MultiprocessBatcher: agent_factory must be picklable to reach the worker processes",
        ),
        (
            {"env_factory": lambda n_envs, seed: CounterEnv(n_envs, seed)},
            "MultiprocessBatcher: env_factory must be picklable to reach the worker processes",
        ),
        (
            {"env_args": {"length": 3, "reward": lambda t: t}},
            "MultiprocessBatcher: env_args (its key 'reward') must be picklable to reach the worker processes",
        ),
        (
            {"agent_args": {"action": 1, "on_step": lambda: None}},
            "MultiprocessBatcher: agent_args (its key 'on_step') must be picklable to reach the worker processes",
        ),
    ],
)
def test_what_cannot_be_pickled_is_refused_naming_the_argument(
    arguments: dict[str, Any], text: str, no_new_children: None
) -> None:
    kwargs: dict[str, Any] = {
        "agent_factory": CountingAgent,
        "agent_args": {},
        "env_factory": CounterEnv,
        "env_args": {},
    } | arguments
    with pytest.raises(TypeError, match=message(text) + ".*pickling failed with"):
        MultiprocessBatcher(**kwargs, n_envs=1, n_timesteps=1)


@pytest.mark.parametrize("batcher_class", BATCHERS)
@pytest.mark.parametrize(
    ("device", "error", "text"),
    [
        ("meta", ValueError, "device must hold data; 'meta' tensors have none, got 'meta'"),
        ("gpu", ValueError, "device must name a torch device such as 'cpu' or 'cuda:0', got 'gpu'"),
        (0.5, TypeError, "device must be a str, a torch.device or an int, got a float"),
    ]
    + (
        []
        if torch.cuda.is_available()
        else [("cuda", ValueError, "device 'cuda' cannot be used on this machine")]
    ),
)
def test_an_unusable_device_is_refused_at_construction(
    batcher_class: type, device: Any, error: type, text: str, no_new_children: None
) -> None:
    with pytest.raises(error, match=message(f"{batcher_class.__name__}: {text}")):
        batcher_class(CountingAgent, {}, CounterEnv, {}, n_envs=1, n_timesteps=1, device=device)


# ---------------------------------------------------------------------------- weights


def test_an_update_that_fails_half_way_is_never_loaded_and_must_be_redone() -> None:
    pushes_right = {"linear.weight": torch.zeros(2, 4), "linear.bias": torch.tensor([-20.0, 20.0])}
    with MultiprocessBatcher(
        LinearAgent, {}, make_cartpole, {}, n_envs=2, n_timesteps=4, weights=LinearAgent().state_dict()
    ) as batcher:
        batcher.reset()
        before = run_once(batcher)
        with pytest.raises(KeyboardInterrupt):
            batcher.update(BreakingWeights(pushes_right, n=4))  # 2 lookups to check, then the 2nd copy
        assert int(batcher._weights.counter[0]) % 2 == 1  # marked as being written: no worker loads them
        assert batcher.policy_version() == 0
        for call in (batcher.execute, batcher.reset):
            with pytest.raises(RuntimeError, match=message("after an update() that failed half-way")):
                call()
        batcher.update(pushes_right)
        batcher.reset()
        after = run_once(batcher)
        assert bool((after.trajectories["action"] == 1).all())
        assert not bool((before.trajectories["action"] == 1).all())
        assert bool((after.info["policy_version"] == 1).all())


STUCK_MAIN_SCRIPT = """
import sys, time
from rlstruct import MultiprocessBatcher
from rlstruct.testing import CounterEnv, CountingAgent

if __name__ == "__main__":
    batcher = MultiprocessBatcher(
        CountingAgent, {}, CounterEnv, {}, n_envs=2, n_timesteps=4, n_processes=2, mode="stream", timeout=600
    )
    batcher.reset()
    batcher.get()
    if sys.argv[1] == "weights":
        batcher._weights.counter += 1  # as a main process killed in the middle of update()
    else:
        batcher._board.lock.acquire()  # as a main process killed while it takes a slot
    print(*(process.pid for process in batcher._processes), flush=True)
    if sys.argv[1] == "weights":
        for _ in range(4):
            batcher.get()  # frees slots: every worker goes on to load the half-written weights
    time.sleep(600)
"""


@pytest.mark.parametrize("held", ["weights", "board"])
def test_workers_waiting_for_the_main_process_exit_when_it_dies_holding_the_weights_or_the_board(
    tmp_path: Path, held: str
) -> None:
    from test_multiprocess_batcher import gone, running_script, wait_until

    with running_script(tmp_path, STUCK_MAIN_SCRIPT, held) as (parent, pids):
        assert len(pids) == 2
        os.kill(parent.pid, 9)
        parent.wait(timeout=DEADLINE_S)
        wait_until(lambda: all(gone(pid) for pid in pids), "the workers to leave their wait", timeout=15.0)


HUNG_STEP_SCRIPT = """
import multiprocessing, time
from rlstruct import MultiprocessBatcher
from rlstruct.testing import CounterEnv, CountingAgent


class HangsInWorkers(CounterEnv):
    def step(self, action):
        if multiprocessing.parent_process() is not None:  # a worker, not the main process's probe
            time.sleep(600)  # a simulator that never returns
        return super().step(action)


if __name__ == "__main__":
    batcher = MultiprocessBatcher(CountingAgent, {}, HangsInWorkers, {}, n_envs=1, n_timesteps=4, timeout=600)
    batcher.reset()
    batcher.execute()
    print(*(process.pid for process in batcher._processes), flush=True)
    time.sleep(600)
"""


def test_workers_held_in_a_step_that_never_returns_exit_when_the_main_process_is_killed(
    tmp_path: Path,
) -> None:
    from test_multiprocess_batcher import gone, running_script, wait_until

    with running_script(tmp_path, HUNG_STEP_SCRIPT) as (parent, pids):
        assert len(pids) == 2
        os.kill(parent.pid, 9)
        parent.wait(timeout=DEADLINE_S)
        wait_until(lambda: all(gone(pid) for pid in pids), "the hung workers to exit", timeout=15.0)


def test_a_streaming_batcher_collected_without_close_lets_its_workers_exit_by_themselves() -> None:
    """The finalizer sends Close alone; a streaming worker took it for a mistake and waited to be terminated."""
    batcher = MultiprocessBatcher(CountingAgent, {}, CounterEnv, {}, n_envs=2, n_timesteps=4, mode="stream")
    batcher.reset()
    batcher.get()
    workers = list(batcher._processes)
    del batcher
    gc.collect()
    assert [worker.exitcode for worker in workers] == [0, 0]  # exited, not terminated (-15)


# ---------------------------------------------------------------------------- what a worker holds


def test_forked_workers_hold_no_end_of_the_main_process_pipes() -> None:
    """Else the main process's death would never reach them as end-of-file."""
    with MultiprocessBatcher(
        CountingAgent, {}, CounterEnv, {}, n_envs=1, n_timesteps=2, n_processes=3, start_method="fork"
    ) as batcher:
        batcher.reset()
        ours = {f"socket:[{os.fstat(conn.fileno()).st_ino}]" for conn in batcher._conns}
        for process in batcher._processes:
            held = {
                os.readlink(f"/proc/{process.pid}/fd/{fd}") for fd in os.listdir(f"/proc/{process.pid}/fd")
            }
            assert not held & ours, f"worker {process.name} holds {held & ours}"
        assert run_once(batcher).trajectories["count"].shape == (3, 2)


def _in_thread(call: Any) -> tuple[threading.Thread, list[Any]]:
    result: list[Any] = []
    thread = threading.Thread(target=lambda: result.append(call()), daemon=True)
    thread.start()
    return thread, result


def test_slot_board_waits_block_until_the_other_side_moves_not_until_a_poll() -> None:
    """A worker waiting for a free slot gets it when the learner releases one; the learner's
    wait for a ready slot ends when a worker publishes; neither waits out its timeout."""
    board = SlotBoard(1, 1, SPAWN, timeout=5.0)
    assert board.claim() == 0 and board.claim() is None  # the only slot is taken
    start = time.monotonic()
    waiting, claimed = _in_thread(lambda: board.claim(wait=30.0))
    taker, taken = _in_thread(lambda: board.take(wait=30.0))
    board.publish(0, worker=0)  # the worker's slot is ready: the learner's wait ends
    taker.join(timeout=10.0)
    assert taken == [0]
    assert waiting.is_alive()  # no slot is free yet
    board.release(0)  # the learner gives it back: the worker's wait ends
    waiting.join(timeout=10.0)
    assert claimed == [0]
    assert time.monotonic() - start < 10.0


def test_slot_board_wake_ends_a_wait_without_a_slot_and_clear_restores_the_counts() -> None:
    board = SlotBoard(2, 1, SPAWN, timeout=5.0)
    assert board.claim() == 0 and board.claim() == 1
    waiting, claimed = _in_thread(lambda: board.claim(wait=30.0))
    board.wake(1)
    waiting.join(timeout=10.0)
    assert claimed == [None]  # woken to read its pipe, no slot claimed
    board.wake(3)  # tokens that match no slot
    board.publish(0, worker=0)
    board.clear()
    assert board.take() is None  # the READY slot and its token are gone
    assert [board.claim(), board.claim(), board.claim()] == [0, 1, None]


def test_the_slot_board_waits_for_its_lock_as_long_as_the_batcher_says() -> None:
    board = SlotBoard(2, 1, SPAWN, timeout=0.2)
    board.ready.release()  # as if a slot were READY: take() goes on to the lock
    board.lock.acquire()  # as a worker that died holding it
    try:
        start = time.monotonic()
        for call in (board.take, board.claim, lambda: board.release(0), board.clear):
            with pytest.raises(TimeoutError, match=message("not released within 0.2 s")):
                call()
        assert time.monotonic() - start >= 4 * 0.2 - 0.05
    finally:
        board.lock.release()


def test_a_stream_error_kept_alive_keeps_nothing_in_shared_memory(no_new_children: None) -> None:
    shm_before = shm_entries()
    batcher = MultiprocessBatcher(
        FailingAgent, {"fail_seed": 1, "fail_at": 5}, CounterEnv, {}, n_envs=2, n_timesteps=3, mode="stream"
    )
    with pytest.raises(WorkerError, match=message("worker 1 (envs 2-3): raised an exception")) as caught:
        batcher.reset()
        for _ in range(100):
            batcher.get()
    assert "divided by zero" in caught.value.worker_traceback  # the exception and its traceback live on
    assert_nothing_left_in_shm(shm_before)


def test_a_stream_worker_killed_is_reported_at_the_next_get_with_its_exit_code(no_new_children: None) -> None:
    from test_multiprocess_batcher import wait_until

    shm_before = shm_entries()
    batcher = MultiprocessBatcher(CountingAgent, {}, CounterEnv, {}, n_envs=2, n_timesteps=3, mode="stream")
    batcher.reset()
    batcher.get()
    victim = batcher._processes[1]
    os.kill(victim.pid, 9)
    wait_until(lambda: not victim.is_alive(), "worker 1 to die")
    with pytest.raises(WorkerError, match=message("worker 1 (envs 2-3): died (exit code -9)")):
        for _ in range(100):  # the slots worker 0 keeps filling do not hide it
            batcher.get()
    assert_nothing_left_in_shm(shm_before)
