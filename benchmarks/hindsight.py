"""Hindsight relabelling: DQN with and without ``--her`` on bit flipping, side by side.

Both runs are ``rlstruct train dqn --env BitFlip-v0`` (15 bits; ``--env
BitFlip25-v0`` for 25) with DQN's tuned settings for the task, one with
``--her`` and one with ``--no-her``, on the same seeds and budget. Each
trained policy then plays ``--episodes`` greedy episodes (seeds apart from
training's); an episode is a success when it reaches the goal at least once,
which is when its return is above ``-n_bits`` (every step off the goal costs
1). Target (200k env steps, 15 bits): a success rate of at least 0.9 with
hindsight, where DQN without it stays below 0.1.

Usage:
    python benchmarks/hindsight.py [--quick] [--env BitFlip-v0] [--seeds N] [--json PATH]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import sys
import tempfile
from typing import Any

import gymnasium as gym
from _common import Row, parse_args, report

from rlstruct.algos import dqn
from rlstruct.algos.saved import load_run

EVAL_SEED = 10**6
"""The seed of the evaluation episodes (training's are 0, 1, ...)."""


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--env", default="BitFlip-v0", help="BitFlip-v0 (15 bits) or BitFlip25-v0")
    parser.add_argument("--seeds", type=int, default=1, metavar="N", help="train seeds 0 to N-1 (default 1)")
    parser.add_argument("--episodes", type=int, default=100, help="greedy episodes per policy (default 100)")
    parser.add_argument("--total-steps", type=int, help="env steps of each run (default: the tuned 200k)")


def run(env: str, her: bool, seed: int, total_steps: int | None, episodes: int) -> dict[str, Any]:
    """Train one run; its success rate and mean return over ``episodes`` greedy episodes."""
    n_bits = gym.spec(env).kwargs.get("n_bits", 15)
    argv = ["--env", env, "--her" if her else "--no-her", "--seed", str(seed), "--no-progress"]
    if total_steps is not None:
        argv += ["--total-steps", str(total_steps)]
    with (
        tempfile.TemporaryDirectory() as run_dir,
        contextlib.redirect_stdout(io.StringIO()),
        contextlib.redirect_stderr(io.StringIO()),
    ):
        results = dqn.main([*argv, "--run-dir", run_dir])  # the command line: the tuned settings apply
        returns = load_run(results["run_dir"]).evaluate(episodes, seed=EVAL_SEED).returns
    return {
        "success": sum(r > -n_bits for r in returns) / len(returns),
        "return": statistics.mean(returns),
        "wall_s": results["wall_s"],
        "env_steps": results["env_steps"],
    }


def main() -> None:
    args, _ = parse_args(__doc__.split("\n\n")[0], extra=options)
    total = 2_000 if args.quick else args.total_steps
    episodes = 10 if args.quick else args.episodes
    rows: list[Row] = []
    for her in (True, False):
        label = "DQN --her" if her else "DQN --no-her"
        results = [run(args.env, her, seed, total, episodes) for seed in range(args.seeds)]
        for seed, result in enumerate(results):
            rows += [
                Row(
                    f"{label}, seed {seed}: success rate",
                    result["success"],
                    "fraction",
                    higher_is_better=True,
                ),
                Row(f"{label}, seed {seed}: mean return", result["return"], "return", higher_is_better=True),
                Row(f"{label}, seed {seed}: training wall time", result["wall_s"], "s"),
            ]
    steps = results[0]["env_steps"]
    print(f"\n$ python {' '.join(['benchmarks/hindsight.py', *sys.argv[1:]])}")
    print(f"{args.env}, {steps} env steps per run, {episodes} greedy episodes per policy\n")
    report(args, rows, "value", "baseline")


if __name__ == "__main__":
    main()
