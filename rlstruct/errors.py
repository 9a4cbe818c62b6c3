"""The library's exceptions, and how its error messages name a received value."""

from __future__ import annotations

import torch

__all__ = [
    "AgentError",
    "ClusterError",
    "ConfigError",
    "DistributedError",
    "RemoteWorkerError",
    "WorkerError",
    "WorkerTimeout",
    "describe",
]


def describe(value: object) -> str:
    """What an error message says it received instead of what it expected.

    A tensor is described by its shape, dtype and device; anything else by
    its type's name, with its article.

    Args:
        value: the received value, of any type.

    Returns:
        A phrase to follow "got", such as ``"a tensor of shape (2, 3), dtype
        torch.float32, device cpu"`` or ``"an int"``.

    Examples:
        >>> import torch
        >>> describe(torch.zeros(2, 3))
        'a tensor of shape (2, 3), dtype torch.float32, device cpu'
        >>> describe(3), describe([1.0])
        ('an int', 'a list')
    """
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)}, dtype {value.dtype}, device {value.device}"
    name = type(value).__name__
    bare = name.rstrip("_")  # NumPy 1 names its bool "bool_"
    if type(value).__module__ == "numpy" and bare in ("bool", "int", "float", "str", "bytes", "object"):
        name = f"numpy.{bare}"  # a NumPy bool is "a numpy.bool", not "a bool"
    return f"{'an' if name[0] in 'aeiouAEIOU' else 'a'} {name}"


class AgentError(TypeError, ValueError):
    """An agent a learner cannot train: not an ``Agent``, lacking a method or an output the learner needs,
    or a class that ``--agent`` names but that cannot be found or made.

    Both a TypeError and a ValueError (what the agent is, and what was given
    for it); ``rlstruct train`` reports it in one line (exit status 2).
    """


class ConfigError(TypeError, ValueError):
    """A training configuration that cannot run, found before anything starts.

    A field of the wrong type or out of range, fields that do not fit
    together (``n_envs`` and ``n_processes``), an environment whose actions
    the algorithm cannot take, a device this torch cannot use. Raised by
    each algorithm's ``check(config)``, which its ``train`` calls first;
    the message names the field as ``config.<field>`` (``rlstruct train``
    names the flag instead, ``--<field>``, in one line with exit status 2).
    The error the check raised is its ``__cause__``.

    Both a TypeError and a ValueError, as the checks it gathers raise either.
    """


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
        self.message = message
        self.worker = worker
        self.envs = envs
        self.worker_traceback = worker_traceback

    def __reduce__(self) -> tuple[type[WorkerError], tuple[str, int, range, str]]:
        # Picklable with its fields, so that it can cross processes (a batcher inside a Ray actor).
        return type(self), (self.message, self.worker, self.envs, self.worker_traceback)


class WorkerTimeout(WorkerError, TimeoutError):
    """A worker did not answer within the batcher's timeout (it hangs or is too slow)."""


class ClusterError(RuntimeError):
    """A collective operation of ``rlstruct.cluster`` failed across processes.

    Raised when a process died, stopped answering within the group's timeout,
    or made a different call than the others, and when ``fork`` could not
    start or connect its processes. The group cannot be used after it: leave
    it with ``rlstruct.cluster.disconnect()``.
    """


class DistributedError(RuntimeError):
    """A scheme of ``rlstruct.distributed`` cannot go on.

    Raised when nothing arrives from the remote workers within the scheme's
    timeout, when its actors cannot be scheduled on the Ray cluster, and when
    no worker of a role is left.
    """


class RemoteWorkerError(DistributedError):
    """A remote collection or gradient worker of a scheme raised or died.

    Attributes:
        role: "collection" or "gradient".
        index: the worker's index within its role.
        died: True when the worker's actor died (killed, crashed, its node
            lost); False when it raised an exception, whose traceback is in
            the message.
    """

    def __init__(self, message: str, role: str, index: int, died: bool) -> None:
        super().__init__(f"{role} worker {index}: {message}")
        self.message = message
        self.role = role
        self.index = index
        self.died = died

    def __reduce__(self) -> tuple[type[RemoteWorkerError], tuple[str, str, int, bool]]:
        # Raised in a gradient worker for one of its collection workers, it crosses to the learner.
        return type(self), (self.message, self.role, self.index, self.died)
