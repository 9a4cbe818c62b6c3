"""The ``rlstruct`` command: train an algorithm, evaluate a trained run, plot runs' learning curves.

- ``rlstruct train ALGO --env ENV_ID [options]`` trains ALGO (see
  ``rlstruct.algos``) and writes a run directory: ``config.json``,
  ``progress.csv``, TensorBoard files, ``checkpoint.pt``,
  ``learning_curve.png``. ``rlstruct train ALGO --help`` lists the options of
  ALGO, one per field of its ``Config``.
- ``rlstruct eval RUN_DIR [--episodes N] [--seed S] [--gif PATH] [--json]``
  rebuilds the trained agent of a run directory (``rlstruct.algos.load_run``)
  and plays N greedy episodes (default: the run's ``eval_episodes``) on the
  run's environment, seeded as the run seeded its evaluations: ``--seed S``
  plays the evaluation episodes of a run seeded S (default: the run's seed,
  which replays its final evaluation and prints the same figure). It prints
  the mean and standard deviation of the returns, or with ``--json`` one JSON
  object (the returns included) and nothing else on standard output.
  ``--gif PATH`` also records the first of those episodes, rendered with
  ``render_mode="rgb_array"``, as an animated GIF.
- ``rlstruct plot RUN_DIR [RUN_DIR ...] [--out PATH] [--x env_steps|wall_time] [--y COLUMN]``
  overlays the runs' curves from their ``progress.csv`` in one PNG (default
  ``./learning_curves.png``, whose path is printed): ``eval_return_mean``,
  and ``train_return_mean`` for the runs that logged it, or the one column
  ``--y`` names; against env steps or the training wall time (``wall_s``).
- ``rlstruct export RUN_DIR OUT [--batch-size N] [--best]`` writes the run's
  greedy policy (``best.pt``'s with ``--best``) as a ``torch.export``
  program that ``torch.export.load(OUT).module()`` runs without rlstruct
  (``rlstruct.algos.Policy.export``), and prints its path.

``rlstruct --help`` and ``rlstruct COMMAND --help`` print the usage and exit
with status 0. Every mistake ends the command with one line on standard
error and exit status 2, before anything starts or is written (no run
directory is made): an unknown command, algorithm or flag, a flag's value of
the wrong type or out of range (named as typed: ``rlstruct: --total-steps
must be in (0, inf), got -5``), flags that do not fit together, an
environment id gymnasium cannot make or whose actions the algorithm cannot
take (the line names the algorithms that can), a device this torch cannot
use, a setting of the recurrent agent without ``--recurrent``, a replay
buffer smaller than a batch, a ``--hidden`` or ``--buffer-size`` larger than
the device's memory, an agent class that cannot be found or trained, a
``--resume`` of a run that finished or wrote no checkpoint yet, or whose
checkpoint cannot be read or does not fit its ``config.json``; for ``eval``
and ``plot``, a run directory that does not exist or lacks its
``config.json``, ``checkpoint.pt`` or ``progress.csv``, a column no
``progress.csv`` has with a value to plot (the runs of ``plot`` that lack one
are left out, named in one line on standard error, when others have it), an
environment that cannot render a GIF; a
``--run-dir`` that names a file or nothing, or a folder in which the run's
directory cannot be made; a ``--json``, ``--out``, ``--gif`` or ``OUT`` that
names a folder, nothing, a file in a folder that does not exist, or a file
that cannot be written there (tried, as permissions do not stop root).

A run whose losses or training return stop being finite ends with one line naming
them and the run directory, exit status 1 (``TrainingDiverged``). One that
runs out of memory past what the checks foresee ends with one line saying so,
exit status 1 too (a replay buffer or a hidden layer larger than the device's
memory is a mistake of its flag, found before the run starts).

Modules named by ``--env module:Id`` and ``--agent module:Class`` are looked
for in the current directory first, as ``python -m`` does.

With the environment variable ``RLSTRUCT_DEBUG`` set (to anything but empty
or ``0``), a mistake that the checks report with an exception (all but
argparse's and the unknown command or algorithm) raises it instead, with its
traceback, for a bug report.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import json
import os
import re
import select
import signal
import sys
import threading
import warnings
from collections.abc import Callable, Collection, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch

from rlstruct.algos import ALGORITHMS
from rlstruct.algos.config import OneLineParser
from rlstruct.algos.run import CannotResume, RunInterrupted, TrainingDiverged
from rlstruct.checks import cannot_write
from rlstruct.errors import AgentError, ConfigError
from rlstruct.gym_env import UnknownEnvironment
from rlstruct.seeding import SEEDS
from rlstruct.version import __version__

__all__ = ["main"]

USAGE = (
    f"usage: rlstruct train {{{','.join(ALGORITHMS)}}} --env ENV_ID [options]  (--help after ALGO for them)\n"
    "       rlstruct eval RUN_DIR [--episodes N] [--seed S] [--gif PATH] [--json]\n"
    "       rlstruct plot RUN_DIR [RUN_DIR ...] [--out PATH] [--x {env_steps,wall_time}] [--y COLUMN]\n"
    "       rlstruct export RUN_DIR OUT [--batch-size N] [--best]\n"
    "       rlstruct --version\n"
    "       (rlstruct COMMAND --help for a command's options)"
)

COMMANDS = (
    (
        "train ALGO --env ENV_ID",
        "train ALGO; writes a run directory (config.json, progress.csv, checkpoint.pt)",
    ),
    ("eval RUN_DIR", "play a trained run's greedy episodes (--gif records one as an animated GIF)"),
    ("plot RUN_DIR [RUN_DIR ...]", "overlay runs' learning curves in one PNG"),
    (
        "export RUN_DIR OUT",
        "write a run's greedy policy as a torch.export program (.pt2), to run without rlstruct",
    ),
)
"""The commands and what each does, for ``rlstruct --help``."""


def help_text() -> str:
    """What ``rlstruct --help`` prints: what the command is for, its commands, its algorithms, the usage."""
    width = max(len(command) for command, _ in COMMANDS)
    commands = "\n".join(f"  {command:<{width}}  {what}" for command, what in COMMANDS)
    algorithms = "\n".join(f"  {name:<6}  {_summary(name)}" for name in ALGORITHMS)
    return (
        "rlstruct: train reinforcement-learning agents from the command line, then evaluate, plot and export the runs.\n\n"
        f"commands:\n{commands}\n\nalgorithms (rlstruct train ALGO --help lists the flags of each):\n"
        f"{algorithms}\n\n{USAGE}"
    )


def _summary(algo: str) -> str:
    """The first sentence of an algorithm module's docstring (``PPO: proximal policy optimisation ...``)."""
    doc = importlib.import_module(f"rlstruct.algos.{algo}").__doc__ or ""
    return doc.strip().split("\n")[0].rstrip(".")


X_COLUMNS = {"env_steps": "env_steps", "wall_time": "wall_s"}
"""``rlstruct plot --x``: the column of ``progress.csv`` each choice plots against."""


TRAIN_ERRORS = (ConfigError, UnknownEnvironment, CannotResume, AgentError)
"""What ``rlstruct train`` reports in one line: a config, environment, run directory or agent it cannot train."""


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line ``argv`` (None: ``sys.argv[1:]``); returns the exit status.

    Output read by a command that stops early (``rlstruct --help | head``)
    ends the command quietly, exit status 141 as for the shell's SIGPIPE,
    rather than with a ``BrokenPipeError`` traceback.
    """
    try:
        return _main(argv)
    except BrokenPipeError:
        if not _stdout_gone():  # another pipe (a simulator's, an environment's): the user's error
            raise
        # what is left to flush at exit would fail again: it goes nowhere (Python's documented recipe)
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


def _stdout_gone() -> bool:
    """Whether stdout is a pipe whose reader has gone (poll reports an error on its end), where it can tell."""
    poll = getattr(select, "poll", None)
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # replaced by an object without a file
        return False
    if poll is None:
        return True  # no way to ask: the reader most likely went, as it does for "| head"
    watch = poll()
    watch.register(fd, select.POLLOUT)
    return any(events & select.POLLERR for _, events in watch.poll(0))


def _main(argv: Sequence[str] | None) -> int:
    """``main``'s work."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] in (["-h"], ["--help"]) or args[:2] in (["train", "-h"], ["train", "--help"]):
        print(help_text())
        return 0
    if args[:1] in (["-V"], ["--version"]):
        print(f"rlstruct {__version__}")
        return 0
    if args[:1] == ["plot"]:
        return _run(_plot, _plot_parser(), args[1:])
    with _current_directory_importable():
        if args[:1] == ["eval"]:
            return _run(_eval, _eval_parser(), args[1:])
        if args[:1] == ["export"]:
            return _run(_export, _export_parser(), args[1:])
        return _train_command(args)


@contextlib.contextmanager
def _current_directory_importable() -> Iterator[None]:
    """As ``python -m`` does: ``--env mymodule:Id`` and ``--agent mymodule:Class`` find ./mymodule.py.

    ``sys.path`` is as before once the command returns (``main`` may be
    called from Python); worker processes started meanwhile inherit it.
    """
    cwd = os.getcwd()
    if cwd in sys.path or "" in sys.path:
        yield
        return
    sys.path.insert(0, cwd)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            sys.path.remove(cwd)


def _train_command(args: list[str]) -> int:
    """``rlstruct train ALGO ...``, or the line that says the command or the algorithm is unknown."""
    if not args or args[0] != "train":
        given = f"unknown command {args[0]!r}" if args else "no command given"
        return _mistake(f"rlstruct: {given}; choose train, eval, plot or export (rlstruct --help lists them)")
    if len(args) < 2 or args[1] not in ALGORITHMS:
        named = len(args) > 1 and not args[1].startswith("-")
        given = f"unknown algorithm {args[1]!r}" if named else "no algorithm given"
        return _mistake(
            f"rlstruct train: {given}; choose one of {', '.join(ALGORITHMS)} (rlstruct train --help lists them)"
        )
    return _train(args[1], args[2:])


def _train(algo: str, args: list[str]) -> int:
    """``rlstruct train ALGO ARGS``: the algorithm's ``main``, its mistakes reported in one line."""
    module = importlib.import_module(f"rlstruct.algos.{algo}")
    fields = _fields(algo)
    terminated: list[int] = []
    previous = _on_sigterm(terminated)
    try:
        module.main(args)
    except SystemExit as stop:  # --help (0), or argparse's one line already written (2)
        return _status(stop)
    except TRAIN_ERRORS as error:
        if _debug():
            raise
        flag = "--env: " if isinstance(error, UnknownEnvironment) else ""
        return _mistake(f"rlstruct: {flag}{_as_flags(str(error), fields)}")
    except TrainingDiverged as error:  # not a mistake on the command line: exit code 1
        if _debug():
            raise
        print(f"rlstruct: {error}", file=sys.stderr)
        return 1
    except RuntimeError as error:  # an allocation too large for this machine, past what the checks foresee
        if _debug() or not _out_of_memory(error):
            raise
        print(f"rlstruct: {algo}: {_out_of_memory(error)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as stop:  # Ctrl-C, or SIGTERM: one line naming the run, if one began
        if _debug():
            raise
        said = str(stop) if isinstance(stop, RunInterrupted) else "interrupted before the run started"
        print(f"rlstruct: {said}", file=sys.stderr)
        return 128 + (terminated[0] if terminated else signal.SIGINT)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    return 0


OUT_OF_MEMORY: type[Exception] = getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError)
"""What torch raises when a GPU allocation fails (``torch.OutOfMemoryError`` from torch 2.5 on)."""


def _out_of_memory(error: RuntimeError) -> str:
    """What a failed allocation asked for, in one line; empty for any other ``RuntimeError``.

    Examples:
        >>> _out_of_memory(RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 4000 bytes."))
        'out of memory (4000 bytes asked for at once); a size such as --n-envs, --hidden or --buffer-size is too large for this machine'
        >>> _out_of_memory(RuntimeError("shape mismatch"))
        ''
    """
    text = str(error)
    if not isinstance(error, OUT_OF_MEMORY) and "can't allocate memory" not in text:
        return ""
    asked = re.search(r"tried to allocate (\d+ bytes|[\d.]+ ?[KMGT]?i?B)\b", text, re.IGNORECASE)
    amount = f" ({asked.group(1)} asked for at once)" if asked else ""
    return (
        f"out of memory{amount}; a size such as --n-envs, --hidden or --buffer-size is too large for "
        "this machine"
    )


def _on_sigterm(received: list[int]) -> Any:
    """Make SIGTERM stop training as Ctrl-C does (noting it in ``received``); returns the handler it replaced.

    None where handlers cannot be set (outside the main thread).
    """

    def stop(signum: int, frame: object) -> None:
        received.append(signum)
        raise KeyboardInterrupt

    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGTERM, stop)


def _fields(algo: str) -> set[str]:
    """The fields of the ``Config`` of ``rlstruct.algos.<algo>``."""
    config = importlib.import_module(f"rlstruct.algos.{algo}").Config
    return {field.name for field in dataclasses.fields(config)}


_FIELD = re.compile(r"(?<![\w/.'\"-])config(?:\.|: )([a-z_][a-z0-9_]*)\b(?: \(--[a-z0-9-]+\))?")


def _as_flags(message: str, fields: Collection[str]) -> str:
    """``message`` with each config field it names (``config.total_steps``, ``config: total_steps``) as its flag.

    Only the names in ``fields`` are rewritten, and a flag already given in
    parentheses after one is dropped. The result is one line.

    Examples:
        >>> _as_flags("config: total_steps must be in (0, inf), got -5", {"total_steps"})
        '--total-steps must be in (0, inf), got -5'
        >>> _as_flags("config.n_envs (3) must be a multiple of config.n_processes (2)", {"n_envs", "n_processes"})
        '--n-envs (3) must be a multiple of --n-processes (2)'
    """

    def flag(match: re.Match[str]) -> str:
        name = match.group(1)
        return "--" + name.replace("_", "-") if name in fields else match.group(0)

    return " ".join(_FIELD.sub(flag, message).split())


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """Point file descriptor 1 at standard error inside the block (worker processes started there too)."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def _debug() -> bool:
    """Whether ``RLSTRUCT_DEBUG`` asks for the traceback of a mistake instead of its one line."""
    return os.environ.get("RLSTRUCT_DEBUG", "") not in ("", "0")


def _mistake(line: str) -> int:
    """Write ``line`` on standard error; return the exit status of a mistake, 2."""
    print(line, file=sys.stderr)
    return 2


def _status(stop: SystemExit) -> int:
    """The exit status of argparse's ``SystemExit``: its code (None: 0; a message: 2)."""
    return stop.code if isinstance(stop.code, int) else 0 if stop.code is None else 2


def _run(
    command: Callable[[argparse.Namespace], int], parser: argparse.ArgumentParser, args: list[str]
) -> int:
    """Parse ``args`` and run ``command``; argparse's exits (help: 0, bad usage: 2) become the status."""
    try:
        options = parser.parse_args(args)
    except SystemExit as stop:
        return _status(stop)
    return command(options)


def _positive_int(text: str) -> int:
    """An int flag's value that must be 1 or more; argparse's one line names the flag otherwise."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive int, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive int, got {value}")
    return value


def _run_seed(text: str) -> int:
    """A seed flag's value: an int that train's ``--seed`` takes too (``rlstruct.seeding.SEEDS``)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an int, got {text!r}") from None
    if not SEEDS[0] <= value <= SEEDS[1]:
        raise argparse.ArgumentTypeError(f"must be in [{SEEDS[0]}, {SEEDS[1]}] (a run seed), got {value}")
    return value


def _not_a_file_to_write(flag: str, path: str) -> str:
    """Why ``path``, given as ``flag``, cannot be the file a command writes: nothing, a folder, no such folder, no right.

    Empty when it can be.

    Examples:
        >>> _not_a_file_to_write("--gif", "")
        "--gif must name the file to write, got ''"
        >>> _not_a_file_to_write("OUT", "/no/such/folder/policy.pt2")
        "OUT's folder '/no/such/folder' does not exist"
    """
    if path == "" or Path(path).is_dir():
        got = "''" if path == "" else f"the folder {path!r}"
        return f"{flag} must name the file to write, got {got}"
    if not Path(path).resolve().parent.is_dir():
        return f"{flag}'s folder {str(Path(path).parent)!r} does not exist"
    if why := cannot_write(path):
        return f"{flag} {path!r} cannot be written: {why}"
    return ""


def _eval_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="rlstruct eval",
        description=(
            "Rebuild the trained agent of a run directory (config.json, checkpoint.pt) and play greedy "
            "episodes on the run's environment; print the mean and standard deviation of their returns."
        ),
    )
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a run directory written by rlstruct train")
    parser.add_argument(
        "--episodes",
        metavar="N",
        type=_positive_int,
        help="episodes to play, one environment each (default: the run's eval_episodes)",
    )
    parser.add_argument(
        "--seed",
        metavar="S",
        type=_run_seed,
        help=(
            "play the evaluation episodes of a run seeded S, as train's --seed: environment i is reset "
            "with derive_seed(S, 'eval') + i (default: the run's seed, which replays its final evaluation)"
        ),
    )
    parser.add_argument(
        "--gif",
        metavar="PATH",
        help="also record the first episode with render_mode='rgb_array' into an animated GIF at PATH",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object (the returns of every episode included) instead of the summary line",
    )
    return parser


def _eval(options: argparse.Namespace) -> int:
    from rlstruct.algos.recording import CannotRender, save_gif
    from rlstruct.algos.saved import load_run

    if options.gif is not None and (unwritable := _not_a_file_to_write("--gif", options.gif)):
        return _mistake(f"rlstruct eval: {unwritable}")  # before the episode is played, not after
    try:
        run = load_run(options.run_dir)
    except (FileNotFoundError, ValueError) as error:
        if _debug():
            raise
        said = " ".join(str(error).split()).replace("load_run: run_dir", "RUN_DIR")  # the argument typed
        return _mistake(f"rlstruct eval: {said}")
    gif: dict[str, Any] | None = None
    if options.gif is not None:
        try:
            recording = run.record_episode(options.seed)
            path = save_gif(recording.frames, options.gif, fps=recording.fps)
        except (CannotRender, ImportError, OSError) as error:
            if _debug():
                raise
            return _mistake(f"rlstruct eval: --gif: {' '.join(str(error).split())}")
        gif = {"path": str(path), "frames": len(recording.frames), "return": recording.episode_return}
    if options.json:  # stdout holds the JSON alone: what an environment's C code prints goes to stderr
        with _stdout_to_stderr():
            result = run.evaluate(options.episodes, options.seed)
    else:
        result = run.evaluate(options.episodes, options.seed)
    seed = run.config.seed if options.seed is None else options.seed
    if options.json:
        report = {
            "algo": run.algo,
            "env": run.config.env,
            "run_dir": str(run.run_dir),
            "env_steps": run.env_steps,
            "seed": seed,
            "episodes": len(result.returns),
            "eval_return_mean": result.mean,
            "eval_return_std": result.std,
            "returns": result.returns,
            "gif": gif,
        }
        print(json.dumps(report))
        return 0
    n = len(result.returns)
    print(
        f"{run.algo} on {run.config.env} after {run.env_steps} env steps: greedy return "
        f"{result.mean:.1f} +- {result.std:.1f} over {n} episode{'s' if n != 1 else ''} "
        f"(seed {seed}; run directory {run.run_dir})"
    )
    if gif is not None:
        print(f"gif: {gif['path']} ({gif['frames']} frames, episode return {gif['return']:.1f})")
    return 0


def _export_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="rlstruct export",
        description=(
            "Write the greedy policy of a run directory as a torch.export program (.pt2), which "
            "torch.export.load(OUT).module() runs without rlstruct (see rlstruct.algos.Policy.export)."
        ),
    )
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a run directory written by rlstruct train")
    parser.add_argument(
        "out", metavar="OUT", help="the file to write (.pt2 by convention); replaced if it exists"
    )
    parser.add_argument(
        "--batch-size",
        metavar="N",
        type=_positive_int,
        default=1,
        help="the rows of every call of the program (default: 1)",
    )
    parser.add_argument(
        "--best", action="store_true", help="export the weights of the best evaluation (best.pt, --save-best)"
    )
    return parser


def _export(options: argparse.Namespace) -> int:
    from rlstruct.algos.hooks import BEST_NAME
    from rlstruct.algos.policy import Policy

    if not Path(options.run_dir).is_dir():
        return _mistake(f"rlstruct export: run directory {options.run_dir!r} does not exist")
    if unwritable := _not_a_file_to_write("OUT", options.out):
        return _mistake(f"rlstruct export: {unwritable}")
    source = Path(options.run_dir) / BEST_NAME if options.best else options.run_dir
    if options.best and not Path(source).is_file():
        return _mistake(
            f"rlstruct export: --best: {options.run_dir} has no {BEST_NAME} (train with --save-best)"
        )
    try:
        policy = Policy.from_run(source)
        path = policy.export(options.out, batch_size=options.batch_size)
    except (FileNotFoundError, ValueError, OSError) as error:
        if _debug():
            raise
        said = " ".join(str(error).split()).replace("load_run: run_dir", "RUN_DIR")  # the argument typed
        return _mistake(f"rlstruct export: {said}")
    print(f"{path} (batch size {options.batch_size}): torch.export.load({str(path)!r}).module()")
    return 0


def _plot_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="rlstruct plot",
        description=(
            "Overlay the learning curves of runs (from their progress.csv) in one PNG: the evaluation "
            "return, and the training return where logged, a colour per run."
        ),
    )
    parser.add_argument(
        "run_dirs", metavar="RUN_DIR", nargs="+", help="run directories written by rlstruct train"
    )
    parser.add_argument(
        "--out",
        metavar="PATH",
        default="learning_curves.png",
        help="the image to write (default: %(default)s)",
    )
    parser.add_argument(
        "--x",
        choices=list(X_COLUMNS),
        default="env_steps",
        help="the x axis: env steps, or the training wall time in seconds, wall_s (default: %(default)s)",
    )
    parser.add_argument(
        "--y",
        metavar="COLUMN",
        help="plot this column of progress.csv instead of eval_return_mean and train_return_mean",
    )
    return parser


def _plot(options: argparse.Namespace) -> int:
    from rlstruct.logger import plot_runs

    y, optional = (["eval_return_mean"], ["train_return_mean"]) if options.y is None else ([options.y], [])
    try:
        with warnings.catch_warnings(record=True) as left_out:  # runs with nothing to plot, said below
            warnings.simplefilter("always", UserWarning)
            path = plot_runs(options.run_dirs, y, optional=optional, x=X_COLUMNS[options.x], path=options.out)
    except (FileNotFoundError, ValueError) as error:
        if _debug():
            raise
        said = " ".join(str(error).split()).replace("plot_runs: path", "--out")  # its path is the flag
        said = said.replace("plot_runs: run_dirs", "RUN_DIR")
        return _mistake(f"rlstruct plot: {said}")
    for warning in left_out:
        said = str(warning.message)
        if said.startswith("plot_runs: "):
            print(f"rlstruct plot: {said.removeprefix('plot_runs: ')}", file=sys.stderr)
        else:  # another library's, shown as it would have been
            warnings.showwarning(warning.message, warning.category, warning.filename, warning.lineno)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
