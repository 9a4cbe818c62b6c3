"""SAC in a scheme on Pendulum-v1: in process, and with two remote collection workers on Ray.

Both runs build the same scheme from ``rlstruct.distributed.SAC`` and a
``ReplayStorage``: a ``SquashedGaussianActor`` of 256 x 256 units, learning
rate 1e-3, a replay of 1M steps, batches of 256, one gradient step per env
step from the 1,000th step on, rounds of 16 steps per environment (one
environment per collection worker), synchronous collection and centralised
synchronous updates. The trained agent then plays 10 greedy episodes (seeds
from 10^6). Target (20k env steps): a greedy return of at least -200 with
two remote collection workers.

With ``--decentralised``: SAC in a decentralised scheme of two remote gradient
workers (each with its own replay, fed by one environment in its own process,
two updates per env step) on InvertedPendulumBulletEnv-v0 (the ``bullet``
extra) for 30k env steps (``--steps`` to change it). Target: at least 900.

With ``--combinations``: the same SAC on Pendulum-v1 in each of the other
combinations of collection, gradients and updates that a scheme accepts for
off-policy learning, 20k env steps each (``--steps``): asynchronous
collection (2 remote collection workers, a queue), preempted collection
(2 remote collection workers, ``fraction_workers=0.5``), 2 remote gradient
workers averaged at every update (synchronous, centralised), 2 remote
gradient workers applied as they arrive (asynchronous), 1 and 2 remote
gradient workers with ``local_steps=16``. Each has its own replay per
gradient worker; with 2 gradient workers, each collects 1 environment and
each update is one minibatch of each (so 2 gradient steps' worth of data
per env step). Target: at least -200 on each (the target of the in-process
and remote-collection runs).

With ``--dqn``: DQN in process on CartPole-v1 with ``rlstruct train dqn``'s
defaults (a dueling ``QNetwork`` of 256 x 256 units, double-Q targets, a
copy every 100 updates, batches of 256 from a 100k replay, 0.25 updates per
env step from the 1,000th step on, 4 environments x 64 steps a round, the
exploration rate from 1 to 0.05 over the first 20% and the learning rate
5e-4 annealed to 0, both set through ``update_algorithm_parameter`` after
every step), 100k env steps (``--steps``), from a ``ReplayStorage`` and from
a ``PrioritizedStorage`` (alpha 0.6, beta 0.4 grown to 1 over the run).
Target: at least 400 on each (``rlstruct train dqn``'s).

With ``--metrics``: what crosses the network, as the on-policy schemes
report it. SAC on Pendulum-v1 with 1 remote gradient worker (one update a
round trip) fed by 2 remote collection workers, 3,000 env steps
(``--steps``) learning from the 1,000th: the codecs "none", "lz4" and
"zstd", then asynchronous collection with ``Updates(broadcast_interval=1)``
and ``16`` (codec "none"). Rows: env
steps/s, the gradients sent per update (kB, and before compression), the
rollouts received per rollout of 16 steps (kB, and before compression), the
policy lag and the gradient asynchrony.

Usage:
    python benchmarks/off_policy_schemes.py [--quick] [--steps N] [--seed S]
        [--decentralised | --combinations | --dqn | --metrics] [--json PATH]
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from collections.abc import Callable
from typing import Any

import ray
import torch
from _common import Row, parse_args, report

from rlstruct import GymEnv
from rlstruct.algos.dqn import linear_schedule
from rlstruct.algos.evaluation import Evaluator, env_spaces
from rlstruct.distributed import (
    DQN,
    SAC,
    Collection,
    Gradients,
    Learner,
    PrioritizedStorage,
    ReplayStorage,
    Scheme,
    Updates,
)
from rlstruct.learning.q_learning import QNetwork
from rlstruct.learning.soft_actor_critic import SquashedGaussianActor

ENV = "Pendulum-v1"
BULLET = "pybullet_envs_gymnasium:InvertedPendulumBulletEnv-v0"


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--steps", type=int, help="env steps of each run (default 20,000; 30,000 decentralised)"
    )
    parser.add_argument("--decentralised", action="store_true", help="the decentralised Bullet run instead")
    parser.add_argument(
        "--combinations", action="store_true", help="the other scheme combinations on Pendulum-v1 instead"
    )
    parser.add_argument(
        "--dqn", action="store_true", help="DQN on CartPole-v1, uniform against prioritized, instead"
    )
    parser.add_argument(
        "--metrics", action="store_true", help="bytes, lags and asynchrony under each codec, instead"
    )
    parser.add_argument("--seed", type=int, default=0, help="the schemes' seed (default 0)")


COMBINATIONS: dict[str, dict[str, Any]] = {
    "asynchronous collection, 2 remote collection workers": {
        "collection": Collection(n_envs=1, n_steps=16, remote_workers=2, communication="asynchronous",
                                 worker_cpus=0.5),
    },
    "preempted collection, 2 remote collection workers (fraction 0.5)": {
        "collection": Collection(n_envs=1, n_steps=16, remote_workers=2, fraction_workers=0.5, worker_cpus=0.5),
    },
    "2 remote gradient workers, synchronous": {"gradients": Gradients(remote_workers=2, worker_cpus=0.5)},
    "2 remote gradient workers, asynchronous": {
        "gradients": Gradients(remote_workers=2, communication="asynchronous", worker_cpus=0.5),
    },
    "1 remote gradient worker, local_steps=16": {
        "gradients": Gradients(remote_workers=1, local_steps=16, worker_cpus=0.5),
    },
    "2 remote gradient workers, local_steps=16": {
        "gradients": Gradients(remote_workers=2, local_steps=16, worker_cpus=0.5),
    },
}  # fmt: skip
"""The combinations of ``--combinations``: the scheme's options besides the defaults of ``run``."""

METERED = Collection(n_envs=1, n_steps=16, remote_workers=2, worker_cpus=0.3)
QUEUED = Collection(n_envs=1, n_steps=16, remote_workers=2, communication="asynchronous", worker_cpus=0.3)
METRICS: dict[str, dict[str, Any]] = {
    **{f"codec {codec}": {"collection": METERED, "compression": codec} for codec in ("none", "lz4", "zstd")},
    **{
        f"asynchronous collection, broadcast_interval={interval}": {
            "collection": QUEUED,
            "updates": Updates(broadcast_interval=interval),
        }
        for interval in (1, 16)
    },
}
for metered in METRICS.values():
    metered["gradients"] = Gradients(remote_workers=1, worker_cpus=0.3)
"""The runs of ``--metrics``: 1 remote gradient worker with 2 remote collection workers, by codec."""


def run(
    env: str,
    collectors: int,
    steps: int,
    seed: int,
    learning_starts: int,
    decentralised: bool = False,
    **scheme_options: Any,
) -> dict[str, float]:
    """Train one scheme to ``steps`` env steps; its speed and greedy return.

    ``scheme_options`` (``collection``, ``gradients``) replace the ones
    ``collectors`` and ``decentralised`` make.
    """
    spaces = env_spaces(env)
    actor = {
        "obs_dim": spaces.obs_dim,
        "action_low": spaces.action_low,
        "action_high": spaces.action_high,
        "hidden": (256, 256),
    }
    scheme = Scheme(
        SquashedGaussianActor,
        actor,
        GymEnv,
        {"env": env},
        functools.partial(SAC, lr=1e-3),
        functools.partial(
            ReplayStorage,
            1_000_000,
            batch_size=256,
            gradient_steps=2.0 if decentralised else 1.0,
            learning_starts=learning_starts,
        ),
        **{
            "collection": Collection(n_envs=1, n_steps=16, remote_workers=collectors, worker_cpus=0.5),
            "gradients": Gradients(remote_workers=2 if decentralised else 0, worker_cpus=0.5),
            "updates": Updates(execution="decentralised" if decentralised else "centralised"),
            **scheme_options,
        },
        seed=seed,
    )
    start = time.monotonic()
    with Learner(scheme, steps, progress=False) as learner:
        while not learner.done():
            learner.step()
        metrics = learner.metrics()
        weights = scheme.weights()
    wall = time.monotonic() - start
    max_steps = spaces.max_episode_steps
    with Evaluator(
        SquashedGaussianActor, actor, env, n_episodes=10, max_steps=max_steps, seed=10**6
    ) as evaluator:
        result = evaluator.evaluate(weights, metrics["env_steps"])
    return {
        "return": result.mean,
        "std": result.std,
        "sps": metrics["env_steps"] / wall,
        "updates": learner.updates,
        "policy_lag": metrics["policy_lag"],
        "gradient_asynchrony": metrics["gradient_asynchrony"],
        "gradient_kb": metrics["sent_bytes"] / max(1, learner.updates) / 1e3,
        "gradient_raw_kb": metrics["raw_bytes"] / max(1, learner.updates) / 1e3,
        "rollout_kb": metrics["rollout_bytes"] / max(1, metrics["env_steps"] // 16) / 1e3,
        "rollout_raw_kb": metrics["rollout_raw_bytes"] / max(1, metrics["env_steps"] // 16) / 1e3,
    }


def run_dqn(
    storage: Callable[..., ReplayStorage], steps: int, seed: int, learning_starts: int
) -> dict[str, float]:
    """DQN with ``rlstruct train dqn``'s defaults in process on CartPole-v1; its speed and greedy return."""
    network = {"obs_dim": 4, "n_actions": 2, "hidden": (256, 256), "dueling": True}
    lr = 5e-4
    scheme = Scheme(
        QNetwork,
        network,
        GymEnv,
        {"env": "CartPole-v1"},
        functools.partial(DQN, lr=lr, target_update_every=100, epsilon=1.0),
        functools.partial(
            storage, 100_000, batch_size=256, gradient_steps=0.25, learning_starts=learning_starts
        ),
        collection=Collection(n_envs=4, n_steps=64),
        seed=seed,
    )
    start = time.monotonic()
    with Learner(scheme, steps, progress=False) as learner:
        while not learner.done():
            learner.step()
            progress = min(1.0, learner.env_steps / steps)
            learner.update_algorithm_parameter("epsilon", linear_schedule(1.0, 0.05, 0.2, progress))
            learner.update_algorithm_parameter("lr", lr * (1.0 - progress))
        metrics = learner.metrics()
        weights = scheme.weights()
    wall = time.monotonic() - start
    with Evaluator(QNetwork, network, "CartPole-v1", n_episodes=10, max_steps=500, seed=10**6) as evaluator:
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
    default = 30_000 if args.decentralised else 20_000
    steps = 128 if args.quick else args.steps or default  # quick: 4 rounds learn (from the 64th step)
    starts = 64 if args.quick else 1_000
    env = BULLET if args.decentralised else ENV
    ray.init(address="local", num_cpus=2, include_dashboard=False, configure_logging=False)
    try:
        if args.decentralised:
            results = {"2 decentralised gradient workers": run(env, 0, steps, args.seed, starts, True)}
        elif args.dqn:
            steps = 2_048 if args.quick else args.steps or 100_000
            env = "CartPole-v1"
            prioritized = functools.partial(PrioritizedStorage, alpha=0.6, beta=0.4, beta_steps=steps)
            results = {
                "DQN, uniform replay": run_dqn(ReplayStorage, steps, args.seed, starts),
                "DQN, prioritized replay": run_dqn(prioritized, steps, args.seed, starts),
            }
        elif args.metrics:
            steps = 256 if args.quick else args.steps or 3_000
            results = {}
            for label, scheme_options in METRICS.items():
                results[label] = run(env, 0, steps, args.seed, starts, **scheme_options)
        elif args.combinations:
            results = {}
            for label, scheme_options in COMBINATIONS.items():
                results[label] = run(env, 0, steps, args.seed, starts, **scheme_options)
                print(f"{label}: {results[label]}", flush=True)
        else:
            results = {
                "in process": run(env, 0, steps, args.seed, starts),
                "2 remote collection workers": run(env, 2, steps, args.seed, starts),
            }
    finally:
        ray.shutdown()
    rows: list[Row] = []
    if args.metrics:
        for label, result in results.items():
            rows += [
                Row(f"{label}: env steps/s", result["sps"], "steps/s", higher_is_better=True),
                Row(f"{label}: gradients per update", result["gradient_kb"], "kB", result["gradient_raw_kb"]),
                Row(f"{label}: rollout of 16 steps", result["rollout_kb"], "kB", result["rollout_raw_kb"]),
                Row(f"{label}: policy lag", result["policy_lag"], "versions"),
                Row(f"{label}: gradient asynchrony", result["gradient_asynchrony"], "versions"),
            ]
        results = {}
    for label, result in results.items():
        label = label if label.startswith("DQN") else f"SAC scheme, {label}"
        rows += [
            Row(f"{label}: greedy return", result["return"], "return", higher_is_better=True),
            Row(f"{label}: env steps/s", result["sps"], "steps/s", higher_is_better=True),
            Row(f"{label}: updates", result["updates"], "updates"),
        ]
    print(f"\n$ python {' '.join(['benchmarks/off_policy_schemes.py', *sys.argv[1:]])}")
    print(f"{env}, {steps} env steps per run, seed {args.seed}, greedy return over 10 episodes\n")
    report(args, rows, "value", "baseline")


if __name__ == "__main__":
    main()
