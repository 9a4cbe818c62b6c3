"""Learner: runs a scheme's updates up to a target number of environment steps, with metrics and progress.

Examples:
    >>> from functools import partial
    >>> from rlstruct import GymEnv
    >>> from rlstruct.learning.actor_critic import ActorCritic
    >>> from rlstruct.distributed import PPO, Collection, Learner, MinibatchBuffer, Scheme
    >>> scheme = Scheme(ActorCritic, {"obs_dim": 4, "n_actions": 2}, GymEnv, {"env": "CartPole-v1"},
    ...                 PPO, partial(MinibatchBuffer, n_epochs=2, minibatch_size=64),
    ...                 collection=Collection(n_envs=2, n_steps=32))
    >>> with Learner(scheme, target_steps=256, progress=False) as learner:
    ...     while not learner.done():
    ...         _ = learner.step()
    ...     metrics = learner.metrics()
    >>> metrics["env_steps"], metrics["updates"]
    (256, 8)
"""

from __future__ import annotations

import math
import time
from collections import deque
from pathlib import Path
from typing import Any, TextIO

from rlstruct.checkpoint import save_checkpoint
from rlstruct.checks import is_bool, is_int
from rlstruct.distributed.scheme import Scheme, StepInfo
from rlstruct.errors import describe
from rlstruct.progress import Progress

__all__ = ["Learner"]

WINDOW = 100
"""Episode returns, policy lags and gradient asynchronies are averaged over the last this many."""


class Learner:
    """Steps a ``Scheme`` until ``target_steps`` environment steps were collected.

    Args:
        scheme: the scheme to run; the learner closes it.
        target_steps: environment steps (all collection workers counted)
            after which ``done()`` turns True, once the last batch is trained on.
        progress: show a progress line (``rlstruct.Progress``) with the
            metrics on ``stream``.
        stream: where the progress line goes (standard error by default).

    Raises:
        TypeError: if ``scheme`` is not a ``Scheme``, ``progress`` not a bool,
            or ``stream`` neither None nor a text stream (with ``write``).
        ValueError: if ``target_steps`` is not a positive int, or ``scheme`` is closed.
    """

    def __init__(
        self, scheme: Scheme, target_steps: int, *, progress: bool = True, stream: TextIO | None = None
    ) -> None:
        if not isinstance(scheme, Scheme):
            raise TypeError(f"Learner: scheme must be a Scheme, got {type(scheme).__name__}")
        if not is_int(target_steps) or target_steps <= 0:  # a NumPy int is an int
            raise ValueError(f"Learner: target_steps must be a positive int, got {target_steps!r}")
        target_steps = int(target_steps)
        if not is_bool(progress):  # a NumPy bool too
            raise TypeError(f"Learner: progress must be a bool, got {describe(progress)}")
        progress = bool(progress)
        if stream is not None and not callable(getattr(stream, "write", None)):
            raise TypeError(
                f"Learner: stream must be None or a text stream (with write), got {describe(stream)}"
            )
        if scheme.closed:
            raise ValueError("Learner: scheme is closed; make a new one")
        self.scheme, self.target_steps = scheme, target_steps
        self.env_steps = 0
        self.updates = 0
        self.start = time.monotonic()
        self._returns: deque[float] = deque(maxlen=WINDOW)
        self._lags: deque[float] = deque(maxlen=WINDOW)
        self._asynchrony: deque[int] = deque(maxlen=WINDOW)
        self._stats: dict[str, float] = {}
        self._lost: list[tuple[str, int]] = []
        self._sent_bytes = self._raw_bytes = 0
        self._rollout_bytes = self._rollout_raw_bytes = 0
        self._batch_end = True
        self._progress = Progress(target_steps, stream=stream) if progress else None

    def step(self) -> StepInfo:
        """One step of the scheme (see ``Scheme.step``); its metrics are recorded.

        Returns:
            The scheme's ``StepInfo`` of this step: the gradients applied
            (``updates``: 1, or more when asynchronous gradient workers
            delivered several at once), the environment steps and episode
            returns collected for it, policy lags, gradient asynchrony, the
            loss terms and the workers lost so far.

        Raises:
            RuntimeError: if the learner is already ``done()``: a further step
                could start a new batch and take ``done()`` back to False.
            RemoteWorkerError, DistributedError: as ``Scheme.step``.
        """
        if self.done():
            raise RuntimeError(
                f"Learner.step: the learner is done ({self.env_steps} env steps of target_steps="
                f"{self.target_steps}, the last batch trained on); make a new Learner to train further"
            )
        info = self.scheme.step()
        self.updates += info.updates
        self.env_steps += info.env_steps
        self._returns.extend(info.episode_returns)
        self._lags.extend(info.policy_lag)
        self._asynchrony.extend(info.gradient_asynchrony)
        self._stats = info.stats or self._stats
        self._sent_bytes += info.sent_bytes
        self._raw_bytes += info.raw_bytes
        self._rollout_bytes += info.rollout_bytes
        self._rollout_raw_bytes += info.rollout_raw_bytes
        self._batch_end = info.batch_end
        for lost in info.lost_workers:
            if lost not in self._lost:
                self._lost.append(lost)
        if self._progress is not None:
            shown = {k: v for k, v in self.metrics().items() if k in ("episode_return", "policy_lag")}
            self._progress.update(self.env_steps, **{k: v for k, v in shown.items() if not math.isnan(v)})
        return info

    def done(self) -> bool:
        """True once ``target_steps`` environment steps were collected and trained on.

        A batch collected before the target is reached is trained on to its
        last minibatch (the last step's gradient workers all ended a batch).
        Once True it stays True: ``step()`` then raises.
        """
        return self.env_steps >= self.target_steps and self._batch_end

    def metrics(self) -> dict[str, Any]:
        """What the run has done so far.

        Returns:
            ``env_steps``, ``updates`` (gradients applied), ``wall_s``, ``sps`` (env steps per
            second of wall time since the learner was made),
            ``episode_return`` (mean of the last 100 finished episodes; nan
            before any), ``policy_lag`` and ``gradient_asynchrony`` (means of
            the last 100, in policy versions), ``lost_workers`` (list of
            ``(role, index)``), ``sent_bytes`` and ``raw_bytes`` (gradients
            sent to the update worker, compressed and not),
            ``rollout_bytes`` and ``rollout_raw_bytes`` (rollouts sent by
            remote collection workers, compressed and not), and the last
            loss terms.
        """
        wall = time.monotonic() - self.start

        def mean(values: deque[Any]) -> float:
            return sum(values) / len(values) if values else math.nan

        return {
            "env_steps": self.env_steps,
            "updates": self.updates,
            "wall_s": wall,
            "sps": self.env_steps / max(wall, 1e-9),
            "episode_return": mean(self._returns),
            "policy_lag": mean(self._lags),
            "gradient_asynchrony": mean(self._asynchrony),
            "lost_workers": list(self._lost),
            "sent_bytes": self._sent_bytes,
            "raw_bytes": self._raw_bytes,
            "rollout_bytes": self._rollout_bytes,
            "rollout_raw_bytes": self._rollout_raw_bytes,
            **self._stats,
        }

    def update_algorithm_parameter(self, name: str, value: float) -> None:
        """Change a hyperparameter of the algorithm on every worker that uses it ("lr", "clip", ...).

        Raises:
            ValueError: if the algorithm has no such hyperparameter, or
                ``value`` is one its constructor refuses (a negative, nan or
                infinite ``lr``), before any worker sees it.
            TypeError: if ``value`` has the wrong type.
        """
        self.scheme.set_parameter(name, value)

    def save_model(self, path: str | Path) -> Path:
        """Write the current weights to ``path`` atomically (``rlstruct.save_checkpoint``; key ``model``).

        Also stored: ``env_steps``, ``updates`` (gradients applied) and ``version``. Load with
        ``rlstruct.load_checkpoint(path)["model"]``.
        """
        path = Path(path)
        save_checkpoint(
            path,
            model=self.scheme.weights(),
            env_steps=self.env_steps,
            updates=self.updates,
            version=self.scheme.version,
        )
        return path

    def close(self) -> None:
        """Close the progress line and the scheme. Safe to call twice."""
        if self._progress is not None:
            self._progress.close()
        self.scheme.close()

    def __enter__(self) -> Learner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
