"""MultiprocessBatcher: agent-environment pairs in worker processes, writing into shared memory.

The contract is ``LocalBatcher``'s (``docs/batchers.md``); the layout of the
shared buffers, the protocol and the shutdown are in ``docs/multiprocess.md``.

Why pipes. Each worker runs its own agent copy and environments for a whole
trajectory (``n_timesteps`` steps of ``n_envs`` environments) before it hands
anything over, so there is one hand-off per worker per trajectory, not per
step. Measured on a 2-core machine (``benchmarks/handoff.py``), a pipe round
trip costs about 50 us, a semaphore about 18 us and a shared flag polled with
``sched_yield`` about 1 us; a trajectory of 64 steps of 8 CartPole
environments takes about 10 ms, so even the pipe costs under 1%. Pipes win on
what matters more here: ``poll(timeout)`` bounds every wait, a dead worker
shows up as end-of-file, and an error travels with its traceback. Busy
waiting, which collapses once waiting processes outnumber cores, is never used.
"""

from __future__ import annotations

import contextlib
import time
import warnings
import weakref
from collections.abc import Callable, Mapping
from multiprocessing.connection import Connection
from types import TracebackType
from typing import Any, Literal, overload

import torch
import torch.multiprocessing as mp

from rlstruct.agent import Agent
from rlstruct.batchers import _checks
from rlstruct.batchers._group import Group
from rlstruct.batchers._slots import SlotBoard
from rlstruct.batchers._worker import WAIT_S, worker_loop
from rlstruct.dicttensor import DictTensor, _describe
from rlstruct.env import Environment
from rlstruct.errors import WorkerError, WorkerTimeout
from rlstruct.temporal import TemporalDictTensor
from rlstruct.trajectories import Trajectories

__all__ = ["MultiprocessBatcher"]

Mode = Literal["fixed", "episodes", "stream"]
NAME = "MultiprocessBatcher"


def _shutdown(processes: list[Any], conns: list[Connection], grace: float) -> None:
    """Ask every worker to exit, then terminate and kill the ones that do not. Safe to call twice."""
    for conn in conns:
        with contextlib.suppress(OSError, ValueError):
            conn.send(("close",))
    deadline = time.monotonic() + grace
    for process in processes:
        process.join(max(0.0, deadline - time.monotonic()))
    for process in processes:
        if process.is_alive():
            process.terminate()
            process.join(1.0)
        if process.is_alive():
            process.kill()
            process.join(1.0)
    for conn in conns:
        conn.close()


class MultiprocessBatcher:
    """Runs ``n_processes`` workers, each with an agent copy and ``n_envs`` environments.

    Workers write trajectories step by step into buffers in shared memory;
    ``get()`` copies them out. Same seeds and layout give the same trajectories
    as ``LocalBatcher`` with the same arguments.

    Args:
        agent_factory: makes an agent, ``agent_factory(**agent_args)``, in every
            worker (and once here); must be picklable.
        agent_args: keyword arguments for ``agent_factory``.
        env_factory: makes an environment,
            ``env_factory(n_envs=n_envs, seed=seed, **env_args)``; must be picklable.
        env_args: keyword arguments for ``env_factory``.
        n_envs: environment instances per worker.
        n_timesteps: T, as for ``LocalBatcher``.
        mode: "fixed" or "episodes" as for ``LocalBatcher``, or "stream": after
            ``reset()``, workers keep filling free slots with fixed-length
            trajectories while the learner takes finished ones with ``get()``
            (no ``execute()``).
        seed: the base seed, as for ``LocalBatcher``.
        n_processes: the number of worker processes.
        n_slots: in "stream" mode, how many trajectory slots of ``n_envs``
            rows the buffer holds (default ``2 * n_processes``; at least
            ``n_processes + 1``). When all are full, workers wait: the buffer
            never grows.
        timeout: seconds any wait for the workers may last before
            ``WorkerTimeout`` is raised (and the batcher closed).
        start_method: "spawn" (default: safe once the parent used several
            torch threads), "forkserver" or "fork".
        device: where ``get()`` puts the trajectories; from CUDA, they go
            through pinned memory with ``non_blocking=True``.
        weights: the weights every worker's agent copy loads
            (``load_state_dict``) before it acts, normally the learner's
            ``model.state_dict()`` (on any device); checked as ``update()``
            checks them, before any worker starts. None: the weights of the
            agent made in the main process at construction.

    Raises:
        ValueError, TypeError: for bad arguments (``weights`` included), as
            ``LocalBatcher``.

    Warns:
        UserWarning: once, at the first ``execute()`` (at ``reset()`` in
            "stream" mode, where the workers start at once), if the agent has
            a non-empty ``state_dict`` and neither ``weights`` nor
            ``update()`` gave it the learner's, as ``LocalBatcher``.

    ``update(weights)`` replaces the weights everywhere; each worker loads
    them before its next trajectory.
    """

    def __init__(
        self,
        agent_factory: Callable[..., Agent],
        agent_args: Mapping[str, Any],
        env_factory: Callable[..., Environment],
        env_args: Mapping[str, Any],
        *,
        n_envs: int,
        n_timesteps: int,
        mode: Mode = "fixed",
        seed: int = 0,
        n_processes: int = 2,
        n_slots: int | None = None,
        timeout: float = 60.0,
        start_method: str = "spawn",
        device: torch.device | str = "cpu",
        weights: Mapping[str, torch.Tensor] | None = None,
    ) -> None:
        self.n_envs = _checks.positive_int(NAME, "n_envs", n_envs)
        self.n_timesteps = _checks.positive_int(NAME, "n_timesteps", n_timesteps)
        self.n_processes = _checks.positive_int(NAME, "n_processes", n_processes)
        if mode not in ("fixed", "episodes", "stream"):
            raise ValueError(f"{NAME}: mode must be 'fixed', 'episodes' or 'stream', got {mode!r}")
        if mode == "stream":
            n_slots = 2 * n_processes if n_slots is None else n_slots
            if not isinstance(n_slots, int) or isinstance(n_slots, bool) or n_slots <= n_processes:
                raise ValueError(
                    f"{NAME}: n_slots must be an int > n_processes ({n_processes}), got {n_slots!r}"
                )
        elif n_slots is not None:
            raise ValueError(
                f"{NAME}: n_slots is for mode='stream' only, got n_slots={n_slots!r} with mode={mode!r}"
            )
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:  # NaN too
            raise ValueError(f"{NAME}: timeout must be a positive number of seconds, got {timeout!r}")
        if start_method not in mp.get_all_start_methods():
            raise ValueError(
                f"{NAME}: start_method must be one of {mp.get_all_start_methods()}, got {start_method!r}"
            )
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise TypeError(f"{NAME}: seed must be an int, got {_describe(seed)}")
        self.mode: Mode = mode
        self.n_slots = n_slots if n_slots is not None else n_processes
        self.timeout = float(timeout)
        self.device = torch.device(device)
        self._factories = (agent_factory, dict(agent_args), env_factory, dict(env_args))
        self._seed = seed
        self._closed = True  # until the workers exist
        self._processes: list[Any] = []
        self._conns: list[Connection] = []

        agent = agent_factory(**agent_args)
        if not isinstance(agent, Agent):
            raise TypeError(f"agent_factory must return an rlstruct.Agent, got {_describe(agent)}")
        # The weights every worker loads, in shared memory, and their sequence counter (see _worker).
        self._weights = {k: v.detach().clone().share_memory_() for k, v in agent.state_dict().items()}
        agent.close()
        if weights is not None:
            _checks.weights(NAME, self._weights, weights, call="__init__")
            for key, value in self._weights.items():
                value.copy_(weights[key])
        self._counter = torch.zeros(1, dtype=torch.int64).share_memory_()
        # warn when the workers first act if they would act with weights nobody gave them
        self._warn_initial_weights = weights is None and len(self._weights) > 0
        self.discarded = 0
        """Trajectories (slots of ``n_envs x n_timesteps`` steps) that ``get(max_staleness=...)``
        dropped as too old: a learner that counts its env steps can count these too."""

        ctx = mp.get_context(start_method)
        self._board = SlotBoard(self.n_slots, ctx) if mode == "stream" else None
        self._closed = False
        self._finalizer = weakref.finalize(self, _shutdown, self._processes, self._conns, 5.0)
        for w in range(n_processes):
            here, there = ctx.Pipe()
            process = ctx.Process(  # type: ignore[attr-defined]
                target=worker_loop,
                args=(
                    w,
                    there,
                    agent_factory,
                    agent_args,
                    env_factory,
                    env_args,
                    n_envs,
                    n_timesteps,
                    seed + w * n_envs,
                    seed + w,
                    self._weights,
                    self._counter,
                    mp.current_process().pid,
                    self._board,
                ),
                name=f"rlstruct-worker-{w}",
                daemon=True,
            )
            process.start()
            there.close()
            self._processes.append(process)
            self._conns.append(here)
        self._info_keys: _checks.InfoSpec | None = None
        self._buffers: (
            tuple[dict[str, torch.Tensor], dict[str, torch.Tensor], torch.Tensor, torch.Tensor] | None
        ) = None
        self._started = False
        self._ran_once = False
        self._waiting: set[int] = set()
        self._streaming = False

    # ------------------------------------------------------------------ workers

    def n_elems(self) -> int:
        """The number of rows a ``get()`` returns: ``n_processes * n_envs``, or ``n_envs`` in "stream" mode."""
        return self.n_envs if self.mode == "stream" else self.n_processes * self.n_envs

    def _envs(self, w: int) -> range:
        return range(w * self.n_envs, (w + 1) * self.n_envs)

    def _fail(self, error: WorkerError) -> WorkerError:
        """Close everything, and return ``error`` for the caller to raise."""
        self.close()
        return error

    def _receive(self, w: int, deadline: float) -> tuple[Any, ...]:
        """The next message of worker ``w``, waiting until ``deadline`` (time.monotonic)."""
        conn, process = self._conns[w], self._processes[w]
        while True:
            try:
                if conn.poll(min(0.1, max(0.0, deadline - time.monotonic()))):
                    message: tuple[Any, ...] = conn.recv()
                    break
            except (EOFError, OSError):
                message = ("dead",)
                break
            if not process.is_alive():
                message = ("dead",)
                break
            if time.monotonic() >= deadline:
                process.kill()  # it would not answer "close" either: do not wait the shutdown grace for it
                raise self._fail(
                    WorkerTimeout(f"no answer within {self.timeout:g} s (hung or too slow)", w, self._envs(w))
                )
        if message[0] == "error":
            raise self._fail(WorkerError("raised an exception", w, self._envs(w), message[1]))
        if message[0] == "dead":
            process.join(1.0)
            raise self._fail(WorkerError(f"died (exit code {process.exitcode})", w, self._envs(w)))
        return message

    def _send(self, w: int, command: tuple[Any, ...]) -> None:
        try:
            self._conns[w].send(command)
        except (OSError, ValueError):
            self._processes[w].join(1.0)
            raise self._fail(
                WorkerError(f"died (exit code {self._processes[w].exitcode})", w, self._envs(w))
            ) from None

    def _all(self, commands: list[tuple[Any, ...]], answer: str) -> None:
        """Send one command to each worker and wait for each to answer ``answer``."""
        for w, command in enumerate(commands):
            self._send(w, command)
        deadline = time.monotonic() + self.timeout
        for w in range(self.n_processes):
            message = self._receive(w, deadline)
            if message[0] != answer:
                raise self._fail(
                    WorkerError(f"answered {message[0]!r} instead of {answer!r}", w, self._envs(w))
                )

    def _check_open(self, call: str) -> None:
        if self._closed:
            raise RuntimeError(f"{NAME}: {call}() after close()")

    # ------------------------------------------------------------------ buffers

    def _allocate(self, agent_info: DictTensor, env_info: DictTensor) -> None:
        """Infer the specs from one probe step in this process, allocate shared buffers, hand them out."""
        agent_factory, agent_args, env_factory, env_args = self._factories
        probe = Group(
            agent_factory, agent_args, env_factory, env_args, self.n_envs, self._seed, self._seed, "probe"
        )
        try:
            rows = slice(0, self.n_envs)
            probe.reset(agent_info[rows], env_info[rows], auto_reset=self.mode != "episodes")
            info, steps = probe.run(1)
        finally:
            probe.close()
        b, t = self.n_slots * self.n_envs, self.n_timesteps
        step_buffer = {
            k: torch.zeros((b, t, *v.shape[2:]), dtype=v.dtype).share_memory_() for k, v in steps.items()
        }
        info_buffer = {
            k: torch.zeros((b, *v.shape[1:]), dtype=v.dtype).share_memory_() for k, v in info.items()
        }
        lengths = torch.zeros(b, dtype=torch.int64).share_memory_()
        versions = torch.zeros(self.n_slots, dtype=torch.int64).share_memory_()
        self._buffers = (step_buffer, info_buffer, lengths, versions)
        commands = []
        for w in range(self.n_processes):
            slots = range(self.n_slots) if self.mode == "stream" else [w]
            views = {
                s: {k: v[s * self.n_envs : (s + 1) * self.n_envs] for k, v in step_buffer.items()}
                for s in slots
            }
            commands.append(("attach", views, info_buffer, lengths, versions))
        self._all(commands, "ok")

    def _copy_out(self, rows: slice) -> Trajectories:
        """A copy of some rows of the shared buffers, on ``self.device``."""
        assert self._buffers is not None
        step_buffer, info_buffer, lengths, versions = self._buffers
        copy: Callable[[torch.Tensor], torch.Tensor]
        if self.device.type == "cuda":

            def copy(v: torch.Tensor) -> torch.Tensor:
                return v[rows].pin_memory().to(self.device, non_blocking=True)

        elif self.device.type == "cpu":

            def copy(v: torch.Tensor) -> torch.Tensor:
                return v[rows].clone()

        else:

            def copy(v: torch.Tensor) -> torch.Tensor:
                return v[rows].to(self.device)

        slot_of_row = torch.arange(rows.start, rows.stop) // self.n_envs
        info = {k: copy(v) for k, v in info_buffer.items()}
        info["policy_version"] = versions[slot_of_row].to(self.device)
        steps = DictTensor({k: copy(v) for k, v in step_buffer.items()})
        return Trajectories(
            DictTensor(info), TemporalDictTensor(steps, copy(lengths), n_timesteps=self.n_timesteps)
        )

    # ------------------------------------------------------------------ the contract

    def reset(self, agent_info: DictTensor | None = None, env_info: DictTensor | None = None) -> None:
        """Start new episodes everywhere with these z and w (see ``LocalBatcher.reset``).

        The first call also probes the agent and environment once in this
        process to size the shared buffers. In "stream" mode, the workers start
        filling slots at once.

        Raises:
            TypeError, ValueError: as ``LocalBatcher.reset``.
            WorkerError: if a worker raised or died (the batcher is then closed).
            RuntimeError: after ``close``.
        """
        self._check_open("reset")
        rows = self.n_processes * self.n_envs
        agent_info = _checks.info(NAME, "agent_info", agent_info, rows)
        env_info = _checks.info(NAME, "env_info", env_info, rows)
        self._info_keys = _checks.same_info(NAME, self._info_keys, agent_info, env_info)
        self._stop_stream()
        self._drain()
        if self._buffers is None:
            self._allocate(agent_info, env_info)
        auto_reset = self.mode != "episodes"
        commands = []
        for w in range(self.n_processes):
            part = slice(w * self.n_envs, (w + 1) * self.n_envs)
            commands.append(("reset", agent_info[part].clone(), env_info[part].clone(), auto_reset))
        self._all(commands, "ok")
        self._started, self._ran_once = True, False
        if self._board is not None:
            self._warn_if_initial_weights()
            self._board.clear()
            for w in range(self.n_processes):
                self._send(w, ("stream",))
            self._streaming = True

    def _drain(self) -> None:
        """Wait for the answers of an execute() whose batch was never taken."""
        if self._waiting:
            deadline = time.monotonic() + self.timeout
            for w in sorted(self._waiting):
                self._receive(w, deadline)
            self._waiting.clear()

    def _stop_stream(self) -> None:
        if self._streaming:
            self._streaming = False
            self._all([("stop",)] * self.n_processes, "stopped")

    def _warn_if_initial_weights(self) -> None:
        if self._warn_initial_weights:
            self._warn_initial_weights = False
            warnings.warn(_checks.initial_weights_warning(NAME), UserWarning, stacklevel=3)

    def execute(self) -> None:
        """Start acquiring the next batch and return at once ("fixed" and "episodes" modes).

        Warns:
            UserWarning: at the first call, if the workers act with the agent's
                own initial weights (see the class docstring).

        Raises:
            RuntimeError: before ``reset``, after ``close``, in "stream" mode,
                or while the previous batch has not been taken with ``get``.
        """
        self._check_open("execute")
        if self.mode == "stream":
            raise RuntimeError(f"{NAME}: execute() is not used in 'stream' mode; call get()")
        if not self._started:
            raise RuntimeError(f"{NAME}: call reset() before execute()")
        if self._waiting:
            raise RuntimeError(f"{NAME}: execute() called twice; take the first batch with get()")
        self._warn_if_initial_weights()
        restart = self.mode == "episodes" and self._ran_once
        for w in range(self.n_processes):
            self._send(w, ("run", w, restart))
        self._waiting = set(range(self.n_processes))
        self._ran_once = True

    @overload
    def get(self, blocking: Literal[True] = True, max_staleness: int | None = None) -> Trajectories: ...
    @overload
    def get(self, blocking: bool, max_staleness: int | None = None) -> Trajectories | None: ...
    def get(self, blocking: bool = True, max_staleness: int | None = None) -> Trajectories | None:
        """The next batch: a copy of the shared buffers, on ``device``.

        In "fixed" and "episodes" modes, the trajectories of the last
        ``execute()`` (``n_processes * n_envs`` rows). In "stream" mode, the
        oldest finished slot (``n_envs`` rows), whose slot is then free again.
        ``info["policy_version"]`` tells how many ``update()`` calls had been
        made when each row's trajectory started.

        Args:
            blocking: wait (at most ``timeout`` seconds) for the batch; with
                False, return None at once if it is not ready.
            max_staleness: "stream" mode only: discard finished slots produced
                by a policy more than this many updates old, and keep waiting.
                Each discarded slot adds one to ``discarded``.

        Raises:
            WorkerTimeout: if the batch is not ready within ``timeout`` seconds.
            WorkerError: if a worker raised or died (the batcher is then closed).
            RuntimeError: without a pending ``execute()`` or after ``close``.
        """
        self._check_open("get")
        if self.mode == "stream":
            return self._get_stream(blocking, max_staleness)
        if max_staleness is not None:
            raise ValueError(f"{NAME}.get: max_staleness is for mode='stream' only")
        if not self._waiting:
            raise RuntimeError(f"{NAME}: get() without a pending execute(); call execute() first")
        deadline = time.monotonic() + self.timeout
        for w in sorted(self._waiting):
            if not blocking and not self._conns[w].poll(0) and self._processes[w].is_alive():
                return None
            message = self._receive(w, deadline)
            if message[0] != "done":
                raise self._fail(WorkerError(f"answered {message[0]!r} instead of 'done'", w, self._envs(w)))
            self._waiting.discard(w)
        return self._copy_out(slice(0, self.n_processes * self.n_envs))

    def _get_stream(self, blocking: bool, max_staleness: int | None) -> Trajectories | None:
        board = self._board
        if not self._streaming or board is None:
            raise RuntimeError(f"{NAME}: call reset() before get()")
        deadline = time.monotonic() + self.timeout
        while True:
            self._check_workers()  # even when slots are ready: the other workers may keep filling them
            slot = board.take()
            if slot is None:
                if not blocking:
                    return None
                if time.monotonic() >= deadline:
                    raise self._fail(
                        WorkerTimeout(
                            f"no trajectory finished within {self.timeout:g} s", 0, range(self.n_envs)
                        )
                    )
                time.sleep(WAIT_S)
                continue
            assert self._buffers is not None
            if (
                max_staleness is not None
                and self.policy_version() - int(self._buffers[3][slot]) > max_staleness
            ):
                board.release(slot)  # too old: let a worker fill it again with the current policy
                self.discarded += 1
                continue
            batch = self._copy_out(slice(slot * self.n_envs, (slot + 1) * self.n_envs))
            board.release(slot)
            return batch

    def _check_workers(self) -> None:
        """Raise for a worker that reported an error or died while streaming."""
        for w in range(self.n_processes):
            if self._conns[w].poll(0) or not self._processes[w].is_alive():
                self._receive(w, time.monotonic())

    def update(self, weights: Mapping[str, torch.Tensor]) -> None:
        """Copy new weights into shared memory; each worker loads them before its next trajectory.

        One copy per tensor, then the version goes up by one.

        Raises:
            TypeError, ValueError: if the keys, shapes or dtypes differ from the agent's ``state_dict``.
            RuntimeError: after ``close``.
        """
        self._check_open("update")
        _checks.weights(NAME, self._weights, weights)
        self._counter += 1  # odd: writing
        for key, value in self._weights.items():
            value.copy_(weights[key])
        self._counter += 1  # even: done
        self._warn_initial_weights = False

    def policy_version(self) -> int:
        """How many times ``update()`` was called."""
        return int(self._counter[0]) // 2

    def close(self) -> None:
        """Stop the workers and release the shared memory. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        if self._streaming:
            self._streaming = False
            for conn in self._conns:
                with contextlib.suppress(OSError, ValueError):
                    conn.send(("stop",))
        self._finalizer()
        self._buffers = None
        self._board = None  # its lock is a named semaphore in /dev/shm until it is freed

    def __enter__(self) -> MultiprocessBatcher:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
