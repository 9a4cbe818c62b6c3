"""Agents and environments shared by the tests, importable by the MultiprocessBatcher's worker processes.

Workers started with "spawn" (or "forkserver") re-import every class they
are given by module name. A class defined in a test module would
be looked up in a module the worker cannot import; these live here instead.
pytest puts ``tests/`` on ``sys.path`` (no ``__init__.py``, "prepend" import
mode), and multiprocessing hands the parent's ``sys.path`` to every spawned
child, so ``mp_helpers`` is importable in the workers too.

None of them changes what ``CounterEnv`` and ``CountingAgent`` output: a
``LocalBatcher`` on the plain classes gives the reference trajectories.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from typing import Any

import torch

from rlstruct import Agent, DictTensor, GymEnv, ReplayBuffer, TemporalDictTensor
from rlstruct.seeding import derive_seed
from rlstruct.testing import CounterEnv, CountingAgent

ENV_ROOT = derive_seed(0, "env")
"""The seed of environment instance 0 under base seed 0; instance i gets ``ENV_ROOT + i``."""
AGENT_ROOT = derive_seed(0, "agent")
"""The seed of the agent of group 0 under base seed 0; group g's gets ``AGENT_ROOT + g``."""


class ControlledEnv(CounterEnv):
    """A CounterEnv that the test can hold up or break from the outside, through events.

    Worker w of a batcher with base seed 0 makes its group with seed
    ``ENV_ROOT + w * n_envs``: ``gate_seed`` and ``fail_seed`` are the offset
    ``w * n_envs`` from that root, and pick a worker.

    Args:
        n_envs, seed, length: as for CounterEnv.
        gate: a multiprocessing Event; from the second step taken by this
            instance group on, every step waits until it is set (forever if it
            never is). The first step is free, so that the batcher's probe step
            in the main process never waits.
        gate_seed: if given, only the group with this seed waits for ``gate``.
        fail: a multiprocessing Event; once it is set, every step raises a
            RuntimeError.
        fail_seed: if given, only the group with this seed raises.
    """

    def __init__(
        self,
        n_envs: int = 1,
        seed: int = 0,
        length: int = 5,
        gate: Any = None,
        gate_seed: int | None = None,
        fail: Any = None,
        fail_seed: int | None = None,
    ) -> None:
        super().__init__(n_envs, seed, length)
        self.first_seed = seed - ENV_ROOT
        self.gate = gate if gate_seed in (None, self.first_seed) else None
        self.fail = fail if fail_seed in (None, self.first_seed) else None
        self.n_steps = 0

    def step(self, action: DictTensor) -> tuple[DictTensor, DictTensor]:
        if self.gate is not None and self.n_steps >= 1:
            self.gate.wait()
        if self.fail is not None and self.fail.is_set():
            raise RuntimeError(f"the simulator of seed {self.first_seed} crashed on request")
        self.n_steps += 1
        return super().step(action)


class FailingEnv(CounterEnv):
    """A CounterEnv whose group with first seed ``ENV_ROOT + fail_seed`` raises at ``reset``."""

    def __init__(self, n_envs: int = 1, seed: int = 0, fail_seed: int = -1) -> None:
        super().__init__(n_envs, seed)
        self.fail = seed - ENV_ROOT == fail_seed

    def reset(self, env_info: DictTensor, auto_reset: bool = False) -> DictTensor:
        if self.fail:
            raise OSError(f"cannot open the level file of seed {int(self.seeds[0]) - ENV_ROOT}")
        return super().reset(env_info, auto_reset)


class FailingAgent(CountingAgent):
    """A CountingAgent that raises at its ``fail_at``-th call (counted from 0) when seeded ``AGENT_ROOT + fail_seed``."""

    def __init__(self, fail_seed: int = -1, fail_at: int = 0) -> None:
        super().__init__()
        self.fail_seed = fail_seed
        self.fail_at = fail_at
        self.seeded: int | None = None
        self.calls = 0

    def seed(self, seed: int) -> None:
        super().seed(seed)
        self.seeded = seed - AGENT_ROOT

    def forward(
        self,
        state: DictTensor,
        observation: DictTensor,
        agent_info: DictTensor,
        history: TemporalDictTensor | None = None,
    ) -> tuple[DictTensor, DictTensor]:
        if self.seeded == self.fail_seed and self.calls == self.fail_at:
            raise ValueError(f"the agent seeded {self.seeded} divided by zero at call {self.calls}")
        self.calls += 1
        return super().forward(state, observation, agent_info, history)


class EpsilonAgent(Agent):
    """Acts 0 and outputs its z ``epsilon`` (``agent_info["epsilon"]``, any dtype and row shape) as ``epsilon``.

    It reads the key at every step, so a z without it (a misspelt key) raises
    the KeyError of ``DictTensor`` at the first step, as a real agent would.
    """

    def forward(
        self,
        state: DictTensor,
        observation: DictTensor,
        agent_info: DictTensor,
        history: TemporalDictTensor | None = None,
    ) -> tuple[DictTensor, DictTensor]:
        epsilon = agent_info["epsilon"]
        action = torch.zeros(observation.n_elems(), dtype=torch.int64)
        return DictTensor({"action": action, "epsilon": epsilon.clone()}), state


class LinearAgent(Agent):
    """Samples CartPole actions from the softmax of a Linear(4, 2) layer, with ``self.generator``.

    Its initial weights are fixed numbers, not drawn from torch's global
    generator, so every construction, in any process, gives the same agent.
    Output keys: ``action`` (int64) and ``logits`` (float32, ``[n, 2]``).
    """

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 2)
        with torch.no_grad():
            self.linear.weight.copy_(torch.linspace(-1.0, 1.0, 8).reshape(2, 4))
            self.linear.bias.copy_(torch.tensor([0.1, -0.1]))

    def forward(
        self,
        state: DictTensor,
        observation: DictTensor,
        agent_info: DictTensor,
        history: TemporalDictTensor | None = None,
    ) -> tuple[DictTensor, DictTensor]:
        logits = self.linear(observation["observation"])
        action = torch.multinomial(logits.softmax(1), 1, generator=self.generator).squeeze(1)
        return DictTensor({"action": action, "logits": logits}), state


class HistorySumAgent(Agent):
    """Wants the last 2 steps and outputs the sum of their ``t`` (0 for an empty history)."""

    def require_history(self) -> bool | int:
        return 2

    def forward(
        self,
        state: DictTensor,
        observation: DictTensor,
        agent_info: DictTensor,
        history: TemporalDictTensor | None = None,
    ) -> tuple[DictTensor, DictTensor]:
        assert history is not None
        n = observation.n_elems()
        seen = history["t"].sum(1) if history.n_timesteps() else torch.zeros(n, dtype=torch.int64)
        return DictTensor({"action": torch.zeros(n, dtype=torch.int64), "seen": seen}), state


class WindowAgent(Agent):
    """Outputs what its history window holds, so that tests can check every window it was given.

    Action: ``10 + t`` (an output that differs from the observation ``t``). Outputs:
    ``window_length`` (the window's lengths), ``window_t_sum`` and ``window_action_sum`` (sums of
    the window's ``t`` and ``action``), for an int n also ``window_action`` (``[B, n]``), and ``noise``
    (one draw of ``self.generator`` per row, so that a shifted generator shows). ``keys_seen``
    records the window's key set at every call made in this process.

    Args:
        history: what ``require_history()`` returns.
    """

    def __init__(self, history: bool | int = 2) -> None:
        super().__init__()
        self.history = history
        self.keys_seen: list[set[str]] = []

    def require_history(self) -> bool | int:
        return self.history

    def forward(
        self,
        state: DictTensor,
        observation: DictTensor,
        agent_info: DictTensor,
        history: TemporalDictTensor | None = None,
    ) -> tuple[DictTensor, DictTensor]:
        assert history is not None
        self.keys_seen.append(set(history.keys()))
        n = observation.n_elems()
        output = {
            "action": observation["t"] + 10,
            "noise": torch.rand(n, generator=self.generator).to(observation["t"].device),
            "window_length": history.lengths.clone(),
            "window_t_sum": history["t"].sum(1),
            "window_action_sum": history["action"].sum(1)
            if "action" in history
            else torch.zeros_like(history.lengths),
        }
        if not isinstance(self.history, bool):
            output["window_action"] = history["action"].clone() if "action" in history else history["t"] * 0
        return DictTensor(output), state


def shm_entries() -> set[str]:
    return set(os.listdir("/dev/shm"))


def left_in_shm(before: set[str]) -> set[str]:
    """The entries of /dev/shm made since ``before`` and not in use by another live process.

    Those are what this test left: on a shared machine, other jobs' semaphores come and go
    meanwhile, but they are mapped by the processes that use them. Mappings are matched by
    inode, since glibc maps a semaphore under a temporary name before it links it to its own.
    """
    inodes = {}
    for name in shm_entries() - before:
        with contextlib.suppress(OSError):
            inodes[os.stat(f"/dev/shm/{name}").st_ino] = name
    for pid in filter(str.isdigit, os.listdir("/proc")):
        if inodes and int(pid) != os.getpid():
            with contextlib.suppress(OSError), open(f"/proc/{pid}/maps") as maps:
                for line in maps:
                    fields = line.split()  # address, perms, offset, device, inode, path
                    if len(fields) >= 6 and fields[5].startswith("/dev/shm/"):
                        inodes.pop(int(fields[4]), None)
    return set(inodes.values())


def assert_nothing_left_in_shm(before: set[str], timeout: float = 5.0) -> None:
    """Nothing new stays in /dev/shm: entries that another job's process leaves for its resource
    tracker to unlink may linger a moment, so look again for a few seconds before failing."""
    deadline = time.monotonic() + timeout
    while (left := left_in_shm(before)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert left == set()


def replay_rows(ids: torch.Tensor) -> DictTensor:
    """Rows whose every key is derived from ``ids``, so that a torn row shows: ``twice`` is 2 id, ``obs`` 3 copies."""
    return DictTensor({"id": ids, "twice": 2 * ids, "obs": ids.double().unsqueeze(1).repeat(1, 3)})


def add_replay_rows(buffer: ReplayBuffer, first_id: int, n_batches: int, rows: int) -> None:
    """Add ``n_batches`` batches of ``rows`` consecutive ids from ``first_id`` (the body of a spawned writer)."""
    for batch in range(n_batches):
        start = first_id + batch * rows
        buffer.add(replay_rows(torch.arange(start, start + rows)))


class SlowGymEnv(GymEnv):
    """A GymEnv whose steps take ``delay`` seconds more, and that can hang for good.

    It stands for a slow or stuck simulator in the tests of remote workers.

    Args:
        n_envs, seed, env: as for GymEnv.
        delay: extra seconds each step takes.
        hang_after: from this step of the instance group on, every step blocks
            forever (None: never).
        fail_after: from this step on, every step raises a RuntimeError (None: never).
    """

    def __init__(
        self,
        n_envs: int = 1,
        seed: int = 0,
        env: str = "CartPole-v1",
        delay: float = 0.0,
        hang_after: int | None = None,
        fail_after: int | None = None,
    ) -> None:
        super().__init__(env, n_envs=n_envs, seed=seed)
        self.delay, self.hang_after, self.fail_after, self.n_steps = delay, hang_after, fail_after, 0

    def step(self, action: DictTensor) -> tuple[DictTensor, DictTensor]:
        self.n_steps += 1
        if self.hang_after is not None and self.n_steps > self.hang_after:
            threading.Event().wait()  # stuck for good: only a timeout gets the learner out
        if self.fail_after is not None and self.n_steps > self.fail_after:
            raise RuntimeError(f"the simulator crashed on request at step {self.n_steps}")
        if self.delay:
            time.sleep(self.delay)  # a slow simulator, not a synchronisation
        return super().step(action)


class StepOnlyGymEnv(GymEnv):
    """A GymEnv that overrides ``step`` alone, so that batchers step it through ``step``, not ``step_into``.

    It gives the trajectories of the path that copies what ``step`` returns,
    for comparison with the path where GymEnv writes in place.
    """

    def step(self, action: DictTensor) -> tuple[DictTensor, DictTensor]:
        return super().step(action)


class DeviceAgent(Agent):
    """A small MLP policy acting on ``device``, with nothing that waits for the device.

    It samples by Gumbel-max (no ``torch.multinomial``), draws from a
    generator on its device, and may carry a state ``h`` (``recurrent``) or
    read a window of the last ``history`` steps (their number of entries
    goes to the output ``seen``).
    """

    def __init__(
        self, device: str = "cpu", n_inputs: int = 4, recurrent: bool = False, history: int | None = None
    ) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.device = torch.device(device)
        self.generator = torch.Generator(self.device)
        self.net = torch.nn.Sequential(torch.nn.Linear(n_inputs, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2))
        self.net.to(self.device)
        self.recurrent, self.history = recurrent, history

    def require_history(self) -> bool | int:
        return self.history or False

    def initial_state(self, agent_info: DictTensor, n: int) -> DictTensor:
        if not self.recurrent:
            return DictTensor(batch_size=n)
        return DictTensor({"h": torch.zeros(n, 2, device=self.device)})

    def forward(
        self,
        state: DictTensor,
        observation: DictTensor,
        agent_info: DictTensor,
        history: TemporalDictTensor | None = None,
    ) -> tuple[DictTensor, DictTensor]:
        logits = self.net(observation["observation"])
        if self.recurrent:
            state = DictTensor({"h": torch.tanh(state["h"] + logits)})
            logits = logits + state["h"]
        uniform = torch.rand(logits.shape, generator=self.generator, device=self.device)
        action = (logits - torch.log(-torch.log(uniform.clamp(min=1e-12)))).argmax(-1)
        output = DictTensor({"action": action})
        if history is not None:
            output.set("seen", history.lengths.clone())
        return output, state


class ElsewhereCounterEnv(CounterEnv):
    """A CounterEnv that says its rows are on the "meta" device (and returns them on the CPU)."""

    device = torch.device("meta")
