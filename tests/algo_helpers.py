"""Helpers shared by the tests of the algorithms (test_algos, test_ppo, test_impala, test_actor_critic, ...).

``message`` turns an error message into an exact ``match`` pattern;
``assert_the_run_replays_its_final_evaluation`` checks that a run's reported
evaluation is what its saved agent plays. pytest puts ``tests/`` on
``sys.path`` (see ``mp_helpers``), so the test modules import them by name.
"""

from __future__ import annotations

import math
import re
from typing import Any

from rlstruct.algos import load_run


def message(text: str) -> str:
    return re.escape(text)


def assert_the_run_replays_its_final_evaluation(results: dict[str, Any]) -> None:
    """The figure a run reports is what its saved agent plays: the checkpoint, config.json and seeds agree."""
    assert math.isfinite(results["eval_return_mean"])
    replayed = load_run(results["run_dir"]).evaluate()
    assert (replayed.mean, replayed.std) == (results["eval_return_mean"], results["eval_return_std"])
