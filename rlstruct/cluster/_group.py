"""Joining the process group: ``fork``, ``torchrun``, ``rank``, ``world_size``, ``disconnect``.

``fork(n)`` in a script started as ``python script.py args`` (rank 0, the
parent) starts ``n`` more interpreters with the same command line and
environment, plus the variables below that tell each its rank and where rank
0 listens. Each child runs the script from the top, reaches the same
``fork(n)`` call and, seeing those variables, connects instead of starting
processes. The protocol, with every wait bounded:

1. rank 0 opens a ``TCPStore`` on a free loopback port and starts the children;
2. each child connects to the store, sets ``rlstruct/joined/<rank>`` and
   waits for every rank's key (at most ``start_timeout``);
3. rank 0 waits for the children's keys, polling its children: one that
   exits first fails ``fork`` at once on rank 0 (the others are stopped);
   then it sets its own key;
4. every process builds the ``torch.distributed`` group on that store, with
   ``timeout`` as the limit of every later collective operation.

Under ``torchrun`` the store is torchrun's and steps 2 and 4 are the same.

Children die with rank 0: a watchdog thread polls the parent's process id
and exits the child when it changes. Rank 0 waits for its children when it
exits (at most the timeout), then stops the ones still running.
"""

from __future__ import annotations

import atexit
import math
import multiprocessing
import numbers
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed import TCPStore, rendezvous  # type: ignore[attr-defined]  # exported, not in __all__

from rlstruct.checks import is_int
from rlstruct.errors import ClusterError

__all__ = ["DEFAULT_START_TIMEOUT_S", "DEFAULT_TIMEOUT_S", "disconnect", "fork", "rank", "world_size"]

DEFAULT_TIMEOUT_S = 120.0
"""How long a collective operation waits for the other processes before it raises."""
DEFAULT_START_TIMEOUT_S = 120.0
"""How long ``fork`` waits for the processes to start and meet."""

RANK_VAR = "RLSTRUCT_CLUSTER_RANK"
WORLD_SIZE_VAR = "RLSTRUCT_CLUSTER_WORLD_SIZE"
ADDRESS_VAR = "RLSTRUCT_CLUSTER_ADDRESS"
PORT_VAR = "RLSTRUCT_CLUSTER_PORT"
PARENT_VAR = "RLSTRUCT_CLUSTER_PARENT"

LOOPBACK = "127.0.0.1"
JOIN_POLL_S = 0.01  # how often rank 0 checks its children while they connect
WATCHDOG_POLL_S = 0.2  # how often a child checks that rank 0 is alive
ORPHAN_EXIT_CODE = 70  # a child that outlived rank 0
STOP_GRACE_S = 5.0  # between SIGTERM and SIGKILL for a child that outstays rank 0
MAX_TIMEOUT_S = (
    1e9  # about 31 years: gloo and the TCP store hold a timeout in nanoseconds, up to 2**63 (9.2e9 s)
)


@dataclass
class _State:
    forked: bool = False
    timeout: float = DEFAULT_TIMEOUT_S
    children: list[subprocess.Popen[bytes]] = field(default_factory=list)


_state = _State()


def rank() -> int:
    """The rank of this process: 0 for the one that called ``fork`` first, 0 when not connected.

    Examples:
        >>> import rlstruct.cluster as ct
        >>> ct.rank()
        0
    """
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def world_size() -> int:
    """The number of processes in the group, 1 when not connected.

    Examples:
        >>> import rlstruct.cluster as ct
        >>> ct.world_size()
        1
    """
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def fork(
    n: int,
    *,
    timeout: float = DEFAULT_TIMEOUT_S,
    start_timeout: float = DEFAULT_START_TIMEOUT_S,
    backend: str | None = None,
) -> int:
    """Turn the running script into ``n + 1`` processes connected in one group.

    The caller becomes rank 0 and starts ranks 1 to ``n`` by running the
    script again (``sys.executable`` with the original command line, the same
    environment and working directory). **Everything before** ``fork()`` **runs
    in every process**: the children start from the top of the script, so keep
    the code before it to imports, argument parsing and setup that may be
    repeated, call it under ``if __name__ == "__main__":``, and seed random
    generators after it (from ``rank()``). It returns once all processes are
    connected, so they leave it together.

    When the script was started by ``torchrun`` (``RANK`` and ``WORLD_SIZE``
    set), ``fork`` joins that group instead and ``n`` is ignored: the group
    has torchrun's ``WORLD_SIZE`` processes.

    Call it once per process. Children die when rank 0 dies; rank 0 waits
    for them when it exits, at most ``timeout`` seconds, then stops them, and
    prints the exit code of any that failed. The exit code of the run is
    rank 0's.

    Args:
        n: how many processes to add (0 runs alone, without a group).
        timeout: seconds that every collective operation waits for the other
            processes before raising ``ClusterError``.
        start_timeout: seconds that the processes have to start (importing
            torch takes seconds) and meet in ``fork``. A child that exits
            meanwhile fails ``fork`` on rank 0 at once.
        backend: a ``torch.distributed`` backend. By default gloo, or
            ``"cpu:gloo,cuda:nccl"`` (nccl for CUDA tensors) when there is a
            GPU for each process of the machine; in that case each process
            also makes GPU ``local rank % device count`` its current device.

    Returns:
        The rank of this process.

    Raises:
        ValueError: if ``n`` is not a non-negative int (NumPy ints are ints),
            a timeout is not a positive number of seconds (or is above 1e9,
            about 31 years, beyond what gloo holds), ``backend`` names
            no ``torch.distributed`` backend or one this machine cannot use
            (nccl without CUDA), or a child was started for another ``n``.
        TypeError: if ``backend`` is not a str.
        RuntimeError: if called twice, in a multiprocessing worker, without a
            script (an interactive session), or where ``torch.distributed`` is
            already initialised.
        ClusterError: if a process exits or does not arrive within ``start_timeout``.
    """
    if not is_int(n) or n < 0:  # a NumPy int is an int
        raise ValueError(f"fork: n must be a non-negative int (processes to add), got {n!r}")
    n = int(n)
    for name, value in (("timeout", timeout), ("start_timeout", start_timeout)):
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 < value < math.inf:
            raise ValueError(f"fork: {name} must be a positive number of seconds, got {value!r}")
        if value > MAX_TIMEOUT_S:  # what gloo and the TCP store hold
            raise ValueError(f"fork: {name} must be at most {MAX_TIMEOUT_S:g} seconds, got {value!r}")
    if backend is not None and not isinstance(backend, str):
        raise TypeError(f"fork: backend must be a str or None, got {type(backend).__name__}")
    if backend is not None:
        _check_backend(backend)
    if _state.forked:
        raise RuntimeError("fork: this process already called fork(); call it once per process")
    if not dist.is_available():
        raise RuntimeError("fork: this build of torch has no torch.distributed")
    if dist.is_initialized():
        raise RuntimeError(
            f"fork: torch.distributed is already initialised here (rank {rank()} of {world_size()}); "
            "the cluster operations use that group as it is, without fork()"
        )
    if multiprocessing.parent_process() is not None:
        raise RuntimeError(
            "fork: called in a multiprocessing worker, which re-imports the main script; "
            'call fork() under `if __name__ == "__main__":`'
        )
    _state.forked = True
    _state.timeout = float(timeout)
    atexit.register(_at_exit)
    start = timedelta(seconds=float(start_timeout))
    if RANK_VAR in os.environ:
        _join_parent(n, start, backend)
    elif "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        _join_torchrun(start, backend)
    elif n > 0:
        _start_children(n, start, backend)
    return rank()


def _check_backend(backend: str) -> None:
    """Raise ValueError unless every backend ``backend`` names ("gloo", "cpu:gloo,cuda:nccl") can run here."""
    known = [name for name in dist.Backend.backend_list if name not in ("undefined", "fake")]
    available = {
        "gloo": dist.is_gloo_available,
        "nccl": lambda: dist.is_nccl_available() and torch.cuda.is_available(),
        "mpi": dist.is_mpi_available,
        "ucc": dist.is_ucc_available,
        "xccl": lambda: dist.is_backend_available("xccl"),
    }
    for part in backend.split(","):
        name = part.split(":", 1)[-1].strip().lower()
        if name not in known:
            raise ValueError(
                f"fork: backend {backend!r} names {name!r}, which is not a torch.distributed backend "
                f"({', '.join(known)})"
            )
        if name in available and not available[name]():
            needs = " (nccl needs CUDA GPUs)" if name == "nccl" else ""
            raise ValueError(f"fork: backend {backend!r}: {name} cannot run on this machine{needs}")


def _default_backend(local_processes: int) -> str:
    if torch.cuda.is_available() and torch.cuda.device_count() >= local_processes:
        return "cpu:gloo,cuda:nccl"
    return "gloo"


def _meet(store: TCPStore, own_rank: int, size: int, start: timedelta) -> None:
    """Announce this process in the store and wait until every process has."""
    store.set(f"rlstruct/joined/{own_rank}", "1")
    store.wait([f"rlstruct/joined/{r}" for r in range(size)], start)


def _connect(
    store: TCPStore, own_rank: int, size: int, local_rank: int, local_size: int, backend: str | None
) -> None:
    """Build the torch.distributed group on a store every process has met on."""
    backend = backend or _default_backend(local_size)
    if "nccl" in backend:
        torch.cuda.set_device(local_rank % torch.cuda.device_count())
    try:
        dist.init_process_group(
            backend, store=store, rank=own_rank, world_size=size, timeout=timedelta(seconds=_state.timeout)
        )
    except RuntimeError as err:
        raise ClusterError(f"fork: rank {own_rank} could not build the process group: {err}") from err


def _join_torchrun(start: timedelta, backend: str | None) -> None:
    try:
        store, own_rank, size = next(rendezvous("env://", timeout=start))
        _meet(store, own_rank, size, start)
    except RuntimeError as err:
        raise ClusterError(f"fork: could not join the torchrun group: {err}") from err
    local_rank = int(os.environ.get("LOCAL_RANK", own_rank))
    _connect(store, own_rank, size, local_rank, int(os.environ.get("LOCAL_WORLD_SIZE", size)), backend)


def _start_children(n: int, start: timedelta, backend: str | None) -> None:
    if not sys.argv or sys.argv[0] in ("", "-") or hasattr(sys, "ps1"):  # "-": a script read on stdin
        raise RuntimeError(
            "fork: starts copies of the running script, so it needs one: "
            "run `python script.py` (or `python -m module`), not an interactive session or a script on stdin"
        )
    try:
        store = TCPStore(LOOPBACK, 0, n + 1, is_master=True, timeout=start, wait_for_workers=False)
    except RuntimeError as err:
        raise ClusterError(f"fork: could not listen on {LOOPBACK}: {err}") from err
    for child_rank in range(1, n + 1):
        env = {
            **os.environ,
            RANK_VAR: str(child_rank),
            WORLD_SIZE_VAR: str(n + 1),
            ADDRESS_VAR: LOOPBACK,
            PORT_VAR: str(store.port),
            PARENT_VAR: str(os.getpid()),
        }
        command = [sys.executable, *sys.orig_argv[1:]]
        _state.children.append(subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL))
    _wait_for_children(store, start)
    _meet(store, 0, n + 1, start)
    _connect(store, 0, n + 1, 0, n + 1, backend)


def _wait_for_children(store: TCPStore, start: timedelta) -> None:
    """Wait until every child has announced itself in the store; fail at once if one exits."""
    deadline = time.monotonic() + start.total_seconds()
    keys = {f"rlstruct/joined/{r}": r for r in range(1, len(_state.children) + 1)}
    while not store.check(list(keys)):
        for child_rank, child in enumerate(_state.children, 1):
            code = child.poll()
            if code is not None:
                _stop_children()
                raise ClusterError(
                    f"fork: process {child_rank} exited with code {code} before it joined the group "
                    "(its error, if any, is printed above)"
                )
        if time.monotonic() > deadline:
            missing = [r for key, r in keys.items() if not store.check([key])]
            _stop_children()
            raise ClusterError(
                f"fork: processes {missing} did not join within {start.total_seconds():g} s (start_timeout)"
            )
        time.sleep(JOIN_POLL_S)


def _join_parent(n: int, start: timedelta, backend: str | None) -> None:
    own_rank, size = int(os.environ[RANK_VAR]), int(os.environ[WORLD_SIZE_VAR])
    _watch_parent(int(os.environ[PARENT_VAR]))
    if size != n + 1:
        raise ValueError(
            f"fork: this process was started as rank {own_rank} of {size} processes, but fork() was "
            f"called here with n={n} ({n + 1} processes); every process must call fork() with the same n"
        )
    try:
        store = TCPStore(
            os.environ[ADDRESS_VAR], int(os.environ[PORT_VAR]), size, is_master=False, timeout=start
        )
        _meet(store, own_rank, size, start)
    except RuntimeError as err:
        raise ClusterError(f"fork: process {own_rank} could not meet the others: {err}") from err
    _connect(store, own_rank, size, own_rank, size, backend)


def _watch_parent(parent: int) -> None:
    """Exit this process as soon as its parent (rank 0) is gone."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(WATCHDOG_POLL_S)
        os._exit(ORPHAN_EXIT_CODE)

    threading.Thread(target=watch, name="rlstruct-cluster-watchdog", daemon=True).start()


def _stop_children() -> None:
    """Terminate, then kill, the children still running, and reap them all."""
    for child in _state.children:
        if child.poll() is None:
            child.terminate()
    for child in _state.children:
        try:
            child.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
    _state.children.clear()


def _at_exit() -> None:
    """Leave the group (so that peers blocked on this process fail at once), then reap the children."""
    disconnect()
    deadline = time.monotonic() + _state.timeout
    for child_rank, child in enumerate(_state.children, 1):
        try:
            code = child.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            print(
                f"rlstruct.cluster: process {child_rank} was still running {_state.timeout:g} s after "
                "rank 0 finished; stopping it",
                file=sys.stderr,
            )
            continue
        if code != 0:
            print(f"rlstruct.cluster: process {child_rank} exited with code {code}", file=sys.stderr)
    _stop_children()


def disconnect() -> None:
    """Leave the process group; afterwards ``world_size()`` is 1. Safe to call twice.

    It does not wait for the other processes (call ``barrier()`` first for
    that) and does not stop any: processes started by ``fork`` go on running
    the script.

    Examples:
        >>> import rlstruct.cluster as ct
        >>> ct.disconnect()
        >>> ct.world_size()
        1
    """
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
