"""Behaviour tests for rlstruct.progress: the line's content, throttling on terminals and logs, and errors.

A fake clock stands in for time: each test says how many seconds pass
between updates, so nothing sleeps.
"""

from __future__ import annotations

import io
import re

import numpy as np
import pytest
import torch

from rlstruct import Progress
from rlstruct.progress import scalar_value, step_value


def message(text: str) -> str:
    return re.escape(text)


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_plain_lines_on_a_log_show_steps_speed_times_and_values() -> None:
    clock, stream = FakeClock(), io.StringIO()
    progress = Progress(10_000, stream=stream, interval=5.0, clock=clock)
    progress.update(1_000, return_mean=12.5)
    clock.now = 4.0
    progress.update(3_000, return_mean=20.0)  # 4 s < 5 s: kept, not shown
    clock.now = 8.0
    progress.update(5_000, return_mean=30.25, episodes=17)
    progress.close()
    progress.close()
    assert stream.getvalue().splitlines() == [
        "step 1,000/10,000 (10.0%) | - steps/s | elapsed 0:00:00 | return_mean 12.5",
        # 4,000 steps in 8 s since the previous line; 5,000 steps left at 500 steps/s
        "step 5,000/10,000 (50.0%) | 500 steps/s | elapsed 0:00:08 | left 0:00:10 | return_mean 30.25 | episodes 17",
    ]


def test_close_shows_the_last_update_if_it_was_kept() -> None:
    clock, stream = FakeClock(), io.StringIO()
    progress = Progress(stream=stream, interval=10.0, clock=clock)
    progress.update(0)
    clock.now = 3.0
    progress.update(600, loss=0.125)
    clock.now = 4.0
    progress.close()
    assert stream.getvalue().splitlines() == [
        "step 0 | - steps/s | elapsed 0:00:00",
        "step 600 | 150 steps/s | elapsed 0:00:04 | loss 0.125",
    ]


def test_a_long_loop_writes_one_line_per_interval_on_a_log() -> None:
    clock, stream = FakeClock(), io.StringIO()
    progress = Progress(100_000, stream=stream, clock=clock)  # 10 s by default off a terminal
    assert progress.interval == 10.0
    for step in range(100_000):
        clock.now = step * 0.001  # 100 s in all
        progress.update(step)
    progress.close()
    lines = stream.getvalue().splitlines()
    assert len(lines) == 11  # at 0, 10, 20, ..., 90 s, and the last update at close
    assert lines[-1].startswith("step 99,999/100,000 (100.0%) | 1,000 steps/s | elapsed 0:01:39")


def test_a_terminal_gets_one_line_rewritten_in_place() -> None:
    clock, stream = FakeClock(), Terminal()
    progress = Progress(100, stream=stream, clock=clock)
    assert progress.interval == 0.1
    progress.update(0, value=123.5)
    clock.now = 1.0
    progress.update(10)
    assert "\n" not in stream.getvalue()
    progress.close()
    first = "step 0/100 (0.0%) | - steps/s | elapsed 0:00:00 | value 123.5"
    second = "step 10/100 (10.0%) | 10 steps/s | elapsed 0:00:01 | left 0:00:09"
    # the shorter second line is padded to blank out the end of the first
    assert stream.getvalue() == "\r" + first + "\r" + second.ljust(len(first)) + "\n"


def test_values_accept_numbers_numpy_scalars_and_one_element_tensors() -> None:
    assert scalar_value("a", 3, "f") == 3 and isinstance(scalar_value("a", 3, "f"), int)
    assert scalar_value("a", np.float32(0.5), "f") == 0.5
    assert scalar_value("a", np.int64(7), "f") == 7
    assert scalar_value("a", torch.tensor([2.5]), "f") == 2.5
    assert isinstance(scalar_value("a", torch.tensor(4), "f"), int)
    assert step_value(np.int64(5), "f") == 5


def test_errors_name_the_argument() -> None:
    with pytest.raises(ValueError, match=message("Progress: total must be a positive int or None, got 0")):
        Progress(0)
    with pytest.raises(
        ValueError, match=message("Progress: interval must be a positive number of seconds or None, got -1")
    ):
        Progress(interval=-1)
    progress = Progress(stream=io.StringIO())
    with pytest.raises(ValueError, match=message("Progress.update: step must be a non-negative int, got -1")):
        progress.update(-1)
    with pytest.raises(
        ValueError, match=message("Progress.update: step must be a non-negative int, got 1.5")
    ):
        progress.update(1.5)  # type: ignore[arg-type]
    with pytest.raises(
        TypeError, match=message("Progress.update: loss must be a real number, got 'low' (str)")
    ):
        progress.update(1, loss="low")  # type: ignore[arg-type]
    with pytest.raises(
        TypeError, match=message("Progress.update: done must be a real number, got True (bool)")
    ):
        progress.update(1, done=True)
    with pytest.raises(
        ValueError, match=message("loss must be a number or a one-element tensor, got a tensor of shape (2,)")
    ):
        progress.update(1, loss=torch.zeros(2))  # type: ignore[arg-type]
    with pytest.raises(
        TypeError, match=message("flag must be a real number, got a tensor of dtype torch.bool")
    ):
        progress.update(1, flag=torch.tensor(True))  # type: ignore[arg-type]
    progress.close()
    with pytest.raises(RuntimeError, match=message("Progress.update: the progress line is closed")):
        progress.update(2)


def test_a_numpy_total_is_taken_and_a_stream_without_write_is_named() -> None:
    stream = io.StringIO()
    progress = Progress(
        np.int64(100), stream=stream
    )  # was "total must be a positive int or None, got np.int64(100)"
    assert progress.total == 100 and type(progress.total) is int
    progress.update(50)
    assert stream.getvalue().startswith("step 50/100 (50.0%)")
    with pytest.raises(  # was accepted, then the first update's AttributeError: 'int' object has no attribute 'write'
        TypeError, match=message("Progress: stream must be a text stream with a write method, got an int")
    ):
        Progress(stream=5)  # type: ignore[arg-type]
