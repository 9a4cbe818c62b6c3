"""rlstruct: reinforcement-learning data structures, agents, environments and batchers on PyTorch.

``import rlstruct`` does not import gymnasium: ``GymEnv`` and ``GymVectorEnv``
(and the ``envs`` module of memory tasks) are each imported the first time they
are used, as ``rlstruct.GymEnv`` or ``from rlstruct import GymEnv``. The memory
tasks are registered as gymnasium ids as soon as gymnasium is imported, before
or after rlstruct, so that ``gymnasium.make("CartPoleNoVel-v1")`` works after
``import rlstruct`` either way.
"""

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

from rlstruct.agent import Agent, replay_agent
from rlstruct.batchers import Batcher, LocalBatcher, MultiprocessBatcher
from rlstruct.checkpoint import load_checkpoint, rng_state, save_checkpoint, set_rng_state
from rlstruct.dicttensor import DictTensor, masked_dicttensor
from rlstruct.env import Environment
from rlstruct.env_check import check_env
from rlstruct.errors import ClusterError, DistributedError, RemoteWorkerError, WorkerError, WorkerTimeout
from rlstruct.logger import Logger, make_run_dir, plot_csv, plot_runs
from rlstruct.progress import Progress
from rlstruct.replay import (
    HindsightReplayBuffer,
    PrioritizedReplayBuffer,
    ReplayBuffer,
    ReplaySample,
    SequenceReplayBuffer,
    SequenceSample,
)
from rlstruct.returns import discounted_returns, gae, td_lambda, vtrace
from rlstruct.seeding import derive_seed
from rlstruct.specs import Specs, TensorSpec
from rlstruct.temporal import TemporalDictTensor
from rlstruct.torch_env import TorchEnv
from rlstruct.trajectories import Trajectories
from rlstruct.version import __version__ as __version__

__all__ = [
    "Agent",
    "Batcher",
    "ClusterError",
    "DictTensor",
    "DistributedError",
    "Environment",
    "GymEnv",
    "GymVectorEnv",
    "HindsightReplayBuffer",
    "LocalBatcher",
    "Logger",
    "MultiprocessBatcher",
    "PrioritizedReplayBuffer",
    "Progress",
    "RemoteWorkerError",
    "ReplayBuffer",
    "ReplaySample",
    "SequenceReplayBuffer",
    "SequenceSample",
    "Specs",
    "TemporalDictTensor",
    "TensorSpec",
    "TorchEnv",
    "Trajectories",
    "WorkerError",
    "WorkerTimeout",
    "check_env",
    "derive_seed",
    "discounted_returns",
    "gae",
    "load_checkpoint",
    "make_run_dir",
    "masked_dicttensor",
    "plot_csv",
    "plot_runs",
    "replay_agent",
    "rng_state",
    "save_checkpoint",
    "set_rng_state",
    "td_lambda",
    "vtrace",
]


if TYPE_CHECKING:
    from rlstruct import envs as envs
    from rlstruct.gym_env import GymEnv
    from rlstruct.gym_vector_env import GymVectorEnv

# The names whose modules import gymnasium, and the module each one is in (itself, for a module).
_GYMNASIUM = {
    "GymEnv": "rlstruct.gym_env",
    "GymVectorEnv": "rlstruct.gym_vector_env",
    "envs": "rlstruct.envs",
}


def __getattr__(name: str) -> Any:
    if name not in _GYMNASIUM:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = importlib.import_module(_GYMNASIUM[name])
    value = module if module.__name__ == f"{__name__}.{name}" else getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_GYMNASIUM})


class _RegisterMemoryTasks(importlib.abc.MetaPathFinder):
    """Registers the memory tasks once gymnasium has been imported, by whoever imports it first.

    It finds nothing itself: on the first ``import gymnasium`` it takes itself
    off ``sys.meta_path``, lets the usual finders find gymnasium, and has the
    loader import ``rlstruct.envs`` right after gymnasium's own code ran.
    """

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != "gymnasium":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec("gymnasium")
        if spec is None or spec.loader is None:
            return spec
        run_gymnasium = spec.loader.exec_module

        def run_then_register(module: ModuleType) -> None:
            run_gymnasium(module)
            importlib.import_module("rlstruct.envs")

        spec.loader.exec_module = run_then_register  # type: ignore[method-assign]
        return spec


if "gymnasium" in sys.modules:  # already paid for: register now
    importlib.import_module("rlstruct.envs")
elif not any(isinstance(finder, _RegisterMemoryTasks) for finder in sys.meta_path):
    sys.meta_path.insert(0, _RegisterMemoryTasks())
