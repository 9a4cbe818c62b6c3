"""Remote workers of one role, at most one call in flight each, with failures handled as configured."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayActorError, RayError, RayTaskError

from rlstruct.errors import DistributedError, RemoteWorkerError

__all__ = ["Pool", "wait_ready"]

POLL_S = 0.5
"""Longest single ``ray.wait``: a longer wait is a loop of these, so nothing hinges on one returning."""


class Pool:
    """Remote workers of one role ("collection" or "gradient").

    Args:
        role: the workers' role, named in errors.
        actors: the Ray actor handles by worker index (the index the scheme
            reports; a list is indexed from 0).
        on_failure: "raise" turns a dead worker into ``RemoteWorkerError``;
            "continue" drops it (listed in ``lost``) and goes on with the rest.
            Fixed for the pool's life (``on_failure`` is read-only).
        timeout: seconds ``wait`` may last without any result.
        timeout_is: what ``timeout`` is, in the error that reports it.
    """

    def __init__(
        self,
        role: str,
        actors: Mapping[int, Any] | list[Any],
        on_failure: str,
        timeout: float,
        timeout_is: str = "the scheme's timeout",
    ) -> None:
        self.role, self._on_failure, self.timeout, self.timeout_is = role, on_failure, timeout, timeout_is
        self.alive: dict[int, Any] = dict(actors) if isinstance(actors, Mapping) else dict(enumerate(actors))
        self.pending: dict[Any, int] = {}  # in-flight call -> worker
        self.lost: list[int] = []
        self._unchecked: dict[Any, int] = {}  # calls whose result nobody waits for, checked for errors
        self._submitted: dict[int, int] = dict.fromkeys(self.alive, 0)  # worker -> calls so far

    @property
    def on_failure(self) -> str:
        """What a dead worker does to ``wait``: "raise" or "continue", as given when the pool was made."""
        return self._on_failure

    def idle(self) -> list[int]:
        """The live workers with no call in flight, those that were given fewest calls first."""
        busy = set(self.pending.values())
        return sorted((i for i in self.alive if i not in busy), key=lambda i: (self._submitted[i], i))

    def submit(self, index: int, method: str, *args: Any) -> None:
        """Start ``method(*args)`` on worker ``index``; its result comes back through ``wait``."""
        self.pending[getattr(self.alive[index], method).remote(*args)] = index
        self._submitted[index] += 1

    def call(self, index: int, method: str, *args: Any) -> None:
        """Start ``method(*args)`` on worker ``index`` without waiting; an error is raised by a later ``wait``."""
        self._unchecked[getattr(self.alive[index], method).remote(*args)] = index

    def call_all(self, method: str, *args: Any) -> None:
        """Start ``method(*args)`` on every live worker without waiting (actors run calls in order).

        An error of one of these calls is raised by a later ``wait``.
        """
        for index, actor in self.alive.items():
            self._unchecked[getattr(actor, method).remote(*args)] = index

    def wait(self, n: int) -> list[tuple[int, Any]]:
        """Block until ``n`` in-flight calls have finished (fewer if workers are lost); their results.

        Returns every result that is ready by then, so possibly more than
        ``n``, and an empty list when every call in flight was lost but live
        workers remain (the caller submits again).

        Raises:
            RemoteWorkerError: a worker raised, or died with ``on_failure="raise"``.
            DistributedError: no result for ``timeout`` seconds, or every
                worker lost.
        """
        results: list[tuple[int, Any]] = []
        deadline = time.monotonic() + self.timeout
        while True:
            self._check_unchecked()
            if not self.alive:
                raise DistributedError(f"every {self.role} worker was lost (workers {self.lost})")
            if len(results) >= min(n, len(results) + len(self.pending)):
                return results
            left = deadline - time.monotonic()
            if left <= 0:
                raise DistributedError(
                    f"{self.role} workers {sorted(set(self.pending.values()))} sent nothing for "
                    f"{self.timeout:g} s ({self.timeout_is}): slow, hung or not scheduled"
                )
            ready, _ = ray.wait(list(self.pending), num_returns=1, timeout=min(POLL_S, left))
            if ready:  # take everything that is ready now, not only the first
                ready, _ = ray.wait(list(self.pending), num_returns=len(self.pending), timeout=0)
            for ref in ready:
                index = self.pending.pop(ref)
                ok, result = self._get(ref, index)
                if ok:
                    results.append((index, result))
            if ready:
                deadline = time.monotonic() + self.timeout  # progress: the timeout counts from here

    def _check_unchecked(self) -> None:
        if not self._unchecked:
            return
        ready, _ = ray.wait(list(self._unchecked), num_returns=len(self._unchecked), timeout=0)
        for ref in ready:
            self._get(ref, self._unchecked.pop(ref))

    def _get(self, ref: Any, index: int) -> tuple[bool, Any]:
        """``(True, result)``, or ``(False, None)`` for a worker dropped with ``on_failure="continue"``."""
        try:
            return True, ray.get(ref)
        except RayTaskError as error:
            cause = getattr(error, "cause", None)
            if isinstance(cause, DistributedError):  # from a gradient worker's own collection workers
                raise cause from error
            raise RemoteWorkerError(f"raised:\n{error}", self.role, index, died=False) from error
        except RayActorError as error:
            # An unreachable actor (a network loss, ActorUnavailableError) is lost like a dead one: its
            # call may or may not have run, and running it again would skip or repeat a minibatch.
            what = "unreachable" if _unreachable(error) else "died"
            if self._on_failure == "raise":
                raise RemoteWorkerError(f"{what}: {error}", self.role, index, died=True) from error
            self.lose(index)
            return False, None
        except RayError as error:  # its result was lost (its node died) or could not be read
            raise RemoteWorkerError(f"failed: {error}", self.role, index, died=False) from error

    def lose(self, index: int) -> None:
        """Drop worker ``index`` (and its calls in flight) and record it in ``lost``."""
        if self.alive.pop(index, None) is not None:
            self.lost.append(index)
        for calls in (self.pending, self._unchecked):
            for ref in [r for r, i in calls.items() if i == index]:
                del calls[ref]

    def needed(self, fraction: float) -> int:
        """How many of the live workers ``fraction`` stands for (at least one)."""
        return max(1, math.ceil(fraction * len(self.alive)))


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
    except RayError as error:
        index = next((i for i, ref in enumerate(refs) if _failed(ref)), 0)
        raise RemoteWorkerError(f"could not start:\n{error}", role, index, died=True) from error


def _unreachable(error: RayActorError) -> bool:
    """Whether ``error`` says the actor is unreachable rather than dead.

    Ray tells the two apart (``ActorUnavailableError``, a ``RayActorError``) only from 2.11 on; before,
    with the ``ray>=2.10`` that pyproject.toml allows, an unreachable actor raises a plain ``RayActorError``.
    """
    unavailable = getattr(ray.exceptions, "ActorUnavailableError", None)
    return unavailable is not None and isinstance(error, unavailable)


def _failed(ref: Any) -> bool:
    try:
        ray.get(ref, timeout=0)
    except GetTimeoutError:
        return False
    except Exception:
        return True
    return False
