"""The worker processes of a ``MultiprocessBatcher``: started, spoken to, watched, and stopped.

A ``WorkerPool`` starts one process per worker (``worker_main``, with the
``WorkerSpec`` its batcher makes for it) and holds a connection to each. It
sends commands and reads answers (``rlstruct.batchers._messages``), watching
every pipe and every process at once, so that an error, a death or a silence
is reported as it happens, as a ``WorkerError`` (``WorkerTimeout``) naming the
worker and its rows. It never closes its batcher: the batcher does, on any of
these errors. Its workers are stopped by ``shutdown()``, or when the pool is
collected (a batcher whose construction failed half-way).
"""

from __future__ import annotations

import contextlib
import time
import weakref
from collections.abc import Callable
from multiprocessing import connection as mp_connection
from multiprocessing.connection import Connection
from typing import Any

from rlstruct.batchers._messages import Answer, Close, Command, Failed
from rlstruct.batchers._worker import WorkerSpec, worker_main
from rlstruct.errors import WorkerError, WorkerTimeout

__all__ = ["WorkerPool"]

EXIT_WAIT_S = 5.0  # how long a worker whose pipe closed may take to exit, for its exit code
GRACE_S = 5.0  # how long the workers may take to exit after Close, before they are terminated
TIMED_OUT_GRACE_S = 0.5  # the same after a worker timed out: the others may be stuck as it was
# the longest single wait: multiprocessing's wait takes at most 2**31 ms (select's poll); a longer
# timeout (timeout=1e9 to mean "never") is waited out in pieces
PIECE_S = 3600.0


def _shutdown(processes: list[Any], conns: list[Connection], grace: list[float]) -> None:
    """Ask every worker to exit, then terminate and kill the ones that do not within ``grace[0]`` s.

    Safe to call twice. ``grace`` is a list so that the pool can shorten it
    after the finalizer was made.
    """
    for conn in conns:
        with contextlib.suppress(OSError, ValueError):
            conn.send(Close())
    deadline = time.monotonic() + grace[0]
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


class WorkerPool:
    """``n`` worker processes and a connection to each.

    Args:
        ctx: the multiprocessing context (its start method).
        spec: ``spec(w, inherited)`` is the ``WorkerSpec`` of worker ``w``,
            given the file descriptors a forked worker inherits and must close.
        n: how many workers.
        n_envs: the environment instances of each (worker w's rows are
            ``w * n_envs`` onwards), for the errors.
        timeout: how long an answer may take.
        start_timeout: how long the workers may take to start, from now.

    Raises:
        Exception: whatever starting a process raises; the workers started
            until then are stopped when the half-made pool is collected.
    """

    def __init__(
        self,
        ctx: Any,
        spec: Callable[[int, tuple[int, ...]], WorkerSpec],
        n: int,
        n_envs: int,
        timeout: float,
        start_timeout: float,
    ) -> None:
        self.n_envs, self.timeout, self.start_timeout = n_envs, timeout, start_timeout
        self.processes: list[Any] = []
        self.conns: list[Connection] = []
        self._grace = [GRACE_S]
        self._finalizer = weakref.finalize(self, _shutdown, self.processes, self.conns, self._grace)
        self.start_deadline = time.monotonic() + start_timeout
        """When every worker must have said ``Ready``."""
        fork = ctx.get_start_method() == "fork"
        for w in range(n):
            here, there = ctx.Pipe()
            inherited = (*(c.fileno() for c in self.conns), here.fileno()) if fork else ()
            process = ctx.Process(
                target=worker_main, args=(spec(w, inherited), there), name=f"rlstruct-worker-{w}", daemon=True
            )
            try:
                process.start()
            except BaseException:  # the workers started so far are stopped by the finalizer
                here.close()
                there.close()
                raise
            self.processes.append(process)  # only started processes: the finalizer joins them
            self.conns.append(here)
            there.close()
        self.started = [False] * n
        """Which workers said ``Ready``."""

    def rows(self, w: int) -> range:
        """The rows of worker ``w``."""
        return range(w * self.n_envs, (w + 1) * self.n_envs)

    def died(self, w: int) -> WorkerError:
        """The error of a worker whose pipe closed or whose process is gone, with its exit code."""
        process = self.processes[w]
        process.join(EXIT_WAIT_S)
        code = "unknown: it has not exited" if process.exitcode is None else str(process.exitcode)
        if self.started[w]:
            return WorkerError(f"died (exit code {code})", w, self.rows(w))
        return WorkerError(
            f"died before it started (exit code {code}); the reason, if it gave one, is on the "
            "standard error",
            w,
            self.rows(w),
        )

    def timed_out(self, w: int, what: str) -> WorkerTimeout:
        """Kill worker ``w`` (it would not answer ``Close`` either); the error to raise.

        The others get ``TIMED_OUT_GRACE_S`` instead of ``GRACE_S`` to exit at
        ``shutdown``: any of them may be stuck too, and the error should not
        wait for them.
        """
        self.processes[w].kill()
        self._grace[0] = TIMED_OUT_GRACE_S
        return WorkerTimeout(what, w, self.rows(w))

    def read(self, w: int) -> Answer | None:
        """The message worker ``w`` has sent, if any (None while it runs quietly).

        Raises:
            WorkerError: if the message is ``Failed``, or the worker died.
        """
        try:
            if not self.conns[w].poll(0):
                if self.processes[w].is_alive():
                    return None
                raise self.died(w)
            message: Answer = self.conns[w].recv()
        except (EOFError, OSError):
            raise self.died(w) from None
        if isinstance(message, Failed):
            what = "raised an exception" if self.started[w] else "could not start"
            raise WorkerError(what, w, self.rows(w), message.traceback)
        return message

    def gather(self, workers: set[int], answer: type[Answer], deadline: float, blocking: bool = True) -> bool:
        """Read ``answer`` from each of ``workers``, taking each out of the set as it answers.

        All are watched at once (pipes and process sentinels), so an error or
        a death is reported as it happens, whichever worker it is.

        Returns:
            True once all answered; False if ``blocking`` is False and some
            have not, before ``deadline`` (time.monotonic).

        Raises:
            WorkerError: if one sent ``Failed``, another answer, or died.
            WorkerTimeout: once ``deadline`` passed, naming the first that has
                not answered (which is killed).
        """
        while workers:
            handles: dict[Any, int] = {}
            for w in workers:
                handles[self.conns[w]] = w
                handles[self.processes[w].sentinel] = w
            wait = min(PIECE_S, max(0.0, deadline - time.monotonic())) if blocking else 0.0
            ready = mp_connection.wait(list(handles), timeout=wait)
            for w in sorted({handles[handle] for handle in ready}):
                message = self.read(w)
                if message is None:
                    continue
                if not isinstance(message, answer):
                    raise WorkerError(f"answered {message!r} instead of {answer.__name__}", w, self.rows(w))
                workers.discard(w)
            if workers and not ready:
                if time.monotonic() >= deadline:
                    w = min(workers)
                    if not self.started[w]:
                        raise self.timed_out(
                            w, f"did not start within start_timeout={self.start_timeout:g} s"
                        )
                    raise self.timed_out(w, f"no answer within {self.timeout:g} s (hung or too slow)")
                if not blocking:
                    return False
        return True

    def send(self, w: int, command: Command) -> None:
        """Send ``command`` to worker ``w``.

        Raises:
            WorkerError: if its connection is closed (it died).
        """
        try:
            self.conns[w].send(command)
        except (OSError, ValueError):
            raise self.died(w) from None

    def shutdown(self) -> None:
        """Ask every worker to exit, terminate those that do not; close the connections. Safe to call twice."""
        self._finalizer()
