"""Tests for rlstruct.learning.losses and metrics: padding, empty batches and rows that do not fit."""

from __future__ import annotations

import re

import pytest
import torch

from rlstruct import TemporalDictTensor
from rlstruct.algos.evaluation import episode_returns
from rlstruct.learning.losses import actor_critic_loss, normalize_advantages, ppo_loss
from rlstruct.learning.metrics import EpisodeReturns


def test_actor_critic_loss_selects_out_padding_that_holds_nan_or_inf() -> None:
    mask = torch.tensor([[True, True, False]])
    log_prob = torch.tensor([[-1.0, -2.0, float("-inf")]], requires_grad=True)
    value = torch.tensor([[1.0, 2.0, float("nan")]], requires_grad=True)
    advantage = torch.tensor([[1.0, -1.0, float("inf")]])
    target = torch.tensor([[2.0, 2.0, float("nan")]])  # as fill_padding(nan) leaves them
    entropy = torch.tensor([[0.5, 0.3, float("nan")]], requires_grad=True)
    loss, terms = actor_critic_loss(
        log_prob, advantage, value, target, entropy, mask, vf_coef=0.5, ent_coef=0.1
    )
    assert terms == pytest.approx({"policy_loss": -0.5, "value_loss": 0.25, "entropy": 0.4})  # two steps
    loss.backward()
    for grad in (log_prob.grad, value.grad, entropy.grad):
        assert grad is not None and torch.isfinite(grad).all() and grad[0, 2] == 0


def test_actor_critic_loss_of_no_valid_step_is_zero_and_ppo_loss_of_none_is_refused() -> None:
    zeros = torch.zeros(2, 3, requires_grad=True)
    loss, terms = actor_critic_loss(
        zeros, zeros, zeros, zeros, zeros, torch.zeros(2, 3, dtype=torch.bool), vf_coef=0.5, ent_coef=0.0
    )
    assert float(loss.detach()) == 0.0 and terms == {"policy_loss": 0.0, "value_loss": 0.0, "entropy": 0.0}
    empty = torch.zeros(0)
    with pytest.raises(
        ValueError, match=re.escape("ppo_loss: the minibatch must hold at least one step, got none")
    ):
        ppo_loss(empty, empty, empty, empty, empty, empty, clip=0.2, vf_coef=0.5, ent_coef=0.0)


def test_episode_returns_refuse_a_batch_of_other_rows() -> None:
    steps = TemporalDictTensor(
        {"next/reward": torch.ones(1, 3), "next/done": torch.tensor([[False, False, True]])},
        torch.tensor([3]),
    )
    returns = EpisodeReturns(4)
    with pytest.raises(
        ValueError, match=re.escape("EpisodeReturns.add: the batch has 1 rows, expected n_rows=4")
    ):
        returns.add(steps)  # it broadcast the row's rewards to the four
    with pytest.raises(ValueError, match=re.escape("EpisodeReturns: n_rows must be at least 1, got 0")):
        EpisodeReturns(0)
    one = EpisodeReturns(1)
    one.add(steps)
    assert one.pop_mean() == 3.0


def test_actor_critic_loss_names_a_mask_that_is_not_bool() -> None:
    x = torch.zeros(1, 2)
    with pytest.raises(
        TypeError, match=re.escape("actor_critic_loss: mask must be a bool tensor, got a tensor")
    ):
        actor_critic_loss(x, x, x, x, x, torch.ones(1, 2), vf_coef=0.5, ent_coef=0.0)


def test_episode_returns_leave_out_a_nan_reward_at_padding() -> None:
    steps = TemporalDictTensor(
        {
            "next/reward": torch.tensor([[1.0, 1.0, float("nan")]]),
            "next/done": torch.tensor([[False, True, True]]),
        },
        torch.tensor([2]),
    )
    returns = EpisodeReturns(1)
    returns.add(steps)
    assert returns.pop_mean() == 2.0
    assert episode_returns(steps) == [2.0]


def test_losses_refuse_inputs_that_would_broadcast_to_another_shape() -> None:
    x, mask = torch.zeros(4), torch.ones(2, 2, dtype=torch.bool)
    with pytest.raises(
        ValueError, match=re.escape("ppo_loss: value must have the shape of log_prob, [4], got a tensor")
    ):
        # [4, 1] against the targets [4] would be a [4, 4] value loss
        ppo_loss(x, x, x, x.unsqueeze(-1), x, x, clip=0.2, vf_coef=0.5, ent_coef=0.0)
    with pytest.raises(
        ValueError, match=re.escape("actor_critic_loss: value must have the shape of log_prob, [2, 2], got")
    ):
        y = torch.zeros(2, 2)
        actor_critic_loss(y, y, y.unsqueeze(-1), y, y, mask, vf_coef=0.5, ent_coef=0.0)
    with pytest.raises(
        ValueError, match=re.escape("actor_critic_loss: mask must have the shape of log_prob, [2, 2], got")
    ):
        actor_critic_loss(y, y, y, y, y, mask[:1], vf_coef=0.5, ent_coef=0.0)
    with pytest.raises(TypeError, match=re.escape("ppo_loss: target must be a float tensor, got a list")):
        ppo_loss(x, x, x, x, [0.0] * 4, x, clip=0.2, vf_coef=0.5, ent_coef=0.0)  # type: ignore[arg-type]


def test_normalize_advantages_refuses_a_mask_that_is_not_bool_or_of_another_shape() -> None:
    advantage = torch.tensor([[1.0, 3.0, 9.0]])
    with pytest.raises(TypeError, match=re.escape("normalize_advantages: mask must be a bool tensor, got")):
        normalize_advantages(advantage, torch.tensor([[1, 1, 0]]))  # indexes rows 1, 1, 0 instead
    with pytest.raises(TypeError, match=re.escape("normalize_advantages: mask must be a bool tensor, got")):
        normalize_advantages(advantage, torch.ones(1, 3))
    with pytest.raises(
        ValueError, match=re.escape("normalize_advantages: mask must have the shape of advantage, [1, 3]")
    ):
        normalize_advantages(advantage, torch.ones(3, 1, dtype=torch.bool))
