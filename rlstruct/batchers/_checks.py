"""Argument checks shared by the batchers, so that both report bad input in the same words."""

from __future__ import annotations

import enum
import numbers
import pickle
from collections.abc import Mapping
from typing import Any

import torch

from rlstruct.checks import check_kwargs, is_bool, is_int
from rlstruct.dicttensor import DictTensor
from rlstruct.errors import describe


class State(enum.Enum):
    """Where a batcher stands, and what it allows (both batchers, one model).

    ``NEEDS_RESET``: no episodes to run, before the first reset or after one
    that raised: ``reset`` and ``update``. ``READY``: ``execute``, ``reset``,
    ``update``. ``RUNNING``: ``get``, ``reset`` (which drops the batch),
    ``update``. ``STREAMING``: ``get``, ``reset``, ``update``. ``CLOSED``:
    ``close`` only.
    """

    NEEDS_RESET = "needs reset"
    READY = "ready"
    RUNNING = "running"
    STREAMING = "streaming"
    CLOSED = "closed"


def env_factory(owner: str, value: object) -> None:
    """A gymnasium environment class is not a factory of rlstruct environments: say how to wrap it.

    Its constructor would otherwise fail on ``n_envs``, a keyword it does not take.
    """
    if isinstance(value, type) and any(
        f"{c.__module__}.{c.__qualname__}" == "gymnasium.core.Env" for c in value.__mro__
    ):
        raise TypeError(
            f"{owner}: env_factory must make an rlstruct Environment, got the gymnasium environment class "
            f"{value.__qualname__}; pass GymEnv with env_args={{'env': {value.__qualname__}, ...}}"
        )


def positive_int(owner: str, name: str, value: object) -> int:
    if not is_int(value) or value < 1:
        raise ValueError(f"{owner}: {name} must be a positive int, got {value!r}")
    return int(value)  # a NumPy int counts too


def seconds(owner: str, name: str, value: object) -> float:
    """A positive, finite number of seconds (a NumPy number counts too), as a float."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 < float(value) < float("inf"):
        raise ValueError(f"{owner}: {name} must be a positive number of seconds, got {value!r}")
    return float(value)


def max_staleness(owner: str, value: object) -> int | None:
    """``get(max_staleness=...)`` in "stream" mode: None or an int >= 0 (a NumPy int counts too)."""
    if value is None:
        return None
    if not is_int(value) or value < 0:
        raise ValueError(f"{owner}.get: max_staleness must be None or an int >= 0, got {value!r}")
    return int(value)


def blocking(owner: str, value: object) -> bool:
    """``get(blocking=...)``: a bool (a NumPy bool counts too), as a Python bool.

    Any other value would be read by its truth, so that ``blocking="no"`` would wait.
    """
    if not is_bool(value):
        raise TypeError(f"{owner}.get: blocking must be a bool, got {describe(value)}")
    return bool(value)


def info(owner: str, name: str, value: DictTensor | None, rows: int) -> DictTensor:
    """An agent_info or env_info of ``rows`` rows on the CPU (an empty one for None), detached.

    z and w are data to the batchers: a value that requires grad (a learned
    temperature) is taken without its graph, which could not go to a worker.
    """
    if value is None:
        return DictTensor(batch_size=rows)
    if not isinstance(value, DictTensor):
        raise TypeError(f"{owner}.reset: {name} must be a DictTensor, got {describe(value)}")
    if value.n_elems() != rows:
        raise ValueError(
            f"{owner}.reset: {name} must have {rows} rows (n_processes * n_envs), got {value.n_elems()}"
        )
    if value.device is not None and value.device != torch.device("cpu"):
        raise ValueError(f"{owner}.reset: {name} must be on the CPU, got {value.device}")
    return value.detach()


InfoSpec = tuple[
    dict[str, tuple[torch.dtype, tuple[int, ...]]], dict[str, tuple[torch.dtype, tuple[int, ...]]]
]


def info_spec(agent_info: DictTensor, env_info: DictTensor) -> InfoSpec:
    """key -> (dtype, row shape) of both infos: what every later reset must keep."""
    return (
        {k: (v.dtype, tuple(v.shape[1:])) for k, v in agent_info.items()},
        {k: (v.dtype, tuple(v.shape[1:])) for k, v in env_info.items()},
    )


def same_info(owner: str, first: InfoSpec | None, agent_info: DictTensor, env_info: DictTensor) -> InfoSpec:
    """The spec of both infos, which must be that of the first reset: same keys, dtypes and row shapes.

    The batchers store z and w in buffers made at the first reset; a value of
    another dtype or shape would have to be cast or would not fit, so it is
    refused, naming the key.
    """
    spec = info_spec(agent_info, env_info)
    if first is None:
        return spec
    keys = (sorted(spec[0]), sorted(spec[1]))
    if keys != (sorted(first[0]), sorted(first[1])):
        raise ValueError(
            f"{owner}.reset: agent_info and env_info must keep the keys of the first reset, "
            f"{sorted(first[0])} and {sorted(first[1])}; got {keys[0]} and {keys[1]}"
        )
    for name, now, then in (("agent_info", spec[0], first[0]), ("env_info", spec[1], first[1])):
        for key in sorted(now):
            if now[key] != then[key]:
                raise ValueError(
                    f"{owner}.reset: {name} key {key!r} must keep the dtype and row shape of the first "
                    f"reset, {then[key][0]} and {then[key][1]}; got {now[key][0]} and {now[key][1]} "
                    "(nothing is cast)"
                )
    return spec


def layout(owner: str, value: object) -> None:
    if not isinstance(value, str) or value not in ("full", "compact"):
        raise ValueError(f"{owner}: layout must be 'full' or 'compact', got {value!r}")


def env_args(owner: str, value: Mapping[str, Any]) -> None:
    """``env_args`` may not set what the batcher gives every environment factory."""
    check_kwargs(owner, "env_args", value)
    for reserved in ("n_envs", "seed"):
        if reserved in value:
            raise ValueError(
                f"{owner}: env_args must not hold {reserved!r}: the batcher sets it (got {value[reserved]!r})"
            )


def picklable(owner: str, name: str, value: object) -> None:
    """``value`` must pickle, to reach a worker process: a TypeError naming ``name`` (and the key) if not.

    In a mapping (``agent_args``, ``env_args``), objects that multiprocessing
    hands to a process when it starts (an ``Event``, a ``Queue``) are accepted.
    """
    items = value.items() if isinstance(value, Mapping) else [(None, value)]
    for key, item in items:
        try:
            pickle.dumps(item)
        except Exception as error:
            if key is not None and isinstance(error, RuntimeError) and "through inheritance" in str(error):
                continue  # pickled by multiprocessing as the worker starts
            where = "" if key is None else f" (its key {key!r})"
            raise TypeError(
                f"{owner}: {name}{where} must be picklable to reach the worker processes (module-level "
                "functions and classes, not a lambda or a local definition); pickling failed with "
                f"{type(error).__name__}: {error}"
            ) from None


def weights(
    owner: str, reference: Mapping[str, torch.Tensor], value: Mapping[str, torch.Tensor], call: str = "update"
) -> None:
    """``value`` must have exactly the keys, shapes and dtypes of the agent's ``state_dict``.

    ``call`` names where the weights came from in the message: ``update`` or
    ``__init__`` (the ``weights=`` of the constructor).
    """
    if not isinstance(value, Mapping):
        raise TypeError(
            f"{owner}.{call}: weights must be a state_dict (a mapping of tensors), got {describe(value)}"
        )
    missing = sorted(reference.keys() - value.keys())
    unexpected = sorted(value.keys() - reference.keys())
    if missing or unexpected:
        raise ValueError(
            f"{owner}.{call}: weights lack the keys {missing} and have unexpected keys {unexpected}"
        )
    for key, ref in reference.items():
        got = value[key]
        if not isinstance(got, torch.Tensor):
            raise TypeError(f"{owner}.{call}: weight {key!r} must be a tensor, got {describe(got)}")
        if got.dtype != ref.dtype or got.shape != ref.shape:
            raise ValueError(
                f"{owner}.{call}: weight {key!r} has dtype {got.dtype} and shape {tuple(got.shape)}, "
                f"expected {ref.dtype} and {tuple(ref.shape)}"
            )


def initial_weights_warning(owner: str) -> str:
    """The warning of a batcher whose agents act before any ``weights=`` or ``update()``."""
    return (
        f"{owner}: the batcher acts with the agent's own initial weights (those agent_factory made), "
        "not the learner's: no weights were given at construction and update() was never called, so "
        "a learner's copy of the model differs from the one that collected these trajectories. "
        "Pass weights=model.state_dict() at construction or call update() before execute()."
    )
