"""The library's exceptions."""

from __future__ import annotations

__all__ = ["ClusterError", "WorkerError", "WorkerTimeout"]


class WorkerError(RuntimeError):
    """A batcher's worker process raised, died or stopped answering.

    Attributes:
        worker: the index of the worker.
        envs: the global indices of the environments it ran (``range``).
        worker_traceback: the traceback printed in the worker, when it raised;
            empty when it died without one.
    """

    def __init__(self, message: str, worker: int, envs: range, worker_traceback: str = "") -> None:
        detail = f"\n\nTraceback in worker {worker}:\n{worker_traceback}" if worker_traceback else ""
        super().__init__(f"worker {worker} (envs {envs.start}-{envs.stop - 1}): {message}{detail}")
        self.worker = worker
        self.envs = envs
        self.worker_traceback = worker_traceback


class WorkerTimeout(WorkerError, TimeoutError):
    """A worker did not answer within the batcher's timeout (it hangs or is too slow)."""


class ClusterError(RuntimeError):
    """A collective operation of ``rlstruct.cluster`` failed across processes.

    Raised when a process died, stopped answering within the group's timeout,
    or made a different call than the others, and when ``fork`` could not
    start or connect its processes. The group cannot be used after it: leave
    it with ``rlstruct.cluster.disconnect()``.
    """
