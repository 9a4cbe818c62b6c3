"""Remote workers of one role, at most one call in flight each, with failures handled as configured."""

from __future__ import annotations

import math
import time
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

from rlstruct.errors import DistributedError, RemoteWorkerError

__all__ = ["Pool", "wait_ready"]

POLL_S = 0.5
"""Longest single ``ray.wait``: a longer wait is a loop of these, so nothing hinges on one returning."""


class Pool:
    """Remote workers of one role ("collection" or "gradient").

    Args:
        role: the workers' role, named in errors.
        actors: the Ray actor handles; worker ``i`` is ``actors[i]``.
        on_failure: "raise" turns a dead worker into ``RemoteWorkerError``;
            "continue" drops it (listed in ``lost``) and goes on with the rest.
        timeout: seconds ``wait`` may last without the results it needs.
    """

    def __init__(self, role: str, actors: list[Any], on_failure: str, timeout: float) -> None:
        self.role, self.on_failure, self.timeout = role, on_failure, timeout
        self.alive: dict[int, Any] = dict(enumerate(actors))
        self.pending: dict[Any, int] = {}  # in-flight call -> worker
        self.lost: list[int] = []

    def idle(self) -> list[int]:
        """The live workers with no call in flight."""
        busy = set(self.pending.values())
        return [i for i in self.alive if i not in busy]

    def submit(self, index: int, method: str, *args: Any) -> None:
        """Start ``method(*args)`` on worker ``index``; its result comes back through ``wait``."""
        self.pending[getattr(self.alive[index], method).remote(*args)] = index

    def call_all(self, method: str, *args: Any) -> None:
        """Start ``method(*args)`` on every live worker without waiting (actors run calls in order)."""
        for actor in self.alive.values():
            getattr(actor, method).remote(*args)

    def wait(self, n: int) -> list[tuple[int, Any]]:
        """Block until ``n`` in-flight calls have finished (fewer if workers are lost); their results.

        Returns every result that is ready by then, so possibly more than ``n``.

        Raises:
            RemoteWorkerError: a worker raised, or died with ``on_failure="raise"``.
            DistributedError: fewer than ``n`` results within ``timeout``, or
                every worker lost.
        """
        results: list[tuple[int, Any]] = []
        deadline = time.monotonic() + self.timeout
        while True:
            need = min(n, len(results) + len(self.pending))
            if len(results) >= need:
                if not results:
                    raise DistributedError(f"every {self.role} worker was lost (workers {self.lost})")
                return results
            left = deadline - time.monotonic()
            if left <= 0:
                raise DistributedError(
                    f"{self.role} workers {sorted(self.pending.values())} sent nothing for "
                    f"{self.timeout:g} s (the scheme's timeout): slow, hung or not scheduled"
                )
            ready, _ = ray.wait(list(self.pending), num_returns=1, timeout=min(POLL_S, left))
            # Take everything that is ready now, not only the first.
            ready, _ = ray.wait(list(self.pending), num_returns=len(self.pending), timeout=0)
            for ref in ready:
                index = self.pending.pop(ref)
                result = self._get(ref, index)
                if result is not _LOST:
                    results.append((index, result))

    def _get(self, ref: Any, index: int) -> Any:
        try:
            return ray.get(ref)
        except RayTaskError as error:
            cause = getattr(error, "cause", None)
            if isinstance(cause, RemoteWorkerError):  # a gradient worker's collection worker failed
                raise cause from error
            raise RemoteWorkerError(f"raised:\n{error}", self.role, index, died=False) from error
        except RayActorError as error:
            if self.on_failure == "raise":
                raise RemoteWorkerError(f"died: {error}", self.role, index, died=True) from error
            self.lose(index)
            return _LOST

    def lose(self, index: int) -> None:
        """Drop worker ``index`` (and its in-flight call) and record it in ``lost``."""
        if self.alive.pop(index, None) is not None:
            self.lost.append(index)
        for ref in [r for r, i in self.pending.items() if i == index]:
            del self.pending[ref]

    def needed(self, fraction: float) -> int:
        """How many of the live workers ``fraction`` stands for (at least one)."""
        return max(1, math.ceil(fraction * len(self.alive)))

    def kill(self) -> None:
        """Stop every worker's actor now (their calls in flight are dropped)."""
        for actor in self.alive.values():
            ray.kill(actor)
        self.alive.clear()
        self.pending.clear()


_LOST = object()


def wait_ready(role: str, actors: list[Any], timeout: float, requested: str) -> list[tuple[str, int]]:
    """Wait for ``actors`` to be constructed; where each runs: ``(node id, pid)``.

    Raises:
        RemoteWorkerError: an actor's constructor raised, or it died.
        DistributedError: not every actor was running within ``timeout``
            (``requested`` describes what each asked for).
    """
    refs = [actor.ready.remote() for actor in actors]
    try:
        return list(ray.get(refs, timeout=timeout))
    except GetTimeoutError:
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        waiting = [i for i, ref in enumerate(refs) if ref not in ready]
        raise DistributedError(
            f"{role} workers {waiting} were not running {timeout:g} s after they were created; "
            f"each asked for {requested}, and the cluster has {ray.available_resources()} free"
        ) from None
    except (RayTaskError, RayActorError) as error:
        index = next(i for i, ref in enumerate(refs) if _failed(ref))
        raise RemoteWorkerError(f"could not start:\n{error}", role, index, died=True) from error


def _failed(ref: Any) -> bool:
    try:
        ray.get(ref, timeout=0)
    except GetTimeoutError:
        return False
    except Exception:
        return True
    return False
