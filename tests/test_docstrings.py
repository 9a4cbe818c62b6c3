"""Every public class, function and method of rlstruct has a docstring of its own.

The API reference is generated from docstrings and leaves out what has none,
so an undocumented public method is a method the reference does not show.
Methods inherited from torch or the standard library do not count; a method
that rlstruct overrides does, since the docstring it would inherit describes
someone else's implementation.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import rlstruct

# Modules that need an optional extra to import; walked when it is installed.
OPTIONAL = {"rlstruct.distributed"}


def public_modules() -> Iterator[ModuleType]:
    """rlstruct and each submodule whose dotted name has no part starting with ``_``."""
    yield rlstruct
    for info in pkgutil.walk_packages(rlstruct.__path__, prefix="rlstruct."):
        if any(part.startswith("_") for part in info.name.split(".")):
            continue
        try:
            yield importlib.import_module(info.name)
        except ImportError:
            if not any(info.name == m or info.name.startswith(m + ".") for m in OPTIONAL):
                raise


def public_names(module: ModuleType) -> list[str]:
    """The module's ``__all__``, or its names without a leading ``_`` defined in it."""
    names = getattr(module, "__all__", None)
    if names is not None:
        return list(names)
    return [
        name
        for name, value in vars(module).items()
        if not name.startswith("_") and getattr(value, "__module__", None) == module.__name__
    ]


def own_doc(value: Any) -> str | None:
    """The docstring written on this very object, not one inherited from a base class."""
    if isinstance(value, (staticmethod, classmethod)):
        value = value.__func__
    if isinstance(value, property):
        return value.__doc__ or (value.fget.__doc__ if value.fget else None)
    return value.__doc__ if (inspect.isfunction(value) or inspect.isclass(value)) else None


def is_routine(value: Any) -> bool:
    return inspect.isfunction(value) or isinstance(value, (staticmethod, classmethod, property))


def defined_in_rlstruct(value: Any) -> bool:
    if isinstance(value, (staticmethod, classmethod)):
        value = value.__func__
    if isinstance(value, property):
        value = value.fget
    return str(getattr(value, "__module__", "")).startswith("rlstruct")


def undocumented() -> list[str]:
    missing: set[str] = set()
    seen: set[int] = set()
    for module in public_modules():
        for name in public_names(module):
            value = getattr(module, name)
            if not (inspect.isclass(value) or inspect.isfunction(value)) or not defined_in_rlstruct(value):
                continue
            where = f"{value.__module__}.{value.__qualname__}"
            if not (own_doc(value) or "").strip():
                missing.add(where)
            if not inspect.isclass(value) or id(value) in seen:
                continue
            seen.add(id(value))
            for attr, member in vars(value).items():
                if attr.startswith("_") or not is_routine(member) or not defined_in_rlstruct(member):
                    continue
                if not (own_doc(member) or "").strip():
                    missing.add(f"{where}.{attr}")
    return sorted(missing)


def test_the_walk_reaches_the_public_api() -> None:
    modules = {m.__name__ for m in public_modules()}
    assert {"rlstruct", "rlstruct.algos.ppo", "rlstruct.cluster", "rlstruct.testing"} <= modules


class Override(rlstruct.Agent):
    """An agent whose ``initial_state`` override has no docstring of its own."""

    def initial_state(self, agent_info: Any, n: int) -> Any:
        return None


def test_own_doc_ignores_a_docstring_inherited_from_a_base_class() -> None:
    assert inspect.getdoc(Override.initial_state)  # what inspect shows: Agent's docstring
    assert own_doc(vars(Override)["initial_state"]) is None
    assert own_doc(vars(rlstruct.Agent)["initial_state"])


def test_every_public_class_function_and_method_has_a_docstring() -> None:
    missing = undocumented()
    assert not missing, f"{len(missing)} public objects without a docstring:\n" + "\n".join(missing)
