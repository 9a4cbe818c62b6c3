"""``HindsightReplayBuffer``: goal-conditioned transitions relabelled with goals achieved later."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from rlstruct.checks import check_int, check_keys
from rlstruct.dicttensor import DictTensor
from rlstruct.errors import describe
from rlstruct.replay.uniform import ReplayBuffer, ReplaySample, read_state, save_path, told_as
from rlstruct.specs import Specs, TensorSpec
from rlstruct.temporal import TemporalDictTensor

__all__ = ["HindsightReplayBuffer", "RewardFn"]

RewardFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
"""``reward_fn(achieved_goal, desired_goal) -> reward``, batched over rows."""

_STEPS_LEFT = "hindsight/steps_left"
"""The internal key of a hindsight buffer: how many steps of its episode follow a transition."""


class HindsightReplayBuffer:
    """Hindsight experience replay (Andrychowicz et al., 2017) for goal-conditioned environments.

    Transitions are stored whole episodes at a time (``add_trajectories``), as
    gymnasium-robotics' goal environments give them through ``GymEnv``: the
    keys ``observation``, ``achieved_goal`` and ``desired_goal``, and their
    ``next/`` versions. ``sample`` draws transitions uniformly and, with
    probability ``k / (k + 1)``, replaces the desired goal of a transition by a
    goal achieved later in its episode, then recomputes its reward with
    ``reward_fn``:

    - ``strategy="future"``: the achieved goal after a step drawn uniformly
      among this transition's step and the following steps of the episode
      (``next/achieved_goal`` of that step), so the goal reached by the
      transition itself can be drawn;
    - ``strategy="final"``: the goal achieved at the end of the episode.

    So each real goal comes with ``k`` relabelled ones on average. Only the
    reward is recomputed; ``next/terminated`` is kept, which is right for the
    usual goal environments, whose episodes end by truncation only.

    Episodes are delimited by ``done_key`` (``next/done``) and by the end of
    each row: a row of a batcher in ``mode="episodes"`` is one episode, a row in
    ``mode="fixed"`` may hold several (and a last, unfinished one, whose
    future goals are taken from the steps of this row only). The ring buffer
    overwrites the oldest steps first, so the later steps of a stored
    transition are always still there.

    Args:
        capacity: the number of transitions kept; a positive int.
        reward_fn: ``reward_fn(achieved_goal, desired_goal) -> reward``, batched:
            goals ``[n, *goal_shape]``, reward ``[n, ...]`` with the dtype,
            shape and device of the stored ``reward_key``. With ``shared``, it
            must be picklable (a module-level function).
        strategy: ``"future"`` or ``"final"``.
        k: relabelled goals per real goal, a non-negative int (0: no relabelling).
        achieved_goal_key: the goal the transition achieved; relabelled goals
            are taken from it, and it is ``reward_fn``'s first argument.
        desired_goal_keys: the keys holding the desired goal (one at least),
            all relabelled with the same goal; each must have the dtype and per-row shape of
            ``achieved_goal_key``.
        reward_key: the reward of the transition, recomputed.
        done_key: a bool key that is True where an episode ended, or None if
            every row of the trajectories is one episode.
        device: as for ``ReplayBuffer``.
        generator: as for ``ReplayBuffer``.
        shared: as for ``ReplayBuffer``.
        specs: as for ``ReplayBuffer``: those of the transitions as added.
        timeout: as for ``ReplayBuffer``.

    Examples:
        >>> import torch
        >>> from rlstruct import HindsightReplayBuffer, TemporalDictTensor
        >>> def reached(achieved, desired):
        ...     return (achieved == desired).all(1).float()
        >>> buffer = HindsightReplayBuffer(100, reached, k=4, generator=torch.Generator().manual_seed(0))
        >>> at = torch.arange(5.0).view(1, 5, 1)  # one episode of 5 steps on a line, goal 9
        >>> buffer.add_trajectories(
        ...     TemporalDictTensor(
        ...         {
        ...             "achieved_goal": at,
        ...             "desired_goal": torch.full((1, 5, 1), 9.0),
        ...             "next/achieved_goal": at + 1,
        ...             "next/desired_goal": torch.full((1, 5, 1), 9.0),
        ...             "next/reward": torch.zeros(1, 5),
        ...             "next/done": torch.arange(5).view(1, 5) == 4,
        ...         }
        ...     )
        ... )
        >>> batch = buffer.sample(1000).rows
        >>> relabelled = batch["desired_goal"][:, 0] != 9
        >>> bool((batch["desired_goal"][relabelled] >= batch["next/achieved_goal"][relabelled]).all())
        True
        >>> 0.75 < float(relabelled.float().mean()) < 0.85
        True
    """

    def __init__(
        self,
        capacity: int,
        reward_fn: RewardFn,
        *,
        strategy: str = "future",
        k: int = 4,
        achieved_goal_key: str = "next/achieved_goal",
        desired_goal_keys: Sequence[str] = ("desired_goal", "next/desired_goal"),
        reward_key: str = "next/reward",
        done_key: str | None = "next/done",
        device: torch.device | str = "cpu",
        generator: torch.Generator | None = None,
        shared: bool = False,
        specs: Specs | None = None,
        timeout: float = 30.0,
    ) -> None:
        name = "HindsightReplayBuffer"
        if not callable(reward_fn):
            raise TypeError(f"{name}: reward_fn must be callable, got {describe(reward_fn)}")
        if strategy not in ("future", "final"):
            raise ValueError(f"{name}: strategy must be 'future' or 'final', got {strategy!r}")
        k = check_int(name, "k", k, 0)  # a Python int: a NumPy one would not load with weights_only
        if isinstance(desired_goal_keys, str) or not all(isinstance(key, str) for key in desired_goal_keys):
            raise TypeError(f"{name}: desired_goal_keys must be a list of str, got {desired_goal_keys!r}")
        if not desired_goal_keys:
            raise ValueError(f"{name}: desired_goal_keys must name at least one key, got none")
        self.reward_fn = reward_fn
        self.strategy = strategy
        self.k = k
        self.achieved_goal_key = achieved_goal_key
        self.desired_goal_keys = tuple(desired_goal_keys)
        self.reward_key = reward_key
        self.done_key = done_key
        if specs is not None:
            if not isinstance(specs, Specs):
                raise TypeError(f"{name}: specs must be a Specs, got {describe(specs)}")
            self._check_specs(specs, name)
            specs = Specs({**specs, _STEPS_LEFT: TensorSpec((), torch.int64)})
        try:
            self._buffer = ReplayBuffer(
                capacity, device=device, generator=generator, shared=shared, specs=specs, timeout=timeout
            )
        except (TypeError, ValueError) as error:  # the storage's checks, told as this buffer's
            raise type(error)(str(error).replace("ReplayBuffer:", f"{name}:", 1)) from error

    def __getstate__(self) -> dict[str, Any]:
        if self._buffer.shared and self._buffer.specs() is None:
            raise RuntimeError(
                "HindsightReplayBuffer: a shared buffer needs its storage before it is handed to another "
                "process; pass specs= or add a first batch"
            )
        return self.__dict__.copy()

    @property
    def capacity(self) -> int:
        """The number of transitions the buffer keeps."""
        return self._buffer.capacity

    @property
    def device(self) -> torch.device:
        """Where the storage lives and samples are returned."""
        return self._buffer.device

    def __len__(self) -> int:
        """The number of transitions held."""
        return len(self._buffer)

    def add_trajectories(self, trajectories: TemporalDictTensor, keys: Sequence[str] | None = None) -> None:
        """Append the valid steps of trajectories of whole episodes, row after row.

        Args:
            trajectories: a TemporalDictTensor ``[B, T, ...]`` holding the goal,
                reward and (unless ``done_key`` is None) done keys.
            keys: the keys to store (they must include those); all if None.

        Raises:
            TypeError: if ``trajectories`` is not a TemporalDictTensor, the done
                key is not bool, or a goal's dtype differs from the achieved goal's.
            ValueError: if a needed key is missing or a goal's shape differs; and
                as ``ReplayBuffer.add``.
        """
        op = "HindsightReplayBuffer.add_trajectories"
        if not isinstance(trajectories, TemporalDictTensor):
            raise TypeError(f"{op}: trajectories must be a TemporalDictTensor, got {describe(trajectories)}")
        if _STEPS_LEFT in trajectories:
            raise ValueError(f"{op}: the key {_STEPS_LEFT!r} is reserved for the buffer's bookkeeping")
        steps = trajectories.n_timesteps()
        time = torch.arange(steps, device=trajectories.device)
        ends = time.unsqueeze(0) == (trajectories.lengths - 1).unsqueeze(1)  # [B, T]
        if self.done_key is not None:
            if self.done_key not in trajectories:
                raise ValueError(
                    f"{op}: done key {self.done_key!r} is not in the trajectories, whose keys are {sorted(trajectories.keys())}"
                )
            done = trajectories[self.done_key]
            if done.dtype != torch.bool or done.shape != ends.shape:
                raise TypeError(
                    f"{op}: done key {self.done_key!r} must be a bool tensor of shape {tuple(ends.shape)}, got {describe(done)}"
                )
            ends |= done
        # the first end at or after each step, by a reversed running minimum over the end steps
        end_steps = torch.where(ends, time, steps).flip(1).cummin(1).values.flip(1)
        selected = (
            list(trajectories.keys())
            if keys is None
            else check_keys(op, "keys", keys, trajectories.keys(), "the trajectories")
        )
        transitions = trajectories.get(selected)
        transitions.set(_STEPS_LEFT, end_steps - time)
        if len(self._buffer) == 0 and self._buffer.specs() is None:
            self._check_specs(transitions.specs(), op)
        with told_as("ReplayBuffer.add", op):
            self._buffer.add(transitions.masked_flatten())

    def sample(self, batch_size: int) -> ReplaySample:
        """Draw ``batch_size`` transitions uniformly and relabel about ``k / (k + 1)`` of them.

        Returns:
            ``ReplaySample(rows, indices, weights)``: the rows (a DictTensor
            ``[batch_size, ...]`` of new tensors on ``device`` with the stored
            keys; in relabelled rows, the desired goal keys hold the new goal
            and ``reward_key`` holds ``reward_fn(achieved, new goal)``), their
            slots (int64 ``[batch_size]``) and weights of one (float32
            ``[batch_size]``), both on ``device``.

        Raises:
            ValueError: if ``batch_size`` is below 1, or ``reward_fn`` returns
                the wrong shape or device.
            TypeError: if ``batch_size`` is not an int, or ``reward_fn``
                returns no tensor or the wrong dtype.
            RuntimeError: if the buffer is empty.
        """
        op = "HindsightReplayBuffer.sample"
        check_int(op, "batch_size", batch_size)
        buffer, generator, device = self._buffer, self._buffer.generator, self._buffer.device
        with buffer.locked_storage(op) as (storage, size):
            indices = torch.randint(size, (batch_size,), generator=generator, device=device)
            batch = storage.index(indices)
            steps_left = batch[_STEPS_LEFT]
            if self.strategy == "future":
                uniform = torch.rand(batch_size, generator=generator, device=device, dtype=torch.float64)
                ahead = (uniform * (steps_left + 1)).long().clamp_(max=steps_left)
            else:
                ahead = steps_left
            relabel = torch.rand(batch_size, generator=generator, device=device) < self.k / (self.k + 1)
            goal_slots = (indices + ahead) % buffer.capacity
            goals = storage[self.achieved_goal_key].index_select(0, goal_slots)
        data = {key: value for key, value in batch.items() if key != _STEPS_LEFT}
        column = relabel.view((-1,) + (1,) * (goals.dim() - 1))
        for key in self.desired_goal_keys:
            data[key] = torch.where(column, goals, data[key])
        reward = data[self.reward_key]
        new_reward = self.reward_fn(data[self.achieved_goal_key], data[self.desired_goal_keys[0]])
        if not isinstance(new_reward, torch.Tensor) or new_reward.dtype != reward.dtype:
            raise TypeError(
                f"{op}: reward_fn must return a tensor of dtype {reward.dtype} (the stored {self.reward_key!r}), got {describe(new_reward)}"
            )
        if new_reward.shape != reward.shape or new_reward.device != reward.device:
            raise ValueError(
                f"{op}: reward_fn must return shape {tuple(reward.shape)} on {reward.device}, got {describe(new_reward)}"
            )
        data[self.reward_key] = torch.where(
            relabel.view((-1,) + (1,) * (reward.dim() - 1)), new_reward, reward
        )
        return ReplaySample(
            DictTensor(data), indices, torch.ones(batch_size, dtype=torch.float32, device=device)
        )

    def state_dict(self) -> dict[str, Any]:
        """Contents, position and generator state (see ``ReplayBuffer.state_dict``), plus ``k`` and ``strategy``."""
        return {**self._buffer.state_dict(), "k": self.k, "strategy": self.strategy}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a state from ``state_dict``, in place; ``k`` and ``strategy`` must match."""
        op = "HindsightReplayBuffer.load_state_dict"
        if not isinstance(state, Mapping):
            raise TypeError(f"{op}: state must be a dict from state_dict(), got {describe(state)}")
        for name, mine in (("k", self.k), ("strategy", self.strategy)):
            if state.get(name) != mine:
                raise ValueError(
                    f"{op}: the state has {name}={state.get(name)!r}, this buffer {name}={mine!r}"
                )
        with told_as("ReplayBuffer.load_state_dict", op):
            self._buffer.load_state_dict(state)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write ``state_dict()`` to ``path`` with ``torch.save``.

        Raises:
            TypeError, ValueError, FileNotFoundError, IsADirectoryError: as ``ReplayBuffer.save``.
        """
        path = save_path(f"{type(self).__name__}.save", path)
        torch.save(self.state_dict(), path)

    def load(self, path: str | os.PathLike[str]) -> None:
        """Restore, in place, a buffer written by ``save`` (loaded with ``weights_only=True``).

        Raises:
            TypeError, ValueError, FileNotFoundError, IsADirectoryError: as
                ``ReplayBuffer.load``, and as ``load_state_dict``.
        """
        self.load_state_dict(read_state(f"{type(self).__name__}.load", path))

    def _check_specs(self, specs: Specs, op: str) -> None:
        """The goal and reward keys exist, and every desired goal looks like the achieved goal."""
        needed = [self.achieved_goal_key, *self.desired_goal_keys, self.reward_key]
        missing = [key for key in needed if key not in specs]
        if missing:
            raise ValueError(f"{op}: the transitions lack the keys {missing}; they have {sorted(specs)}")
        achieved = specs[self.achieved_goal_key]
        for key in self.desired_goal_keys:
            if specs[key].dtype != achieved.dtype:
                raise TypeError(
                    f"{op}: key {key!r} has dtype {specs[key].dtype}, expected {achieved.dtype} (the dtype of {self.achieved_goal_key!r})"
                )
            if specs[key].shape != achieved.shape:
                raise ValueError(
                    f"{op}: key {key!r} has rows of shape {specs[key].shape}, expected {achieved.shape} (the shape of {self.achieved_goal_key!r})"
                )
