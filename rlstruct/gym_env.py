"""GymEnv: ``n_envs`` gymnasium environments as one rlstruct ``Environment``.

Each instance is made by ``gymnasium.make(env_id, **kwargs)`` or by a factory
``env(**kwargs)``, where ``kwargs`` is the instance's row of env_info (0-d
values as Python numbers, others as tensors) merged over the constant
``make_kwargs``: w can be a gravity, a task id, a level. A float32 (or
narrower) value arrives as the shortest decimal it holds (9.8, not
9.800000190734863). An instance is made
again when its row of env_info changes at a ``reset``, and kept otherwise.

Instance i is seeded with ``seed + i`` at its first reset (the batchers pass
``seed`` = base seed + the global index of the first instance), after which
its random stream simply continues. The one reserved key of env_info is
``seed`` (integers, one per row): when present, instance i is reset with
``seed=env_info["seed"][i]`` at every ``reset`` (not at the automatic resets
of "fixed" mode), so that repeated evaluations play the same episodes; it is
not passed to the environment's constructor.

Observations hold the environment's observation under ``observation`` (or,
for a ``Dict`` or ``Tuple`` space, one key per entry: a ``Dict`` entry under
its name, entry i of a ``Tuple`` under ``"i"``, nested entries joined by
``/``, as ``"pair/0"`` for a Tuple under the Dict key ``pair``) with the dtype
and shape of the space: float as declared for ``Box``, int64 for
``Discrete``, the space's dtype for ``MultiDiscrete`` and ``MultiBinary``.
``observation_spaces`` tells the keys of a space and what each holds, as
``ObservationSpace`` descriptions that networks read without gymnasium.
Nothing is cast: an environment that returns another dtype or shape than its
space declares raises an error naming the key. Besides the keys of
``rlstruct.env`` (``reward`` in ``reward_dtype``, ``terminated``,
``truncated``, ``done``, ``initial_state``), ``last_action`` holds the action
that led to the observation (zeros at the first step of an episode).

Examples:
    >>> import torch
    >>> from rlstruct import DictTensor, GymEnv
    >>> env = GymEnv("CartPole-v1", n_envs=2, seed=0)
    >>> first = env.reset(DictTensor(batch_size=2))
    >>> first["observation"].shape, first["observation"].dtype, bool(first["initial_state"].all())
    (torch.Size([2, 4]), torch.float32, True)
    >>> reached, observation = env.step(DictTensor({"action": torch.tensor([0, 1])}))
    >>> reached["reward"]
    tensor([1., 1.])
    >>> env.close()
    >>> pair = gym.spaces.Tuple([gym.spaces.Discrete(3, start=1), gym.spaces.Box(0.0, 1.0, (2,))])
    >>> for key, space in observation_spaces(gym.spaces.Dict({"pair": pair})).items():
    ...     print(key, space)
    pair/0 ObservationSpace(kind='discrete', shape=(), dtype=torch.int64, n=(3,), start=(1,))
    pair/1 ObservationSpace(kind='box', shape=(2,), dtype=torch.float32, n=(), start=())
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable, Mapping
from typing import Any, Literal

import gymnasium as gym
import numpy as np
import torch

from rlstruct import envs as _envs  # noqa: F401  (registers the memory tasks' ids, in spawned workers too)
from rlstruct.checks import is_int
from rlstruct.dicttensor import DictTensor
from rlstruct.env import REQUIRED_KEYS, Environment
from rlstruct.errors import describe
from rlstruct.specs import ObservationSpace

__all__ = [
    "GymEnv",
    "UnknownEnvironment",
    "action_array",
    "check_action_values",
    "check_env_id",
    "observation_spaces",
    "with_flags",
]

_COMPOSITE = (gym.spaces.Dict, gym.spaces.Tuple)
"""The spaces whose entries are stored under keys of their own, joined by ``/``."""


FLAG_KEYS = (*REQUIRED_KEYS, "last_action")
"""The keys GymEnv adds to every observation: an observation entry may not have one of these names."""

ACTION_SPACES = (gym.spaces.Box, gym.spaces.Discrete, gym.spaces.MultiDiscrete, gym.spaces.MultiBinary)
"""The action spaces an rlstruct environment of gymnasium ones takes: one tensor ``action`` per row."""

MULTI_DISCRETE = (gym.spaces.MultiDiscrete, gym.spaces.MultiBinary)
"""The action spaces whose actions may come in any integer dtype (converted when every value fits)."""


def _leaf_spaces(space: gym.Space[Any], prefix: str = "", owner: str = "GymEnv") -> dict[str, gym.Space[Any]]:
    """The observation keys of ``space`` and their spaces (``Dict`` and ``Tuple`` spaces flattened with ``/``).

    A Dict entry is keyed by its name, entry i of a Tuple by ``"i"``; a space
    that is neither is the one key ``observation``.

    Raises:
        TypeError: for a space of another kind.
        ValueError: for a Dict entry named as a key GymEnv adds (``FLAG_KEYS``),
            or with a ``/`` in its name.
    """
    if isinstance(space, _COMPOSITE):
        entries = space.spaces.items() if isinstance(space, gym.spaces.Dict) else enumerate(space.spaces)
        leaves: dict[str, gym.Space[Any]] = {}
        for key, sub in entries:
            if "/" in str(key):  # it would read as a nested entry, or collide with one
                raise ValueError(
                    f"{owner}: the observation entry '{prefix}{key}' has a '/' in its name, which joins the "
                    "names of nested entries in the keys; rename it"
                )
            leaves.update(_leaf_spaces(sub, f"{prefix}{key}/", owner))
        clash = [key for key in leaves if key in FLAG_KEYS]
        if clash:
            raise ValueError(
                f"{owner}: the observation entries {clash} are named as keys every observation holds besides "
                f"its entries ({', '.join(FLAG_KEYS)}); rename them"
            )
        return leaves
    if isinstance(space, ACTION_SPACES):  # the same four kinds as observations
        return {prefix[:-1] if prefix else "observation": space}
    raise TypeError(
        f"{owner}: {type(space).__name__} spaces are not supported; use Box, Discrete, MultiDiscrete, "
        "MultiBinary, or Dict and Tuple spaces of them"
    )


def _leaf_value(observation: Any, key: str, composite: bool) -> Any:
    """The value under ``key`` of one raw observation: Dict entries by name, Tuple entries by index."""
    if not composite:
        return observation
    for part in key.split("/"):
        observation = observation[part] if isinstance(observation, dict) else observation[int(part)]
    return observation


def _numpy_dtype(space: gym.Space[Any]) -> np.dtype[Any]:
    return np.dtype(np.int64) if isinstance(space, gym.spaces.Discrete) else np.dtype(space.dtype)


def _observation_space(space: gym.Space[Any]) -> ObservationSpace:
    """The description of one leaf space (Box, Discrete, MultiDiscrete or MultiBinary)."""
    dtype = torch.from_numpy(np.zeros(0, _numpy_dtype(space))).dtype
    shape = tuple(int(s) for s in space.shape or ())
    if isinstance(space, gym.spaces.Discrete):
        return ObservationSpace("discrete", (), dtype, n=(int(space.n),), start=(int(space.start),))
    if isinstance(space, gym.spaces.MultiDiscrete):
        start = np.broadcast_to(np.asarray(space.start), space.nvec.shape)
        n = tuple(int(v) for v in space.nvec.flatten())
        return ObservationSpace(
            "multidiscrete", shape, dtype, n=n, start=tuple(int(v) for v in start.flatten())
        )
    kind = "box" if isinstance(space, gym.spaces.Box) else "multibinary"
    return ObservationSpace(kind, shape, dtype)


def observation_spaces(space: gym.Space[Any]) -> dict[str, ObservationSpace]:
    """The keys ``GymEnv`` stores an observation of ``space`` under, and what each holds.

    Args:
        space: an environment's observation space: Box, Discrete,
            MultiDiscrete, MultiBinary, or Dict and Tuple spaces of them
            (nested as deep as they go).

    Returns:
        One ``ObservationSpace`` per key, in the order GymEnv stores them:
        ``{"observation": ...}`` for a space that is not a Dict or a Tuple,
        else one key per leaf (``"pos"``, ``"0"``, ``"pair/1"``). Box: kind
        ``"box"``, the space's shape and dtype. Discrete: kind
        ``"discrete"``, shape ``()``, int64, ``n=(n,)``, ``start=(start,)``.
        MultiDiscrete: the space's shape and dtype, ``nvec`` and ``start``
        flattened. MultiBinary: the space's shape and dtype.

    Raises:
        TypeError: if ``space`` is not a gymnasium space, or holds a space of
            another kind (Text, Graph, Sequence...).
        ValueError: if a Dict entry is named as one of the keys GymEnv adds
            to every observation (``reward``, ``terminated``, ``truncated``,
            ``done``, ``initial_state``, ``last_action``), or has a ``/`` in
            its name (which joins the names of nested entries).

    Examples:
        >>> observation_spaces(gym.spaces.Discrete(4))
        {'observation': ObservationSpace(kind='discrete', shape=(), dtype=torch.int64, n=(4,), start=(0,))}
    """
    if not isinstance(space, gym.Space):
        raise TypeError(f"observation_spaces: space must be a gymnasium.Space, got {describe(space)}")
    return {
        key: _observation_space(leaf) for key, leaf in _leaf_spaces(space, owner="observation_spaces").items()
    }


def resolve_env(env: str | Callable[..., gym.Env[Any, Any]]) -> str | Callable[..., gym.Env[Any, Any]]:
    """What makes the environment ``env`` names: the id itself, or the callable ``"module:name"`` names.

    ``"module:EnvId"`` imports ``module`` (which may register ``EnvId``); if
    ``EnvId`` is then a registered id, the string is returned for
    ``gymnasium.make``, else if ``module`` has a callable ``EnvId`` (a factory
    function or an Env class), that callable. Anything else is returned as it
    is, for ``gymnasium.make`` to report.

    Raises:
        ModuleNotFoundError: if ``module`` cannot be imported.
    """
    if not isinstance(env, str) or ":" not in env:
        return env
    module_name, _, name = env.partition(":")
    if name in gym.registry:
        return env
    module = importlib.import_module(module_name)
    factory = getattr(module, name, None)
    if name not in gym.registry and callable(factory):
        return factory  # type: ignore[no-any-return]
    return env


MAKE_ERRORS = (gym.error.Error, ModuleNotFoundError)
"""What making an environment id raises when gymnasium cannot make it (``UnknownEnvironment`` reports it)."""


class UnknownEnvironment(ValueError):
    """An environment id that gymnasium cannot make, with the likely fix in one line.

    Args:
        env: the id as given.
        error: what gymnasium (or the import of the id's module) raised.
        owner: how the message begins ("Scheme: env_args['env']"); empty for
            the command line's ``--env``, whose flag the hints then name.

    Attributes:
        env: the id as given.
    """

    def __init__(self, env: str, error: BaseException, owner: str = "") -> None:
        name = env.split(":")[-1]

        def prefixed(module: str) -> str:
            return f"--env {module}:{name}" if not owner else repr(f"{module}:{name}")

        if ":" not in env and "Bullet" in name:
            hint = (
                f"Bullet environments need the module prefix and the bullet extra: "
                f"{prefixed('pybullet_envs_gymnasium')} (pip install -e '.[bullet]')"
            )
        elif ":" not in env and name.startswith("popgym-"):
            hint = f"POPGym environments need the module prefix and the popgym extra: {prefixed('popgym')}"
        else:
            close = [c for c in difflib.get_close_matches(name, list(gym.registry), n=2) if c != name]
            hint = f"did you mean {close[0]!r}?" if close else "see gymnasium.pprint_registry() for the ids"
        where = f"{owner}: " if owner else ""
        if isinstance(error, gym.error.DependencyNotInstalled) or (
            isinstance(error, ModuleNotFoundError) and name in gym.registry
        ):  # a registered id whose package is missing
            super().__init__(f"{where}environment {env!r} needs a package that is not installed: {error}")
        else:
            super().__init__(f"{where}unknown environment {env!r} ({type(error).__name__}: {error}); {hint}")
        self.env = env

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as its class, message and attributes: it may cross from a worker process or a Ray actor."""
        return (_unknown_environment, (type(self), str(self)), self.__dict__)


def _unknown_environment(cls: type[UnknownEnvironment], message: str) -> UnknownEnvironment:
    """An ``UnknownEnvironment`` (or subclass) with this message, as unpickled (keep this signature: pickles name it)."""
    error = cls.__new__(cls)
    ValueError.__init__(error, message)
    return error


def check_env_id(owner: str, env: str) -> None:
    """Refuse an id gymnasium does not know, without making the environment (cheap: a registry look-up).

    ``"module:EnvId"`` imports ``module`` first, as ``resolve_env``; an id
    without a version stands for its latest, as ``gymnasium.make`` takes it.
    An id that is known may still fail when made (a missing package).

    Args:
        owner: how the message begins ("Scheme: env_args['env']").
        env: the id, as ``GymEnv`` takes it.

    Raises:
        TypeError: for an ``env`` that is not a str.
        UnknownEnvironment: (a ValueError) for an id gymnasium does not know,
            or whose module cannot be imported, naming it, with a
            did-you-mean.

    Examples:
        >>> check_env_id("Scheme: env_args['env']", "CartPole-v1")
        >>> check_env_id("Scheme: env_args['env']", "CartPole-v9")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        rlstruct.gym_env.UnknownEnvironment: Scheme: env_args['env']: unknown environment 'CartPole-v9' ...
    """
    if not isinstance(env, str):
        raise TypeError(f"{owner} must be an environment id (a str), got {describe(env)}")
    if env.startswith(":"):
        raise UnknownEnvironment(env, ValueError("the module before ':' is empty"), owner)
    try:
        maker = resolve_env(env)
        if not isinstance(maker, str):  # a factory that "module:name" names
            return
        name = maker.partition(":")[2] or maker  # as resolve_env and gymnasium.make read "module:EnvId"
        if name in gym.registry:
            return
        namespace, base, version = gym.envs.registration.parse_env_id(name)
        if version is None and gym.envs.registration.find_highest_version(namespace, base) is not None:
            return
        gym.spec(name)  # raises gymnasium's error for the id: NameNotFound, VersionNotFound, ...
    except (*MAKE_ERRORS, ImportError) as error:
        raise UnknownEnvironment(env, error, owner) from error


_ROW_BY_ROW = 4096
"""Observation rows of at least this many bytes are copied one by one by ``step_into``, not stacked first."""

SEED_KEY = "seed"
"""The key of env_info that reseeds each instance at every reset instead of making it."""


def _number(value: torch.Tensor) -> Any:
    """A 0-d tensor as a Python number; a float narrower than 64 bits as the shortest decimal it holds.

    float32(9.8) is 9.800000190734863 as a Python float; the environment gets
    9.8, the number the user wrote (float16(0.1) gives 0.1, bfloat16(9.8) 9.8:
    the shortest decimal in the value's own precision).
    """
    if value.dtype in (torch.float16, torch.float32):
        return float(str(value.numpy()))  # numpy prints the shortest decimal of the value's precision
    if value.dtype == torch.bfloat16:  # numpy has no bfloat16: the fewest digits that round back to it
        number = value.item()
        for digits in range(1, 10):
            shortest = float(f"{number:.{digits}g}")
            if torch.tensor(shortest, dtype=torch.bfloat16) == value:
                return shortest
        return number  # nan and inf
    return value.item()


def _row_kwargs(env_info: DictTensor, i: int) -> dict[str, Any]:
    # rows are copied: a view would follow later in-place edits of env_info, hiding them from _same_kwargs
    return {
        k: (_number(v[i]) if v.dim() == 1 else v[i].clone()) for k, v in env_info.items() if k != SEED_KEY
    }


def _same_kwargs(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    if a.keys() != b.keys():
        return False
    for key, value in a.items():
        other = b[key]
        if isinstance(value, torch.Tensor) or isinstance(other, torch.Tensor):
            if not (isinstance(value, torch.Tensor) and isinstance(other, torch.Tensor)):
                return False
            if not torch.equal(value, other):
                return False
        elif value != other:
            return False
    return True


def action_array(
    owner: str, action: DictTensor, shape: tuple[int, ...], dtype: np.dtype[Any], space: gym.Space[Any]
) -> np.ndarray[Any, Any]:
    """``action["action"]`` as a numpy array for gymnasium (sharing the tensor's memory where it can), checked.

    Args:
        owner: how errors begin ("GymEnv('CartPole-v1').step").
        action: the agent's output.
        shape: the expected shape, rows first.
        dtype: the action space's numpy dtype. Nothing is cast, except the
            integers of a ``MultiDiscrete`` or ``MultiBinary`` action of
            another integer dtype (an agent's int64 for a ``MultiBinary``'s
            int8): converted to ``dtype`` when every value fits it.
        space: the action space, named in the dtype error.

    Raises:
        TypeError: if ``action`` is not a DictTensor, or the dtype differs
            (for a ``MultiDiscrete`` or ``MultiBinary``: is not an integer one).
        ValueError: if the key ``action`` is missing or has another shape,
            or a multi-discrete value does not fit ``dtype`` (it then lies
            outside the space: the row is named).
    """
    if not isinstance(action, DictTensor):
        raise TypeError(f"{owner}: action must be a DictTensor, got {describe(action)}")
    if "action" not in action:
        raise ValueError(f"{owner}: the agent's output must hold the key 'action', got {list(action.keys())}")
    value = action["action"]
    if tuple(value.shape) != shape:
        raise ValueError(f"{owner}: key 'action' must have shape {list(shape)}, got {list(value.shape)}")
    try:
        array = value.numpy()  # a CPU tensor that needs no grad: the cheap way, shared
    except (RuntimeError, TypeError):
        array = value.detach().cpu().numpy()
    if array.dtype != dtype and array.dtype.kind in "iu" and isinstance(space, MULTI_DISCRETE):
        converted = array.astype(dtype)
        if not np.array_equal(converted, array):  # a value dtype cannot hold lies outside the space too
            check_action_values(owner, array, space)
        return converted
    if array.dtype != dtype:
        raise TypeError(
            f"{owner}: key 'action' has dtype {value.dtype}, but the action space "
            f"{space} needs {torch.from_numpy(np.zeros(0, dtype)).dtype}"
        )
    return array


def check_action_values(
    owner: str, array: np.ndarray[Any, Any], space: gym.Space[Any], rows: np.ndarray[Any, Any] | None = None
) -> None:
    """Refuse a Discrete, MultiDiscrete or MultiBinary action outside its space, naming the row.

    A Box action is left to the environment (most clip it). ``rows`` limits
    the check to the rows that are stepped (all when None).

    Raises:
        ValueError: if an action of ``rows`` lies outside ``space``.
    """
    if isinstance(space, gym.spaces.Discrete):
        low, high = space.start, space.start + space.n - 1
    elif isinstance(space, gym.spaces.MultiDiscrete):
        low, high = space.start, space.start + space.nvec - 1
    elif isinstance(space, gym.spaces.MultiBinary):
        low, high = 0, 1
    else:
        return
    values = array if rows is None else array[rows]
    outside = (values < low) | (values > high)
    if not outside.any():
        return
    bad = int(np.flatnonzero(outside.reshape(len(values), -1).any(axis=1))[0])
    row = bad if rows is None else int(rows[bad])
    raise ValueError(
        f"{owner}: key 'action' of row {row} is {array[row].tolist()}, outside the action space {space}"
    )


def with_flags(
    data: dict[str, torch.Tensor],
    n: int,
    reward: np.ndarray[Any, Any],
    terminated: np.ndarray[Any, Any],
    truncated: np.ndarray[Any, Any],
    initial: np.ndarray[Any, Any],
    last_action: np.ndarray[Any, Any],
) -> DictTensor:
    """The observation keys ``data`` (``n`` rows on the CPU) with the keys of ``rlstruct.env`` and ``last_action``.

    The arrays are wrapped, not copied; ``done`` is ``terminated | truncated``.
    """
    data["reward"] = torch.from_numpy(reward)
    data["terminated"] = torch.from_numpy(terminated)
    data["truncated"] = torch.from_numpy(truncated)
    data["done"] = torch.from_numpy(terminated | truncated)
    data["initial_state"] = torch.from_numpy(initial)
    data["last_action"] = torch.from_numpy(last_action)
    return DictTensor.unchecked(data, n, torch.device("cpu"))


class GymEnv(Environment):
    """``n_envs`` gymnasium environments stepped one after the other, returned as one batch.

    Args:
        env: a registered environment id (``"CartPole-v1"``, or
            ``"module:EnvId"`` to import the module that registers it), a
            callable returning a ``gymnasium.Env``, or ``"module:factory"``
            naming such a callable (see ``resolve_env``).
        n_envs: the number of instances.
        seed: the seed of instance 0; instance i gets ``seed + i``.
        reward_dtype: the dtype of ``reward`` (gymnasium rewards are Python floats).
        **make_kwargs: keyword arguments for every instance, under those of env_info.

    Raises:
        ValueError: if ``n_envs`` is not a positive int, or ``seed`` is
            negative; when an instance is
            made, if an entry of its Dict observation space is named as a key
            every observation holds (``FLAG_KEYS``).
        TypeError: if ``env`` is neither a str nor a callable; when an
            instance is made, if its action space is not a Box, Discrete,
            MultiDiscrete or MultiBinary, or its observation space holds a
            space of another kind.
    """

    def __init__(
        self,
        env: str | Callable[..., gym.Env[Any, Any]],
        n_envs: int = 1,
        seed: int = 0,
        *,
        reward_dtype: torch.dtype = torch.float32,
        **make_kwargs: Any,
    ) -> None:
        if not is_int(n_envs) or n_envs < 1:
            raise ValueError(f"GymEnv: n_envs must be a positive int, got {n_envs!r}")
        if not (isinstance(env, str) or callable(env)):
            raise TypeError(f"GymEnv: env must be an environment id or a callable, got {describe(env)}")
        if not is_int(seed):
            raise TypeError(f"GymEnv: seed must be an int, got {describe(seed)}")
        if seed < 0:
            raise ValueError(
                f"GymEnv: seed must be at least 0 (gymnasium takes no negative seed), got {seed}"
            )
        n_envs, seed = int(n_envs), int(seed)  # a NumPy int counts too
        if reward_dtype not in (torch.float16, torch.float32, torch.float64):
            raise TypeError(
                f"GymEnv: reward_dtype must be torch.float16, float32 or float64, got {reward_dtype!r}"
            )
        self.n_envs = n_envs
        self.name = env if isinstance(env, str) else getattr(env, "__name__", repr(env))
        self._make = resolve_env(env)
        self._make_kwargs = make_kwargs
        self._seed = seed
        self._reward_dtype = reward_dtype
        self._reward_numpy_dtype = torch.empty(0, dtype=reward_dtype).numpy().dtype
        self._envs: list[gym.Env[Any, Any] | None] = [None] * n_envs
        self._kwargs: list[dict[str, Any] | None] = [None] * n_envs
        self._seeded = [False] * n_envs
        self._auto_reset = False
        self._checked = False
        # id -> the mappings of arrays step_into has checked (kept, so that an id is not reused)
        self._into_checked: dict[int, Mapping[str, np.ndarray[Any, Any]]] = {}
        self._closed = False

    # ------------------------------------------------------------------ instances

    def _instance(self, i: int, env_info: DictTensor) -> gym.Env[Any, Any]:
        kwargs = {**self._make_kwargs, **_row_kwargs(env_info, i)}
        env, old = self._envs[i], self._kwargs[i]
        if env is None or old is None or not _same_kwargs(kwargs, old):
            if env is not None:
                env.close()
            env = gym.make(self._make, **kwargs) if isinstance(self._make, str) else self._make(**kwargs)
            if not isinstance(env, gym.Env):
                raise TypeError(
                    f"GymEnv({self.name!r}): the factory must return a gymnasium.Env, got {describe(env)}"
                )
            self._envs[i], self._kwargs[i], self._seeded[i] = env, kwargs, False
            self._check_spaces(i, env)
        return env

    def _check_spaces(self, i: int, env: gym.Env[Any, Any]) -> None:
        if i == 0 or not hasattr(self, "observation_space"):
            self.observation_space, self.action_space = env.observation_space, env.action_space
            self._leaves = _leaf_spaces(env.observation_space, owner=f"GymEnv({self.name!r})")
            self._dtypes = {k: _numpy_dtype(s) for k, s in self._leaves.items()}
            self._composite = isinstance(env.observation_space, _COMPOSITE)
            if not isinstance(env.action_space, ACTION_SPACES):
                raise TypeError(
                    f"GymEnv({self.name!r}): {type(env.action_space).__name__} action spaces are not supported; "
                    "use Box, Discrete, MultiDiscrete or MultiBinary (one tensor 'action' per row)"
                )
            self._action_dtype = _numpy_dtype(env.action_space)
            self._action_shape = env.action_space.shape or ()
            return
        if env.observation_space != self.observation_space or env.action_space != self.action_space:
            raise ValueError(
                f"GymEnv({self.name!r}): instance {i} has spaces {env.observation_space} / {env.action_space}, "
                f"instance 0 has {self.observation_space} / {self.action_space}; all instances must match"
            )

    def _reset_instance(self, i: int, seed: int | None = None) -> Any:
        env = self._envs[i]
        assert env is not None
        if seed is None and not self._seeded[i]:
            seed = self._seed + i
        if seed is None:
            observation, _ = env.reset()
        else:
            observation, _ = env.reset(seed=seed)
            env.action_space.seed(seed)
            self._seeded[i] = True
        return observation

    # ------------------------------------------------------------------ checks

    def _check_observation(self, i: int, observation: Any, when: str) -> None:
        """The env-checker test of one raw observation: every key has its space's dtype, shape and range."""
        for key, space in self._leaves.items():
            value = _leaf_value(observation, key, self._composite)
            array = np.asarray(value)
            expected = self._dtypes[key]
            if isinstance(space, gym.spaces.Discrete) and np.issubdtype(array.dtype, np.integer):
                array = array.astype(np.int64)
            if array.dtype != expected or array.shape != (space.shape or ()):
                raise ValueError(
                    f"GymEnv({self.name!r}), instance {i}: observation key {key!r} {when} has dtype {array.dtype} "
                    f"and shape {array.shape}, but the observation space declares {expected} and {space.shape or ()}"
                )
            if not space.contains(value):
                raise ValueError(
                    f"GymEnv({self.name!r}), instance {i}: observation key {key!r} {when} is {array!r}, "
                    f"which lies outside the observation space {space}"
                )

    def _actions(self, action: DictTensor) -> np.ndarray[Any, Any]:
        shape = (self.n_envs, *self._action_shape)
        return action_array(
            f"GymEnv({self.name!r}).step", action, shape, self._action_dtype, self.action_space
        )

    # ------------------------------------------------------------------ batches

    def _batch(
        self,
        observations: list[Any],
        reward: np.ndarray[Any, Any],
        terminated: np.ndarray[Any, Any],
        truncated: np.ndarray[Any, Any],
        initial: np.ndarray[Any, Any],
        last_action: np.ndarray[Any, Any],
    ) -> DictTensor:
        """One DictTensor of ``n_envs`` rows from the raw observations and flags (all copied)."""
        data = {}
        for key, dtype in self._dtypes.items():
            values = [_leaf_value(o, key, True) for o in observations] if self._composite else observations
            shape = self._leaves[key].shape or ()
            try:
                array = np.array(values)
            except ValueError:  # instances of different shapes
                array = None
            if array is None or array.shape[1:] != shape:
                bad = next(i for i, v in enumerate(values) if np.shape(v) != shape)
                raise ValueError(
                    f"GymEnv({self.name!r}), instance {bad}: observation key {key!r} has shape "
                    f"{np.shape(values[bad])}, but the observation space declares {shape}"
                )
            if array.dtype != dtype:
                if not (dtype == np.int64 and np.issubdtype(array.dtype, np.integer)):
                    bad = next(i for i, v in enumerate(values) if np.asarray(v).dtype != dtype)
                    raise ValueError(
                        f"GymEnv({self.name!r}), instance {bad}: observation key {key!r} has dtype "
                        f"{np.asarray(values[bad]).dtype}, but the observation space declares {dtype}"
                    )
                array = array.astype(np.int64)
            data[key] = torch.from_numpy(array)
        flags = (reward.astype(self._reward_numpy_dtype), terminated, truncated, initial, last_action)
        return with_flags(data, self.n_envs, *flags)

    def reset(self, env_info: DictTensor, auto_reset: bool = False) -> DictTensor:
        """Start a new episode in every instance; see ``Environment.reset``.

        Raises:
            TypeError: if ``env_info`` is not a DictTensor, or its ``seed``
                key does not hold one integer per row.
            ValueError: if ``env_info`` does not have ``n_envs`` rows, its
                ``seed`` key holds a negative seed, or an
                instance's first observation does not match its space.
            RuntimeError: after ``close``.
        """
        if self._closed:
            raise RuntimeError(f"GymEnv({self.name!r}): reset() after close()")
        if not isinstance(env_info, DictTensor):
            raise TypeError(
                f"GymEnv({self.name!r}).reset: env_info must be a DictTensor, got {describe(env_info)}"
            )
        if env_info.n_elems() != self.n_envs:
            raise ValueError(
                f"GymEnv({self.name!r}).reset: env_info must have {self.n_envs} rows (n_envs), "
                f"got {env_info.n_elems()}"
            )
        seeds = self._seeds(env_info)
        before = list(self._envs)
        for i in range(self.n_envs):
            self._instance(i, env_info)
        if any(env is not old for env, old in zip(self._envs, before, strict=True)):
            # a remade instance (0 included) is compared with all the others, and checked like a new one
            for i in range(1, self.n_envs):
                self._check_spaces(i, self._envs[i])  # type: ignore[arg-type]
            self._checked = False
        self._observations = [self._reset_instance(i, seeds[i]) for i in range(self.n_envs)]
        if not self._checked:
            for i, observation in enumerate(self._observations):
                self._check_observation(i, observation, "at reset")
        n = self.n_envs
        self._auto_reset = bool(auto_reset)
        self._running = np.ones(n, dtype=bool)
        self._terminated = np.zeros(n, dtype=bool)
        self._truncated = np.zeros(n, dtype=bool)
        self._last_action = np.zeros((n, *self._action_shape), dtype=self._action_dtype)
        self._step_checked = self._checked
        return self._batch(
            self._observations,
            np.zeros(n, dtype=np.float64),
            self._terminated,
            self._truncated,
            np.ones(n, dtype=bool),
            self._last_action.copy(),
        )

    def _seeds(self, env_info: DictTensor) -> list[int | None]:
        """The seed of each instance's reset: env_info's reserved ``seed`` key, or None."""
        if SEED_KEY not in env_info:
            return [None] * self.n_envs
        seeds = env_info[SEED_KEY]
        if (
            seeds.dim() != 1
            or seeds.dtype.is_floating_point
            or seeds.dtype.is_complex
            or seeds.dtype == torch.bool
        ):
            raise TypeError(
                f"GymEnv({self.name!r}).reset: env_info[{SEED_KEY!r}] must hold one integer per row, "
                f"got dtype {seeds.dtype} and shape {list(seeds.shape)}"
            )
        values = [
            int(v) for v in seeds.tolist()
        ]  # compared in Python: torch compares no unsigned dtype but uint8
        negative = [row for row, v in enumerate(values) if v < 0]
        if negative:
            raise ValueError(
                f"GymEnv({self.name!r}).reset: env_info[{SEED_KEY!r}] must hold seeds of at least 0 "
                f"(gymnasium takes no negative seed), got {values[negative[0]]} in row {negative[0]}"
            )
        return [*values]

    def step(self, action: DictTensor) -> tuple[DictTensor, DictTensor]:
        """Step every running instance; see ``Environment.step`` for what comes back.

        Raises:
            TypeError: if the action is not a DictTensor or has another dtype
                than the action space.
            ValueError: if the key ``action`` is missing or has the wrong shape, or
                a Discrete, MultiDiscrete or MultiBinary action lies outside its space,
                or (at the first step) an observation does not match its space
                or a reward is not a number.
            RuntimeError: before ``reset`` or after ``close``.
        """
        if self._closed:
            raise RuntimeError(f"GymEnv({self.name!r}): step() after close()")
        if not hasattr(self, "_running"):
            raise RuntimeError(f"GymEnv({self.name!r}): step() before reset()")
        actions = self._actions(action)
        n = self.n_envs
        envs = self._envs
        owner = f"GymEnv({self.name!r}).step"
        if self._auto_reset:  # every instance runs: no index bookkeeping on this path
            running = range(n)
            check_action_values(owner, actions, self.action_space)
            results = [envs[i].step(actions[i]) for i in running]  # type: ignore[union-attr]
        else:
            running = np.flatnonzero(self._running)  # type: ignore[assignment]
            check_action_values(owner, actions, self.action_space, running)  # type: ignore[arg-type]
            results = [envs[i].step(actions[i]) for i in running]  # type: ignore[union-attr]
        if not self._step_checked:
            self._check_first_step(running, results)
        last_action = self._last_action
        if self._auto_reset:
            observations, rewards, terms, truncs, _ = zip(*results, strict=True)
            self._observations = list(observations)
            reward = np.array(rewards, dtype=np.float64)
            terminated, truncated = np.array(terms, dtype=bool), np.array(truncs, dtype=bool)
            last_action[:] = actions
        else:
            reward = np.zeros(n, dtype=np.float64)
            terminated, truncated = self._terminated.copy(), self._truncated.copy()
            if results:
                observations, rewards, terms, truncs, _ = zip(*results, strict=True)
                for i, observation in zip(running, observations, strict=True):
                    self._observations[i] = observation
                reward[running], terminated[running], truncated[running] = rewards, terms, truncs
                last_action[running] = actions[running]
        done = terminated | truncated
        reached = self._batch(
            self._observations, reward, terminated, truncated, np.zeros(n, dtype=bool), last_action.copy()
        )
        if not done.any():
            return reached, reached
        if not self._auto_reset:
            self._running &= ~done
            self._terminated, self._truncated = terminated, truncated
            return reached, reached
        for j in np.flatnonzero(done).tolist():
            self._observations[j] = self._reset_instance(j)
        last_action[done] = 0
        following = self._batch(
            self._observations,
            np.where(done, 0.0, reward),
            terminated & ~done,
            truncated & ~done,
            done,
            last_action.copy(),
        )
        return reached, following

    def _check_first_step(self, running: Any, results: list[Any]) -> None:
        """The env-checker tests of the first step's results: observations in their spaces, number rewards."""
        for i, (observation, r, *_) in zip(running, results, strict=True):
            self._check_observation(int(i), observation, "after the first step")
            if not isinstance(r, (int, float, np.integer, np.floating)) or isinstance(r, bool):
                raise ValueError(
                    f"GymEnv({self.name!r}), instance {i}: the reward of the first step is "
                    f"{describe(r)}, expected a number"
                )
        self._step_checked = self._checked = True

    def step_into(
        self,
        action: DictTensor,
        reached: Mapping[str, np.ndarray[Any, Any]],
        observation: Mapping[str, np.ndarray[Any, Any]],
    ) -> None:
        """Step every instance, in auto-reset mode, writing the result in place; see ``Environment.step_into``.

        Each observation is written once, straight from the instance's array
        into ``reached``; ``observation`` is then copied from ``reached`` and
        the rows of the instances that reset are patched in place.

        Raises:
            RuntimeError: unless ``reset`` was called with ``auto_reset=True``,
                or after ``close``.
            ValueError: if ``reached`` or ``observation`` lacks a key of this
                environment's, or an observation does not have its space's
                dtype; and as for ``step``.
            TypeError: as for ``step``.
        """
        if self._closed:
            raise RuntimeError(f"GymEnv({self.name!r}): step_into() after close()")
        if not self._auto_reset or not hasattr(self, "_running"):
            raise RuntimeError(
                f"GymEnv({self.name!r}): step_into() needs reset(env_info, auto_reset=True) first"
            )
        actions = self._actions(action)
        check_action_values(f"GymEnv({self.name!r}).step_into", actions, self.action_space)
        envs = self._envs
        results = [envs[i].step(actions[i]) for i in range(self.n_envs)]  # type: ignore[union-attr]
        if not self._step_checked:
            self._check_first_step(range(self.n_envs), results)
        checked = self._into_checked
        if id(reached) not in checked or id(observation) not in checked:
            self._check_into(reached, observation)
        observations, rewards, terms, truncs, _ = zip(*results, strict=True)
        for key in self._castings:
            values = [_leaf_value(o, key, True) for o in observations] if self._composite else observations
            self._write_rows(key, reached[key], values)
        reached["reward"][:] = rewards
        terminated, truncated, done = reached["terminated"], reached["truncated"], reached["done"]
        terminated[:] = terms
        truncated[:] = truncs
        np.logical_or(terminated, truncated, out=done)
        reached["initial_state"][:] = False
        reached["last_action"][:] = actions
        for key, value in reached.items():
            np.copyto(observation[key], value)
        last_action = self._last_action
        last_action[:] = actions
        if not done.any():
            return
        for j in np.flatnonzero(done).tolist():
            first = self._reset_instance(j)
            for key in self._castings:
                self._write_rows(key, observation[key][j : j + 1], [_leaf_value(first, key, self._composite)])
        for key in ("reward", "terminated", "truncated", "done"):
            observation[key][done] = 0
        observation["initial_state"][done] = True
        observation["last_action"][done] = 0
        last_action[done] = 0

    def _write_rows(self, key: str, out: np.ndarray[Any, Any], values: Any) -> None:
        """Copy one observation key of each instance (``values``) into the rows of ``out``, nothing cast.

        Small rows are stacked in one call; large ones (frames) are copied
        row by row, straight from each instance's array into ``out``.
        """
        casting = self._castings[key]
        try:
            if out.itemsize * out[0].size < _ROW_BY_ROW:
                array = np.asarray(values)
                if array.shape != out.shape:
                    raise ValueError(f"shape {array.shape}")
                np.copyto(out, array, casting=casting)
                return
            for i, value in enumerate(values):
                value = np.asarray(value)
                if value.shape != out.shape[1:] or not np.can_cast(value.dtype, out.dtype, casting):
                    raise ValueError(f"dtype {value.dtype} and shape {value.shape} in instance {i}")
                out[i] = value
        except (TypeError, ValueError) as error:
            raise ValueError(
                f"GymEnv({self.name!r}).step_into: observation key {key!r} must have dtype {out.dtype} "
                f"and shape {out.shape[1:]} in every instance, as its space declares; got {error}"
            ) from error

    def _check_into(
        self, reached: Mapping[str, np.ndarray[Any, Any]], observation: Mapping[str, np.ndarray[Any, Any]]
    ) -> None:
        """The arrays of ``step_into`` hold exactly this environment's keys, with their dtypes and shapes."""
        n = self.n_envs
        expected = {
            key: (dtype, (n, *(self._leaves[key].shape or ()))) for key, dtype in self._dtypes.items()
        }
        expected["reward"] = (self._reward_numpy_dtype, (n,))
        for key in ("terminated", "truncated", "done", "initial_state"):
            expected[key] = (np.dtype(bool), (n,))
        expected["last_action"] = (self._action_dtype, (n, *self._action_shape))
        for name, arrays in (("reached", reached), ("observation", observation)):
            got = {k: (np.asarray(v).dtype, np.asarray(v).shape) for k, v in arrays.items()}
            if got != expected:
                raise ValueError(
                    f"GymEnv({self.name!r}).step_into: {name} must map the keys {expected} "
                    f"(dtype, shape), got {got}"
                )
        self._castings: dict[str, Literal["no", "same_kind"]] = {
            key: "same_kind" if isinstance(space, gym.spaces.Discrete) else "no"
            for key, space in self._leaves.items()
        }
        if len(self._into_checked) > 4096:  # the arrays of storage no longer used: let it go
            self._into_checked.clear()
        self._into_checked.update({id(reached): reached, id(observation): observation})

    def close(self) -> None:
        """Close every instance. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        for env in self._envs:
            if env is not None:
                env.close()
        self._envs = [None] * self.n_envs
