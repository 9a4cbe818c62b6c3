"""Collective operations across processes and machines, on ``torch.distributed``.

``fork(n)`` turns the running script into ``n + 1`` processes (or joins the
group that ``torchrun`` started); the operations then combine numbers,
tensors, DictTensors and gradients element-wise across them. Every process
makes the same calls in the same order; each call checks that the
processes agree on the call and on the layout of its input, and raises
instead of hanging when they do not or when a process died. When the world
size is 1 (before ``fork``, after ``disconnect``, or ``fork(0)``), every
operation returns its input unchanged, so the same script runs alone.

Examples:
    >>> import torch
    >>> import rlstruct.cluster as ct
    >>> ct.rank(), ct.world_size()
    (0, 1)
    >>> ct.sum(torch.tensor([1, 2]))
    tensor([1, 2])
    >>> ct.statistics_scalar([2.0, 4.0]).mean
    3.0
"""

from rlstruct.cluster._agree import barrier
from rlstruct.cluster._group import (
    DEFAULT_START_TIMEOUT_S,
    DEFAULT_TIMEOUT_S,
    disconnect,
    fork,
    rank,
    world_size,
)
from rlstruct.cluster._reduce import (
    Statistics,
    average_gradients,
    avg_number,
    broadcast_parameters,
    statistics_scalar,
    sum_number,
)
from rlstruct.cluster._reduce import reduce_avg as avg
from rlstruct.cluster._reduce import reduce_max as max
from rlstruct.cluster._reduce import reduce_min as min
from rlstruct.cluster._reduce import reduce_sum as sum
from rlstruct.errors import ClusterError

__all__ = [
    "DEFAULT_START_TIMEOUT_S",
    "DEFAULT_TIMEOUT_S",
    "ClusterError",
    "Statistics",
    "average_gradients",
    "avg",
    "avg_number",
    "barrier",
    "broadcast_parameters",
    "disconnect",
    "fork",
    "max",
    "min",
    "rank",
    "statistics_scalar",
    "sum",
    "sum_number",
    "world_size",
]
