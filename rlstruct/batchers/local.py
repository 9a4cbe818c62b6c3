"""LocalBatcher: the in-process batcher, the reference every other batcher must match.

See ``docs/batchers.md`` for the acquisition modes and the layout of the
returned ``Trajectories``, documented once for all batchers.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any, Literal

import torch

from rlstruct.agent import Agent
from rlstruct.batchers import _checks
from rlstruct.batchers._checks import State
from rlstruct.batchers._group import Group, GroupSpec
from rlstruct.batchers._storage import Layout, Staging, full_layout
from rlstruct.checks import check_device, check_kwargs, is_int
from rlstruct.dicttensor import DictTensor
from rlstruct.env import Environment
from rlstruct.errors import describe
from rlstruct.temporal import TemporalDictTensor
from rlstruct.trajectories import Trajectories

__all__ = ["LocalBatcher"]

Mode = Literal["fixed", "episodes", "stream"]
NAME = "LocalBatcher"


class LocalBatcher:
    """Runs agent-environment pairs in the calling process and returns ``Trajectories``.

    The environments are split into ``n_processes`` groups of ``n_envs``
    instances, each with its own copy of the agent, stepped one group after the
    other: the layout of a multiprocess batcher with the same arguments, which
    is what makes the two give identical trajectories. With the default single
    group, every step is one agent call and one environment step on all rows.
    It implements the ``Batcher`` protocol.

    Args:
        agent_factory: makes an agent: ``agent_factory(**agent_args)``. Must be
            picklable (a module-level function or class) to serve a
            multiprocess batcher too.
        agent_args: keyword arguments for ``agent_factory``.
        env_factory: makes an environment of ``n_envs`` instances:
            ``env_factory(n_envs=n_envs, seed=seed, **env_args)``, for example
            ``GymEnv`` with ``env_args={"env": "CartPole-v1"}``.
        env_args: keyword arguments for ``env_factory``.
        n_envs: environment instances per group.
        n_timesteps: T, the number of steps of every trajectory (its maximum
            in "episodes" mode).
        mode: "fixed" for trajectories of exactly T steps whose agent state and
            environment state carry over from one ``execute()`` to the next
            (environments reset automatically); "episodes" for whole episodes
            that all start at each ``execute()`` and last at most T steps;
            "stream", the in-process twin of ``MultiprocessBatcher``'s: no
            ``execute()``, and every ``get()`` runs the next group (round
            robin) for T more steps, as in "fixed", and returns its ``n_envs``
            rows.
        seed: the base seed: environment instance i (counted across groups)
            gets ``derive_seed(seed, "env") + i``, the agent of group g gets
            ``derive_seed(seed, "agent") + g`` (see ``rlstruct.seeding``), so
            runs with different base seeds share no stream.
        n_processes: the number of groups (the layout of a multiprocess batcher; 1
            by default, where ``MultiprocessBatcher``'s is 2).
        weights: the weights every agent copy loads (``load_state_dict``)
            before it acts, normally the learner's ``model.state_dict()``;
            checked as ``update()`` checks them. None: every copy starts with
            the weights of group 0's agent, the first one ``agent_factory``
            made, and the first ``execute()`` warns if the agent has any
            parameters or buffers and ``update()`` was not called before it.
        device: where ``get()`` puts the trajectories (dtypes kept).
            ``self.device`` is it as tensors report it (``"cuda"`` becomes
            ``cuda:0``, the current CUDA device). The agents act where the
            environment is (its ``device``: the CPU for ``GymEnv``, any
            device for a ``TorchEnv``), and the trajectories are written
            there; with an environment and ``device`` on the same GPU, the
            whole loop runs there and ``get()`` copies nothing across. A
            batch made on the CPU goes to CUDA through pinned buffers that
            are reused from one batch to the next.
        layout: how the trajectories are stored while they are made: "full"
            writes every key at every step; "compact" writes the ``next/``
            keys only at the steps where they differ from the following
            step's keys (an episode ended or was reset there, or the step is
            the last) and fills in the others when the batch is copied out
            of the groups' storage. The batches are the same either way (for
            agents that do not modify their observation in place); compact
            saves the per-step writes of the observations' second copy,
            which pays for large observations (images). See docs/batchers.md.

    Attributes:
        state: where the batcher stands, and what it allows, as for
            ``MultiprocessBatcher``: ``NEEDS_RESET`` (before the first reset,
            or after a reset, ``execute()`` or "stream" ``get()`` that
            raised), ``READY`` (``execute()``), ``RUNNING`` (a batch to
            take with ``get()``), ``STREAMING`` ("stream" mode), ``CLOSED``.
        discarded: always 0: in process, every trajectory is made with the
            current weights, so ``get(max_staleness=...)`` never drops one
            (kept for parity with ``MultiprocessBatcher.discarded``).

    Raises:
        ValueError: for an ``n_envs``, ``n_timesteps`` or ``n_processes``
            that is not a positive int, an unknown ``mode`` or ``layout``,
            ``env_args`` holding ``n_envs`` or ``seed``, a ``device`` that
            cannot hold tensors on this machine ("meta", or "cuda" without
            one), or ``weights`` whose keys, shapes or dtypes differ from the
            agent's ``state_dict``.
        TypeError: if ``agent_factory`` does not make an Agent
            (``rlstruct.errors.AgentError``, a TypeError), ``env_factory``
            does not make an Environment, ``seed`` is not an int,
            ``agent_args`` or ``env_args`` is not a dict of keyword
            arguments, ``device`` is not a str, a ``torch.device`` or an
            int, or ``weights`` is not a mapping of tensors.

    Warns:
        UserWarning: once, when the agents first act (the first
            ``execute()``; in "stream" mode the first ``get()``), if the agent
            has a non-empty ``state_dict`` and neither ``weights`` nor
            ``update()`` gave it the learner's: the batcher would act with the
            agent's own initial weights, and nothing else would tell.

    Examples:
        >>> from rlstruct import GymEnv, LocalBatcher
        >>> from rlstruct.testing import RandomAgent
        >>> with LocalBatcher(RandomAgent, {"n_actions": 2}, GymEnv, {"env": "CartPole-v1"},
        ...                   n_envs=4, n_timesteps=8) as batcher:
        ...     batcher.reset()
        ...     batcher.execute()
        ...     batch = batcher.get()
        >>> batch.trajectories["next/reward"].shape
        torch.Size([4, 8])
    """

    def __init__(
        self,
        agent_factory: Callable[..., Agent],
        agent_args: Mapping[str, Any],
        env_factory: Callable[..., Environment],
        env_args: Mapping[str, Any],
        *,
        n_envs: int,
        n_timesteps: int,
        mode: Mode = "fixed",
        seed: int = 0,
        n_processes: int = 1,
        weights: Mapping[str, torch.Tensor] | None = None,
        device: torch.device | str = "cpu",
        layout: Layout = "full",
    ) -> None:
        self.n_envs = _checks.positive_int(NAME, "n_envs", n_envs)
        _checks.layout(NAME, layout)
        self.layout: Layout = layout
        self.n_timesteps = _checks.positive_int(NAME, "n_timesteps", n_timesteps)
        self.n_processes = _checks.positive_int(NAME, "n_processes", n_processes)
        if mode not in ("fixed", "episodes", "stream"):
            raise ValueError(f"LocalBatcher: mode must be 'fixed', 'episodes' or 'stream', got {mode!r}")
        if not is_int(seed):
            raise TypeError(f"LocalBatcher: seed must be an int, got {describe(seed)}")
        seed = int(seed)
        self.mode: Mode = mode
        self.device = check_device(NAME, device, usable=True)
        check_kwargs(NAME, "agent_args", agent_args)
        _checks.env_args(NAME, env_args)
        _checks.env_factory(NAME, env_factory)
        self._staging = Staging(self.device)  # CUDA: the pinned buffers get() copies through
        self.discarded = 0
        self.state = State.NEEDS_RESET
        self._groups: list[Group] = []
        try:
            for g in range(self.n_processes):
                spec = GroupSpec(g, f"group {g}", agent_args, env_args, self.n_envs, seed, layout)
                self._groups.append(Group(agent_factory, env_factory, spec))
        except BaseException:
            self.close()
            raise
        # every agent copy starts with the given weights, or else with those of the first one made
        self._weights = self._groups[0].agent.state_dict()
        if weights is not None:
            try:
                _checks.weights(NAME, self._weights, weights, call="__init__")
            except BaseException:
                self.close()
                raise
            for group in self._groups:
                group.agent.load_state_dict(weights)
        else:
            for group in self._groups[1:]:
                group.agent.load_state_dict(self._weights)
        # warn at the first execute() when the agents would act with weights nobody gave them
        self._warn_initial_weights = weights is None and len(self._weights) > 0
        self._version = 0
        self._info_spec: _checks.InfoSpec | None = None  # fixed by the first batch acquired
        self._reset_spec: _checks.InfoSpec | None = None  # that of the last reset
        self._result: Trajectories | None = None
        self._next_group = 0  # "stream" mode: the group the next get() runs

    def n_elems(self) -> int:
        """The number of rows a ``get()`` returns: ``n_processes * n_envs``, or ``n_envs`` in "stream" mode."""
        return self.n_envs if self.mode == "stream" else self.n_processes * self.n_envs

    def _check_open(self, call: str) -> None:
        if self.state is State.CLOSED:
            raise RuntimeError(f"LocalBatcher: {call}() after close()")

    def reset(self, agent_info: DictTensor | None = None, env_info: DictTensor | None = None) -> None:
        """Start new episodes everywhere with these z and w, dropping a batch not taken.

        Args:
            agent_info: z, one row per environment instance
                (``n_processes * n_envs`` rows, on the CPU); None for an agent
                without parameters.
            env_info: w, one row per environment instance (the same rows, on
                the CPU); None for unparametrised environments.

        Once a batch has been acquired, later resets must keep the keys,
        dtypes and row shapes of z and w; nothing is cast. Until then, a
        reset, ``execute()`` or "stream" ``get()`` that raised fixes nothing:
        the next reset may give other keys (an agent that raised on a
        misspelt z key, for example).

        Raises:
            TypeError, ValueError: for infos that are not DictTensors, have the
                wrong number of rows, or other keys, dtypes or row shapes
                than the resets before the first batch acquired.
            Exception: whatever the agent or the environment raises;
                ``execute()`` (``get()`` in "stream" mode) then needs a reset
                that succeeded.
            RuntimeError: after ``close``.
        """
        self._check_open("reset")
        rows = self.n_processes * self.n_envs
        agent_info = _checks.info(NAME, "agent_info", agent_info, rows)
        env_info = _checks.info(NAME, "env_info", env_info, rows)
        # fixed by the first batch acquired: a reset or execute() that raised (an agent reading a
        # misspelt key) leaves the next reset free to give other keys
        self._reset_spec = _checks.same_info(NAME, self._info_spec, agent_info, env_info)
        # copies, as the worker processes hold: z and w changed in place after this reset change nothing
        self._agent_info, self._env_info = agent_info.clone(), env_info.clone()
        self.state, self._result, self._next_group = State.NEEDS_RESET, None, 0
        self._reset_groups()  # a reset that raises here leaves nothing to run
        self.state = State.STREAMING if self.mode == "stream" else State.READY

    def _reset_groups(self) -> None:
        for g, group in enumerate(self._groups):
            rows = slice(g * self.n_envs, (g + 1) * self.n_envs)
            group.reset(self._agent_info[rows], self._env_info[rows], auto_reset=self.mode != "episodes")

    def _warn_if_initial_weights(self) -> None:
        if self._warn_initial_weights:
            self._warn_initial_weights = False
            warnings.warn(_checks.initial_weights_warning(NAME), UserWarning, stacklevel=3)

    def _run(self, groups: list[Group], restart: bool = False) -> Trajectories:
        """Run these groups for T steps (after new episodes everywhere if ``restart``).

        Returns their rows, a copy (the groups' storage is reused), on the CPU.
        """
        try:
            if restart:
                self._reset_groups()
            parts = [group.run(self.n_timesteps) for group in groups]
        except BaseException:
            self.state = State.NEEDS_RESET  # the groups stopped mid-step: only a reset() starts them again
            raise
        if self._info_spec is None:
            self._info_spec = self._reset_spec
        info = DictTensor.cat([p[0] for p in parts])
        device = groups[0].device
        info.set(
            "policy_version", torch.full((info.n_elems(),), self._version, dtype=torch.int64, device=device)
        )
        steps = TemporalDictTensor.cat([p[1] for p in parts])
        if self.layout == "compact":
            data = DictTensor.unchecked(full_layout(steps.to_dicttensor().tensors), steps.n_elems(), device)
            steps = TemporalDictTensor.unchecked(data, steps.lengths, self.n_timesteps)
        return Trajectories(info, steps)

    def execute(self) -> None:
        """Acquire the next batch of trajectories (here, synchronously).

        In "fixed" mode the trajectories continue where the previous ones
        stopped; in "episodes" mode every call starts new episodes.

        Warns:
            UserWarning: at the first call, if the agents act with their own
                initial weights (no ``weights=``, no ``update()`` before; see
                the class docstring).

        Raises:
            RuntimeError: in "stream" mode, before ``reset``, after ``close``,
                while the previous batch has not been taken with ``get``, or
                after an ``execute()`` or ``reset()`` that raised (until the
                next reset).
            Exception: whatever the agent or the environment raises.
        """
        self._check_open("execute")
        if self.mode == "stream":
            raise RuntimeError("LocalBatcher: execute() is not used in 'stream' mode; call get()")
        if self.state is State.NEEDS_RESET:
            raise RuntimeError("LocalBatcher: call reset() before execute()")
        if self.state is State.RUNNING:
            raise RuntimeError("LocalBatcher: execute() called twice; take the first batch with get()")
        self._warn_if_initial_weights()
        self._result = self._run(self._groups, restart=self.mode == "episodes" and self._result is not None)
        self.state = State.RUNNING

    def get(self, blocking: bool = True, max_staleness: int | None = None) -> Trajectories:
        """The next batch, on ``device``.

        In "fixed" and "episodes" modes, the trajectories of the last
        ``execute()``. In "stream" mode, runs the next group (round robin
        from group 0 after each reset) for T more steps, continuing its
        episodes, and returns its ``n_envs`` rows. The returned tensors belong
        to the caller: the next run writes elsewhere. In process the batch is
        always ready, so ``blocking`` makes no difference and the result is
        never None (``MultiprocessBatcher.get(blocking=False)`` may give None).

        Args:
            blocking: accepted for the ``Batcher`` protocol; no effect here.
            max_staleness: "stream" mode only, an int >= 0 or None; nothing is
                ever discarded here, since every trajectory is made with the
                current weights.

        Returns:
            ``Trajectories`` of ``n_elems()`` rows and T steps, on ``device``
            with the dtypes the agent and environment produced;
            ``info["policy_version"]`` (int64) counts the ``update()`` calls
            made before.

        Warns:
            UserWarning: in "stream" mode, at the first call, as ``execute()``.

        Raises:
            TypeError: for a ``blocking`` that is not a bool.
            ValueError: for ``max_staleness`` outside "stream" mode, or not an
                int >= 0.
            RuntimeError: if no ``execute()`` is waiting to be taken ("stream"
                mode: before ``reset``, or after a ``reset()`` or ``get()``
                that raised), or after ``close``.
            Exception: in "stream" mode, whatever the agent or the environment raises.
        """
        self._check_open("get")
        _checks.blocking(NAME, blocking)
        if self.mode != "stream":
            if max_staleness is not None:
                raise ValueError("LocalBatcher.get: max_staleness is for mode='stream' only")
            if self.state is not State.RUNNING or self._result is None:
                raise RuntimeError("LocalBatcher: get() without a pending execute(); call execute() first")
            self.state = State.READY
            return self._to_device(self._result)
        _checks.max_staleness(NAME, max_staleness)
        if self.state is not State.STREAMING:
            raise RuntimeError("LocalBatcher: call reset() before get()")
        self._warn_if_initial_weights()
        batch = self._run([self._groups[self._next_group]])
        self._next_group = (self._next_group + 1) % self.n_processes
        return self._to_device(batch)

    def _to_device(self, batch: Trajectories) -> Trajectories:
        """The batch (a copy already) on ``device``: from the CPU to CUDA through the pinned staging buffers."""
        made_on = batch.trajectories.device
        if made_on == self.device:  # made there: no copy
            return batch
        if self.device.type != "cuda" or made_on.type != "cpu":
            return batch.to(self.device)
        info, steps = batch.info, batch.trajectories
        tensors = {("info", k): v for k, v in info.items()}
        tensors |= {("steps", k): v for k, v in steps.to_dicttensor().items()}
        tensors[("lengths", "")] = steps.lengths
        out = self._staging.to_device(tensors)
        data = {k: v for (part, k), v in out.items() if part == "steps"}
        return Trajectories(
            DictTensor.unchecked(
                {k: v for (part, k), v in out.items() if part == "info"}, info.n_elems(), self.device
            ),
            TemporalDictTensor.unchecked(
                DictTensor.unchecked(data, steps.n_elems(), self.device),
                out[("lengths", "")],
                self.n_timesteps,
            ),
        )

    def update(self, weights: Mapping[str, torch.Tensor]) -> None:
        """Load new weights into every agent copy (``load_state_dict``) and count one policy version.

        Raises:
            TypeError, ValueError: if the keys, shapes or dtypes differ from the agent's ``state_dict``.
            RuntimeError: after ``close``.
        """
        self._check_open("update")
        _checks.weights(NAME, self._weights, weights)
        for group in self._groups:
            group.agent.load_state_dict(weights)
        self._version += 1
        self._warn_initial_weights = False

    def policy_version(self) -> int:
        """How many times ``update()`` was called (what ``info["policy_version"]`` of the next batch holds)."""
        return self._version

    def close(self) -> None:
        """Close the environments and agents. Safe to call twice."""
        if self.state is State.CLOSED:
            return
        self.state = State.CLOSED
        self._staging.release()
        errors = []
        for group in self._groups:
            try:
                group.close()
            except Exception as error:  # close the others all the same
                errors.append(error)
        if errors:
            raise errors[0]

    def __enter__(self) -> LocalBatcher:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
