"""rlstruct: reinforcement-learning data structures, agents, environments and batchers on PyTorch."""

from rlstruct.dicttensor import DictTensor, masked_dicttensor
from rlstruct.specs import Specs, TensorSpec
from rlstruct.temporal import TemporalDictTensor
from rlstruct.trajectories import Trajectories

__all__ = [
    "DictTensor",
    "Specs",
    "TemporalDictTensor",
    "TensorSpec",
    "Trajectories",
    "masked_dicttensor",
]

__version__ = "0.1.0"
