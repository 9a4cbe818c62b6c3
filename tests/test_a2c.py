"""A2C (rlstruct.algos.a2c): a smoke run of a recurrent agent that logs its losses and evaluations; the value's scale."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlstruct.algos import a2c, load_run


def short_run(run_dir: Path, **fields: Any) -> dict[str, Any]:
    """A2C on CartPole-v1 for a few updates of 4 environments, without progress lines."""
    config = a2c.Config(env="CartPole-v1", n_envs=4, run_dir=str(run_dir), progress=False, **fields)
    return a2c.train(config)


def test_recurrent_a2c_smoke_run(tmp_path: Path) -> None:
    results = short_run(
        tmp_path, total_steps=512, n_steps=16, recurrent=True, eval_every=256, eval_episodes=2
    )
    assert results["env_steps"] == 512 and results["algo"] == "a2c"
    header = (Path(results["run_dir"]) / "progress.csv").read_text().splitlines()[0].split(",")
    assert {"policy_loss", "value_loss", "explained_variance", "eval_return_mean"} <= set(header)


def test_a2c_learns_its_value_in_the_targets_scale_unless_told_not_to(tmp_path: Path) -> None:
    normalizers = []
    for value_norm in (True, False):
        results = short_run(
            tmp_path / str(value_norm), total_steps=256, n_steps=32, value_norm=value_norm, eval_episodes=1
        )
        normalizers.append(getattr(load_run(results["run_dir"]).agent, "value_norm", None))
    normalizer, none = normalizers
    assert none is None and normalizer is not None
    # two updates from CartPole's returns, saved with the weights
    assert normalizer.mean.item() > 0.0 and normalizer.std.item() != 1.0


def test_a_run_saved_before_the_value_scale_loads_and_resumes_as_it_was_trained(tmp_path: Path) -> None:
    import json

    from rlstruct.algos.config import parse_config

    results = short_run(tmp_path, total_steps=512, n_steps=32, value_norm=False, checkpoint_every=256)
    run_dir = Path(results["run_dir"])
    config_path = run_dir / "config.json"
    stored = json.loads(config_path.read_text())
    del stored["value_norm"]  # as a run saved before the field was added
    config_path.write_text(json.dumps(stored))
    saved = load_run(run_dir)
    assert saved.config.value_norm is False and getattr(saved.agent, "value_norm", 0) is None
    assert saved.evaluate().mean == results["eval_return_mean"]  # the final evaluation, replayed
    assert parse_config(a2c.Config, ["--resume", str(run_dir)]).value_norm is False
