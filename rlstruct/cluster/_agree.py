"""Checking that every process makes the same call on the same layout, before any data moves.

gloo may hang or mix up data when processes reduce buffers of different
sizes, and a process that makes another call than its peers would wait for
data that never comes. So every operation first gathers a 32-byte digest of
``(operation, description)`` from every process, where the description maps
each input part (a key, a parameter) to its shape, dtype and device type.
Every process then sees the same digests and takes the same decision: go on,
or gather the full descriptions and raise an error that says which ranks
differ and how. An agreed call costs one extra small all-gather.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from typing import TypeVar, cast

import torch
import torch.distributed as dist

from rlstruct.cluster._group import rank, world_size
from rlstruct.errors import ClusterError

__all__ = ["agree", "barrier", "collective_device", "run"]

T = TypeVar("T")


def run(op: str, call: Callable[[], T]) -> T:
    """Run one collective call, turning the errors of a failed peer into ``ClusterError``."""
    try:
        return call()
    except ClusterError:
        raise
    except RuntimeError as err:
        raise ClusterError(
            f"cluster.{op} failed on rank {rank()} of {world_size()}: another process died, stopped "
            f"answering within the timeout, or did not make this call ({type(err).__name__}: {err})"
        ) from err


def collective_device() -> torch.device:
    """Where the small tensors of the module's own messages live: the CPU, unless the group has no gloo."""
    if "gloo" in str(dist.get_backend()):
        return torch.device("cpu")
    return torch.device("cuda", torch.cuda.current_device())


def agree(op: str, description: Mapping[str, str]) -> None:
    """Check that every process calls ``op`` on inputs with the same ``description``.

    Args:
        op: the operation's name.
        description: a label (``"key 'obs'"``) -> layout (``"shape (4, 3), torch.float32, cpu"``)
            for every part of the input.

    Raises:
        ClusterError: if the processes called different operations, or one failed.
        ValueError: if they called ``op`` with different descriptions, naming the ranks and parts.
    """
    payload = repr((op, sorted(description.items()))).encode()
    digest = torch.tensor(list(hashlib.sha256(payload).digest()), dtype=torch.uint8)
    digest = digest.to(collective_device())
    digests = [torch.empty_like(digest) for _ in range(world_size())]
    run(op, lambda: dist.all_gather(digests, digest))
    if all(torch.equal(d, digests[0]) for d in digests):
        return
    calls: list[object] = [None] * world_size()
    run(op, lambda: dist.all_gather_object(calls, (op, dict(description))))
    raise _disagreement(op, calls)


def _ranks(ranks: list[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(map(str, ranks))


def _disagreement(op: str, gathered: list[object]) -> Exception:
    calls = cast(list[tuple[str, dict[str, str]]], gathered)
    ops: dict[str, list[int]] = {}
    for r, (name, _) in enumerate(calls):
        ops.setdefault(name, []).append(r)
    if len(ops) > 1:
        said = "; ".join(f"{_ranks(ranks)} called {name}" for name, ranks in ops.items())
        return ClusterError(
            f"cluster.{op}: the processes made different calls ({said}); every process must make "
            "the same cluster calls in the same order"
        )
    reference = calls[0][1]
    differences = []
    for r, (_, theirs) in enumerate(calls[1:], 1):
        for label, layout in reference.items():
            if label not in theirs:
                differences.append(f"rank {r} has no {label.removeprefix('the ')} (rank 0: {layout})")
            elif theirs[label] != layout:
                differences.append(f"{label} is {theirs[label]} on rank {r} but {layout} on rank 0")
        differences += [
            f"rank {r} has {label} ({theirs[label]}), rank 0 has not"
            for label in theirs
            if label not in reference
        ]
    return ValueError(
        f"cluster.{op}: every process must pass the same layout (keys, shapes, dtypes), but "
        + "; ".join(differences)
    )


def barrier() -> None:
    """Wait until every process reaches this call.

    Raises:
        ClusterError: if a process died, does not arrive within the timeout,
            or made another call of this module instead.

    Examples:
        >>> import rlstruct.cluster as ct
        >>> ct.barrier()  # alone: returns at once
    """
    if world_size() > 1:
        agree("barrier", {})
