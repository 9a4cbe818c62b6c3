"""What every training run is configured with, how it is checked, and command lines made from config dataclasses.

Each algorithm's ``Config`` is a dataclass that extends ``TrainConfig`` and
documents every field with a docstring right under it. Its module's
``check(config)`` makes every check that can be made before anything starts,
from the pieces here (``check_config``, ``check_layout``, ``check_env``),
inside ``config_errors()``, which raises what they find as a ``ConfigError``.
``parse_config`` turns such a class into a command line: one ``--flag`` per
field (underscores become dashes), whose help is the field's docstring; its
mistakes are one line on standard error (``OneLineParser``).

Examples:
    >>> from rlstruct.algos.config import TrainConfig, parse_config
    >>> config = parse_config(TrainConfig, ["--env", "CartPole-v1", "--total-steps", "1000"])
    >>> config.env, config.total_steps, config.seed
    ('CartPole-v1', 1000, 0)
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import dataclasses
import inspect
import itertools
import json
import math
import numbers
import os
import re
import sys
import textwrap
import typing
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, NoReturn, TypeVar

import numpy as np
import torch

from rlstruct.algos.agents import named_agent, with_agent_name
from rlstruct.algos.evaluation import EnvSpaces, env_spaces
from rlstruct.checks import cannot_write, check_choice, check_int, check_number
from rlstruct.dicttensor import DictTensor
from rlstruct.errors import AgentError, ConfigError, describe
from rlstruct.gym_env import MAKE_ERRORS, GymEnv, UnknownEnvironment, resolve_env
from rlstruct.gym_vector_env import GymVectorEnv
from rlstruct.learning.actor_critic import MEMORIES
from rlstruct.seeding import SEEDS
from rlstruct.torch_envs import TORCH_TASKS

__all__ = [
    "ACTIONS",
    "ALGORITHMS",
    "ENV_BACKENDS",
    "OneLineParser",
    "TrainConfig",
    "annealed",
    "check_config",
    "check_device",
    "check_env",
    "check_fits_memory",
    "check_hidden",
    "check_layout",
    "check_only_with",
    "check_recurrent_only",
    "check_replay",
    "config_errors",
    "env_key",
    "field_docs",
    "parse_config",
    "set_learning_rate",
    "stored_config",
]

ENV_BACKENDS = ("gymnasium", "vector", "torch")
"""The values of ``TrainConfig.env_backend``."""

ALGORITHMS = ("a2c", "dqn", "impala", "ppo", "sac")
"""The algorithms ``rlstruct train`` knows, each a module ``rlstruct.algos.<name>``."""

ACTIONS: dict[str, tuple[str, ...]] = {
    "a2c": ("discrete", "continuous", "multidiscrete"),
    "dqn": ("discrete",),
    "impala": ("discrete", "continuous", "multidiscrete"),
    "ppo": ("discrete", "continuous", "multidiscrete"),
    "sac": ("continuous",),
}
"""The actions each algorithm takes: "discrete" (a ``Discrete`` space), "continuous" (a ``Box``),
"multidiscrete" (a ``MultiDiscrete`` or ``MultiBinary``)."""

_NEEDS = {"discrete": "discrete", "continuous": "continuous (Box)", "multidiscrete": "multi-discrete"}
"""How a refusal names the actions an algorithm needs, by the kind it takes."""

C = TypeVar("C", bound="TrainConfig")


@dataclasses.dataclass
class TrainConfig:
    """The fields every algorithm shares."""

    ADDED_FIELDS: ClassVar[dict[str, Any]] = {}
    """Fields added since runs were first saved whose default does something new, with the value that does
    what runs saved before them did: a config.json without the field is read with this value (``stored_config``)."""

    env: str = ""
    """The environment id, as for ``gymnasium.make`` ("module:EnvId" imports the module first)."""
    env_backend: str = "gymnasium"
    """How the training environments are stepped: "gymnasium" (one gymnasium object per environment), "vector" (gymnasium.make_vec, one vector environment per worker: GymVectorEnv) or "torch" (the id written in torch, all of a worker's environments stepped as arrays: rlstruct.torch_envs). With "torch" and --device cuda, the environments run on the GPU in the learner's process, with the agent and the batches, and --n-processes is not used (IMPALA keeps its worker processes). Evaluations play gymnasium's own environment either way."""
    total_steps: int = 50_000
    """Environment steps of training (all environments counted)."""
    seed: int = 0
    """Seeds the learner's torch generator, and through ``rlstruct.seeding`` the environments, agents and evaluations."""
    device: str = "cpu"
    """Where the learner's model and batches live: "cpu" or "cuda" (pinned copies, non-blocking)."""
    n_processes: int = 2
    """Worker processes of the collection batcher."""
    eval_every: int = 10_000
    """Environment steps between evaluations (run in a worker alongside training)."""
    eval_episodes: int = 10
    """Episodes of each evaluation, with the greedy (or deterministic) policy."""
    run_dir: str = "runs"
    """The folder under which each run makes its own directory of logs, checkpoint and plot."""
    json: str | None = None
    """If set, the final results are written to this JSON file."""
    progress: bool = True
    """Show a progress line while training."""
    checkpoint_every: int = 0
    """Environment steps between the checkpoints that ``--resume`` continues from (0: only the final one).

    At each one the collection restarts, in the run and in any run resumed from
    it alike: new episodes, from seeds derived from the run's seed and the
    checkpoint's number. That is what makes a resumed run bit-identical to an
    uninterrupted one."""
    resume: str | None = None
    """A run directory to continue from its last checkpoint, with the settings of its config.json."""
    agent: str | type | None = None
    """Train your own Agent instead of the built-in network: "module:Class" or "path/to/file.py:Class" (every algorithm; see docs/agents.md)."""
    agent_args: dict[str, Any] | None = None
    """Keyword arguments of ``agent``'s class, a JSON object on the command line ('{"hidden": 128}')."""
    stop_at_return: float | None = None
    """Stop training once an evaluation's mean return reaches this (``EarlyStop``); the final evaluation, checkpoint and plot still follow."""
    stop_patience: int = 0
    """Stop training after this many evaluations in a row without a better mean return (``EarlyStop``; 0: never)."""
    save_best: bool = False
    """Save the weights of the best evaluation as best.pt in the run directory (``SaveBest``); rlstruct eval RUN_DIR/best.pt plays them."""


def annealed(value: float, env_steps: int, total_steps: int, anneal: bool = True) -> float:
    """``value`` decayed linearly to 0 over ``total_steps``, once ``env_steps`` are done; ``value`` without ``anneal``.

    The algorithms anneal their learning rates (and PPO its clip range) this
    way, with the env steps done before the batch they train on.

    Examples:
        >>> annealed(1e-3, 25_000, 100_000), annealed(1e-3, 25_000, 100_000, anneal=False)
        (0.00075, 0.001)
    """
    return value * (1.0 - env_steps / total_steps) if anneal else value


def set_learning_rate(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """Set the learning rate of every parameter group of ``optimizer`` to ``lr``."""
    for group in optimizer.param_groups:
        group["lr"] = lr


def check_config(config: TrainConfig, **positive: int | float) -> None:
    """Raise naming the first common field that is wrong (then the first of ``positive`` that is not positive).

    Every field must be of its declared type (``check_field_types``),
    ``env`` set, ``seed`` one torch takes, ``torch_threads`` (where the
    config has it) at most ``MAX_THREADS``, the common sizes positive,
    ``checkpoint_every`` and
    ``stop_patience`` ints >= 0, ``stop_at_return`` finite (or None),
    ``device`` one this torch can use (``check_device``), ``run_dir`` a
    folder (or none yet; not ``""``) and ``json`` a file in an existing folder.

    Raises:
        TypeError: for a field that is not a number.
        ValueError: for any other mistake.
    """
    check_field_types(config)
    if not isinstance(config.env, str) or not config.env:
        raise ValueError(f"config.env must name an environment, got {config.env!r}")
    if not SEEDS[0] <= config.seed <= SEEDS[1]:
        raise ValueError(
            f"config.seed must be in [{SEEDS[0]}, {SEEDS[1]}] (torch's seeds), got {config.seed}"
        )
    threads = getattr(config, "torch_threads", 1)
    if isinstance(threads, int) and threads > MAX_THREADS:
        raise ValueError(f"config.torch_threads must be at most {MAX_THREADS}, got {threads}")
    fields: dict[str, int | float] = {
        "total_steps": config.total_steps,
        "n_processes": config.n_processes,
        "eval_every": config.eval_every,
        "eval_episodes": config.eval_episodes,
        **positive,
    }
    for name, value in fields.items():
        check_number("config", name, value, 0, low_open=True)
    every = config.checkpoint_every
    if isinstance(every, bool) or not isinstance(every, int) or every < 0:
        raise ValueError(
            f"config.checkpoint_every must be an int >= 0 (0: no checkpoint before the end), got {every!r}"
        )
    if config.stop_at_return is not None:
        check_number("config", "stop_at_return", config.stop_at_return)
    check_int("config", "stop_patience", config.stop_patience, 0)
    check_device(config.device)
    check_choice("config", "env_backend", config.env_backend, ENV_BACKENDS)
    if config.env_backend == "torch" and config.env not in TORCH_TASKS:
        raise ValueError(
            f"config.env_backend 'torch' needs an id written in torch: one of {sorted(TORCH_TASKS)}, "
            f"got {config.env!r}"
        )
    if config.env_backend == "vector":  # made once, so that a vector env gymnasium cannot give stops here
        try:
            if not isinstance(resolve_env(config.env), str):
                raise ValueError(  # told as the backend's, below
                    f"config.env {config.env!r} names a factory, and gymnasium.make_vec needs a registered "
                    "id: use config.env_backend 'gymnasium'"
                )
            GymVectorEnv(config.env, n_envs=1).close()
        except MAKE_ERRORS as error:
            raise UnknownEnvironment(config.env, error) from error
        except ValueError as error:
            if "NEXT_STEP" not in str(error):
                raise ValueError(f"config.env_backend 'vector': {error}") from error
            instead = "'torch' or 'gymnasium'" if config.env in TORCH_TASKS else "'gymnasium'"
            raise ValueError(
                f"config.env_backend 'vector': gymnasium's vector {config.env!r} resets an ended "
                f"environment one step late (NEXT_STEP), which rlstruct cannot use; use config.env_backend {instead}"
            ) from error
    # "" would put the run directory in the current folder, unasked
    if config.run_dir == "" or (Path(config.run_dir).exists() and not Path(config.run_dir).is_dir()):
        got = "''" if config.run_dir == "" else f"the file {config.run_dir!r}"
        raise ValueError(f"config.run_dir must be a folder (or one to make), got {got}")
    if config.json is not None and (
        config.json == "" or not Path(config.json).parent.is_dir() or Path(config.json).is_dir()
    ):
        got = (
            f"the folder {config.json!r}" if config.json and Path(config.json).is_dir() else repr(config.json)
        )
        raise ValueError(f"config.json must be a file in an existing folder, got {got}")
    if config.json is not None and (why := cannot_write(config.json)):  # found now, not after training
        raise ValueError(f"config.json {config.json!r} cannot be written: {why}")


def check_run(algo: str, config: TrainConfig) -> None:
    """What ``train`` would find later, found now: the agent ``config.agent`` names, and the run ``resume`` names.

    ``agent`` must name a class that can be found (``agent_args`` only with
    it: ``named_agent``), and ``resume`` a run directory whose config.json
    holds ``config``'s settings (``check_resume``). Called by each
    algorithm's ``check`` after its own fields, with its name ``algo``.

    Raises:
        AgentError: for an ``agent`` that cannot be found, or ``agent_args`` without one.
        ValueError: as ``check_resume``.
    """
    named_agent(config, algo)
    if config.resume is not None:
        check_resume(config)


def check_resume(config: TrainConfig) -> None:
    """``config.resume`` must be a run directory whose config.json holds ``config``'s settings.

    A resumed run continues bit-identically only with the settings it
    started with: every field but ``RESUME_OVERRIDES`` and ``run_dir`` (a
    resumed run writes into ``resume``) must be as in the
    run's config.json (read as ``stored_config`` reads it; an Agent class in
    ``agent`` as its ``"module:Class"``). From Python, continue a run with
    ``dataclasses.replace(config, resume=run_dir)`` of the config it ran.

    Raises:
        ValueError: naming ``config.resume`` and what is wrong: no such
            folder, no readable config.json, or the fields that differ, with
            both values.
    """
    if config.resume == "":  # not the current folder
        raise ValueError("config.resume must name a run directory, got ''")
    folder = Path(config.resume or "")
    if not folder.is_dir():
        state = "is a file" if folder.exists() else "does not exist"
        raise ValueError(
            f"config.resume {str(folder)!r} {state}; expected a run directory written by rlstruct train"
        )
    path = folder / "config.json"
    try:
        stored = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(
            f"config.resume: {str(path)!r} does not exist; expected a run directory written by rlstruct train"
        ) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:  # a folder, a binary file, bad JSON
        raise ValueError(f"config.resume: {str(path)!r} cannot be read ({error})") from None
    names = {field.name for field in dataclasses.fields(config)}
    if not isinstance(stored, dict) or set(stored) - names:
        unknown = sorted(set(stored) - names) if isinstance(stored, dict) else stored
        raise ValueError(
            f"config.resume: {str(path)!r} is not a config of {type(config).__module__}: unknown fields {unknown}"
        )
    # as --resume reads it: the fields it lacks at their defaults (or ADDED_FIELDS), in config.json's form
    ran = json.loads(
        json.dumps(dataclasses.asdict(type(config)(**stored_config(type(config), stored))), default=str)
    )
    given = json.loads(json.dumps(dataclasses.asdict(with_agent_name(config)), default=str))
    differ = [
        f"{name} ({given[name]!r}; the run's {ran[name]!r})"
        for name in given
        if name not in (*RESUME_OVERRIDES, "run_dir") and given[name] != ran[name]  # it runs in resume
    ]
    if differ:
        raise ValueError(
            f"config.resume continues {str(folder)!r} with the settings of its config.json, and these "
            f"differ: {', '.join(differ)}; use the config the run was trained with"
        )


MAX_THREADS = 2**31 - 1
"""The most threads ``torch.set_num_threads`` takes."""


def check_config_class(algo: str, config: object, cls: type) -> None:
    """Raise a TypeError unless ``config`` is a ``cls``, the ``Config`` of ``algo``.

    Each algorithm's ``check`` reads its own fields, so another algorithm's
    ``Config`` (``ppo.train(a2c.Config(...))``) would otherwise fail on the
    first field it lacks, with an AttributeError.

    Examples:
        >>> from rlstruct.algos import a2c, ppo
        >>> check_config_class("ppo", a2c.Config(env="CartPole-v1"), ppo.Config)
        Traceback (most recent call last):
            ...
        TypeError: config must be a ppo.Config, got an a2c.Config
    """
    if isinstance(config, cls):
        return
    got, kind = describe(config), type(config)
    module, _, name = kind.__module__.rpartition(".")
    if module == "rlstruct.algos" and kind.__qualname__ == "Config":  # another algorithm's: name it as such
        got = _a_config(name)
    elif isinstance(config, TrainConfig):  # a class of the user's
        got = f"a {kind.__module__}.{kind.__qualname__}"
    raise TypeError(f"config must be {_a_config(algo)}, got {got}")


def _a_config(algo: str) -> str:
    """``"a ppo.Config"``, ``"an a2c.Config"``."""
    return f"{'an' if algo[0] in 'aeiou' else 'a'} {algo}.Config"


def check_field_types(config: Any) -> None:
    """Raise a TypeError naming the first field whose value is not of its declared type.

    An int field takes an int (not a bool or a float), a float field any real
    number but a bool, a bool field a bool, a str field a str, a dict field a
    dict; ``X | None`` also takes None. The command line parses each flag to
    its type, so this guards the configs made in Python.

    Examples:
        >>> from rlstruct.algos import ppo
        >>> check_field_types(ppo.Config(env="CartPole-v1", n_envs=8.0))
        Traceback (most recent call last):
            ...
        TypeError: config.n_envs must be an int, got a float
    """
    hints = typing.get_type_hints(type(config))
    for field in dataclasses.fields(config):
        hint, value = hints[field.name], getattr(config, field.name)
        kinds = [typing.get_origin(a) or a for a in (typing.get_args(hint) or (hint,))]  # X | Y: each
        if not all(kind in _ARTICLE for kind in kinds):
            continue  # a type this check does not know
        if not any(_is(value, kind) for kind in kinds):
            expected = " or ".join(_ARTICLE[kind] for kind in kinds)
            raise TypeError(f"config.{field.name} must be {expected}, got {describe(value)}")


_ARTICLE: dict[Any, str] = {
    int: "an int",
    float: "a number",
    bool: "a bool",
    str: "a str",
    dict: "a dict (a JSON object)",
    type: "a class",
    type(None): "None",
}


def _is(value: object, kind: Any) -> bool:
    """Whether ``value`` is of the field type ``kind``: a bool is no int nor number, an int is a number."""
    if kind in (int, float):
        number = int if kind is int else numbers.Real
        return isinstance(value, number) and not isinstance(value, bool)
    return value is None if kind is type(None) else isinstance(value, kind)


def check_device(device: object) -> None:
    """Raise unless ``device`` is a device this torch can train on: "cpu", or "cuda" ("cuda:N") with a GPU.

    Raises:
        TypeError: for a device that is neither a str nor a ``torch.device``.
        ValueError: for a name torch cannot parse, a device type other than
            cpu and cuda, or cuda when ``torch.cuda.is_available()`` is False
            or the GPU ``N`` does not exist.

    Examples:
        >>> check_device("cpu")
        >>> check_device("gpu")
        Traceback (most recent call last):
            ...
        ValueError: config.device must be 'cpu' or 'cuda' ('cuda:N' for GPU N), got 'gpu'
    """
    if not isinstance(device, (str, torch.device)):
        raise TypeError(f"config.device must be a str such as 'cpu' or 'cuda', got {device!r}")
    expected = f"config.device must be 'cpu' or 'cuda' ('cuda:N' for GPU N), got {device!r}"
    try:
        parsed = torch.device(device)
    except RuntimeError as error:
        raise ValueError(expected) from error
    if parsed.type not in ("cpu", "cuda"):
        raise ValueError(expected)
    if parsed.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(
            f"config.device is {device!r} but this torch cannot use a GPU (torch.cuda.is_available() is False)"
        )
    n_gpus = torch.cuda.device_count() if parsed.type == "cuda" else 0
    if parsed.type == "cuda" and parsed.index is not None and parsed.index >= n_gpus:
        raise ValueError(
            f"config.device is {device!r} but torch sees {n_gpus} GPU(s): cuda:0 to cuda:{n_gpus - 1}"
        )


def check_actor_critic(config: Any) -> None:
    """Raise ValueError for an actor-critic field out of range (A2C, PPO, IMPALA).

    ``gamma`` (and ``gae_lambda``, where the config has one) in [0, 1],
    ``ent_coef`` and ``vf_coef`` >= 0, ``memory`` one of ``MEMORIES``; for
    the built-in agent, ``memory`` left at its default without
    ``recurrent`` and ``hidden`` within the device's memory.
    """
    for name in ("gamma", "gae_lambda"):
        if hasattr(config, name):
            check_number("config", name, getattr(config, name), 0.0, 1.0)
    for name in ("ent_coef", "vf_coef"):
        check_number("config", name, getattr(config, name), 0.0)
    check_choice("config", "memory", config.memory, tuple(MEMORIES))
    if config.agent is None:  # your own agent reads neither
        check_recurrent_only(config, "memory")
        check_hidden(config)


def check_recurrent_only(config: Any, *names: str) -> None:
    """Raise ValueError for a field of ``names`` that only the recurrent agent reads, changed without ``recurrent``.

    A field left at its default passes: the check can only see a value
    that differs from it (``--memory lstm`` without ``--recurrent``).
    """
    check_only_with(config, "recurrent", "the recurrent agent", *names)


def check_only_with(config: Any, switch: str, what: str, *names: str) -> None:
    """Raise ValueError for a field of ``names`` changed from its default while the bool field ``switch`` is off.

    ``what`` names what reads the fields, in the message.
    """
    if getattr(config, switch):
        return
    defaults = {field.name: field.default for field in dataclasses.fields(config)}
    for name in names:
        value = getattr(config, name)
        if value != defaults[name]:
            raise ValueError(
                f"config.{name} ({value!r}) is a setting of {what} and needs config.{switch} "
                f"(--{switch}); without it, leave config.{name} at {defaults[name]!r}"
            )


def machine_memory(device: str) -> int | None:
    """The bytes of memory of ``device``: the machine's physical memory for "cpu", the GPU's for "cuda";
    None where it cannot be read."""
    if torch.device(device).type == "cuda":
        return int(torch.cuda.get_device_properties(torch.device(device)).total_memory)
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):  # a platform without these names
        return None


def _size(n_bytes: float) -> str:
    """``n_bytes`` in the largest unit that keeps it at 1 or more (``'24.0 GB'``)."""
    for unit in ("B", "kB", "MB", "GB", "TB", "PB"):
        if n_bytes < 1000 or unit == "PB":
            return f"{n_bytes:.1f} {unit}"
        n_bytes /= 1000
    raise AssertionError("unreachable")


def check_fits_memory(config: Any, name: str, n_bytes: float, what: str) -> None:
    """Raise ValueError naming ``config.<name>`` if ``n_bytes`` (what it asks for) exceed ``config.device``'s memory.

    Caught here, before a run directory is made, instead of as an
    allocation failure once training has started.
    """
    total = machine_memory(config.device)
    if total is not None and n_bytes > total:
        raise ValueError(
            f"config.{name} ({getattr(config, name)}) asks for {what} of at least {_size(n_bytes)}, more than "
            f"the {_size(total)} of memory of config.device {config.device!r}"
        )


def check_replay(config: Any, spaces: EnvSpaces) -> None:
    """Raise ValueError unless ``buffer_size`` holds a batch (``batch_size``) and fits ``config.device``'s memory.

    A transition's bytes are counted from the environment's spaces: its
    observation twice (now and next), the action and the reward.
    """
    if config.buffer_size < config.batch_size:
        raise ValueError(
            f"config.buffer_size ({config.buffer_size}) must hold at least one batch of "
            f"config.batch_size ({config.batch_size}) transitions"
        )
    observation = sum(math.prod(space.shape) * space.dtype.itemsize for space in spaces.observation.values())
    if spaces.n_actions is not None:
        action = 8
    elif spaces.action_nvec is not None:
        action = 8 * len(spaces.action_nvec)
    else:
        action = 4 * len(spaces.action_low or ())
    check_fits_memory(
        config, "buffer_size", config.buffer_size * (2 * observation + action + 4), "a replay buffer"
    )


def check_hidden(config: Any) -> None:
    """Raise ValueError if a ``hidden x hidden`` float32 weight (every network here has one) exceeds the memory."""
    check_fits_memory(config, "hidden", 4 * config.hidden**2, "a hidden layer's weights")


def check_layout(config: TrainConfig, n_envs: int, n_steps: int | None) -> None:
    """Raise ValueError unless ``n_envs`` splits evenly across the workers and, with ``n_steps``,
    ``total_steps`` allows one iteration of ``n_envs x n_steps`` steps."""
    if n_envs % config.n_processes:
        raise ValueError(
            f"config.n_envs ({n_envs}) must be a multiple of config.n_processes ({config.n_processes})"
        )
    if n_steps is not None and config.total_steps < n_envs * n_steps:
        raise ValueError(
            f"config.total_steps ({config.total_steps}) must allow one iteration of "
            f"n_envs x n_steps = {n_envs * n_steps} steps"
        )


def check_env(algo: str, env: str) -> EnvSpaces:
    """The spaces of ``env`` (``env_spaces``: the environment made once), checked to have actions ``algo`` takes.

    The environment is then made once more as a ``GymEnv`` of one instance,
    reset and stepped once with a random action (``first_step``), so that
    what ``GymEnv`` checks of a first step (observations in their space,
    rewards that are numbers) is found here, before a run starts.

    Returns:
        The spaces, for the caller to build its agent with.

    Raises:
        UnknownEnvironment: for an id gymnasium cannot make.
        ValueError: for actions ``algo`` cannot take (see ``ACTIONS``),
            naming the algorithms that can; for a space no algorithm takes;
            for a first step ``GymEnv`` refuses.
        TypeError: for an observation space ``GymEnv`` cannot store.
    """
    try:
        spaces = env_spaces(env)
    except UnknownEnvironment:
        raise
    except (TypeError, ValueError) as error:  # one that names the field
        raise type(error)(f"config.env: {error}") from error
    if spaces.n_actions is not None:
        kind, space = "discrete", f"Discrete({spaces.n_actions})"
    elif spaces.action_nvec is not None:  # a MultiBinary(n) is named as the MultiDiscrete it acts as
        kind, space = "multidiscrete", f"MultiDiscrete([{' '.join(map(str, spaces.action_nvec))}])"
    else:  # the bounds are flattened: a Box of any shape counts its numbers
        kind, space = "continuous", f"Box({len(spaces.action_low or ())},)"
    if kind not in ACTIONS[algo]:
        needs = " or ".join(_NEEDS[k] for k in ACTIONS[algo])
        if kind == "multidiscrete" and "discrete" in ACTIONS[algo]:  # discrete too, but not of one component
            needs = "single discrete (Discrete)"
        fit = [name for name, kinds in ACTIONS.items() if kind in kinds]
        raise ValueError(
            f"{algo} needs {needs} actions; config.env {env!r} has {space}: "
            f"try {', '.join(fit[:-1])} or {fit[-1]}"
        )
    first_step(env)
    return spaces


def first_step(env: str) -> None:
    """Reset ``env`` and take one random step through a ``GymEnv`` of one instance, then close it.

    Raises:
        ValueError, TypeError: naming ``config.env``, for what ``GymEnv``
            refuses of a reset or a first step (a reward that is not a
            number, an observation outside its space).
    """
    made = GymEnv(env, n_envs=1, seed=0)
    try:
        made.reset(DictTensor(batch_size=1))
        action = torch.as_tensor(np.asarray(made.action_space.sample())).unsqueeze(0)
        made.step(DictTensor({"action": action}))
    except (TypeError, ValueError) as error:
        raise type(error)(f"config.env: {error}") from error
    finally:
        made.close()


@contextlib.contextmanager
def config_errors() -> Iterator[None]:
    """Raise a ValueError or TypeError of the checks inside as a ``ConfigError``, the original as its cause.

    ``UnknownEnvironment`` and ``AgentError`` pass as they are: they have
    their own meaning, and ``rlstruct train`` reports them as it does a
    ``ConfigError``.

    Examples:
        >>> with config_errors():
        ...     check_number("config", "gamma", 1.5, 0.0, 1.0)
        Traceback (most recent call last):
            ...
        rlstruct.errors.ConfigError: config: gamma must be in [0, 1], got 1.5
    """
    try:
        yield
    except (ConfigError, UnknownEnvironment, AgentError):
        raise
    except (TypeError, ValueError) as error:
        raise ConfigError(str(error)) from error


def field_docs(cls: type) -> dict[str, str]:
    """The docstring under each field of a dataclass and its bases, by field name."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        body = tree.body[0].body  # type: ignore[attr-defined]
        for node, after in itertools.pairwise(body):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                docs[node.target.id] = " ".join(after.value.value.split())
    return docs


def _parser_type(name: str, hint: Any) -> tuple[Any, dict[str, Any]]:
    """The argparse ``type`` (and extra keywords) for a field's type hint."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    base = args[0] if args else hint
    if base is bool:
        return None, {"action": argparse.BooleanOptionalAction}
    if base in (int, float, str):
        return base, {}
    if typing.get_origin(base) is dict:
        return _json_object, {"metavar": "JSON"}
    raise TypeError(
        f"parse_config: field {name!r} has type {hint!r}; fields must be int, float, str, bool or dict"
    )


def _json_object(text: str) -> dict[str, Any]:
    """A ``dict`` field's flag: a JSON object."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise argparse.ArgumentTypeError(f"not JSON ({error}): {text!r}") from error
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"must be a JSON object such as '{{\"hidden\": 128}}', got {text!r}")
    return value


def plain(text: str) -> str:
    """``text`` without the docstrings' double backticks, as the command line's help shows it.

    Examples:
        >>> plain("Train your own Agent: ``module:Class``.")
        'Train your own Agent: module:Class.'
    """
    return text.replace("``", "")


def env_key(env: str) -> str:
    """The id under which an environment's tuned settings are kept: ``env`` without its ``module:`` prefix."""
    return env.rpartition(":")[2]


NEGATIVE_NUMBER = re.compile(r"^-(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?$")
"""What argparse reads as a negative number rather than a flag: -3, -0.5, -.5, -1e-3."""


class OneLineParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose mistakes are one line on standard error (no usage block), exit status 2.

    The line is ``<prog>: <message> (<prog> --help lists the flags)``;
    ``--help`` prints the usage and exits with status 0, as argparse does.
    Flags are not abbreviated (``--total`` is a mistake, not
    ``--total-steps``), and a negative number in any notation is a value
    (``--lr -1e-3`` reaches the check of ``--lr``).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = NEGATIVE_NUMBER

    def error(self, message: str) -> NoReturn:
        """Write ``message`` in one line, with where the flags are listed, and exit with status 2."""
        self.exit(2, f"{self.prog}: {' '.join(message.split())} ({self.prog} --help lists the flags)\n")

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        """As argparse's; a value given to a flag that takes none (``--progress false``) is named with the flag."""
        argv = list(sys.argv[1:] if args is None else args)
        parsed, extras = super().parse_known_args(argv, namespace)
        switches = {
            name: action for action in self._actions if action.nargs == 0 for name in action.option_strings
        }
        for before, token in itertools.pairwise(argv):
            if extras and token == extras[0] and before in switches:
                names = " or ".join(switches[before].option_strings)
                self.error(f"argument {before}: takes no value ({names}), got {token!r}")
        return parsed, extras


def parse_config(
    cls: type[C],
    argv: Sequence[str] | None = None,
    *,
    prog: str | None = None,
    tuned: Mapping[str, Mapping[str, Any]] | None = None,
    check: Callable[[C], object] | None = None,
    agent_fields: Collection[str] = (),
) -> C:
    """Parse a command line into an instance of the config dataclass ``cls``.

    Args:
        cls: a dataclass extending ``TrainConfig``.
        argv: the arguments (without the program name); None reads ``sys.argv``.
        prog: the program name shown in the help.
        tuned: settings per environment id (``env_key``), used for the fields
            the command line does not set; when any is used, one line on
            stdout names them.
        check: called with the config before that line is printed, so that
            an error it raises (an unknown environment, a ``ConfigError``)
            comes alone.
        agent_fields: the fields only the built-in agent reads: with
            ``--agent`` given, their tuned values are not used (nor listed),
            and their flags are a mistake (your agent's settings go in
            ``--agent-args``).

    Returns:
        ``cls(**values)``: each field as given on the command line, else as
        tuned for the environment, else its default. With ``--resume RUN_DIR``:
        the fields of ``RUN_DIR/config.json``, with ``--progress`` and
        ``--json`` as given (any other flag is an error).

    Raises:
        SystemExit: as argparse does, for ``--help`` (status 0), and for unknown or
            malformed arguments (status 2, after one line on standard error).
        TypeError: if a field's type is not int, float, str or bool (optionally ``| None``).
        ValueError: if ``tuned`` names a field ``cls`` does not have.

    Examples:
        >>> from rlstruct.algos.sac import Config
        >>> tuned = {"Pendulum-v1": {"hidden": 64, "lr": 3e-4}}
        >>> config = parse_config(Config, ["--env", "Pendulum-v1", "--lr", "1e-3"], tuned=tuned)
        tuned settings for Pendulum-v1: --hidden 64 (flags given override them)
        >>> config.hidden, config.lr
        (64, 0.001)
    """
    names = {f.name for f in dataclasses.fields(cls)}
    for env, settings in (tuned or {}).items():
        unknown = sorted(set(settings) - names)
        if unknown:
            raise ValueError(
                f"parse_config: the tuned settings of {env!r} name no field of {cls.__name__}: {unknown}"
            )
    docs = field_docs(cls)
    hints = typing.get_type_hints(cls)
    epilog = None
    if tuned:
        listed = "; ".join(
            f"{env}: {' '.join(_flag(k, v) for k, v in settings.items())}" for env, settings in tuned.items()
        )
        epilog = f"Tuned settings, used for the flags not given: {listed}."
    parser = OneLineParser(
        prog=prog, description=plain((cls.__doc__ or "").strip().split("\n")[0]), epilog=epilog
    )
    for field in dataclasses.fields(cls):
        kind, extra = _parser_type(field.name, hints[field.name])
        flag = "--" + field.name.replace("_", "-")
        default = field.default
        shown = "required, unless --resume" if field.name == "env" else f"default: {default}"
        help_text = f"{plain(docs.get(field.name, ''))} ({shown})"
        # no argparse default: the namespace holds only what the command line gave
        if kind is None:
            parser.add_argument(flag, dest=field.name, default=argparse.SUPPRESS, help=help_text, **extra)
        else:
            parser.add_argument(
                flag, dest=field.name, type=kind, default=argparse.SUPPRESS, help=help_text, **extra
            )
    given = vars(parser.parse_args(argv))
    if given.get("resume") is not None:
        return _resumed(cls, parser, given, check)
    if "env" not in given and not getattr(cls, "env", ""):
        parser.error("the following arguments are required: --env")
    env = given.get("env", getattr(cls, "env", ""))
    settings = (tuned or {}).get(env_key(env), {})
    own_agent = given.get("agent") is not None
    ignored = [k for k in agent_fields if k in given] if own_agent else []
    if ignored:
        parser.error(
            f"{_flag(ignored[0], given[ignored[0]])} is a setting of the built-in agent, which --agent "
            "replaces; give your agent's settings in --agent-args"
        )
    used = {k: v for k, v in settings.items() if k not in given and not (own_agent and k in agent_fields)}
    config = cls(**(used | given))
    if used:
        if check is not None:
            check(config)
        flags = " ".join(_flag(k, v) for k, v in used.items())
        print(f"tuned settings for {env_key(env)}: {flags} (flags given override them)")
    return config


RESUME_OVERRIDES = ("resume", "progress", "json")
"""The flags ``--resume`` takes beside it: the others come from the run's config.json."""


def stored_config(cls: type[C], stored: dict[str, Any]) -> dict[str, Any]:
    """The fields of a run's config.json, ``stored``, with ``cls.ADDED_FIELDS`` where it lacks them.

    A run saved before a field was added is then rebuilt (``load_run``) and
    resumed (``--resume``) as it was trained.
    """
    return {**cls.ADDED_FIELDS, **stored}


def _resumed(
    cls: type[C], parser: argparse.ArgumentParser, given: dict[str, Any], check: Callable[[C], Any] | None
) -> C:
    """The config of the run directory ``given["resume"]``, from its config.json, with ``RESUME_OVERRIDES`` applied.

    ``check`` refuses a setting of config.json (edited by hand, or a device
    this machine lacks) in a line that names the file, not a flag that was
    not given.
    """
    others = sorted("--" + k.replace("_", "-") for k in given if k not in RESUME_OVERRIDES)
    if others:
        parser.error(
            f"--resume continues a run with the settings of its config.json; drop {' '.join(others)}"
        )
    if given["resume"] == "":  # not the current folder
        parser.error("--resume must name a run directory, got ''")
    folder = Path(given["resume"])
    if not folder.is_dir():
        state = "is a file" if folder.exists() else "does not exist"
        parser.error(f"--resume: {str(folder)!r} {state}; expected a run directory written by rlstruct train")
    path = folder / "config.json"
    try:
        stored = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        parser.error(
            f"--resume: {str(path)!r} does not exist; expected a run directory written by rlstruct train"
        )
    except (json.JSONDecodeError, UnicodeDecodeError) as error:  # a damaged or binary file
        parser.error(f"--resume: {str(path)!r} is not valid JSON ({error})")
    except OSError as error:  # a folder named config.json, a file it may not read
        parser.error(f"--resume: {str(path)!r} cannot be read ({error.strerror or error})")
    names = {f.name for f in dataclasses.fields(cls)}
    if not isinstance(stored, dict) or set(stored) - names:
        unknown = sorted(set(stored) - names) if isinstance(stored, dict) else stored
        parser.error(f"--resume: {str(path)!r} is not a config of {parser.prog}: unknown fields {unknown}")
    config = cls(**(stored_config(cls, stored) | given))
    if check is not None:
        try:  # without --json, which is checked as the flag it is (with train's own check)
            check(dataclasses.replace(config, json=None))
        except ConfigError as error:
            parser.error(f"--resume: {str(path)!r}: {error}")
    return config


def _flag(name: str, value: Any) -> str:
    flag = "--" + name.replace("_", "-")
    if isinstance(value, bool):
        return flag if value else "--no-" + name.replace("_", "-")
    return f"{flag} {value}"
