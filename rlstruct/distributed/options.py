"""The options of a scheme: how it collects, computes gradients and updates, checked when made.

``Collection``, ``Gradients`` and ``Updates`` are frozen dataclasses with a
docstring under each field. Each checks its own fields, and the combinations
of its own fields, when it is made: a bad value raises ``ValueError`` or
``TypeError`` naming the field, what was expected and what was received.
``check_combination`` checks, in one place, the combinations across them
and the scheme's ``device``; ``Scheme`` calls it before any worker starts.
The scheme hands each object whole to the workers that use it.

Examples:
    >>> from rlstruct.distributed import Collection, Gradients, Updates
    >>> collection = Collection(n_envs=8, n_steps=32, remote_workers=2, communication="asynchronous")
    >>> collection.queue_limit  # one rollout ahead per worker by default
    2
    >>> Gradients(remote_workers=-1)
    Traceback (most recent call last):
        ...
    ValueError: Gradients: remote_workers must be at least 0, got -1
    >>> check_combination(collection, Gradients(), Updates(execution="decentralised"), "cpu")
    Traceback (most recent call last):
        ...
    ValueError: Scheme: updates.execution='decentralised' needs gradients.remote_workers >= 1 (the gradient workers apply the updates), got 0
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rlstruct.checks import check_choice, check_int, check_number
from rlstruct.errors import describe

__all__ = ["COMMUNICATIONS", "EXECUTIONS", "Collection", "Gradients", "Updates", "check_combination"]

COMMUNICATIONS = ("synchronous", "asynchronous")
"""The values of ``Collection.communication`` and ``Gradients.communication``."""
EXECUTIONS = ("centralised", "decentralised")
"""The values of ``Updates.execution``."""


@dataclass(frozen=True)
class Collection:
    """Where and how rollouts are collected.

    Raises:
        TypeError, ValueError: for a bad field or combination of fields, naming it.
    """

    n_envs: int = 8
    """Environments per batcher process of a collection worker (all of them when ``processes=0``); at least 1."""
    n_steps: int = 32
    """Steps per environment of each rollout; at least 1."""
    remote_workers: int = 0
    """Remote collection workers (Ray actors) per gradient worker; 0 collects in the gradient worker's process."""
    processes: int = 0
    """Worker processes of each collection worker's batcher (a ``MultiprocessBatcher``); 0 steps the
    environments in the collection worker's own process (a ``LocalBatcher``)."""
    communication: str = "synchronous"
    """``"synchronous"``: every idle worker starts a rollout and a collection waits for them (or for
    ``fraction_workers`` of them). ``"asynchronous"``: workers keep collecting into a bounded queue;
    needs ``remote_workers >= 1``."""
    fraction_workers: float = 1.0
    """Synchronous collection returns once this fraction of the live workers have finished, in
    ``(0, 1]``; the other rollouts are taken by the next collection. Below 1 needs remote workers."""
    queue_size: int | None = None
    """Asynchronous collection only: the most rollouts waiting or being collected per gradient worker,
    at least 1. None (the default) means ``remote_workers``: each worker one rollout ahead; more
    raises the throughput and the policy lag. See ``queue_limit``."""
    worker_cpus: float = 1.0
    """CPUs each remote collection worker asks Ray for, at least 0; fractions allowed (count its
    batcher's processes)."""
    worker_gpus: float = 0.0
    """GPUs each remote collection worker asks Ray for, at least 0 (0: none, ever)."""

    def __post_init__(self) -> None:
        owner = "Collection"
        check_int(owner, "n_envs", self.n_envs, 1)
        check_int(owner, "n_steps", self.n_steps, 1)
        check_int(owner, "remote_workers", self.remote_workers, 0)
        check_int(owner, "processes", self.processes, 0)
        check_choice(owner, "communication", self.communication, COMMUNICATIONS)
        fraction = check_number(owner, "fraction_workers", self.fraction_workers, 0.0, 1.0, low_open=True)
        if self.queue_size is not None:
            check_int(owner, "queue_size", self.queue_size, 1)
        check_number(owner, "worker_cpus", self.worker_cpus, 0.0)
        check_number(owner, "worker_gpus", self.worker_gpus, 0.0)
        # Combinations of these fields.
        if self.remote_workers == 0 and fraction < 1.0:
            raise ValueError(
                f"Collection: fraction_workers < 1 needs remote collection workers, got {fraction} "
                "with remote_workers=0"
            )
        if fraction < 1.0 and self.communication != "synchronous":
            raise ValueError(
                f"Collection: fraction_workers applies to synchronous collection, got {fraction} "
                f"with communication={self.communication!r}"
            )
        if self.remote_workers == 0 and self.communication != "synchronous":
            raise ValueError(
                f"Collection: communication={self.communication!r} needs remote collection workers, "
                "got remote_workers=0 (collection in process is synchronous)"
            )
        if self.queue_size is not None and self.communication != "asynchronous":
            raise ValueError(
                f"Collection: queue_size applies to asynchronous collection, got {self.queue_size} "
                f"with communication={self.communication!r}"
            )

    @property
    def queue_limit(self) -> int:
        """``queue_size``, or its default: ``remote_workers`` (at least 1)."""
        return max(1, self.remote_workers) if self.queue_size is None else self.queue_size


@dataclass(frozen=True)
class Gradients:
    """Where gradients are computed and how they reach the update.

    Raises:
        TypeError, ValueError: for a bad field or combination of fields, naming it.
    """

    remote_workers: int = 0
    """Remote gradient workers (Ray actors); 0 computes the gradients in the calling process."""
    communication: str = "synchronous"
    """``"synchronous"``: every step waits for every gradient worker. ``"asynchronous"``: the update
    worker applies the first gradients to arrive (centralised updates only); needs
    ``remote_workers >= 1``."""
    local_steps: int = 1
    """Optimiser steps a gradient worker takes per round trip, at least 1. 1: it returns one
    minibatch's gradients and the update worker applies them. ``k`` above 1: it takes up to ``k``
    steps itself with its own copy of the optimiser (and the algorithm's ``after_update`` after
    each), stopping after its batch's last minibatch, and returns its parameters (with the
    target networks, ``trained.target``, of an algorithm that has them); the update worker
    averages them and broadcasts them (as many updates as the most steps a worker took). With
    one gradient worker and the same data the
    weights are bit for bit those of 1-step rounds; with several, the update averages the workers'
    parameters after ``k`` steps each (local SGD). Above 1 needs synchronous communication here,
    centralised updates and synchronous collection."""
    worker_cpus: float = 1.0
    """CPUs each remote gradient worker asks Ray for, at least 0; fractions allowed."""
    worker_gpus: float = 0.0
    """GPUs each remote gradient worker asks Ray for, at least 0 (0: none, ever; a CUDA ``device``
    on remote gradient workers needs more)."""

    def __post_init__(self) -> None:
        owner = "Gradients"
        check_int(owner, "remote_workers", self.remote_workers, 0)
        check_choice(owner, "communication", self.communication, COMMUNICATIONS)
        check_int(owner, "local_steps", self.local_steps, 1)
        check_number(owner, "worker_cpus", self.worker_cpus, 0.0)
        check_number(owner, "worker_gpus", self.worker_gpus, 0.0)
        # Combinations of these fields.
        if self.remote_workers == 0 and self.communication != "synchronous":
            raise ValueError(
                f"Gradients: communication={self.communication!r} needs remote gradient workers, "
                "got remote_workers=0 (gradients in process are synchronous)"
            )
        if self.local_steps > 1 and self.communication != "synchronous":
            raise ValueError(
                "Gradients: local_steps > 1 needs communication='synchronous' (rounds of local steps "
                f"that end together), got local_steps={self.local_steps} with "
                f"communication={self.communication!r}"
            )


@dataclass(frozen=True)
class Updates:
    """Who applies the updates, and how often the collection workers get the new weights.

    Raises:
        TypeError, ValueError: for a bad field, naming it.
    """

    execution: str = "centralised"
    """``"centralised"``: the update worker (the calling process) applies the gradients.
    ``"decentralised"``: the gradient workers all-reduce them with ``torch.distributed`` and each
    applies the same update; needs remote gradient workers and synchronous gradients."""
    broadcast_interval: int = 1
    """Collection workers get new weights every this many updates; at least 1."""

    def __post_init__(self) -> None:
        check_choice("Updates", "execution", self.execution, EXECUTIONS)
        check_int("Updates", "broadcast_interval", self.broadcast_interval, 1)


def check_combination(
    collection: Collection, gradients: Gradients, updates: Updates, device: torch.device | str
) -> None:
    """Check the options that depend on each other across ``collection``, ``gradients`` and ``updates``.

    Args:
        collection: the scheme's collection options.
        gradients: its gradient options.
        updates: its update options.
        device: where the update worker's model lives, and the gradient
            workers' (already checked to be a CPU or CUDA device).

    Raises:
        TypeError: if an argument is not of its dataclass.
        ValueError: for a combination the scheme cannot run, naming the
            options involved and their values.
    """
    given: tuple[tuple[str, object, type], ...] = (
        ("collection", collection, Collection),
        ("gradients", gradients, Gradients),
        ("updates", updates, Updates),
    )
    for argument, options, cls in given:
        if not isinstance(options, cls):
            article = "an" if cls.__name__[0] in "AEIOU" else "a"
            raise TypeError(f"Scheme: {argument} must be {article} {cls.__name__}, got {describe(options)}")
    device = torch.device(device)
    if updates.execution == "decentralised":
        if gradients.remote_workers == 0:
            raise ValueError(
                "Scheme: updates.execution='decentralised' needs gradients.remote_workers >= 1 "
                "(the gradient workers apply the updates), got 0"
            )
        if gradients.communication != "synchronous":
            raise ValueError(
                "Scheme: updates.execution='decentralised' needs gradients.communication='synchronous' "
                f"(the workers all-reduce every update), got {gradients.communication!r}"
            )
    if gradients.local_steps > 1:
        for name, value, needed in (
            ("updates.execution", updates.execution, "centralised"),
            ("collection.communication", collection.communication, "synchronous"),
        ):
            if value != needed:
                raise ValueError(
                    f"Scheme: gradients.local_steps > 1 needs {name}={needed!r} (rounds of local steps "
                    "that end together, weights fresh at every collection), got gradients.local_steps="
                    f"{gradients.local_steps} with {name}={value!r}"
                )
    if device.type == "cuda":
        if updates.execution == "decentralised" and 0 < gradients.worker_gpus < 1:
            raise ValueError(
                "Scheme: decentralised updates on CUDA (nccl) need a whole GPU per gradient worker, "
                f"got gradients.worker_gpus={gradients.worker_gpus} (nccl refuses two ranks on one GPU)"
            )
        if gradients.remote_workers > 0 and gradients.worker_gpus == 0:
            raise ValueError(
                f"Scheme: device={str(device)!r} on remote gradient workers needs "
                "gradients.worker_gpus > 0, got 0"
            )
        if not torch.cuda.is_available():
            raise ValueError(
                f"Scheme: device={str(device)!r} needs CUDA in this process (the update worker's model "
                "lives here), but torch.cuda.is_available() is False; use device='cpu'"
            )
