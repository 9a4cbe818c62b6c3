"""IMPALA (rlstruct.algos.impala): the layouts it refuses, one learner step against the V-trace loss written
out with a slow loop over time, and smoke runs (feed-forward, logging the policy lag, and recurrent) whose
saved agents replay their final evaluation.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import torch
from algo_helpers import assert_the_run_replays_its_final_evaluation, message

from rlstruct import DictTensor, TemporalDictTensor, Trajectories
from rlstruct.algos import impala
from rlstruct.learning.actor_critic import ActorCritic


def test_impala_rejects_a_layout_it_cannot_stream() -> None:
    with pytest.raises(
        ValueError, match=message("config.n_slots (2) must be more than config.n_processes (2)")
    ):
        impala.train(impala.Config(env="CartPole-v1", n_slots=2))
    with pytest.raises(ValueError, match=message("config: batch_slots must be in (0, inf), got 0")):
        impala.train(impala.Config(env="CartPole-v1", batch_slots=0))
    with pytest.raises(ValueError, match=message("config.total_steps (100) must allow one update")):
        impala.train(impala.Config(env="CartPole-v1", total_steps=100))


def _impala_steps(b: int, t: int) -> TemporalDictTensor:
    generator = torch.Generator().manual_seed(0)
    done = torch.zeros(b, t, dtype=torch.bool)
    done[0, 1] = True
    return TemporalDictTensor(
        {
            "observation": torch.randn(b, t, 4, generator=generator),
            "action": torch.randint(0, 2, (b, t), generator=generator),
            "log_prob": torch.full((b, t), -0.7),
            "next/observation": torch.randn(b, t, 4, generator=generator),
            "next/reward": torch.ones(b, t),
            "next/terminated": done.clone(),
            "next/done": done,
        }
    )


def test_impala_learner_step_follows_the_vtrace_loss() -> None:
    """The gradient of one step equals that of the loss written out with a slow loop over time."""
    config = impala.Config(
        env="CartPole-v1",
        gamma=0.9,
        reward_scale=0.5,
        rho_bar=1.0,
        c_bar=0.5,
        ent_coef=0.01,
        max_grad_norm=1e9,
        normalize_advantages=False,
    )
    model = ActorCritic(obs_dim=4, n_actions=2, hidden=(8, 8))
    reference = ActorCritic(obs_dim=4, n_actions=2, hidden=(8, 8))
    reference.load_state_dict(model.state_dict())
    steps = _impala_steps(2, 3)
    batch = Trajectories(DictTensor(batch_size=2), steps)
    stats = impala.learner_step(model, torch.optim.SGD(model.parameters(), lr=0.0), batch, config)
    got = [p.grad for p in model.parameters()]

    obs, nxt = steps["observation"], steps["next/observation"]
    params, value = reference.heads(reference.features(obs.flatten(0, 1))[0])
    log_pi = reference.log_prob(params, steps["action"].flatten(0, 1)).view(2, 3)
    value = value.view(2, 3)
    with torch.no_grad():
        next_value = reference.value_of(nxt.flatten(0, 1)).view(2, 3)
        ratio = (log_pi - steps["log_prob"]).exp()
        rho, c = ratio.clamp(max=1.0), ratio.clamp(max=0.5)
        reward, stop = 0.5 * steps["next/reward"], steps["next/done"]
        vs = torch.zeros(2, 3)
        advantage = torch.zeros(2, 3)
        for i in range(2):
            for s in reversed(range(3)):
                delta = reward[i, s] + 0.9 * next_value[i, s] * ~stop[i, s] - value[i, s]
                later = 0.0 if s == 2 or stop[i, s] else 0.9 * c[i, s] * (vs[i, s + 1] - value[i, s + 1])
                vs[i, s] = value[i, s] + rho[i, s] * delta + later
                bootstrap = next_value[i, s] if s == 2 or stop[i, s] else vs[i, s + 1]
                advantage[i, s] = rho[i, s] * (reward[i, s] + 0.9 * bootstrap * ~stop[i, s] - value[i, s])
    entropy = reference.entropy(params).mean()
    loss = -(log_pi * advantage).mean() + 0.5 * 0.5 * (value - vs).pow(2).mean() - 0.01 * entropy
    loss.backward()
    for mine, theirs in zip(got, reference.parameters(), strict=True):
        assert mine is not None and theirs.grad is not None
        assert torch.allclose(mine, theirs.grad, atol=1e-6)
    assert stats["entropy"] == pytest.approx(float(entropy.detach()))
    assert stats["rho_mean"] == pytest.approx(float(rho.mean()))


def test_impala_smoke_run_logs_policy_lag(tmp_path: Path) -> None:
    config = impala.Config(
        env="CartPole-v1",
        total_steps=1024,
        n_envs=4,
        n_steps=16,
        n_slots=3,
        batch_slots=2,
        eval_every=512,
        eval_episodes=2,
        run_dir=str(tmp_path / "runs"),
        json=str(tmp_path / "result.json"),
        progress=False,
    )
    results = impala.train(config)
    assert results["env_steps"] == 1024 and results["algo"] == "impala"
    assert_the_run_replays_its_final_evaluation(results)
    with (Path(results["run_dir"]) / "progress.csv").open() as f:
        rows = [row for row in csv.DictReader(f) if row["policy_lag_mean"]]
    assert len(rows) == 1024 // (2 * 2 * 16)  # one row per update of 2 slots x 2 envs x 16 steps
    for row in rows:
        assert 0 <= float(row["policy_lag_mean"]) <= float(row["policy_lag_max"])
        assert 0 < float(row["rho_mean"]) <= 1.0
    assert float(rows[0]["policy_lag_max"]) == 0  # the first update: nothing published yet


def test_recurrent_impala_smoke_run(tmp_path: Path) -> None:
    config = impala.Config(
        env="CartPole-v1",
        total_steps=1024,
        n_envs=4,
        n_steps=16,
        n_slots=3,
        batch_slots=2,
        recurrent=True,
        normalize=True,
        eval_every=512,
        eval_episodes=2,
        run_dir=str(tmp_path),
        progress=False,
    )
    results = impala.train(config)
    assert results["env_steps"] == 1024
    assert_the_run_replays_its_final_evaluation(results)
