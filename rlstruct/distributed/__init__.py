"""Scale-out on Ray: remote collection and gradient workers arranged in schemes, driven by a ``Learner``.

Build a ``Scheme`` from factories (agent, environment, algorithm, buffer) and
its options (``Collection``, ``Gradients``, ``Updates``), then step a ``Learner`` to a target number of environment steps.
With no remote workers everything runs in the calling process and Ray is not
needed; remote workers need the ``ray`` extra (``pip install -e ".[ray]"``).
See ``docs/distributed.md``.
"""

from __future__ import annotations

from rlstruct.distributed.algorithms import IMPALA, PPO, Algorithm, Buffer, MinibatchBuffer, WholeBatchBuffer
from rlstruct.distributed.collection import CollectionWorker, Collectors, Rollout
from rlstruct.distributed.gradients import GradientResult, GradientWorker
from rlstruct.distributed.learner import Learner
from rlstruct.distributed.off_policy import DQN, SAC, HindsightStorage, PrioritizedStorage, ReplayStorage
from rlstruct.distributed.options import Collection, Gradients, Updates
from rlstruct.distributed.scheme import Scheme, StepInfo
from rlstruct.errors import DistributedError, RemoteWorkerError

__all__ = [
    "DQN",
    "IMPALA",
    "PPO",
    "SAC",
    "Algorithm",
    "Buffer",
    "Collection",
    "CollectionWorker",
    "Collectors",
    "DistributedError",
    "GradientResult",
    "GradientWorker",
    "Gradients",
    "HindsightStorage",
    "Learner",
    "MinibatchBuffer",
    "PrioritizedStorage",
    "RemoteWorkerError",
    "ReplayStorage",
    "Rollout",
    "Scheme",
    "StepInfo",
    "Updates",
    "WholeBatchBuffer",
]
