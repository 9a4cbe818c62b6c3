"""The learning suite: every learning target of docs/performance.md, run from the command line and checked.

Each entry is a command as a user types it (``rlstruct train ...`` or a
tutorial script), run on its seeds in a fresh process; its final greedy
return over 10 episodes must reach the threshold on every seed. The suite
prints the table that docs/performance.md shows (``--write`` puts it there,
between the ``learning-suite`` markers) and exits with status 1 if a target
is missed. With ``--write PAGE``, every ``rlstruct train`` entry it ran also
gets its learning curve, its seeds' runs overlaid by ``rlstruct plot``'s
function (``rlstruct.logger.plot_runs``), in ``img/learning/<Entry.curve>``
next to PAGE: ``docs/img/learning/ppo-CartPole-v1.png`` and so on, which the
algorithm pages show. Without ``--write`` nothing is written into docs/. Runs are started the
longest first, two at a time (``--jobs``; about 19 minutes on 2 cores). CI runs it one run at a time
beside the test suite, at a lower priority (``--jobs 1``), but for the entries it leaves out
(``ci=False``: too long for its time, or a known miss) and the seeds beyond an entry's ``ci_seeds``,
which ``--all`` adds and whose rows in docs/performance.md say when and on which commit they were
measured.

Usage:
    python tests/learning_suite.py [--only TEXT | --all] [--total-steps N] [--jobs N] [--write docs/performance.md] [--json PATH]

``--only`` keeps the entries whose command contains TEXT; ``--total-steps``
replaces every budget (a smoke run: the thresholds are then not checked).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
START, END = "<!-- learning-suite:start -->", "<!-- learning-suite:end -->"
RUN_TIMEOUT_S = 1800
TUTORIAL_RESULT = re.compile(
    r"final greedy return (-?[\d.]+)(?: \+- [\d.]+)? over \d+ episodes after (\d+) env steps"
)


@dataclass(frozen=True)
class Entry:
    """A documented learning target: the command, its seeds and the final return it must reach."""

    command: tuple[str, ...]  # after "rlstruct", or a script under tutorials/
    threshold: float | None  # None: a documented figure, not a target
    target: str  # as the table says it
    seeds: tuple[int, ...] = (0,)
    known_miss: bool = (
        False  # a target missed today, said in docs/performance.md: shown, not failing the suite
    )
    ci: bool = True  # False: not in CI (too long, or a known miss); run with --all or --only, its row dated
    ci_seeds: tuple[int, ...] | None = None  # CI's seeds when it runs fewer; --all and --only run them all
    minutes: float = 1.0  # about how long one seed's run takes in CI: the longest runs are started first

    @property
    def tutorial(self) -> bool:
        return self.command[0].endswith(".py")

    @property
    def curve(self) -> str | None:
        """The file name of the learning curve (``ppo-CartPole-v1.png``); None for a tutorial (no run dir)."""
        if self.tutorial:
            return None
        _, algo, _, env, *rest = self.command  # "train", ALGO, "--env", ENV, options
        words = [algo, env.rpartition(":")[2], *(word.removeprefix("--") for word in rest)]
        return "-".join(words) + ".png"

    def shown(self) -> str:
        words = (
            ("python", f"tutorials/{self.command[0]}", *self.command[1:])
            if self.tutorial
            else ("rlstruct", *self.command)
        )
        return " ".join(words)


ENTRIES = (
    Entry(("train", "ppo", "--env", "CartPole-v1"), 475, ">= 475 within 50k", minutes=0.5),
    Entry(("train", "a2c", "--env", "CartPole-v1"), 400, ">= 400 within 100k", minutes=0.3),
    Entry(
        ("train", "dqn", "--env", "CartPole-v1"),
        400,
        ">= 400 within 100k",
        (0, 1, 2),
        ci_seeds=(0,),
        minutes=3.5,
    ),
    Entry(("train", "sac", "--env", "Pendulum-v1"), -200, ">= -200 within 10k", minutes=3.2),
    Entry(
        ("train", "sac", "--env", "pybullet_envs_gymnasium:InvertedPendulumBulletEnv-v0"),
        900,
        ">= 900 within 30k",
        (0, 1, 2),
        ci=False,
        minutes=10,
    ),
    Entry(("train", "impala", "--env", "CartPole-v1"), 450, ">= 450 within 300k", minutes=0.5),
    Entry(("train", "ppo", "--env", "Pendulum-v1"), -200, ">= -200 within 205k", minutes=1.3),
    Entry(
        ("train", "ppo", "--env", "CartPoleNoVel-v1"),
        475,
        ">= 475 within 100k",
        (0, 1, 2, 3, 4),
        ci_seeds=(0,),
        minutes=4,
    ),
    Entry(
        ("train", "ppo", "--env", "CartPoleNoVel-v1", "--memory", "lstm"),
        None,
        "documented (LSTM memories)",
        (0, 1, 2, 3, 4),
        ci=False,
    ),
    Entry(("train", "dqn", "--env", "CartPoleNoVel-v1"), 475, ">= 475 within 200k", ci=False, minutes=18),
    Entry(
        ("train", "sac", "--env", "PendulumNoVel-v1"),
        -200,
        ">= -200 within 100k",
        (0, 1, 2),
        ci=False,
        minutes=20,
    ),
    Entry(("train", "ppo", "--env", "CueMemory-v0"), 1.0, "the optimum, 1.0, within 50k", minutes=1.3),
    Entry(
        (
            "train",
            "ppo",
            "--env",
            "popgym:popgym-RepeatPreviousEasy-v0",
            "--recurrent",
            "--total-steps",
            "100000",
        ),
        0.95,
        ">= 0.95 within 100k (the maximum is 1.0)",
        minutes=3.5,
    ),
    Entry(
        ("train", "a2c", "--env", "CartPole-v1", "--recurrent"),
        400,
        ">= 400 within 100k",
        (0, 1, 2),
        known_miss=True,
        ci=False,
        minutes=0.5,
    ),
    Entry(("09_attention_history.py",), 475, ">= 475 within 200k", ci=False, minutes=4),
    Entry(
        ("09_attention_history.py", "--env", "CueMemory-v0", "--steps", "50000"),
        1.0,
        "the optimum, 1.0, within 50k",
        minutes=2,
    ),
)


@dataclass
class Result:
    """One run of an entry on one seed."""

    final: float
    env_steps: int
    train_s: float
    run_dir: Path | None = None  # an ``rlstruct train`` run's directory, named "seed N"


def run(entry: Entry, seed: int, total_steps: int | None, workdir: Path) -> Result:
    """Run ``entry`` on ``seed`` in a fresh process and read its final greedy return."""
    if entry.tutorial:
        budget = ["--steps", str(total_steps)] if total_steps is not None else []
        argv = [sys.executable, str(ROOT / "tutorials" / entry.command[0]), *entry.command[1:], *budget]
        argv += ["--seed", str(seed)]
        start = time.monotonic()
        done = subprocess.run(argv, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, cwd=workdir)
        elapsed = time.monotonic() - start
        found = TUTORIAL_RESULT.search(done.stdout)
        if done.returncode != 0 or found is None:
            raise RuntimeError(
                f"{entry.shown()} (seed {seed}) failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
            )
        return Result(float(found.group(1)), int(found.group(2)), elapsed)
    out = workdir / f"seed{seed}.json"
    budget = ["--total-steps", str(total_steps)] if total_steps is not None else []
    argv = [sys.executable, "-m", "rlstruct.cli", *entry.command, *budget, "--seed", str(seed)]
    argv += ["--run-dir", str(workdir), "--no-progress", "--json", str(out)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, cwd=workdir)
    if done.returncode != 0:
        raise RuntimeError(
            f"{entry.shown()} (seed {seed}) failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
        )
    results = json.loads(out.read_text())
    # the seed names the run in its learning curve's legend
    run_dir = Path(results["run_dir"]).rename(workdir / f"seed {seed}")
    return Result(
        float(results["eval_return_mean"]), int(results["env_steps"]), float(results["wall_s"]), run_dir
    )


def plot(entry: Entry, results: list[Result], folder: Path) -> Path | None:
    """Draw the learning curve of an ``rlstruct train`` entry's runs into ``folder``; None for a tutorial.

    The greedy evaluation return (solid) and the training return (dashed)
    against env steps, one colour per seed, as ``rlstruct plot`` draws them.
    """
    from rlstruct.logger import plot_runs

    run_dirs = [r.run_dir for r in results if r.run_dir is not None]
    if entry.curve is None or not run_dirs:
        return None
    folder.mkdir(parents=True, exist_ok=True)
    return plot_runs(
        run_dirs, ["eval_return_mean"], optional=["train_return_mean"], path=folder / entry.curve
    )


HEADER = (
    "| command | target | seeds | final greedy return | env steps | training s | met |\n"
    "|---|---|---|---:|---:|---:|---|"
)


def row(entry: Entry, results: list[Result], met: bool | None) -> str:
    """The table's line of one entry."""
    seeds = ", ".join(str(s) for s in entry.seeds)
    finals = " / ".join(f"{r.final:.1f}" for r in results)
    distinct = len({r.env_steps for r in results}) > 1
    steps = " / ".join(f"{r.env_steps:,}" for r in results) if distinct else f"{results[0].env_steps:,}"
    seconds = " / ".join(f"{r.train_s:.0f}" for r in results)
    shown = "-" if met is None else "yes" if met else "**no** (known)" if entry.known_miss else "**no**"
    return f"| `{entry.shown()}` | {entry.target} | {seeds} | {finals} | {steps} | {seconds} | {shown} |"


def table(rows: list[tuple[Entry, list[Result], bool | None]]) -> str:
    """The markdown table of docs/performance.md, for these rows."""
    return "\n".join([HEADER, *(row(*r) for r in rows)])


def _command(line: str) -> str:
    return line.split("|")[1].strip()


def write(path: Path, text: str) -> None:
    """Put the table ``text`` between the suite's markers in ``path``.

    Lines of the table already there whose command ``text`` does not hold
    are kept, in the order of ``ENTRIES``: a run of some entries (``--only``)
    updates their lines only.
    """
    page = path.read_text()
    if START not in page or END not in page:
        raise ValueError(f"{path} has no {START} ... {END} block to write the table into")
    head, rest = page.split(START, 1)
    block, tail = rest.split(END, 1)
    lines = {_command(line): line for line in block.splitlines() if line.startswith("| `")}
    lines |= {_command(line): line for line in text.splitlines() if line.startswith("| `")}
    ordered = [lines[f"`{e.shown()}`"] for e in ENTRIES if f"`{e.shown()}`" in lines]
    path.write_text(f"{head}{START}\n{HEADER}\n" + "\n".join(ordered) + f"\n{END}{tail}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--only", metavar="TEXT", help="run the entries whose command contains TEXT")
    parser.add_argument(
        "--all", action="store_true", help="run the entries too long for CI too (CI runs the others)"
    )
    parser.add_argument(
        "--total-steps", type=int, metavar="N", help="every budget N (a smoke run: no checks)"
    )
    parser.add_argument(
        "--write",
        type=Path,
        metavar="PATH",
        help="write the table into PATH (between the markers), the learning curves into img/learning/ next to it",
    )
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the results as JSON")
    parser.add_argument("--jobs", type=int, default=2, metavar="N", help="runs at a time (default: 2)")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs must be at least 1, got {args.jobs}")
    if args.only is not None:
        entries = [e for e in ENTRIES if args.only in e.shown()]
    elif args.all:
        entries = list(ENTRIES)
    else:
        entries = [replace(e, seeds=e.ci_seeds or e.seeds) for e in ENTRIES if e.ci]
    if not entries:
        parser.error(f"no entry's command contains {args.only!r}")
    rows: list[tuple[Entry, list[Result], bool | None]] = []
    start = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(args.jobs) as pool:
        # every run is queued at once, the longest first (so that no long run starts near the end and
        # leaves the other worker idle); the entries are reported in order, each once its seeds are done
        workdirs = [Path(tmp) / str(index) for index in range(len(entries))]
        for workdir in workdirs:
            workdir.mkdir()
        queue = [(index, seed) for index, entry in enumerate(entries) for seed in entry.seeds]
        queue.sort(key=lambda item: -entries[item[0]].minutes)  # stable: equal lengths keep their order
        futures = {
            (index, seed): pool.submit(run, entries[index], seed, args.total_steps, workdirs[index])
            for index, seed in queue
        }
        for index, entry in enumerate(entries):
            results = [futures[index, seed].result() for seed in entry.seeds]
            threshold = entry.threshold
            met = (
                None
                if args.total_steps is not None or threshold is None
                else all(r.final >= threshold for r in results)
            )
            rows.append((entry, results, met))
            finals = " / ".join(f"{r.final:.1f}" for r in results)
            print(
                f"{'ran ' if met is None else 'ok  ' if met else 'MISS'} {entry.shown()}: {finals} ({time.monotonic() - start:.0f} s)",
                flush=True,
            )
            if args.write is not None:  # the run directories go with the temporary directory
                image = plot(entry, results, args.write.parent / "img" / "learning")
                if image is not None:
                    print(f"     wrote {image}", flush=True)
    text = table(rows)
    print(f"\n{text}\n")
    if args.write is not None:
        write(args.write, text)
    if args.json is not None:
        records = [
            {
                "command": e.shown(),
                "target": e.target,
                "threshold": e.threshold,
                "seeds": list(e.seeds),
                "met": met,
                "final": [r.final for r in rs],
                "env_steps": [r.env_steps for r in rs],
                "train_s": [r.train_s for r in rs],
            }
            for e, rs, met in rows
        ]
        args.json.write_text(json.dumps(records, indent=2) + "\n")
    known = [e.shown() for e, _, met in rows if met is False and e.known_miss]
    missed = [e.shown() for e, _, met in rows if met is False and not e.known_miss]
    if known:
        print(f"{len(known)} known misses (see docs/performance.md): {known}")
    if missed:
        print(f"{len(missed)} of {len(rows)} targets missed: {missed}")
        return 1
    print(f"no target missed but the known ones, of {len(rows)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
