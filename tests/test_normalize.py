"""Tests for rlstruct.normalize: running statistics against numpy-free hand computations."""

from __future__ import annotations

import math
import re

import pytest
import torch

from rlstruct.normalize import ObservationNormalizer, RewardScaler, RunningMeanStd, ValueNormalizer


def message(text: str) -> str:
    return re.escape(text)


def test_running_statistics_merged_batch_by_batch_equal_those_of_all_samples() -> None:
    torch.manual_seed(0)
    samples = torch.randn(100, 3, dtype=torch.float64) * torch.tensor([1.0, 5.0, 0.1]) + 7.0
    stats = RunningMeanStd((3,))
    for chunk in samples.split([1, 10, 39, 50]):
        stats.update(chunk)
    assert stats.count.item() == 100
    assert torch.allclose(stats.mean, samples.mean(0))
    assert torch.allclose(stats.var, samples.var(0, unbiased=False))


def test_running_statistics_ignore_an_empty_batch_and_refuse_a_wrong_shape() -> None:
    stats = RunningMeanStd((2,))
    stats.update(torch.zeros(0, 2))
    assert stats.count.item() == 0
    with pytest.raises(ValueError, match=message("RunningMeanStd.update: x must have shape [N, 2], got")):
        stats.update(torch.zeros(4, 3))


def test_observation_normalizer_keeps_float32_and_clips() -> None:
    norm = ObservationNormalizer((1,), clip=2.0)
    norm.update(torch.tensor([[0.0], [2.0]]))  # mean 1, var 1
    out = norm(torch.tensor([[2.0], [100.0], [-100.0]]))
    assert out.dtype == torch.float32
    assert out.flatten().tolist() == pytest.approx([1.0, 2.0, -2.0])
    assert norm(torch.tensor([[3]])).dtype == torch.float32  # integer observations become float32


def test_observation_statistics_travel_in_the_state_dict() -> None:
    norm = ObservationNormalizer((2,))
    norm.update(torch.tensor([[1.0, 2.0], [3.0, 6.0]]))
    copy = ObservationNormalizer((2,))
    copy.load_state_dict(norm.state_dict())
    assert sorted(norm.state_dict()) == ["count", "mean", "var"]
    x = torch.tensor([[5.0, 5.0]])
    assert torch.equal(copy(x), norm(x))


def test_reward_scaler_divides_by_the_deviation_of_the_discounted_return() -> None:
    scaler = RewardScaler(n_rows=1, gamma=0.5)
    reward = torch.tensor([[1.0, 1.0, 1.0]])
    done = torch.tensor([[False, True, False]])
    scaled = scaler(reward, done)
    # returns: 1; 0.5 * 1 + 1 = 1.5 (episode ends: reset); 1
    # mean 3.5 / 3, var = mean of squares - square of mean = (1 + 2.25 + 1) / 3 - (3.5 / 3) ** 2
    var = 4.25 / 3 - (3.5 / 3) ** 2
    assert torch.allclose(scaled, reward / var**0.5, atol=1e-6)
    assert scaler.returns.tolist() == [1.0]  # carried to the next batch


def test_reward_scaler_skips_padding_and_refuses_bad_shapes() -> None:
    scaler = RewardScaler(n_rows=2, gamma=1.0)
    reward = torch.tensor([[1.0, 5.0], [2.0, 7.0]])
    done = torch.zeros(2, 2, dtype=torch.bool)
    mask = torch.tensor([[True, False], [True, True]])
    scaler(reward, done, mask)
    assert scaler.returns.tolist() == [1.0, 9.0]  # the padded 5 is not added
    assert scaler.stats.count.item() == 3
    with pytest.raises(ValueError, match=message("RewardScaler: reward and done must both be [2, T], got")):
        scaler(torch.ones(3, 2), torch.zeros(3, 2, dtype=torch.bool))
    with pytest.raises(ValueError, match=message("RewardScaler: gamma must be in [0, 1], got 1.5")):
        RewardScaler(2, 1.5)


def test_merging_the_moments_of_two_batches_equals_updating_with_both() -> None:
    generator = torch.Generator().manual_seed(0)
    first, second = torch.randn(7, 3, generator=generator), 5 + 2 * torch.randn(11, 3, generator=generator)
    updated, merged = RunningMeanStd((3,)), RunningMeanStd((3,))
    updated.update(first)
    updated.update(second)
    merged.update(first)
    x = second.to(torch.float64)
    merged.merge(torch.tensor(11.0, dtype=torch.float64), x.mean(0), x.var(0, unbiased=False))
    assert merged.count.item() == updated.count.item() == 18
    assert torch.allclose(merged.mean, updated.mean) and torch.allclose(merged.var, updated.var)
    both = torch.cat([first, second]).to(torch.float64)
    assert torch.allclose(merged.mean, both.mean(0)) and torch.allclose(
        merged.var, both.var(0, unbiased=False)
    )
    merged.merge(0, x.mean(0), x.var(0, unbiased=False))  # no samples: nothing changes
    assert merged.count.item() == 18


def test_value_normalizer_follows_its_targets_and_keeps_every_value() -> None:
    torch.manual_seed(0)
    layer, norm = torch.nn.Linear(4, 1), ValueNormalizer(rate=0.5)
    x = torch.randn(32, 4)
    assert torch.equal(norm(layer(x)), layer(x))  # the identity before the first update
    for targets in (torch.full((8,), 100.0), torch.tensor([50.0, 150.0])):
        before = norm(layer(x)).detach()
        norm.update(targets, layer)
        torch.testing.assert_close(norm(layer(x)).detach(), before, rtol=1e-5, atol=1e-4)
    # moments: 0 -> 50 -> 75 (mean); 1 -> 5000.5 -> 8750.25 (mean square)
    assert norm.mean.item() == 75.0 and norm.std.item() == pytest.approx((8750.25 - 75.0**2) ** 0.5)
    assert norm.mean.dtype == torch.float64 and norm(layer(x)).dtype == torch.float32
    norm.update(torch.empty(0), layer)  # no real step: nothing changes
    assert norm.mean.item() == 75.0


def test_value_normalizer_learns_a_large_value_in_few_small_steps() -> None:
    # values of 100 +- 30 from features of unit scale: each Adam step moves a plain layer's output
    # by about its learning rate, and the normalised layer's by that times the targets' scale
    torch.manual_seed(0)
    x = torch.randn(64, 4)
    target = 100.0 + 30.0 * x[:, 0]
    errors = []
    for norm in (None, ValueNormalizer(rate=0.1)):
        layer = torch.nn.Linear(4, 1)
        optimizer = torch.optim.Adam(layer.parameters(), lr=0.1)
        for _ in range(200):
            value = layer(x).squeeze(-1) if norm is None else norm(layer(x)).squeeze(-1)
            scale = 1.0 if norm is None else norm.std.float()
            loss = ((value - target) / scale).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if norm is not None:
                norm.update(target, layer)
        final = layer(x).squeeze(-1) if norm is None else norm(layer(x)).squeeze(-1)
        errors.append((final - target).abs().mean().item())
    assert errors[0] > 50.0 and errors[1] < errors[0] / 5  # 77.6 and 9.5 when written


def test_value_normalizer_refuses_what_it_cannot_use() -> None:
    with pytest.raises(ValueError, match=message("ValueNormalizer: rate must be in (0, 1], got 0.0")):
        ValueNormalizer(rate=0.0)
    with pytest.raises(ValueError, match=message("ValueNormalizer: min_var must be positive, got -1.0")):
        ValueNormalizer(min_var=-1.0)
    with pytest.raises(ValueError, match=message("ValueNormalizer.update: layer must be a torch.nn.Linear")):
        ValueNormalizer().update(torch.ones(2), torch.nn.Linear(4, 2))


def test_reward_scaler_checks_the_mask_and_takes_a_batch_without_steps() -> None:
    scaler = RewardScaler(2, 0.99)
    with pytest.raises(ValueError, match=re.escape("RewardScaler: mask must be [2, 4] as reward")):
        scaler(torch.zeros(2, 4), torch.zeros(2, 4, dtype=torch.bool), torch.ones(2, 3, dtype=torch.bool))
    assert scaler(torch.zeros(2, 0), torch.zeros(2, 0, dtype=torch.bool)).shape == (2, 0)


@pytest.mark.parametrize(
    ("call", "error", "text"),
    [
        (
            lambda: ObservationNormalizer((3,), clip=None),
            TypeError,
            "ObservationNormalizer: clip must be a number",
        ),
        (
            lambda: ObservationNormalizer((3,), eps=-1.0),
            ValueError,
            "ObservationNormalizer: eps must be in [0, inf)",
        ),
        (
            lambda: ObservationNormalizer(3),
            TypeError,
            "ObservationNormalizer: shape must be a sequence of ints",
        ),
        (lambda: RewardScaler(0, 0.9), ValueError, "RewardScaler: n_rows must be at least 1, got 0"),
        (lambda: RewardScaler(2, None), TypeError, "RewardScaler: gamma must be a number, got a NoneType"),
        (lambda: RewardScaler(2, 0.9, clip=0.0), ValueError, "RewardScaler: clip must be in (0, inf]"),
    ],
)
def test_normalizers_check_their_arguments_when_made(call: object, error: type[Exception], text: str) -> None:
    with pytest.raises(error, match=message(text)):
        call()  # type: ignore[operator]


def test_observation_normalizer_refuses_an_observation_of_another_shape() -> None:
    norm = ObservationNormalizer((3,))
    assert norm(torch.ones(2, 5, 3)).shape == (2, 5, 3)  # any leading dimensions
    with pytest.raises(
        ValueError, match=message("ObservationNormalizer: x must have shape [..., 3], got a tensor")
    ):
        norm(torch.ones(4, 1))  # would broadcast to [4, 3]
    with pytest.raises(ValueError, match=message("ObservationNormalizer.update: x must have shape [N], got")):
        ObservationNormalizer(()).update(torch.tensor(1.0))


def test_reward_scaler_refuses_integer_rewards_and_flags_that_are_not_bool() -> None:
    scaler = RewardScaler(3, 1.0)
    done = torch.zeros(3, 2, dtype=torch.bool)
    with pytest.raises(TypeError, match=message("RewardScaler: reward must be a float tensor, got a tensor")):
        scaler(torch.ones(3, 2, dtype=torch.int64), done)  # its scale would be cast to an int (0)
    with pytest.raises(TypeError, match=message("RewardScaler: done must be a bool tensor, got a tensor")):
        scaler(torch.ones(3, 2), done.long())  # an int would index rows instead of masking them
    with pytest.raises(TypeError, match=message("RewardScaler: mask must be a bool tensor, got a tensor")):
        scaler(torch.ones(3, 2), done, torch.ones(3, 2))
    assert scaler.stats.count.item() == 0  # nothing was merged


@pytest.mark.parametrize(
    ("call", "error", "text"),
    [
        (lambda: ValueNormalizer(rate="0.5"), TypeError, "ValueNormalizer: rate must be a number, got a str"),
        (
            lambda: ValueNormalizer(rate=None),
            TypeError,
            "ValueNormalizer: rate must be a number, got a NoneType",
        ),
        (
            lambda: ValueNormalizer(min_var="x"),
            TypeError,
            "ValueNormalizer: min_var must be a number, got a str",
        ),
        (
            lambda: ValueNormalizer(min_var=math.inf),
            ValueError,
            "ValueNormalizer: min_var must be finite, got inf",
        ),
        (
            lambda: ValueNormalizer().update([1.0, 2.0], torch.nn.Linear(2, 1)),  # type: ignore[arg-type]
            TypeError,
            "ValueNormalizer.update: target must be a tensor, got a list",
        ),
        (
            lambda: RewardScaler(1, 0.9)(torch.ones(1, 2), None),  # type: ignore[arg-type]
            TypeError,
            "RewardScaler: done must be a bool tensor, got a NoneType",
        ),
    ],
)
def test_value_normalizer_and_reward_scaler_name_an_argument_of_the_wrong_type(
    call: object, error: type[Exception], text: str
) -> None:
    with pytest.raises(error, match=message(text)):
        call()  # type: ignore[operator]
