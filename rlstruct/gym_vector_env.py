"""GymVectorEnv: one gymnasium vector environment of ``n_envs`` sub-environments as an rlstruct ``Environment``.

The vector environment is made by ``gymnasium.make_vec(env_id, num_envs=n_envs,
...)`` or by a factory ``env(num_envs=n_envs, **make_kwargs)``, and stepped
with one call per step for all its rows, so that every ``make_vec`` id (its
``"sync"`` and ``"async"`` vectorizers, or an environment's own vector
implementation) works in the batchers.

**Autoreset modes.** An rlstruct ``Environment`` returns, in the step where an
episode ends, both its final observation (``reached``) and the first
observation of the next one (``observation``). Gymnasium 1.x vector
environments declare in ``metadata["autoreset_mode"]`` how they reset
(``gymnasium.vector.AutoresetMode``):

| mode | what gymnasium does | what GymVectorEnv does |
|---|---|---|
| ``SAME_STEP`` | resets an ended sub-environment in the step that ended it; returns the new first observation, the final one in ``infos["final_obs"]`` (rows marked by ``infos["_final_obs"]``) | reads both |
| ``DISABLED`` | never resets by itself; stepping an ended sub-environment is an error | resets the ended rows at once, with ``reset(options={"reset_mask": done})`` |
| ``NEXT_STEP`` | resets an ended sub-environment at the next ``step``, ignoring its action there | refused: that next step cannot be hidden, the other rows step in it |

For an id vectorized by ``"sync"`` or ``"async"`` (given, or chosen by
``make_vec`` because the id has no ``vector_entry_point``), GymVectorEnv asks
for ``SAME_STEP`` itself unless ``vector_kwargs`` names an ``autoreset_mode``.
An environment's own vector implementation (gymnasium's ``CartPoleVectorEnv``,
say) resets in ``NEXT_STEP`` mode only, and is refused with a ``ValueError``
that names the ways out.

**Modes of rlstruct.** In episodic mode (``reset(env_info, auto_reset=False)``)
a row whose episode ended repeats its final observation, with ``reward`` 0
and ``done`` True, until the next ``reset``, as in ``GymEnv``. The vector
environment itself keeps stepping that row (``SAME_STEP`` started a new
episode there; ``DISABLED`` rows are reset by GymVectorEnv), with the row's
last action, whatever the agent gives; none of it is returned.

**Seeding.** The first ``reset`` resets the vector environment with
``seed=seed`` (gymnasium's vectorizers seed sub-environment i with
``seed + i``, as ``GymEnv`` seeds instance i); later resets continue the
random streams. With ``"sync"`` in auto-reset mode, GymVectorEnv therefore
gives what ``GymEnv`` gives on the same id and seed, step by step. In
episodic mode the streams part after the first episode: the vector
environment starts a new episode in an ended row at once, ``GymEnv`` at the
next ``reset``.

**Observations** are stored as ``GymEnv`` stores them (see
``rlstruct.gym_env.observation_spaces``, on the vector environment's
``single_observation_space``): the key ``observation``, or one key per entry
of a ``Dict`` or ``Tuple`` space joined by ``/``, with the dtype and shape of
the space, nothing cast (int64 for ``Discrete``); an environment that returns
another dtype raises an error naming the key. Besides the keys of
``rlstruct.env``, ``last_action`` holds the action that led to the
observation (zeros at the first step of an episode). env_info has no keys: a
vector environment has no per-row parameters.

Examples:
    >>> import torch
    >>> from rlstruct import DictTensor
    >>> env = GymVectorEnv("CartPole-v1", n_envs=2, seed=0, vectorization_mode="sync")
    >>> env.autoreset_mode
    <AutoresetMode.SAME_STEP: 'SameStep'>
    >>> first = env.reset(DictTensor(batch_size=2), auto_reset=True)
    >>> first["observation"].shape, first["observation"].dtype, bool(first["initial_state"].all())
    (torch.Size([2, 4]), torch.float32, True)
    >>> reached, observation = env.step(DictTensor({"action": torch.tensor([0, 1])}))
    >>> reached["reward"], reached["last_action"]
    (tensor([1., 1.]), tensor([0, 1]))
    >>> env.close()
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode, VectorEnv

from rlstruct.checks import check_int, is_int
from rlstruct.dicttensor import DictTensor
from rlstruct.env import Environment
from rlstruct.errors import describe
from rlstruct.gym_env import ACTION_SPACES, action_array, check_action_values, observation_spaces, with_flags

__all__ = ["GymVectorEnv"]

_VECTORIZERS = (gym.VectorizeMode.SYNC, gym.VectorizeMode.ASYNC)
"""The vectorization modes of ``make_vec`` that take an ``autoreset_mode`` in ``vector_kwargs``."""

_MAKE_VEC_ARGUMENTS = ("num_envs", "vectorization_mode", "vector_kwargs")
"""The arguments of ``make_vec`` that GymVectorEnv passes itself, refused in ``make_kwargs``."""


def _leaf(value: Any, key: str, composite: bool) -> Any:
    """What ``value`` holds under the observation key ``key``: Dict entries by name, Tuple entries by index.

    ``value`` is an observation, a batch of them or a space: gymnasium batches
    a Dict space's observations as a dict and a Tuple's as a tuple, and Dict
    and Tuple spaces index like them.
    """
    if not composite:
        return value
    for part in key.split("/"):
        value = value[part] if isinstance(value, Mapping) else value[int(part)]
    return value


def _vectorizes(env_id: str, mode: gym.VectorizeMode | None) -> bool:
    """Whether ``make_vec(env_id, vectorization_mode=mode)`` wraps sub-environments in ``"sync"`` or ``"async"``."""
    if mode is not None:
        return mode in _VECTORIZERS
    module, _, name = env_id.rpartition(":")
    if module:  # "module:Env-v0": the module registers the id (make_vec imports it again, at no cost)
        importlib.import_module(module)
    return gym.spec(name).vector_entry_point is None


class GymVectorEnv(Environment):
    """One gymnasium vector environment of ``n_envs`` rows, stepped in one call per step.

    Args:
        env: a registered environment id (``"CartPole-v1"``, or
            ``"module:EnvId"`` to import the module that registers it), made by
            ``gymnasium.make_vec``; or a callable, called as
            ``env(num_envs=n_envs, **make_kwargs)``, returning a
            ``gymnasium.vector.VectorEnv`` of ``n_envs`` sub-environments.
        n_envs: the number of rows (sub-environments).
        seed: the seed of the first reset; sub-environment i gets ``seed + i``
            from gymnasium's vectorizers.
        vectorization_mode: for an id, ``"sync"``, ``"async"`` or
            ``"vector_entry_point"`` (or a ``gymnasium.VectorizeMode``);
            None lets ``make_vec`` choose (the id's own vector implementation
            if it has one, else ``"sync"``).
        vector_kwargs: for an id, the vectorizer's keyword arguments; an
            ``autoreset_mode`` of ``SAME_STEP`` is added for ``"sync"`` and
            ``"async"`` unless given.
        make_kwargs: keyword arguments of every sub-environment (for an id,
            of ``make_vec``, which passes them on; for a callable, of the
            callable).
        reward_dtype: the dtype of ``reward`` (gymnasium rewards are float64).

    Attributes:
        vector_env: the gymnasium vector environment.
        autoreset_mode: its ``AutoresetMode``, ``SAME_STEP`` or ``DISABLED``.
        observation_space: a single sub-environment's observation space.
        action_space: a single sub-environment's action space (``action``
            holds one such action per row).
        name: the id, or the callable's name.

    Raises:
        TypeError: if ``env`` is neither a str nor a callable, the callable
            does not return a ``gymnasium.vector.VectorEnv``, ``n_envs`` or
            ``seed`` is not an int, ``vector_kwargs`` or ``make_kwargs`` is
            not a mapping, ``reward_dtype`` is not a floating dtype, or a
            space is not supported.
        ValueError: if ``n_envs`` is below 1 or ``seed`` below 0, the callable's environment
            has another ``num_envs``, ``vectorization_mode`` is unknown (or
            given with a callable, as ``vector_kwargs``), ``make_kwargs``
            holds an argument given here by name, or the vector environment
            resets in ``NEXT_STEP`` mode (or declares no mode).
    """

    def __init__(
        self,
        env: str | Callable[..., VectorEnv[Any, Any, Any]],
        n_envs: int,
        seed: int = 0,
        *,
        vectorization_mode: str | gym.VectorizeMode | None = None,
        vector_kwargs: Mapping[str, Any] | None = None,
        make_kwargs: Mapping[str, Any] | None = None,
        reward_dtype: torch.dtype = torch.float32,
    ) -> None:
        self.n_envs = check_int("GymVectorEnv", "n_envs", n_envs)
        if not (isinstance(env, str) or callable(env)):
            raise TypeError(f"GymVectorEnv: env must be an environment id or a callable, got {describe(env)}")
        if not is_int(seed):
            raise TypeError(f"GymVectorEnv: seed must be an int, got {describe(seed)}")
        if seed < 0:
            raise ValueError(
                f"GymVectorEnv: seed must be at least 0 (gymnasium takes no negative seed), got {seed}"
            )
        seed = int(seed)  # a NumPy int counts too
        if reward_dtype not in (torch.float16, torch.float32, torch.float64):
            raise TypeError(
                f"GymVectorEnv: reward_dtype must be torch.float16, float32 or float64, got {reward_dtype!r}"
            )
        for name, kwargs in (("vector_kwargs", vector_kwargs), ("make_kwargs", make_kwargs)):
            if kwargs is not None and not isinstance(kwargs, Mapping):
                raise TypeError(f"GymVectorEnv: {name} must be a mapping or None, got {describe(kwargs)}")
        self.name = env if isinstance(env, str) else getattr(env, "__name__", repr(env))
        self._seed = seed
        self._reward_dtype = torch.empty(0, dtype=reward_dtype).numpy().dtype
        self.vector_env = self._make(
            env, vectorization_mode, dict(vector_kwargs or {}), dict(make_kwargs or {})
        )
        try:
            self.autoreset_mode = self._autoreset_mode()
            self._read_spaces()
        except BaseException:
            self.vector_env.close()
            raise
        self._seeded = False
        self._closed = False

    # ------------------------------------------------------------------ construction

    def _make(
        self,
        env: str | Callable[..., VectorEnv[Any, Any, Any]],
        vectorization_mode: str | gym.VectorizeMode | None,
        vector_kwargs: dict[str, Any],
        make_kwargs: dict[str, Any],
    ) -> VectorEnv[Any, Any, Any]:
        """The vector environment of ``n_envs`` rows that ``env`` makes, asked for ``SAME_STEP`` where it can be."""
        if not isinstance(env, str):
            if vectorization_mode is not None or vector_kwargs:
                raise ValueError(
                    f"GymVectorEnv({self.name!r}): vectorization_mode and vector_kwargs are for an environment "
                    "id; a callable makes its vector environment itself"
                )
            if "num_envs" in make_kwargs:
                raise ValueError(
                    f"GymVectorEnv({self.name!r}): make_kwargs must not hold 'num_envs'; pass n_envs instead"
                )
            vector = env(num_envs=self.n_envs, **make_kwargs)
            if not isinstance(vector, VectorEnv):
                raise TypeError(
                    f"GymVectorEnv({self.name!r}): env must return a gymnasium.vector.VectorEnv, got {describe(vector)}"
                )
            if vector.num_envs != self.n_envs:
                vector.close()
                raise ValueError(
                    f"GymVectorEnv({self.name!r}): env returned a vector environment of num_envs={vector.num_envs}, "
                    f"but n_envs is {self.n_envs}"
                )
            return vector
        given = [key for key in _MAKE_VEC_ARGUMENTS if key in make_kwargs]
        if given:
            raise ValueError(
                f"GymVectorEnv({self.name!r}): make_kwargs must not hold {given}; pass n_envs, "
                "vectorization_mode and vector_kwargs as GymVectorEnv's own arguments"
            )
        mode = None
        if vectorization_mode is not None:
            try:
                mode = gym.VectorizeMode(vectorization_mode)
            except ValueError:
                raise ValueError(
                    f"GymVectorEnv({self.name!r}): vectorization_mode must be one of "
                    f"{[m.value for m in gym.VectorizeMode]} or None, got {vectorization_mode!r}"
                ) from None
        if _vectorizes(env, mode):
            vector_kwargs.setdefault("autoreset_mode", AutoresetMode.SAME_STEP)
        return gym.make_vec(
            env, num_envs=self.n_envs, vectorization_mode=mode, vector_kwargs=vector_kwargs, **make_kwargs
        )

    def _autoreset_mode(self) -> AutoresetMode:
        """The vector environment's ``metadata["autoreset_mode"]``, if GymVectorEnv can drive it."""
        declared = self.vector_env.metadata.get("autoreset_mode")
        try:
            mode = AutoresetMode(declared)
        except ValueError:
            raise ValueError(
                f"GymVectorEnv({self.name!r}): the vector environment {type(self.vector_env).__name__} must declare "
                f"metadata['autoreset_mode'] (a gymnasium.vector.AutoresetMode), got {declared!r}"
            ) from None
        if mode == AutoresetMode.NEXT_STEP:
            raise ValueError(
                f"GymVectorEnv({self.name!r}): the vector environment {type(self.vector_env).__name__} resets in "
                "NEXT_STEP mode, which returns the first observation of a new episode one step after the final "
                "one, and cannot give both in the same step as an rlstruct Environment must. Use "
                'vectorization_mode="sync" or "async" (GymVectorEnv asks them for SAME_STEP), a vector '
                "environment in SAME_STEP or DISABLED mode, or, for the library's own tasks written in torch, "
                "rlstruct.torch_envs.make_torch_env"
            )
        return mode

    def _read_spaces(self) -> None:
        """The observation keys, dtypes and shapes, and the action's dtype and shape, from the single spaces."""
        self.observation_space = self.vector_env.single_observation_space
        self.action_space = self.vector_env.single_action_space
        try:
            spaces = observation_spaces(self.observation_space)
        except (TypeError, ValueError) as error:
            message = str(error).removeprefix("observation_spaces: ")
            raise type(error)(f"GymVectorEnv({self.name!r}): {message}") from None
        self._composite = isinstance(self.observation_space, (gym.spaces.Dict, gym.spaces.Tuple))
        self._leaves = {key: _leaf(self.observation_space, key, self._composite) for key in spaces}
        self._dtypes = {key: torch.empty(0, dtype=s.dtype).numpy().dtype for key, s in spaces.items()}
        self._shapes = {key: (self.n_envs, *s.shape) for key, s in spaces.items()}
        self._discrete = {key for key, s in spaces.items() if s.kind == "discrete"}
        space = self.action_space
        if not isinstance(space, ACTION_SPACES):
            raise TypeError(
                f"GymVectorEnv({self.name!r}): {type(space).__name__} action spaces are not supported; use Box, "
                "Discrete, MultiDiscrete or MultiBinary"
            )
        self._action_dtype = (
            np.dtype(np.int64) if isinstance(space, gym.spaces.Discrete) else np.dtype(space.dtype)
        )
        self._action_shape = tuple(space.shape or ())

    # ------------------------------------------------------------------ checks

    def _arrays(self, raw: Any, when: str, check_range: bool) -> dict[str, np.ndarray[Any, Any]]:
        """A copy of each observation key of the batch ``raw``, with its space's dtype and shape, nothing cast."""
        arrays = {}
        for key, dtype in self._dtypes.items():
            array = np.array(_leaf(raw, key, self._composite))
            if array.dtype != dtype:
                if not (key in self._discrete and np.issubdtype(array.dtype, np.integer)):
                    raise ValueError(
                        f"GymVectorEnv({self.name!r}): observation key {key!r} {when} has dtype {array.dtype}, "
                        f"but the observation space declares {dtype}"
                    )
                array = array.astype(np.int64)
            if array.shape != self._shapes[key]:
                raise ValueError(
                    f"GymVectorEnv({self.name!r}): observation key {key!r} {when} has shape {array.shape}, "
                    f"but the observation space and n_envs make {self._shapes[key]}"
                )
            if check_range:
                space = self._leaves[key]
                outside = [i for i in range(self.n_envs) if not space.contains(array[i])]
                if outside:
                    raise ValueError(
                        f"GymVectorEnv({self.name!r}), row {outside[0]}: observation key {key!r} {when} is "
                        f"{array[outside[0]]!r}, which lies outside the observation space {space}"
                    )
            arrays[key] = array
        return arrays

    def _write_final(self, arrays: dict[str, np.ndarray[Any, Any]], row: int, final: Any) -> None:
        """Write the final observation ``final`` of one sub-environment into row ``row`` of ``arrays``."""
        for key, out in arrays.items():
            value = np.asarray(_leaf(final, key, self._composite))
            fits = value.dtype == out.dtype or (
                key in self._discrete and np.issubdtype(value.dtype, np.integer)
            )
            if not fits or value.shape != out.shape[1:]:
                raise ValueError(
                    f"GymVectorEnv({self.name!r}), row {row}: observation key {key!r} of infos['final_obs'] has "
                    f"dtype {value.dtype} and shape {value.shape}, but the observation space declares "
                    f"{out.dtype} and {out.shape[1:]}"
                )
            out[row] = value

    def _actions(self, action: DictTensor) -> np.ndarray[Any, Any]:
        """``action["action"]`` as a numpy array (sharing the tensor's memory where it can), checked."""
        shape = (self.n_envs, *self._action_shape)
        owner = f"GymVectorEnv({self.name!r}).step"
        return action_array(owner, action, shape, self._action_dtype, self.action_space)

    def _flags(self, reward: Any, terminated: Any, truncated: Any) -> tuple[np.ndarray[Any, Any], ...]:
        """Copies of one step's rewards (float64) and flags (bool), each checked to hold one value per row."""
        n = self.n_envs
        arrays = []
        for name, value, dtype in (
            ("rewards", reward, np.float64),
            ("terminations", terminated, np.bool_),
            ("truncations", truncated, np.bool_),
        ):
            array = np.asarray(value)
            if array.shape != (n,) or not (np.issubdtype(array.dtype, np.number) or array.dtype == np.bool_):
                raise ValueError(
                    f"GymVectorEnv({self.name!r}).step: the vector environment's {name} must be {n} numbers "
                    f"(n_envs), got dtype {array.dtype} and shape {array.shape}"
                )
            arrays.append(array.astype(dtype))  # a copy: the environment may reuse its arrays
        return tuple(arrays)

    # ------------------------------------------------------------------ batches

    def _batch(
        self,
        observation: dict[str, np.ndarray[Any, Any]],
        reward: np.ndarray[Any, Any],
        terminated: np.ndarray[Any, Any],
        truncated: np.ndarray[Any, Any],
        initial: np.ndarray[Any, Any],
        last_action: np.ndarray[Any, Any],
    ) -> DictTensor:
        """One DictTensor of ``n_envs`` rows on the arrays given (not copied: the caller owns them)."""
        data = {key: torch.from_numpy(array) for key, array in observation.items()}
        flags = (reward.astype(self._reward_dtype), terminated, truncated, initial, last_action)
        return with_flags(data, self.n_envs, *flags)

    def reset(self, env_info: DictTensor, auto_reset: bool = False) -> DictTensor:
        """Start a new episode in every row; see ``Environment.reset``.

        Args:
            env_info: ``n_envs`` rows and no keys.
            auto_reset: see ``Environment.reset``.

        Returns:
            The first observations: ``n_envs`` rows on the CPU, the
            observation keys with their spaces' dtypes, ``reward`` 0 in
            ``reward_dtype``, ``initial_state`` True, the flags False and
            ``last_action`` zeros.

        Raises:
            TypeError: if ``env_info`` is not a DictTensor.
            ValueError: if ``env_info`` does not have ``n_envs`` rows or has
                keys, or (at the first reset) an observation does not match
                its space.
            RuntimeError: after ``close``.
        """
        if self._closed:
            raise RuntimeError(f"GymVectorEnv({self.name!r}): reset() after close()")
        if not isinstance(env_info, DictTensor):
            raise TypeError(
                f"GymVectorEnv({self.name!r}).reset: env_info must be a DictTensor, got {describe(env_info)}"
            )
        if env_info.n_elems() != self.n_envs:
            raise ValueError(
                f"GymVectorEnv({self.name!r}).reset: env_info must have {self.n_envs} rows (n_envs), "
                f"got {env_info.n_elems()}"
            )
        if len(env_info.keys()) > 0:
            raise ValueError(
                f"GymVectorEnv({self.name!r}).reset: env_info must have no keys (a vector environment has no "
                f"per-row parameters; give constant ones in make_kwargs, or use GymEnv), got {list(env_info.keys())}"
            )
        first = not self._seeded
        if first:
            raw, _ = self.vector_env.reset(seed=self._seed)
            self.action_space.seed(self._seed)
            self._seeded = True
        else:
            raw, _ = self.vector_env.reset()
        n = self.n_envs
        self._auto_reset = bool(auto_reset)
        self._running = np.ones(n, dtype=bool)
        self._step_checked = not first
        self._last_action = np.zeros((n, *self._action_shape), dtype=self._action_dtype)
        # what episodic mode repeats in the rows that ended: the last reached observation, flags, action
        self._held = self._arrays(raw, "at reset", check_range=first)
        self._terminated = np.zeros(n, dtype=bool)
        self._truncated = np.zeros(n, dtype=bool)
        return self._batch(
            {key: array.copy() for key, array in self._held.items()},
            np.zeros(n),
            self._terminated.copy(),
            self._truncated.copy(),
            np.ones(n, dtype=bool),
            self._last_action.copy(),
        )

    def step(self, action: DictTensor) -> tuple[DictTensor, DictTensor]:
        """Step every row in one call of the vector environment; see ``Environment.step``.

        Args:
            action: ``n_envs`` rows holding ``action``: one action of
                ``action_space`` per row, int64 for a ``Discrete`` space, the
                space's dtype otherwise, on the CPU.

        Returns:
            ``(reached, observation)``: new DictTensors of ``n_envs`` rows on
            the CPU, with the keys of ``reset``.

        Raises:
            TypeError: if the action is not a DictTensor or has another dtype
                than the action space.
            ValueError: if the key ``action`` is missing or has the wrong
                shape, or a Discrete, MultiDiscrete or MultiBinary action lies
                outside its space, or the vector environment returns observations that do
                not match their space (checked in range at the first step
                only), or misses the final observation of an ended row.
            RuntimeError: before ``reset`` or after ``close``.
        """
        if self._closed:
            raise RuntimeError(f"GymVectorEnv({self.name!r}): step() after close()")
        if not hasattr(self, "_running"):
            raise RuntimeError(f"GymVectorEnv({self.name!r}): step() before reset()")
        actions = self._actions(action)
        running = self._running
        check_action_values(
            f"GymVectorEnv({self.name!r}).step", actions, self.action_space, np.flatnonzero(running)
        )
        stopped = ~running
        episodic_stop = not self._auto_reset and bool(stopped.any())
        if episodic_stop:  # a stopped row steps with its last action, whatever the agent gives
            rows = stopped.reshape(-1, *[1] * len(self._action_shape))
            actions = np.where(rows, self._last_action, actions)
        else:
            actions = actions.copy()  # kept as last_action: not the caller's memory
        raw, reward, terminated, truncated, infos = self.vector_env.step(actions)
        check_range = not self._step_checked
        observation = self._arrays(raw, "after a step", check_range)
        reward, terminated, truncated = self._flags(reward, terminated, truncated)
        self._step_checked = True
        done = terminated | truncated
        reached_observation = observation
        if done.any():
            if self.autoreset_mode == AutoresetMode.SAME_STEP:
                reached_observation = {key: array.copy() for key, array in observation.items()}
                finals, marked = infos.get("final_obs"), infos.get("_final_obs")
                if finals is None or marked is None or not np.asarray(marked)[done].all():
                    raise ValueError(
                        f"GymVectorEnv({self.name!r}).step: rows {np.flatnonzero(done).tolist()} ended, but the "
                        "vector environment (SAME_STEP) did not give all their final observations in "
                        "infos['final_obs'] and infos['_final_obs']"
                    )
                for row in np.flatnonzero(done).tolist():
                    self._write_final(reached_observation, row, finals[row])
            else:  # DISABLED: the ended rows cannot step again before they are reset
                observation = {key: array.copy() for key, array in observation.items()}
                raw_first, _ = self.vector_env.reset(options={"reset_mask": done.copy()})
                first = self._arrays(raw_first, "at the reset of ended rows", check_range)
                for key, array in observation.items():
                    array[done] = first[key][done]
        if not self._auto_reset:
            if episodic_stop:  # the stopped rows repeat what they reached last
                for key, array in reached_observation.items():
                    array[stopped] = self._held[key][stopped]
                reward[stopped] = 0.0
                terminated[stopped] = self._terminated[stopped]
                truncated[stopped] = self._truncated[stopped]
            self._held, self._terminated, self._truncated = reached_observation, terminated, truncated
            self._running = ~(terminated | truncated)
            self._last_action = actions
            reached = self._batch(
                {key: array.copy() for key, array in reached_observation.items()},
                reward,
                terminated.copy(),
                truncated.copy(),
                np.zeros(self.n_envs, dtype=bool),
                actions.copy(),
            )
            return reached, reached
        reached = self._batch(
            reached_observation, reward, terminated, truncated, np.zeros(self.n_envs, dtype=bool), actions
        )
        if not done.any():
            return reached, reached
        first_action = actions.copy()
        first_action[done] = 0
        following = self._batch(
            observation,
            np.where(done, 0.0, reward),
            np.zeros(self.n_envs, dtype=bool),
            np.zeros(self.n_envs, dtype=bool),
            done,
            first_action,
        )
        return reached, following

    def close(self) -> None:
        """Close the vector environment (and the processes of ``"async"``). Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        self.vector_env.close()
