"""Memory tasks: recurrent PPO on POPGym, and how long a cue a GRU and an attention agent remember.

Every run is evaluated as POPGym reports its runs: the greedy return, mean
of 10 episodes, every ``--eval-every`` env steps (default 10,240) and at the
end of training, with the evaluation seeds ``rlstruct train`` uses
(``eval_seed(seed) + episode``). From these evaluations come MMER (the
maximum over training of the mean evaluation return), the final return and
the env steps of the first evaluation reaching a threshold. Budgets are
rounded down to whole iterations (256 env steps: 8 environments x 32 steps
of rlstruct's PPO, two rollouts of sb3-contrib's 128), so that both learners
are evaluated at the same env steps; ``--eval-every`` must be a multiple of 256.

Rows (``--part popgym``), for the ids RepeatPreviousEasy, RepeatFirstEasy,
PositionOnlyCartPoleEasy, PositionOnlyPendulumEasy and AutoencodeEasy:

- **POPGym <id>: MMER**: ``rlstruct train ppo --env popgym:popgym-<id>-v0
  --recurrent --normalize --total-steps N`` (``--total-steps``, default
  200,000; the settings PPO's tuned memory tasks have, PPO's defaults
  otherwise, and the id's own tuned settings in ``ppo.TUNED``: only
  PositionOnlyPendulumEasy has some, ``gamma=0.95, gae_lambda=0.95, n_envs=16``), the mean over the seeds
  (``--seeds``, default 1: seed 0). Baseline: sb3-contrib's
  ``RecurrentPPO("MlpLstmPolicy", env, seed=seed)`` with its defaults (one
  environment; a ``Discrete`` observation one-hot, as Stable-Baselines3
  encodes it; a ``Tuple`` observation, AutoencodeEasy's, which
  Stable-Baselines3 refuses, flattened by gymnasium's ``FlattenObservation``:
  the one-hots of its entries, concatenated), evaluated at the same env
  steps after the update of the rollout that ends there. No target.
- **POPGym <id>, seed <s>: env steps to 0.95**: the env steps at which the
  run's evaluation first reaches 0.95 of the maximum return (POPGym scales
  every task's return to at most 1.0), against sb3-contrib's. A run that
  never reaches it counts the budget, and the row's name says so. No target.

An id rlstruct refuses (``ppo.check`` raises before training) is shown in
the table as "refused: <message>" and has no row in ``--json``. The POPGym
part is skipped without popgym, the baseline without sb3-contrib (neither is
a dependency).

Rows (``--part sweep``), CueMemory with delays 16, 64 and 256 (the ids
``CueMemory16-v0``, ``CueMemory64-v0``, ``CueMemory256-v0`` of
``rlstruct.envs``: the optimum is 1.0, a memoryless policy scores 0), each
agent trained for ``--sweep-steps`` env steps (default 200,000) per seed:

- **CueMemory<delay>-v0, GRU: MMER / final return / env steps to 1.0**:
  ``rlstruct train ppo --env CueMemory<delay>-v0`` with CueMemory-v0's tuned
  settings (``ppo.TUNED``: ``recurrent=True, normalize=True``; PPO's
  defaults otherwise: rows of 32 steps, so gradients reach 32 steps back,
  the memory carries on across rows).
- **CueMemory<delay>-v0, attention n=<n>: the same three**: the
  ``AttentionAgent`` of tutorials/09_attention_history.py, trained as that
  tutorial trains it (``ppo.train`` with ``lr=3e-4, n_epochs=10,
  minibatch_size=128``), its window ``n = delay + 2`` steps: the whole
  episode, so that the answer step sees the cue (``--max-window`` caps n;
  a capped window cannot reach the cue, and the row's name gives its n).

MMER and the final return are means over the seeds; env steps to 1.0 (every
evaluation episode answered right) is the mean over the seeds, a seed that
never reaches it counting the budget (the name then says how many did). No
targets. ``--plot PATH`` draws the sweep: final return and MMER against the
delay (log scale), one line per agent.

``--quick`` (for CI) runs 2,048 env steps of one POPGym id (RepeatPreviousEasy)
and of both agents on one delay (16), evaluating every 1,024, without
sb3-contrib. Each run prints its wall time and env steps per second.

    python benchmarks/memory_tasks.py --json memory_tasks.json --plot memory_tasks.png
    python benchmarks/memory_tasks.py --part popgym --ids RepeatFirstEasy --total-steps 1000000
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import io
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from _common import Row, evaluations, first_reaching, parse_args, report

from rlstruct.algos import ppo
from rlstruct.algos.config import env_key
from rlstruct.algos.evaluation import eval_seed

POPGYM_IDS = (
    "RepeatPreviousEasy",
    "RepeatFirstEasy",
    "PositionOnlyCartPoleEasy",
    "PositionOnlyPendulumEasy",
    "AutoencodeEasy",
)
DELAYS = (16, 64, 256)
ITERATION = 256
"""Env steps of one iteration of rlstruct's PPO (8 x 32) and of two of sb3-contrib's RecurrentPPO (1 x 128)."""
EVAL_EPISODES = 10
POPGYM_THRESHOLD = 0.95
CUE_THRESHOLD = 1.0
TUTORIAL = Path(__file__).resolve().parents[1] / "tutorials" / "09_attention_history.py"
ATTENTION_TRAINING: dict[str, Any] = {"lr": 3e-4, "n_epochs": 10, "minibatch_size": 128}
"""What tutorials/09_attention_history.py's ``main`` gives ``ppo.Config`` beside the env, budget and seed."""


# ------------------------------------------------------------------ one run's evaluations


@dataclass(frozen=True)
class Curve:
    """The greedy evaluations of one training run, in order of env steps; the last is the final one."""

    evaluations: tuple[tuple[int, float], ...]
    """(env steps, mean return of the evaluation episodes) pairs."""
    wall_s: float
    """Seconds of the whole run: training and evaluations, set-up included."""

    @property
    def mmer(self) -> float:
        """The maximum over training of the mean evaluation return."""
        return max(mean for _, mean in self.evaluations)

    @property
    def final(self) -> float:
        """The mean return of the last evaluation, at the end of training."""
        return self.evaluations[-1][1]

    @property
    def env_steps(self) -> int:
        """The env steps of training, those of the final evaluation."""
        return self.evaluations[-1][0]

    def first_reaching(self, threshold: float) -> int | None:
        """The env steps of the first evaluation at or above ``threshold`` (None if none)."""
        return first_reaching(self.evaluations, threshold)


def _aligned(total: int) -> int:
    """``total`` rounded down to whole iterations (at least one)."""
    return max(ITERATION, total // ITERATION * ITERATION)


def refusal(config: ppo.Config) -> str | None:
    """Why ``ppo.train`` would refuse ``config`` before training (``ppo.check``'s message), or None."""
    try:
        ppo.check(config)
    except (TypeError, ValueError) as error:
        return f"{type(error).__name__}: {error}"
    return None


def rlstruct_curve(config: ppo.Config) -> Curve:
    """Train with ``ppo.train(config)`` (its output silenced) and read its evaluations back from progress.csv."""
    start = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        results = ppo.train(config)
    wall = time.perf_counter() - start
    return Curve(tuple(evaluations(results["run_dir"])), wall)


def _sb3_env(env_id: str) -> Any:
    """``gym.make(env_id)``, a ``Tuple`` or ``Dict`` observation flattened (one-hot Discrete entries)."""
    import gymnasium as gym

    env = gym.make(env_id)
    if isinstance(env.observation_space, (gym.spaces.Tuple, gym.spaces.Dict)):
        env = gym.wrappers.FlattenObservation(env)
    return env


def _sb3_evaluate(model: Any, env_id: str, seed: int) -> float:
    """The mean greedy return of ``EVAL_EPISODES`` episodes of ``model``, with rlstruct's evaluation seeds."""
    import gymnasium as gym
    import numpy as np

    env = _sb3_env(env_id)
    discrete = isinstance(env.action_space, gym.spaces.Discrete)
    returns = []
    try:
        for episode in range(EVAL_EPISODES):
            obs, _ = env.reset(seed=eval_seed(seed) + episode)
            state, start, done, total = None, np.ones((1,), dtype=bool), False, 0.0
            while not done:
                action, state = model.predict(obs, state=state, episode_start=start, deterministic=True)
                obs, reward, terminated, truncated, _ = env.step(int(action) if discrete else action)
                total += float(reward)
                done, start = terminated or truncated, np.zeros((1,), dtype=bool)
            returns.append(total)
    finally:
        env.close()
    return sum(returns) / len(returns)


class Refused(Exception):
    """sb3-contrib's RecurrentPPO could not be made for an environment; the message is its error."""


def sb3_curve(env_id: str, total: int, eval_every: int, seed: int) -> Curve:
    """sb3-contrib's ``RecurrentPPO("MlpLstmPolicy")`` with its defaults, evaluated every ``eval_every`` and at the end.

    Each evaluation comes after the update of the rollout ending at its env
    steps, as rlstruct's evaluations follow the update of their batch.

    Raises:
        Refused: if ``RecurrentPPO`` refuses the environment (its spaces).
    """
    import popgym  # noqa: F401  (registers the ids)
    from sb3_contrib import RecurrentPPO
    from stable_baselines3.common.callbacks import BaseCallback

    points: list[tuple[int, float]] = []

    class Every(BaseCallback):
        def _on_rollout_start(self) -> None:  # after the update of the rollout before
            steps = self.num_timesteps
            if steps > 0 and steps % eval_every == 0:
                points.append((steps, _sb3_evaluate(self.model, env_id, seed)))

        def _on_step(self) -> bool:
            return True

    start = time.perf_counter()
    try:
        model = RecurrentPPO("MlpLstmPolicy", _sb3_env(env_id), seed=seed, device="cpu")
    except (AssertionError, NotImplementedError, TypeError, ValueError) as error:  # a space it cannot take
        raise Refused(f"{type(error).__name__}: {error}") from error
    model.learn(total, callback=Every())
    if not points or points[-1][0] != model.num_timesteps:
        points.append((model.num_timesteps, _sb3_evaluate(model, env_id, seed)))
    return Curve(tuple(points), time.perf_counter() - start)


def _ran(what: str, curve: Curve) -> None:
    rate = curve.env_steps / curve.wall_s
    print(f"ran {what}: {curve.env_steps} env steps in {curve.wall_s:.1f} s, {rate:.0f} env steps/s")


# ------------------------------------------------------------------ part 1: POPGym


@dataclass(frozen=True)
class PopgymResult:
    """One id's runs, one curve per seed; ``refused`` holds the message where a learner refused the id."""

    name: str
    """The POPGym name, as "RepeatPreviousEasy"."""
    ours: list[Curve]
    theirs: list[Curve] | None
    refused: str | None = None
    theirs_refused: str | None = None


def popgym_id(name: str) -> str:
    """The id rlstruct is given: "popgym:" imports popgym (which registers its ids) in every process."""
    return f"popgym:popgym-{name}-v0"


def popgym_settings(env_id: str) -> dict[str, Any]:
    """The settings of the runs on ``env_id`` beside PPO's defaults, as ``ppo.Config`` fields.

    ``recurrent`` and ``normalize`` (what PPO's tuned memory tasks set),
    then the id's own tuned settings in ``ppo.TUNED`` if it has any, less
    their budget (the benchmark's ``--total-steps`` replaces it).
    """
    tuned = {k: v for k, v in ppo.TUNED.get(env_key(env_id), {}).items() if k != "total_steps"}
    return {"recurrent": True, "normalize": True, **tuned}


def popgym_results(
    names: Sequence[str], total: int, eval_every: int, seeds: Sequence[int], with_sb3: bool, root: Path
) -> list[PopgymResult]:
    """Recurrent PPO on each id for each seed, then sb3-contrib's RecurrentPPO if ``with_sb3``."""
    results = []
    for name in names:
        env_id = popgym_id(name)
        configs = [
            ppo.Config(
                env=env_id,
                **popgym_settings(env_id),
                total_steps=total,
                seed=seed,
                eval_every=eval_every,
                eval_episodes=EVAL_EPISODES,
                run_dir=str(root),
                progress=False,
            )
            for seed in seeds
        ]
        refused = refusal(configs[0])
        ours = []
        if refused is None:
            for config in configs:
                ours.append(rlstruct_curve(config))
                _ran(f"rlstruct {name} seed {config.seed}", ours[-1])
        theirs, theirs_refused = None, None
        if with_sb3:
            theirs = []
            for seed in seeds:
                try:
                    theirs.append(sb3_curve(env_id.split(":")[1], total, eval_every, seed))
                except Refused as error:
                    theirs, theirs_refused = None, str(error)
                    break
                _ran(f"sb3-contrib {name} seed {seed}", theirs[-1])
        results.append(PopgymResult(name, ours, theirs, refused, theirs_refused))
    return results


def _mean_std(values: Sequence[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.3f}"
    return f"{statistics.mean(values):.3f} +- {statistics.stdev(values):.3f}"


def _steps(curves: Sequence[Curve], threshold: float) -> str:
    """The env steps to ``threshold`` of each seed's run, "-" for a run that never reached it."""
    reached = [curve.first_reaching(threshold) for curve in curves]
    return " / ".join("-" if steps is None else f"{steps:,}" for steps in reached)


def print_columns(header: Sequence[str], lines: Sequence[Sequence[str]]) -> None:
    """A plain table: the first column left-aligned, the others right-aligned."""
    widths = [max(len(line[i]) for line in [header, *lines]) for i in range(len(header))]
    for line in [header, *lines]:
        cells = [line[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(line[1:], widths[1:], strict=True)]
        print("  ".join(cells).rstrip())


def print_popgym(results: Sequence[PopgymResult], total: int) -> None:
    print(
        f"\nPOPGym, {total:,} env steps per run (env steps to {POPGYM_THRESHOLD}: one per seed, - not reached)"
    )
    lines = []
    for result in results:
        ours = (
            [f"refused: {result.refused}", ""]
            if result.refused is not None
            else [_mean_std([c.mmer for c in result.ours]), _steps(result.ours, POPGYM_THRESHOLD)]
        )
        if result.theirs is not None:
            theirs = [_mean_std([c.mmer for c in result.theirs]), _steps(result.theirs, POPGYM_THRESHOLD)]
        else:
            theirs = [f"refused: {result.theirs_refused}" if result.theirs_refused else "not run", ""]
        lines.append([result.name, *ours, *theirs])
    to = f"env steps to {POPGYM_THRESHOLD}"
    print_columns(["id", "rlstruct MMER", to, "sb3-contrib MMER", to], lines)


def popgym_rows(results: Sequence[PopgymResult], total: int, seeds: Sequence[int]) -> list[Row]:
    rows = []
    for result in results:
        if result.refused is not None:
            continue  # shown in the table; a row needs a value
        theirs = result.theirs
        rows.append(
            Row(
                f"POPGym {result.name}: MMER",
                statistics.mean(c.mmer for c in result.ours),
                "return",
                None if theirs is None else statistics.mean(c.mmer for c in theirs),
                higher_is_better=True,
            )
        )
        for i, seed in enumerate(seeds):
            ours = result.ours[i].first_reaching(POPGYM_THRESHOLD)
            base = None if theirs is None else theirs[i].first_reaching(POPGYM_THRESHOLD)
            missed = [
                who
                for who, steps, ran in (("rlstruct", ours, True), ("sb3-contrib", base, theirs is not None))
                if ran and steps is None
            ]
            note = f" ({' and '.join(missed)}: not reached, the budget counted)" if missed else ""
            rows.append(
                Row(
                    f"POPGym {result.name}, seed {seed}: env steps to {POPGYM_THRESHOLD}{note}",
                    float(total if ours is None else ours),
                    "env steps",
                    None if theirs is None else float(total if base is None else base),
                )
            )
    return rows


# ------------------------------------------------------------------ part 2: the CueMemory delay sweep


def attention_agent() -> type[Any]:
    """The ``AttentionAgent`` class of tutorials/09_attention_history.py.

    Its folder goes on ``sys.path`` first: the spawned workers, which get the
    parent's ``sys.path``, import the class from there by its module's name.
    """
    if str(TUTORIAL.parent) not in sys.path:
        sys.path.insert(0, str(TUTORIAL.parent))
    return importlib.import_module(TUTORIAL.stem).AttentionAgent  # type: ignore[no-any-return]


@dataclass(frozen=True)
class SweepPoint:
    """One (delay, agent) pair of the sweep: a curve per seed."""

    delay: int
    agent: str
    """"GRU" or "attention"."""
    window: int | None
    """The attention agent's window n (None for the GRU)."""
    curves: list[Curve]

    @property
    def label(self) -> str:
        return self.agent if self.window is None else f"{self.agent} n={self.window}"


def window(delay: int, max_window: int | None) -> int:
    """The attention agent's window: the whole episode, ``delay + 2`` steps, at most ``max_window``."""
    return delay + 2 if max_window is None else min(delay + 2, max_window)


def sweep_configs(
    delay: int, total: int, eval_every: int, seed: int, n: int, root: Path
) -> dict[str, ppo.Config]:
    """The GRU's and the attention agent's (window ``n``) configs for CueMemory<delay>-v0, by agent."""
    env_id = f"CueMemory{delay}-v0"
    common: dict[str, Any] = {
        "env": env_id,
        "total_steps": total,
        "seed": seed,
        "eval_every": eval_every,
        "eval_episodes": EVAL_EPISODES,
        "run_dir": str(root),
        "progress": False,
    }
    return {
        "GRU": ppo.Config(**{**ppo.TUNED["CueMemory-v0"], **common}),
        "attention": ppo.Config(**common, **ATTENTION_TRAINING, agent=attention_agent(), agent_args={"n": n}),
    }


def sweep_results(
    delays: Sequence[int],
    total: int,
    eval_every: int,
    seeds: Sequence[int],
    max_window: int | None,
    root: Path,
) -> list[SweepPoint]:
    points = []
    for delay in delays:
        n = window(delay, max_window)
        curves: dict[str, list[Curve]] = {}
        for seed in seeds:
            for agent, config in sweep_configs(delay, total, eval_every, seed, n, root).items():
                curves.setdefault(agent, []).append(rlstruct_curve(config))
                _ran(f"CueMemory{delay}-v0 {agent} seed {seed}", curves[agent][-1])
        points += [
            SweepPoint(delay, agent, None if agent == "GRU" else n, runs) for agent, runs in curves.items()
        ]
    return points


def print_sweep(points: Sequence[SweepPoint], total: int) -> None:
    print(
        f"\nCueMemory delay sweep, {total:,} env steps per run (env steps to {CUE_THRESHOLD}: one per seed)"
    )
    lines = [
        [
            f"CueMemory{p.delay}-v0",
            p.label,
            _mean_std([c.mmer for c in p.curves]),
            _mean_std([c.final for c in p.curves]),
            _steps(p.curves, CUE_THRESHOLD),
        ]
        for p in points
    ]
    print_columns(["id", "agent", "MMER", "final return", f"env steps to {CUE_THRESHOLD}"], lines)


def sweep_rows(points: Sequence[SweepPoint], total: int) -> list[Row]:
    rows = []
    for p in points:
        name = f"CueMemory{p.delay}-v0, {p.label}"
        reached = [c.first_reaching(CUE_THRESHOLD) for c in p.curves]
        hits = sum(steps is not None for steps in reached)
        note = (
            ""
            if hits == len(reached)
            else f" ({hits} of {len(reached)} seeds reached it, the budget counted)"
        )
        rows += [
            Row(f"{name}: MMER", statistics.mean(c.mmer for c in p.curves), "return", higher_is_better=True),
            Row(
                f"{name}: final return",
                statistics.mean(c.final for c in p.curves),
                "return",
                higher_is_better=True,
            ),
            Row(
                f"{name}: env steps to {CUE_THRESHOLD}{note}",
                float(statistics.mean(total if steps is None else steps for steps in reached)),
                "env steps",
            ),
        ]
    return rows


def plot_sweep(points: Sequence[SweepPoint], path: Path) -> Path:
    """Final return and MMER against the delay (log scale), one line per agent, into ``path``."""
    from matplotlib.figure import Figure

    agents = list(dict.fromkeys(p.agent for p in points))
    figure = Figure(figsize=(9.0, 3.6), layout="constrained")
    panels = figure.subplots(1, 2, sharey=True)
    for axes, (title, value) in zip(
        panels,
        (("final greedy return", lambda c: c.final), ("MMER (best evaluation)", lambda c: c.mmer)),
        strict=True,
    ):
        for agent in agents:
            mine = [p for p in points if p.agent == agent]
            delays = [p.delay for p in mine]
            means = [statistics.mean(value(c) for c in p.curves) for p in mine]
            windows = ", ".join(f"{p.window}" for p in mine if p.window is not None)
            axes.plot(delays, means, marker="o", label=f"{agent} (window {windows})" if windows else agent)
        axes.axhline(1.0, color="grey", linestyle=":", linewidth=1)  # the optimum
        axes.axhline(0.0, color="grey", linestyle="--", linewidth=1)  # a memoryless policy
        axes.set_xscale("log", base=2)
        axes.set_xticks(
            sorted({p.delay for p in points}), [str(d) for d in sorted({p.delay for p in points})]
        )
        axes.set_ylim(-1.05, 1.1)
        axes.set_xlabel("delay (blank steps between the cue and the answer)")
        axes.set_title(title, fontsize="medium", loc="left")
        axes.grid(alpha=0.3)
    panels[0].set_ylabel("return (optimum 1.0, memoryless 0)")
    panels[0].legend(fontsize="small")
    figure.suptitle("CueMemory: remembering a cue over the delay, PPO", fontsize="medium")
    figure.savefig(path)
    return path


# ------------------------------------------------------------------ the command line


def _options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--part", choices=("popgym", "sweep", "all"), default="all", help="what to run")
    parser.add_argument("--total-steps", type=int, default=200_000, help="env steps of each POPGym run")
    parser.add_argument("--sweep-steps", type=int, default=200_000, help="env steps of each sweep run")
    parser.add_argument("--seeds", type=int, default=1, help="runs per id and agent, seeds 0 .. N-1")
    parser.add_argument(
        "--eval-every", type=int, default=10_240, help="env steps between evaluations (a multiple of 256)"
    )
    parser.add_argument(
        "--ids", nargs="+", choices=POPGYM_IDS, metavar="ID", help="POPGym ids (default: all)"
    )
    parser.add_argument(
        "--delays", nargs="+", type=int, choices=DELAYS, metavar="D", help="delays (default: all)"
    )
    parser.add_argument("--max-window", type=int, metavar="N", help="cap the attention agent's window")
    parser.add_argument("--no-sb3", action="store_true", help="leave out sb3-contrib")
    parser.add_argument("--plot", type=Path, metavar="PATH", help="also draw the sweep into PATH")


def main() -> None:
    args, _ = parse_args(__doc__, extra=_options)
    for flag in ("total_steps", "sweep_steps", "seeds", "eval_every", "max_window"):
        value = getattr(args, flag)
        if value is not None and value < 1:
            sys.exit(f"memory_tasks.py: --{flag.replace('_', '-')} must be at least 1, got {value}")
    if args.eval_every % ITERATION:
        sys.exit(f"memory_tasks.py: --eval-every must be a multiple of {ITERATION}, got {args.eval_every}")
    torch.set_num_threads(1)
    eval_every = 1_024 if args.quick else args.eval_every
    seeds = list(range(args.seeds))
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        if args.part in ("popgym", "all"):
            if importlib.util.find_spec("popgym") is None:
                print("POPGym part skipped: popgym is not installed (pip install popgym)")
            else:
                total = _aligned(2_048 if args.quick else args.total_steps)
                with_sb3 = (
                    not (args.quick or args.no_sb3) and importlib.util.find_spec("sb3_contrib") is not None
                )
                names = (args.ids or POPGYM_IDS)[: 1 if args.quick else None]
                results = popgym_results(names, total, eval_every, seeds, with_sb3, root)
                print_popgym(results, total)
                rows += popgym_rows(results, total, seeds)
        if args.part in ("sweep", "all"):
            total = _aligned(2_048 if args.quick else args.sweep_steps)
            delays = (args.delays or DELAYS)[: 1 if args.quick else None]
            points = sweep_results(delays, total, eval_every, seeds, args.max_window, root)
            print_sweep(points, total)
            rows += sweep_rows(points, total)
            if args.plot is not None:
                print(f"wrote {plot_sweep(points, args.plot)}")
    print()
    report(args, rows, value_label="rlstruct", baseline_label="sb3-contrib")


if __name__ == "__main__":
    main()
