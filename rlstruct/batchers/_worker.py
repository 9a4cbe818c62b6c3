"""The process a ``MultiprocessBatcher`` worker runs, and the protocol it speaks.

One worker owns one ``Group`` (an agent copy and ``n_envs`` environments) and
a ``Connection`` to the main process. It is started with a ``WorkerSpec``;
the user's factories travel in it as bytes that the worker unpickles itself,
so that a factory it cannot import (a class defined in a notebook, or under
``if __name__ == "__main__"``) is reported with its traceback instead of
killing the process before it runs. Their arguments are pickled by
multiprocessing as the process starts, which shares what it can share (an
``Event``, a tensor in shared memory).

The protocol (``rlstruct.batchers._messages``): the worker speaks first
(``Ready``), then answers each command with one message. After start, an
exception becomes ``Failed(traceback)`` and the worker waits for the next
command (normally ``Close``). The worker exits on its own
when the main process dies: the connection reaches end-of-file, or the
parent's process id changes (checked twice a second while idle or waiting
for a slot, and while waiting for half-written weights; a watchdog thread
checks it too, and ends the process even while a step of the user's code
never returns). ``Close`` while streaming ends the worker as ``Stop`` then
``Close`` would (the pool's finalizer sends ``Close`` alone). SIGINT is ignored,
so that Ctrl-C reaches the main process only, which then closes the workers.

Before it loads the weights, a worker reads their sequence counter (see
``SharedWeights``); every wait is bounded by the batcher's ``timeout``.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import torch

from rlstruct.batchers._group import Group, GroupSpec
from rlstruct.batchers._messages import (
    Answer,
    Attach,
    Close,
    Done,
    Failed,
    Ok,
    Ready,
    Reset,
    Run,
    Stop,
    Stopped,
    Stream,
)
from rlstruct.batchers._shared import SharedBuffers, SharedWeights
from rlstruct.batchers._slots import WAIT_S, SlotBoard

IDLE_POLL_S = 0.5  # how often an idle worker checks that its parent is alive


@dataclass(frozen=True)
class WorkerSpec:
    """Everything a worker is started with.

    Attributes:
        index: the worker's index, which names it in errors.
        factories: ``pickle.dumps((agent_factory, env_factory))``.
        group: the rest of what its group is made with (arguments, seeds, layout).
        n_timesteps: T.
        weights: the shared weights its agent loads.
        board: the slot board, in "stream" mode.
        parent: the main process's id.
        timeout: how long it waits for the weights or the board.
        inherited: file descriptors of the main process's pipe ends that a
            forked worker inherited and must close, so that the main
            process's death reaches it as end-of-file.
    """

    index: int
    factories: bytes
    group: GroupSpec
    n_timesteps: int
    weights: SharedWeights
    board: SlotBoard | None
    parent: int
    timeout: float
    inherited: tuple[int, ...] = ()


def worker_main(spec: WorkerSpec, conn: Connection) -> None:
    """Run one worker until ``close``, the death of the main process, or a broken connection."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the main process's to handle
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not a handler a forked worker inherited
    for fd in spec.inherited:
        with contextlib.suppress(OSError):
            os.close(fd)
    torch.set_num_threads(1)
    # "forkserver": the parent is the fork server, which exits with the main process
    parent = spec.parent if os.getppid() == spec.parent else os.getppid()
    threading.Thread(target=_exit_with, args=(parent,), name="rlstruct-watchdog", daemon=True).start()
    try:
        worker = _Worker(spec, conn, parent)
    except Exception:
        with contextlib.suppress(OSError):
            conn.send(Failed(traceback.format_exc()))
        return
    try:
        conn.send(Ready())
        worker.serve()
    except (EOFError, BrokenPipeError, ConnectionResetError):
        return  # the main process is gone
    finally:
        worker.group.close()


def _exit_with(parent: int) -> None:
    """End the process once ``parent`` is gone, even while the worker is held in an environment's or agent's code.

    The command loop notices a dead parent only between calls into user
    code; a step that never returns (a hung simulator) would otherwise
    outlive a main process killed with SIGKILL.
    """
    while os.getppid() == parent:
        time.sleep(IDLE_POLL_S)
    os._exit(1)


class _Closed(Exception):
    """``Close`` arrived while streaming (the pool's finalizer, which does not send ``Stop`` first)."""


class _Worker:
    """One group, the connection, and a handler per command."""

    def __init__(self, spec: WorkerSpec, conn: Connection, parent: int) -> None:
        self.spec, self.conn, self.parent = spec, conn, parent
        agent_factory, env_factory = pickle.loads(spec.factories)
        self.group = Group(agent_factory, env_factory, spec.group)
        self.loaded = -1  # the weights counter this agent's weights come from
        try:
            self.load_weights()
        except BaseException:
            self.group.close()
            raise
        self.buffers: SharedBuffers | None = None
        if spec.board is not None:
            spec.board.watch = self.parent_alive

    def parent_alive(self) -> bool:
        return os.getppid() == self.parent

    def load_weights(self) -> None:
        self.loaded = self.spec.weights.load(
            self.group.agent, self.loaded, self.spec.timeout, self.parent_alive
        )

    def serve(self) -> None:
        """Answer commands until ``Close``."""
        handlers: dict[type, Callable[[Any], Answer]] = {
            Attach: self.attach,
            Reset: self.reset,
            Run: self.run,
            Stream: self.stream,
        }
        while True:
            if not self.conn.poll(IDLE_POLL_S):
                if not self.parent_alive():
                    return
                continue
            command = self.conn.recv()
            if isinstance(command, Close):
                return
            try:
                handler = handlers.get(type(command))
                if handler is None:
                    raise ValueError(f"unknown command {command!r}")
                self.conn.send(handler(command))
            except _Closed:
                return
            except (EOFError, BrokenPipeError, ConnectionResetError):
                raise
            except Exception:
                self.conn.send(Failed(traceback.format_exc()))

    def attach(self, command: Attach) -> Answer:
        self.group.attach({s: command.buffers.slot_steps(s) for s in command.slots})
        self.buffers = command.buffers
        return Ok()

    def reset(self, command: Reset) -> Answer:
        self.group.reset(command.agent_info, command.env_info, command.auto_reset)
        return Ok()

    def run(self, command: Run) -> Answer:
        if command.restart:  # "episodes" mode: every batch starts new episodes
            self.group.reset(self.group.agent_info, self.group.env_info, self.group.auto_reset)
        self.fill(command.slot)
        return Done(command.slot)

    def fill(self, slot: int) -> None:
        """Run one trajectory per environment into ``slot``, with the latest weights."""
        if self.buffers is None:
            raise RuntimeError("a trajectory was asked for before 'attach'")
        self.load_weights()
        info, steps = self.group.run(self.spec.n_timesteps, slot)
        self.buffers.finish(slot, info, steps.lengths, self.loaded // 2)

    def stream(self, command: Stream) -> Answer:
        """Fill free slots until the main process sends ``Stop``; when none is free, wait (back-pressure)."""
        board, index = self.spec.board, self.spec.index
        if board is None:
            raise RuntimeError("'Stream' without a slot board")
        board.beat(index)
        last_check = time.monotonic()
        while True:
            if self.conn.poll():
                received = self.conn.recv()
                if isinstance(received, Close):
                    raise _Closed
                if not isinstance(received, Stop):
                    raise ValueError(f"unexpected command {received!r} while streaming")
                return Stopped()
            slot = board.claim(WAIT_S)  # blocks until the learner frees a slot, or WAIT_S passed
            if slot is not None:
                self.fill(slot)
                board.publish(slot, index)
                continue
            board.beat(index)  # waiting for the learner to free a slot is not a hang
            if time.monotonic() - last_check > IDLE_POLL_S:
                if not self.parent_alive():
                    raise EOFError
                last_check = time.monotonic()
