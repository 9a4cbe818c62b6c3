"""The loop a ``MultiprocessBatcher`` worker runs, and the protocol it speaks.

One worker owns one ``Group`` (an agent copy and ``n_envs`` environments) and
a ``Connection`` to the main process. The main process sends commands; the
worker answers each with one message:

| command | answer |
|---|---|
| `("attach", slots, info, lengths, versions)` | `("ok",)`: shared buffers to write into, sent once |
| `("reset", agent_info, env_info, auto_reset)` | `("ok",)` |
| `("run", slot, restart)` | `("done", slot)` once the trajectories of ``slot`` are written (after new episodes if ``restart``) |
| `("stream",)` | nothing: keeps claiming free slots of the ``SlotBoard``, filling them and publishing them until `("stop",)`, answered `("stopped",)` |
| `("close",)` | the worker exits |

Any exception becomes `("error", traceback_text)` and the worker then waits
for the next command (normally `close`). The worker exits on its own when
the main process dies: the connection reaches end-of-file, or the parent's
process id changes while it waits. SIGINT is ignored, so that Ctrl-C reaches
the main process only, which then closes the workers.

Weights are read from shared tensors guarded by a sequence counter: the main
process makes it odd while writing and even when done, so a worker that reads
an odd value or sees it change while copying simply reads again.
"""

from __future__ import annotations

import os
import signal
import time
import traceback
from collections.abc import Callable, Mapping
from multiprocessing.connection import Connection
from typing import Any

import torch

from rlstruct.agent import Agent
from rlstruct.batchers._group import Group
from rlstruct.batchers._slots import SlotBoard
from rlstruct.env import Environment

IDLE_POLL_S = 0.5  # how often an idle worker checks that its parent is alive
WAIT_S = 0.001  # how long a streaming worker sleeps when every slot is taken


def load_weights(
    agent: Agent, weights: Mapping[str, torch.Tensor], counter: torch.Tensor, loaded: int
) -> int:
    """Copy the shared weights into ``agent`` if they changed since version ``loaded``; return the version read."""
    while True:
        before = int(counter[0])
        if before == loaded:
            return loaded
        if before % 2:  # the main process is writing
            os.sched_yield()
            continue
        agent.load_state_dict(weights)
        if int(counter[0]) == before:
            return before


def _parent_alive(parent: int) -> bool:
    return os.getppid() == parent


def worker_loop(
    index: int,
    conn: Connection,
    agent_factory: Callable[..., Agent],
    agent_args: Mapping[str, Any],
    env_factory: Callable[..., Environment],
    env_args: Mapping[str, Any],
    n_envs: int,
    n_timesteps: int,
    env_seed: int,
    agent_seed: int,
    weights: Mapping[str, torch.Tensor],
    counter: torch.Tensor,
    parent: int,
    board: SlotBoard | None,
) -> None:
    """Run one worker until ``close``, the death of the main process, or a broken connection."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    torch.set_num_threads(1)
    if os.getppid() != parent:  # "forkserver": the fork server, which exits with the main process
        parent = os.getppid()
    group: Group | None = None
    buffers: tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor] | None = None
    loaded = -1
    try:
        while True:
            if not conn.poll(IDLE_POLL_S):
                if not _parent_alive(parent):
                    return
                continue
            command = conn.recv()
            if command[0] == "close":
                return
            try:
                if group is None:
                    group = Group(
                        agent_factory,
                        agent_args,
                        env_factory,
                        env_args,
                        n_envs,
                        env_seed,
                        agent_seed,
                        f"worker {index}",
                    )
                    loaded = load_weights(group.agent, weights, counter, loaded)
                if command[0] == "attach":
                    _, slots, info, lengths, versions = command
                    group.attach(slots)
                    buffers = (info, lengths, versions)
                    conn.send(("ok",))
                elif command[0] == "reset":
                    _, agent_info, env_info, auto_reset = command
                    group.reset(agent_info, env_info, auto_reset)
                    conn.send(("ok",))
                elif buffers is None:
                    raise RuntimeError(f"{command[0]!r} before 'attach'")
                elif command[0] == "run":
                    _, slot, restart = command
                    if restart:  # "episodes" mode: every batch starts new episodes
                        group.reset(group.agent_info, group.env_info, group.auto_reset)
                    loaded = load_weights(group.agent, weights, counter, loaded)
                    _fill(group, slot, n_timesteps, loaded, *buffers)
                    conn.send(("done", slot))
                elif command[0] == "stream":
                    if board is None:
                        raise RuntimeError("'stream' without a slot board")
                    loaded = _stream(
                        group, conn, board, n_timesteps, weights, counter, loaded, parent, buffers
                    )
                    conn.send(("stopped",))
                else:
                    raise ValueError(f"unknown command {command[0]!r}")
            except Exception:
                conn.send(("error", traceback.format_exc()))
    except (EOFError, BrokenPipeError, ConnectionResetError):
        return  # the main process is gone
    finally:
        if group is not None:
            group.close()


def _fill(
    group: Group,
    slot: int,
    n_timesteps: int,
    version: int,
    info: dict[str, torch.Tensor],
    lengths: torch.Tensor,
    versions: torch.Tensor,
) -> None:
    """Run one trajectory per environment into ``slot`` of the shared buffers."""
    slot_info, steps = group.run(n_timesteps, slot)
    rows = slice(slot * group.n_envs, (slot + 1) * group.n_envs)
    for key, value in slot_info.items():
        info[key][rows] = value
    lengths[rows] = steps.lengths
    versions[slot] = version // 2


def _stream(
    group: Group,
    conn: Connection,
    board: SlotBoard,
    n_timesteps: int,
    weights: Mapping[str, torch.Tensor],
    counter: torch.Tensor,
    loaded: int,
    parent: int,
    buffers: tuple[dict[str, torch.Tensor], torch.Tensor, torch.Tensor],
) -> int:
    """Fill free slots until the main process sends ``stop``; when none is free, wait (back-pressure)."""
    last_check = time.monotonic()
    while True:
        if conn.poll():
            command = conn.recv()
            if command[0] != "stop":
                raise ValueError(f"unexpected command {command[0]!r} while streaming")
            return loaded
        slot = board.claim()
        if slot is None:
            time.sleep(WAIT_S)  # every slot is full or being read: let the learner catch up
            if time.monotonic() - last_check > IDLE_POLL_S:
                if not _parent_alive(parent):
                    raise EOFError
                last_check = time.monotonic()
            continue
        loaded = load_weights(group.agent, weights, counter, loaded)
        _fill(group, slot, n_timesteps, loaded, *buffers)
        board.publish(slot)
