"""Checkpoints that resume a run exactly: state dicts, counters and random-number generator states.

``save_checkpoint`` writes a dict of named values with ``torch.save``, through a
temporary file in the same directory and ``os.replace``, so that the file at
``path`` is always either the previous checkpoint or the new one, never half of
one. Modules, optimisers and anything else with a ``state_dict()`` method are
stored as their state dict. ``load_checkpoint`` reads it back with
``torch.load(weights_only=True)`` (no arbitrary code runs) and loads the state
dicts into the objects it is given.

``rng_state`` captures every random-number generator a training step may draw
from: Python's ``random``, NumPy's global generator, torch's CPU generator, the
CUDA generators when CUDA is available, and the ``torch.Generator`` objects
passed explicitly (such as ``Agent.generator``). ``set_rng_state`` puts them
back, so the next step draws the same numbers as it would have without the
interruption.

Examples:
    >>> import tempfile, torch
    >>> from pathlib import Path
    >>> from rlstruct import load_checkpoint, rng_state, save_checkpoint, set_rng_state
    >>> model = torch.nn.Linear(2, 1)
    >>> optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    >>> generator = torch.Generator().manual_seed(0)
    >>> path = Path(tempfile.mkdtemp()) / "checkpoint.pt"
    >>> save_checkpoint(path, model=model, optimizer=optimizer, step=10, rng=rng_state(generator))
    >>> expected = torch.rand(2, generator=generator)
    >>> state = load_checkpoint(path, model=model, optimizer=optimizer)
    >>> state["step"]
    10
    >>> set_rng_state(state["rng"], generator)
    >>> torch.equal(torch.rand(2, generator=generator), expected)
    True
"""

from __future__ import annotations

import os
import pickle
import random
import tempfile
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlstruct.checks import check_device
from rlstruct.errors import describe

__all__ = ["load_checkpoint", "rng_state", "save_checkpoint", "set_rng_state"]

_RNG_KEYS = ("python", "numpy", "torch", "cuda", "generators")


def save_checkpoint(path: str | os.PathLike[str], **state: Any) -> None:
    """Write ``state`` to ``path`` atomically.

    Values with a ``state_dict()`` method (modules, optimisers, schedulers,
    gradient scalers) are stored as their state dict; other values are stored
    as given and should be what ``torch.load(weights_only=True)`` accepts:
    tensors, numbers, strings, None, and lists, tuples and dicts of those
    (``rng_state()`` returns such a dict). Tensors keep their dtype and device.

    The checkpoint is written to a temporary file in the same directory, synced
    to disk, then renamed over ``path``: a crash or an error while writing
    leaves the previous file at ``path`` untouched and no temporary file
    behind.

    Args:
        path: the file to write; its directory must exist.
        **state: the named values to store.

    Raises:
        TypeError: if ``path`` is not a path.
        ValueError: if no value is given, or ``path`` is empty.
        FileNotFoundError: if the directory of ``path`` does not exist.
        IsADirectoryError: if ``path`` is a folder (what it raised from the
            rename, which named only the temporary file).

    Warns:
        UserWarning: naming where a value holds a NumPy array or scalar,
            which ``load_checkpoint`` reads back only with
            ``weights_only=False``.
    """
    if not state:
        raise ValueError("save_checkpoint: expected at least one named value to store, got none")
    if not isinstance(path, str | os.PathLike):
        raise TypeError(f"save_checkpoint: path must be a path (a str or os.PathLike), got {describe(path)}")
    if os.fspath(path) in ("", b""):
        raise ValueError("save_checkpoint: path must name the file to write, got ''")
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(
            f"save_checkpoint: path must name the file to write, got the folder {str(path)!r} "
            f"(such as {str(path / 'checkpoint.pt')!r})"
        )
    if not path.parent.is_dir():
        raise FileNotFoundError(f"save_checkpoint: the directory of path {str(path)!r} does not exist")
    stored = {name: _as_stored(value) for name, value in state.items()}
    for name, value in stored.items():
        if where := _numpy_in(value, name):
            warnings.warn(
                f"save_checkpoint: {where}, which load_checkpoint reads back only with weights_only=False "
                "(torch.load(weights_only=True) refuses it); store a tensor (torch.from_numpy) or a Python "
                "number (.item()) instead",
                stacklevel=2,
            )
            break
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as file:
            torch.save(stored, file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _numpy_in(value: Any, where: str) -> str:
    """Where a NumPy array or scalar lies in ``value`` (``"x['best'] is a NumPy float32"``); empty if nowhere."""
    if isinstance(value, (np.ndarray, np.generic)):
        return f"{where} is a NumPy {type(value).__name__}"
    items = (
        value.items()
        if isinstance(value, dict)
        else enumerate(value)
        if isinstance(value, (list, tuple))
        else ()
    )
    for key, item in items:
        if found := _numpy_in(item, f"{where}[{key!r}]"):
            return found
    return ""


def _as_stored(value: Any) -> Any:
    state_dict = getattr(value, "state_dict", None)
    return state_dict() if callable(state_dict) else value


_DICT_STATES = (torch.nn.Module, torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler)
"""Objects whose state dicts are dicts: ``load_checkpoint`` refuses any other stored value for them by name."""


def load_checkpoint(
    path: str | os.PathLike[str],
    *,
    map_location: str | torch.device | None = None,
    weights_only: bool = True,
    **objects: Any,
) -> dict[str, Any]:
    """Read a checkpoint written by ``save_checkpoint`` and load state dicts into ``objects``.

    Args:
        path: the checkpoint file.
        map_location: where to put the stored tensors, as in ``torch.load``
            (a device as ``check_device`` reads it: ``"cpu:0"`` is the CPU);
            None keeps the devices they were saved from.
        weights_only: passed to ``torch.load``. Keep True (only tensors and
            plain containers are unpickled) unless the checkpoint holds other
            objects and comes from a trusted source.
        **objects: objects with a ``load_state_dict`` method (modules,
            optimisers, ...), each loaded in place from the stored value of
            the same name. Load a model before its optimiser's state is used,
            and move the model to its device first, as usual in torch.

    Returns:
        Every stored value by name, state dicts included.

    Raises:
        FileNotFoundError: if ``path`` is not a file.
        ValueError: if the file cannot be read as a checkpoint (truncated,
            empty, not written by ``torch.save``), ``map_location`` names no
            device or one this machine cannot use, or an object's name is
            not in the checkpoint.
        pickle.UnpicklingError: if ``weights_only`` refuses an object the
            file holds (as ``torch.load`` does).
        TypeError: if an object has no ``load_state_dict`` method, or is a
            torch module, optimiser or learning-rate scheduler (whose state
            dicts are dicts) and the value stored under its name is not a
            mapping, naming the value. Other objects get the stored value
            as it is.
    """
    for name, obj in objects.items():
        if not callable(getattr(obj, "load_state_dict", None)):
            raise TypeError(
                f"load_checkpoint: {name}= must have a load_state_dict method, got a {type(obj).__name__}"
            )
    owner = "load_checkpoint: map_location"
    location = check_device(owner, map_location) if map_location is not None else None  # "cpu:0" as cpu
    if not Path(path).is_file():
        raise FileNotFoundError(f"load_checkpoint: {str(path)!r} is not a file")
    try:
        state: dict[str, Any] = torch.load(Path(path), map_location=location, weights_only=weights_only)
    except Exception as error:  # a truncated, empty or foreign file: what torch.load raises varies
        if isinstance(error, pickle.UnpicklingError) and "Unsupported global" in str(error):
            raise  # weights_only refused what the file holds: torch's message says what to do
        if location is not None and location.type != "meta":
            check_device(owner, map_location, usable=True)  # one this machine lacks: not the file's fault
        raise ValueError(
            f"load_checkpoint: {str(path)!r} cannot be read as a checkpoint ({_unreadable(Path(path), error)})"
        ) from error
    if not isinstance(state, dict):
        raise ValueError(
            f"load_checkpoint: {str(path)!r} holds a {type(state).__name__}, not a checkpoint's dict"
        )
    missing = [name for name in objects if name not in state]
    if missing:
        raise ValueError(
            f"load_checkpoint: {str(path)!r} holds no value named {', '.join(map(repr, missing))}; "
            f"it holds {sorted(state)}"
        )
    for name, obj in objects.items():  # all checked before any is loaded
        if isinstance(obj, _DICT_STATES) and not isinstance(state[name], Mapping):
            raise TypeError(
                f"load_checkpoint: {str(path)!r} holds {describe(state[name])} under {name!r}, not a state "
                f"dict to load into {name}= ({type(obj).__name__}); read it from the returned dict instead"
            )
    for name, obj in objects.items():
        obj.load_state_dict(state[name])
    return state


def rng_state(*generators: torch.Generator) -> dict[str, Any]:
    """The state of every random-number generator a training step may use.

    Args:
        *generators: ``torch.Generator`` objects to capture besides the global
            ones (for example ``agent.generator``), in an order that
            ``set_rng_state`` will be given again.

    Returns:
        A dict that ``torch.save`` and ``torch.load(weights_only=True)`` accept:
        ``python`` (``random.getstate()``), ``numpy`` (the global generator's
        state, its key as an int64 tensor), ``torch`` (the CPU generator's
        ``uint8`` state), ``cuda`` (one state per CUDA device, empty without
        CUDA) and ``generators`` (one state per generator given). The states
        are copies: drawing numbers afterwards does not change them.

    Raises:
        TypeError: if a generator is not a ``torch.Generator``.
    """
    for i, generator in enumerate(generators):
        if not isinstance(generator, torch.Generator):
            raise TypeError(
                f"rng_state: generators must be torch.Generator, got a {type(generator).__name__} at position {i}"
            )
    numpy_state = np.random.get_state(legacy=False)
    assert isinstance(numpy_state, dict)  # legacy=False always returns the dict form
    key = torch.from_numpy(numpy_state["state"]["key"].astype(np.int64))
    return {
        "python": random.getstate(),
        "numpy": {**numpy_state, "state": {**numpy_state["state"], "key": key}},
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "generators": [generator.get_state() for generator in generators],
    }


def set_rng_state(state: dict[str, Any], *generators: torch.Generator) -> None:
    """Restore the generators captured by ``rng_state`` (the global ones and ``generators``).

    Args:
        state: what ``rng_state`` returned, possibly through a checkpoint.
        *generators: the generators to restore, as many and in the same order
            as given to ``rng_state``; each is set in place.

    Raises:
        ValueError: if ``state`` lacks one of the keys ``rng_state`` writes, or
            the number of generators or of CUDA devices differs from when it
            was captured. To resume on a machine with other CUDA devices,
            inexactly, set ``state["cuda"] = []`` first.
        TypeError: if ``state`` is not a dict or a generator is not a
            ``torch.Generator``.
    """
    if not isinstance(state, dict):
        raise TypeError(f"set_rng_state: state must be the dict rng_state returns, got {describe(state)}")
    missing = [key for key in _RNG_KEYS if key not in state]
    if missing:
        raise ValueError(f"set_rng_state: state must have the keys {list(_RNG_KEYS)}, missing {missing}")
    if len(generators) != len(state["generators"]):
        raise ValueError(
            f"set_rng_state: state holds {len(state['generators'])} generator states, "
            f"got {len(generators)} generators"
        )
    for i, generator in enumerate(generators):
        if not isinstance(generator, torch.Generator):
            raise TypeError(
                f"set_rng_state: generators must be torch.Generator, got a {type(generator).__name__} at position {i}"
            )
    n_cuda = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if state["cuda"] and len(state["cuda"]) != n_cuda:
        raise ValueError(
            f"set_rng_state: state holds the generators of {len(state['cuda'])} CUDA devices, "
            f"this process sees {n_cuda}; set state['cuda'] = [] to resume without them (inexactly)"
        )
    random.setstate(_as_tuples(state["python"]))
    numpy_state = state["numpy"]
    key = numpy_state["state"]["key"]
    key = key.cpu().numpy() if isinstance(key, torch.Tensor) else np.asarray(key)
    np.random.set_state({**numpy_state, "state": {**numpy_state["state"], "key": key.astype(np.uint32)}})
    # The states are CPU byte tensors whatever the generator's device; a checkpoint loaded with
    # map_location="cuda" moves them, and set_state accepts only CPU tensors.
    torch.set_rng_state(state["torch"].cpu())
    if state["cuda"]:
        torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda"]])
    for generator, generator_state in zip(generators, state["generators"], strict=True):
        generator.set_state(generator_state.cpu())


def _as_tuples(value: Any) -> Any:
    """``random.setstate`` wants tuples; a checkpoint may hand back lists."""
    return tuple(_as_tuples(v) for v in value) if isinstance(value, (list, tuple)) else value


def _unreadable(path: Path, error: Exception) -> str:
    """Why ``torch.load`` could not read ``path``: in a few words for a file that is not a whole checkpoint.

    torch's message for those is a page of advice (load with
    ``weights_only=False``); for any other failure (tensors saved on a GPU
    this machine lacks) its message, which says what to do, is kept whole.
    """
    with path.open("rb") as file:
        head = file.read(4)
    if not head:
        return "the file is empty"
    if head != b"PK\x03\x04" and head[:1] != b"\x80":  # neither torch.save's zip nor its older pickle format
        return f"it is not a file torch.save writes: it begins with {head!r}"
    message = " ".join(str(error).split())
    if isinstance(error, (EOFError, pickle.UnpicklingError)) or "PytorchStreamReader" in message:
        return f"{type(error).__name__}: {message.split('. ')[0].rstrip('.')}; truncated or damaged?"
    return f"{type(error).__name__}: {message}"
