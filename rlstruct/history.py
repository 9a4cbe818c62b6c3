"""The window of previous steps that a history agent sees: pure, vectorised arithmetic.

A window is a ``TemporalDictTensor`` ``[B, L, ...]``: row b holds the
``lengths[b]`` most recent previous steps of its current episode, oldest
first, then zeros. It never holds a step of an earlier episode: a step whose
observation has ``initial_state`` True starts an episode, and its window is
empty.

Every window is read from a *timeline* per row, ``cat(before, steps, zero)``:
the window before the first step (left-aligned, ``n`` steps, ``lb`` of them
real), the steps, and one zero step that padding reads. ``window_positions``
says where each entry of a window sits in it; ``history_windows`` uses it
for every step of a stored batch at once (``replay_agent``) and
``StepHistory`` for one step at a time (the batchers), so both give the same
windows.

Examples:
    >>> import torch
    >>> from rlstruct import DictTensor, TemporalDictTensor
    >>> steps = TemporalDictTensor({"x": torch.tensor([[1, 2, 3, 4]])})
    >>> starts = torch.tensor([[False, False, True, False]])
    >>> windows = history_windows(None, steps, starts, 2)  # the window before each step
    >>> windows["x"].tolist(), windows.lengths.tolist()
    ([[0, 0], [1, 0], [0, 0], [3, 0]], [0, 1, 0, 1])
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from rlstruct.checks import is_int
from rlstruct.dicttensor import DictTensor
from rlstruct.errors import describe
from rlstruct.temporal import TemporalDictTensor

__all__ = ["StepHistory", "empty_window", "history_windows", "window_after", "window_positions"]

Spec = Mapping[str, tuple[torch.dtype, tuple[int, ...]]]
"""key -> (dtype, shape of one step of one row)."""


def empty_window(
    spec: Spec, batch_size: int, n: int, device: torch.device | str = "cpu"
) -> TemporalDictTensor:
    """A window of ``batch_size`` rows with room for ``n`` steps, every length 0 (zeros), on ``device``."""
    data = {
        k: torch.zeros((batch_size, n, *shape), dtype=dtype, device=device)
        for k, (dtype, shape) in spec.items()
    }
    lengths = torch.zeros(batch_size, dtype=torch.int64, device=device)
    return TemporalDictTensor(DictTensor(data, batch_size=batch_size), lengths, n_timesteps=n)


def window_positions(
    t: int | torch.Tensor,
    lengths: torch.Tensor,
    before_lengths: torch.Tensor,
    n_before: int,
    width: int,
    pad: int,
) -> torch.Tensor:
    """Where each entry of the window before step ``t`` sits in the timeline ``cat(before, steps, zero)``.

    Entry i < L (``L = lengths``) of a left-aligned window is step
    ``p = t - L + i``: index ``n_before + p`` of the timeline if ``p >= 0``,
    else index ``lb + p`` of ``before`` (``lb = before_lengths``: its last
    real step is ``p = -1``). Entries i >= L read ``pad``, the zero step.

    Args:
        t: the step, an int or a tensor that broadcasts with ``lengths``.
        lengths: L, how many previous steps each window holds (at most ``t + lb``).
        before_lengths: lb, broadcasting with ``lengths``.
        n_before: the number of steps ``before`` has room for.
        width: the window's number of entries (at least the largest L).
        pad: the index of the zero step.

    Returns:
        int64 indices of shape ``[*lengths.shape, width]``.
    """
    i = torch.arange(width, device=lengths.device)
    steps_left = lengths.unsqueeze(-1)
    p = (t if isinstance(t, int) else t.unsqueeze(-1)) - steps_left + i
    inside = torch.where(p >= 0, n_before + p, before_lengths.unsqueeze(-1) + p)
    return torch.where(i < steps_left, inside, pad)


def _take(flat: Mapping[str, torch.Tensor], width: int, positions: torch.Tensor) -> dict[str, torch.Tensor]:
    """``timeline[k][b, positions[b, ...]]`` for every key: one ``index_select`` per key, new tensors.

    ``flat[k]`` is the timeline ``[B, width, ...]`` viewed as ``[B * width, ...]``.
    """
    b = positions.shape[0]
    rows = torch.arange(b, device=positions.device).view(b, *([1] * (positions.dim() - 1)))
    index = (rows * width + positions).flatten()
    return {k: v.index_select(0, index).view(*positions.shape, *v.shape[1:]) for k, v in flat.items()}


def history_windows(
    before: TemporalDictTensor | None, steps: TemporalDictTensor, starts: torch.Tensor, n: int
) -> TemporalDictTensor:
    """The window before every step of ``steps``, all at once: row ``b * T + t`` is the one before step t of row b.

    Args:
        before: the window before step 0 (``[B, n, ...]`` with the keys of
            ``steps``, left-aligned), or None for an empty one.
        steps: ``[B, T, ...]``, the steps (observation and output keys).
        starts: bool ``[B, T]``: step t of row b starts an episode.
        n: L, the number of entries of each window.

    Returns:
        ``[B * T, n, ...]`` with the keys of ``steps``, left-aligned, zeros past the lengths.

    Step t sees ``min(n, t - s)`` steps if its episode started at step
    ``s <= t`` (the last start), else ``min(n, t + lb)``, ``lb`` being the
    length of ``before``.

    Raises:
        TypeError: if ``steps`` or ``before`` is not a TemporalDictTensor,
            ``starts`` not a bool tensor, or ``n`` not an int.
        ValueError: if ``n`` is below 1, ``starts`` not ``[B, T]`` on the
            steps' device, or ``before`` not ``[B, n]`` with the keys of ``steps``.
    """
    _check_windows_inputs(before, steps, starts, n)
    b, t_max = steps.n_elems(), steps.n_timesteps()
    if before is None:
        spec = {k: (v.dtype, tuple(v.shape[2:])) for k, v in steps.items()}
        before = empty_window(spec, b, n, steps.device)
    t = torch.arange(t_max, device=steps.device).unsqueeze(0)  # [1, T]
    last_start = torch.where(starts, t, -1).cummax(1).values  # [B, T]; -1: the episode began before step 0
    lb = before.lengths.unsqueeze(1)  # [B, 1]
    lengths = torch.where(last_start >= 0, t - last_start, t + lb).clamp(max=n)
    positions = window_positions(t, lengths, lb, before.n_timesteps(), n, pad=before.n_timesteps() + t_max)
    width = before.n_timesteps() + t_max + 1
    timeline = {
        k: torch.cat([before[k], v, v.new_zeros((b, 1, *v.shape[2:]))], 1).flatten(0, 1)
        for k, v in steps.items()
    }
    data = {k: v.reshape(b * t_max, n, *v.shape[3:]) for k, v in _take(timeline, width, positions).items()}
    return TemporalDictTensor(DictTensor(data, batch_size=b * t_max), lengths.reshape(-1), n_timesteps=n)


def _check_windows_inputs(
    before: TemporalDictTensor | None, steps: TemporalDictTensor, starts: torch.Tensor, n: int
) -> None:
    """Raise naming the argument of ``history_windows`` that is not what it must be."""
    op = "history_windows"
    if not isinstance(steps, TemporalDictTensor):
        raise TypeError(f"{op}: steps must be a TemporalDictTensor [B, T, ...], got {describe(steps)}")
    if not is_int(n):
        raise TypeError(f"{op}: n must be an int (the window's length), got {describe(n)}")
    if n < 1:
        raise ValueError(f"{op}: n must be at least 1, got {n}")
    shape = [steps.n_elems(), steps.n_timesteps()]
    if not isinstance(starts, torch.Tensor) or starts.dtype != torch.bool:
        got = f"dtype {starts.dtype}" if isinstance(starts, torch.Tensor) else describe(starts)
        raise TypeError(f"{op}: starts must be a bool tensor [B, T] = {shape}, got {got}")
    if list(starts.shape) != shape or starts.device != steps.device:
        raise ValueError(
            f"{op}: starts must be [B, T] = {shape} on {steps.device}, got {list(starts.shape)} on {starts.device}"
        )
    if before is None:
        return
    if not isinstance(before, TemporalDictTensor):
        raise TypeError(
            f"{op}: before must be None or a TemporalDictTensor [B, n, ...], got {describe(before)}"
        )
    missing = sorted(set(steps.keys()) - set(before.keys()))
    if before.n_elems() != shape[0] or before.n_timesteps() != n or missing:
        raise ValueError(
            f"{op}: before must be [B, n] = {[shape[0], n]} with the keys of steps, got "
            f"{[before.n_elems(), before.n_timesteps()]}" + (f", lacking {missing}" if missing else "")
        )


def window_after(window: TemporalDictTensor, step: DictTensor) -> TemporalDictTensor:
    """The window before the next step: ``window`` with ``step`` appended, the oldest dropped when full.

    It is what an agent sees at the observation it reaches after ``step``:
    the value of a reached observation (a bootstrap) needs it. Rows are
    independent; every row of the result holds ``min(lengths + 1, n)``
    steps, left-aligned.

    Args:
        window: ``[N, n, ...]`` windows (left-aligned, with their lengths).
        step: the step taken after each window, ``N`` rows, with the
            window's keys (one step each).

    Returns:
        A new TemporalDictTensor ``[N, n, ...]`` on ``window``'s device.

    Raises:
        ValueError: if ``step`` lacks a key of ``window``, or has another
            number of rows, or a key of another dtype or per-row shape.

    Examples:
        >>> import torch
        >>> from rlstruct import DictTensor, TemporalDictTensor
        >>> window = TemporalDictTensor({"x": torch.tensor([[1, 0], [1, 2]])}, torch.tensor([1, 2]))
        >>> after = window_after(window, DictTensor({"x": torch.tensor([5, 5])}))
        >>> after["x"].tolist(), after.lengths.tolist()
        ([[1, 5], [2, 5]], [2, 2])
    """
    missing = [k for k in window if k not in step]
    if missing:
        raise ValueError(f"window_after: step lacks the window's keys {missing}, got {list(step.keys())}")
    if step.n_elems() != window.n_elems():
        raise ValueError(
            f"window_after: step must have the window's {window.n_elems()} rows, got {step.n_elems()}"
        )
    for key, value in window.items():
        one = step[key]
        if one.dtype != value.dtype or one.shape[1:] != value.shape[2:]:
            raise ValueError(
                f"window_after: step key {key!r} must be one step of the window's, {value.dtype} "
                f"{list(value.shape[2:])} per row, got {one.dtype} {list(one.shape[1:])}"
            )
    n, lengths = window.n_timesteps(), window.lengths
    rows = torch.arange(lengths.shape[0], device=lengths.device)
    shift = (lengths + 1 - n).clamp(min=0)  # 1 where the window is full: the oldest step goes
    positions = (torch.arange(n, device=lengths.device) + shift.unsqueeze(1)).clamp(
        max=n
    )  # into [window, step]
    valid = torch.arange(n, device=lengths.device) < (lengths + 1).clamp(max=n).unsqueeze(1)  # [N, n]
    data = {}
    for key, value in window.items():
        timeline = torch.cat([value, step[key].unsqueeze(1)], 1)  # [N, n + 1, ...]: the step at place lengths
        timeline[rows, lengths] = step[key]
        kept = timeline[rows.unsqueeze(1), positions]
        data[key] = kept * valid.view(*valid.shape, *([1] * (kept.dim() - 2))).to(kept.dtype)
    return TemporalDictTensor(data, (lengths + 1).clamp(max=n))


class StepHistory:
    """The windows of ``batch_size`` rows, advanced one step at a time while a batcher runs.

    Per step and key: one copy (``push``) and one ``index_select``
    (``window``), whatever the episodes do. With ``n``, the window before the
    next run's first step is kept (``carried``); with None (``require_history()``
    True) every run starts empty and the window before step t has t entries.

    Args:
        spec: the keys of a step.
        batch_size: B.
        n: the window's fixed number of entries, or None for "every step of the run".
        device: where the windows are kept (the steps pushed must be there).

    Examples:
        >>> import torch
        >>> from rlstruct import DictTensor
        >>> history = StepHistory({"x": (torch.int64, ())}, batch_size=1, n=2)
        >>> _ = history.begin(n_timesteps=3)
        >>> no = torch.tensor([False])
        >>> for t in range(3):
        ...     history.push(t, DictTensor({"x": torch.tensor([10 + t])}))
        >>> history.window(3, no)["x"]  # after 3 steps (10, 11, 12) of one episode: the last 2
        tensor([[11, 12]])
    """

    def __init__(
        self, spec: Spec, batch_size: int, n: int | None, device: torch.device | str = "cpu"
    ) -> None:
        self.spec, self.batch_size, self.n = dict(spec), batch_size, n
        self.device = torch.device(device)
        self.n_before = n or 0
        self.carried = empty_window(spec, batch_size, n, self.device) if n is not None else None
        self.timeline: dict[str, torch.Tensor] = {}  # key -> [B, n_before + T + 1, ...]
        self.flat: dict[str, torch.Tensor] = {}  # the same viewed as [B * (n_before + T + 1), ...]
        self.lengths = torch.zeros(batch_size, dtype=torch.int64, device=self.device)
        self.before_lengths = self.lengths

    def begin(self, n_timesteps: int) -> TemporalDictTensor | None:
        """Start a run of ``n_timesteps`` steps; return the window before its first step (None for True)."""
        width = self.n_before + n_timesteps + 1  # before, the steps, the zero step
        if not self.timeline or next(iter(self.timeline.values())).shape[1] != width:
            self.timeline = {
                k: torch.zeros((self.batch_size, width, *shape), dtype=dtype, device=self.device)
                for k, (dtype, shape) in self.spec.items()
            }
            self.flat = {k: v.flatten(0, 1) for k, v in self.timeline.items()}
        self.width = width
        if self.carried is not None:
            for k, v in self.timeline.items():
                v[:, : self.n_before].copy_(self.carried[k])
            self.before_lengths = self.carried.lengths
        self.lengths = self.before_lengths
        return self.carried

    def window(self, t: int, starts: torch.Tensor) -> TemporalDictTensor:
        """The window before step ``t`` (new tensors), the rows where ``starts`` (bool ``[B]``) is True emptied."""
        self.lengths = torch.where(starts, 0, self.lengths)
        width = self.n if self.n is not None else t
        positions = window_positions(
            t, self.lengths, self.before_lengths, self.n_before, width, self.width - 1
        )
        data = _take(self.flat, self.width, positions)
        return TemporalDictTensor.unchecked(
            DictTensor.unchecked(data, self.batch_size, self.device), self.lengths, width
        )

    def push(self, t: int, step: DictTensor) -> None:
        """Step ``t`` (its keys are the spec's; dtypes and shapes checked by the caller) joins every window."""
        column = self.n_before + t
        for k, v in self.timeline.items():
            v.select(1, column).copy_(step[k])
        self.lengths = self.lengths + 1 if self.n is None else (self.lengths + 1).clamp(max=self.n)

    def end(self, t: int) -> None:
        """The run stopped after ``t`` steps: keep the window before step ``t`` for the next run (n only)."""
        if self.n is not None:
            self.carried = self.window(t, torch.zeros(self.batch_size, dtype=torch.bool, device=self.device))
