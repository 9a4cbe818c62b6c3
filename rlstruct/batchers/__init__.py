"""Batchers: run agent-environment pairs and return batches of ``Trajectories``.

``Batcher`` is their contract, a ``typing.Protocol`` (``docs/batchers.md``).
``LocalBatcher`` implements it in the calling process and is the reference the
other is tested against; ``MultiprocessBatcher`` implements it with worker
processes that write into shared memory (``docs/multiprocess.md``).
"""

from rlstruct.batchers.base import Batcher, cpu_weights
from rlstruct.batchers.local import LocalBatcher
from rlstruct.batchers.process import MultiprocessBatcher, choose_start_method

__all__ = ["Batcher", "LocalBatcher", "MultiprocessBatcher", "choose_start_method", "cpu_weights"]
