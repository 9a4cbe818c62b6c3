"""The window of previous steps that a history agent sees: pure, vectorised arithmetic.

A window is a ``TemporalDictTensor`` ``[B, L, ...]``: row b holds the
``lengths[b]`` most recent previous steps of its current episode, oldest
first, then zeros. It never holds a step of an earlier episode: a step whose
observation has ``initial_state`` True starts an episode, and its window is
empty.

Batchers advance a window step by step (``restart`` then ``append_step``);
``replay_agent`` computes every window of a stored batch at once
(``history_windows``). Both give the same windows: the tests check it.

Examples:
    >>> import torch
    >>> from rlstruct import DictTensor
    >>> window = empty_window({"x": (torch.int64, ())}, batch_size=1, n=2)
    >>> for x in (1, 2, 3):
    ...     window = append_step(window, DictTensor({"x": torch.tensor([x])}))
    >>> window["x"], window.lengths
    (tensor([[2, 3]]), tensor([2]))
    >>> restart(window, torch.tensor([True]))["x"]
    tensor([[0, 0]])
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from rlstruct.dicttensor import DictTensor
from rlstruct.temporal import TemporalDictTensor

__all__ = ["append_step", "empty_window", "history_windows", "restart"]

Spec = Mapping[str, tuple[torch.dtype, tuple[int, ...]]]


def empty_window(spec: Spec, batch_size: int, n: int) -> TemporalDictTensor:
    """A window of ``batch_size`` rows, room for ``n`` steps, every length 0.

    Args:
        spec: key -> (dtype, shape of one step of one row).
        batch_size: B.
        n: L, the number of steps the window holds.
    """
    data = {k: torch.zeros((batch_size, n, *shape), dtype=dtype) for k, (dtype, shape) in spec.items()}
    return TemporalDictTensor(
        DictTensor(data, batch_size=batch_size), torch.zeros(batch_size, dtype=torch.int64), n_timesteps=n
    )


def restart(window: TemporalDictTensor, starts: torch.Tensor) -> TemporalDictTensor:
    """The window with the rows where ``starts`` (bool ``[B]``) is True emptied (zeros, length 0).

    Returns ``window`` itself when no row starts; never changes it in place.
    """
    if not bool(starts.any()):
        return window
    keep = ~starts
    data = {
        k: torch.where(keep.view(-1, *([1] * (v.dim() - 1))), v, v.new_zeros(())) for k, v in window.items()
    }
    lengths = torch.where(keep, window.lengths, 0)
    return TemporalDictTensor._new(window.to_dicttensor()._derive(data), lengths, window.n_timesteps())


def append_step(window: TemporalDictTensor, step: DictTensor) -> TemporalDictTensor:
    """The window after ``step``: each row's steps then ``step``, its oldest step dropped when full.

    A new window (``window`` is not changed). ``step`` has the window's keys,
    one row per window row.

    Row b of length l < L gets ``step`` at position l; a full row (l == L)
    shifts by one. With the step written at index L of ``cat(window, step)``,
    position i of the new row reads index ``L`` if ``i == new_length - 1``,
    else ``i + dropped`` (which lands on zero padding past the length).
    """
    n = window.n_timesteps()
    lengths = window.lengths
    new_lengths = (lengths + 1).clamp(max=n)
    dropped = (lengths + 1 - new_lengths).unsqueeze(1)  # 1 where the row was full
    i = torch.arange(n).unsqueeze(0)
    source = torch.where(i == new_lengths.unsqueeze(1) - 1, n, i + dropped)  # [B, L], in [0, L]
    rows = torch.arange(window.n_elems()).unsqueeze(1)
    data = {k: torch.cat([v, step[k].unsqueeze(1)], 1)[rows, source] for k, v in window.items()}
    return TemporalDictTensor._new(window.to_dicttensor()._derive(data), new_lengths, n)


def history_windows(
    before: TemporalDictTensor | None, steps: TemporalDictTensor, starts: torch.Tensor, n: int
) -> TemporalDictTensor:
    """The window before every step of ``steps``, all at once: ``B * T`` rows, row ``b * T + t`` for step t of row b.

    Args:
        before: the window before step 0 (``[B, n, ...]``, the keys of
            ``steps``), or None for an empty one.
        steps: ``[B, T, ...]``, the steps (observation and output keys).
        starts: bool ``[B, T]``: step t of row b starts an episode.
        n: L, the number of steps of each window.

    Returns:
        ``[B * T, n, ...]`` with the keys of ``steps``, left-aligned, zeros past the lengths.

    Row b's timeline is ``cat(before[b], steps[b])``: step t sits at index
    ``n + t`` and the j-th step before ``before``'s end at ``lb - j``. Step t
    sees ``L = min(n, t - s)`` steps if its episode started at step s <= t,
    else ``min(n, t + lb)``; position i < L of its window is ``k = L - i``
    steps back: index ``n + t - k`` if ``k <= t``, else ``lb - (k - t)``.
    """
    b, t_max = steps.n_elems(), steps.n_timesteps()
    if before is None:
        spec = {k: (v.dtype, tuple(v.shape[2:])) for k, v in steps.items()}
        before = empty_window(spec, b, n)
    t = torch.arange(t_max).unsqueeze(0)  # [1, T]
    last_start = torch.where(starts, t, -1).cummax(1).values  # [B, T], -1: the episode began before step 0
    lb = before.lengths.unsqueeze(1)
    lengths = torch.where(last_start >= 0, t - last_start, t + lb).clamp(max=n)  # [B, T]
    back = lengths.unsqueeze(2) - torch.arange(n)  # [B, T, n]: k, steps back
    tt, lb3 = t.unsqueeze(2), lb.unsqueeze(2)
    source = torch.where(back <= tt, n + tt - back, lb3 - (back - tt))
    source = torch.where(back > 0, source, n + t_max)  # padding reads the zero step after the timeline
    rows = torch.arange(b).view(b, 1, 1)
    data = {}
    for key, value in steps.items():
        zero = value.new_zeros((b, 1, *value.shape[2:]))
        timeline = torch.cat([before[key], value, zero], 1)  # [B, n + T + 1, ...]
        data[key] = timeline[rows, source].reshape(b * t_max, n, *value.shape[2:])
    return TemporalDictTensor(DictTensor(data, batch_size=b * t_max), lengths.reshape(-1), n_timesteps=n)
