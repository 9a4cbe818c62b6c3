"""One agent copy and one Environment of ``n_envs`` instances: the unit of acquisition.

The in-process batcher runs one or several groups in turn; a multiprocess
batcher runs one group per worker. Both call the same ``Group.run``, which is
why they produce the same trajectories for the same seeds and layout.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from rlstruct.agent import Agent, act, history_length, reset_finished_states
from rlstruct.batchers import _checks
from rlstruct.batchers._storage import PARTS, STORED, Direct, Field, Layout, Slot, direct_views, slot_views
from rlstruct.dicttensor import DictTensor
from rlstruct.env import REQUIRED_KEYS, Environment, writes_in_place
from rlstruct.errors import AgentError, describe
from rlstruct.history import Spec, StepHistory, empty_window
from rlstruct.seeding import derive_seed
from rlstruct.specs import Specs, TensorSpec
from rlstruct.temporal import TemporalDictTensor


@dataclass(frozen=True)
class GroupSpec:
    """What one group of a batcher is made with, besides its factories.

    The seeds derive from the batcher's: instance i of group g is seeded
    ``derive_seed(seed, "env") + g * n_envs + i`` and the agent of group g
    ``derive_seed(seed, "agent") + g``, so that a batcher's trajectories
    depend only on its seed and layout, not on which batcher runs the groups.

    Attributes:
        index: the group's index g in its batcher (its rows of z and w are
            ``g * n_envs`` onwards).
        name: how errors refer to the group ("group 1", "worker 1", "probe").
        agent_args: the keyword arguments of the agent factory.
        env_args: the keyword arguments of the environment factory, besides
            ``n_envs`` and ``seed``, which the group sets.
        n_envs: the number of environment instances.
        seed: the batcher's seed.
        layout: "full" writes every key at every step; "compact" writes the
            ``next/`` keys only at the steps where they differ from the next
            step's keys (an instance was reset or ended there, or the step is
            the last), and records which in ``STORED``.
    """

    index: int
    name: str
    agent_args: Mapping[str, Any]
    env_args: Mapping[str, Any]
    n_envs: int
    seed: int
    layout: Layout = "full"

    @property
    def env_seed(self) -> int:
        """The seed of the group's first environment instance."""
        return derive_seed(self.seed, "env") + self.index * self.n_envs

    @property
    def agent_seed(self) -> int:
        """The seed of the group's agent's generator."""
        return derive_seed(self.seed, "agent") + self.index


class Group:
    """An agent and an environment, stepped together over whole batches.

    Args:
        agent_factory: ``agent_factory(**spec.agent_args)`` makes the agent.
        env_factory: ``env_factory(n_envs=spec.n_envs, seed=spec.env_seed,
            **spec.env_args)`` makes the environment.
        spec: the group's arguments and seeds.
    """

    def __init__(
        self,
        agent_factory: Callable[..., Agent],
        env_factory: Callable[..., Environment],
        spec: GroupSpec,
    ) -> None:
        name, n_envs, env_args, layout = spec.name, spec.n_envs, spec.env_args, spec.layout
        agent_args, env_seed, agent_seed = spec.agent_args, spec.env_seed, spec.agent_seed
        self.name = name
        self.compact = layout == "compact"
        self.n_envs = n_envs
        _checks.env_args(name, env_args)
        self.agent = agent_factory(**agent_args)
        if not isinstance(self.agent, Agent):
            raise AgentError(f"agent_factory must return an rlstruct.Agent, got {describe(self.agent)}")
        self.env = env_factory(n_envs=n_envs, seed=env_seed, **env_args)
        if not isinstance(self.env, Environment):
            self.agent.close()
            raise TypeError(f"env_factory must return an rlstruct.Environment, got {describe(self.env)}")
        if self.env.n_envs != n_envs:
            self.close()
            raise ValueError(f"env_factory was asked for {n_envs} instances but made {self.env.n_envs}")
        device = self.env.device
        if not isinstance(device, torch.device):
            self.close()
            raise TypeError(
                f"{name}: the environment's device must be a torch.device, got {describe(device)}"
            )
        if device.type == "cuda" and device.index is None:  # as tensors report it: cuda:N
            device = torch.device("cuda", torch.cuda.current_device())
        self.device = device
        """Where the environment's rows are: the agent acts there, and the group's own storage is there."""
        # the agent copy acts where the environment is: its parameters, buffers and generator go there
        self.agent.to(self.device)
        if self.agent.generator.device != self.device:
            with contextlib.suppress(RuntimeError):  # a device without generators ("meta") keeps the agent's
                self.agent.generator = torch.Generator(self.device)
        self.agent.seed(agent_seed)
        self.history = history_length(self.agent)
        # key -> (dtype, step shape) of the history window: the observation and output keys of a step,
        # read from the attached storage or learnt by a probe call at the first reset (see _probe)
        self.window_spec: Spec | None = None
        self.windows: StepHistory | None = None  # made at reset, for agents with history only
        # slot -> its storage and per-step views: attached, or for slot None made at the first step
        self.slots: dict[int | None, Slot] = {}
        self.n_timesteps = 0
        # the environment's step_into (see _steps_into): whether it has one, the views of each slot,
        # whether a run through step has checked the keys since the last reset, and the last step's buffers
        self.steps_into = writes_in_place(type(self.env)) and self.device.type == "cpu"
        self.directs: dict[int | None, Direct | None] = {}
        self.verified = False
        self.carry: DictTensor | None = None
        self.carry_arrays: dict[str, np.ndarray[Any, Any]] = {}
        self.scratch_arrays: dict[str, np.ndarray[Any, Any]] = {}

    # ------------------------------------------------------------------ checks

    def _check_observation(self, observation: DictTensor, when: str) -> None:
        if not isinstance(observation, DictTensor):
            raise TypeError(
                f"{self.name}: the environment returned {describe(observation)} {when}, expected a DictTensor"
            )
        if observation.n_elems() != self.n_envs:
            raise ValueError(
                f"{self.name}: the environment returned {observation.n_elems()} rows {when}, expected {self.n_envs}"
            )
        missing = [k for k in REQUIRED_KEYS if k not in observation]
        if missing:
            raise ValueError(f"{self.name}: the observation {when} lacks the keys {missing}")
        for key in ("terminated", "truncated", "done", "initial_state"):
            if observation[key].dtype != torch.bool:
                raise TypeError(
                    f"{self.name}: observation key {key!r} {when} has dtype {observation[key].dtype}, expected torch.bool"
                )

    def _check_output(
        self, output: DictTensor, state: DictTensor, observation: DictTensor, before: DictTensor
    ) -> None:
        """The agent's output and new ``state`` at a run's first step (their types at every step).

        ``before`` is the state the agent was given: the new one must have its
        keys, dtypes and per-row shapes, which are those of ``initial_state``
        (so a state that changed later in the previous run is caught here).
        """
        if not isinstance(output, DictTensor) or not isinstance(state, DictTensor):
            raise AgentError(
                f"{self.name}: the agent must return (DictTensor, DictTensor), got "
                f"({describe(output)}, {describe(state)})"
            )
        expected = self.state_layout
        for dt in (state, before):
            layout = _row_layout(dt)
            if layout != expected:
                key = _first_difference(layout, expected)
                raise AgentError(
                    f"{self.name}: the agent's {'new ' if dt is state else ''}state key {key!r} is "
                    f"{layout.get(key, 'missing')} (dtype, per-row shape), but {expected.get(key, 'no such key')} "
                    "in its initial_state; a new state keeps the keys, dtypes and shapes of initial_state"
                )
        if "action" not in output:
            raise AgentError(
                f"{self.name}: the agent's output must hold the key 'action', got {list(output.keys())}"
            )
        for what, dt in (("output", output), ("new state", state)):
            if dt.n_elems() != self.n_envs:
                raise AgentError(
                    f"{self.name}: the agent's {what} has {dt.n_elems()} rows, expected {self.n_envs}"
                )
        elsewhere = {
            f"{what} {k!r}": str(v.device)
            for what, dt in (("output", output), ("state", state))
            for k, v in dt.items()
            if v.device != self.device
        }
        if elsewhere:
            raise AgentError(
                f"{self.name}: the agent's output and state must be on the environment's device "
                f"{self.device}, got {elsewhere}; make the agent act where the environment is"
            )
        clash = [k for k in output if k in observation]
        if clash:
            raise AgentError(
                f"{self.name}: the agent's output keys {clash} are also observation keys; rename them "
                "(the trajectories store both side by side)"
            )
        reserved = {"next/" + k for k in observation} | ({STORED} if self.compact else set())
        clash = [k for k in output if k in reserved]
        if clash:
            raise AgentError(
                f"{self.name}: the agent's output keys {clash} are keys the trajectories keep for what "
                f"the action led to (next/<observation key>{', next/stored' if self.compact else ''}); rename them"
            )

    def _mismatch(self, part: str, fields: list[Field], dt: DictTensor, t: int) -> ValueError:
        expected = {f.key: (f.dtype, tuple(f.shape)) for f in fields}
        got = {k: (v.dtype, tuple(v.shape)) for k, v in dt.items()}
        key = _first_difference(expected, got)
        return ValueError(
            f"{self.name}: at step {t} the {part} key {key!r} is {got.get(key, 'missing')} (dtype, shape), "
            f"but the buffer, made from the first step, holds {expected.get(key, 'no such key')}; "
            "nothing is cast into the buffer"
        )

    def _write(
        self, slot: Slot, parts: tuple[DictTensor, DictTensor, DictTensor], t: int, with_next: bool
    ) -> None:
        """Copy step ``t`` of every part (of the first two unless ``with_next``) into the slot.

        Every key's dtype and shape is checked first; all copies then go in
        one ``torch._foreach_copy_`` call: one call from Python per step
        rather than one per key.
        """
        n_parts = 3 if with_next else 2
        sources = []
        for part, dt in zip(PARTS[:n_parts], parts[:n_parts], strict=True):
            sources += self._sources(slot, part, dt, t)
        torch._foreach_copy_(slot.steps[t] if with_next else slot.heads[t], sources)

    def _sources(self, slot: Slot, part: str, dt: DictTensor, t: int) -> list[torch.Tensor]:
        """The tensors of one part of step ``t``, in the slot's field order, each checked against its field."""
        data, fields = dt.tensors, slot.fields[part]
        if len(data) != len(fields):
            raise self._mismatch(part, fields, dt, t)
        sources = []
        for field in fields:
            value = data.get(field.key)
            if value is None or value.dtype is not field.dtype or value.shape != field.shape:
                raise self._mismatch(part, fields, dt, t)
            sources.append(value)
        return sources

    def attach(self, slots: Mapping[int, Mapping[str, torch.Tensor]]) -> None:
        """Write into external storage: ``slots[s]`` maps every trajectory key to ``[n_envs, T, ...]``.

        The per-step views of each slot are made here, once.
        """
        self.slots = {s: slot_views(storage, self.compact) for s, storage in slots.items()}
        self.directs = {}
        if self.history is not None and slots:
            storage = next(iter(slots.values()))
            self.window_spec = {
                k: (v.dtype, tuple(v.shape[2:])) for k, v in storage.items() if not k.startswith("next/")
            }

    def _allocate(self, observation: DictTensor, output: DictTensor, reached: DictTensor) -> Slot:
        """Storage of this group's own (slot None, in-process batchers), shaped after the first step."""
        specs = Specs(
            {
                prefix + k: TensorSpec(tuple(v.shape[1:]), v.dtype)
                for prefix, dt in (("", observation), ("", output), ("next/", reached))
                for k, v in dt.items()
            }
        )
        storage = dict(
            TemporalDictTensor.zeros(specs, self.n_envs, self.n_timesteps, device=self.device).items()
        )
        if self.compact:
            storage[STORED] = torch.zeros(
                (self.n_envs, self.n_timesteps), dtype=torch.bool, device=self.device
            )
        self.slots[None] = slot_views(storage, self.compact)
        self.directs.pop(None, None)
        return self.slots[None]

    def _check_compact(self, observation: DictTensor, reached: DictTensor) -> None:
        """A compact layout reads ``next/k`` from ``k``: they must match, and ``STORED`` must be free."""
        if STORED.removeprefix("next/") in reached:
            raise ValueError(
                f"{self.name}: the observation key {STORED.removeprefix('next/')!r} is reserved by "
                "layout='compact' (it names its own key next/stored); rename it or use layout='full'"
            )
        for key, value in reached.items():
            twin = observation.tensors.get(key)
            if twin is None or twin.dtype != value.dtype or twin.shape != value.shape:
                raise ValueError(
                    f"{self.name}: layout='compact' reads next/{key} from the next step's {key}, but the "
                    f"environment returned {key} as {None if twin is None else (twin.dtype, tuple(twin.shape))} "
                    f"and next/{key} as {(value.dtype, tuple(value.shape))} (dtype, shape); use layout='full'"
                )

    def _check_keys(self, storage: Mapping[str, torch.Tensor], parts: tuple[DictTensor, ...]) -> None:
        observation, output, reached = parts
        produced = set(observation.keys()) | set(output.keys()) | {"next/" + k for k in reached}
        if self.compact:
            self._check_compact(observation, reached)
            produced.add(STORED)
        if produced != storage.keys():
            raise ValueError(
                f"{self.name}: the first step has the keys {sorted(produced)}, but the buffer was made for "
                f"{sorted(storage)} (by the probe step of the first reset)"
            )

    # ------------------------------------------------------------------ acquisition

    def reset(self, agent_info: DictTensor, env_info: DictTensor, auto_reset: bool) -> None:
        """Start new episodes everywhere, with z = ``agent_info`` and w = ``env_info`` (both copied to ``device``)."""
        self.agent_info, self.env_info = self._copy(agent_info), self._copy(env_info)
        self.auto_reset = auto_reset
        # the environment and the agent get the group's copies: a w or z they keep never changes
        self.observation = self.env.reset(self.env_info, auto_reset)
        self._check_observation(self.observation, "at reset")
        self.verified, self.carry = False, None  # the next run goes through step and checks every key
        self.state = self.agent.initial_state(self.agent_info, self.n_envs)
        if not isinstance(self.state, DictTensor) or self.state.n_elems() != self.n_envs:
            raise AgentError(
                f"{self.name}: agent.initial_state must return a DictTensor of {self.n_envs} rows, "
                f"got {describe(self.state) if not isinstance(self.state, DictTensor) else self.state}"
            )
        self.state_layout = _row_layout(self.state)
        if self.history is not None:
            if self.window_spec is None:
                self.window_spec = self._probe()
            self.windows = StepHistory(
                self.window_spec, self.n_envs, self.history if self.history > 0 else None, self.device
            )

    def _copy(self, info: DictTensor) -> DictTensor:
        """A copy of z or w on the group's device."""
        return info.to(self.device) if info.device not in (None, self.device) else info.clone()

    def _probe(self) -> Spec:
        """Learn the agent's output keys from one call whose effects are undone, before any real step.

        The call gets the first observation, a copy of the state and an empty
        window of the observation keys only (the output keys are what it is
        for); its output and new state are thrown away and the agent's
        generator is restored, so the trajectories are those without it.
        """
        observed = {k: (v.dtype, tuple(v.shape[1:])) for k, v in self.observation.items()}
        window = empty_window(observed, self.n_envs, max(self.history or 0, 0), self.device)
        generator = self.agent.generator.get_state()
        with torch.no_grad():
            output, state = act(
                self.name, self.agent, self.state.clone(), self.observation, self.agent_info, window
            )
        self.agent.generator.set_state(generator)
        self._check_output(output, state, self.observation, self.state)
        return observed | {k: (v.dtype, tuple(v.shape[1:])) for k, v in output.items()}

    def run(self, n_timesteps: int, slot: int | None = None) -> tuple[DictTensor, TemporalDictTensor]:
        """Run ``n_timesteps`` steps from the current observation and state, into a slot's storage.

        In auto-reset mode all steps are real and the state carries over to
        the next call. In episodic mode the loop stops once every instance is
        done, each row's length is the step at which it finished (+1), and
        every step past a row's length is zero, whatever the layout.

        Args:
            n_timesteps: T.
            slot: the attached storage to write into; None for storage of this
                group's own, allocated at the first step.

        Returns:
            ``(info, steps)``: the per-row info (``agent_info/``, ``env_info/``
            and the starting ``agent_state/``) and the steps ``[n_envs, T, ...]``
            (observation and agent output keys, and ``next/`` keys). The steps
            are the slot's storage itself, overwritten by the next call.
        """
        n = self.n_envs
        if n_timesteps != self.n_timesteps:
            self.slots.pop(None, None)
            self.directs.pop(None, None)
            self.n_timesteps = n_timesteps
        info = (
            self.agent_info.prepend_key("agent_info/")
            | self.env_info.prepend_key("env_info/")
            | self.state.clone().prepend_key("agent_state/")  # a copy: agents may update state in place
        )
        lengths = torch.full((n,), n_timesteps, dtype=torch.int64, device=self.device)
        windows = self.windows  # None (no work per step) for agents without history
        if windows is not None:
            before = windows.begin(n_timesteps)
            if before is not None:  # history=n: the window carries over; the trajectory records it
                info = info | self._recorded_window(before)
        direct = self._direct(slot)
        with torch.no_grad():
            if direct is None:
                t, stored = self._steps(n_timesteps, slot, lengths)
            else:
                t, stored = self._steps_into(n_timesteps, self.slots[slot], direct)
        if windows is not None:
            windows.end(t + 1)  # the steps taken: fewer than n_timesteps when episodes all ended early
        storage = self.slots[slot].storage
        device = storage[next(iter(storage))].device  # the group's own, or the batcher's shared memory
        if self.compact:
            storage[STORED].copy_(torch.tensor(stored).expand(n, n_timesteps))
        if not self.auto_reset:
            padding = torch.arange(n_timesteps, device=self.device).unsqueeze(0) >= lengths.unsqueeze(1)
            if bool(padding.any()):
                for value in storage.values():
                    value[padding.to(value.device)] = (
                        0  # zeros past each row's end, not its final step repeated
                    )
        # unchecked: the group made the lengths, and checking them on a GPU would wait for it
        return info, TemporalDictTensor.unchecked(
            DictTensor.unchecked(storage, n, device), lengths.to(device), n_timesteps
        )

    def _recorded_window(self, before: TemporalDictTensor) -> DictTensor:
        """``history/<k>`` and ``history_length`` of a run: the window before its step 0, as the agent sees it.

        A row whose step 0 starts an episode (it auto-reset at the end of the
        previous run) has an empty window there: length 0, zeros.
        """
        window, lengths = before.to_dicttensor(), before.lengths
        starts = self.observation["initial_state"]
        if bool(starts.any()):
            window = DictTensor.unchecked(
                {
                    k: torch.where(starts.view(-1, *[1] * (v.dim() - 1)), torch.zeros((), dtype=v.dtype), v)
                    for k, v in window.items()
                },
                self.n_envs,
                self.device,
            )
            lengths = torch.where(starts, 0, lengths)
        recorded = window.prepend_key("history/")
        recorded.set("history_length", lengths)
        return recorded

    def _steps(self, n_timesteps: int, slot: int | None, lengths: torch.Tensor) -> tuple[int, list[bool]]:
        """The steps of ``run`` through ``Environment.step``: every value checked and copied into the slot.

        Returns:
            The last step taken, and (compact) at which steps the ``next/`` keys were written.
        """
        agent, n, windows, window = self.agent, self.n_envs, self.windows, None
        running = torch.ones(n, dtype=torch.bool, device=self.device)
        last, stored = n_timesteps - 1, [False] * n_timesteps
        for t in range(n_timesteps):
            observation = self.observation
            state = reset_finished_states(agent, self.state, observation, self.agent_info)
            if windows is not None:
                window = windows.window(t, observation["initial_state"])
            output, self.state = act(self.name, agent, state, observation, self.agent_info, window)
            if t == 0 or not (isinstance(output, DictTensor) and isinstance(self.state, DictTensor)):
                self._check_output(output, self.state, observation, state)
            reached, following = self.env.step(output)
            self.observation = following
            if t == 0:
                self._check_observation(reached, "after a step")
                self._check_observation(self.observation, "after a step")
                if slot in self.slots:
                    target = self.slots[slot]
                elif slot is None:
                    target = self._allocate(observation, output, reached)
                else:
                    raise ValueError(f"{self.name}: no storage attached for slot {slot}")
                self._check_keys(target.storage, (observation, output, reached))
                if windows is not None:
                    self._check_window(target.fields)
            ended = False  # episodic mode: whether a running instance ended at this step
            if not self.auto_reset:
                finished = running & reached["done"]
                ended = bool(finished.any())
                lengths[finished] = t + 1
                running &= ~finished
            # compact: step t's next/ keys are step t + 1's keys, unless an instance was reset
            # (another observation follows), one ended (padding follows) or t is the last step
            with_next = not self.compact or t == last or following is not reached or ended
            self._write(target, (observation, output, reached), t, with_next)
            stored[t] = with_next
            if windows is not None:
                windows.push(t, observation | output)
            if not self.auto_reset and not bool(running.any()):
                break
        self.verified = self.auto_reset  # every key of a whole run checked: step_into may write from now on
        return t, stored

    def _direct(self, slot: int | None) -> Direct | None:
        """The views for ``_steps_into``, or None where ``run`` must go through ``Environment.step``.

        ``step_into`` is used in auto-reset mode, when the environment
        implements it, once a run through ``step`` has checked every key
        against this storage, if every observation key has a numpy dtype.
        """
        if not (self.steps_into and self.auto_reset and self.verified and slot in self.slots):
            return None
        if slot not in self.directs:
            self.directs[slot] = direct_views(self.slots[slot])
        return self.directs[slot]

    def _steps_into(self, n_timesteps: int, target: Slot, direct: Direct) -> tuple[int, list[bool]]:
        """The steps of ``run`` through ``Environment.step_into``: the environment writes into the slot.

        Step t's observation is read from the slot, where step t - 1 wrote it
        (step 0's is copied in from the last step of the previous run). The
        outputs are checked and copied; what the environment returns is
        written by it: ``reached`` into ``next/`` at t, the observation that
        follows into the observation at t + 1 (the last step's into a buffer
        of the group's own, for the next run). In a compact layout
        ``reached`` goes straight to the observation at t + 1 and the
        observation that follows to a buffer of the group's; only at the
        steps where an instance was reset are the two moved into ``next/``
        at t and the observation at t + 1.

        Returns:
            As ``_steps``.
        """
        agent, n, windows, window, compact = self.agent, self.n_envs, self.windows, None, self.compact
        last, stored = n_timesteps - 1, [False] * n_timesteps
        if self.carry is None:
            self.carry = self.observation.clone()
            self.carry_arrays = {k: v.numpy() for k, v in self.carry.items()}
            self.scratch_arrays = {k: np.empty_like(v) for k, v in self.carry_arrays.items()}
        self._write_part(target, "observation", self.observation, 0)
        cpu, arrays, scratch = torch.device("cpu"), direct.arrays, self.scratch_arrays
        for t in range(n_timesteps):
            observation = DictTensor.unchecked(dict(direct.observations[t]), n, cpu)
            state = reset_finished_states(agent, self.state, observation, self.agent_info)
            if windows is not None:
                window = windows.window(t, observation["initial_state"])
            output, self.state = act(self.name, agent, state, observation, self.agent_info, window)
            if t == 0 or not (isinstance(output, DictTensor) and isinstance(self.state, DictTensor)):
                self._check_output(output, self.state, observation, state)
            self._write_part(target, "output", output, t)
            if t == last:
                self.env.step_into(output, direct.reached[t], self.carry_arrays)
                stored[t] = True
            elif not compact:
                self.env.step_into(output, direct.reached[t], arrays[t + 1])
            else:  # reached goes where step t + 1 is read; next/ at t is written only if they differ
                following = arrays[t + 1]
                self.env.step_into(output, following, scratch)
                stored[t] = bool(following["done"].any())  # an instance was reset: scratch holds its start
                if stored[t]:
                    for key, value in scratch.items():
                        np.copyto(direct.reached[t][key], following[key])
                        np.copyto(following[key], value)
            if windows is not None:
                windows.push(t, observation | output)
        self.observation = self.carry
        return last, stored

    def _write_part(self, slot: Slot, part: str, dt: DictTensor, t: int) -> None:
        """Copy step ``t`` of one part into the slot, every key's dtype and shape checked first."""
        sources = self._sources(slot, part, dt, t)
        torch._foreach_copy_([f.views[t] for f in slot.fields[part]], sources)

    def _check_window(self, fields: dict[str, list[Field]]) -> None:
        """The first step must have the keys, dtypes and shapes the window was made for (by the probe)."""
        stored = {
            f.key: (f.dtype, tuple(f.shape[1:])) for part in ("observation", "output") for f in fields[part]
        }
        if stored != self.window_spec:
            raise AgentError(
                f"{self.name}: the agent's first step has the keys, dtypes and shapes {stored}, but its "
                f"probe call at the first reset gave {self.window_spec}; the history window needs them fixed"
            )

    def close(self) -> None:
        """Close the environment and the agent (the agent even if the environment raises)."""
        try:
            self.env.close()
        finally:
            self.agent.close()


def _row_layout(dt: DictTensor) -> dict[str, tuple[torch.dtype, tuple[int, ...]]]:
    """key -> (dtype, per-row shape) of ``dt``: what a state or a buffer must keep."""
    return {k: (v.dtype, tuple(v.shape[1:])) for k, v in dt.items()}


def _first_difference(a: Mapping[str, object], b: Mapping[str, object]) -> str:
    """The first key, in sorted order, whose value differs between ``a`` and ``b`` (or that one lacks)."""
    return sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))[0]
