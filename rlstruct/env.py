"""Environment: a vectorised environment of ``n_envs`` instances, parametrised by env_info w.

The contract every environment fulfils, so that batchers can drive any of them
with whole-batch operations only.

**Observations.** ``reset`` and ``step`` return DictTensors with one row per
instance (``n_envs`` rows, always all of them, on the environment's
``device``: the CPU unless it says otherwise, as a ``TorchEnv`` on a GPU
does), holding the
environment's own keys plus these, which batchers rely on:

| key | dtype | meaning |
|---|---|---|
| `reward` | float32 (or another floating dtype the environment chooses, as `GymEnv`'s `reward_dtype`) | the reward received on arriving at this observation (0 at the first observation of an episode) |
| `terminated` | bool | the episode ended in a terminal state: do not bootstrap |
| `truncated` | bool | the episode was cut short (a time limit): bootstrap |
| `done` | bool | `terminated` or `truncated` |
| `initial_state` | bool | this is the first observation of an episode |

**Modes.** ``reset(env_info, auto_reset=...)`` chooses how an instance behaves
when its episode ends:

* episodic (``auto_reset=False``): the instance stops. Later steps ignore its
  action and repeat its final observation with ``reward`` 0 and ``done``
  True, until the next ``reset``. The instances still running after a step
  are exactly the rows whose ``done`` is False.
* auto-reset (``auto_reset=True``): the instance starts a new episode at once,
  so every instance is always running and trajectories of any length can be
  cut from the stream.

**What step returns.** ``step(action)`` returns a pair ``(reached, observation)``:

* ``reached``: for every instance, the observation that its action led to,
  with the ``reward``, ``terminated``, ``truncated`` and ``done`` of that
  transition. When an episode ends, this is its final observation, which is
  what a learner needs to bootstrap a truncated episode.
* ``observation``: what the agent acts on next. It equals ``reached`` except
  for instances that auto-reset on this step, whose rows hold the first
  observation of their new episode (``initial_state`` True, ``reward`` 0,
  ``done`` False). In episodic mode it is always ``reached`` itself.

**Writing in place.** An environment may also implement ``step_into``, which
does what ``step`` does in auto-reset mode but writes both results into
arrays it is handed instead of returning new tensors. Batchers hand it the
rows of their trajectory storage, so that each value is written once, where
it is kept; they use it in auto-reset mode when the environment's class
overrides it (in the class that defines ``step`` or a subclass of it: a
subclass that overrides ``step`` alone is stepped through its ``step``), and
``step`` otherwise.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from rlstruct.dicttensor import DictTensor

__all__ = ["REQUIRED_KEYS", "Environment", "writes_in_place"]

REQUIRED_KEYS = ("reward", "terminated", "truncated", "done", "initial_state")
"""The keys every observation of an ``Environment`` holds (see the module docstring)."""


class Environment(ABC):
    """A vectorised environment of ``n_envs`` instances, parametrised by env_info w.

    Subclasses implement ``reset`` and ``step`` as described in the module
    docstring of ``rlstruct.env``, and may override ``close``.

    Attributes:
        n_envs: the number of instances, which is also the number of rows of
            every env_info, action and observation.
        device: where the observations are, and where the actions must be:
            the CPU unless a subclass sets another. Batchers give the
            environment its w and the agent its z there, and expect the
            agent's output there.
    """

    n_envs: int
    device: torch.device = torch.device("cpu")

    @abstractmethod
    def reset(self, env_info: DictTensor, auto_reset: bool = False) -> DictTensor:
        """Start a new episode in every instance.

        Args:
            env_info: w, one row per instance (``n_envs`` rows; no keys for an
                unparametrised environment).
            auto_reset: whether instances start a new episode by themselves when
                one ends (True) or stop until the next ``reset`` (False).

        Returns:
            The first observation of every instance: ``n_envs`` rows, with
            ``initial_state`` True, ``reward`` 0 and ``done`` False.
        """

    @abstractmethod
    def step(self, action: DictTensor) -> tuple[DictTensor, DictTensor]:
        """Advance every running instance by one step.

        Args:
            action: the agent's output, ``n_envs`` rows holding at least the
                key ``action``; other keys are ignored.

        Returns:
            ``(reached, observation)``, both with ``n_envs`` rows: see the module
            docstring.
        """

    def step_into(
        self,
        action: DictTensor,
        reached: Mapping[str, np.ndarray[Any, Any]],
        observation: Mapping[str, np.ndarray[Any, Any]],
    ) -> None:
        """Advance every instance by one step, in auto-reset mode, writing the result in place.

        Optional: batchers call it only when a subclass overrides it, after
        ``reset(env_info, auto_reset=True)`` and after one ``step`` whose
        result fixed the keys, dtypes and shapes of the arrays.

        Args:
            action: as for ``step``.
            reached: every key that ``step`` returns, as a writable array of
                ``n_envs`` rows with the dtype and shape of that key (it may
                be a strided view of a larger array). Receives what ``step``
                returns first.
            observation: the same keys, in other arrays. Receives what
                ``step`` returns second: a copy of ``reached``, with the rows
                of the instances that auto-reset holding their new episode's
                first observation.

        Raises:
            NotImplementedError: unless a subclass implements it.
        """
        raise NotImplementedError(f"{type(self).__name__} does not implement step_into; call step")

    def close(self) -> None:  # noqa: B027  (optional hook, nothing to release by default)
        """Release the instances' resources. Safe to call twice."""


def writes_in_place(cls: type[Environment]) -> bool:
    """Whether batchers step ``cls`` through ``step_into``: it implements it, where ``step`` is or below.

    A subclass that overrides ``step`` alone is stepped through its ``step``
    (see the module's docstring, "Writing in place").

    Examples:
        >>> from rlstruct import GymEnv
        >>> from rlstruct.testing import CounterEnv
        >>> writes_in_place(GymEnv), writes_in_place(CounterEnv)
        (True, False)
    """
    owner = {name: next(c for c in cls.__mro__ if name in vars(c)) for name in ("step", "step_into")}
    return owner["step_into"] is not Environment and issubclass(owner["step_into"], owner["step"])
