"""Tutorial 8: PPO and IMPALA scaled out on Ray, through schemes of remote workers.

On one machine (a local Ray instance is started) or on a cluster:

    python tutorials/08_distributed.py                      # both algorithms, local Ray
    python tutorials/08_distributed.py --algo impala
    ray start --head                                        # on the head machine
    ray start --address=HEAD_IP:6379                        # on every other machine
    RAY_ADDRESS=auto python tutorials/08_distributed.py     # on the head machine

(``--quick`` for a tiny budget.) The same factories as a single-process run,
an agent (``ActorCritic``), an environment (``GymEnv``), an algorithm and a
buffer, are arranged by a ``Scheme`` whose options are three dataclasses:
``Collection`` (environments, steps, remote collection workers),
``Gradients`` (remote gradient workers) and ``Updates`` (who applies them):

- PPO, synchronous and centralised: 2 gradient workers each gather rollouts
  from their 2 collection workers, compute the gradients of their next
  minibatch, and the update worker (this process) averages them, applies
  them and broadcasts the new weights. The learning rate is annealed with
  ``update_algorithm_parameter``.
- IMPALA, asynchronous: 2 gradient workers each keep 2 collection workers
  busy (a bounded queue of rollouts), and the update worker applies
  whichever gradients arrive first; V-trace corrects for the policy lag.

Every actor asks Ray for a fraction of a CPU, so the tutorial runs on 2 cores.
"""

from __future__ import annotations

import argparse
import functools
import os
import tempfile
from pathlib import Path

import ray

from rlstruct import GymEnv
from rlstruct.algos.evaluation import Evaluator
from rlstruct.distributed import (
    IMPALA,
    PPO,
    Collection,
    Gradients,
    Learner,
    MinibatchBuffer,
    Scheme,
    Updates,
    WholeBatchBuffer,
)
from rlstruct.learning.actor_critic import ActorCritic

AGENT_ARGS = {"obs_dim": 4, "n_actions": 2, "orthogonal": True}
ENV_ARGS = {"env": "CartPole-v1"}


def ppo_scheme() -> Scheme:
    """Synchronous collection and centralised gradients: PPO spread out."""
    return Scheme(
        ActorCritic,
        AGENT_ARGS,
        GymEnv,
        ENV_ARGS,
        functools.partial(PPO, lr=1e-3),
        functools.partial(MinibatchBuffer, n_epochs=10, minibatch_size=256),
        collection=Collection(
            n_envs=8,
            n_steps=32,
            remote_workers=2,
            communication="synchronous",
            worker_cpus=0.2,
        ),
        gradients=Gradients(
            remote_workers=2, communication="synchronous", worker_cpus=0.2
        ),
        updates=Updates(execution="centralised"),
    )


def impala_scheme() -> Scheme:
    """Asynchronous collection and asynchronous centralised gradients, with V-trace."""
    return Scheme(
        ActorCritic,
        AGENT_ARGS,
        GymEnv,
        ENV_ARGS,
        IMPALA,
        WholeBatchBuffer,
        collection=Collection(
            n_envs=8,
            n_steps=32,
            remote_workers=2,
            communication="asynchronous",
            worker_cpus=0.2,
        ),
        gradients=Gradients(
            remote_workers=2, communication="asynchronous", worker_cpus=0.2
        ),
        updates=Updates(execution="centralised"),
    )


def run(name: str, scheme: Scheme, target_steps: int, out: Path) -> float:
    """Train to ``target_steps``, save, evaluate greedily; the mean return."""
    lr = scheme.algorithm.optimizer.param_groups[0]["lr"]
    with Learner(scheme, target_steps) as learner:
        while not learner.done():
            learner.step()
            if name == "ppo":  # anneal the learning rate on every worker that uses it
                learner.update_algorithm_parameter(
                    "lr", lr * max(0.0, 1.0 - learner.env_steps / target_steps)
                )
        metrics = learner.metrics()
        path = learner.save_model(out / f"{name}.pt")
        weights = scheme.weights()
    print(
        f"{name}: {metrics['env_steps']} env steps in {metrics['wall_s']:.1f} s "
        f"({metrics['sps']:.0f}/s), {metrics['updates']} updates,\n"
        f"{name}: training return {metrics['episode_return']:.1f}, "
        f"policy lag {metrics['policy_lag']:.2f}, "
        f"gradient asynchrony {metrics['gradient_asynchrony']:.2f},\n"
        f"{name}: saved to {path}"
    )
    with Evaluator(
        ActorCritic, AGENT_ARGS, "CartPole-v1", n_episodes=10, max_steps=500, seed=10**6
    ) as evaluator:
        result = evaluator.evaluate(weights, metrics["env_steps"])
    mean, std = result.mean, result.std
    print(f"{name}: greedy evaluation {mean:.1f} +- {std:.1f} over 10 episodes")
    return result.mean


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--algo", choices=["ppo", "impala", "both"], default="both")
    parser.add_argument("--quick", action="store_true", help="a tiny budget (for CI)")
    args = parser.parse_args()
    if "RAY_ADDRESS" in os.environ:
        ray.init()  # join the running cluster
    else:
        ray.init(  # a Ray of its own, even where another runs on this machine
            address="local",
            num_cpus=2,
            include_dashboard=False,
            configure_logging=False,
        )
    budgets = {
        "ppo": 2_048 if args.quick else 40_000,
        "impala": 4_096 if args.quick else 200_000,
    }
    with tempfile.TemporaryDirectory() as out:
        for name, make in (("ppo", ppo_scheme), ("impala", impala_scheme)):
            if args.algo in (name, "both"):
                run(name, make(), budgets[name], Path(out))
    ray.shutdown()


if __name__ == "__main__":
    main()
