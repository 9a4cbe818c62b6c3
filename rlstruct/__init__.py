"""rlstruct: reinforcement-learning data structures, agents, environments and batchers on PyTorch."""

from rlstruct.agent import Agent, replay_agent
from rlstruct.batchers import LocalBatcher, MultiprocessBatcher
from rlstruct.dicttensor import DictTensor, masked_dicttensor
from rlstruct.env import Environment
from rlstruct.errors import ClusterError, WorkerError, WorkerTimeout
from rlstruct.gym_env import GymEnv
from rlstruct.specs import Specs, TensorSpec
from rlstruct.temporal import TemporalDictTensor
from rlstruct.trajectories import Trajectories

__all__ = [
    "Agent",
    "ClusterError",
    "DictTensor",
    "Environment",
    "GymEnv",
    "LocalBatcher",
    "MultiprocessBatcher",
    "Specs",
    "TemporalDictTensor",
    "TensorSpec",
    "Trajectories",
    "WorkerError",
    "WorkerTimeout",
    "masked_dicttensor",
    "replay_agent",
]

__version__ = "0.1.0"
