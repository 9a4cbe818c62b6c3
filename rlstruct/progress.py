"""Progress: one line that says how far a long loop has got, how fast it goes and what it sees.

On a terminal the line is rewritten in place (``\\r``) at most every
``interval`` seconds; on anything else (a file, a CI log) a plain line is
written at most every ``interval`` seconds, so that long runs never flood a
log. The line shows the step, the total and the fraction done when a total is
known, steps per second since the previous line, the elapsed time, the time
left, and the values passed to ``update``::

    step 12,288/100,000 (12.3%) | 2,048 steps/s | elapsed 0:00:06 | left 0:00:43 | return_mean 21.5

Examples:
    >>> import io
    >>> from rlstruct import Progress
    >>> clock = iter([0.0, 2.0, 2.5, 3.0]).__next__  # a fake clock: the seconds at each call
    >>> stream = io.StringIO()
    >>> progress = Progress(100, stream=stream, interval=1.0, clock=clock)
    >>> progress.update(0)  # the first update is always shown
    >>> progress.update(50, return_mean=9.5)  # 2 s later: shown
    >>> progress.update(60, return_mean=10.25)  # 0.5 s later: kept for later
    >>> progress.close()  # shows what was kept
    >>> print(stream.getvalue(), end="")
    step 0/100 (0.0%) | - steps/s | elapsed 0:00:00
    step 50/100 (50.0%) | 25 steps/s | elapsed 0:00:02 | left 0:00:02 | return_mean 9.5
    step 60/100 (60.0%) | 10 steps/s | elapsed 0:00:03 | left 0:00:04 | return_mean 10.25
"""

from __future__ import annotations

import numbers
import sys
import time
from collections.abc import Callable
from typing import TextIO

import torch

from rlstruct.errors import describe

__all__ = ["Progress", "scalar_value", "step_value"]


def step_value(step: object, where: str) -> int:
    """``step`` as a Python int, or a ValueError naming ``where`` it was given.

    Raises:
        ValueError: if ``step`` is not a non-negative integer (an int or a
            NumPy integer; not a bool) below 2**63 (TensorBoard's steps are int64).
    """
    if isinstance(step, bool) or not isinstance(step, numbers.Integral) or step < 0:
        raise ValueError(f"{where}: step must be a non-negative int, got {step!r}")
    value = int(step)
    if value >= 2**63:  # TensorBoard's int64: refused here, before a row is half written
        raise ValueError(
            f"{where}: step must be below 2**63 (an int64, as TensorBoard keeps it), got {step!r}"
        )
    return value


def scalar_value(name: str, value: object, where: str) -> int | float:
    """``value`` as a Python int or float, or an error naming ``name`` and ``where`` it was given.

    Accepts ints, floats, NumPy scalars and one-element tensors (integer
    tensors give ints, floating ones floats); rejects bools, which are flags
    rather than quantities.

    Raises:
        TypeError: if ``value`` is not a real number or a real tensor.
        ValueError: if ``value`` is a tensor with other than one element.
    """
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(
                f"{where}: {name} must be a number or a one-element tensor, "
                f"got a tensor of shape {tuple(value.shape)}"
            )
        if value.dtype == torch.bool or value.is_complex():
            raise TypeError(f"{where}: {name} must be a real number, got a tensor of dtype {value.dtype}")
        item = value.item()
        assert isinstance(item, (int, float))  # a real, non-bool tensor holds one of these
        return item
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{where}: {name} must be a real number, got {value!r} ({type(value).__name__})")
    return int(value) if isinstance(value, numbers.Integral) else float(value)


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}"


def _number(value: int | float) -> str:
    return f"{value:,}" if isinstance(value, int) else f"{value:.4g}"


class Progress:
    """A progress line for a loop over steps (environment steps, updates, ...).

    Args:
        total: the step at which the loop ends, if known; shown with the
            fraction done and the time left.
        stream: where to write; ``sys.stderr`` by default. A stream whose
            ``isatty()`` is True gets one line rewritten in place, others get
            plain lines.
        interval: the least number of seconds between two writes; by default
            0.1 on a terminal and 10 otherwise.
        clock: a function giving the time in seconds; ``time.monotonic`` by
            default (tests pass a fake one).

    Raises:
        ValueError: if ``total`` is not a positive int (a Python or NumPy
            int) or ``interval`` not a positive number.
        TypeError: if ``stream`` has no ``write`` method.
    """

    def __init__(
        self,
        total: int | None = None,
        *,
        stream: TextIO | None = None,
        interval: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if total is not None and (
            not isinstance(total, numbers.Integral) or isinstance(total, bool) or total <= 0
        ):  # a NumPy int counts
            raise ValueError(f"Progress: total must be a positive int or None, got {total!r}")
        if stream is not None and not callable(getattr(stream, "write", None)):  # else the first update fails
            raise TypeError(
                f"Progress: stream must be a text stream with a write method, got {describe(stream)}"
            )
        if interval is not None and (
            isinstance(interval, bool) or not isinstance(interval, numbers.Real) or not interval > 0
        ):
            raise ValueError(
                f"Progress: interval must be a positive number of seconds or None, got {interval!r}"
            )
        self.total = None if total is None else int(total)
        self._stream = stream if stream is not None else sys.stderr
        isatty = getattr(self._stream, "isatty", None)
        self._tty = bool(isatty()) if callable(isatty) else False
        self.interval = float(interval) if interval is not None else (0.1 if self._tty else 10.0)
        self._clock = clock
        self._start: float | None = None
        self._shown_at = 0.0  # time and step of the last line written
        self._shown_step = 0
        self._pending: tuple[int, dict[str, int | float]] | None = None  # the last update, if not shown
        self._width = 0  # length of the line on the terminal, to blank out what a shorter one leaves
        self._closed = False

    def update(self, step: int, **shown: float) -> None:
        """Record that the loop has reached ``step``; write a line if ``interval`` has passed.

        The first update always writes a line; later ones write when at least
        ``interval`` seconds have passed since the previous line.

        Args:
            step: the current step (a non-negative int).
            **shown: values to show after the speed, in the order given
                (numbers or one-element tensors), such as ``return_mean``.

        Raises:
            ValueError: if ``step`` is not a non-negative int, or a value is a
                tensor with more than one element.
            TypeError: if a value is not a real number.
            RuntimeError: after ``close``.
        """
        if self._closed:
            raise RuntimeError("Progress.update: the progress line is closed")
        step = step_value(step, "Progress.update")
        values = {name: scalar_value(name, value, "Progress.update") for name, value in shown.items()}
        now = self._clock()
        if self._start is None:
            self._start = self._shown_at = now
            self._shown_step = step
            self._write(self._line(step, values, now, rate=None))
            return
        if now - self._shown_at < self.interval:
            self._pending = (step, values)
            return
        rate = (step - self._shown_step) / (now - self._shown_at)
        self._shown_at, self._shown_step = now, step
        self._write(self._line(step, values, now, rate))

    def _line(self, step: int, values: dict[str, int | float], now: float, rate: float | None) -> str:
        assert self._start is not None
        parts = [f"step {step:,}" if self.total is None else f"step {step:,}/{self.total:,}"]
        if self.total is not None:
            parts[0] += f" ({100 * step / self.total:.1f}%)"
        parts.append("- steps/s" if rate is None else f"{rate:,.0f} steps/s")
        parts.append(f"elapsed {_duration(now - self._start)}")
        if self.total is not None and rate is not None and rate > 0:
            parts.append(f"left {_duration(max(self.total - step, 0) / rate)}")
        parts.extend(f"{name} {_number(value)}" for name, value in values.items())
        return " | ".join(parts)

    def _write(self, line: str) -> None:
        self._pending = None
        if self._tty:
            self._stream.write("\r" + line.ljust(self._width))
            self._width = len(line)
        else:
            self._stream.write(line + "\n")
        self._stream.flush()

    def close(self) -> None:
        """Write the last update if it was not shown, and end the line on a terminal. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        if self._pending is not None:
            step, values = self._pending
            now = self._clock()
            rate = (step - self._shown_step) / (now - self._shown_at) if now > self._shown_at else None
            self._write(self._line(step, values, now, rate))
        if self._tty and self._width:
            self._stream.write("\n")
            self._stream.flush()
