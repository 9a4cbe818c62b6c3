"""A2C (rlstruct.algos.a2c): a smoke run of a recurrent agent that logs its losses and evaluations."""

from __future__ import annotations

from pathlib import Path

from rlstruct.algos import a2c


def test_recurrent_a2c_smoke_run(tmp_path: Path) -> None:
    config = a2c.Config(
        env="CartPole-v1",
        total_steps=512,
        n_envs=4,
        n_steps=16,
        recurrent=True,
        eval_every=256,
        eval_episodes=2,
        run_dir=str(tmp_path),
        progress=False,
    )
    results = a2c.train(config)
    assert results["env_steps"] == 512 and results["algo"] == "a2c"
    header = (Path(results["run_dir"]) / "progress.csv").read_text().splitlines()[0].split(",")
    assert {"policy_loss", "value_loss", "explained_variance", "eval_return_mean"} <= set(header)
