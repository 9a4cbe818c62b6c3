"""A2C (rlstruct.algos.a2c): a smoke run of a recurrent agent that logs its losses and evaluations; the value's scale."""

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


def test_a2c_learns_its_value_in_the_targets_scale_unless_told_not_to(tmp_path: Path) -> None:
    from rlstruct.algos import load_run

    scales = []
    for value_norm in (True, False):
        config = a2c.Config(
            env="CartPole-v1",
            total_steps=256,
            n_envs=4,
            n_steps=32,
            value_norm=value_norm,
            eval_episodes=1,
            run_dir=str(tmp_path / str(value_norm)),
            progress=False,
        )
        agent = load_run(a2c.train(config)["run_dir"]).agent
        scales.append(getattr(agent, "value_norm", None))
    normalizer, none = scales
    assert none is None and normalizer is not None
    assert (
        normalizer.mean.item() > 0.0 and normalizer.std.item() != 1.0
    )  # two updates from CartPole's returns
