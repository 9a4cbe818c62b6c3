"""How a batch's steps are stored while a group writes them: the layouts, and the views a group writes through.

A slot's storage holds every key ``[n_envs, T, ...]``: the observation keys,
the agent's output keys and the ``next/`` keys (what each action led to). The
"full" layout writes every key at every step; the "compact" layout writes the
``next/`` keys only where they differ from the next step's observation keys
(an episode ended or was reset there, or the step is the last), records where
in ``STORED``, and is made full when a batch is copied out (``full_layout``).
Both batchers store through these, the in-process one in ordinary memory, the
multiprocess one in shared memory.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, NamedTuple

import numpy as np
import torch


class Field(NamedTuple):
    """One key of the step buffer: where step t of ``key`` of a part is written."""

    key: str
    dtype: torch.dtype
    shape: torch.Size
    views: list[torch.Tensor]  # views[t] is buffer[:, t], made once


PARTS = ("observation", "output", "next")
Layout = Literal["full", "compact"]
STORED = "next/stored"
"""The key of a compact layout that says, per row and step, whether the ``next/`` keys were written.

An environment of a compact batcher may not have an observation key ``stored``.
"""


def filled_next(steps: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The ``next/`` keys of a compact layout, as the full layout holds them.

    Where ``steps[STORED]`` is False at step t, ``next/k`` at t was not
    written: it equals ``k`` at t + 1 and is read from there. The last step
    is always stored.

    Args:
        steps: a compact layout: every key ``[B, T, ...]``, ``STORED`` bool
            ``[B, T]``, on one device.

    Returns:
        Every ``next/`` key but ``STORED``, as new tensors of the same dtype,
        shape and device. On the CPU the steps written are patched in after
        one shifted copy; elsewhere one ``torch.where``, with no wait for
        the device.
    """
    stored = steps[STORED][:, :-1]
    on_cpu = stored.device.type == "cpu"
    any_stored = on_cpu and bool(stored.any())
    filled = {}
    for key, value in steps.items():
        if not key.startswith("next/") or key == STORED:
            continue
        source = steps[key.removeprefix("next/")]
        full = torch.empty_like(value)
        if on_cpu:
            if source.is_contiguous() and full.is_contiguous():  # one memcpy, rows end to end
                n = full.shape[0] * full.shape[1]
                full.view(n, -1)[:-1] = source.view(n, -1)[1:]  # a row's last step: overwritten below
            else:
                full[:, :-1] = source[:, 1:]
            full[:, -1] = value[:, -1]
            if any_stored:  # the few steps where an episode ended or was reset
                full[:, :-1][stored] = value[:, :-1][stored]
        else:
            mask = stored.reshape(*stored.shape, *[1] * (value.dim() - 2))
            full[:, :-1] = torch.where(mask, value[:, :-1], source[:, 1:])
            full[:, -1] = value[:, -1]
        filled[key] = full
    return filled


def full_layout(steps: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A compact layout made full: its ``next/`` keys filled in (``filled_next``), ``STORED`` dropped.

    Args:
        steps: a compact layout, as for ``filled_next``.

    Returns:
        The keys of ``steps`` but ``STORED``, in their order: the ``next/``
        keys new tensors, the others ``steps``'s own.
    """
    filled = filled_next(steps)
    return {k: filled.get(k, v) for k, v in steps.items() if k != STORED}


class Slot(NamedTuple):
    """Where a group writes a trajectory: the storage and its per-step views."""

    storage: dict[str, torch.Tensor]  # key -> [n_envs, T, ...]
    fields: dict[str, list[Field]]  # "observation", "output", "next" -> their keys' views
    steps: list[list[torch.Tensor]]  # steps[t]: step t of every field, parts in PARTS order
    heads: list[list[torch.Tensor]]  # heads[t]: step t of the observation and output fields only


class Direct(NamedTuple):
    """The views of a slot that an environment's ``step_into`` writes through (see ``Group._direct``)."""

    observations: list[dict[str, torch.Tensor]]  # [t]: the observation keys at step t, for the agent
    arrays: list[dict[str, np.ndarray[Any, Any]]]  # [t]: the same as arrays, where step t - 1 writes
    reached: list[dict[str, np.ndarray[Any, Any]]]  # [t]: the next/ keys at step t (unprefixed)


def direct_views(slot: Slot) -> Direct | None:
    """The views ``step_into`` writes through, or None if they cannot be made.

    None when the ``next/`` keys are not the observation keys with the same
    dtypes and shapes, or a key has no numpy dtype (bfloat16).
    """
    keys = [f.key for f in slot.fields["observation"]]
    twins = {f.key: (f.dtype, f.shape) for f in slot.fields["next"]}
    if twins != {f.key: (f.dtype, f.shape) for f in slot.fields["observation"]}:
        return None
    try:
        observations = [{k: slot.storage[k][:, t] for k in keys} for t in range(len(slot.steps))]
        arrays = [{k: v.numpy() for k, v in step.items()} for step in observations]
        reached = [{k: slot.storage["next/" + k][:, t].numpy() for k in keys} for t in range(len(slot.steps))]
    except TypeError:  # torch refuses .numpy() for dtypes numpy lacks
        return None
    return Direct(observations, arrays, reached)


def slot_views(storage: Mapping[str, torch.Tensor], compact: bool) -> Slot:
    """The per-step views of a slot (``STORED``, which the group writes itself, left out if ``compact``)."""
    fields = fields_of({k: v for k, v in storage.items() if not (compact and k == STORED)})
    n_timesteps = next(iter(storage.values())).shape[1] if storage else 0
    steps = [[f.views[t] for part in PARTS for f in fields[part]] for t in range(n_timesteps)]
    heads = [[f.views[t] for part in PARTS[:2] for f in fields[part]] for t in range(n_timesteps)]
    return Slot(dict(storage), fields, steps, heads)


def fields_of(storage: Mapping[str, torch.Tensor]) -> dict[str, list[Field]]:
    """The per-step views of a slot's storage, by part.

    The keys say their part: ``next/<k>`` is what an action led to, a key
    ``k`` with a ``next/k`` twin is an observation key, any other key is an
    output of the agent (the batcher refuses outputs named as observations).
    """
    nexts = {k.removeprefix("next/") for k in storage if k.startswith("next/")}
    parts: dict[str, list[Field]] = {"observation": [], "output": [], "next": []}
    for key, value in storage.items():
        if key.startswith("next/"):
            part, name = "next", key.removeprefix("next/")
        else:
            part, name = ("observation" if key in nexts else "output"), key
        views = [value[:, t] for t in range(value.shape[1])]
        parts[part].append(Field(name, value.dtype, torch.Size((value.shape[0], *value.shape[2:])), views))
    return parts


class Staging:
    """Copies to a CUDA device through pinned buffers made once, without waiting for the transfers.

    Both batchers copy their batches out through one of these. A buffer is
    refilled only after the transfers out of the previous batch finished: an
    event recorded after them on the stream they were queued on.

    Args:
        device: the CUDA device the copies go to.
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.buffers: dict[Any, torch.Tensor] = {}
        self.copied: Any = None  # the event after the last copies, or None

    def to_device(self, tensors: Mapping[Any, torch.Tensor]) -> dict[Any, torch.Tensor]:
        """The tensors (on the CPU) on ``device``, under the same keys; the transfers may still run."""
        if self.copied is not None:
            self.copied.synchronize()
        out = {}
        for key, value in tensors.items():
            staging = self.buffers.get(key)
            if staging is None or staging.shape != value.shape or staging.dtype != value.dtype:
                staging = self.buffers[key] = torch.empty_like(value).pin_memory()
            staging.copy_(value)
            out[key] = staging.to(self.device, non_blocking=True)
        self.copied = torch.cuda.Event()
        self.copied.record(torch.cuda.current_stream(self.device))
        return out

    def release(self) -> None:
        """Drop the pinned buffers (after the last transfers finished)."""
        if self.copied is not None:
            self.copied.synchronize()
        self.buffers, self.copied = {}, None
