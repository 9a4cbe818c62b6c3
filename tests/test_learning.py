"""Real learning, from the command line's defaults: the figure the documentation promises."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlstruct.algos import ppo


@pytest.mark.timeout(900)
def test_ppo_solves_cartpole_within_50k_steps(tmp_path: Path) -> None:
    config = ppo.Config(env="CartPole-v1", total_steps=50_000, seed=0, run_dir=str(tmp_path), progress=False)
    results = ppo.train(config)
    assert results["env_steps"] <= 50_000
    # the final greedy evaluation over 10 episodes, not the best one seen during training
    assert results["eval_return_mean"] >= 475, results


@pytest.mark.timeout(1500)
def test_recurrent_ppo_solves_cartpole_without_velocities_within_100k_steps(tmp_path: Path) -> None:
    """The command line ``rlstruct train ppo --env CartPoleNoVel-v1 --recurrent --normalize --total-steps 100000``, seed 0."""
    config = ppo.Config(
        env="CartPoleNoVel-v1",
        total_steps=100_000,
        seed=0,
        recurrent=True,
        normalize=True,
        run_dir=str(tmp_path),
        progress=False,
    )
    results = ppo.train(config)
    assert results["env_steps"] <= 100_000
    assert results["eval_return_mean"] >= 475, results
