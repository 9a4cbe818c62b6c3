"""The argument checks the library shares, so that one kind of bad value gets one message everywhere.

Each check returns the value when it is good (numbers as a float) and
otherwise raises ``TypeError`` (a value of the wrong type) or ``ValueError``
(out of range), starting ``"{owner}: {name}"``, saying what was expected and
what was received.

Examples:
    >>> from rlstruct.checks import check_int, check_number
    >>> check_number("td_lambda", "gamma", 0.99, 0.0, 1.0)
    0.99
    >>> check_int("ReplayBuffer", "capacity", 0)
    Traceback (most recent call last):
        ...
    ValueError: ReplayBuffer: capacity must be at least 1, got 0
    >>> check_number("vtrace", "rho_bar", float("nan"), 0.0, low_open=True)
    Traceback (most recent call last):
        ...
    ValueError: vtrace: rho_bar must be in (0, inf), got nan
"""

from __future__ import annotations

import contextlib
import math
import numbers
import os
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import TypeGuard

import numpy as np
import torch

from rlstruct.errors import describe
from rlstruct.seeding import SEEDS

__all__ = [
    "cannot_write",
    "check_choice",
    "check_device",
    "check_int",
    "check_keys",
    "check_kwargs",
    "check_number",
    "check_seed",
    "check_tensor",
    "is_bool",
    "is_int",
    "unusable_device",
]


def is_int(value: object) -> TypeGuard[int]:
    """Whether ``value`` is an integer (a Python or NumPy int; not a bool), as the checks take one."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_bool(value: object) -> bool:
    """Whether ``value`` is a bool (a Python or NumPy one), as a flag takes it: read it with ``bool(value)``."""
    return isinstance(value, (bool, np.bool_))


def check_int(owner: str, name: str, value: object, low: int = 1) -> int:
    """``value`` if it is an int (not a bool) of at least ``low``.

    Raises:
        TypeError: if it is not an int.
        ValueError: if it is below ``low``.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{owner}: {name} must be an int, got {describe(value)}")
    if value < low:
        raise ValueError(f"{owner}: {name} must be at least {low}, got {value}")
    return int(value)


def check_seed(owner: str, value: object, low: int = 0) -> int:
    """``value`` as an int seed torch's generators take: at least ``low`` (0 or ``SEEDS[0]``), below 2**64.

    Raises:
        TypeError: if it is not an int (a NumPy int counts).
        ValueError: if it is below ``low`` or above ``SEEDS[1]``.
    """
    seed = check_int(owner, "seed", value, low)
    if seed > SEEDS[1]:  # torch's generators take no more
        raise ValueError(f"{owner}: seed must be in [{'-2**63' if low < 0 else '0'}, 2**64), got {seed}")
    return seed


def check_number(
    owner: str,
    name: str,
    value: object,
    low: float = -math.inf,
    high: float = math.inf,
    *,
    low_open: bool = False,
    allow_inf: bool = False,
) -> float:
    """``value`` as a float if it is a real number (not a bool) in ``[low, high]`` (``(low, high]`` if ``low_open``).

    An infinite value is refused unless ``allow_inf`` (and within the bounds):
    ``high=math.inf`` alone admits every finite value.

    Raises:
        TypeError: if it is not a real number.
        ValueError: if it is out of bounds, NaN included.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{owner}: {name} must be a number, got {describe(value)}")
    x = float(value)
    if not ((low < x if low_open else low <= x) and x <= high) or (math.isinf(x) and not allow_inf):
        left = "(" if low_open or (math.isinf(low) and not allow_inf) else "["
        right = ")" if math.isinf(high) and not allow_inf else "]"
        raise ValueError(f"{owner}: {name} must be in {left}{low:g}, {high:g}{right}, got {value!r}")
    return x


def check_choice(owner: str, name: str, value: object, allowed: tuple[str, ...]) -> str:
    """``value`` if it is one of ``allowed``.

    Raises:
        TypeError: if it is not a str.
        ValueError: if it is not one of ``allowed``, listing them.
    """
    if not isinstance(value, str):
        raise TypeError(
            f"{owner}: {name} must be one of {', '.join(map(repr, allowed))}, got {describe(value)}"
        )
    if value not in allowed:
        raise ValueError(f"{owner}: {name} must be one of {', '.join(map(repr, allowed))}, got {value!r}")
    return value


def check_keys(owner: str, name: str, keys: object, available: Iterable[str], where: str) -> list[str]:
    """``keys`` as a list if it is an iterable of str (not one str) whose every key is in ``available``.

    ``where`` names what holds ``available`` in the message ("the trajectories").

    Raises:
        TypeError: if ``keys`` is a str or not iterable.
        ValueError: naming the keys that are not available, and those that are.
    """
    if isinstance(keys, str) or not isinstance(keys, Iterable):
        raise TypeError(f"{owner}: {name} must be a list of str, got {describe(keys)}")
    keys, known = list(keys), set(available)
    missing = [k for k in keys if k not in known]
    if missing:
        raise ValueError(f"{owner}: {name} {missing} are not in {where}, whose keys are {sorted(known)}")
    return keys


def check_tensor(owner: str, name: str, value: object, shape: tuple[int, ...], kind: str) -> torch.Tensor:
    """Return ``value``, checked to be a tensor of ``shape`` whose dtype is of ``kind``: "bool" or "float".

    Raises:
        TypeError: if ``value`` is not a tensor, or its dtype not of ``kind``.
        ValueError: if its shape is not ``shape``.

    Examples:
        >>> import torch
        >>> check_tensor("n_step_targets", "done", torch.zeros(2, 3), (2, 3), "bool")
        Traceback (most recent call last):
            ...
        TypeError: n_step_targets: done must be a bool tensor [2, 3], got dtype torch.float32
    """
    if kind not in ("bool", "float"):
        raise ValueError(f"check_tensor: kind must be 'bool' or 'float', got {kind!r}")
    expected = f"{owner}: {name} must be a {kind} tensor {list(shape)}"
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{expected}, got {describe(value)}")
    fits = value.dtype == torch.bool if kind == "bool" else value.dtype.is_floating_point
    if not fits:
        raise TypeError(f"{expected}, got dtype {value.dtype}")
    if tuple(value.shape) != tuple(shape):
        raise ValueError(f"{expected}, got shape {list(value.shape)}")
    return value


def check_kwargs(owner: str, name: str, value: object) -> None:
    """``value`` must be keyword arguments (``agent_args``, ``env_args``): a mapping with str keys.

    Raises:
        TypeError: naming ``owner`` and ``name``, for anything else.
    """
    if not isinstance(value, Mapping) or not all(isinstance(key, str) for key in value):
        raise TypeError(
            f"{owner}: {name} must be a dict of keyword arguments (str keys), got {describe(value)}"
        )


def check_device(owner: str, value: object, *, usable: bool = False) -> torch.device:
    """Return ``value`` (a str, a ``torch.device`` or a CUDA index) as a ``torch.device``.

    An int (a Python or NumPy int) is the index of a CUDA device (``0`` is ``cuda:0``), and the CPU
    is returned as tensors report it (``"cpu:0"`` becomes ``cpu``). With
    ``usable``, the device must also hold tensors on this machine, and is
    returned as tensors report it (``"cuda"`` becomes ``cuda:0``): what is
    made once and used for long (a batcher, an environment) is refused at
    construction, not after its work is done.

    Raises:
        TypeError: if ``value`` is of another type.
        ValueError: if it names no torch device; with ``usable``, if it is
            ``"meta"`` or cannot be used here (``"cuda"`` without CUDA).

    Examples:
        >>> check_device("ReplayBuffer", "cpu")
        device(type='cpu')
        >>> check_device("LocalBatcher", "gpu")
        Traceback (most recent call last):
            ...
        ValueError: LocalBatcher: device must name a torch device such as 'cpu' or 'cuda:0', got 'gpu'
    """
    if not (isinstance(value, (str, torch.device)) or is_int(value)):
        raise TypeError(f"{owner}: device must be a str, a torch.device or an int, got {describe(value)}")
    if is_int(value):
        value = int(value)  # a NumPy int too
        if value < 0:
            raise ValueError(f"{owner}: device as an int is a CUDA index, at least 0, got {value}")
    try:
        device = torch.device("cuda", value) if isinstance(value, int) else torch.device(value)
    except RuntimeError:
        raise ValueError(
            f"{owner}: device must name a torch device such as 'cpu' or 'cuda:0', got {value!r}"
        ) from None
    if device.type == "cpu":
        return torch.device("cpu")
    if not usable:
        return device
    if device.type == "meta":
        raise ValueError(f"{owner}: device must hold data; 'meta' tensors have none, got {value!r}")
    try:
        return torch.zeros(1).to(device).device
    except (RuntimeError, AssertionError) as error:  # a CPU-only build asserts for "cuda"
        raise ValueError(f"{owner}: device {value!r} cannot be used on this machine: {error}") from None


@contextlib.contextmanager
def unusable_device(owner: str, device: torch.device | None) -> Iterator[None]:
    """Turn torch's assertion that it was built without CUDA, inside the block, into a ValueError.

    For what puts data on a device it does not check first (a check would
    cost a copy to the device on every call).

    Raises:
        ValueError: naming ``owner`` and ``device``, from the block's ``AssertionError``.
    """
    try:
        yield
    except AssertionError as error:  # torch.cuda's "Torch not compiled with CUDA enabled"
        raise ValueError(f"{owner}: device {str(device)!r} cannot be used on this machine: {error}") from None


def cannot_write(path: str | os.PathLike[str]) -> str:
    """Why the file ``path`` cannot be written here, in a few words; empty when it can.

    Tried rather than read from the permissions, which say nothing for root
    (a read-only file system, ``/proc``, ``/sys``): an existing file is
    opened for writing without being changed, and otherwise a temporary
    file is made and removed in its folder, which must exist.

    Examples:
        >>> cannot_write("/no/such/folder/results.json")
        'No such file or directory'
    """
    path = Path(path)
    try:
        if path.is_file():
            with path.open("r+b"):
                pass
        else:
            fd, probe = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
            os.close(fd)
            os.unlink(probe)
    except OSError as error:
        return error.strerror or str(error)
    return ""
