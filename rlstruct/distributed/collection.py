"""Collection workers: each owns a batcher and returns fixed-length rollouts tagged with their policy version.

A ``CollectionWorker`` runs in the calling process (the scheme's in-process
option) or as a Ray actor (a remote collection worker). Its batcher is a
``LocalBatcher`` when ``Collection.processes`` is 0, or a
``MultiprocessBatcher`` with that many worker processes, so a remote worker
can itself use several processes. Rollouts are trajectories of ``n_steps`` steps whose episodes
carry over from one rollout to the next.

A ``Collectors`` object gathers rollouts from the local worker or from
remote ones:

- **synchronous**: every idle worker starts a rollout and the call returns
  once ``fraction_workers`` of the live workers have finished (all by default). The
  rollouts of the others stay in flight and are taken by the next call, so
  nothing is lost and no round waits on a rollout nobody will take.
- **asynchronous**: workers keep collecting while finished rollouts wait in
  a queue; a worker starts its next rollout only while fewer than
  ``Collection.queue_limit`` rollouts are waiting or being collected (back-pressure:
  memory stays bounded however slow the learner), and each call takes the
  oldest finished rollout.
"""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from rlstruct.agent import Agent
from rlstruct.batchers import Batcher, LocalBatcher, MultiprocessBatcher
from rlstruct.distributed.codec import Packed, pack, unpack
from rlstruct.distributed.options import Collection
from rlstruct.env import Environment
from rlstruct.learning.metrics import EpisodeReturns
from rlstruct.seeding import derive_seed
from rlstruct.trajectories import Trajectories

__all__ = ["CollectionWorker", "Collectors", "Rollout"]


@dataclass
class Rollout:
    """One collection worker's rollout and what the learner reports of it.

    Attributes:
        batch: the trajectories ``[n_envs, n_steps]`` (CPU), packed with the
            scheme's codec when they cross the network.
        worker: the collection worker's index.
        version: the policy version of the weights that acted.
        env_steps: environment steps in the rollout.
        episode_returns: the returns of the episodes that ended in it.
        seconds: the time the worker spent collecting it.
    """

    batch: Trajectories | Packed[Trajectories]
    worker: int
    version: int
    env_steps: int
    episode_returns: list[float] = field(default_factory=list)
    seconds: float = 0.0

    def trajectories(self) -> Trajectories:
        """The trajectories, unpacked if they were packed."""
        return self.batch if isinstance(self.batch, Trajectories) else unpack(self.batch)


class CollectionWorker:
    """A batcher that collects fixed-length rollouts under the weights it was last sent.

    Args:
        index: the worker's index in the scheme; its batcher's base seed
            is ``derive_seed(seed, f"collection {index}")`` (see
            ``rlstruct.seeding``), so that no two workers of a scheme, nor
            of schemes with other seeds, replay each other's episodes.
        agent_factory: makes the agent (picklable), as for the batchers.
        agent_args: keyword arguments for ``agent_factory``.
        env_factory: makes the environments (picklable), as for the batchers.
        env_args: keyword arguments for ``env_factory``.
        collection: the scheme's collection options; this worker uses
            ``n_envs``, ``n_steps`` and ``processes`` (0 for an in-process
            ``LocalBatcher``, else the worker processes of a
            ``MultiprocessBatcher``).
        seed: the scheme's base seed.
        compression: the codec of the rollouts this worker returns ("none",
            "lz4", "zstd"); None returns the trajectories unpacked (in-process use).
        timeout: the batcher's timeout, in seconds.
    """

    def __init__(
        self,
        index: int,
        agent_factory: Callable[..., Agent],
        agent_args: Mapping[str, Any],
        env_factory: Callable[..., Environment],
        env_args: Mapping[str, Any],
        collection: Collection,
        *,
        seed: int = 0,
        compression: str | None = None,
        timeout: float = 60.0,
    ) -> None:
        if not isinstance(collection, Collection):
            raise TypeError(
                f"CollectionWorker: collection must be a Collection, got {type(collection).__name__}"
            )
        self.index = index
        self.compression = compression
        n_envs, processes = collection.n_envs, collection.processes
        base = derive_seed(seed, f"collection {index}")
        factories = (agent_factory, agent_args, env_factory, env_args)
        layout: dict[str, Any] = {"n_envs": n_envs, "n_timesteps": collection.n_steps, "seed": base}
        self.batcher: Batcher
        if processes == 0:
            self.batcher = LocalBatcher(*factories, **layout)
        else:
            self.batcher = MultiprocessBatcher(*factories, **layout, n_processes=processes, timeout=timeout)
        self.n_rows = n_envs * max(1, processes)
        self.returns = EpisodeReturns(self.n_rows)
        self.version = -1
        self._started = False
        self._closed = False

    def ready(self) -> tuple[str, int]:
        """Where the worker runs, ``(Ray node id, process id)``: answers once it is constructed."""
        return node_and_pid()

    def set_weights(self, weights: Mapping[str, torch.Tensor] | list[Any], version: int) -> None:
        """Load ``weights`` (a state dict, or ``[ref]`` to one in Ray's object store), the policy ``version``.

        Weights that arrive after ``close()`` (sent before the scheme stopped) are dropped.
        """
        if self._closed:
            return
        self.batcher.update(resolve_weights(weights))
        self.version = version

    def collect(self) -> Rollout:
        """Run ``n_steps`` steps on every environment; the rollout, packed unless ``compression`` is None."""
        start = time.monotonic()
        if not self._started:
            self.batcher.reset()
            self._started = True
        self.batcher.execute()
        batch = self.batcher.get()
        self.returns.add(batch.trajectories)
        finished, self.returns.finished = self.returns.finished, []
        return Rollout(
            batch if self.compression is None else pack(batch, self.compression),
            self.index,
            self.version,
            int(batch.lengths.sum()),
            finished,
            time.monotonic() - start,
        )

    def close(self) -> None:
        """Close the batcher (its worker processes). Safe to call twice."""
        self._closed = True
        self.batcher.close()


class Collectors:
    """The collection workers of one gradient worker: the in-process one, or remote ones.

    Args:
        local: the in-process worker, or None for remote workers.
        pool: the remote workers (an ``rlstruct.distributed._pool.Pool``), or None.
        collection: the scheme's collection options; the remote workers use
            ``communication``, ``fraction_workers`` (synchronous: the fraction
            of live workers whose rollouts end a call) and ``queue_limit``
            (asynchronous: the most rollouts finished and waiting or being
            collected, at any time).
    """

    def __init__(
        self, local: CollectionWorker | None, pool: Any = None, collection: Collection | None = None
    ) -> None:
        self.local, self.pool = local, pool
        self.options = Collection() if collection is None else collection
        self._queue: deque[Rollout] = deque()
        self._weights: tuple[Mapping[str, torch.Tensor] | list[Any], int] | None = None
        self._ref: list[Any] | None = None  # the latest weights in Ray's object store, once put
        self._sent: dict[int, int] = {}  # remote worker -> version of the weights it was sent

    def set_weights(self, weights: Mapping[str, torch.Tensor] | list[Any], version: int) -> None:
        """Make ``weights`` (a state dict, or ``[ref]`` to packed ones in Ray's object store) the latest.

        A worker gets the latest weights just before it starts a rollout, and
        only if it does not have them yet: weights replaced before any
        rollout starts never cross the network, and remote workers all fetch
        the same stored object.
        """
        self._weights = (weights, version)
        self._ref = weights if isinstance(weights, list) else None

    def _give_weights(self, workers: list[int]) -> None:
        """Send the latest weights to those of ``workers`` (remote indices) that lack them."""
        if self._weights is None:
            return
        weights, version = self._weights
        if self.local is not None:
            if self.local.version != version:
                self.local.set_weights(weights, version)
            return
        stale = [i for i in workers if self._sent.get(i) != version]
        if stale and self._ref is None:
            import ray

            self._ref = [ray.put(pack(dict(weights)))]
        for i in stale:
            self.pool.call(i, "set_weights", self._ref, version)
            self._sent[i] = version

    def collect(self) -> list[Rollout]:
        """The next rollouts, as ``Collection.communication`` says (see the module's docstring)."""
        if self.local is not None:
            self._give_weights([])
            return [self.local.collect()]
        if self.options.communication == "synchronous":
            while True:  # again only if every rollout in flight was lost with its worker
                idle = self.pool.idle()
                self._give_weights(idle)
                for i in idle:
                    self.pool.submit(i, "collect")
                if results := self.pool.wait(self.pool.needed(self.options.fraction_workers)):
                    return [r for _, r in sorted(results, key=lambda x: x[0])]  # by worker: reproducible
        while not self._queue:
            self._refill()
            self._queue.extend(r for _, r in self.pool.wait(1))
        rollout = self._queue.popleft()
        self._refill()
        return [rollout]

    def _refill(self) -> None:
        # Back-pressure: idle workers (least used first) start a rollout only while the rollouts
        # waiting or in flight are fewer than the queue's limit.
        for i in self.pool.idle():
            if len(self._queue) + len(self.pool.pending) >= self.options.queue_limit:
                break
            self._give_weights([i])
            self.pool.submit(i, "collect")

    @property
    def lost(self) -> list[int]:
        """The remote workers lost so far (with ``on_worker_failure="continue"``)."""
        return [] if self.pool is None else list(self.pool.lost)

    def close(self) -> None:
        """Close the in-process worker (remote ones are stopped by the scheme)."""
        if self.local is not None:
            self.local.close()


def node_and_pid() -> tuple[str, int]:
    """``(Ray node id, process id)`` of the calling process (node id "" outside Ray)."""
    node = ""
    try:
        import ray

        if ray.is_initialized():
            node = ray.get_runtime_context().get_node_id()
    except ImportError:
        pass
    return node, os.getpid()


def resolve_weights(weights: Mapping[str, torch.Tensor] | list[Any]) -> Mapping[str, torch.Tensor]:
    """A state dict from what a worker was sent: a state dict, or ``[ref]`` to one packed in Ray's store.

    Raises:
        TypeError: for anything else.
    """
    if isinstance(weights, list):
        import ray

        weights = ray.get(weights[0])
    if isinstance(weights, Packed):
        weights = unpack(weights)
    if not isinstance(weights, Mapping):
        raise TypeError(
            f"set_weights: weights must be a state dict or [ref] to one, got {type(weights).__name__}"
        )
    return weights
