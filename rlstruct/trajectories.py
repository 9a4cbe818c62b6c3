"""Trajectories: what a batcher returns, per-row information plus the steps.

``info`` is a ``DictTensor`` of B rows that holds what is constant along a
row (the agent_info z, the env_info w, the agent's state when the row
started); ``trajectories`` is a ``TemporalDictTensor`` ``[B, T, ...]``
with the steps themselves and their lengths. Both share B and the device.

Examples:
    >>> import torch
    >>> from rlstruct import DictTensor, TemporalDictTensor, Trajectories
    >>> info = DictTensor({"agent_info/epsilon": torch.tensor([0.0, 0.1])})
    >>> steps = TemporalDictTensor({"reward": torch.ones(2, 5)}, torch.tensor([5, 2]))
    >>> batch = Trajectories(info, steps)
    >>> batch.n_elems(), batch[1].trajectories.lengths
    (2, tensor([2]))
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from rlstruct.dicttensor import Device, DictTensor, RowIndex
from rlstruct.errors import describe
from rlstruct.temporal import TemporalDictTensor

__all__ = ["Trajectories"]


class Trajectories:
    """Per-row ``info`` (DictTensor, B rows) and the ``trajectories`` (TemporalDictTensor, B rows).

    Args:
        info: B rows of per-trajectory data.
        trajectories: B rows of ``[T, ...]`` steps with their lengths.

    Raises:
        TypeError: if an argument has the wrong type.
        ValueError: if B or the device differ.
    """

    __slots__ = ("info", "trajectories")

    info: DictTensor
    trajectories: TemporalDictTensor

    def __init__(self, info: DictTensor, trajectories: TemporalDictTensor) -> None:
        if not isinstance(info, DictTensor):
            raise TypeError(f"Trajectories: info must be a DictTensor, got {describe(info)}")
        if not isinstance(trajectories, TemporalDictTensor):
            raise TypeError(
                f"Trajectories: trajectories must be a TemporalDictTensor, got {describe(trajectories)}"
            )
        if info.n_elems() != trajectories.n_elems():
            raise ValueError(
                f"Trajectories: info has {info.n_elems()} rows but trajectories has "
                f"{trajectories.n_elems()}; they must match"
            )
        if info.device is not None and info.device != trajectories.device:
            raise ValueError(
                f"Trajectories: info is on {info.device} but trajectories on {trajectories.device}"
            )
        self.info = info
        self.trajectories = trajectories

    @property
    def lengths(self) -> torch.Tensor:
        """The lengths of the trajectories: int64, shape [B]."""
        return self.trajectories.lengths

    @property
    def device(self) -> torch.device:
        """The device of both parts."""
        return self.trajectories.device

    def n_elems(self) -> int:
        """The number of rows B."""
        return self.info.n_elems()

    def index(self, index: RowIndex) -> Trajectories:
        """Select rows of both parts (see ``DictTensor.index``).

        Raises:
            TypeError: for a key (a str): keys are read from ``trajectories``
                or ``info``; and as ``DictTensor.index``.
            IndexError, ValueError: as ``DictTensor.index``.
        """
        if isinstance(index, str):
            raise TypeError(
                "Trajectories: rows are indexed by an int, a slice, a list of ints or a tensor, got the "
                f"str {index!r}; read a key from batch.trajectories[{index!r}] or batch.info[{index!r}]"
            )
        return Trajectories(self.info.index(index), self.trajectories.index(index))

    def __getitem__(self, index: RowIndex) -> Trajectories:
        return self.index(index)

    def to(self, device: Device, non_blocking: bool = False) -> Trajectories:
        """Move both parts to ``device`` (dtypes kept).

        Raises:
            TypeError, ValueError: as ``DictTensor.to``.
        """
        op = "Trajectories.to"
        return Trajectories(
            self.info.to(device, non_blocking, op=op), self.trajectories.to(device, non_blocking, op=op)
        )

    def clone(self) -> Trajectories:
        """A deep copy of both parts."""
        return Trajectories(self.info.clone(), self.trajectories.clone())

    def pin_memory(self) -> Trajectories:
        """A copy in page-locked memory; needs an accelerator-enabled torch build."""
        return Trajectories(self.info.pin_memory(), self.trajectories.pin_memory())

    @staticmethod
    def cat(batches: Sequence[Trajectories]) -> Trajectories:
        """Concatenate along the rows (``trajectories`` padded as ``TemporalDictTensor.cat``).

        Raises:
            TypeError, ValueError: if the list is empty or the parts disagree
                on keys, dtypes, shapes or device.
        """
        if isinstance(batches, Trajectories) or not isinstance(batches, Sequence):
            raise TypeError(f"Trajectories.cat: expected a list of Trajectories, got {describe(batches)}")
        if not batches:
            raise ValueError("Trajectories.cat: expected at least one Trajectories, got an empty list")
        for i, batch in enumerate(batches):
            if not isinstance(batch, Trajectories):
                raise TypeError(f"Trajectories.cat: element {i} must be Trajectories, got {describe(batch)}")
        return Trajectories(
            DictTensor.cat([b.info for b in batches], op="Trajectories.cat (info)"),
            TemporalDictTensor.cat([b.trajectories for b in batches], op="Trajectories.cat (trajectories)"),
        )

    def equal(self, other: Trajectories) -> bool:
        """Whether both parts are bitwise equal (see ``TemporalDictTensor.equal``)."""
        return (
            isinstance(other, Trajectories)
            and self.info.equal(other.info)
            and self.trajectories.equal(other.trajectories)
        )

    def __repr__(self) -> str:
        return f"Trajectories(info={self.info!r}, trajectories={self.trajectories!r})"
