"""Argument checks shared by the batchers, so that both report bad input in the same words."""

from __future__ import annotations

from collections.abc import Mapping

import torch

from rlstruct.dicttensor import DictTensor, _describe


def positive_int(owner: str, name: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{owner}: {name} must be a positive int, got {value!r}")
    return value


def info(owner: str, name: str, value: DictTensor | None, rows: int) -> DictTensor:
    """An agent_info or env_info of ``rows`` rows on the CPU (an empty one for None)."""
    if value is None:
        return DictTensor(batch_size=rows)
    if not isinstance(value, DictTensor):
        raise TypeError(f"{owner}.reset: {name} must be a DictTensor, got {_describe(value)}")
    if value.n_elems() != rows:
        raise ValueError(
            f"{owner}.reset: {name} must have {rows} rows (n_processes * n_envs), got {value.n_elems()}"
        )
    if value.device is not None and value.device != torch.device("cpu"):
        raise ValueError(f"{owner}.reset: {name} must be on the CPU, got {value.device}")
    return value


def same_info_keys(
    owner: str, first: tuple[list[str], list[str]] | None, agent_info: DictTensor, env_info: DictTensor
) -> tuple[list[str], list[str]]:
    """The sorted keys of both infos, which must be those of the first reset."""
    keys = (sorted(agent_info.keys()), sorted(env_info.keys()))
    if first is not None and keys != first:
        raise ValueError(
            f"{owner}.reset: agent_info and env_info must keep the keys of the first reset, "
            f"{first[0]} and {first[1]}; got {keys[0]} and {keys[1]}"
        )
    return keys


def weights(
    owner: str, reference: Mapping[str, torch.Tensor], value: Mapping[str, torch.Tensor], call: str = "update"
) -> None:
    """``value`` must have exactly the keys, shapes and dtypes of the agent's ``state_dict``.

    ``call`` names where the weights came from in the message: ``update`` or
    ``__init__`` (the ``weights=`` of the constructor).
    """
    if not isinstance(value, Mapping):
        raise TypeError(
            f"{owner}.{call}: weights must be a state_dict (a mapping of tensors), got {_describe(value)}"
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
            raise TypeError(f"{owner}.{call}: weight {key!r} must be a tensor, got {_describe(got)}")
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
