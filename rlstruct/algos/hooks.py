"""Training hooks: code of yours a run calls as it trains, to stop early, keep the best model, log a metric.

Every algorithm's ``train(config, hooks=[...])`` takes a list of hooks: any
callables taking one argument, a ``TrainingEvent``. The run calls each, in
the order given, at two points, the event's ``kind``:

- "iteration": after each iteration's learning, when its scalars are logged
  (the algorithm's statistics, ``env_steps``, ``wall_s``, ``sps``, and
  ``train_return_mean`` when episodes ended);
- "evaluation": when an evaluation's returns come in (``evaluation``, and
  ``weights``, the weights it played), the final one included (``final``).

The hooks of an event are called before its row of ``progress.csv`` is
written, so that a scalar a hook logs (``event.log(name=value)``) joins that
row, and TensorBoard. ``event.stop(reason)`` asks the run to stop: the
training loop ends after the iteration under way, and the run finishes as at
the end of its budget (the final evaluation, checkpoint, plot and the final
line), its results saying ``stopped_early`` and why. An exception a hook
raises ends the run, as any other: the worker processes are closed and it
reaches the caller.

Two hooks come ready: ``EarlyStop`` (a target return, or no improvement for
a number of evaluations) and ``SaveBest`` (the weights of the best evaluation
in ``best.pt``, which ``load_run`` and ``rlstruct eval RUN_DIR/best.pt``
play). The command line makes them from ``--stop-at-return``,
``--stop-patience`` and ``--save-best`` (``config_hooks``).

Hooks are code, not settings: ``config.json`` does not hold them, and a
``--resume`` from Python takes them again (``train(config, hooks=[...])``).
The ready hooks then take up their state from the run directory: ``EarlyStop``
from the evaluations ``progress.csv`` logged up to the checkpoint,
``SaveBest`` from the return its ``best.pt`` holds.

Examples:
    >>> from rlstruct.algos.hooks import EarlyStop, check_hooks
    >>> hooks = check_hooks([EarlyStop(target=475.0), print])
    >>> len(hooks)
    2
    >>> check_hooks(EarlyStop(target=475.0))
    Traceback (most recent call last):
        ...
    TypeError: hooks must be a list or tuple of callables, each taking a TrainingEvent (hooks=[f] for one); got an EarlyStop
"""

from __future__ import annotations

import csv
import dataclasses
import itertools
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import torch

from rlstruct.algos.config import TrainConfig
from rlstruct.algos.evaluation import EvalResult
from rlstruct.checkpoint import load_checkpoint, save_checkpoint
from rlstruct.checks import check_int, check_number
from rlstruct.errors import describe
from rlstruct.logger import CHECKPOINT_NAME, CONFIG_NAME, CSV_NAME, LOCK_NAME, PLOT_NAME
from rlstruct.progress import scalar_value

__all__ = [
    "BEST_NAME",
    "EarlyStop",
    "Hook",
    "HookRunner",
    "SaveBest",
    "TrainingEvent",
    "check_hooks",
    "config_hooks",
]

BEST_NAME = "best.pt"
"""The file ``SaveBest`` writes in the run directory by default."""
RUN_FILES = (CONFIG_NAME, CSV_NAME, PLOT_NAME, LOCK_NAME)
"""The files of a run directory, besides its checkpoint, that the run writes itself."""


class _Asked:
    """What the hooks of one event asked: scalars to log, a stop; and whether its row is still open."""

    def __init__(self) -> None:
        self.scalars: dict[str, int | float] = {}
        self.stop: str | None = None
        self.open = True


@dataclasses.dataclass(frozen=True)
class TrainingEvent:
    """What a hook is called with: where the run is, what it logs, and two requests it may make.

    Read-only; ``stop`` and ``log`` are the ways a hook acts on the run.
    """

    kind: str
    """What happened: "iteration" (an iteration's scalars are being logged) or "evaluation"
    (an evaluation's returns came in)."""
    algo: str
    """The algorithm's name ("ppo", "dqn", ...)."""
    env_steps: int
    """The step of the row being logged: the env steps trained so far (an iteration), or those at which
    the evaluated weights were taken (an evaluation: ``evaluation.env_steps``)."""
    total_steps: int
    """The run's budget, ``config.total_steps``."""
    scalars: Mapping[str, float]
    """The row being logged, read-only: for an iteration ``env_steps``, ``wall_s``, ``sps``,
    ``train_return_mean`` (when episodes ended) and the algorithm's statistics; for an evaluation
    ``env_steps``, ``eval_return_mean`` and ``eval_return_std``."""
    model: torch.nn.Module
    """The learner's model as it is now (SAC's actor), on the run's device. Read it; do not change it."""
    run_dir: Path
    """The run's directory (``config.json``, ``progress.csv``, ``checkpoint.pt``, ...)."""
    evaluation: EvalResult | None = None
    """An evaluation's returns (``.mean``, ``.std``, ``.returns``, ``.env_steps``); None for an iteration."""
    weights: Mapping[str, torch.Tensor] | None = None
    """The weights the evaluation played (a copy on the CPU, a state dict of ``model``'s keys): those of
    ``env_steps``, which ``model`` has trained past since (but for the final one); None for an iteration."""
    final: bool = False
    """True for the final evaluation, made after the training loop with the trained weights."""
    resumed_from: int | None = None
    """The env steps of the checkpoint a ``--resume`` run continues from; None for a new run."""
    run_id: int = 0
    """A number of this call of ``train``, the same in all its events and new at every call (a resumed
    run, even of the same directory from the same checkpoint, gets a new one): a hook that keeps state
    per run starts afresh when it changes, as the ready hooks do."""
    _asked: _Asked = dataclasses.field(default_factory=_Asked, init=False, repr=False, compare=False)

    def stop(self, reason: str) -> None:
        """Ask the run to stop training; it ends the iteration under way and finishes as at its budget's end.

        The first reason asked is reported (the final line, ``stop_reason`` in
        the results). Once the training loop has ended (the evaluations of
        ``finish``), asking changes nothing.

        Args:
            reason: why, in a few words, such as ``"the evaluation return 500.0 reached 475"``.

        Raises:
            TypeError: if ``reason`` is not a str.
            ValueError: if it is empty.
        """
        if not isinstance(reason, str):
            raise TypeError(f"TrainingEvent.stop: reason must be a non-empty str, got {describe(reason)}")
        if not reason.strip():
            raise ValueError(f"TrainingEvent.stop: reason must be a non-empty str, got {reason!r}")
        if self._asked.stop is None:
            self._asked.stop = " ".join(reason.split())

    def log(self, **scalars: float | torch.Tensor) -> None:
        """Log scalars of your own into the row of this event (``progress.csv`` and TensorBoard).

        They join the row at ``env_steps``, written once every hook of the
        event has been called; a name becomes a column of ``progress.csv``
        (empty in the rows without it) and a TensorBoard scalar.

        Args:
            **scalars: the values by name: numbers or one-element tensors.

        Raises:
            ValueError: for no scalar, a name the row has already (``scalars``,
                or logged by a hook before), or a tensor of more than one element.
            TypeError: for a value that is not a real number.
            RuntimeError: once the row is written: log from inside the hook.
        """
        if not self._asked.open:
            raise RuntimeError(
                f"TrainingEvent.log: the row at {self.env_steps} env steps is written already; "
                "log from inside the hook, while it is called"
            )
        if not scalars:
            raise ValueError("TrainingEvent.log: expected at least one scalar, as name=value, got none")
        for name, value in scalars.items():
            if name in self.scalars or name in self._asked.scalars:
                raise ValueError(
                    f"TrainingEvent.log: {name!r} is in this row already; give your scalar a name of its own "
                    f"(the row has {sorted([*self.scalars, *self._asked.scalars])})"
                )
            self._asked.scalars[name] = scalar_value(name, value, "TrainingEvent.log")


Hook = Callable[[TrainingEvent], object]
"""A training hook: any callable taking a ``TrainingEvent``; what it returns is ignored."""


def check_hooks(hooks: object) -> tuple[Hook, ...]:
    """``hooks`` as a tuple, checked to be a list or tuple of callables.

    Raises:
        TypeError: for anything else, naming ``hooks`` (or ``hooks[i]``), what
            was expected and what was received. A lone callable is refused
            too: ``hooks=[f]`` gives one.
    """
    if not isinstance(hooks, (list, tuple)):
        raise TypeError(
            "hooks must be a list or tuple of callables, each taking a TrainingEvent (hooks=[f] for one); "
            f"got {describe(hooks)}"
        )
    for i, hook in enumerate(hooks):
        if not callable(hook):
            raise TypeError(f"hooks[{i}] must be a callable taking a TrainingEvent, got {describe(hook)}")
    return tuple(hooks)


_RUN_IDS = itertools.count(1)
"""``TrainingEvent.run_id``: one number per ``HookRunner``, that is per call of ``train``."""


class HookRunner:
    """The hooks of one run: makes the events, calls the hooks, gathers what they ask.

    ``Run`` holds one (``run.hooks``); with no hook it is false and the run
    makes no event.

    Args:
        hooks: the hooks, checked by ``check_hooks``.
        algo: the algorithm's name.
        run_dir: the run's directory.
        total_steps: the run's budget.
        resumed_from: the env steps of the checkpoint a resumed run continues
            from; None for a new run.
    """

    def __init__(
        self,
        hooks: object,
        *,
        algo: str,
        run_dir: Path,
        total_steps: int,
        resumed_from: int | None = None,
    ) -> None:
        self.hooks = check_hooks(hooks)
        self._context: dict[str, Any] = {
            "algo": algo,
            "run_dir": run_dir,
            "total_steps": total_steps,
            "resumed_from": resumed_from,
            "run_id": next(_RUN_IDS),
        }
        self.stop_reason: str | None = None
        """The first stop a hook asked for while the run trained; None if none did."""
        self._training = True

    def __bool__(self) -> bool:
        return bool(self.hooks)

    def iteration(
        self, env_steps: int, scalars: Mapping[str, float], model: torch.nn.Module
    ) -> dict[str, int | float]:
        """Call the hooks with an "iteration" event; returns the scalars they logged, for the row."""
        return self._call(
            TrainingEvent(
                "iteration",
                env_steps=env_steps,
                scalars=MappingProxyType(dict(scalars)),
                model=model,
                **self._context,
            )
        )

    def evaluation(
        self,
        result: EvalResult,
        weights: Mapping[str, torch.Tensor],
        scalars: Mapping[str, float],
        model: torch.nn.Module,
        *,
        final: bool = False,
    ) -> dict[str, int | float]:
        """Call the hooks with an "evaluation" event; returns the scalars they logged, for the row."""
        return self._call(
            TrainingEvent(
                "evaluation",
                env_steps=result.env_steps,
                scalars=MappingProxyType(dict(scalars)),
                model=model,
                evaluation=result,
                weights=MappingProxyType(dict(weights)),
                final=final,
                **self._context,
            )
        )

    def finishing(self) -> None:
        """The training loop has ended: a stop asked from now on changes nothing."""
        self._training = False

    def _call(self, event: TrainingEvent) -> dict[str, int | float]:
        asked = event._asked
        try:
            for hook in self.hooks:
                hook(event)
        finally:
            asked.open = False
        if asked.stop is not None and self._training and self.stop_reason is None:
            self.stop_reason = asked.stop
        return asked.scalars


def config_hooks(config: TrainConfig) -> list[Hook]:
    """The ready hooks that ``config``'s fields ask for (the command line's flags).

    ``EarlyStop(target=config.stop_at_return, patience=config.stop_patience)``
    when either is set, then ``SaveBest()`` with ``config.save_best``.
    """
    made: list[Hook] = []
    if config.stop_at_return is not None or config.stop_patience > 0:
        made.append(EarlyStop(target=config.stop_at_return, patience=config.stop_patience or None))
    if config.save_best:
        made.append(SaveBest())
    return made


def _logged_evaluations(run_dir: Path, up_to: int) -> list[float]:
    """The mean returns of the evaluations ``progress.csv`` logged at ``up_to`` env steps or before."""
    path = run_dir / CSV_NAME
    if not path.exists():
        return []
    with path.open(newline="") as file:
        rows = list(csv.DictReader(file))
    return [
        float(row["eval_return_mean"])
        for row in rows
        if row.get("eval_return_mean") and int(row["step"]) <= up_to
    ]


class EarlyStop:
    """Stop training when an evaluation reaches a target return, or when evaluations stop improving.

    A hook (see the module's docstring) that reads only "evaluation" events.
    It asks the run to stop when an evaluation's mean return is at least
    ``target``, or when ``patience`` evaluations in a row have not beaten
    the best mean so far by more than ``min_delta``. The run then finishes
    as at the end of its budget: its final evaluation plays the weights
    trained by then, which have moved on from those that reached the target
    (``SaveBest`` keeps those).

    Its state (``best``, ``since_best``) belongs to one call of ``train``
    (``TrainingEvent.run_id``): each call starts it afresh, and a resumed run
    takes it up from the evaluations ``progress.csv`` logged up to the
    checkpoint, so one instance may be passed again to resume. An evaluation
    whose mean is not a number counts as one that did not improve.

    Args:
        target: the mean evaluation return to stop at; None for none.
        patience: the evaluations without improvement to stop after; None
            for none.
        min_delta: how much an evaluation must beat the best so far by to
            count as an improvement.

    Raises:
        ValueError: if neither ``target`` nor ``patience`` is given, or one is
            out of range (``patience`` a positive int, ``min_delta`` >= 0,
            ``target`` finite).
        TypeError: for a value that is not a number.

    Examples:
        >>> EarlyStop(target=475.0, patience=5)
        EarlyStop(target=475.0, patience=5, min_delta=0.0)
    """

    def __init__(
        self, target: float | None = None, *, patience: int | None = None, min_delta: float = 0.0
    ) -> None:
        if target is None and patience is None:
            raise ValueError("EarlyStop: give target (a return to stop at), patience (evaluations), or both")
        self.target = None if target is None else check_number("EarlyStop", "target", target)
        self.patience = None if patience is None else check_int("EarlyStop", "patience", patience, 1)
        self.min_delta = check_number("EarlyStop", "min_delta", min_delta, 0.0)
        self.best: float | None = None
        """The best mean evaluation return so far in the run."""
        self.since_best = 0
        """The evaluations since the best one."""
        self._run_id = 0

    def __repr__(self) -> str:
        return f"EarlyStop(target={self.target}, patience={self.patience}, min_delta={self.min_delta})"

    def __call__(self, event: TrainingEvent) -> None:
        """Read an evaluation's mean return; ask the run to stop when it reaches the target or stalls."""
        if event.run_id != self._run_id:  # a new run: the state of the run directory's evaluations
            self._run_id, self.best, self.since_best = event.run_id, None, 0
            if event.resumed_from is not None:
                for mean in _logged_evaluations(event.run_dir, event.resumed_from):
                    self._add(mean)
        if event.evaluation is None:
            return
        mean = event.evaluation.mean
        self._add(mean)
        at = f"at {event.env_steps} env steps"
        if self.target is not None and mean >= self.target:
            event.stop(
                f"the evaluation return {mean:.1f} {at} reached the target {self.target:g} (EarlyStop)"
            )
        elif self.patience is not None and self.since_best >= self.patience:
            event.stop(
                f"the evaluation return has not beaten {self.best:.1f} for {self.patience} evaluations, "
                f"{at} (EarlyStop)"
            )

    def _add(self, mean: float) -> None:
        if not math.isfinite(mean):  # no evaluation to beat (a diverged run ends on its own)
            self.since_best += 1
            return
        if self.best is None or mean > self.best + self.min_delta:
            self.best, self.since_best = mean, 0
        else:
            self.since_best += 1


class SaveBest:
    """Save the weights of the best evaluation so far into the run directory, for ``load_run``.

    A hook (see the module's docstring) that reads only "evaluation" events,
    the final one included. Each time an evaluation's mean return beats the
    best so far (strictly: a tie keeps the earlier weights), it writes
    ``run_dir/<filename>`` (atomically, with ``save_checkpoint``) holding:

    - ``model``: the weights that evaluation played (``event.weights``);
    - ``env_steps``: the env steps at which they were taken;
    - ``eval_return_mean``, ``eval_return_std``, ``returns``: its result.

    ``load_run("RUN_DIR/best.pt")`` rebuilds that agent, and its
    ``evaluate()`` plays the same episodes again, giving the same figure;
    ``rlstruct eval RUN_DIR/best.pt`` does both. The run's own
    ``checkpoint.pt`` (the last weights, and everything ``--resume`` needs)
    is left alone.

    Its state (``best``, ``env_steps``) belongs to one call of ``train``
    (``TrainingEvent.run_id``): each call starts it afresh, from the return
    its file holds in the run directory (a resumed run's ``best.pt``), else
    from none.

    Args:
        filename: the file's name in the run directory.

    Raises:
        TypeError: for a ``filename`` that is not a str.
        ValueError: for a name that is not a plain file name or is one of
            the run's own files (``checkpoint.pt``, ``config.json``,
            ``progress.csv``, ``learning_curve.png``, ``run.lock``).

    Examples:
        >>> SaveBest()
        SaveBest(filename='best.pt')
    """

    def __init__(self, filename: str = BEST_NAME) -> None:
        if not isinstance(filename, str):
            raise TypeError(f"SaveBest: filename must be a str such as 'best.pt', got {describe(filename)}")
        if Path(filename).name != filename or filename in ("", ".", ".."):
            raise ValueError(
                f"SaveBest: filename must be a plain file name such as 'best.pt', got {filename!r}"
            )
        if filename == CHECKPOINT_NAME:
            raise ValueError(
                f"SaveBest: filename must not be {CHECKPOINT_NAME!r}, the run's own checkpoint; "
                f"got {filename!r}"
            )
        if filename in RUN_FILES:
            raise ValueError(
                f"SaveBest: filename must not be {filename!r}, a file the run writes itself "
                f"({', '.join(RUN_FILES)})"
            )
        self.filename = filename
        self.best: float | None = None
        """The best mean evaluation return saved so far in the run."""
        self.env_steps: int | None = None
        """The env steps of the weights saved (None: none yet, or taken up from the file)."""
        self._run_id = 0

    def __repr__(self) -> str:
        return f"SaveBest(filename={self.filename!r})"

    def __call__(self, event: TrainingEvent) -> None:
        """Save the evaluated weights when their mean return beats the best so far."""
        path = event.run_dir / self.filename
        if event.run_id != self._run_id:  # a new run: the best its file holds, if any
            self._run_id, self.best, self.env_steps = event.run_id, None, None
            if path.exists():
                stored = load_checkpoint(path, map_location="cpu")
                self.best, self.env_steps = float(stored["eval_return_mean"]), int(stored["env_steps"])
        result, weights = event.evaluation, event.weights
        if result is None or weights is None or math.isnan(result.mean):
            return
        if self.best is None or result.mean > self.best:
            save_checkpoint(
                path,
                model=dict(weights),
                env_steps=result.env_steps,
                eval_return_mean=result.mean,
                eval_return_std=result.std,
                returns=list(result.returns),
            )
            self.best, self.env_steps = result.mean, result.env_steps
