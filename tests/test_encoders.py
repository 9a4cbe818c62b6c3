"""Behaviour tests for rlstruct.learning.encoders: every kind of key, the CNNs, and every input error.

Expected features are worked out by hand, the arithmetic in comments next to
the assertion.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import numpy as np
import pytest
import torch
from test_gym_env import AllSpacesEnv

from rlstruct import DictTensor, GymEnv
from rlstruct.gym_env import observation_spaces
from rlstruct.learning.encoders import ObservationEncoder
from rlstruct.specs import ObservationSpace


def message(text: str) -> str:
    """A `match` pattern for an exact substring of an error message."""
    return re.escape(text)


def box(*shape: int, dtype: torch.dtype = torch.float32) -> ObservationSpace:
    return ObservationSpace("box", shape, dtype)


def discrete(n: int, start: int = 0) -> ObservationSpace:
    return ObservationSpace("discrete", (), torch.int64, n=(n,), start=(start,))


def image(*shape: int) -> ObservationSpace:
    return ObservationSpace("box", shape, torch.uint8)


def frames(n: int, *shape: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(0)
    return torch.randint(0, 256, (n, *shape), dtype=torch.uint8, generator=generator)


def convs(encoder: torch.nn.Module) -> list[torch.nn.Conv2d]:
    return [m for m in encoder.modules() if isinstance(m, torch.nn.Conv2d)]


def linears(encoder: torch.nn.Module) -> list[torch.nn.Linear]:
    return [m for m in encoder.modules() if isinstance(m, torch.nn.Linear)]


def the_cnn(encoder: torch.nn.Module) -> torch.nn.Sequential:
    (cnn,) = [m for m in encoder.modules() if isinstance(m, torch.nn.Sequential)]
    return cnn


# ---------------------------------------------------------------------------- each kind


def test_a_box_is_cast_to_float32_and_flattened_row_major() -> None:
    encoder = ObservationEncoder({"grid": box(2, 3, dtype=torch.float64)})
    x = torch.arange(12, dtype=torch.float64).reshape(2, 2, 3) / 4
    out = encoder({"grid": x})
    assert out.dtype == torch.float32 and out.shape == (2, 6) and encoder.out_dim == 6
    assert out[1].tolist() == [1.5, 1.75, 2.0, 2.25, 2.5, 2.75]  # 6/4 ... 11/4
    assert list(encoder.parameters()) == []


def test_a_discrete_key_is_one_hot_over_n() -> None:
    encoder = ObservationEncoder({"room": discrete(4)})
    out = encoder({"room": torch.tensor([0, 3, 2])})
    assert encoder.out_dim == 4
    assert out.tolist() == [[1, 0, 0, 0], [0, 0, 0, 1], [0, 0, 1, 0]]


def test_a_discrete_key_with_a_start_is_one_hot_of_the_value_minus_start() -> None:
    encoder = ObservationEncoder({"level": discrete(5, start=-2)})  # values -2, -1, 0, 1, 2
    out = encoder({"level": torch.tensor([-2, 2, 0])})
    # -2 - (-2) = 0, 2 - (-2) = 4, 0 - (-2) = 2
    assert out.tolist() == [[1, 0, 0, 0, 0], [0, 0, 0, 0, 1], [0, 0, 1, 0, 0]]


def test_a_multidiscrete_key_concatenates_the_one_hots_of_its_entries_in_order() -> None:
    space = ObservationSpace("multidiscrete", (2,), torch.int64, n=(2, 3), start=(0, 1))
    encoder = ObservationEncoder({"cells": space})
    out = encoder({"cells": torch.tensor([[1, 3], [0, 1]])})
    assert encoder.out_dim == 5  # 2 + 3
    # row 0: entry 0 is 1 -> [0, 1]; entry 1 is 3, minus start 1 -> 2 -> [0, 0, 1]
    # row 1: entry 0 is 0 -> [1, 0]; entry 1 is 1, minus start 1 -> 0 -> [1, 0, 0]
    assert out.tolist() == [[0, 1, 0, 0, 1], [1, 0, 1, 0, 0]]


def test_a_two_dimensional_multidiscrete_key_is_read_row_major() -> None:
    space = ObservationSpace("multidiscrete", (2, 2), torch.int32, n=(2, 2, 3, 3))
    encoder = ObservationEncoder({"board": space})
    out = encoder({"board": torch.tensor([[[1, 0], [2, 1]]], dtype=torch.int32)})
    # entries in the order (0,0)=1, (0,1)=0, (1,0)=2, (1,1)=1 over n 2, 2, 3, 3
    assert out.tolist() == [[0, 1, 1, 0, 0, 0, 1, 0, 1, 0]]


def test_a_multibinary_key_is_cast_to_float32_and_flattened() -> None:
    encoder = ObservationEncoder({"flags": ObservationSpace("multibinary", (2, 2), torch.int8)})
    out = encoder({"flags": torch.tensor([[[1, 0], [0, 1]]], dtype=torch.int8)})
    assert out.dtype == torch.float32 and out.tolist() == [[1, 0, 0, 1]]
    assert not encoder.is_flat  # only boxes are the plain path


def test_keys_are_encoded_in_sorted_order_and_concatenated() -> None:
    encoder = ObservationEncoder({"b": discrete(2), "a": box(1), "c/0": box(2, dtype=torch.int32)})
    assert encoder.keys == ("a", "b", "c/0") and list(encoder.spaces) == ["a", "b", "c/0"]
    out = encoder(
        {"c/0": torch.tensor([[7, 8]], dtype=torch.int32), "a": torch.tensor([[0.5]]), "b": torch.tensor([1])}
    )
    assert encoder.out_dim == 5 and out.tolist() == [[0.5, 0, 1, 7, 8]]  # a, then b's one-hot, then c/0


def test_the_output_is_float32_whatever_the_input_dtype() -> None:
    spaces = {
        "wide": box(2, dtype=torch.float64),
        "half": box(2, dtype=torch.float16),
        "count": box(2, dtype=torch.int32),
        "ram": image(16),  # uint8 of one dim: not an image, a box
        "frame": image(8, 8),
        "room": discrete(3),
        "flags": ObservationSpace("multibinary", (2,), torch.int8),
    }
    encoder = ObservationEncoder(spaces, cnn_features=16)
    for key, space in spaces.items():
        single = ObservationEncoder({key: space}, cnn_features=16)
        ones = torch.ones(3, *space.shape, dtype=space.dtype)
        assert single({key: ones}).dtype == torch.float32, key
    out = encoder({key: torch.ones(3, *s.shape, dtype=s.dtype) for key, s in spaces.items()})
    assert out.dtype == torch.float32 and out.shape == (3, encoder.out_dim)
    assert encoder.out_dim == 2 + 2 + 2 + 16 + 16 + 3 + 2


def test_a_dicttensor_is_read_and_its_other_keys_ignored() -> None:
    encoder = ObservationEncoder({"room": discrete(2)})
    batch = DictTensor({"room": torch.tensor([1, 0]), "reward": torch.zeros(2)})
    assert encoder(batch).tolist() == [[0, 1], [1, 0]]


def test_zero_rows_give_zero_rows_of_features() -> None:
    encoder = ObservationEncoder({"room": discrete(3), "frame": image(3, 3), "pos": box(2)}, cnn_features=8)
    empty = {
        "room": torch.zeros(0, dtype=torch.int64),
        "frame": torch.zeros(0, 3, 3, dtype=torch.uint8),
        "pos": torch.zeros(0, 2),
    }
    assert encoder(empty).shape == (0, 13)


def test_an_encoder_of_a_gym_env_reads_what_it_stores() -> None:
    env = GymEnv(AllSpacesEnv, n_envs=2)
    env.reset(DictTensor(batch_size=2))
    reached, _ = env.step(DictTensor({"action": torch.tensor([[1, 0], [1, 1]])}))
    env.close()
    encoder = ObservationEncoder(observation_spaces(env.observation_space))
    assert encoder.keys == ("cells", "flags", "inner/room", "position")
    assert encoder.out_dim == 17  # cells 3 + 4, flags 3, room 5, position 2
    # at step 1: cells [1 % 3, 1 % 4] = [1, 1], flags [1, 0, 1], room 1, position [0.25, -0.25]
    cells, flags, room, position = [0, 1, 0, 0, 1, 0, 0], [1, 0, 1], [0, 1, 0, 0, 0], [0.25, -0.25]
    row = [*cells, *flags, *room, *position]
    assert encoder(reached).tolist() == [row, row]


# ---------------------------------------------------------------------------- images


@pytest.mark.parametrize(
    ("shape", "channels", "height", "width", "channels_last"),
    [
        ((8, 8, 3), 3, 8, 8, True),  # HWC: the last dim is 1, 3 or 4 and the first is not
        ((8, 6, 1), 1, 8, 6, True),
        ((3, 8, 6), 3, 8, 6, False),  # CHW
        ((4, 8, 6), 4, 8, 6, False),  # a stack of 4 frames
        ((3, 8, 3), 3, 8, 3, False),  # ambiguous: channels first
        ((5, 8, 6), 5, 8, 6, False),  # neither end is 1, 3 or 4: channels first
        ((8, 6), 1, 8, 6, False),  # [H, W]: one channel
    ],
)
def test_the_image_channel_rule(
    shape: tuple[int, ...], channels: int, height: int, width: int, channels_last: bool
) -> None:
    encoder = ObservationEncoder({"frame": image(*shape)}, cnn_features=8)
    assert convs(encoder)[0].in_channels == channels
    assert linears(encoder)[0].in_features == 32 * height * width  # the small CNN keeps the size
    x = frames(2, *shape)
    if len(shape) == 2:
        laid_out = x.unsqueeze(1)
    elif channels_last:
        laid_out = x.permute(0, 3, 1, 2)
    else:
        laid_out = x
    expected = the_cnn(encoder)(laid_out.to(torch.float32) / 255)
    torch.testing.assert_close(encoder({"frame": x}), expected)


def test_nature_dqns_cnn_at_84_by_84() -> None:
    encoder = ObservationEncoder({"frame": image(84, 84, 4)})
    layers = convs(encoder)
    assert [c.in_channels for c in layers] == [4, 32, 64]
    assert [c.out_channels for c in layers] == [32, 64, 64]
    assert [c.kernel_size for c in layers] == [(8, 8), (4, 4), (3, 3)]
    assert [c.stride for c in layers] == [(4, 4), (2, 2), (1, 1)]
    # 84 -> (84 - 8) // 4 + 1 = 20 -> (20 - 4) // 2 + 1 = 9 -> 9 - 3 + 1 = 7
    (linear,) = linears(encoder)
    assert (linear.in_features, linear.out_features) == (64 * 7 * 7, 512)
    assert encoder.out_dim == 512 and not encoder.is_flat
    assert encoder({"frame": frames(2, 84, 84, 4)}).shape == (2, 512)


def test_nature_dqns_cnn_from_36_by_36_and_the_small_one_below() -> None:
    (linear,) = linears(ObservationEncoder({"frame": image(36, 36)}))
    assert linear.in_features == 64 * 1 * 1  # 36 -> 8 -> 3 -> 1
    assert len(convs(ObservationEncoder({"frame": image(35, 36)}))) == 4  # the small CNN, 2 halvings


@pytest.mark.parametrize(
    ("side", "halvings", "last_side"),
    [
        (3, 0, 3),
        (8, 0, 8),
        (9, 0, 9),
        (16, 1, 8),  # 16 -> 8
        (35, 2, 9),  # 35 -> 18 -> 9
    ],
)
def test_the_small_cnn_halves_the_sides_down_to_9(side: int, halvings: int, last_side: int) -> None:
    encoder = ObservationEncoder({"frame": image(side, side)}, cnn_features=64)
    layers = convs(encoder)
    assert [c.out_channels for c in layers] == [16, 32] + [32] * halvings
    assert all(c.kernel_size == (3, 3) and c.padding == (1, 1) for c in layers)
    assert [c.stride for c in layers] == [(1, 1), (1, 1)] + [(2, 2)] * halvings
    (linear,) = linears(encoder)
    assert (linear.in_features, linear.out_features) == (32 * last_side * last_side, 64)
    assert encoder({"frame": frames(3, side, side)}).shape == (3, 64) and encoder.out_dim == 64


def test_images_are_divided_by_255() -> None:
    encoder = ObservationEncoder({"frame": image(1, 1)}, cnn_features=4)
    white = torch.full((1, 1, 1), 255, dtype=torch.uint8)
    torch.testing.assert_close(encoder({"frame": white}), the_cnn(encoder)(torch.ones(1, 1, 1, 1)))


def test_gradients_reach_every_parameter_of_the_cnns() -> None:
    torch.manual_seed(0)
    encoder = ObservationEncoder({"big": image(3, 40, 40), "small": image(8, 8)}, cnn_features=16)
    out = encoder({"big": frames(4, 3, 40, 40), "small": frames(4, 8, 8)})
    out.sum().backward()
    parameters = list(encoder.named_parameters())
    assert len(parameters) == 2 * 4 + 2 * 3  # weights and biases: 4 layers (Nature), 3 (small)
    for name, parameter in parameters:
        assert parameter.grad is not None and parameter.grad.abs().sum() > 0, name


# ---------------------------------------------------------------------------- is_flat, parameters


def test_is_flat_only_when_every_key_is_a_box_that_is_not_an_image() -> None:
    assert ObservationEncoder({"a": box(3), "b": box(2, dtype=torch.float64), "ram": image(128)}).is_flat
    assert not ObservationEncoder({"a": box(3), "room": discrete(2)}).is_flat
    assert not ObservationEncoder({"a": box(3), "frame": image(8, 8)}).is_flat
    assert not ObservationEncoder({"a": ObservationSpace("multibinary", (2,), torch.int8)}).is_flat


def test_an_encoder_without_images_has_no_state_and_draws_nothing_at_random() -> None:
    state = torch.random.get_rng_state()
    encoder = ObservationEncoder(
        {
            "a": box(3),
            "ram": image(128),
            "room": discrete(4, start=1),
            "cells": ObservationSpace("multidiscrete", (2,), torch.int64, n=(2, 3)),
            "flags": ObservationSpace("multibinary", (2,), torch.int8),
        }
    )
    assert torch.equal(torch.random.get_rng_state(), state)
    assert list(encoder.parameters()) == [] and encoder.state_dict() == {}
    ObservationEncoder({"frame": image(8, 8)})  # an image's CNN does draw its initial weights
    assert not torch.equal(torch.random.get_rng_state(), state)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_the_encoder_moves_to_a_cuda_device() -> None:
    space = ObservationSpace("multidiscrete", (2,), torch.int64, n=(2, 3), start=(0, 1))
    encoder = ObservationEncoder({"cells": space, "frame": image(8, 8, 3)}, cnn_features=8).to("cuda")
    x = {
        "cells": torch.tensor([[1, 3]], device="cuda"),
        "frame": frames(1, 8, 8, 3).to("cuda"),
    }
    out = encoder(x)
    assert out.device.type == "cuda" and out.shape == (1, 13)
    assert out[0, :5].tolist() == [0, 1, 0, 0, 1]


# ---------------------------------------------------------------------------- a stand-in


class Positions(torch.nn.Module):
    """A stand-in encoder: only the key "position", through a linear layer."""

    out_dim = 4

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(2, self.out_dim)

    def forward(self, observations: Mapping[str, torch.Tensor] | DictTensor) -> torch.Tensor:
        return torch.relu(self.linear(observations["position"].to(torch.float32)))


def test_a_module_with_out_dim_and_the_same_forward_stands_in_for_the_encoder() -> None:
    def head_output(encoder: ObservationEncoder | Positions, batch: DictTensor) -> torch.Tensor:
        """What a network built on ``encoder`` (by its out_dim) computes."""
        head = torch.nn.Linear(encoder.out_dim, 1)
        out: torch.Tensor = head(encoder(batch))
        return out

    batch = DictTensor({"position": torch.ones(3, 2, dtype=torch.float64), "room": torch.tensor([0, 1, 1])})
    standard = ObservationEncoder({"position": box(2, dtype=torch.float64), "room": discrete(2)})
    assert head_output(standard, batch).shape == (3, 1)
    assert head_output(Positions(), batch).shape == (3, 1)


# ---------------------------------------------------------------------------- errors


def test_bad_spaces_are_refused() -> None:
    with pytest.raises(
        ValueError,
        match=message("ObservationEncoder: spaces must hold at least one key, got an empty mapping"),
    ):
        ObservationEncoder({})
    with pytest.raises(
        TypeError,
        match=message("ObservationEncoder: spaces must be a mapping of keys to ObservationSpace, got a list"),
    ):
        ObservationEncoder([box(2)])  # type: ignore[arg-type]
    with pytest.raises(
        TypeError, match=message("ObservationEncoder: spaces['pos'] must be an ObservationSpace, got a tuple")
    ):
        ObservationEncoder({"pos": ((2,), torch.float32)})  # type: ignore[dict-item]
    with pytest.raises(TypeError, match=message("ObservationEncoder: the keys of spaces must be str, got 0")):
        ObservationEncoder({0: box(2)})  # type: ignore[dict-item]
    with pytest.raises(
        ValueError, match=message("ObservationEncoder: cnn_features must be at least 1, got 0")
    ):
        ObservationEncoder({"frame": image(8, 8)}, cnn_features=0)


def test_a_missing_key_is_named() -> None:
    encoder = ObservationEncoder({"pos": box(2), "room": discrete(3)})
    with pytest.raises(
        ValueError,
        match=message(
            "ObservationEncoder: observations lack the key 'room' (the encoder reads ['pos', 'room']), "
            "got the keys ['pos', 'reward']"
        ),
    ):
        encoder({"pos": torch.zeros(2, 2), "reward": torch.zeros(2)})


def test_a_value_of_the_wrong_dtype_or_shape_is_named() -> None:
    encoder = ObservationEncoder({"pos": box(2), "frame": image(8, 8, 3)}, cnn_features=4)
    good = {"pos": torch.zeros(2, 2), "frame": torch.zeros(2, 8, 8, 3, dtype=torch.uint8)}
    with pytest.raises(
        TypeError,
        match=message(
            "ObservationEncoder: observations['pos'] must be a tensor of shape [N, 2] and dtype torch.float32, "
            "as its box space declares, got a tensor of shape (2, 2), dtype torch.float64, device cpu"
        ),
    ):
        encoder({**good, "pos": torch.zeros(2, 2, dtype=torch.float64)})
    with pytest.raises(
        ValueError,
        match=message(
            "ObservationEncoder: observations['frame'] must be a tensor of shape [N, 8, 8, 3] and dtype "
            "torch.uint8, as its box space declares, got a tensor of shape (2, 3, 8, 8), dtype torch.uint8"
        ),
    ):
        encoder({**good, "frame": torch.zeros(2, 3, 8, 8, dtype=torch.uint8)})
    with pytest.raises(
        ValueError,
        match=message("observations['pos'] must be a tensor of shape [N, 2] and dtype torch.float32"),
    ):
        encoder({**good, "pos": torch.zeros(2)})
    with pytest.raises(
        TypeError,
        match=message("observations['pos'] must be a tensor of shape [N, 2] and dtype torch.float32"),
    ):
        encoder({**good, "pos": [[0.0, 0.0], [0.0, 0.0]]})


def test_a_discrete_key_must_be_int64_and_one_value_per_row() -> None:
    encoder = ObservationEncoder({"room": discrete(3)})
    with pytest.raises(
        TypeError,
        match=message(
            "ObservationEncoder: observations['room'] must be a tensor of shape [N] and dtype torch.int64, "
            "as its discrete space declares, got a tensor of shape (2,), dtype torch.float32"
        ),
    ):
        encoder({"room": torch.zeros(2)})
    with pytest.raises(ValueError, match=message("got a tensor of shape (2, 1), dtype torch.int64")):
        encoder({"room": torch.zeros(2, 1, dtype=torch.int64)})


def test_keys_with_different_rows_and_bad_observations_are_refused() -> None:
    encoder = ObservationEncoder({"a": box(1), "b": box(1)})
    with pytest.raises(
        ValueError,
        match=message(
            "ObservationEncoder: every key of observations must have the same rows; "
            "observations['a'] has 2, observations['b'] 3"
        ),
    ):
        encoder({"a": torch.zeros(2, 1), "b": torch.zeros(3, 1)})
    with pytest.raises(
        TypeError,
        match=message(
            "ObservationEncoder: observations must be a mapping of str to tensors or a DictTensor, got a tensor"
        ),
    ):
        encoder(torch.zeros(2, 1))


@pytest.mark.parametrize(
    ("out_dim", "error", "text"),
    [
        (
            True,
            TypeError,
            "an int out_dim and the keys it reads, got an Odd whose out_dim is a bool",
        ),
        (2.0, TypeError, "whose out_dim is a float"),
        (0, ValueError, "ActorCritic: the encoder's out_dim must be positive, got 0"),
    ],
)
def test_an_encoder_whose_out_dim_is_not_a_positive_int_is_refused(
    out_dim: object, error: type, text: str
) -> None:
    from rlstruct.learning.actor_critic import ActorCritic

    class Odd(TwoFeatures):
        pass

    Odd.out_dim = out_dim  # type: ignore[assignment]
    with pytest.raises(error, match=message(text)):
        ActorCritic(n_actions=2, encoder=Odd())
    Odd.out_dim = np.int64(2)  # type: ignore[assignment]  # a NumPy int is an int
    agent = ActorCritic(n_actions=2, encoder=Odd())
    assert agent.normalized({"observation": torch.zeros(3, 4)}).shape == (3, 2)


class TwoFeatures(torch.nn.Module):
    """A user's encoder that says 3 features and gives 2."""

    keys = ("observation",)
    out_dim = 3

    def forward(self, observation: Mapping[str, torch.Tensor]) -> torch.Tensor:
        return observation["observation"][:, :2].float()


@pytest.mark.parametrize("network", ["ActorCritic", "QNetwork", "SquashedGaussianActor", "TwinQ"])
def test_a_network_names_observations_of_another_size_than_it_was_made_for(network: str) -> None:
    from rlstruct.learning.actor_critic import ActorCritic
    from rlstruct.learning.q_learning import QNetwork
    from rlstruct.learning.soft_actor_critic import SquashedGaussianActor, TwinQ

    def make(**observed: object) -> torch.nn.Module:
        if network == "ActorCritic":
            return ActorCritic(n_actions=2, **observed)  # type: ignore[arg-type]
        if network == "QNetwork":
            return QNetwork(n_actions=2, **observed)  # type: ignore[arg-type]
        if network == "SquashedGaussianActor":
            return SquashedGaussianActor(action_low=[-1.0], action_high=[1.0], **observed)  # type: ignore[arg-type]
        return TwinQ(action_dim=1, **observed)  # type: ignore[arg-type]

    def run(model: torch.nn.Module, observation: torch.Tensor | dict[str, torch.Tensor]) -> torch.Tensor:
        if network == "ActorCritic":
            return model.normalized(observation)  # type: ignore[operator]
        if network == "QNetwork":
            return model.q_values(observation)  # type: ignore[operator]
        if network == "SquashedGaussianActor":
            return model.distribution(observation)[0]  # type: ignore[operator]
        return model(observation, torch.zeros(observation_rows(observation), 1))

    def observation_rows(observation: torch.Tensor | dict[str, torch.Tensor]) -> int:
        return len(observation if isinstance(observation, torch.Tensor) else observation["observation"])

    model = make(obs_dim=4)
    assert run(model, torch.zeros(3, 4)).shape[-1] >= 1  # the size it was made for
    with pytest.raises(
        ValueError,
        match=message(
            f"{network}: the observations give 5 features per row (features of shape [3, 5]), "
            "but the network was made for 4 (obs_dim)"
        ),
    ):
        run(model, torch.zeros(3, 5))
    own = make(encoder=TwoFeatures())
    with pytest.raises(ValueError, match=message("but the network was made for 3 (its encoder's out_dim)")):
        run(own, {"observation": torch.zeros(3, 4)})


class DoubleFeatures(torch.nn.Module):
    """A user's encoder that gives its 3 features in float64, not the float32 its protocol says."""

    keys = ("observation",)
    out_dim = 3

    def forward(self, observation: Mapping[str, torch.Tensor]) -> torch.Tensor:
        return observation["observation"].to(torch.float64)


@pytest.mark.parametrize("network", ["ActorCritic", "QNetwork", "SquashedGaussianActor", "TwinQ"])
def test_an_encoder_returning_float64_features_is_named_with_both_dtypes(network: str) -> None:
    from rlstruct.learning.actor_critic import ActorCritic
    from rlstruct.learning.q_learning import QNetwork
    from rlstruct.learning.soft_actor_critic import SquashedGaussianActor, TwinQ

    observation = {"observation": torch.zeros(2, 3)}
    if network == "ActorCritic":
        model = ActorCritic(n_actions=2, encoder=DoubleFeatures())
        run = lambda: model.normalized(observation)  # noqa: E731
    elif network == "QNetwork":
        q = QNetwork(n_actions=2, encoder=DoubleFeatures())
        run = lambda: q.q_values(observation)  # noqa: E731
    elif network == "SquashedGaussianActor":
        actor = SquashedGaussianActor(action_low=[-1.0], action_high=[1.0], encoder=DoubleFeatures())
        run = lambda: actor.distribution(observation)  # noqa: E731
    else:
        critic = TwinQ(action_dim=1, encoder=DoubleFeatures())
        run = lambda: critic(observation, torch.zeros(2, 1))  # noqa: E731
    with pytest.raises(  # was torch's "mat1 and mat2 must have the same dtype, but got Double and Float"
        TypeError,
        match=message(
            f"{network}: the encoder DoubleFeatures must return features [N, out_dim] of torch.float32, "
            "the dtype of the network's layers, got a tensor of shape (2, 3), dtype torch.float64, device cpu"
        ),
    ):
        run()


def test_the_observation_statistics_name_an_encoder_returning_float64_features() -> None:
    from rlstruct.learning.actor_critic import ActorCritic
    from rlstruct.temporal import TemporalDictTensor

    agent = ActorCritic(n_actions=2, encoder=DoubleFeatures(), normalize=True)
    steps = TemporalDictTensor({"observation": torch.zeros(2, 4, 3)}, torch.tensor([4, 2]))
    with pytest.raises(
        TypeError, match=message("the encoder DoubleFeatures must return features [N, out_dim] of")
    ):
        agent.update_obs_norm(steps)  # was merged into the float64 statistics as it came


class LinearFeatures(torch.nn.Module):
    """A user's encoder with weights: its features take the dtype the network is moved to."""

    keys = ("observation",)
    out_dim = 3

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(3, 3)

    def forward(self, observation: Mapping[str, torch.Tensor]) -> torch.Tensor:
        return self.linear(observation["observation"])  # type: ignore[no-any-return]


def test_a_network_moved_to_float64_takes_its_encoders_float64_features() -> None:
    from rlstruct.learning.actor_critic import ActorCritic
    from rlstruct.learning.q_learning import QNetwork

    observation = {"observation": torch.zeros(2, 3, dtype=torch.float64)}
    agent = ActorCritic(n_actions=2, encoder=LinearFeatures()).double()
    assert agent.normalized(observation).dtype == torch.float64
    q = QNetwork(n_actions=2, encoder=LinearFeatures()).double()
    assert q.q_values(observation).dtype == torch.float64
    single = QNetwork(n_actions=2, encoder=SingleFeatures()).double()  # float32 features, float64 layers
    with pytest.raises(
        TypeError, match=message("must return features [N, out_dim] of torch.float64, the dtype")
    ):
        single.q_values(observation)


class SingleFeatures(DoubleFeatures):
    def forward(self, observation: Mapping[str, torch.Tensor]) -> torch.Tensor:
        return observation["observation"].to(torch.float32)
