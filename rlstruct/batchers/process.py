"""MultiprocessBatcher: agent-environment pairs in worker processes, writing into shared memory.

The contract is ``LocalBatcher``'s (``docs/batchers.md``); the layout of the
shared buffers, the failures and the shutdown are in ``docs/multiprocess.md``;
the protocol the workers speak is in ``rlstruct.batchers._worker``. Each
worker hands over once per trajectory, through a pipe: why, with the costs
measured, is in ``docs/performance.md``.

The batcher is in one ``State`` at a time (its docstring says which calls
each allows); any failure of a worker closes it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pickle
import sys
import threading
import time
import warnings
from collections.abc import Callable, Mapping
from multiprocessing import resource_sharer
from types import TracebackType
from typing import Any, Literal, overload

import torch
import torch.multiprocessing as mp

from rlstruct.agent import Agent
from rlstruct.batchers import _checks
from rlstruct.batchers._checks import State
from rlstruct.batchers._group import Group, GroupSpec
from rlstruct.batchers._messages import (
    Answer,
    Attach,
    Command,
    Done,
    Ok,
    Ready,
    Reset,
    Run,
    Stop,
    Stopped,
    Stream,
)
from rlstruct.batchers._pool import WorkerPool
from rlstruct.batchers._shared import SharedBuffers, SharedWeights
from rlstruct.batchers._slots import WAIT_S, SlotBoard
from rlstruct.batchers._storage import STORED, Layout, Staging, filled_next, full_layout
from rlstruct.batchers._worker import WorkerSpec
from rlstruct.checks import check_device, check_kwargs, is_int
from rlstruct.dicttensor import DictTensor
from rlstruct.env import Environment
from rlstruct.errors import AgentError, WorkerError, describe
from rlstruct.temporal import TemporalDictTensor
from rlstruct.trajectories import Trajectories

__all__ = ["MultiprocessBatcher", "choose_start_method"]

Mode = Literal["fixed", "episodes", "stream"]
NAME = "MultiprocessBatcher"


def choose_start_method() -> str:
    """The start method ``start_method="auto"`` picks for worker processes, from this process's state now.

    ``"fork"`` on Linux, called from the main thread, while this process runs
    no other Python thread (multiprocessing's own resource sharer aside) and
    has not initialised CUDA: a forked worker starts at once, without
    importing torch again (about 0.1 s to the first batch of 2 x 8 CartPole
    workers, against 1.3-1.5 s with ``"spawn"``, see docs/performance.md).
    Workers set torch to one thread before they compute anything, so the
    parent's OpenMP thread pool is never entered in a child. ``"spawn"``
    otherwise: a thread of the parent (a logger's, TensorBoard's, Ray's)
    may hold a lock that would stay held forever in a forked child, a forked
    child cannot use the parent's CUDA context, and other systems do not
    fork safely.

    Returns:
        ``"fork"`` or ``"spawn"``.

    Examples:
        >>> from rlstruct.batchers import choose_start_method
        >>> choose_start_method() in ("fork", "spawn")
        True
    """
    if sys.platform.startswith("linux") and not _other_threads() and not torch.cuda.is_initialized():
        return "fork"
    return "spawn"


def _other_threads() -> list[threading.Thread]:
    """The Python threads a fork could catch holding a lock (all, if this is not the main thread).

    The thread of multiprocessing's resource sharer is left out: it serves
    the file descriptors of shared tensors sent to workers (started by a
    batcher's first ``reset``), and resets itself in a forked child.
    """
    if threading.current_thread() is not threading.main_thread():
        return threading.enumerate()
    sharer = getattr(getattr(resource_sharer, "_resource_sharer", None), "_thread", None)
    return [t for t in threading.enumerate() if t is not threading.main_thread() and t is not sharer]


class MultiprocessBatcher:
    """Runs ``n_processes`` workers, each with an agent copy and ``n_envs`` environments.

    Workers write trajectories step by step into buffers in shared memory;
    ``get()`` copies them out. Same seeds and layout give the same trajectories
    as ``LocalBatcher`` with the same arguments.

    Args:
        agent_factory: makes an agent, ``agent_factory(**agent_args)``, in every
            worker (and once here); must be picklable.
        agent_args: keyword arguments for ``agent_factory``; must be picklable.
        env_factory: makes an environment,
            ``env_factory(n_envs=n_envs, seed=seed, **env_args)``; must be picklable.
        env_args: keyword arguments for ``env_factory``; must be picklable.
        n_envs: environment instances per worker.
        n_timesteps: T, as for ``LocalBatcher``.
        mode: "fixed" or "episodes" as for ``LocalBatcher``, or "stream": after
            ``reset()``, workers keep filling free slots with fixed-length
            trajectories while the learner takes finished ones with ``get()``
            (no ``execute()``).
        seed: the base seed, as for ``LocalBatcher``.
        n_processes: the number of worker processes (2 by default).
        n_slots: in "stream" mode, how many trajectory slots of ``n_envs``
            rows the buffer holds (default ``2 * n_processes``; at least
            ``n_processes + 1``). When all are full, workers wait: the buffer
            never grows.
        timeout: seconds a batch may take from ``execute()``, a stream worker
            may go without publishing a trajectory (waiting for a free slot
            does not count), and any other wait for the workers may last,
            before ``WorkerTimeout`` is raised (and the batcher closed).
        start_timeout: seconds the workers may take to start (import the
            libraries, make their agent and environments), counted from
            construction and checked at the first ``reset()``.
        start_method: "auto" (default: "fork" on Linux while this process
            runs no other Python thread and has no CUDA context, "spawn"
            otherwise; see ``choose_start_method``), "spawn", "forkserver" or
            "fork". The method used is ``self.start_method``.
        device: where ``get()`` puts the trajectories, checked here: a device
            this machine cannot use raises at once. From CUDA, they go
            through pinned staging buffers with ``non_blocking=True``.
            ``self.device`` is it as tensors report it (``"cuda"`` becomes
            ``cuda:0``, the current CUDA device).
        weights: the weights every worker's agent copy loads
            (``load_state_dict``) before it acts, normally the learner's
            ``model.state_dict()`` (on any device); checked as ``update()``
            checks them, before any worker starts. None: the weights of the
            agent made in the main process at construction.
        layout: "full" or "compact", as for ``LocalBatcher``: with "compact",
            the workers write the ``next/`` keys only where they differ from
            the following step's keys, and ``get()`` fills in the others as
            it copies the batch out (on ``device``). The batches are the same
            (for agents that do not modify their observation in place).

    Raises:
        ValueError, TypeError: for bad arguments (``weights``, ``device``
            and ``env_args`` holding ``n_envs`` or ``seed`` included), as
            ``LocalBatcher``; TypeError for a factory or arguments that
            cannot be pickled, naming which (and the key);
            ``rlstruct.errors.AgentError`` (a TypeError) for an
            ``agent_factory`` that does not make an ``Agent``. An
            ``env_factory`` that does not return an ``Environment`` is
            found at the first ``reset()``, which makes one (in the probe
            step), not here.

    Warns:
        UserWarning: once, at the first ``execute()`` (at ``reset()`` in
            "stream" mode, where the workers start at once), if the agent has
            a non-empty ``state_dict`` and neither ``weights`` nor
            ``update()`` gave it the learner's, as ``LocalBatcher``.

    ``update(weights)`` replaces the weights everywhere; each worker loads
    them before its next trajectory.

    Examples:
        >>> from rlstruct import GymEnv, MultiprocessBatcher
        >>> from rlstruct.testing import RandomAgent
        >>> with MultiprocessBatcher(RandomAgent, {"n_actions": 2}, GymEnv, {"env": "CartPole-v1"},
        ...                          n_envs=4, n_timesteps=8, n_processes=2) as batcher:
        ...     batcher.reset()
        ...     batcher.execute()
        ...     batch = batcher.get()
        >>> batch.trajectories["next/reward"].shape
        torch.Size([8, 8])
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
        start_timeout: float = 120.0,
        start_method: str = "auto",
        device: torch.device | str = "cpu",
        weights: Mapping[str, torch.Tensor] | None = None,
        layout: Layout = "full",
    ) -> None:
        self.state = State.CLOSED  # until the workers exist
        self._failure: str | None = None  # the worker failure that closed the batcher, for later calls
        self.n_envs = _checks.positive_int(NAME, "n_envs", n_envs)
        self.n_timesteps = _checks.positive_int(NAME, "n_timesteps", n_timesteps)
        self.n_processes = _checks.positive_int(NAME, "n_processes", n_processes)
        if mode not in ("fixed", "episodes", "stream"):
            raise ValueError(f"{NAME}: mode must be 'fixed', 'episodes' or 'stream', got {mode!r}")
        if mode == "stream":
            n_slots = 2 * self.n_processes if n_slots is None else n_slots
            if not is_int(n_slots) or n_slots <= self.n_processes:
                raise ValueError(
                    f"{NAME}: n_slots must be an int > n_processes ({self.n_processes}), got {n_slots!r}"
                )
            n_slots = int(n_slots)  # a NumPy int counts too
        elif n_slots is not None:
            raise ValueError(
                f"{NAME}: n_slots is for mode='stream' only, got n_slots={n_slots!r} with mode={mode!r}"
            )
        self.timeout = _checks.seconds(NAME, "timeout", timeout)
        self.start_timeout = _checks.seconds(NAME, "start_timeout", start_timeout)
        if start_method != "auto" and start_method not in mp.get_all_start_methods():
            raise ValueError(
                f"{NAME}: start_method must be 'auto' or one of {mp.get_all_start_methods()}, "
                f"got {start_method!r}"
            )
        if not is_int(seed):
            raise TypeError(f"{NAME}: seed must be an int, got {describe(seed)}")
        seed = int(seed)
        self.device = check_device(NAME, device, usable=True)
        _checks.layout(NAME, layout)
        _checks.env_factory(NAME, env_factory)
        self.layout: Layout = layout
        for name, value in (
            ("agent_factory", agent_factory),
            ("agent_args", agent_args),
            ("env_factory", env_factory),
            ("env_args", env_args),
        ):
            _checks.picklable(NAME, name, value)
        check_kwargs(NAME, "agent_args", agent_args)
        _checks.env_args(NAME, env_args)
        self.mode: Mode = mode
        self.n_slots = n_slots if n_slots is not None else self.n_processes
        self._factories = (agent_factory, env_factory)
        self._specs = [
            GroupSpec(w, f"worker {w}", dict(agent_args), dict(env_args), self.n_envs, seed, layout)
            for w in range(self.n_processes)
        ]

        agent = agent_factory(**agent_args)
        if not isinstance(agent, Agent):
            raise AgentError(f"agent_factory must return an rlstruct.Agent, got {describe(agent)}")
        self._weights = SharedWeights(agent.state_dict())
        agent.close()
        if weights is not None:
            _checks.weights(NAME, self._weights.tensors, weights, call="__init__")
            self._weights.write(weights)
            self._weights.counter.zero_()  # the weights workers start with are version 0
        # warn when the workers first act if they would act with weights nobody gave them
        self._warn_initial_weights = weights is None and len(self._weights.tensors) > 0
        self.discarded = 0
        """Trajectories (slots of ``n_envs x n_timesteps`` steps) that ``get(max_staleness=...)``
        dropped as too old: a learner that counts its env steps can count these too."""

        self.start_method = choose_start_method() if start_method == "auto" else start_method
        """The start method of the workers: the one given, or what "auto" chose at construction."""
        ctx = mp.get_context(self.start_method)
        self._board = (
            SlotBoard(self.n_slots, self.n_processes, ctx, self.timeout) if mode == "stream" else None
        )
        self.state = State.NEEDS_RESET
        # The factories travel as bytes the worker unpickles itself, so that one it cannot import is
        # reported with its traceback; their arguments go through multiprocessing (Events, shared tensors).
        factories = pickle.dumps((agent_factory, env_factory))

        def spec(w: int, inherited: tuple[int, ...]) -> WorkerSpec:
            return WorkerSpec(
                index=w,
                factories=factories,
                group=self._specs[w],
                n_timesteps=self.n_timesteps,
                weights=self._weights,
                board=self._board,
                parent=os.getpid(),
                timeout=self.timeout,
                inherited=inherited,
            )

        self._pool = WorkerPool(ctx, spec, self.n_processes, self.n_envs, self.timeout, self.start_timeout)
        self._processes, self._conns = self._pool.processes, self._pool.conns
        self._info_spec: _checks.InfoSpec | None = None  # z and w as every later reset must give them
        self._buffers_spec: _checks.InfoSpec | None = None  # z and w as the buffers were made for
        self._buffers: SharedBuffers | None = None
        self._episodes_run = False  # "episodes" mode: the current episodes were run, the next batch restarts
        self._pending: set[int] = set()  # RUNNING: the workers whose Done was not read yet
        self._deadline = 0.0  # RUNNING: when the batch must be ready
        self._staging = Staging(self.device)  # CUDA: the pinned buffers get() copies through

    # ------------------------------------------------------------------ workers

    def n_elems(self) -> int:
        """The number of rows a ``get()`` returns: ``n_processes * n_envs``, or ``n_envs`` in "stream" mode."""
        return self.n_envs if self.mode == "stream" else self.n_processes * self.n_envs

    def _fail(self, error: WorkerError) -> WorkerError:
        """Close everything, and return ``error`` for the caller to raise."""
        if self.state is not State.CLOSED:
            self._failure = f"{type(error).__name__}: {str(error).splitlines()[0]}"  # without the traceback
        self.close()
        return error

    def _timed_out(self, w: int, what: str) -> WorkerError:
        """Kill worker ``w`` (it would not answer ``Close`` either) and close everything."""
        return self._fail(self._pool.timed_out(w, what))

    def _read(self, w: int) -> Answer | None:
        """The message worker ``w`` has sent, if any; a failure closes the batcher (see ``WorkerPool.read``)."""
        try:
            return self._pool.read(w)
        except WorkerError as error:
            raise self._fail(error) from error.__cause__

    def _gather(
        self, workers: set[int], answer: type[Answer], deadline: float, blocking: bool = True
    ) -> bool:
        """``WorkerPool.gather``; a failure closes the batcher."""
        try:
            return self._pool.gather(workers, answer, deadline, blocking)
        except WorkerError as error:
            raise self._fail(error) from error.__cause__

    def _send(self, w: int, command: Command) -> None:
        try:
            self._pool.send(w, command)
        except WorkerError as error:
            raise self._fail(error) from None

    def _all(self, commands: list[Command], answer: type[Answer]) -> None:
        """Send one command to each worker and wait for each to answer ``answer``."""
        for w, command in enumerate(commands):
            self._send(w, command)
        self._gather(set(range(self.n_processes)), answer, time.monotonic() + self.timeout)

    def _check_open(self, call: str) -> None:
        if self.state is State.CLOSED:
            why = (
                "" if self._failure is None else f"; it closed itself when a worker failed ({self._failure})"
            )
            raise RuntimeError(f"{NAME}: {call}() after close(){why}")

    # ------------------------------------------------------------------ buffers

    def _probe(self, agent_info: DictTensor, env_info: DictTensor) -> tuple[DictTensor, DictTensor]:
        """One step of worker 0's rows in this process: the info and steps every buffer is shaped after."""
        agent_factory, env_factory = self._factories
        probe = Group(agent_factory, env_factory, dataclasses.replace(self._specs[0], name="probe"))
        try:
            if probe.device.type != "cpu":
                raise ValueError(
                    f"{NAME}: the environment is on {probe.device}; workers step environments on the CPU "
                    "and write into shared memory there: make it on the CPU, or use a LocalBatcher "
                    "for an environment on a GPU"
                )
            rows = slice(0, self.n_envs)
            probe.reset(agent_info[rows], env_info[rows], auto_reset=self.mode != "episodes")
            info, steps = probe.run(1)
            return info, DictTensor(dict(steps.items()))
        except Exception as error:
            add_note = getattr(error, "add_note", None)  # Python 3.11+: shown under the traceback
            if add_note is not None:
                add_note(
                    f"{NAME}: raised by the probe step that the first reset() runs in the main process "
                    "(worker 0's agent and environments) to size the shared buffers; the workers keep "
                    "running and the next reset() may give other z and w"
                )
            raise
        finally:
            probe.close()

    def _start(self, agent_info: DictTensor, env_info: DictTensor) -> None:
        """The first reset: probe, wait for the workers to start, allocate the buffers and attach them."""
        info, steps = self._probe(agent_info, env_info)  # while the workers start
        self._gather(
            {w for w in range(self.n_processes) if not self._pool.started[w]},
            Ready,
            self._pool.start_deadline,
        )
        self._pool.started = [True] * self.n_processes
        self._buffers = SharedBuffers.allocate(info, steps, self.n_slots, self.n_timesteps)
        commands: list[Command] = []
        for w in range(self.n_processes):
            slots = list(range(self.n_slots)) if self.mode == "stream" else [w]
            commands.append(Attach(self._buffers, slots))
        self._all(commands, Ok)

    def _copy_out(self, slots: slice) -> Trajectories:
        """A copy of some slots of the shared buffers, on ``self.device``."""
        buffers = self._attached()
        rows = slice(slots.start * self.n_envs, slots.stop * self.n_envs)
        slot_of_row = torch.arange(slots.start, slots.stop).repeat_interleave(self.n_envs)
        tensors = {("info", k): v[rows] for k, v in buffers.info.items()}
        steps = {k: v[rows] for k, v in buffers.steps.items()}
        tensors[("info", "policy_version")] = buffers.versions[slot_of_row]
        tensors[("lengths", "")] = buffers.lengths[rows]
        if self.device.type == "cpu":
            # a compact layout's next/ keys are filled in straight from the shared buffers
            compact = self.layout == "compact"
            filled = filled_next(steps) if compact else {}
            kept = [k for k in steps if not (compact and k == STORED)]
            tensors |= {("steps", k): steps[k] for k in kept if k not in filled}
            out = {k: v.clone() for k, v in tensors.items()}
            out |= {("steps", k): v for k, v in filled.items()}
            steps = {k: out[("steps", k)] for k in kept}
        else:  # the compact layout crosses to the device as it is, and is filled in there
            tensors |= {("steps", k): v for k, v in steps.items()}
            if self.device.type == "cuda":
                out = self._staging.to_device(tensors)
            else:
                out = {k: v.to(self.device) for k, v in tensors.items()}
            steps = {k: v for (part, k), v in out.items() if part == "steps"}
            if self.layout == "compact":
                steps = full_layout(steps)
        info = {k: v for (part, k), v in out.items() if part == "info"}
        n, device = rows.stop - rows.start, self.device
        # unchecked constructors: the workers wrote what the buffers were made for, and a check of
        # the lengths on the device would wait for the transfers
        trajectories = TemporalDictTensor.unchecked(
            DictTensor.unchecked(steps, n, device), out[("lengths", "")], self.n_timesteps
        )
        return Trajectories(DictTensor.unchecked(info, n, device), trajectories)

    # ------------------------------------------------------------------ the contract

    def reset(self, agent_info: DictTensor | None = None, env_info: DictTensor | None = None) -> None:
        """Start new episodes everywhere with these z and w (see ``LocalBatcher.reset``).

        The first call also probes the agent and environment once in this
        process to size the shared buffers, and waits (at most until
        ``start_timeout`` after construction) for the workers to start. In
        "stream" mode, the workers start filling slots at once. A batch that
        was executed and not taken is dropped.

        Raises:
            TypeError, ValueError: as ``LocalBatcher.reset``: once a batch has
                been taken, later resets must keep the keys, dtypes and row
                shapes of z and w; nothing is cast. (Before, a reset with
                others probes again and makes new buffers.)
            Exception: whatever the agent or environment raise in the probe
                step of the first reset, with a note saying so; the workers keep
                running, the next reset may give other keys, and ``execute()``
                waits for a reset that succeeded.
            WorkerError: if a worker raised, died or could not start (the
                batcher is then closed); ``WorkerTimeout`` if it did not start
                within ``start_timeout`` or answer within ``timeout``.
            RuntimeError: after ``close``, or after an ``update()`` that failed
                half-way (until the next ``update()`` succeeds).
        """
        self._check_open("reset")
        self._check_weights("reset")
        rows = self.n_processes * self.n_envs
        agent_info = _checks.info(NAME, "agent_info", agent_info, rows)
        env_info = _checks.info(NAME, "env_info", env_info, rows)
        spec = _checks.same_info(NAME, self._info_spec, agent_info, env_info)
        if self.state is State.STREAMING:
            for w in range(self.n_processes):
                self._send(w, Stop())
            self._on_board("wake", self.n_processes)  # workers waiting for a free slot read Stop now
            self._gather(set(range(self.n_processes)), Stopped, time.monotonic() + self.timeout)
        elif self.state is State.RUNNING:  # the answers of a batch that was never taken
            self._gather(self._pending, Done, self._deadline)
        self.state = State.NEEDS_RESET  # until this reset succeeds
        if self._buffers is None or spec != self._buffers_spec:  # no batch yet: z and w may still change
            self._start(agent_info, env_info)
            self._buffers_spec = spec
        auto_reset = self.mode != "episodes"
        commands: list[Command] = []
        for w in range(self.n_processes):
            part = slice(w * self.n_envs, (w + 1) * self.n_envs)
            commands.append(Reset(agent_info[part].clone(), env_info[part].clone(), auto_reset))
        self._all(commands, Ok)
        self._episodes_run = False
        self.state = State.READY
        if self._board is not None:
            self._warn_if_initial_weights()
            self._on_board("clear")
            for w in range(self.n_processes):
                self._send(w, Stream())
            self.state = State.STREAMING

    def _warn_if_initial_weights(self) -> None:
        if self._warn_initial_weights:
            self._warn_initial_weights = False
            warnings.warn(_checks.initial_weights_warning(NAME), UserWarning, stacklevel=3)

    def _check_weights(self, call: str) -> None:
        if self._weights.half_written():
            raise RuntimeError(
                f"{NAME}: {call}() after an update() that failed half-way; call update() again first"
            )

    def execute(self) -> None:
        """Start acquiring the next batch and return at once ("fixed" and "episodes" modes).

        The batch must be ready within ``timeout`` seconds from here.

        Warns:
            UserWarning: at the first call, if the workers act with the agent's
                own initial weights (see the class docstring).

        Raises:
            RuntimeError: before ``reset``, after ``close``, in "stream" mode,
                while the previous batch has not been taken with ``get``, or
                after an ``update()`` that failed half-way.
        """
        self._check_open("execute")
        if self.mode == "stream":
            raise RuntimeError(f"{NAME}: execute() is not used in 'stream' mode; call get()")
        if self.state is State.NEEDS_RESET:
            raise RuntimeError(f"{NAME}: call reset() before execute()")
        if self.state is State.RUNNING:
            raise RuntimeError(f"{NAME}: execute() called twice; take the first batch with get()")
        self._check_weights("execute")
        self._warn_if_initial_weights()
        restart = self.mode == "episodes" and self._episodes_run
        for w in range(self.n_processes):
            self._send(w, Run(w, restart))
        self._pending = set(range(self.n_processes))
        self._deadline = time.monotonic() + self.timeout
        self._episodes_run = True
        self.state = State.RUNNING
        self._info_spec = self._buffers_spec  # the first batch fixes z and w, as in LocalBatcher

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
            blocking: wait for the batch; with False, return None at once if it
                is not ready (and still raise once it is overdue).
            max_staleness: "stream" mode only: discard finished slots produced
                by a policy more than this many updates old, and keep waiting.
                Each discarded slot adds one to ``discarded``.

        Returns:
            ``Trajectories`` on ``device``; None only when ``blocking`` is False.

        Raises:
            WorkerTimeout: once ``timeout`` seconds have passed since
                ``execute()`` without the batch ("fixed", "episodes"), or a
                stream worker published nothing for ``timeout`` seconds
                without waiting for a free slot, naming that worker; blocking
                or not. The batcher is then closed.
            WorkerError: if a worker raised or died (the batcher is then closed).
            TypeError: for a ``blocking`` that is not a bool.
            ValueError: for ``max_staleness`` outside "stream" mode, or not an
                int >= 0.
            RuntimeError: without a pending ``execute()`` or after ``close``.
        """
        self._check_open("get")
        blocking = _checks.blocking(NAME, blocking)
        if self.mode == "stream":
            return self._get_stream(blocking, max_staleness)
        if max_staleness is not None:
            raise ValueError(f"{NAME}.get: max_staleness is for mode='stream' only")
        if self.state is not State.RUNNING:
            raise RuntimeError(f"{NAME}: get() without a pending execute(); call execute() first")
        if not self._gather(self._pending, Done, self._deadline, blocking):
            return None
        self.state = State.READY
        return self._copy_out(slice(0, self.n_processes))

    def _get_stream(self, blocking: bool, max_staleness: int | None) -> Trajectories | None:
        max_staleness = _checks.max_staleness(NAME, max_staleness)
        if self.state is not State.STREAMING:
            raise RuntimeError(f"{NAME}: call reset() before get()")
        self._check_weights("get")
        deadline = time.monotonic() + self.timeout
        # no local names for the board here: a traceback that kept it alive would keep its
        # semaphore in /dev/shm as long as the exception lives
        while True:
            self._check_stream_workers()  # even when slots are ready: the other workers may keep filling them
            wait = min(WAIT_S, max(0.0, deadline - time.monotonic())) if blocking else 0.0
            slot = self._on_board("take", wait)  # blocks until a worker publishes, or `wait` passed
            if slot is None:
                if not blocking:
                    return None
                if time.monotonic() >= deadline:  # every worker beats, yet nothing came: name the quietest
                    quietest = self._slot_board().silent(-1.0)[0]
                    raise self._timed_out(quietest, f"no trajectory finished within {self.timeout:g} s")
                continue
            try:
                version = int(self._attached().versions[slot])
                stale = max_staleness is not None and self.policy_version() - version > max_staleness
                batch = None if stale else self._copy_out(slice(slot, slot + 1))
            finally:
                self._on_board("release", slot)  # too old, or copied: a worker may fill it again
            if batch is not None:
                self._info_spec = self._buffers_spec  # the first batch fixes z and w
                return batch
            self.discarded += 1

    def _on_board(self, call: str, *args: float) -> Any:
        """``SlotBoard.<call>(*args)``; a lock held past the timeout closes the batcher, naming a worker.

        A worker that died holding the lock is reported as dead; otherwise the
        quietest worker is named. The error is raised outside the ``except``
        block, so that it does not keep the board (and its semaphore) alive.
        """
        try:
            return getattr(self._slot_board(), call)(*args)
        except TimeoutError:
            pass
        self._check_stream_workers()
        quietest = self._slot_board().silent(-1.0)[0]
        raise self._timed_out(quietest, f"the slot board's lock stayed taken for {self.timeout:g} s")

    def _slot_board(self) -> SlotBoard:
        assert self._board is not None  # made at construction in "stream" mode, dropped at close
        return self._board

    def _attached(self) -> SharedBuffers:
        assert self._buffers is not None  # allocated at the first reset, dropped at close
        return self._buffers

    def _check_stream_workers(self) -> None:
        """Raise for a streaming worker that reported an error, died, or published nothing for ``timeout``."""
        for w in range(self.n_processes):
            message = self._read(w)
            if message is not None:
                raise self._fail(WorkerError(f"sent {message!r} while streaming", w, self._pool.rows(w)))
        silent = self._slot_board().silent(self.timeout)
        if silent:
            others = f" (so did workers {silent[1:]})" if len(silent) > 1 else ""
            raise self._timed_out(
                silent[0], f"published nothing for more than {self.timeout:g} s (hung or too slow){others}"
            )

    def update(self, weights: Mapping[str, torch.Tensor]) -> None:
        """Copy new weights into shared memory; each worker loads them before its next trajectory.

        A worker that has not started the trajectory of a pending
        ``execute()`` yet loads them for it, where ``LocalBatcher`` has
        already made that batch: ``info["policy_version"]`` says, row by row,
        which weights made a batch. Call ``update()`` before ``execute()``
        for a batch made with given weights.

        One copy per tensor, then the version goes up by one. If a copy fails
        or is interrupted (Ctrl-C), the weights stay marked as being written:
        no worker loads them (a worker that wants them waits, at most
        ``timeout`` seconds), the version stays, and ``reset``, ``execute``
        and a streaming ``get`` refuse to go on until an ``update()``
        succeeds.

        Raises:
            TypeError, ValueError: if the keys, shapes or dtypes differ from the agent's ``state_dict``.
            RuntimeError: after ``close``.
        """
        self._check_open("update")
        _checks.weights(NAME, self._weights.tensors, weights)
        self._weights.write(weights)
        self._warn_initial_weights = False

    def policy_version(self) -> int:
        """How many times ``update()`` was called."""
        return self._weights.version()

    def close(self) -> None:
        """Stop the workers and release the shared memory. Safe to call twice."""
        if self.state is State.CLOSED:
            return
        if self.state is State.STREAMING:
            for conn in self._conns:
                with contextlib.suppress(OSError, ValueError):
                    conn.send(Stop())
            if self._board is not None:
                self._board.wake(self.n_processes)  # no worker waits out its WAIT_S for a free slot
        self.state = State.CLOSED
        self._pool.shutdown()  # joins the workers and closes their connections
        self._weights.release()  # a batcher still referenced would keep the shared memory until collected
        self._buffers = None
        self._staging.release()
        self._board = None  # its lock is a named semaphore in /dev/shm until it is freed

    def __enter__(self) -> MultiprocessBatcher:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
