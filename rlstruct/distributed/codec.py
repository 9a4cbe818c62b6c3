"""The wire codec: tensors and rlstruct structures as a picklable ``Packed``, optionally compressed.

``pack`` turns a tensor, a mapping of tensors, a ``DictTensor``, a
``TemporalDictTensor`` or a ``Trajectories`` into a ``Packed``: the layout
(kind, keys, dtypes, shapes, rows, time steps) plus the tensors' bytes;
``unpack`` rebuilds the same structure, bit for bit. This is what
crosses the network between workers: gradients sent to the update worker,
rollouts sent to gradient workers.

Codecs:

- ``"none"``: each buffer is a ``numpy.ndarray`` of ``uint8`` that shares
  memory with the (contiguous) tensor, so Ray ships it out of band, without
  a copy into ``bytes``. Send the ``Packed`` (``ray.put``, ``pickle``)
  before writing to the packed tensors again.
- ``"lz4"``: LZ4 frames (package ``lz4``); ``level`` 0 (the default,
  fast) to 16 (high compression, slow).
- ``"zstd"``: Zstandard frames (package ``zstandard``); ``level`` from
  -131072 (fastest) to 22 (smallest), default 3.

The compressing codecs write one frame per tensor of 64 KiB or more, and
one frame for the smaller ones together (a new one each time 64 KiB would
be exceeded): a rollout of many small keys costs one call and one frame
header, and redundancy across keys (``observation`` and
``next/observation``) is found.

Compression pays only on payloads that compress (images, masks, integer
actions) over networks slower than the codec; ``docs/distributed.md``
gives measured break-even bandwidths.

Examples:
    >>> import torch
    >>> from rlstruct import DictTensor
    >>> from rlstruct.distributed.codec import pack, unpack
    >>> batch = DictTensor({"obs": torch.zeros(4, 3), "action": torch.tensor([0, 1, 1, 0])})
    >>> packed = pack(batch)
    >>> packed.codec, packed.raw_nbytes
    ('none', 80)
    >>> unpack(packed).equal(batch)
    True
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import math
from collections.abc import Mapping
from types import ModuleType
from typing import Any, Generic, TypeVar, cast, overload

import numpy as np
import numpy.typing as npt
import torch

from rlstruct.checks import is_int
from rlstruct.dicttensor import DictTensor
from rlstruct.errors import describe
from rlstruct.temporal import TemporalDictTensor
from rlstruct.trajectories import Trajectories

__all__ = ["CODECS", "Packed", "check_codec", "pack", "unpack"]

CODECS: tuple[str, ...] = ("none", "lz4", "zstd")
"""The codec names ``pack`` accepts."""

# codec -> (lowest level, highest level, default level); zstd goes down to ZSTD_minCLevel()
_LEVELS: dict[str, tuple[int, int, int]] = {"lz4": (0, 16, 0), "zstd": (-(1 << 17), 22, 3)}
_MODULES: dict[str, str] = {"lz4": "lz4.frame", "zstd": "zstandard"}
_KINDS = ("tensor", "dict", "DictTensor", "TemporalDictTensor", "Trajectories")
_CHUNK = 1 << 16  # bytes: tensors smaller than this are compressed together, in frames up to this size

V = TypeVar("V")
Bytes = npt.NDArray[np.uint8]
Buffer = Bytes | bytes


def _module(codec: str) -> ModuleType:
    """Import the package of a compressing codec, or raise an ImportError that says how to get it."""
    name = _MODULES[codec]
    try:
        return importlib.import_module(name)
    except ImportError as err:
        raise ImportError(
            f'codec {codec!r} needs the {name.split(".")[0]} package: pip install -e ".[ray]"'
        ) from err


def _check_codec(codec: object, name: str) -> str:
    if not isinstance(codec, str):
        raise TypeError(f"{name} must be a str, one of {CODECS}, got {describe(codec)}")
    if codec not in CODECS:
        raise ValueError(f"{name} must be one of {CODECS}, got {codec!r}")
    if codec != "none":
        _module(codec)
    return codec


def check_codec(codec: str) -> str:
    """Check a ``compression`` setting and that its package is installed.

    Args:
        codec: one of ``CODECS``: ``"none"``, ``"lz4"`` or ``"zstd"``.

    Returns:
        ``codec``, unchanged.

    Raises:
        TypeError: if ``codec`` is not a str.
        ValueError: if ``codec`` is not one of ``CODECS``.
        ImportError: if the package of the codec (``lz4`` or ``zstandard``,
            in the ``ray`` extra) is not installed.

    Examples:
        >>> check_codec("none")
        'none'
    """
    return _check_codec(codec, "compression")


def _check_level(codec: str, level: object) -> int:
    """The level to compress with: ``level``, or the codec's default when it is None."""
    if level is None:
        return _LEVELS[codec][2] if codec != "none" else 0
    if not is_int(level):  # a NumPy int is an int
        raise TypeError(f"pack: level must be an int or None, got {describe(level)}")
    level = int(level)
    if codec == "none":
        raise ValueError(f"pack: level applies to 'lz4' and 'zstd' only, got level={level} with codec 'none'")
    low, high, _ = _LEVELS[codec]
    if not low <= level <= high:
        raise ValueError(f"pack: level for {codec!r} must be in [{low}, {high}], got {level}")
    return level


@dataclasses.dataclass(frozen=True, eq=False)
class Packed(Generic[V]):
    """What crosses the network: the layout of a packed value and the bytes of its tensors.

    Made by ``pack``, read by ``unpack``; picklable (Ray ships its numpy
    buffers out of band). The fields describe the entries in order: for a
    ``TemporalDictTensor`` the last entry is ``lengths``; for
    ``Trajectories`` the first ``n_info`` entries are ``info``, then come
    the steps, then ``lengths``.

    Attributes:
        codec: one of ``CODECS``.
        kind: what was packed: "tensor", "dict", "DictTensor",
            "TemporalDictTensor" or "Trajectories".
        keys: the key of each entry ("" for a bare tensor).
        dtypes: the dtype of each entry.
        shapes: the shape of each entry.
        buffers: for "none", the bytes of each entry in C order, as ``uint8``
            numpy arrays; otherwise compressed frames (``bytes``), one per
            group of entries (see the module's docstring).
        rows: B, the number of rows (0 for a tensor or a dict).
        n_timesteps: T, the padded number of time steps (temporal kinds only).
        n_info: the number of ``info`` entries (``Trajectories`` only).

    Raises:
        ValueError: if the fields disagree with one another.
    """

    codec: str
    kind: str
    keys: tuple[str, ...]
    dtypes: tuple[torch.dtype, ...]
    shapes: tuple[tuple[int, ...], ...]
    buffers: tuple[Buffer, ...]
    rows: int = 0
    n_timesteps: int = 0
    n_info: int = 0

    def __post_init__(self) -> None:
        if self.codec not in CODECS:
            raise ValueError(f"Packed: codec must be one of {CODECS}, got {self.codec!r}")
        if self.kind not in _KINDS:
            raise ValueError(f"Packed: kind must be one of {_KINDS}, got {self.kind!r}")
        if not len(self.keys) == len(self.dtypes) == len(self.shapes):
            raise ValueError(
                f"Packed: keys, dtypes and shapes must have one entry per tensor, got "
                f"{len(self.keys)}, {len(self.dtypes)} and {len(self.shapes)}"
            )
        expected = len(_groups(self.codec, self._sizes()))
        if len(self.buffers) != expected:
            raise ValueError(
                f"Packed: {len(self.keys)} tensors of these sizes packed with {self.codec!r} need "
                f"{expected} buffers, got {len(self.buffers)}"
            )

    def _sizes(self) -> list[int]:
        """The bytes of each entry."""
        return [
            math.prod(shape) * dtype.itemsize for shape, dtype in zip(self.shapes, self.dtypes, strict=True)
        ]

    @property
    def nbytes(self) -> int:
        """Bytes of the buffers as sent (after compression); the layout fields are not counted."""
        return sum(len(b) if isinstance(b, bytes) else b.nbytes for b in self.buffers)

    @property
    def raw_nbytes(self) -> int:
        """Bytes of the tensors before compression."""
        return sum(self._sizes())


def _groups(codec: str, sizes: list[int]) -> list[list[int]]:
    """The entries (indices) of each buffer: one each for "none"; else one frame per tensor of
    ``_CHUNK`` bytes or more, and the smaller ones in order, in frames of up to ``_CHUNK`` bytes."""
    if codec == "none":
        return [[i] for i in range(len(sizes))]
    groups: list[list[int]] = []
    small: list[int] = []
    total = 0
    for i, size in enumerate(sizes):
        if size >= _CHUNK:
            groups.append([i])
            continue
        if small and total + size > _CHUNK:
            groups.append(small)
            small, total = [], 0
        small.append(i)
        total += size
    return [*groups, small] if small else groups


def _entries(value: object) -> tuple[str, list[tuple[str, str, torch.Tensor]], int, int, int]:
    """Flatten ``value`` into (kind, [(label for errors, key, tensor)], rows, n_timesteps, n_info)."""
    if isinstance(value, torch.Tensor):
        return "tensor", [("value", "", value)], 0, 0, 0
    if isinstance(value, Trajectories):
        steps = value.trajectories
        info = [(f"info key {k!r}", k, v) for k, v in value.info.items()]
        entries = [
            *info,
            *((f"trajectories key {k!r}", k, v) for k, v in steps.items()),
            ("trajectories lengths", "lengths", steps.lengths),
        ]
        return "Trajectories", entries, value.n_elems(), steps.n_timesteps(), len(info)
    if isinstance(value, TemporalDictTensor):
        entries = [(f"value of key {k!r}", k, v) for k, v in value.items()]
        entries.append(("lengths", "lengths", value.lengths))
        return "TemporalDictTensor", entries, value.n_elems(), value.n_timesteps(), 0
    if isinstance(value, DictTensor):
        entries = [(f"value of key {k!r}", k, v) for k, v in value.items()]
        return "DictTensor", entries, value.n_elems(), 0, 0
    if isinstance(value, Mapping):
        entries = []
        for k, v in value.items():
            if not isinstance(k, str):
                raise TypeError(f"pack: keys of value must be str, got {k!r} ({type(k).__name__})")
            if not isinstance(v, torch.Tensor):
                raise TypeError(f"pack: value of key {k!r} must be a torch.Tensor, got {describe(v)}")
            entries.append((f"value of key {k!r}", k, v))
        return "dict", entries, 0, 0, 0
    raise TypeError(
        "pack: value must be a torch.Tensor, a Mapping[str, Tensor], a DictTensor, a "
        f"TemporalDictTensor or a Trajectories, got {describe(value)}"
    )


def _as_bytes(label: str, tensor: torch.Tensor) -> Bytes:
    """The bytes of a CPU tensor in C order, as a uint8 numpy array (no copy when contiguous)."""
    if tensor.device.type != "cpu":
        raise ValueError(
            f"pack: {label} is on {tensor.device}; pack takes CPU tensors only: move them with .to('cpu') first"
        )
    if tensor.layout != torch.strided or tensor.is_quantized or tensor.is_nested:
        kind = "quantized" if tensor.is_quantized else "nested" if tensor.is_nested else str(tensor.layout)
        raise ValueError(f"pack: {label} must be a dense tensor, got a {kind} tensor")
    if tensor.requires_grad:
        tensor = tensor.detach()
    if tensor.is_conj() or tensor.is_neg():
        tensor = tensor.resolve_conj().resolve_neg()
    if not tensor.is_contiguous():
        tensor = tensor.contiguous()
    data: Bytes = tensor.view(-1).view(torch.uint8).numpy()
    return data


@overload
def pack(value: torch.Tensor, codec: str = "none", level: int | None = None) -> Packed[torch.Tensor]: ...
@overload
def pack(value: Trajectories, codec: str = "none", level: int | None = None) -> Packed[Trajectories]: ...
@overload
def pack(
    value: TemporalDictTensor, codec: str = "none", level: int | None = None
) -> Packed[TemporalDictTensor]: ...
@overload
def pack(value: DictTensor, codec: str = "none", level: int | None = None) -> Packed[DictTensor]: ...
@overload
def pack(
    value: Mapping[str, torch.Tensor], codec: str = "none", level: int | None = None
) -> Packed[dict[str, torch.Tensor]]: ...
def pack(value: object, codec: str = "none", level: int | None = None) -> Packed[Any]:
    """Pack tensors for the network, compressed with ``codec``; the inverse of ``unpack``.

    Args:
        value: a tensor, a ``Mapping[str, Tensor]``, a ``DictTensor``, a
            ``TemporalDictTensor`` or a ``Trajectories``, every tensor on the
            CPU, dense, of any dtype and shape (0-dim, empty and
            non-contiguous tensors included). Not modified.
        codec: "none", "lz4" or "zstd" (see ``CODECS``).
        level: the compression level: for "lz4" 0 (fast, the default) to 16;
            for "zstd" -131072 to 22, default 3; must be None for "none".

    Returns:
        A ``Packed`` holding the bytes of every tensor (without autograd
        history). With "none", the buffers of contiguous tensors share their
        memory: send the ``Packed`` before writing to those tensors again.
        Non-contiguous tensors are copied once.

    Raises:
        TypeError: for a ``value``, ``codec`` or ``level`` of the wrong type.
        ValueError: for an unknown ``codec``, a ``level`` out of the codec's
            range (or given with "none"), or a tensor that is not on the CPU
            or not dense (the message names its key and device).
        ImportError: if the codec's package is not installed.

    Examples:
        >>> import torch
        >>> packed = pack({"grad": torch.zeros(1000)})
        >>> packed.nbytes == packed.raw_nbytes == 4000
        True
        >>> unpack(packed)["grad"].shape
        torch.Size([1000])
    """
    codec = _check_codec(codec, "codec")
    level = _check_level(codec, level)
    kind, entries, rows, n_timesteps, n_info = _entries(value)
    raw = [_as_bytes(label, tensor) for label, _, tensor in entries]
    buffers: tuple[Buffer, ...]
    if codec == "none":
        buffers = tuple(raw)
    else:
        if codec == "lz4":
            lz4_frame = _module("lz4")
            compress = functools.partial(lz4_frame.compress, compression_level=level, store_size=True)
        else:
            compress = _module("zstd").ZstdCompressor(level=level).compress
        groups = _groups(codec, [b.nbytes for b in raw])
        buffers = tuple(
            compress(raw[g[0]] if len(g) == 1 else np.concatenate([raw[i] for i in g])) for g in groups
        )
    return Packed(
        codec=codec,
        kind=kind,
        keys=tuple(key for _, key, _ in entries),
        dtypes=tuple(tensor.dtype for _, _, tensor in entries),
        shapes=tuple(tuple(tensor.shape) for _, _, tensor in entries),
        buffers=buffers,
        rows=rows,
        n_timesteps=n_timesteps,
        n_info=n_info,
    )


def unpack(packed: Packed[V]) -> V:
    """Rebuild what ``pack`` packed: same type, keys, dtypes, shapes, values (bit for bit) and lengths.

    Args:
        packed: a ``Packed`` made by ``pack``, here or in another process.

    Returns:
        A ``torch.Tensor``, a ``dict[str, Tensor]`` (for any mapping), a
        ``DictTensor``, a ``TemporalDictTensor`` or a ``Trajectories``, as
        packed, on the CPU. Every tensor is freshly allocated, writable and
        owns its memory: exactly one copy (or decompression) per tensor, so
        read-only buffers (as Ray hands them out) are never shared.

    Raises:
        TypeError: if ``packed`` is not a ``Packed``.
        ValueError: if a buffer does not hold the bytes its shape and dtype
            need (a corrupted payload).
        ImportError: if the codec's package is not installed.
    """
    if not isinstance(packed, Packed):
        raise TypeError(f"unpack: packed must be a Packed (made by pack), got {describe(packed)}")
    decompress = _decompressor(packed.codec)
    tensors = [
        torch.empty(shape, dtype=dtype) for shape, dtype in zip(packed.shapes, packed.dtypes, strict=True)
    ]
    sizes = packed._sizes()
    for group, buffer in zip(_groups(packed.codec, sizes), packed.buffers, strict=True):
        data = decompress(buffer)
        source = data if isinstance(data, np.ndarray) else np.frombuffer(data, dtype=np.uint8)
        if source.nbytes != sum(sizes[i] for i in group):
            names = ", ".join(repr(packed.keys[i]) for i in group)
            raise ValueError(
                f"unpack: the buffer of {'key' if len(group) == 1 else 'keys'} {names} holds {source.nbytes} bytes, expected "
                f"{sum(sizes[i] for i in group)} (from the shapes and dtypes); the payload is corrupted"
            )
        start = 0
        for i in group:  # one copy into memory the tensor owns
            np.copyto(tensors[i].view(-1).view(torch.uint8).numpy(), source[start : start + sizes[i]])
            start += sizes[i]
    keys = packed.keys
    if packed.kind == "tensor":
        return cast(V, tensors[0])
    if packed.kind == "dict":
        return cast(V, dict(zip(keys, tensors, strict=True)))
    if packed.kind == "DictTensor":
        return cast(V, DictTensor(dict(zip(keys, tensors, strict=True)), batch_size=packed.rows))
    n_info, last = packed.n_info, len(tensors) - 1
    steps = TemporalDictTensor(
        DictTensor(dict(zip(keys[n_info:last], tensors[n_info:last], strict=True)), batch_size=packed.rows),
        tensors[last],
        n_timesteps=packed.n_timesteps,
    )
    if packed.kind == "TemporalDictTensor":
        return cast(V, steps)
    info = DictTensor(dict(zip(keys[:n_info], tensors[:n_info], strict=True)), batch_size=packed.rows)
    return cast(V, Trajectories(info, steps))


def _decompressor(codec: str) -> Any:
    """A function from a buffer to its raw bytes (the buffer itself for "none")."""
    if codec == "none":
        return lambda buffer: buffer
    if codec == "lz4":
        return _module("lz4").decompress
    return _module("zstd").ZstdDecompressor().decompress
