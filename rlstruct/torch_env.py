"""TorchEnv: an ``Environment`` whose instances are rows of tensors, stepped together on one device.

A ``GymEnv`` steps one Python object per instance; a ``TorchEnv`` holds the
state of all its instances as tensors and steps them with a few whole-batch
operations, on the CPU or on a CUDA device. Nothing in ``step`` waits for the
device: a batcher can run an agent and a ``TorchEnv`` on a GPU with no host
round trip per step.

A subclass writes the task for all rows at once:

* ``parameters``: the names of env_info w it reads, with their defaults (a
  gravity, a pole length). ``reset`` copies w to the device, and
  ``parameter(name)`` gives its value per row, as a ``[n_envs]`` tensor, or
  the default when w has no such key: each row can be another task.
* ``action_spec`` (optional): a ``TensorSpec`` of one row's action, which
  ``step`` checks (dtype and per-row shape): an action ``[n_envs, 1]``
  where ``[n_envs]`` is meant would otherwise broadcast in ``advance``.
* ``start(rows)``: draw a new episode's state for the rows where the bool
  mask ``rows`` is True (from ``self.generator``), leaving the others as
  they are. It is called with every row at ``reset`` and with the rows that
  ended at each step of auto-reset mode; it should draw for all rows and
  select with ``torch.where``, so that the random stream does not depend on
  which rows ended and nothing waits for the device.
* ``observe()``: the observation keys of every row, as a dict of tensors
  ``[n_envs, ...]`` (new tensors, not views of the state).
* ``advance(action)``: step every row and return ``(reward, terminated)``,
  two ``[n_envs]`` tensors on the environment's device (the task's
  ``reward_dtype``, float32 unless it declares another; bool).

The base adds what the ``Environment`` contract asks for: the time limit
(``max_episode_steps``, ``truncated``), ``reward``, ``terminated``,
``truncated``, ``done`` and ``initial_state``, the episodic and auto-reset
modes, and the final observation of an episode kept apart from the first of
the next. The rewards keep ``reward_dtype``: nothing is cast, and
``step`` names ``advance`` when its rewards or flags are of another dtype,
shape or device.

Examples:
    >>> import torch
    >>> from rlstruct import DictTensor
    >>> from rlstruct.torch_envs import TorchCartPole
    >>> env = TorchCartPole(n_envs=3, seed=0)
    >>> first = env.reset(DictTensor({"length": torch.tensor([0.5, 0.5, 1.0])}), auto_reset=True)
    >>> first["observation"].shape, first["observation"].dtype, first["observation"].device
    (torch.Size([3, 4]), torch.float32, device(type='cpu'))
    >>> reached, observation = env.step(DictTensor({"action": torch.tensor([0, 1, 1])}))
    >>> reached["reward"], reached["done"]
    (tensor([1., 1., 1.]), tensor([False, False, False]))
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping
from typing import ClassVar

import torch

from rlstruct.checks import check_device, check_int, is_int
from rlstruct.dicttensor import DictTensor
from rlstruct.env import REQUIRED_KEYS, Environment
from rlstruct.errors import describe
from rlstruct.seeding import SEEDS
from rlstruct.specs import TensorSpec

__all__ = ["TorchEnv"]


class TorchEnv(Environment):
    """Base of environments written in torch: ``n_envs`` instances as rows of tensors on ``device``.

    Subclasses implement ``start``, ``observe`` and ``advance`` (see the
    module docstring) and may declare ``parameters``.

    Args:
        n_envs: the number of instances (rows).
        seed: seeds ``self.generator``, from which every random draw comes.
        device: where the state, the observations and w live, and where
            actions must be ("cuda" is stored as tensors report it, cuda:0).
        max_episode_steps: episodes are truncated after this many steps;
            None for no limit.

    Attributes:
        device: as given, resolved.
        generator: a ``torch.Generator`` on ``device``.
        elapsed: int64 ``[n_envs]``, the steps of each row's episode so far.

    Raises:
        ValueError: for a non-positive ``n_envs`` or ``max_episode_steps``,
            a ``seed`` torch cannot take, or a device that cannot hold
            tensors here.
        TypeError: for arguments of the wrong type (a NumPy int is an int),
            or a class whose ``reward_dtype`` is not a floating dtype.
    """

    parameters: ClassVar[Mapping[str, float]] = {}
    """The env_info keys the task reads, with their defaults."""

    action_spec: ClassVar[TensorSpec | None] = None
    """The per-row shape and dtype of the action the task takes, checked at every step (None: not checked)."""

    reward_dtype: ClassVar[torch.dtype] = torch.float32
    """The floating dtype of the rewards ``advance`` returns, checked at every step and kept."""

    def __init__(
        self,
        n_envs: int,
        seed: int = 0,
        device: torch.device | str = "cpu",
        max_episode_steps: int | None = None,
    ) -> None:
        owner = type(self).__name__
        n_envs = check_int(owner, "n_envs", n_envs)
        if not is_int(seed):
            raise TypeError(f"{owner}: seed must be an int, got {describe(seed)}")
        if not SEEDS[0] <= seed <= SEEDS[1]:
            raise ValueError(f"{owner}: seed must be in [-2**63, 2**64), got {seed}")
        seed = int(seed)
        if not isinstance(self.reward_dtype, torch.dtype) or not self.reward_dtype.is_floating_point:
            raise TypeError(
                f"{owner}: reward_dtype must be a floating torch.dtype (float32, float64, ...), "
                f"got {self.reward_dtype!r}"
            )
        if max_episode_steps is not None and not is_int(max_episode_steps):
            raise TypeError(
                f"{owner}: max_episode_steps must be an int > 0 or None, got {describe(max_episode_steps)}"
            )
        if max_episode_steps is not None and max_episode_steps <= 0:
            raise ValueError(
                f"{owner}: max_episode_steps must be an int > 0 or None, got {max_episode_steps}"
            )
        max_episode_steps = None if max_episode_steps is None else int(max_episode_steps)
        self.n_envs = n_envs
        self.defaults: dict[str, float] = dict(self.parameters)
        """The value of each parameter where w lacks it: ``parameters``, which a constructor may change."""
        self.device = check_device(owner, device, usable=True)
        self.max_episode_steps = max_episode_steps
        self.generator = torch.Generator(self.device)
        self.generator.manual_seed(seed)
        self.elapsed = torch.zeros(n_envs, dtype=torch.int64, device=self.device)
        self.env_info = DictTensor(batch_size=n_envs)
        self._auto_reset: bool | None = None  # None: not reset yet
        self._closed = False

    # ------------------------------------------------------------------ what a task writes

    @abstractmethod
    def start(self, rows: torch.Tensor) -> None:
        """Draw a new episode's state for the rows where ``rows`` (bool ``[n_envs]``) is True."""

    @abstractmethod
    def observe(self) -> dict[str, torch.Tensor]:
        """The observation keys of every row: new tensors ``[n_envs, ...]`` on ``device``."""

    @abstractmethod
    def advance(self, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Step every row with ``action`` (``[n_envs, ...]``); return ``(reward, terminated)``, each ``[n_envs]``."""

    def parameter(self, name: str, dtype: torch.dtype | None = None) -> torch.Tensor | float:
        """w's value of ``name`` for every row (a ``[n_envs]`` tensor, in ``dtype`` if given), or its default.

        A task computing in float64 asks for its parameters in float64, so
        that a float32 w does not round its products.
        """
        value = self.env_info.tensors.get(name)
        if value is None:
            return self.defaults[name]
        return value if dtype is None else value.to(dtype)

    # ------------------------------------------------------------------ the Environment contract

    def _check_env_info(self, env_info: DictTensor) -> DictTensor:
        owner = type(self).__name__
        if not isinstance(env_info, DictTensor):
            raise TypeError(f"{owner}.reset: env_info must be a DictTensor, got {describe(env_info)}")
        if env_info.n_elems() != self.n_envs:
            raise ValueError(
                f"{owner}.reset: env_info must have {self.n_envs} rows, got {env_info.n_elems()}"
            )
        unknown = sorted(set(env_info.keys()) - set(self.parameters))
        if unknown:
            raise ValueError(
                f"{owner}.reset: env_info keys {unknown} are not parameters of this task; "
                f"expected some of {sorted(self.parameters)}"
            )
        for key, value in env_info.items():
            if value.dim() != 1 or value.dtype == torch.bool or value.dtype.is_complex:
                raise TypeError(
                    f"{owner}.reset: env_info[{key!r}] must hold one real number per row, "
                    f"got dtype {value.dtype} and shape {list(value.shape)}"
                )
        # a copy on the device: a w changed in place after this reset changes nothing
        return env_info.to(self.device) if env_info.device not in (None, self.device) else env_info.clone()

    def _with_flags(
        self,
        observation: dict[str, torch.Tensor],
        reward: torch.Tensor,
        terminated: torch.Tensor,
        truncated: torch.Tensor,
        initial_state: torch.Tensor,
    ) -> DictTensor:
        observation.update(
            reward=reward,
            terminated=terminated,
            truncated=truncated,
            done=terminated | truncated,
            initial_state=initial_state,
        )
        return DictTensor.unchecked(observation, self.n_envs, self.device)

    def reset(self, env_info: DictTensor, auto_reset: bool = False) -> DictTensor:
        """Start a new episode in every row, with w = ``env_info`` (copied to ``device``).

        Raises:
            TypeError, ValueError: for an env_info that is not a DictTensor of
                ``n_envs`` rows of one real number each, or has keys that
                are not in ``parameters``.
            TypeError: if ``observe()`` gives something else than a dict
                of str keys to tensors.
            ValueError: if ``observe()`` gives a tensor that is not
                ``[n_envs, ...]`` on ``device``, or a key named as one the
                environment adds (``reward``, ``terminated``, ``truncated``,
                ``done``, ``initial_state``).
            RuntimeError: after ``close``.
        """
        if self._closed:
            raise RuntimeError(f"{type(self).__name__}: reset() after close()")
        self.env_info = self._check_env_info(env_info)
        self._auto_reset = bool(auto_reset)
        every = torch.ones(self.n_envs, dtype=torch.bool, device=self.device)
        self.start(every)
        self.elapsed.zero_()
        self._stopped = ~every  # episodic mode: the rows whose episode is over
        self._final: DictTensor | None = None
        no = ~every
        observation = self.observe()
        self._check_observed(observation)
        clash = [key for key in observation if key in REQUIRED_KEYS]
        if clash:
            raise ValueError(
                f"{type(self).__name__}.observe: the observation keys {clash} are named as keys every "
                f"observation holds besides them ({', '.join(REQUIRED_KEYS)}); rename them"
            )
        return self._with_flags(observation, self._zeros(), no, no.clone(), every)

    def _check_observed(self, observation: object) -> None:
        """Raise unless ``observe()`` gave a dict of str keys to tensors ``[n_envs, ...]`` on ``device``."""
        owner = f"{type(self).__name__}.observe"
        if not isinstance(observation, dict):
            raise TypeError(
                f"{owner} must return a dict of tensors [n_envs, ...], got {describe(observation)}"
            )
        for key, value in observation.items():
            if not isinstance(key, str) or not isinstance(value, torch.Tensor):
                raise TypeError(
                    f"{owner}: the observation must map str keys to tensors, got key {key!r} "
                    f"holding {describe(value)}"
                )
            if value.dim() == 0 or value.shape[0] != self.n_envs or value.device != self.device:
                raise ValueError(
                    f"{owner}: observation[{key!r}] must be [n_envs, ...] = [{self.n_envs}, ...] on "
                    f"{self.device}, got {list(value.shape)} on {value.device}"
                )

    def _zeros(self) -> torch.Tensor:
        return torch.zeros(self.n_envs, dtype=self.reward_dtype, device=self.device)

    def _action(self, action: DictTensor) -> torch.Tensor:
        owner = type(self).__name__
        if not isinstance(action, DictTensor) or "action" not in action:
            got = list(action.keys()) if isinstance(action, DictTensor) else describe(action)
            raise ValueError(f"{owner}.step: action must be a DictTensor with the key 'action', got {got}")
        value = action["action"]
        if value.device != self.device:
            raise ValueError(
                f"{owner}.step: the action is on {value.device}, the environment on {self.device}; "
                "make the agent act on the environment's device"
            )
        if value.shape[0] != self.n_envs:
            raise ValueError(f"{owner}.step: the action must have {self.n_envs} rows, got {value.shape[0]}")
        spec = self.action_spec
        if spec is not None and tuple(value.shape[1:]) != spec.shape:  # it would broadcast into other shapes
            raise ValueError(
                f"{owner}.step: the action must have shape {[self.n_envs, *spec.shape]}, got {list(value.shape)}"
            )
        if spec is not None and value.dtype != spec.dtype:
            raise TypeError(
                f"{owner}.step: the action must be {spec.dtype}, got {value.dtype}; nothing is cast"
            )
        return value

    def step(self, action: DictTensor) -> tuple[DictTensor, DictTensor]:
        """Advance every row by one step; see ``Environment.step``. Nothing here waits for the device.

        Raises:
            ValueError: for an action without the key ``action``, with
                another number of rows, on another device, or (where the
                task declares ``action_spec``) of another per-row shape;
                for a reward or ``terminated`` from ``advance`` that is not
                ``[n_envs]`` on the environment's device.
            TypeError: where the task declares ``action_spec``, for an
                action of another dtype (as ``GymEnv``); for an ``advance``
                that returns something else than the pair ``(reward,
                terminated)``, a reward not of ``reward_dtype``, or a
                ``terminated`` that is not bool.
            RuntimeError: before ``reset`` or after ``close``.
        """
        owner = type(self).__name__
        if self._closed:
            raise RuntimeError(f"{owner}: step() after close()")
        if self._auto_reset is None:
            raise RuntimeError(f"{owner}: step() before reset()")
        advanced = self.advance(self._action(action))
        if not (isinstance(advanced, (tuple, list)) and len(advanced) == 2):
            length = f" of length {len(advanced)}" if isinstance(advanced, (tuple, list)) else ""
            raise TypeError(
                f"{owner}.advance must return the pair (reward, terminated), got {describe(advanced)}{length}"
            )
        reward, terminated = advanced
        self._check_advanced(reward, terminated)
        self.elapsed += 1
        if self.max_episode_steps is None:
            truncated = torch.zeros_like(terminated)
        else:
            truncated = self.elapsed >= self.max_episode_steps
        if not self._auto_reset:
            return self._episodic(reward, terminated, truncated)
        done = terminated | truncated
        no = torch.zeros_like(done)
        reached = self._with_flags(self.observe(), reward, terminated, truncated, no)
        self.start(done)
        self.elapsed.masked_fill_(done, 0)
        observation = self._with_flags(
            self.observe(), reward.masked_fill(done, 0.0), terminated & ~done, truncated & ~done, done
        )
        return reached, observation

    def _check_advanced(self, reward: object, terminated: object) -> None:
        """Raise unless ``advance`` gave ``reward`` of ``reward_dtype`` and bool ``terminated``, ``[n_envs]`` each."""
        owner = f"{type(self).__name__}.advance"
        for name, value, dtype in (
            ("reward", reward, self.reward_dtype),
            ("terminated", terminated, torch.bool),
        ):
            if not isinstance(value, torch.Tensor) or value.dtype != dtype:
                got = value.dtype if isinstance(value, torch.Tensor) else describe(value)
                why = " (the task's reward_dtype; nothing is cast)" if name == "reward" else ""
                raise TypeError(f"{owner}: {name} must be a {dtype} tensor [n_envs]{why}, got {got}")
            if value.shape != (self.n_envs,) or value.device != self.device:
                raise ValueError(
                    f"{owner}: {name} must be [n_envs] = [{self.n_envs}] on {self.device}, "
                    f"got {list(value.shape)} on {value.device}"
                )

    def _episodic(
        self, reward: torch.Tensor, terminated: torch.Tensor, truncated: torch.Tensor
    ) -> tuple[DictTensor, DictTensor]:
        """Episodic mode: the rows already over repeat their final observation, reward 0, done True."""
        reached = self._with_flags(
            self.observe(), reward, terminated, truncated, torch.zeros_like(terminated)
        )
        stopped = self._stopped
        if self._final is not None:
            final = self._final
            reached = DictTensor.unchecked(
                {
                    k: torch.where(stopped.view(-1, *[1] * (v.dim() - 1)), final[k], v)
                    for k, v in reached.items()
                },
                self.n_envs,
                self.device,
            )
            reached.set("reward", reached["reward"].masked_fill(stopped, 0.0))
        self._stopped = stopped | reached["done"]
        self._final = reached
        return reached, reached

    def close(self) -> None:
        """Nothing to release but the tensors; later calls of ``reset`` and ``step`` raise."""
        self._closed = True
