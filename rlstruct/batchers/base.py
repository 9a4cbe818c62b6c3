"""Batcher: the contract that every batcher implements, as a ``typing.Protocol``.

``LocalBatcher`` (in process) and ``MultiprocessBatcher`` (worker processes)
both satisfy it, so code that only collects (a learner, a collection worker)
can be typed against ``Batcher`` and take either. What each call does, the
modes and the layout of the returned ``Trajectories`` are in
``docs/batchers.md``, documented once for all batchers.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import TracebackType
from typing import Literal, Protocol, TypeVar, overload, runtime_checkable

import torch

from rlstruct.dicttensor import DictTensor
from rlstruct.trajectories import Trajectories

__all__ = ["Batcher", "cpu_weights"]

_B = TypeVar("_B", bound="Batcher")


@runtime_checkable
class Batcher(Protocol):
    """Runs agent-environment pairs and returns batches of ``Trajectories``.

    The life of a batcher: ``reset(z, w)`` starts episodes everywhere; then,
    in "fixed" and "episodes" modes, every ``execute()`` acquires a batch and
    the following ``get()`` returns it; in "stream" mode there is no
    ``execute()``, and every ``get()`` returns the next finished trajectory
    of one group of ``n_envs`` environments. ``update(weights)`` gives every
    agent copy the learner's weights; ``close()`` releases everything.

    ``isinstance(x, Batcher)`` checks only that the members exist (as for any
    ``runtime_checkable`` protocol), not their signatures; a type checker
    checks those.
    """

    @property
    def n_envs(self) -> int:
        """Environment instances per group (per worker process)."""
        ...

    @property
    def n_timesteps(self) -> int:
        """T, the steps of every trajectory (their maximum in "episodes" mode)."""
        ...

    @property
    def n_processes(self) -> int:
        """The number of groups (worker processes)."""
        ...

    @property
    def mode(self) -> str:
        """The collection mode: "fixed", "episodes" or "stream" (see ``docs/batchers.md``)."""
        ...

    @property
    def device(self) -> torch.device:
        """Where ``get()`` puts the trajectories."""
        ...

    def n_elems(self) -> int:
        """The number of rows a ``get()`` returns.

        ``n_processes * n_envs`` in "fixed" and "episodes" modes, ``n_envs``
        (one group) in "stream" mode.
        """
        ...

    def reset(self, agent_info: DictTensor | None = None, env_info: DictTensor | None = None) -> None:
        """Start new episodes everywhere with these z and w, dropping any batch not taken.

        Args:
            agent_info: z, one row per environment instance
                (``n_processes * n_envs`` rows, on the CPU); None for an agent
                without parameters.
            env_info: w, one row per environment instance (same rows, on the
                CPU); None for unparametrised environments.

        Once a batch has been acquired, later resets must keep the keys,
        dtypes and row shapes of z and w: nothing is cast. A reset or an
        ``execute()`` that raised fixes nothing.

        Raises:
            TypeError, ValueError: for infos that are not DictTensors, have the
                wrong number of rows or change keys, dtypes or row shapes.
            RuntimeError: after ``close``.
        """
        ...

    def execute(self) -> None:
        """Start acquiring the next batch ("fixed" and "episodes" modes).

        Raises:
            RuntimeError: before ``reset``, twice without a ``get`` between,
                in "stream" mode, or after ``close``.
        """
        ...

    @overload
    def get(self, blocking: Literal[True] = True, max_staleness: int | None = None) -> Trajectories: ...

    @overload
    def get(self, blocking: bool, max_staleness: int | None = None) -> Trajectories | None: ...

    def get(self, blocking: bool = True, max_staleness: int | None = None) -> Trajectories | None:
        """The next batch, on ``device``; its tensors belong to the caller.

        Args:
            blocking: wait for the batch (a blocking call returns it or
                raises, never None); with False, return None at once if it is
                not ready.
            max_staleness: "stream" mode only: skip trajectories made by a
                policy more than this many ``update()`` calls old.

        Returns:
            ``Trajectories`` of ``n_elems()`` rows and ``n_timesteps`` steps;
            ``info["policy_version"]`` (int64, one per row) counts the
            ``update()`` calls made before each row's trajectory started.

        Raises:
            TypeError: for a ``blocking`` that is not a bool.
            ValueError: for ``max_staleness`` outside "stream" mode.
            RuntimeError: without a pending ``execute()`` ("stream" mode:
                before ``reset``), or after ``close``.
        """
        ...

    def update(self, weights: Mapping[str, torch.Tensor]) -> None:
        """Give every agent copy these weights (a ``state_dict``) and count one policy version.

        Raises:
            TypeError, ValueError: if the keys, shapes or dtypes differ from
                the agent's ``state_dict``.
            RuntimeError: after ``close``.
        """
        ...

    def policy_version(self) -> int:
        """How many times ``update()`` was called."""
        ...

    def close(self) -> None:
        """Release the environments, agents and any worker processes. Safe to call twice."""
        ...

    def __enter__(self: _B) -> _B: ...

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...


def cpu_weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The weights to hand to ``Batcher.update``: ``model``'s state dict, detached and on the CPU.

    Args:
        model: the learner's module, on any device.

    Returns:
        A new dict from ``model.state_dict()``'s keys to tensors with no
        autograd history, on the CPU, with their dtypes unchanged. Tensors
        already on the CPU are shared with ``model``, not copied.

    Examples:
        >>> import torch
        >>> weights = cpu_weights(torch.nn.Linear(3, 2))
        >>> sorted(weights), weights["weight"].device, weights["weight"].requires_grad
        (['bias', 'weight'], device(type='cpu'), False)
    """
    return {k: v.detach().to("cpu") for k, v in model.state_dict().items()}
