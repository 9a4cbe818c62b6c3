"""Learning speed: rlstruct's algorithms against Stable-Baselines3 with matched hyperparameters, in one run.

Rows:

- PPO and DQN on CartPole-v1: training wall time (evaluation excluded; for
  rlstruct, from the moment its worker processes are up: the set-up time is a row
  of its own) and env steps until a greedy evaluation of 10 episodes, every ``--eval-every`` env
  steps, first reaches the threshold (475 for PPO, 400 for DQN). Target: wall
  time <= 0.7x Stable-Baselines3's.
- "ppo-array": PPO on the torch CartPole (``--env-backend torch``), 64
  environments stepped as arrays, with ``ARRAY_PPO``'s settings, against the
  same Stable-Baselines3 runs. Target: wall time <= 0.35x theirs.
- SAC on Pendulum-v1: env steps/s with one gradient step per env step, over the
  same number of steps. Target: >= 1.5x Stable-Baselines3's.

Stable-Baselines3 rows appear when ``stable_baselines3`` is installed (it is not
a dependency); without it the rows have no baseline. A threshold that is never
reached gives the whole budget and "(not reached)" in the row's name.
``--quick`` runs tiny budgets of rlstruct alone (for CI). ``--seeds N`` runs
PPO and DQN on seeds 0 to N-1 on both sides, with a row per seed and the
targets on the medians; ``--algos`` picks the rows (``ppo,ppo-array,dqn,sac``).

    python benchmarks/learning.py --json learning.json
    python benchmarks/learning.py --seeds 3 --algos ppo,ppo-array --json ppo.json
"""

from __future__ import annotations

import argparse
import csv
import importlib
import importlib.util
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from _common import Row, parse_args, report

THRESHOLDS = {"ppo": 475.0, "dqn": 400.0}

ARRAY_PPO: dict[str, Any] = {
    "env_backend": "torch",
    "n_envs": 64,
    "n_steps": 32,
    "minibatch_size": 512,
    "n_epochs": 10,
}
"""PPO on the torch CartPole: 64 environments stepped as arrays, minibatches of 512, 10 epochs.

``rlstruct train ppo --env CartPole-v1 --env-backend torch --n-envs 64 --n-steps 32
--minibatch-size 512 --n-epochs 10 --total-steps 100000``; the row "ppo-array"
compares it with the same Stable-Baselines3 runs as "ppo" (target 0.35x their
wall time)."""


def first_crossing(run_dir: Path, threshold: float, total: int) -> tuple[int, float, bool]:
    """(env steps, training wall s, reached) at the first evaluation at or above ``threshold``."""
    rows = list(csv.DictReader((run_dir / "progress.csv").open()))
    wall = {int(r["step"]): float(r["wall_s"]) for r in rows if r.get("wall_s")}
    for r in rows:
        if r.get("eval_return_mean") and float(r["eval_return_mean"]) >= threshold:
            step = int(r["step"])
            return step, wall[step], True
    return total, max(wall.values()), False


def rlstruct_to_threshold(
    algo: str, total: int, eval_every: int, root: Path, seed: int = 0, **overrides: Any
) -> tuple[int, float, bool, float]:
    """(env steps, training wall s, reached, set-up s): the clock starts once the workers are up."""
    module = importlib.import_module(f"rlstruct.algos.{algo}")
    config = module.Config(
        env="CartPole-v1",
        total_steps=total,
        eval_every=eval_every,
        run_dir=str(root),
        progress=False,
        seed=seed,
        **overrides,
    )
    results = module.train(config)
    return (*first_crossing(Path(results["run_dir"]), THRESHOLDS[algo], total), results["setup_s"])


def sb3_model(algo: str, seed: int) -> Any:
    """Stable-Baselines3's model with RL Baselines3 Zoo's CartPole / Pendulum hyperparameters."""
    import stable_baselines3 as sb3
    from stable_baselines3.common.env_util import make_vec_env

    def linear(value: float) -> Any:
        return lambda progress: progress * value

    if algo == "ppo":
        env = make_vec_env("CartPole-v1", n_envs=8, seed=seed)
        return sb3.PPO(
            "MlpPolicy", env, n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98, n_epochs=20,
            ent_coef=0.0, learning_rate=linear(0.001), clip_range=linear(0.2), seed=seed, device="cpu",
        )  # fmt: skip
    if algo == "dqn":
        return sb3.DQN(
            "MlpPolicy", "CartPole-v1", learning_rate=2.3e-3, batch_size=64, buffer_size=100_000,
            learning_starts=1000, gamma=0.99, target_update_interval=10, train_freq=256, gradient_steps=128,
            exploration_fraction=0.16, exploration_final_eps=0.04, policy_kwargs={"net_arch": [256, 256]},
            seed=seed, device="cpu",
        )  # fmt: skip
    return sb3.SAC(
        "MlpPolicy", "Pendulum-v1", learning_rate=1e-3, learning_starts=100, train_freq=1, gradient_steps=1,
        seed=seed, device="cpu",
    )  # fmt: skip


def sb3_to_threshold(algo: str, total: int, eval_every: int, seed: int = 0) -> tuple[int, float, bool]:
    """Train until a greedy evaluation reaches the threshold; evaluation time is not counted."""
    import gymnasium as gym
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.monitor import Monitor

    class Threshold(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.eval_time, self.next_eval, self.hit = 0.0, eval_every, None
            self.eval_env = Monitor(gym.make("CartPole-v1"))

        def _on_step(self) -> bool:
            if self.num_timesteps < self.next_eval:
                return True
            self.next_eval += eval_every
            start = time.perf_counter()
            mean, _ = evaluate_policy(self.model, self.eval_env, n_eval_episodes=10, deterministic=True)
            self.eval_time += time.perf_counter() - start
            if mean >= THRESHOLDS[algo]:
                self.hit = self.num_timesteps
                return False
            return True

    model = sb3_model(algo, seed=seed)
    callback = Threshold()
    start = time.perf_counter()
    model.learn(total_timesteps=total, callback=callback)
    wall = time.perf_counter() - start - callback.eval_time
    return (callback.hit or total), wall, callback.hit is not None


def rlstruct_sac_rate(steps: int, root: Path) -> float:
    from rlstruct.algos import sac  # type: ignore[attr-defined]

    config = sac.Config(
        env="Pendulum-v1", total_steps=steps, eval_every=10 * steps, run_dir=str(root), progress=False
    )
    results = sac.train(config)
    return float(results["env_steps"] / results["wall_s"])


def sb3_sac_rate(steps: int) -> float:
    model = sb3_model("sac", seed=0)
    start = time.perf_counter()
    model.learn(total_timesteps=steps)
    return steps / (time.perf_counter() - start)


def median_or_none(values: list[float | None]) -> float | None:
    """The median of ``values``, or None if any is None (no baseline)."""
    known = [v for v in values if v is not None]
    return statistics.median(known) if len(known) == len(values) else None


def _options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--seeds", type=int, default=1, metavar="N", help="PPO and DQN on seeds 0..N-1, medians (default 1)"
    )
    parser.add_argument(
        "--algos",
        default="ppo,ppo-array,dqn,sac",
        metavar="LIST",
        help="which rows, comma-separated (default all)",
    )


def main() -> None:
    args, _ = parse_args(__doc__, extra=_options)
    algos = set(args.algos.split(","))
    torch.set_num_threads(1)
    np.seterr(all="ignore")
    have_sb3 = importlib.util.find_spec("stable_baselines3") is not None and not args.quick
    budgets = {"ppo": 50_000, "ppo-array": 100_000, "dqn": 100_000}
    eval_every = 2_048 if args.quick else 5_000
    sac_steps = 200 if args.quick else 3_000
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        baselines: dict[tuple[str, int], tuple[float | None, float | None]] = {}  # SB3's, by algo and seed
        for variant in ("ppo", "ppo-array", "dqn"):
            algo = variant.partition("-")[0]
            if variant not in algos or importlib.util.find_spec(f"rlstruct.algos.{algo}") is None:
                continue
            overrides = ARRAY_PPO if variant == "ppo-array" else {}
            total = 4_096 if args.quick else budgets[variant]
            # per seed: (label, steps, wall, SB3's steps, SB3's wall, set-up)
            runs: list[tuple[str, float, float, float | None, float | None, float]] = []
            for seed in range(args.seeds):
                steps, wall, reached, setup = rlstruct_to_threshold(
                    algo, total, eval_every, root, seed, **overrides
                )
                if have_sb3 and (algo, seed) not in baselines:
                    base_steps, base_wall, _ = sb3_to_threshold(algo, budgets[algo], eval_every, seed)
                    baselines[algo, seed] = (float(base_steps), base_wall)
                base = baselines.get((algo, seed), (None, None))
                name = f"{algo} CartPole-v1" + (" (torch, 64 envs)" if overrides else "")
                label = f"{name} to {THRESHOLDS[algo]:g}" + ("" if reached else " (not reached)")
                runs.append((label, float(steps), wall, *base, setup))
            if args.seeds > 1:
                for seed, run in enumerate(runs):
                    rows.append(Row(f"{run[0]}, seed {seed}: wall s", run[2], "s", run[4]))
                    rows.append(Row(f"{run[0]}, seed {seed}: env steps", run[1], "steps", run[3]))
                label = f"{name} to {THRESHOLDS[algo]:g}, median of seeds 0-{args.seeds - 1}"
            else:
                label = runs[0][0]
            median_wall = statistics.median(r[2] for r in runs)
            median_steps = statistics.median(r[1] for r in runs)
            target = 0.35 if overrides else 0.7
            rows.append(
                Row(f"{label}: wall s", median_wall, "s", median_or_none([r[4] for r in runs]), target)
            )
            rows.append(
                Row(f"{label}: env steps", median_steps, "steps", median_or_none([r[3] for r in runs]))
            )
            median_setup = statistics.median(r[5] for r in runs)
            rows.append(Row(f"{variant}: set-up before training (worker processes), s", median_setup, "s"))
        if "sac" in algos and importlib.util.find_spec("rlstruct.algos.sac") is not None:
            rate = rlstruct_sac_rate(sac_steps, root)
            base_rate = sb3_sac_rate(sac_steps) if have_sb3 else None
            rows.append(
                Row("sac Pendulum-v1, 1 gradient step per env step", rate, "steps/s", base_rate, 1.5, True)
            )
    report(args, rows, value_label="rlstruct", baseline_label="SB3")


if __name__ == "__main__":
    main()
