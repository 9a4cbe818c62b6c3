"""SAC in a scheme on Pendulum-v1: in process, and with two remote collection workers on Ray.

Both runs build the same scheme from ``rlstruct.distributed.SAC`` and a
``ReplayStorage``: a ``SquashedGaussianActor`` of 256 x 256 units, learning
rate 1e-3, a replay of 1M steps, batches of 256, one gradient step per env
step from the 1,000th step on, rounds of 16 steps per environment (one
environment per collection worker), synchronous collection and centralised
synchronous updates. The trained agent then plays 10 greedy episodes (seeds
from 10^6). Target (20k env steps): a greedy return of at least -200 with
two remote collection workers.

Usage:
    python benchmarks/off_policy_schemes.py [--quick] [--steps N] [--seed S] [--json PATH]
"""

from __future__ import annotations

import argparse
import functools
import sys
import time

import ray
import torch
from _common import Row, parse_args, report

from rlstruct import GymEnv
from rlstruct.algos.evaluation import Evaluator
from rlstruct.distributed import SAC, Collection, Learner, ReplayStorage, Scheme
from rlstruct.learning.soft_actor_critic import SquashedGaussianActor

ACTOR = {"obs_dim": 3, "action_low": [-2.0], "action_high": [2.0], "hidden": (256, 256)}
ENV = "Pendulum-v1"


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--steps", type=int, default=20_000, help="env steps of each run (default 20,000)")
    parser.add_argument("--seed", type=int, default=0, help="the schemes' seed (default 0)")


def run(collectors: int, steps: int, seed: int, learning_starts: int) -> dict[str, float]:
    """Train one scheme to ``steps`` env steps; its speed and greedy return."""
    scheme = Scheme(
        SquashedGaussianActor,
        ACTOR,
        GymEnv,
        {"env": ENV},
        functools.partial(SAC, lr=1e-3),
        functools.partial(
            ReplayStorage, 1_000_000, batch_size=256, gradient_steps=1.0, learning_starts=learning_starts
        ),
        collection=Collection(n_envs=1, n_steps=16, remote_workers=collectors, worker_cpus=0.5),
        seed=seed,
    )
    start = time.monotonic()
    with Learner(scheme, steps, progress=False) as learner:
        while not learner.done():
            learner.step()
        metrics = learner.metrics()
        weights = scheme.weights()
    wall = time.monotonic() - start
    with Evaluator(SquashedGaussianActor, ACTOR, ENV, n_episodes=10, max_steps=200, seed=10**6) as evaluator:
        result = evaluator.evaluate(weights, metrics["env_steps"])
    return {
        "return": result.mean,
        "std": result.std,
        "sps": metrics["env_steps"] / wall,
        "updates": learner.updates,
    }


def main() -> None:
    args, _ = parse_args(__doc__.split("\n\n")[0], extra=options)
    torch.set_num_threads(1)
    steps = 256 if args.quick else args.steps
    starts = 64 if args.quick else 1_000
    ray.init(num_cpus=2, include_dashboard=False, configure_logging=False)
    try:
        results = {n: run(n, steps, args.seed, starts) for n in (0, 2)}
    finally:
        ray.shutdown()
    rows: list[Row] = []
    for n, result in results.items():
        label = "in process" if n == 0 else f"{n} remote collection workers"
        rows += [
            Row(f"SAC scheme, {label}: greedy return", result["return"], "return", higher_is_better=True),
            Row(f"SAC scheme, {label}: env steps/s", result["sps"], "steps/s", higher_is_better=True),
            Row(f"SAC scheme, {label}: updates", result["updates"], "updates"),
        ]
    print(f"\n$ python {' '.join(['benchmarks/off_policy_schemes.py', *sys.argv[1:]])}")
    print(f"{ENV}, {steps} env steps per run, seed {args.seed}, greedy return over 10 episodes\n")
    report(args, rows, "value", "baseline")


if __name__ == "__main__":
    main()
