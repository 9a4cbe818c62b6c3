"""Gradient workers: each owns a copy of the model, an algorithm, a buffer and its collection workers.

A ``GradientWorker`` turns collected rollouts into gradients, one minibatch
per call. When its buffer has no minibatch left it collects again: from its
in-process collection worker or from its own remote ones (see
``rlstruct.distributed.collection``). It runs in the calling process (the
scheme's in-process option) or as a Ray actor.

In a centralised scheme the worker returns the gradients
(``compute_gradients``) and the update worker applies them; with the
scheme's ``Gradients.local_steps`` above 1 it instead takes several optimiser
steps itself, with its own optimiser, and returns the parameters they lead
to (``local_steps``). In a decentralised one the gradient workers average their gradients among
themselves with ``torch.distributed`` (gloo on the CPU, nccl on CUDA) and
each applies the same update to its own copy (``step``).
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import torch

from rlstruct.agent import Agent
from rlstruct.batchers import cpu_weights
from rlstruct.distributed.algorithms import (
    Algorithm,
    Buffer,
    after_update,
    at_version,
    target_buffers,
    trained_module,
)
from rlstruct.distributed.codec import Packed, pack, unpack
from rlstruct.distributed.collection import CollectionWorker, Collectors, node_and_pid, resolve_weights
from rlstruct.distributed.off_policy import give_priorities
from rlstruct.distributed.options import Updates
from rlstruct.errors import describe
from rlstruct.learning.protocols import observation_moments
from rlstruct.seeding import derive_seed
from rlstruct.trajectories import Trajectories

__all__ = [
    "GradientResult",
    "GradientWorker",
    "flat_gradients",
    "load_local_state",
    "local_state",
    "seeded",
    "set_flat_gradients",
]


@contextlib.contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Run a block with torch's CPU generator seeded with ``seed``, and give the caller's state back after.

    What the block draws from torch's global CPU generator (a model's
    initial weights, a buffer's seed) is reproducible, and the caller's
    random stream goes on afterwards as if the block had not run: nothing
    is reseeded behind its back. The CUDA generators are left alone.

    Examples:
        >>> before = torch.get_rng_state()
        >>> with seeded(0):
        ...     first = torch.rand(2)
        >>> with seeded(0):
        ...     again = torch.rand(2)
        >>> torch.equal(first, again), torch.equal(torch.get_rng_state(), before)
        (True, True)
    """
    with torch.random.fork_rng(devices=[]):
        torch.default_generator.manual_seed(seed)
        yield


@dataclass
class GradientResult:
    """What a gradient worker reports of one minibatch, or of the minibatches of its local steps.

    Attributes:
        gradients: the flat gradients (``[n_params]``, the parameters' dtype, CPU), packed
            with the scheme's codec when they cross the network; None after a
            decentralised step (applied in place) or local steps.
        worker: the gradient worker's index.
        version: the policy version of the weights the gradients were computed with.
        env_steps: environment steps collected for this minibatch (0 unless
            it started a new batch).
        episode_returns: returns of the episodes that ended in those steps.
        policy_lag: for a new batch, how many versions its rollouts are behind
            ``version`` (mean over rollouts); else None.
        stats: the loss terms, as floats.
        lost_collectors: the worker's remote collection workers lost so far.
        sent_bytes: bytes of ``gradients`` as sent over the network (0 in
            process); ``raw_bytes`` before compression.
        rollout_bytes: bytes of the rollouts this result's collection
            received from remote collection workers (0 in process or without
            a collection); ``rollout_raw_bytes`` before compression.
        batch_end: True when this minibatch was the last of its batch.
        parameters: after local steps, the flat parameters they led to,
            then the target networks' weights (``local_state``; CPU, packed
            as ``gradients`` are); else None.
        steps: optimiser steps this result stands for: 1 for gradients,
            the number taken for local steps.
        observation_moments: with ``batch_end``, the count, mean and
            variance of the batch's observations for the model's running
            statistics (``observation_moments`` of an agent that has it, such
            as ``ActorCritic(normalize=True)``), which the update worker merges
            after the update; else None.
    """

    gradients: torch.Tensor | Packed[torch.Tensor] | None
    worker: int
    version: int
    env_steps: int = 0
    episode_returns: list[float] = field(default_factory=list)
    policy_lag: float | None = None
    stats: dict[str, float] = field(default_factory=dict)
    lost_collectors: list[int] = field(default_factory=list)
    sent_bytes: int = 0
    raw_bytes: int = 0
    rollout_bytes: int = 0
    rollout_raw_bytes: int = 0
    batch_end: bool = True
    parameters: torch.Tensor | Packed[torch.Tensor] | None = None
    steps: int = 1
    observation_moments: dict[str, torch.Tensor] | None = None

    def flat(self) -> torch.Tensor:
        """The flat gradients, unpacked if they were packed."""
        if self.gradients is None:
            raise ValueError("GradientResult.flat: a decentralised step or local steps carry no gradients")
        return self.gradients if isinstance(self.gradients, torch.Tensor) else unpack(self.gradients)

    def flat_parameters(self) -> torch.Tensor:
        """The flat parameters after local steps, unpacked if they were packed."""
        if self.parameters is None:
            raise ValueError("GradientResult.flat_parameters: only local steps carry parameters")
        return self.parameters if isinstance(self.parameters, torch.Tensor) else unpack(self.parameters)


def flat_gradients(model: torch.nn.Module) -> torch.Tensor:
    """The gradients of ``model``'s parameters as one flat CPU tensor of their dtype (zeros where there is none).

    Raises:
        ValueError: if the parameters do not share one dtype (they would be
            cast to a common one).
    """
    params = list(model.parameters())
    dtypes = {p.dtype for p in params}
    if len(dtypes) > 1:
        raise ValueError(
            f"flat_gradients: the model's parameters must share one dtype, got {sorted(map(str, dtypes))}"
        )
    parts = [
        (p.grad if p.grad is not None else torch.zeros_like(p)).detach().reshape(-1).to("cpu") for p in params
    ]
    return torch.cat(parts)


def set_flat_gradients(model: torch.nn.Module, flat: torch.Tensor) -> None:
    """Set the gradients of ``model``'s parameters from ``flat`` (as ``flat_gradients`` made it).

    Raises:
        ValueError: if ``flat`` does not hold one value per parameter element.
    """
    params = list(model.parameters())
    total = sum(p.numel() for p in params)
    if flat.dim() != 1 or flat.numel() != total:
        raise ValueError(f"set_flat_gradients: flat must have shape [{total}], got {list(flat.shape)}")
    if params and flat.dtype != params[0].dtype:
        raise ValueError(f"set_flat_gradients: flat must have dtype {params[0].dtype}, got {flat.dtype}")
    offset = 0
    for p in params:
        p.grad = flat[offset : offset + p.numel()].view_as(p).to(p.device)
        offset += p.numel()


def _local_tensors(algorithm: Algorithm) -> list[torch.Tensor]:
    """The tensors a round of local steps carries: the trained parameters, then ``target_buffers``."""
    return [*trained_module(algorithm).parameters(), *(target_buffers(algorithm) or [])]


def local_state(algorithm: Algorithm) -> torch.Tensor:
    """What a round of local steps sends: the trained parameters, then the target networks' tensors, flat.

    One CPU tensor of the parameters' dtype: ``trained_module(algorithm)``'s
    parameters, followed by ``target_buffers(algorithm)`` (none for an
    algorithm without target networks). ``load_local_state`` reads it back.
    """
    return torch.cat([t.detach().reshape(-1) for t in _local_tensors(algorithm)]).to("cpu")


def load_local_state(algorithm: Algorithm, flat: torch.Tensor) -> None:
    """Load ``flat`` (as ``local_state`` made it, or a mean of such) into the algorithm's parameters and targets."""
    tensors = _local_tensors(algorithm)
    sizes = [t.numel() for t in tensors]
    if flat.dim() != 1 or flat.numel() != sum(sizes):
        raise ValueError(f"load_local_state: flat must have shape [{sum(sizes)}], got {list(flat.shape)}")
    if flat.dtype != tensors[0].dtype:
        raise ValueError(f"load_local_state: flat must have dtype {tensors[0].dtype}, got {flat.dtype}")
    parts = flat.to(tensors[0].device).split(sizes)  # one copy to the model's device
    with torch.no_grad():
        for t, part in zip(tensors, parts, strict=True):
            t.copy_(part.view_as(t))


class GradientWorker:
    """Computes gradients of the algorithm's loss on rollouts of its own collection workers.

    Args:
        index: the worker's index: the model, algorithm, buffer and
            in-process collection worker are made with torch's CPU generator
            seeded with ``derive_seed(seed, f"gradient {index}")`` (see
            ``seeded`` and ``rlstruct.seeding``; the process's own random
            state is given back after), so that no two gradient workers
            shuffle alike.
        agent_factory: makes the model (an agent that is a ``torch.nn.Module``).
        agent_args: keyword arguments for ``agent_factory``.
        algo_factory: makes the algorithm: ``algo_factory(model)``.
        buffer_factory: makes the buffer: ``buffer_factory()``.
        collectors: ``Collectors`` of this worker, or a function without
            arguments that makes its in-process ``CollectionWorker`` (called
            here, in the worker's process; a ``functools.partial`` of
            ``CollectionWorker`` is picklable).
        updates: the scheme's update options: collection workers get new
            weights every ``updates.broadcast_interval`` versions.
        device: where the model and the training data live.
        compression: the codec of the gradients this worker returns, or None
            to return them unpacked (in-process use).
        seed: the scheme's base seed.

    Raises:
        TypeError: if ``agent_factory`` makes no ``torch.nn.Module``, or
            ``buffer_factory`` no ``Buffer``.
    """

    def __init__(
        self,
        index: int,
        agent_factory: Callable[..., Agent],
        agent_args: Mapping[str, Any],
        algo_factory: Callable[[Any], Algorithm],
        buffer_factory: Callable[[], Buffer],
        collectors: Collectors | Callable[[], CollectionWorker],
        *,
        updates: Updates | None = None,
        device: str = "cpu",
        compression: str | None = None,
        seed: int = 0,
    ) -> None:
        self.index = index
        self.device = torch.device(device)
        with seeded(derive_seed(seed, f"gradient {index}")):
            self.model = agent_factory(**agent_args)
            if not isinstance(self.model, torch.nn.Module):
                raise TypeError(
                    f"GradientWorker: agent_factory must make a torch.nn.Module, got {type(self.model).__name__}"
                )
            self.model.to(self.device)
            self.algorithm = algo_factory(self.model)
            self.trained = trained_module(self.algorithm)  # the model, or the model and its critics
            self.buffer = buffer_factory()
            if not isinstance(self.buffer, Buffer):
                raise TypeError(
                    f"GradientWorker: buffer_factory must make a Buffer (insert, minibatches), got {describe(self.buffer)}"
                )
            if not isinstance(collectors, Collectors):
                collectors = Collectors(collectors())
        self.collectors = collectors
        self.compression = compression
        self.updates = Updates() if updates is None else updates
        self.version = -1
        self._sent_version: int | None = None
        self._minibatches: Iterator[Any] = iter(())
        self._moments: dict[str, torch.Tensor] | None = None
        self._next: Any = None
        self._own_group = False

    def ready(self) -> tuple[str, int]:
        """Where the worker runs, ``(Ray node id, process id)``: answers once it is constructed."""
        return node_and_pid()

    def set_weights(self, weights: Mapping[str, torch.Tensor] | list[Any], version: int) -> None:
        """Load ``weights`` (a state dict, or ``[ref]`` to one in Ray's object store) as policy ``version``.

        The collection workers get them too when ``updates.broadcast_interval``
        versions have passed since they last did (remote ones get the same
        reference, so the weights are stored once).
        """
        self.trained.load_state_dict(resolve_weights(weights))
        self.version = version
        at_version(self.algorithm, version)
        self._maybe_broadcast(weights if self.trained is self.model else None)

    def _maybe_broadcast(self, weights: Mapping[str, torch.Tensor] | list[Any] | None) -> None:
        """Give the collection workers ``weights`` (None: a copy of the model's) if ``broadcast_interval`` says so.

        A copy, since the collectors send them only when a rollout starts,
        and the model may change in place before that.
        """
        if self._sent_version is None or self.version - self._sent_version >= self.updates.broadcast_interval:
            if weights is None:
                weights = {k: v.clone() for k, v in self.weights().items()}
            self.collectors.set_weights(weights, self.version)
            self._sent_version = self.version

    def set_parameter(self, name: str, value: float) -> None:
        """``Algorithm.set_parameter`` on this worker's algorithm."""
        self.algorithm.set_parameter(name, value)

    def _backward(self) -> GradientResult:
        """Compute the next minibatch's gradients into the model; collect first if the buffer is spent."""
        result = GradientResult(None, self.index, self.version)
        minibatch = self._next
        lags: list[float] = []
        while minibatch is None:  # a replay still filling gives none: collect again
            if lags and not getattr(self.buffer, "filling", False):
                raise ValueError(
                    f"GradientWorker: the buffer ({type(self.buffer).__name__}) gave no minibatch for a "
                    "collected batch"
                )
            rollouts = self.collectors.collect()
            batch = rollouts[0].trajectories() if len(rollouts) == 1 else self._cat(rollouts)
            batch = batch.to(self.device)
            with torch.no_grad():
                self.buffer.insert(self.algorithm.prepare(batch))
            self._moments = observation_moments(self.model, batch.trajectories)
            self._minibatches = self.buffer.minibatches()
            minibatch = next(self._minibatches, None)
            result.env_steps += sum(r.env_steps for r in rollouts)
            result.episode_returns += [x for r in rollouts for x in r.episode_returns]
            lags.append(sum(self.version - r.version for r in rollouts) / len(rollouts))
            result.lost_collectors = self.collectors.lost
            packed = [r.batch for r in rollouts if isinstance(r.batch, Packed)]
            result.rollout_bytes += sum(p.nbytes for p in packed)
            result.rollout_raw_bytes += sum(p.raw_nbytes for p in packed)
        if lags:
            result.policy_lag = sum(lags) / len(lags)
        self._next = minibatch  # pending until its loss went through: a step that failed retries it
        self.trained.zero_grad(set_to_none=True)
        loss, result.stats = self.algorithm.loss(minibatch)
        loss.backward()
        give_priorities(self.algorithm, self.buffer)  # a prioritized storage's, before its next draw
        self._next = next(self._minibatches, None)  # looked up now, to tell whether this one ends the batch
        result.batch_end = self._next is None
        if result.batch_end:  # merged by the update worker after the batch's last update
            result.observation_moments, self._moments = self._moments, None
        return result

    @staticmethod
    def _cat(rollouts: list[Any]) -> Trajectories:
        return Trajectories.cat([r.trajectories() for r in rollouts])

    def compute_gradients(self) -> GradientResult:
        """The gradients of the next minibatch's loss (centralised schemes), packed unless ``compression`` is None."""
        result = self._backward()
        result.gradients = self._send(result, flat_gradients(self.trained))
        return result

    def local_steps(self, k: int) -> GradientResult:
        """Up to ``k`` optimiser steps here, stopping after the batch's last minibatch; the parameters reached.

        Each step is the update worker's step on one minibatch's gradients:
        missing gradients count as zeros, the gradients are clipped to
        ``max_grad_norm``, this worker's optimiser (its own state) takes
        the step and the algorithm's ``after_update`` follows it (target
        networks). Only the first step may collect a new batch (the one
        before it ended a batch), so the collection workers always have the
        weights the round started from.

        Returns:
            The result of the round: the first step's collection (env
            steps, returns, policy lag), the last step's loss terms and
            ``batch_end``, ``steps`` taken (1 to ``k``) and the flat
            ``parameters`` after them (``local_state``: the target networks'
            tensors after them), packed unless ``compression`` is None.
        """
        result = self._backward()
        result.steps = 0
        while True:
            for p in self.trained.parameters():
                if p.grad is None:  # the update worker gets zeros for these (flat_gradients)
                    p.grad = torch.zeros_like(p)
            if self.algorithm.max_grad_norm is not None:
                torch.nn.utils.clip_grad_norm_(self.trained.parameters(), self.algorithm.max_grad_norm)
            self.algorithm.optimizer.step()
            after_update(self.algorithm)
            result.steps += 1
            if result.batch_end or result.steps == k:
                break
            step = self._backward()
            result.stats, result.batch_end = step.stats, step.batch_end
            result.observation_moments = step.observation_moments
        result.parameters = self._send(result, local_state(self.algorithm))
        return result

    def _send(self, result: GradientResult, flat: torch.Tensor) -> torch.Tensor | Packed[torch.Tensor]:
        """``flat`` as it goes to the update worker: packed, its sizes in ``result``, unless in process."""
        if self.compression is None:  # in-process: nothing crosses the network
            return flat
        packed = pack(flat, self.compression)
        result.sent_bytes, result.raw_bytes = packed.nbytes, packed.raw_nbytes
        return packed

    # Decentralised schemes.

    def address(self) -> tuple[str, int]:
        """An address and a free port of this worker's node, for the process group's rendezvous."""
        import ray

        with socket.socket() as s:
            s.bind(("", 0))
            port = int(s.getsockname()[1])
        return ray.util.get_node_ip_address(), port

    def join_group(self, address: str, port: int, rank: int, world_size: int, timeout: float) -> None:
        """Join the gradient workers' ``torch.distributed`` group: nccl on CUDA, else gloo."""
        backend = "nccl" if self.device.type == "cuda" else "gloo"
        torch.distributed.init_process_group(
            backend,
            init_method=f"tcp://{address}:{port}",
            rank=rank,
            world_size=world_size,
            timeout=timedelta(seconds=timeout),
        )
        self._own_group = True

    def step(self) -> GradientResult:
        """Decentralised: the next minibatch's gradients, averaged over the group, applied here.

        Every member averages the same gradients and takes the same optimiser
        step from the same weights, so the copies stay identical.
        """
        from rlstruct import cluster

        result = self._backward()
        cluster.average_gradients(self.trained)
        max_norm = self.algorithm.max_grad_norm
        if max_norm is not None:
            torch.nn.utils.clip_grad_norm_(self.trained.parameters(), max_norm)
        self.algorithm.optimizer.step()
        after_update(self.algorithm)
        self.version += 1
        self._maybe_broadcast(None)
        return result

    def weights(self) -> dict[str, torch.Tensor]:
        """The model's state dict on the CPU (the agent's: what the collection workers load)."""
        return cpu_weights(self.model)

    def trained_weights(self) -> dict[str, torch.Tensor]:
        """The state dict on the CPU of all the algorithm trains: the model, and an off-policy algorithm's
        critics and target networks (``rlstruct.distributed.algorithms.trained_module``)."""
        return cpu_weights(self.trained)

    def close(self) -> None:
        """Leave the process group it joined and close the in-process collection worker. Safe to call twice."""
        if self._own_group and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
            self._own_group = False
        self.collectors.close()
