"""Scheme: where collection, gradients and updates run, and how they talk; built from factories.

A scheme has three kinds of workers:

- **collection workers** (``Collection.remote_workers`` Ray actors per
  gradient worker, or one in-process worker when 0), each owning a batcher;
- **gradient workers** (``Gradients.remote_workers`` Ray actors, or one
  in-process worker when 0), each owning a model copy, the algorithm, the
  buffer and its collection workers;
- the **update worker**, in the calling process: it applies gradients
  (centralised) and holds the reference weights.

The schemes (``Scheme.step`` runs one update):

============================  =================================================================
``Updates.execution``,        one ``step()``
``Gradients.communication``
============================  =================================================================
centralised, synchronous      every gradient worker computes the gradients of its next
                              minibatch; the update worker averages them, applies them and
                              broadcasts the weights to all (one object in Ray's store)
centralised, asynchronous     the update worker applies the first gradients to arrive and
                              sends the new weights to that worker only; the others go on
                              with the weights they have (parameter-server style)
decentralised (synchronous)   every gradient worker computes its gradients, the workers
                              average them with ``torch.distributed`` (gloo on the CPU,
                              nccl on CUDA) and each applies the same update
============================  =================================================================

With ``Gradients.local_steps=k`` above 1 (centralised, synchronous), one step is
one round trip of up to ``k`` updates: every gradient worker takes up to
``k`` optimiser steps on its next minibatches with its own optimiser,
stopping at the end of its batch, and the update worker averages the
parameters they reach and broadcasts them.

Collection is synchronous (optionally preempted once ``Collection.fraction_workers``
of the workers have finished) or asynchronous (a bounded queue with
back-pressure); see ``rlstruct.distributed.collection``.

Examples:
    >>> from functools import partial
    >>> from rlstruct import GymEnv
    >>> from rlstruct.learning.actor_critic import ActorCritic
    >>> from rlstruct.distributed import PPO, Collection, MinibatchBuffer, Scheme
    >>> scheme = Scheme(ActorCritic, {"obs_dim": 4, "n_actions": 2}, GymEnv, {"env": "CartPole-v1"},
    ...                 PPO, partial(MinibatchBuffer, n_epochs=1, minibatch_size=64),
    ...                 collection=Collection(n_envs=2, n_steps=32))
    >>> info = scheme.step()  # all in this process: no Ray needed
    >>> info.env_steps, info.version
    (64, 1)
    >>> scheme.close()
"""

from __future__ import annotations

import functools
import importlib.util
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from rlstruct.agent import Agent
from rlstruct.batchers import cpu_weights
from rlstruct.checks import check_choice, check_device, check_kwargs, check_number, check_seed
from rlstruct.distributed.algorithms import (
    IMPALA,
    PPO,
    Algorithm,
    Buffer,
    MinibatchBuffer,
    WholeBatchBuffer,
    after_update,
    target_buffers,
    trained_module,
)
from rlstruct.distributed.codec import check_codec, pack
from rlstruct.distributed.collection import CollectionWorker, Collectors
from rlstruct.distributed.gradients import (
    GradientResult,
    GradientWorker,
    load_local_state,
    seeded,
    set_flat_gradients,
)
from rlstruct.distributed.off_policy import DQN, SAC, ReplayStorage
from rlstruct.distributed.options import Collection, Gradients, Updates, check_combination
from rlstruct.env import Environment
from rlstruct.errors import DistributedError, describe
from rlstruct.learning.protocols import merge_observation_moments

__all__ = ["Scheme", "StepInfo"]

ALGORITHM_MEMBERS = ("model", "optimizer", "max_grad_norm", "prepare", "loss", "set_parameter")
"""What ``Algorithm`` asks of an algorithm, named when one lacks some."""

FAILURES = ("raise", "continue")
"""The values of ``Scheme``'s ``on_worker_failure``."""


@dataclass
class StepInfo:
    """What one ``Scheme.step()`` did.

    Attributes:
        version: the policy version after the step.
        updates: gradients applied in the step (optimiser steps on the
            reference weights): 1, or more when asynchronous gradient
            workers delivered several at once.
        env_steps: environment steps collected for it.
        episode_returns: returns of the episodes that ended in those steps.
        policy_lag: policy lags of the batches that entered a buffer (versions
            between the weights that collected a batch and those that first
            trained on it).
        gradient_asynchrony: for each gradient applied, how many updates
            were made since the weights it was computed with (0 when synchronous).
        stats: the loss terms, averaged over the gradient workers.
        lost_workers: ``(role, index)`` of the workers lost so far.
        sent_bytes: bytes of gradients sent to the update worker; ``raw_bytes`` before compression.
        rollout_bytes: bytes of rollouts sent by remote collection workers to
            their gradient workers; ``rollout_raw_bytes`` before compression.
        batch_end: True when every gradient of the step came from the last
            minibatch of its batch (no gradient worker is mid-batch).
    """

    version: int
    updates: int = 0
    env_steps: int = 0
    episode_returns: list[float] = field(default_factory=list)
    policy_lag: list[float] = field(default_factory=list)
    gradient_asynchrony: list[int] = field(default_factory=list)
    stats: dict[str, float] = field(default_factory=dict)
    lost_workers: list[tuple[str, int]] = field(default_factory=list)
    sent_bytes: int = 0
    raw_bytes: int = 0
    rollout_bytes: int = 0
    rollout_raw_bytes: int = 0
    batch_end: bool = True


def _check_env_id(env_factory: object, env_args: Mapping[str, Any]) -> None:
    """A gymnasium id for ``GymEnv`` or ``GymVectorEnv`` must be one gymnasium knows, checked here.

    The workers make the environments at their first step (inside Ray actors
    for remote ones), where an unknown id would fail far from its cause.
    Nothing is made here. gymnasium is not imported for other environments
    (an ``env_factory`` of those classes means ``rlstruct.gym_env`` is
    imported already); a ``"module:EnvId"`` whose module this process cannot
    find (one that only the workers have) is left to them, and one it finds
    is imported, as the workers will. A ``functools.partial`` of those
    classes is not looked into.
    """
    env = env_args.get("env")
    gym_env = sys.modules.get("rlstruct.gym_env")
    if not isinstance(env, str) or not isinstance(env_factory, type) or gym_env is None:
        return
    gym_vector_env = sys.modules.get("rlstruct.gym_vector_env")
    classes = (gym_env.GymEnv, *([gym_vector_env.GymVectorEnv] if gym_vector_env else []))
    if not issubclass(env_factory, classes):
        return
    module, colon, _ = env.partition(":")  # as resolve_env reads it
    if colon and module:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # a parent package missing, or an empty name
            found = False
        if not found:
            return
    gym_env.check_env_id("Scheme: env_args['env']", env)


def _device(value: object) -> torch.device:
    device = check_device("Scheme", value)
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"Scheme: device must be 'cpu', 'cuda' or 'cuda:<index>', got {value!r}")
    return device


class Scheme:
    """Collection, gradient and update workers arranged as the options say.

    With no remote workers everything runs in the calling process and Ray is
    not needed. With remote workers, Ray must be installed
    (``pip install -e ".[ray]"`` in a checkout); the scheme connects to the running
    cluster (``ray.init()`` is called with no arguments if it was not:
    ``RAY_ADDRESS`` or a local instance).

    Making or stepping a scheme leaves the caller's random generators
    (torch's, ``random``'s and NumPy's) as they were: the model, algorithm
    and buffers are made under ``seeded`` (torch's CPU generator seeded
    from ``seed``, then given back). ``weights()`` reads the weights
    without writing to ``model``.

    Args:
        agent_factory: makes the agent the collection workers run and the
            model the gradient workers train (so it must be a
            ``torch.nn.Module``); picklable, as for the batchers.
        agent_args: keyword arguments for ``agent_factory``.
        env_factory: makes the environments (picklable), as for the batchers.
        env_args: keyword arguments for ``env_factory``.
        algo_factory: ``algo_factory(model)`` makes the algorithm
            (``rlstruct.distributed.PPO``, ``IMPALA``, ``SAC``, ``DQN`` or any
            ``Algorithm``); use ``functools.partial`` for its hyperparameters.
        buffer_factory: ``buffer_factory()`` makes a gradient worker's buffer
            (``MinibatchBuffer`` or ``WholeBatchBuffer`` on-policy,
            ``ReplayStorage``, ``PrioritizedStorage`` or ``HindsightStorage``
            off-policy, or any ``Buffer``). It is also called once here, to
            check what it makes before any worker starts.
        collection: where and how rollouts are collected (``Collection``:
            environments, steps, remote workers, communication); defaults
            to ``Collection()``: 8 environments x 32 steps, in process.
        gradients: where gradients are computed and how they reach the
            update (``Gradients``); defaults to ``Gradients()``: in process.
        updates: who applies the updates, and how often collection workers
            get the new weights (``Updates``); defaults to ``Updates()``:
            centralised, every update.
        compression: codec of the gradients sent to the update worker and the
            rollouts sent to gradient workers: "none", "lz4" or "zstd".
        device: where the update worker's model lives, and the gradient
            workers' ("cuda" on remote gradient workers needs
            ``gradients.worker_gpus``).
        seed: the base seed of the model, the environments and the buffers;
            in ``[0, 2**64)``.
        timeout: seconds any wait for remote workers may last without
            progress before ``DistributedError``, in ``(0, 1e6]``.
        start_timeout: seconds the actors have to start (scheduled, then
            constructed: importing torch, making the environments), in
            ``(0, 1e6]``.
        on_worker_failure: "raise" stops with ``RemoteWorkerError`` when a
            remote worker dies; "continue" goes on with the others (a
            decentralised scheme always stops: its group is broken).

    Raises:
        ValueError, TypeError: for a bad option or combination of options
            (``check_combination``; a ``device`` that is not a CPU or CUDA
            device, CUDA where torch has none; a buffer of the library's
            for one of its algorithms of the other kind, such as a
            ``ReplayStorage`` for ``PPO``; a factory that makes no
            ``torch.nn.Module``, ``Algorithm`` or ``Buffer``; an
            ``env_args["env"]`` id that gymnasium does not know, for
            ``GymEnv`` or ``GymVectorEnv``: ``UnknownEnvironment``, with a
            did-you-mean), naming it, before any worker starts.
        DistributedError: if the actors cannot be scheduled on the cluster
            (a request larger than any node, GPUs the cluster lacks), or are not
            running within ``start_timeout``.
    """

    def __init__(
        self,
        agent_factory: Callable[..., Agent],
        agent_args: Mapping[str, Any],
        env_factory: Callable[..., Environment],
        env_args: Mapping[str, Any],
        algo_factory: Callable[[Any], Algorithm],
        buffer_factory: Callable[[], Buffer],
        *,
        collection: Collection | None = None,
        gradients: Gradients | None = None,
        updates: Updates | None = None,
        compression: str = "none",
        device: str | torch.device = "cpu",
        seed: int = 0,
        timeout: float = 120.0,
        start_timeout: float = 120.0,
        on_worker_failure: str = "raise",
    ) -> None:
        factories: dict[str, object] = {
            "agent_factory": agent_factory,
            "env_factory": env_factory,
            "algo_factory": algo_factory,
            "buffer_factory": buffer_factory,
        }
        for name, f in factories.items():
            if not callable(f):
                raise TypeError(f"Scheme: {name} must be callable, got {describe(f)}")
        check_kwargs("Scheme", "agent_args", agent_args)
        check_kwargs("Scheme", "env_args", env_args)
        self.collection = Collection() if collection is None else collection
        self.gradients = Gradients() if gradients is None else gradients
        self.updates = Updates() if updates is None else updates
        check_codec(compression)
        self.device = _device(device)
        seed = check_seed("Scheme", seed)
        self.timeout = check_number("Scheme", "timeout", timeout, 0.0, 1e6, low_open=True)
        self.start_timeout = check_number("Scheme", "start_timeout", start_timeout, 0.0, 1e6, low_open=True)
        self.on_worker_failure = check_choice("Scheme", "on_worker_failure", on_worker_failure, FAILURES)
        check_combination(self.collection, self.gradients, self.updates, self.device)

        with seeded(seed):  # importing an id's module may draw from torch's generator
            _check_env_id(env_factory, env_args)
        with seeded(seed):
            self.model = agent_factory(**agent_args)
            if not isinstance(self.model, torch.nn.Module):
                raise TypeError(
                    f"Scheme: agent_factory must make a torch.nn.Module, got {describe(self.model)}"
                )
            self.model.to(self.device)
            self.algorithm = algo_factory(self.model)
            if not isinstance(self.algorithm, Algorithm):
                lacks = [name for name in ALGORITHM_MEMBERS if not hasattr(self.algorithm, name)]
                raise TypeError(
                    f"Scheme: algo_factory must make an Algorithm ({', '.join(ALGORITHM_MEMBERS)}), "
                    f"got {describe(self.algorithm)}"
                    + (f" without {', '.join(lacks)}" if len(lacks) < len(ALGORITHM_MEMBERS) else "")
                )
            self.trained = trained_module(self.algorithm)  # the model, or the model and its critics
        self._check_algorithm()
        with seeded(seed):
            self._check_buffer(buffer_factory)
        self.version = 0
        self._closed = False
        self._failed = False  # a start or a step failed: close() then kills the actors without waiting
        self._actors: list[Any] = []
        self._ray_session: tuple[str, str] | None = (
            None  # the Ray instance and driver job of the actors, once made
        )
        self.collection_actors: list[list[Any]] = []
        """The remote collection workers' Ray actors, a list per gradient worker (for inspection and fault drills)."""
        self.gradient_actors: list[Any] = []
        """The remote gradient workers' Ray actors, by index (for inspection and fault drills)."""
        self._orphaned: set[int] = set()
        self._lost_collectors: set[int] = set()
        self.locations: dict[str, list[tuple[str, int]]] = {"collection": [], "gradient": []}
        """Where each remote worker runs, by role: ``(Ray node id, process id)``, by index."""

        # What every collection worker and gradient worker is made from: the options go whole.
        self._collection_worker = functools.partial(
            CollectionWorker,
            agent_factory=agent_factory,
            agent_args=dict(agent_args),
            env_factory=env_factory,
            env_args=dict(env_args),
            collection=self.collection,
            seed=seed,
            timeout=self.timeout,
        )
        self._gradient_worker = functools.partial(
            GradientWorker,
            agent_factory=agent_factory,
            agent_args=dict(agent_args),
            algo_factory=algo_factory,
            buffer_factory=buffer_factory,
            updates=self.updates,
            device=str(self.device),
            seed=seed,
        )
        try:
            if self.collection.remote_workers == 0 and self.gradients.remote_workers == 0:
                collector = functools.partial(self._collection_worker, 0)
                self.local: GradientWorker | None = self._gradient_worker(0, collectors=collector)
                self.pool: Any = None
            else:
                self.local, self.pool = self._start_remote(compression)
            self._broadcast()
        except BaseException:
            self._failed = True  # actors that never started would never answer a close call
            self.close()
            raise

    def _start_remote(self, compression: str) -> tuple[GradientWorker | None, Any]:
        """Start the actors (checked against the cluster first) and wire them; the local worker or the pool."""
        from rlstruct.distributed import _pool, resources

        collection, gradients = self.collection, self.gradients
        n_grad = gradients.remote_workers
        n_col = collection.remote_workers * max(1, n_grad)
        col_request = resources.Request(
            "collection", n_col, collection.worker_cpus, collection.worker_gpus, "collection.worker"
        )
        grad_request = resources.Request(
            "gradient", n_grad, gradients.worker_cpus, gradients.worker_gpus, "gradients.worker"
        )
        resources.check([col_request, grad_request])
        import ray

        self._ray_session = _ray_identity()
        remote_collector = ray.remote(CollectionWorker).options(**col_request.options())
        for g in range(max(1, n_grad) if collection.remote_workers else 0):
            first = g * collection.remote_workers  # collection workers are numbered across the scheme
            actors = [
                remote_collector.remote(i, compression=compression, **self._collection_worker.keywords)
                for i in range(first, first + collection.remote_workers)
            ]
            self._actors.extend(actors)
            self.collection_actors.append(actors)
        for actors in self.collection_actors:
            self.locations["collection"] += _pool.wait_ready(
                "collection", actors, self.start_timeout, col_request.describe()
            )

        def collectors(g: int) -> Collectors | Callable[[], CollectionWorker]:
            if collection.remote_workers == 0:  # in the gradient worker's process, made there
                return functools.partial(self._collection_worker, g)
            first = g * collection.remote_workers  # pools report the scheme-wide index of a worker
            actors = dict(enumerate(self.collection_actors[g], first))
            pool = _pool.Pool("collection", actors, self.on_worker_failure, self.timeout)
            return Collectors(None, pool, collection)

        if n_grad == 0:
            return self._gradient_worker(0, collectors=collectors(0)), None
        remote_gradient = ray.remote(GradientWorker).options(**grad_request.options())
        # An actor sees only the GPUs it was given, numbered from 0: "cuda:1" would not exist there.
        remote_args = {**self._gradient_worker.keywords, "device": self.device.type}
        self.gradient_actors = [
            remote_gradient.remote(g, collectors=collectors(g), compression=compression, **remote_args)
            for g in range(n_grad)
        ]
        self._actors.extend(self.gradient_actors)
        self.locations["gradient"] = _pool.wait_ready(
            "gradient", self.gradient_actors, self.start_timeout, grad_request.describe()
        )
        decentralised = self.updates.execution == "decentralised"
        if decentralised:
            address, port = self._get(
                [self.gradient_actors[0].address.remote()], "start", self.start_timeout
            )[0]
            calls = [
                actor.join_group.remote(address, port, rank, n_grad, self.timeout)
                for rank, actor in enumerate(self.gradient_actors)
            ]
            self._get(calls, "join their torch.distributed group", self.start_timeout)
        # A gradient worker's call includes its own wait for its collection workers: wait longer.
        timeout, timeout_is = self.timeout, "the scheme's timeout"
        if collection.remote_workers:
            timeout, timeout_is = (
                2 * self.timeout,
                "twice the scheme's timeout, as they wait for collection too",
            )
        # A lost member breaks a decentralised group: it always stops cleanly, whatever on_worker_failure.
        on_failure = "raise" if decentralised else self.on_worker_failure
        return None, _pool.Pool("gradient", self.gradient_actors, on_failure, timeout, timeout_is)

    def _check_algorithm(self) -> None:
        """Refuse the options an algorithm with ``after_update`` cannot run under.

        Raises:
            ValueError: for ``gradients.local_steps`` above 1 with an
                algorithm whose ``after_update`` moves tensors the scheme
                cannot name (``target_buffers`` is None): rounds of local
                steps carry the parameters and the target networks, and
                nothing else that ``after_update`` may change.
        """
        if self.gradients.local_steps > 1 and target_buffers(self.algorithm) is None:
            raise ValueError(
                f"Scheme: gradients.local_steps > 1 carries the parameters and the target networks "
                f"(trained.target, a frozen_copy) back from the gradient workers, and "
                f"{type(self.algorithm).__name__} has an after_update() but no trained.target made by "
                f"frozen_copy; got gradients.local_steps={self.gradients.local_steps} (use 1)"
            )

    def _check_buffer(self, buffer_factory: Callable[[], Buffer]) -> None:
        """Refuse a buffer of the library's for one of its algorithms of the other kind, before any worker starts.

        The on-policy algorithms (``PPO``, ``IMPALA``) prepare steps or rows
        for ``MinibatchBuffer`` and ``WholeBatchBuffer``; the off-policy ones
        (``SAC``, ``DQN``) prepare transitions for the replays
        (``ReplayStorage`` and its subclasses). Another pairing failed at the
        first insert or loss, in a gradient worker. Your own algorithm or
        buffer is not checked for its pairing, only for being a ``Buffer``.

        Raises:
            TypeError: if ``buffer_factory`` makes no ``Buffer``.
            ValueError: naming the buffer, the algorithm and the buffers it takes.
        """
        buffer = buffer_factory()
        if not isinstance(buffer, Buffer):
            lacks = [name for name in ("insert", "minibatches") if not hasattr(buffer, name)]
            raise TypeError(
                f"Scheme: buffer_factory must make a Buffer (insert, minibatches), got {describe(buffer)}"
                + (f" without {', '.join(lacks)}" if len(lacks) == 1 else "")
            )
        on_policy, off_policy = (PPO, IMPALA), (SAC, DQN)
        algorithm = self.algorithm
        if not isinstance(algorithm, on_policy + off_policy):
            return
        if isinstance(algorithm, on_policy) and isinstance(buffer, ReplayStorage):
            takes = "MinibatchBuffer or WholeBatchBuffer"
        elif isinstance(algorithm, off_policy) and isinstance(buffer, (MinibatchBuffer, WholeBatchBuffer)):
            takes = "ReplayStorage, PrioritizedStorage or HindsightStorage"
        else:
            return
        raise ValueError(
            f"Scheme: buffer_factory makes a {type(buffer).__name__}, but {type(algorithm).__name__} "
            f"prepares data for {takes}"
        )

    def _get(self, refs: list[Any], what: str, timeout: float) -> list[Any]:
        """``ray.get`` of calls to gradient workers, with the library's errors."""
        import ray
        from ray.exceptions import GetTimeoutError, RayError

        try:
            return list(ray.get(refs, timeout=timeout))
        except GetTimeoutError:
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
            silent = [i for i, ref in enumerate(refs) if ref not in ready]
            raise DistributedError(f"gradient workers {silent} did not {what} within {timeout:g} s") from None
        except RayError as error:
            raise DistributedError(f"the gradient workers could not {what}: {error}") from error

    def _broadcast(self, workers: list[int] | None = None) -> None:
        """Send the update worker's weights (one object in Ray's store) to gradient ``workers`` (all if None)."""
        weights = cpu_weights(self.trained)
        if self.local is not None:
            self.local.set_weights(weights, self.version)
            return
        import ray

        ref = [ray.put(pack(weights))]  # numpy buffers: stored once, read without copies
        for i in self.pool.alive if workers is None else workers:
            if i in self.pool.alive:
                self.pool.alive[i].set_weights.remote(ref, self.version)

    def step(self) -> StepInfo:
        """One update of the model, as the scheme says; what it collected and learnt.

        Returns:
            What the step did: the gradients it applied (``updates``, more
            than one when asynchronous gradient workers delivered several),
            the environment steps and episodes collected for it, the policy
            lags, the gradient asynchrony and the loss terms.

        Raises:
            RemoteWorkerError: a remote worker raised, or died with
                ``on_worker_failure="raise"``.
            DistributedError: nothing arrived within ``timeout``, every
                worker of a role was lost, or Ray was shut down while the
                scheme was open.
            RuntimeError: after ``close``.
        """
        if self._closed:
            raise RuntimeError("Scheme.step: the scheme is closed")
        self._check_ray("Scheme.step")
        try:
            return self._step()
        except BaseException:
            self._failed = True  # a worker may be hung or gone: close() kills without waiting for it
            raise

    def _ray_gone(self) -> bool:
        """Whether the Ray instance the actors were started in was shut down (the actors went with it)."""
        if self._ray_session is None:
            return False
        import ray

        return not ray.is_initialized() or _ray_identity() != self._ray_session

    def _check_ray(self, where: str) -> None:
        """Raise DistributedError if the actors' Ray instance is gone, rather than let Ray start another."""
        if self._ray_gone():
            self._failed = True
            raise DistributedError(
                f"{where}: Ray was shut down (ray.shutdown()) while the scheme was open, and its actors with "
                "it; close the scheme (or its Learner) before ray.shutdown(), and make a new one to go on"
            )

    def _step(self) -> StepInfo:
        version = self.version
        asynchrony: list[int] = []
        if self.local is not None and self.gradients.local_steps > 1:
            results = [self.local.local_steps(self.gradients.local_steps)]
            asynchrony += self._average(results)
        elif self.local is not None:
            results = [self.local.compute_gradients()]
            asynchrony += self._apply(results)
        elif self.updates.execution == "decentralised":
            results = self._decentralised_step()
            asynchrony += [version - r.version for r in results]  # all in step: 0
        elif self.gradients.local_steps > 1:
            results = self._gather(len(self.pool.alive), "local_steps", self.gradients.local_steps)
            asynchrony += self._average(results)
            self._broadcast()
        elif self.gradients.communication == "synchronous":
            results = self._gather(len(self.pool.alive))
            asynchrony += self._apply(results)
            self._broadcast()
        else:
            results = self._gather(1)
            for result in results:  # usually one; each is applied on its own
                asynchrony += self._apply([result])
                self._broadcast([result.worker])
        self._drop_orphans()
        info = self._info(results)
        info.updates = self.version - version
        info.gradient_asynchrony = asynchrony
        return info

    def _gather(self, n: int, method: str = "compute_gradients", *args: Any) -> list[GradientResult]:
        """Start ``method(*args)`` on the idle gradient workers; the results of at least ``n`` of them."""
        while True:  # again only if every call in flight was lost with its worker
            for i in self.pool.idle():
                self.pool.submit(i, method, *args)
            if results := self.pool.wait(n):
                return [
                    r for _, r in sorted(results, key=lambda x: x[0])
                ]  # by worker: the same mean every run

    def _drop_orphans(self) -> None:
        """Stop the collection workers of lost gradient workers, and count them as lost."""
        for g in self.pool.lost if self.pool is not None else []:
            if g in self._orphaned or not self.collection_actors:
                continue
            import ray

            self._orphaned.add(g)
            for k, actor in enumerate(self.collection_actors[g]):
                ray.kill(actor)
                self._lost_collectors.add(g * self.collection.remote_workers + k)

    def _apply(self, results: list[GradientResult]) -> list[int]:
        """Average the gradients of ``results``, clip them, take an optimiser step: a new version.

        Returns the gradients' asynchrony: the updates made since the
        weights each was computed with.
        """
        asynchrony = [self.version - r.version for r in results]
        flat = torch.stack([r.flat() for r in results]).mean(0)
        set_flat_gradients(self.trained, flat)
        if self.algorithm.max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(self.trained.parameters(), self.algorithm.max_grad_norm)
        self.algorithm.optimizer.step()
        after_update(self.algorithm)
        self._merge_statistics(results)
        self.version += 1
        if self.local is not None:
            self.local.set_weights(cpu_weights(self.trained), self.version)
        return asynchrony

    def _merge_statistics(self, results: list[GradientResult]) -> None:
        """Merge the observation statistics of the batches ``results`` end into the model's, after their update."""
        for result in results:
            merge_observation_moments(self.model, result.observation_moments)

    def _average(self, results: list[GradientResult]) -> list[int]:
        """Load the mean of the parameters ``results`` reached by local steps: a version per step.

        The optimiser here takes no step (the workers' did). Returns the
        asynchrony of each result (0: all started from these weights).
        """
        asynchrony = [self.version - r.version for r in results]
        flats = [r.flat_parameters() for r in results]  # unpacked once each
        # The mean in float64, cast back: exact for one worker, and for workers that agree on a value
        mean = torch.stack([flat.double() for flat in flats]).mean(0)
        load_local_state(self.algorithm, mean.to(flats[0].dtype))
        self._merge_statistics(results)
        self.version += max(r.steps for r in results)
        if self.local is not None:
            self.local.set_weights(cpu_weights(self.trained), self.version)
        return asynchrony

    def _decentralised_step(self) -> list[GradientResult]:
        results = self._gather(len(self.pool.alive), "step")
        self.version += 1
        return results

    def _info(self, results: list[GradientResult]) -> StepInfo:
        info = StepInfo(self.version)
        stats: dict[str, list[float]] = {}
        for r in results:
            info.env_steps += r.env_steps
            info.episode_returns.extend(r.episode_returns)
            if r.policy_lag is not None:
                info.policy_lag.append(r.policy_lag)
            for k, v in r.stats.items():
                stats.setdefault(k, []).append(v)
            info.sent_bytes += r.sent_bytes
            info.raw_bytes += r.raw_bytes
            info.rollout_bytes += r.rollout_bytes
            info.rollout_raw_bytes += r.rollout_raw_bytes
            info.batch_end = info.batch_end and r.batch_end
            info.lost_workers.extend(("collection", i) for i in r.lost_collectors)
        info.lost_workers.extend(("collection", i) for i in sorted(self._lost_collectors))
        if self.pool is not None:
            info.lost_workers.extend(("gradient", i) for i in self.pool.lost)
        info.stats = {k: sum(v) / len(v) for k, v in stats.items()}
        return info

    def weights(self) -> dict[str, torch.Tensor]:
        """A copy of the current weights (a CPU state dict); from gradient worker 0 when decentralised.

        The tensors are new: later updates do not change them, and writing to
        them does not change the model. ``model`` is only read: in a
        decentralised scheme it keeps the weights the scheme started from,
        since the gradient workers hold and update theirs.

        Raises:
            RuntimeError: after ``close`` in a decentralised scheme with
                remote gradient workers, whose weights went with them (an
                in-process or centralised scheme's weights can still be read).
            DistributedError: in that scheme, if Ray was shut down while it
                was open.
        """
        if self.updates.execution == "decentralised" and self.pool is not None:
            if self._closed:
                raise RuntimeError(
                    "Scheme.weights: the scheme is closed, and its weights lived in its gradient workers; "
                    "read them before close()"
                )
            self._check_ray("Scheme.weights")
            first = next(iter(self.pool.alive.values()))
            weights = self._get([first.weights.remote()], "send their weights", self.timeout)[0]
        else:
            weights = cpu_weights(self.model)
        return {k: v.clone() for k, v in weights.items()}

    @property
    def closed(self) -> bool:
        """Whether ``close`` was called: then ``step`` and ``set_parameter`` raise."""
        return self._closed

    def set_parameter(self, name: str, value: float) -> None:
        """Set an algorithm hyperparameter everywhere it is used (update worker and gradient workers).

        Remote gradient workers get it before their next call (actors run
        calls in order); an error there is raised by the next ``step()``.

        Raises:
            RuntimeError: after ``close``.
            DistributedError: if Ray was shut down while the scheme was open.
        """
        if self._closed:
            raise RuntimeError("Scheme.set_parameter: the scheme is closed")
        self._check_ray("Scheme.set_parameter")
        self.algorithm.set_parameter(name, value)  # raises for a bad name, before any worker sees it
        if self.local is not None:
            self.local.set_parameter(name, value)
        elif self.pool is not None:
            self.pool.call_all("set_parameter", name, value)

    def close(self) -> None:
        """Stop every worker: the in-process ones are closed, the actors killed. Safe to call twice.

        Actors are first asked to close (leaving their ``torch.distributed``
        group, stopping their batchers), for up to ``min(timeout, 10)``
        seconds, unless the constructor or a ``step()`` failed: then an actor
        may never answer (not started, or hung), and all are killed at once.
        After ``ray.shutdown()`` the actors are already gone: there is nothing
        to stop.
        """
        if self._closed:
            return
        self._closed = True
        local = getattr(self, "local", None)
        if local is not None:
            local.close()
        if self._actors and self._ray_gone():  # they ended with their Ray instance: nothing to stop
            self._actors.clear()
        if self._actors:
            import ray

            if not self._failed:
                closing = [actor.close.remote() for actor in self._actors]
                ray.wait(closing, num_returns=len(closing), timeout=min(self.timeout, 10.0))
            for actor in self._actors:  # dead, hung or closed: killed either way
                ray.kill(actor)
            self._actors.clear()

    def __enter__(self) -> Scheme:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _ray_identity() -> tuple[str, str]:
    """This driver's Ray node and job: both change when Ray is shut down and started again (in every Ray >= 2.9)."""
    import ray

    context = ray.get_runtime_context()
    return context.get_node_id(), context.get_job_id()
