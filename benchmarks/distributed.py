"""Collection on Ray: remote collection workers against the local multiprocess batcher, in one run.

Every row collects PPO rollouts of CartPole-v1 with the same agent
(``ActorCritic(obs_dim=4, n_actions=2)``, ``GymEnv``, fixed-length
trajectories of 32 steps whose episodes carry over), sends new weights
every round as training does, and reports environment steps per second:
the median over repeats, all measured in one run on a local Ray instance
started here with one CPU per core.

- **baseline**: ``MultiprocessBatcher``, 2 processes x 8 envs; a round is
  ``update(weights)``, ``execute()``, ``get()`` (512 steps).
- **synchronous, 1 / 2 / 4 remote workers**: ``CollectionWorker`` actors,
  each a ``LocalBatcher`` of 8 envs, driven by ``Collectors`` over a
  ``Pool`` as a gradient worker drives them; a round is
  ``set_weights`` (one ``ray.put``, one call per worker), ``collect()``
  (one call per worker, all waited for) and unpacking every rollout
  (codec "none"): 256 steps per worker.
- **asynchronous, 2 / 4 remote workers**: the same actors as the
  synchronous row, with a queue of one rollout in flight per worker; a
  round is ``set_weights`` and one ``collect()`` (the oldest finished
  rollout, 256 steps).
- **overhead per rollout** (synchronous, 1 worker): the median round at the
  driver less the worker's own time for the rollout (stepping and packing,
  ``Rollout.seconds``) and the driver's unpacking: what the weights
  broadcast, the Ray calls and the object transfer cost. The same actor is
  measured again without ``set_weights``; the difference is the weights
  broadcast, the rest the calls and the transfer.
- **start**: seconds from creating the batcher or the actors to the first
  round's data in hand (worker processes, imports, environments), kept apart
  from the steady-state rates, which start after two warm-up rounds.
- **training**: ``Learner`` env steps/s of the PPO scheme (synchronous
  collection and centralised synchronous gradients; 1 remote gradient
  worker with 2 remote collection workers of 8 envs) against
  ``rlstruct.algos.ppo.train`` (2 processes x 8 envs) on the same budget,
  both with 20 passes of 256-step minibatches over each 512-step batch and a
  constant learning rate; start-up is not counted on either side.
- **training, local steps**: the same scheme with ``Gradients(local_steps=40)``:
  the gradient worker takes all 40 optimiser steps of a batch itself and
  returns the parameters, one round trip per batch instead of per minibatch
  (target: 0.8 of ``ppo.train``).
- **SAC training**: ``Learner`` env steps/s of the off-policy scheme
  (``distributed.SAC`` with a ``ReplayStorage``; 1 remote gradient worker
  collecting in its own process, 1 Pendulum-v1 environment, 16 steps a
  round, one gradient step per env step, each a round trip to the update
  worker) against ``rlstruct.algos.sac.train`` (1 process x 1 environment,
  the same steps, networks and ratio), both learning from the 256th step.
- **SAC training, local steps**: the same scheme with
  ``Gradients(local_steps=16)``: the gradient worker takes the 16 updates
  of a round itself, its target critics moved after each, and returns its
  parameters and target critics once a round (target: 0.8 of ``sac.train``).

The configurations take turns within each repeat (order reversed every other
repeat), each worker count with fresh actors. Actors ask Ray for ``cores / 4`` CPUs each,
so that 4 of them fit; Ray does not pin them, so 4 workers on 2 cores share
them with the driver.

With ``--quick`` (the test suite's budget) every row's code runs once on a
tiny budget, with 1 and 2 remote workers only (no 4-worker rows) and the
SAC runs 2 rounds past their first learning step.

Usage:
    python benchmarks/distributed.py [--quick] [--repeats N] [--json PATH]
"""

from __future__ import annotations

import contextlib
import functools
import io
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import ray
import torch
from _common import Row, parse_args, report

from rlstruct import GymEnv, MultiprocessBatcher
from rlstruct.algos import ppo, sac
from rlstruct.distributed import (
    PPO,
    SAC,
    Collection,
    CollectionWorker,
    Collectors,
    Gradients,
    Learner,
    MinibatchBuffer,
    ReplayStorage,
    Scheme,
)
from rlstruct.distributed._pool import Pool, wait_ready
from rlstruct.learning.actor_critic import ActorCritic
from rlstruct.learning.soft_actor_critic import SquashedGaussianActor

AGENT_ARGS: dict[str, Any] = {"obs_dim": 4, "n_actions": 2}
CARTPOLE = {"env": "CartPole-v1"}
N_ENVS, N_STEPS = 8, 32
N_EPOCHS, MINIBATCH = 20, 256
TIMEOUT = 120.0
WARMUP_ROUNDS = 2


@dataclass
class Sample:
    """One configuration measured once: start-up, steady-state rate and per-round timings."""

    start_s: float
    rate: float
    round_s: list[float] = field(default_factory=list)
    actor_s: list[float] = field(default_factory=list)
    unpack_s: list[float] = field(default_factory=list)


def weights() -> dict[str, torch.Tensor]:
    """The agent's state dict: what every round sends."""
    torch.manual_seed(0)
    return {k: v.detach().clone() for k, v in ActorCritic(**AGENT_ARGS).state_dict().items()}


def timed_rounds(one_round: Callable[[], int], seconds: float) -> tuple[float, list[float]]:
    """Run rounds for at least ``seconds``; env steps per second and the time of each round."""
    rounds: list[float] = []
    steps = 0
    start = last = time.perf_counter()
    while last - start < seconds:
        steps += one_round()
        now = time.perf_counter()
        rounds.append(now - last)
        last = now
    return steps / (last - start), rounds


def local(seconds: float) -> Sample:
    """The baseline: ``MultiprocessBatcher`` 2 x 8, update + execute + get per round."""
    state = weights()
    start = time.perf_counter()
    with MultiprocessBatcher(
        ActorCritic, AGENT_ARGS, GymEnv, CARTPOLE, n_envs=N_ENVS, n_timesteps=N_STEPS, n_processes=2
    ) as batcher:

        def one_round() -> int:
            batcher.update(state)
            batcher.execute()
            batch = batcher.get()
            return int(batch.lengths.sum())

        batcher.reset()
        one_round()
        start_s = time.perf_counter() - start
        for _ in range(WARMUP_ROUNDS - 1):
            one_round()
        rate, rounds = timed_rounds(one_round, seconds)
    return Sample(start_s, rate, rounds)


def remote(n_workers: int, cpus: float, seconds: float) -> dict[str, Sample]:
    """``n_workers`` remote collection workers driven by ``Collectors`` as a gradient worker drives them.

    The same actors are measured in turn: synchronous collection, then
    asynchronous collection (2 workers or more) or synchronous collection
    without sending weights (1 worker). Returns the samples by variant
    ("synchronous", "asynchronous", "no weights"); the start-up time is the
    first variant's.
    """
    state = weights()
    start = time.perf_counter()
    actor = ray.remote(CollectionWorker).options(num_cpus=cpus)
    rollout = Collection(n_envs=N_ENVS, n_steps=N_STEPS)
    actors = [
        actor.remote(i, ActorCritic, AGENT_ARGS, GymEnv, CARTPOLE, rollout, compression="none")
        for i in range(n_workers)
    ]
    variants = ["synchronous", "asynchronous" if n_workers > 1 else "no weights"]
    samples: dict[str, Sample] = {}
    version = 0
    try:
        wait_ready("collection", actors, TIMEOUT, f"{cpus:g} CPU")
        for variant in variants:
            pool = Pool("collection", actors, "raise", TIMEOUT)
            communication = "asynchronous" if variant == "asynchronous" else "synchronous"
            options = Collection(
                n_envs=N_ENVS, n_steps=N_STEPS, remote_workers=n_workers, communication=communication
            )
            collectors = Collectors(None, pool, options)  # asynchronous: one rollout ahead per worker
            sample = samples[variant] = Sample(0.0, 0.0)

            def one_round(
                collectors: Collectors = collectors,
                sample: Sample = sample,
                send: bool = variant != "no weights",
            ) -> int:
                nonlocal version
                if send:
                    version += 1
                    collectors.set_weights(state, version)
                rollouts = collectors.collect()
                unpack_start = time.perf_counter()
                for rollout in rollouts:
                    rollout.trajectories()  # as a gradient worker does: one copy per tensor
                sample.unpack_s.append(time.perf_counter() - unpack_start)
                sample.actor_s.append(max(r.seconds for r in rollouts))
                return sum(r.env_steps for r in rollouts)

            one_round()
            if variant == variants[0]:
                sample.start_s = time.perf_counter() - start
            for _ in range(WARMUP_ROUNDS * (n_workers if communication == "asynchronous" else 1) - 1):
                one_round()
            del sample.unpack_s[:], sample.actor_s[:]
            sample.rate, sample.round_s = timed_rounds(one_round, seconds)
            ray.get(list(pool.pending), timeout=TIMEOUT)  # rollouts still in flight: the actors idle again
    finally:
        ray.wait([a.close.remote() for a in actors], num_returns=len(actors), timeout=10.0)
        for a in actors:
            ray.kill(a)
    return samples


@dataclass
class Training:
    """One training run: start-up seconds, env steps per second and seconds per update (gradient step)."""

    start_s: float
    sps: float
    update_s: float


def scheme_training(total: int, cpus: float, local_steps: int = 1) -> Training:
    """The PPO scheme: 1 remote gradient worker with 2 remote collection workers, synchronous throughout.

    ``local_steps`` is the scheme's ``Gradients.local_steps``: optimiser steps per round trip.
    """
    start = time.perf_counter()
    scheme = Scheme(
        ActorCritic,
        {**AGENT_ARGS, "orthogonal": True},
        GymEnv,
        CARTPOLE,
        PPO,
        functools.partial(MinibatchBuffer, n_epochs=N_EPOCHS, minibatch_size=MINIBATCH),
        collection=Collection(n_envs=N_ENVS, n_steps=N_STEPS, remote_workers=2, worker_cpus=cpus),
        gradients=Gradients(remote_workers=1, local_steps=local_steps, worker_cpus=cpus),
        timeout=TIMEOUT,
        start_timeout=TIMEOUT,
    )
    start_s = time.perf_counter() - start
    # done() turns True once every collected batch is trained on, as ppo.train does
    # (20 passes of 2 minibatches over each batch).
    with Learner(scheme, total, progress=False) as learner:
        while not learner.done():
            learner.step()
        metrics = learner.metrics()
    return Training(start_s, metrics["sps"], metrics["wall_s"] / metrics["updates"])


LOCAL_STEPS = N_EPOCHS * math.ceil(2 * N_ENVS * N_STEPS / MINIBATCH)
"""``Gradients.local_steps`` of the local-steps row: every minibatch step of a batch in one round trip."""


def ppo_training(total: int) -> Training:
    """``rlstruct.algos.ppo.train`` with 2 processes x 8 envs (its result lines are not printed)."""
    batch = 2 * N_ENVS * N_STEPS
    with tempfile.TemporaryDirectory() as run_dir, contextlib.redirect_stdout(io.StringIO()):
        results = ppo.train(
            ppo.Config(
                env="CartPole-v1",
                total_steps=total,
                n_envs=2 * N_ENVS,
                n_processes=2,
                n_steps=N_STEPS,
                n_epochs=N_EPOCHS,
                minibatch_size=MINIBATCH,
                anneal=False,
                eval_every=10 * total,
                eval_episodes=1,
                run_dir=run_dir,
                progress=False,
            )
        )
    updates = results["env_steps"] // batch * N_EPOCHS * math.ceil(batch / MINIBATCH)
    return Training(results["setup_s"], results["env_steps"] / results["wall_s"], results["wall_s"] / updates)


SAC_ACTOR: dict[str, Any] = {"obs_dim": 3, "action_low": [-2.0], "action_high": [2.0], "hidden": (256, 256)}
SAC_STEPS, SAC_STARTS = 16, 256


def sac_scheme_training(total: int, cpus: float, local_steps: int = 1) -> Training:
    """The SAC scheme: 1 remote gradient worker collecting in its own process, one update per env step."""
    start = time.perf_counter()
    scheme = Scheme(
        SquashedGaussianActor,
        SAC_ACTOR,
        GymEnv,
        {"env": "Pendulum-v1"},
        SAC,
        functools.partial(
            ReplayStorage, total, batch_size=256, gradient_steps=1.0, learning_starts=SAC_STARTS
        ),
        collection=Collection(n_envs=1, n_steps=SAC_STEPS),
        gradients=Gradients(remote_workers=1, local_steps=local_steps, worker_cpus=cpus),
        timeout=TIMEOUT,
        start_timeout=TIMEOUT,
    )
    start_s = time.perf_counter() - start
    with Learner(scheme, total, progress=False) as learner:
        while not learner.done():
            learner.step()
        metrics = learner.metrics()
    return Training(start_s, metrics["sps"], metrics["wall_s"] / metrics["updates"])


def sac_training(total: int) -> Training:
    """``rlstruct.algos.sac.train`` with 1 process x 1 environment (its result lines are not printed)."""
    with tempfile.TemporaryDirectory() as run_dir, contextlib.redirect_stdout(io.StringIO()):
        results = sac.train(
            sac.Config(
                env="Pendulum-v1",
                total_steps=total,
                n_steps=SAC_STEPS,
                learning_starts=SAC_STARTS,
                eval_every=10 * total,
                eval_episodes=1,
                run_dir=run_dir,
                progress=False,
            )
        )
    updates = max(1, results["env_steps"] - SAC_STARTS)
    return Training(results["setup_s"], results["env_steps"] / results["wall_s"], results["wall_s"] / updates)


def median(values: list[float]) -> float:
    return statistics.median(values)


def main() -> None:
    args, budget = parse_args(__doc__, default_repeats=3)
    torch.set_num_threads(1)
    quick = args.quick
    repeats = 1 if quick else budget.repeats
    seconds = 0.2 if quick else 4.0
    train_steps = 512 if quick else 20_480
    sac_steps = SAC_STARTS + 2 * SAC_STEPS if quick else 2_048
    counts = (1, 2) if quick else (1, 2, 4)  # 2 workers run every path 4 do (asynchronous among them)
    cores = len(os.sched_getaffinity(0))
    cpus = cores / 4
    ray.init(address="local", num_cpus=cores, include_dashboard=False, configure_logging=False)
    try:
        runs: dict[str, Callable[[], dict[str, Sample]]] = {
            "local": lambda: {"local": local(seconds)},
            **{str(n): functools.partial(remote, n, cpus, seconds) for n in counts},
        }
        samples: dict[str, list[Sample]] = {}
        trainers: dict[str, Callable[[], Training]] = {
            "ppo.train": lambda: ppo_training(train_steps),
            "Learner": lambda: scheme_training(train_steps, cpus),
            "Learner, local steps": lambda: scheme_training(train_steps, cpus, LOCAL_STEPS),
            "sac.train": lambda: sac_training(sac_steps),
            "SAC Learner": lambda: sac_scheme_training(sac_steps, cpus),
            "SAC Learner, local steps": lambda: sac_scheme_training(sac_steps, cpus, SAC_STEPS),
        }
        training: dict[str, list[Training]] = {name: [] for name in trainers}
        for repeat in range(repeats):
            for name in list(runs) if repeat % 2 == 0 else list(reversed(runs)):
                for key, sample in runs[name]().items():
                    samples.setdefault(key if name == "local" else f"{key} {name}", []).append(sample)
            for name in list(trainers) if repeat % 2 == 0 else list(reversed(trainers)):
                training[name].append(trainers[name]())
    finally:
        ray.shutdown()

    base = median([s.rate for s in samples["local"]])
    rows = [Row("local MultiprocessBatcher 2 x 8", base, "steps/s", higher_is_better=True)]
    keys = [f"synchronous {n}" for n in counts] + [f"asynchronous {n}" for n in counts if n > 1]
    for key in keys:
        communication, n = key.split()
        rate = median([s.rate for s in samples[key]])
        rows.append(Row(f"{communication}, {n} remote x 8 vs local", rate, "steps/s", base, None, True))

    def ms(values: list[list[float]]) -> float:
        return median([median(v) for v in values]) * 1e3

    def overhead_ms(sample: list[Sample]) -> float:
        """The median round less the worker's time and the unpacking, in ms."""
        return (
            ms([s.round_s for s in sample])
            - ms([s.actor_s for s in sample])
            - ms([s.unpack_s for s in sample])
        )

    one, bare = samples["synchronous 1"], samples["no weights 1"]
    calls_ms = overhead_ms(bare)
    rows += [
        Row("synchronous, 1 remote, no weights sent vs local", median([s.rate for s in bare]), "steps/s", base, None, True),
        Row("1 remote: round at the driver", ms([s.round_s for s in one]), "ms"),
        Row("1 remote: rollout in the worker (step + pack)", ms([s.actor_s for s in one]), "ms"),
        Row("1 remote: unpack at the driver", ms([s.unpack_s for s in one]), "ms"),
        Row("1 remote: the rest (weights, calls, transfer)", overhead_ms(one), "ms"),
        Row("1 remote, no weights: the rest (calls, transfer)", calls_ms, "ms"),
        Row("1 remote: weights broadcast per round", overhead_ms(one) - calls_ms, "ms"),
    ]  # fmt: skip
    local_start = median([s.start_s for s in samples["local"]])
    rows.append(Row("start: local 2 x 8 to first batch", local_start, "s"))
    for n in counts:
        start = median([s.start_s for s in samples[f"synchronous {n}"]])
        rows.append(Row(f"start: {n} remote to first round vs local", start, "s", local_start))

    ppo_run, learner = training["ppo.train"], training["Learner"]
    local_steps = training["Learner, local steps"]
    ppo_sps = median([t.sps for t in ppo_run])
    ppo_update = median([t.update_s for t in ppo_run]) * 1e3
    ppo_start = median([t.start_s for t in ppo_run])
    rows += [
        Row("training: ppo.train 2 x 8", ppo_sps, "steps/s", higher_is_better=True),
        Row("training: Learner 1 grad + 2 col vs ppo.train", median([t.sps for t in learner]), "steps/s",
            ppo_sps, None, True),
        Row(f"training: Learner, local_steps={LOCAL_STEPS} vs ppo.train", median([t.sps for t in local_steps]),
            "steps/s", ppo_sps, 0.8, True),
        Row("training: ms per update, ppo.train", ppo_update, "ms"),
        Row("training: ms per update, Learner vs ppo.train", median([t.update_s for t in learner]) * 1e3, "ms",
            ppo_update),
        Row(f"training: ms per update, Learner, local_steps={LOCAL_STEPS} vs ppo.train",
            median([t.update_s for t in local_steps]) * 1e3, "ms", ppo_update),
        Row("training start: ppo.train (workers up)", ppo_start, "s"),
        Row("training start: Scheme (actors up) vs ppo.train", median([t.start_s for t in learner]), "s",
            ppo_start),
        Row(f"training start: Scheme, local_steps={LOCAL_STEPS} vs ppo.train",
            median([t.start_s for t in local_steps]), "s", ppo_start),
    ]  # fmt: skip
    sac_run, sac_learner = training["sac.train"], training["SAC Learner"]
    sac_local = training["SAC Learner, local steps"]
    sac_sps = median([t.sps for t in sac_run])
    sac_update = median([t.update_s for t in sac_run]) * 1e3
    rows += [
        Row("SAC training: sac.train 1 x 1", sac_sps, "steps/s", higher_is_better=True),
        Row("SAC training: Learner 1 remote grad vs sac.train", median([t.sps for t in sac_learner]), "steps/s",
            sac_sps, None, True),
        Row(f"SAC training: Learner, local_steps={SAC_STEPS} vs sac.train", median([t.sps for t in sac_local]),
            "steps/s", sac_sps, 0.8, True),
        Row("SAC training: ms per update, sac.train", sac_update, "ms"),
        Row("SAC training: ms per update, Learner vs sac.train", median([t.update_s for t in sac_learner]) * 1e3,
            "ms", sac_update),
        Row(f"SAC training: ms per update, Learner, local_steps={SAC_STEPS} vs sac.train",
            median([t.update_s for t in sac_local]) * 1e3, "ms", sac_update),
    ]  # fmt: skip

    print(f"\n$ python {' '.join(['benchmarks/distributed.py', *sys.argv[1:]])}")
    print(
        f"CartPole-v1, {N_ENVS} envs x {N_STEPS} steps per batcher process or remote worker, {cores} cores, "
        f"torch {torch.__version__}, ray {ray.__version__}, median of {repeats} repeats "
        f"({seconds:g} s of rounds each); training: {train_steps} env steps (SAC: {sac_steps})\n"
    )
    report(args, rows, "value", "baseline")
    print("\nsteps/s of each repeat, in the order run:")
    per_repeat = {k: [s.rate for s in v] for k, v in samples.items()}
    per_repeat.update({k: [t.sps for t in v] for k, v in training.items()})
    for key, values in per_repeat.items():
        print(f"  {key}: {' / '.join(f'{v:,.0f}' for v in values)}")


if __name__ == "__main__":
    main()
