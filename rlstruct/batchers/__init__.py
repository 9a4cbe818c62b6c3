"""Batchers: run agent-environment pairs and return batches of ``Trajectories``.

``LocalBatcher`` runs them in the calling process and is the reference
implementation of the batcher contract (``docs/batchers.md``).
"""

from rlstruct.batchers.local import LocalBatcher

__all__ = ["LocalBatcher"]
