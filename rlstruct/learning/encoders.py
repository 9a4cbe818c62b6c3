"""Observation encoders: every key of an observation, as one float32 feature vector per row.

``ObservationEncoder`` reads the ``ObservationSpace`` of each key (as
``rlstruct.gym_env.observation_spaces`` describes a gymnasium space) and
turns a batch of observations into the ``[N, out_dim]`` float32 features a
network takes. Each key is encoded by its kind, the way chosen once when the
encoder is made:

- ``box`` (not an image): cast to float32 and flattened; no parameters.
- image, a ``box`` of dtype uint8 with 2 dims ``[H, W]`` (one channel) or 3
  dims: divided by 255 and run through a CNN. Channels last ``[H, W, C]``
  when the last dim is 1, 3 or 4 and the first is not; channels first
  ``[C, H, W]`` otherwise (so ``[84, 84, 3]`` is channels last, ``[4, 84,
  84]`` channels first, and the ambiguous ``[3, 8, 3]`` channels first).
  Images of at least 36 x 36 go through Nature DQN's CNN (Mnih et al. 2015:
  conv 32 8x8 stride 4, conv 64 4x4 stride 2, conv 64 3x3 stride 1, ReLU
  after each, flattened, a Linear to ``cnn_features``, ReLU). Smaller ones,
  down to 1 x 1, go through a small stack: conv 16 3x3 and conv 32 3x3 (stride
  1, padding 1, keeping the size), then as many conv 32 3x3 of stride 2
  (padding 1: each halves the sides, rounding up) as bring both sides to at
  most 9, ReLU after each, flattened, a Linear to ``cnn_features``, ReLU: the
  Linear layer, the largest, has at most 32 x 9 x 9 inputs.
- ``discrete``: the one-hot of ``x - start`` over ``n``.
- ``multidiscrete``: the one-hots of every entry (row-major), concatenated.
- ``multibinary``: cast to float32 and flattened.

The keys are encoded in sorted order and their features concatenated.
Parameters exist only for image keys: an encoder of boxes, discrete and
binary keys has none and draws nothing from torch's random generator.

Examples:
    >>> import torch
    >>> from rlstruct.specs import ObservationSpace
    >>> from rlstruct.learning.encoders import ObservationEncoder
    >>> encoder = ObservationEncoder(
    ...     {
    ...         "room": ObservationSpace("discrete", (), torch.int64, n=(3,), start=(1,)),
    ...         "position": ObservationSpace("box", (2,), torch.float64),
    ...     }
    ... )
    >>> encoder.keys, encoder.out_dim, encoder.is_flat
    (('position', 'room'), 5, False)
    >>> position = torch.tensor([[0.5, -1.0], [2.0, 0.0]], dtype=torch.float64)
    >>> encoder({"room": torch.tensor([1, 3]), "position": position})
    tensor([[ 0.5000, -1.0000,  1.0000,  0.0000,  0.0000],
            [ 2.0000,  0.0000,  0.0000,  0.0000,  1.0000]])
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import cast

import torch

from rlstruct.checks import check_int, is_int
from rlstruct.dicttensor import DictTensor
from rlstruct.errors import describe
from rlstruct.specs import ObservationSpace

__all__ = ["ObservationEncoder", "encode", "encoded_keys", "is_image", "observation_encoder", "observed"]

_OWNER = "ObservationEncoder"

_NATURE_MIN_SIDE = 36
"""The smallest height and width Nature DQN's CNN takes (its three convolutions leave 1 x 1)."""

_SMALL_MAX_SIDE = 9
"""The small CNN halves its feature maps until neither side is above this."""


class _Flat(torch.nn.Module):
    """A box (not an image) or multibinary key: cast to float32, flattened to ``prod(shape)`` features."""

    def __init__(self, space: ObservationSpace) -> None:
        super().__init__()
        self.out_dim = math.prod(space.shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.to(torch.float32).reshape(x.shape[0], self.out_dim)


class _OneHot(torch.nn.Module):
    """A discrete or multidiscrete key: the one-hot of each entry minus its start, concatenated.

    Entry j of a row sets feature ``offset_j + x_j - start_j``, where
    ``offset_j`` is the sum of the ``n`` of the entries before it: one scatter
    for all entries. Values outside the space are not detected (checking them
    would wait for the device on every call); GymEnv checks the first ones.
    """

    shift: torch.Tensor

    def __init__(self, space: ObservationSpace) -> None:
        super().__init__()
        offsets = [sum(space.n[:j]) for j in range(len(space.n))]
        shift = [offset - start for offset, start in zip(offsets, space.start, strict=True)]
        # not persistent: it follows .to(device) but is no part of the state dict (nothing to learn)
        self.register_buffer("shift", torch.tensor(shift, dtype=torch.int64), persistent=False)
        self.entries = len(space.n)
        self.out_dim = sum(space.n)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        index = x.reshape(x.shape[0], self.entries).to(torch.int64) + self.shift
        out = torch.zeros(x.shape[0], self.out_dim, dtype=torch.float32, device=x.device)
        return out.scatter_(1, index, 1.0)


def _image_layout(space: ObservationSpace) -> tuple[int, int, int, bool] | None:
    """``(channels, height, width, channels_last)`` if ``space`` is an image, else None."""
    shape = space.shape
    if space.kind != "box" or space.dtype != torch.uint8 or len(shape) not in (2, 3):
        return None
    if len(shape) == 2:
        return 1, shape[0], shape[1], False
    channels = (1, 3, 4)
    if shape[-1] in channels and shape[0] not in channels:
        return shape[2], shape[0], shape[1], True
    return shape[0], shape[1], shape[2], False


def is_image(space: ObservationSpace) -> bool:
    """Whether ``ObservationEncoder`` reads ``space`` as an image: a uint8 box of 2 or 3 dims."""
    return _image_layout(space) is not None


def _conv_side(side: int, kernel: int, stride: int, padding: int = 0) -> int:
    return (side + 2 * padding - kernel) // stride + 1


def _nature_cnn(channels: int, height: int, width: int, features: int) -> torch.nn.Sequential:
    """Nature DQN's CNN (Mnih et al. 2015) on ``[N, channels, height, width]``, both sides at least 36."""
    h, w = height, width
    for kernel, stride in ((8, 4), (4, 2), (3, 1)):
        h, w = _conv_side(h, kernel, stride), _conv_side(w, kernel, stride)
    return torch.nn.Sequential(
        torch.nn.Conv2d(channels, 32, 8, stride=4),
        torch.nn.ReLU(),
        torch.nn.Conv2d(32, 64, 4, stride=2),
        torch.nn.ReLU(),
        torch.nn.Conv2d(64, 64, 3, stride=1),
        torch.nn.ReLU(),
        torch.nn.Flatten(),
        torch.nn.Linear(64 * h * w, features),
        torch.nn.ReLU(),
    )


def _small_cnn(channels: int, height: int, width: int, features: int) -> torch.nn.Sequential:
    """The CNN of images smaller than 36 on a side: two size-keeping convs, then halvings down to 9."""
    layers: list[torch.nn.Module] = [
        torch.nn.Conv2d(channels, 16, 3, stride=1, padding=1),
        torch.nn.ReLU(),
        torch.nn.Conv2d(16, 32, 3, stride=1, padding=1),
        torch.nn.ReLU(),
    ]
    h, w = height, width
    while h > _SMALL_MAX_SIDE or w > _SMALL_MAX_SIDE:
        layers += [torch.nn.Conv2d(32, 32, 3, stride=2, padding=1), torch.nn.ReLU()]
        h, w = _conv_side(h, 3, 2, 1), _conv_side(w, 3, 2, 1)
    layers += [torch.nn.Flatten(), torch.nn.Linear(32 * h * w, features), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers)


class _Image(torch.nn.Module):
    """An image key: laid out ``[N, C, H, W]``, divided by 255, run through a CNN to ``features``."""

    def __init__(self, layout: tuple[int, int, int, bool], features: int) -> None:
        super().__init__()
        channels, height, width, self.channels_last = layout
        nature = height >= _NATURE_MIN_SIDE and width >= _NATURE_MIN_SIDE
        self.cnn = (_nature_cnn if nature else _small_cnn)(channels, height, width, features)
        self.out_dim = features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 3:  # [N, H, W]: one channel
            x = x.unsqueeze(1)
        elif self.channels_last:
            x = x.permute(0, 3, 1, 2)
        result: torch.Tensor = self.cnn(x.to(torch.float32).div_(255.0))
        return result


def _part(space: ObservationSpace, cnn_features: int) -> _Flat | _OneHot | _Image:
    """The module that encodes one key of ``space``, chosen by its kind."""
    if space.kind in ("discrete", "multidiscrete"):
        return _OneHot(space)
    layout = _image_layout(space)
    return _Flat(space) if layout is None else _Image(layout, cnn_features)


def _expected(space: ObservationSpace) -> str:
    shape = "".join(f", {s}" for s in space.shape)
    return f"a tensor of shape [N{shape}] and dtype {space.dtype}, as its {space.kind} space declares"


class ObservationEncoder(torch.nn.Module):
    """Every key of a batch of observations, encoded by its space's kind, as one float32 feature tensor.

    See the module's docstring for how each kind is encoded, the image
    channel rule and the CNNs' sizes. The encoder's parameters (image keys
    only) and its inputs must be on one device; the output is on it too.

    Any ``torch.nn.Module`` with an ``out_dim`` attribute (features per row),
    a ``keys`` attribute (the observation keys it reads) and the same
    ``forward`` signature can stand in for it where an encoder is taken (the
    actor-critic's ``encoder=``): it may read only some keys, or encode them
    another way.

    Args:
        spaces: the observation keys, as GymEnv stores them, and their
            spaces (``rlstruct.gym_env.observation_spaces(env.observation_space)``).
        cnn_features: the features each image key's CNN outputs.

    Attributes:
        keys: the keys it reads, sorted: the order of their features.
        spaces: the space of each key, in that order (read it, do not edit it).
        out_dim: the features per row of ``forward``'s output.

    Raises:
        TypeError: if ``spaces`` is not a mapping of str to ``ObservationSpace``,
            or ``cnn_features`` not an int.
        ValueError: if ``spaces`` is empty or ``cnn_features`` below 1.

    Examples:
        >>> import torch
        >>> from rlstruct.specs import ObservationSpace
        >>> frames = ObservationEncoder({"frame": ObservationSpace("box", (84, 84, 4), torch.uint8)})
        >>> frames.out_dim, frames.is_flat
        (512, False)
        >>> frames({"frame": torch.zeros(2, 84, 84, 4, dtype=torch.uint8)}).shape
        torch.Size([2, 512])

        A stand-in that reads only the key "position":

        >>> class Positions(torch.nn.Module):
        ...     out_dim = 8
        ...     keys = ("position",)
        ...
        ...     def __init__(self) -> None:
        ...         super().__init__()
        ...         self.linear = torch.nn.Linear(2, self.out_dim)
        ...
        ...     def forward(self, observations):
        ...         return torch.relu(self.linear(observations["position"].to(torch.float32)))
        >>> Positions()({"position": torch.zeros(3, 2)}).shape
        torch.Size([3, 8])
        >>> from rlstruct.learning.actor_critic import ActorCritic
        >>> ActorCritic(n_actions=2, encoder=Positions()).observation_keys
        ('position',)
    """

    def __init__(self, spaces: Mapping[str, ObservationSpace], cnn_features: int = 512) -> None:
        super().__init__()
        if not isinstance(spaces, Mapping):
            raise TypeError(
                f"{_OWNER}: spaces must be a mapping of keys to ObservationSpace, got {describe(spaces)}"
            )
        if not spaces:
            raise ValueError(f"{_OWNER}: spaces must hold at least one key, got an empty mapping")
        for key, space in spaces.items():
            if not isinstance(key, str):
                raise TypeError(f"{_OWNER}: the keys of spaces must be str, got {key!r}")
            if not isinstance(space, ObservationSpace):
                raise TypeError(
                    f"{_OWNER}: spaces[{key!r}] must be an ObservationSpace, got {describe(space)}"
                )
        cnn_features = check_int(_OWNER, "cnn_features", cnn_features, 1)
        self.keys: tuple[str, ...] = tuple(sorted(spaces))
        self.spaces: dict[str, ObservationSpace] = {key: spaces[key] for key in self.keys}
        parts = [_part(space, cnn_features) for space in self.spaces.values()]
        self.parts = torch.nn.ModuleList(parts)
        self.out_dim: int = sum(part.out_dim for part in parts)
        self._is_flat = all(
            isinstance(part, _Flat) and space.kind == "box"
            for part, space in zip(parts, self.spaces.values(), strict=True)
        )

    @property
    def is_flat(self) -> bool:
        """True when every key is a box that is not an image: the encoder only casts and flattens.

        It has no parameters then, and callers may keep their plain path
        (``observation.to(torch.float32).flatten(1)`` of a single key).
        """
        return self._is_flat

    def forward(self, observations: Mapping[str, torch.Tensor] | DictTensor) -> torch.Tensor:
        """The features of a batch of ``N`` observations.

        Args:
            observations: ``[N, *shape]`` tensors of each key's dtype (as its
                space declares), under the keys of ``spaces``; other keys
                (``reward``, ``done``...) are ignored.

        Returns:
            A float32 ``[N, out_dim]`` tensor on the inputs' device: each
            key's features in sorted key order. Not in place; with a single
            float32 box key it may be a view of that key's tensor.

        Raises:
            TypeError: if ``observations`` is not a mapping or a DictTensor,
                or a key's value is not a tensor of its space's dtype.
            ValueError: if a key is missing, a value's shape does not end
                with its space's shape, or the keys have different rows.
        """
        if not isinstance(observations, (Mapping, DictTensor)):
            raise TypeError(
                f"{_OWNER}: observations must be a mapping of str to tensors or a DictTensor, "
                f"got {describe(observations)}"
            )
        features: list[torch.Tensor] = []
        rows: int | None = None
        for (key, space), part in zip(self.spaces.items(), self.parts, strict=True):
            if key not in observations:
                raise ValueError(
                    f"{_OWNER}: observations lack the key {key!r} (the encoder reads {list(self.keys)}), "
                    f"got the keys {sorted(observations.keys())}"
                )
            x = observations[key]
            if not isinstance(x, torch.Tensor) or x.dtype != space.dtype:
                raise TypeError(
                    f"{_OWNER}: observations[{key!r}] must be {_expected(space)}, got {describe(x)}"
                )
            if tuple(x.shape[1:]) != space.shape or x.dim() != 1 + len(space.shape):
                raise ValueError(
                    f"{_OWNER}: observations[{key!r}] must be {_expected(space)}, got {describe(x)}"
                )
            if rows is None:
                rows = x.shape[0]
            elif x.shape[0] != rows:
                raise ValueError(
                    f"{_OWNER}: every key of observations must have the same rows; "
                    f"observations[{self.keys[0]!r}] has {rows}, observations[{key!r}] {x.shape[0]}"
                )
            features.append(part(x))
        return features[0] if len(features) == 1 else torch.cat(features, dim=1)


def observation_encoder(
    owner: str,
    obs_dim: int | None,
    observation_spaces: Mapping[str, ObservationSpace] | None,
    encoder: torch.nn.Module | None,
) -> tuple[torch.nn.Module | None, int]:
    """How a network reads its observations, from exactly one of three ways of saying it.

    ``obs_dim``: a flat ``observation`` of that many numbers; ``observation_spaces``:
    the keys and their spaces, encoded by an ``ObservationEncoder`` (a single
    non-image box under ``observation`` counts as its ``obs_dim``); ``encoder``:
    your own module, with ``out_dim`` and ``keys``.

    Args:
        owner: the network's name, for the messages ("ActorCritic", "QNetwork").
        obs_dim: see above, or None.
        observation_spaces: see above, or None.
        encoder: see above, or None.

    Returns:
        ``(encoder, features)``: the module that encodes the observation (None
        for a flat ``observation``, read as float32 and flattened) and the
        size of the features it gives.

    Raises:
        ValueError: for not exactly one of the three, or a non-positive
            ``obs_dim`` or encoder ``out_dim``.
        TypeError: for an ``obs_dim`` that is not an int, or an ``encoder``
            without an int ``out_dim`` (a bool is not one) and ``keys``.
    """
    given = [
        name
        for name, value in (
            ("obs_dim", obs_dim),
            ("observation_spaces", observation_spaces),
            ("encoder", encoder),
        )
        if value is not None
    ]
    if len(given) != 1:
        raise ValueError(
            f"{owner}: give exactly one of obs_dim, observation_spaces and encoder, got {given or 'none'}"
        )
    if encoder is not None:
        out_dim = getattr(encoder, "out_dim", None)
        if not isinstance(encoder, torch.nn.Module) or not is_int(out_dim) or not hasattr(encoder, "keys"):
            raise TypeError(
                f"{owner}: encoder must be a torch.nn.Module with an int out_dim and the keys it reads, "
                f"got {describe(encoder)}"
                + (
                    f" whose out_dim is {describe(out_dim)}"
                    if not is_int(out_dim) and out_dim is not None
                    else ""
                )
            )
        if out_dim < 1:  # a layer of no input
            raise ValueError(f"{owner}: the encoder's out_dim must be positive, got {out_dim}")
        return encoder, int(out_dim)  # a NumPy int counts too
    if observation_spaces is not None:
        made = ObservationEncoder(observation_spaces)
        if made.is_flat and made.keys == ("observation",):
            return None, made.out_dim  # a flat box: read as it is, the same as obs_dim
        return made, made.out_dim
    if not is_int(obs_dim):
        raise TypeError(f"{owner}: obs_dim must be a positive int, got {describe(obs_dim)}")
    if obs_dim < 1:
        raise ValueError(f"{owner}: obs_dim must be positive, got {obs_dim}")
    return None, int(obs_dim)


def encoded_keys(encoder: torch.nn.Module | None) -> tuple[str, ...]:
    """The observation keys a network reads: its encoder's ``keys``, or ``("observation",)`` without one."""
    if encoder is None:
        return ("observation",)
    return tuple(cast(Iterable[str], encoder.keys))


def observed(
    rows: Mapping[str, torch.Tensor] | DictTensor, encoder: torch.nn.Module | None, prefix: str = ""
) -> torch.Tensor | dict[str, torch.Tensor]:
    """The observation of stored steps as a network with ``encoder`` reads it.

    Args:
        rows: stored steps (replayed transitions, say).
        encoder: the network's encoder (None: it reads the flat ``observation``).
        prefix: ``"next/"`` for the observations reached.

    Returns:
        ``rows[prefix + "observation"]`` without an encoder, else
        ``{key: rows[prefix + key]}`` for every key the encoder reads.
    """
    if encoder is None:
        return rows[f"{prefix}observation"]
    return {k: rows[prefix + k] for k in encoded_keys(encoder)}


def encode(
    encoder: torch.nn.Module | None,
    observation: torch.Tensor | Mapping[str, torch.Tensor] | DictTensor,
    features: int | None = None,
    owner: str = "encode",
    network: torch.nn.Module | None = None,
) -> torch.Tensor:
    """The features ``[N, d]`` a network with ``encoder`` reads from N observations (float32 unless it is another).

    Args:
        encoder: the network's encoder, or None for a flat ``observation``.
        observation: the observation's keys (a mapping or DictTensor of
            ``[N, ...]`` tensors), or, without an encoder, the ``observation``
            tensor itself.
        features: the ``d`` the network was made for, checked when given.
        owner: the network, named in the error.
        network: the network whose layers read the features: the encoder's
            must have the dtype of its parameters (float32 unless it was
            made another, as by ``.double()``); None expects float32.

    Returns:
        ``encoder(observation)``, or the flat observation cast to float32 and
        flattened to ``[N, d]``.

    Raises:
        TypeError: if ``encoder`` returns something other than a tensor of
            the network's dtype (any floating dtype while autocast is on).
        ValueError: if ``features`` is given and the observations give another ``d``.
    """
    if encoder is not None:
        out: torch.Tensor = encoder(observation)
        dtype = _layers_dtype(network)
        if not isinstance(out, torch.Tensor) or (
            out.dtype != dtype
            and not (out.is_floating_point() and torch.is_autocast_enabled(out.device.type))
        ):  # else torch would only say "mat1 and mat2 must have the same dtype"
            raise TypeError(
                f"{owner}: the encoder {type(encoder).__name__} must return features [N, out_dim] of "
                f"{dtype}, the dtype of the network's layers, got {describe(out)}"
            )
    else:
        flat = observation if isinstance(observation, torch.Tensor) else observation["observation"]
        flat = flat.to(torch.float32)
        out = flat.flatten(1) if flat.dim() > 1 else flat.unsqueeze(1)  # a scalar Box: one feature
    if features is not None and (out.dim() != 2 or out.shape[1] != features):
        made = "its encoder's out_dim" if encoder is not None else "obs_dim"
        raise ValueError(
            f"{owner}: the observations give {out.shape[-1] if out.dim() else 0} features per row "
            f"(features of shape {list(out.shape)}), but the network was made for {features} ({made})"
        )
    return out


def _layers_dtype(network: torch.nn.Module | None) -> torch.dtype:
    """The dtype of ``network``'s floating parameters (float32 when None or when it has none)."""
    if network is not None:
        for parameter in network.parameters():
            if parameter.is_floating_point():
                return parameter.dtype
    return torch.float32
