"""Algorithms built from rlstruct's public pieces, one readable module each.

Each module has a ``Config`` dataclass (a docstring under every field), a
``check(config)`` function that makes every check before anything starts
(raising ``rlstruct.errors.ConfigError``), a ``make_agent(config, spaces)``
function that builds its agent, a ``train(config, hooks=()) -> dict``
function (which calls ``check`` first) and a ``main(argv)`` command line,
also reached through ``rlstruct train ALGO`` and ``python -m
rlstruct.algos.ALGO``. The hooks of ``train`` (``rlstruct.algos.hooks``:
``EarlyStop``, ``SaveBest``, or callables of yours taking a
``TrainingEvent``) are called after each logged iteration and evaluation.
``load_run(run_dir)`` rebuilds the trained agent of a run's directory
(``rlstruct eval RUN_DIR``); ``Policy`` acts with an agent on one raw
observation at a time, outside a batcher, and exports it for deployment.
"""

from rlstruct.algos.config import ALGORITHMS
from rlstruct.algos.hooks import EarlyStop, SaveBest, TrainingEvent
from rlstruct.algos.policy import Policy
from rlstruct.algos.saved import SavedRun, load_run

__all__ = ["ALGORITHMS", "EarlyStop", "Policy", "SaveBest", "SavedRun", "TrainingEvent", "load_run"]
