"""Batchers: run agent-environment pairs and return batches of ``Trajectories``.

``LocalBatcher`` runs them in the calling process and is the reference
implementation of the batcher contract (``docs/batchers.md``);
``MultiprocessBatcher`` runs them in worker processes that write into shared
memory (``docs/multiprocess.md``).
"""

from rlstruct.batchers.local import LocalBatcher
from rlstruct.batchers.process import MultiprocessBatcher

__all__ = ["LocalBatcher", "MultiprocessBatcher"]
