"""Tests of the batchers' initial weights: ``weights=`` at construction, and the warning without it.

A batcher whose agents act before they were given the learner's weights
(``weights=`` or ``update()``) acts with whatever ``agent_factory`` made; the
first ``execute()`` says so, once. Both batchers keep the same contract.
"""

from __future__ import annotations

import multiprocessing
import re
from typing import Any

import pytest
import torch
from mp_helpers import LinearAgent

from rlstruct import GymEnv, LocalBatcher, MultiprocessBatcher, Trajectories
from rlstruct.testing import RandomAgent

CARTPOLE = {"env": "CartPole-v1"}
WARNING = "acts with the agent's own initial weights"
LAYOUT: dict[str, Any] = {"n_envs": 2, "n_timesteps": 5, "seed": 4}


def learner() -> LinearAgent:
    """A learner whose weights differ from every agent ``LinearAgent()`` makes."""
    model = LinearAgent()
    with torch.no_grad():
        model.linear.weight.mul_(-3.0)
        model.linear.bias.copy_(torch.tensor([1.5, -0.5]))
    return model


def run_once(batcher: LocalBatcher | MultiprocessBatcher) -> Trajectories:
    batcher.execute()
    batch = batcher.get()
    assert batch is not None
    return batch


def assert_logits_are_the_models(batch: Trajectories, model: LinearAgent) -> None:
    steps = batch.trajectories
    with torch.no_grad():
        expected = model.linear(steps["observation"])
    assert torch.allclose(steps["logits"], expected, atol=1e-6)
    assert not torch.allclose(steps["logits"], LinearAgent().linear(steps["observation"]).detach())


def test_local_batcher_warns_once_without_weights_and_names_the_fix() -> None:
    with LocalBatcher(LinearAgent, {}, GymEnv, CARTPOLE, **LAYOUT, n_processes=2) as batcher:
        batcher.reset()
        with pytest.warns(UserWarning, match=WARNING) as record:
            run_once(batcher)
        assert len(record) == 1 and record[0].filename == __file__  # points at the caller's execute()
        text = str(record[0].message)
        assert "LocalBatcher" in text and "not the learner's" in text
        assert "weights=model.state_dict()" in text and "call update() before execute()" in text
        run_once(batcher)  # once per batcher: warnings are errors here
        batcher.reset()
        run_once(batcher)


@pytest.mark.parametrize("n_processes", [1, 2])
def test_local_batcher_with_weights_acts_with_the_learners_and_does_not_warn(n_processes: int) -> None:
    model = learner()
    with LocalBatcher(
        LinearAgent, {}, GymEnv, CARTPOLE, **LAYOUT, n_processes=n_processes, weights=model.state_dict()
    ) as batcher:
        batcher.reset()
        batch = run_once(batcher)
    assert_logits_are_the_models(batch, model)
    assert batch.info["policy_version"].tolist() == [0] * 2 * n_processes  # weights= is no update


def test_local_batcher_does_not_warn_after_update_or_for_an_agent_without_weights() -> None:
    model = learner()
    with LocalBatcher(LinearAgent, {}, GymEnv, CARTPOLE, **LAYOUT) as batcher:
        batcher.reset()
        batcher.update(model.state_dict())
        assert_logits_are_the_models(run_once(batcher), model)
    with LocalBatcher(RandomAgent, {}, GymEnv, CARTPOLE, **LAYOUT) as batcher:
        batcher.reset()
        run_once(batcher)


@pytest.mark.parametrize("batcher_class", [LocalBatcher, MultiprocessBatcher])
def test_bad_initial_weights_raise_naming_the_key_before_any_worker_starts(batcher_class: type) -> None:
    name = batcher_class.__name__
    good = LinearAgent().state_dict()
    workers = set(multiprocessing.active_children())
    cases: list[tuple[Any, type[Exception], str]] = [
        ({"linear.weight": good["linear.weight"]}, ValueError, "weights lack the keys ['linear.bias']"),
        (
            {**good, "extra": torch.zeros(1)},
            ValueError,
            "weights lack the keys [] and have unexpected keys ['extra']",
        ),
        (
            {**good, "linear.bias": torch.zeros(3)},
            ValueError,
            "weight 'linear.bias' has dtype torch.float32 and shape (3,), expected torch.float32 and (2,)",
        ),
        ({**good, "linear.bias": [0.0, 0.0]}, TypeError, "weight 'linear.bias' must be a tensor"),
        ([1, 2], TypeError, "weights must be a state_dict (a mapping of tensors), got"),
    ]
    for weights, error, text in cases:
        with pytest.raises(error, match=re.escape(f"{name}.__init__: {text}")):
            batcher_class(LinearAgent, {}, GymEnv, CARTPOLE, **LAYOUT, weights=weights)
    assert set(multiprocessing.active_children()) == workers  # no worker was started


def test_multiprocess_batcher_warns_once_without_weights() -> None:
    with MultiprocessBatcher(LinearAgent, {}, GymEnv, CARTPOLE, **LAYOUT, n_processes=2) as batcher:
        batcher.reset()
        with pytest.warns(UserWarning, match=WARNING) as record:
            run_once(batcher)
        assert len(record) == 1 and record[0].filename == __file__
        assert "MultiprocessBatcher" in str(record[0].message)
        run_once(batcher)


def test_multiprocess_batcher_with_weights_acts_with_the_learners_like_local_batcher() -> None:
    model = learner()
    args: dict[str, Any] = {**LAYOUT, "n_processes": 2, "weights": model.state_dict()}
    with (
        MultiprocessBatcher(LinearAgent, {}, GymEnv, CARTPOLE, **args) as batcher,
        LocalBatcher(LinearAgent, {}, GymEnv, CARTPOLE, **args) as local,
    ):
        batcher.reset()
        local.reset()
        batch = run_once(batcher)
        assert batch.equal(run_once(local))
    assert_logits_are_the_models(batch, model)
    assert batch.info["policy_version"].tolist() == [0] * 4


def test_streaming_multiprocess_batcher_warns_when_the_workers_start() -> None:
    with MultiprocessBatcher(
        LinearAgent, {}, GymEnv, CARTPOLE, **LAYOUT, n_processes=1, mode="stream", n_slots=2
    ) as batcher:
        with pytest.warns(UserWarning, match=WARNING):
            batcher.reset()  # the workers start filling slots at once: no execute() in this mode
        assert batcher.get() is not None
