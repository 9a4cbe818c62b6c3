"""The batcher's cost per step, in one process: ``LocalBatcher`` against the bare loop it wraps.

CartPole-v1, the policy of ``sampling.py`` (an MLP 4-64-64-2, softmax and
``torch.multinomial``, one call per step for all environments), T = 64, one
torch thread. Rows, in microseconds per step of all ``n_envs`` environments,
median of interleaved repeats:

- the floor: ``n_envs`` ``gymnasium.make`` environments stepped with the
  policy in the loop, the ended ones reset, nothing stored;
- ``LocalBatcher`` (one group of ``n_envs``), whose ``GymEnv`` writes each
  step in place (``step_into``), against the floor: what it adds is the
  batcher's cost, the storage of every key and the batch ``get()`` returns;
- the same batcher stepping a ``GymEnv`` through ``step`` (a subclass that
  overrides ``step`` alone), against the one writing in place.

No process is started, so the rows show the batcher's own work, free of
the scheduling of a 2-core machine. ``sampling.py`` measures the processes.

Usage:
    python benchmarks/overhead.py [--quick] [--repeats N] [--json PATH]
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import gymnasium as gym
import torch
from _common import Row, parse_args, report
from sampling import MLPAgent, T, bare_loop

from rlstruct import DictTensor, GymEnv, LocalBatcher


class StepGymEnv(GymEnv):
    """A GymEnv that overrides ``step`` alone: batchers step it through ``step``, copying what it returns."""

    def step(self, action: DictTensor) -> tuple[DictTensor, DictTensor]:
        return super().step(action)


def floor_us(n_envs: int, steps: int) -> float:
    """Microseconds per step of ``n_envs`` bare environments with the policy in the loop."""
    agent = MLPAgent()
    agent.seed(0)
    envs = [gym.make("CartPole-v1") for _ in range(n_envs)]
    observations = [env.reset(seed=i)[0] for i, env in enumerate(envs)]
    return bare_loop(agent, envs, observations, steps) / steps * 1e6


def batcher_us(batcher: LocalBatcher, steps: int) -> float:
    """Microseconds per step of a warm batcher, ``execute()`` and ``get()`` included."""
    batches = max(1, steps // T)
    start = time.perf_counter()
    for _ in range(batches):
        batcher.execute()
        batcher.get()
    return (time.perf_counter() - start) / (batches * T) * 1e6


def main() -> None:
    args, budget = parse_args(__doc__, default_repeats=5)
    torch.set_num_threads(1)
    steps = 2 * T if args.quick else 40 * T
    weights = MLPAgent().state_dict()
    rows = []
    for n_envs in (8,) if args.quick else (8, 16, 64):
        made = {
            name: LocalBatcher(
                MLPAgent, {}, env, {"env": "CartPole-v1"}, n_envs=n_envs, n_timesteps=T, weights=weights
            )
            for name, env in (("in place", GymEnv), ("step", StepGymEnv))
        }
        measures: dict[str, Callable[[], float]] = {"floor": lambda n=n_envs: floor_us(n, steps)}
        for name, batcher in made.items():
            batcher.reset()
            batcher.execute()
            batcher.get()  # warm: storage allocated, the first run checked
            measures[name] = lambda batcher=batcher: batcher_us(batcher, steps)  # type: ignore[misc]
        times: dict[str, list[float]] = {name: [] for name in measures}
        for _ in range(budget.repeats):
            for name, measure in measures.items():
                times[name].append(measure())
        for batcher in made.values():
            batcher.close()
        median = {name: statistics.median(values) for name, values in times.items()}
        rows += [
            Row(f"floor: {n_envs} envs + policy", median["floor"], "us"),
            Row(f"LocalBatcher {n_envs} envs vs the floor", median["in place"], "us", median["floor"]),
            Row(
                f"LocalBatcher {n_envs} envs through step vs in place",
                median["step"],
                "us",
                median["in place"],
            ),
        ]
    report(args, rows)


if __name__ == "__main__":
    main()
