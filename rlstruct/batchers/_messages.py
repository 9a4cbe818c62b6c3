"""What the main process and a ``MultiprocessBatcher`` worker say to each other: one small type per message.

The worker speaks first, then answers each command with one message:

| command | answer |
|---|---|
| (start) | `Ready` once its agent and environments are made and hold the shared weights; `Failed` if it could not start, and it exits |
| `Attach(buffers, slots)` | `Ok`: the `SharedBuffers` to write into and the slots it fills; sent once |
| `Reset(agent_info, env_info, auto_reset)` | `Ok` |
| `Run(slot, restart)` | `Done(slot)` once the trajectories of ``slot`` are written (after new episodes if ``restart``) |
| `Stream()` | nothing: keeps claiming free slots of the `SlotBoard`, filling and publishing them, until `Stop()`, answered `Stopped` |
| `Close()` | the worker exits |

After start, an exception becomes `Failed(traceback)` and the worker waits
for the next command (normally `Close`). The messages cross the connection
pickled by multiprocessing, which shares the tensors it can (shared memory).
"""

from __future__ import annotations

from dataclasses import dataclass

from rlstruct.batchers._shared import SharedBuffers
from rlstruct.dicttensor import DictTensor

# ---------------------------------------------------------------------------- commands


@dataclass(frozen=True)
class Attach:
    """Write trajectories into ``buffers``, the slots ``slots`` (sent once, at the first reset)."""

    buffers: SharedBuffers
    slots: list[int]


@dataclass(frozen=True)
class Reset:
    """Start new episodes with these rows of z and w."""

    agent_info: DictTensor
    env_info: DictTensor
    auto_reset: bool


@dataclass(frozen=True)
class Run:
    """Fill ``slot`` with one trajectory per environment, after new episodes if ``restart``."""

    slot: int
    restart: bool


@dataclass(frozen=True)
class Stream:
    """Fill free slots of the slot board until ``Stop``."""


@dataclass(frozen=True)
class Stop:
    """End a ``Stream``."""


@dataclass(frozen=True)
class Close:
    """Exit."""


Command = Attach | Reset | Run | Stream | Stop | Close

# ---------------------------------------------------------------------------- answers


@dataclass(frozen=True)
class Ready:
    """The worker started: its group is made and holds the shared weights."""


@dataclass(frozen=True)
class Ok:
    """An ``Attach`` or a ``Reset`` is done."""


@dataclass(frozen=True)
class Done:
    """The trajectories of ``slot`` are written."""

    slot: int


@dataclass(frozen=True)
class Stopped:
    """A ``Stream`` ended."""


@dataclass(frozen=True)
class Failed:
    """The worker raised (or could not start): its traceback."""

    traceback: str


Answer = Ready | Ok | Done | Stopped | Failed
