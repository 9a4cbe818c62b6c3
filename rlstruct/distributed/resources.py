"""What the scheme's actors ask of the Ray cluster, checked before any is created.

An actor that asks for more than any node has, or for GPUs the cluster
lacks, would stay pending forever; ``check`` turns that into an error that
says what was asked, what the cluster has, and which per-actor requests
would fit (``fitting``). Actors ask for no GPU unless told to.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from rlstruct.errors import DistributedError

__all__ = ["Request", "check", "fitting"]


@dataclass(frozen=True)
class Request:
    """``count`` actors of one role, each asking for ``cpus`` CPUs and ``gpus`` GPUs.

    Attributes:
        role: "collection" or "gradient", named in errors.
        count: how many actors.
        cpus: CPUs per actor (fractions allowed).
        gpus: GPUs per actor (0: the actor sees no GPU).
        option: the prefix of the scheme's options that set them, as in
            ``"gradients.worker"`` for ``gradients.worker_cpus`` (for messages).
    """

    role: str
    count: int
    cpus: float
    gpus: float
    option: str

    def options(self) -> dict[str, Any]:
        """Keyword arguments for ``ray.remote(...).options``."""
        return {"num_cpus": self.cpus, "num_gpus": self.gpus}

    def describe(self) -> str:
        """What one actor asks for, in words."""
        return f"{self.cpus:g} CPU and {self.gpus:g} GPU"


def check(requests: list[Request], nodes: list[dict[str, float]] | None = None) -> None:
    """Raise ``DistributedError`` if some requested actor can never be scheduled.

    Args:
        requests: what each role asks for.
        nodes: the total resources of each live node (``{"CPU": 2.0,
            "GPU": 1.0, ...}``); read from the running Ray cluster by default.

    Raises:
        DistributedError: an actor asks for more CPUs or GPUs than any single
            node has, or all of them together ask for more than the cluster has.
    """
    if nodes is None:
        import ray

        if not ray.is_initialized():
            ray.init()
        nodes = [dict(n["Resources"]) for n in ray.nodes() if n.get("Alive", True)]
    for key, attr in (("CPU", "cpus"), ("GPU", "gpus")):
        largest = max((n.get(key, 0.0) for n in nodes), default=0.0)
        total = sum(n.get(key, 0.0) for n in nodes)
        asked = 0.0
        for r in requests:
            each = getattr(r, attr)
            if r.count and each > largest:
                hint = (
                    f" (set {r.option}_gpus=0 to run without one)"
                    if key == "GPU"
                    else f" (set {r.option}_cpus={largest:g} or less)"
                )
                raise DistributedError(
                    f"each {r.role} worker asks for {each:g} {key} ({r.option}_{attr}), but the largest "
                    f"node of the Ray cluster has {largest:g}: it could never be scheduled{hint}"
                )
            asked += r.count * each
        if asked > total + 1e-9:
            parts = ", ".join(f"{r.count} x {getattr(r, attr):g} for {r.role}" for r in requests if r.count)
            advice = ", ".join(
                f"{option}={value:g}" for option, value in fitting(requests, attr, total).items()
            )
            raise DistributedError(
                f"the scheme's actors ask for {asked:g} {key} in all ({parts}), but the Ray cluster has "
                f"{total:g}: some would never be scheduled; ask for less per actor ({advice}) or for fewer actors"
            )


def fitting(requests: list[Request], attr: str, total: float) -> dict[str, float]:
    """Smaller per-actor requests that fit ``total``: the options to change and their new values.

    Every actor gets an equal share of ``total`` (rounded down to hundredths);
    roles already asking for no more than that keep what they ask for.

    Args:
        requests: what each role asks for.
        attr: "cpus" or "gpus".
        total: the CPUs or GPUs of the whole cluster.

    Examples:
        >>> grad = Request("gradient", 3, 1.0, 0.0, "gradients.worker")
        >>> fitting([Request("collection", 0, 1.0, 0.0, "collection.worker"), grad], "cpus", 2.0)
        {'gradients.worker_cpus': 0.66}
    """
    share = math.floor(100 * total / max(1, sum(r.count for r in requests))) / 100
    return {f"{r.option}_{attr}": share for r in requests if r.count and getattr(r, attr) > share}
