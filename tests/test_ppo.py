"""PPO (rlstruct.algos.ppo): the layouts it refuses, its smoke runs (feed-forward, and recurrent with
normalisation), its tuned settings, and its wiring by hand: add_advantages cutting at a termination and
bootstrapping at a truncation, and the minibatch loss written out step by step.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest
import torch
from algo_helpers import assert_the_run_replays_its_final_evaluation, message

from rlstruct import DictTensor, TemporalDictTensor, Trajectories
from rlstruct.algos import ppo
from rlstruct.algos.config import parse_config
from rlstruct.checkpoint import load_checkpoint
from rlstruct.learning.actor_critic import ActorCritic
from rlstruct.learning.on_policy import add_advantages, ppo_minibatch_loss


def test_ppo_rejects_a_layout_it_cannot_split() -> None:
    with pytest.raises(
        ValueError, match=message("config.n_envs (3) must be a multiple of config.n_processes (2)")
    ):
        ppo.train(ppo.Config(env="CartPole-v1", n_envs=3))
    with pytest.raises(ValueError, match=message("config.total_steps (100) must allow one iteration")):
        ppo.train(ppo.Config(env="CartPole-v1", total_steps=100))


def test_ppo_smoke_run_writes_its_run_directory_and_json(tmp_path: Path) -> None:
    out = tmp_path / "result.json"
    config = ppo.Config(
        env="CartPole-v1",
        total_steps=512,
        n_envs=4,
        n_steps=32,
        n_epochs=2,
        minibatch_size=64,
        eval_every=256,
        eval_episodes=2,
        run_dir=str(tmp_path / "runs"),
        json=str(out),
        progress=False,
    )
    results = ppo.train(config)
    assert json.loads(out.read_text()) == results
    assert results["env_steps"] == 512 and results["algo"] == "ppo"
    assert math.isfinite(results["eval_return_mean"])
    assert_the_run_replays_its_final_evaluation(results)
    run_dir = Path(results["run_dir"])
    names = {p.name for p in run_dir.iterdir()}
    assert {"config.json", "progress.csv", "checkpoint.pt", "learning_curve.png"} <= names
    assert any(n.startswith("events.out.tfevents") for n in names)
    header = (run_dir / "progress.csv").read_text().splitlines()[0].split(",")
    assert {"policy_loss", "value_loss", "entropy", "eval_return_mean", "sps", "train_return_mean"} <= set(
        header
    )
    with (run_dir / "progress.csv").open() as f:
        rows = list(csv.DictReader(f))
    trained = [row for row in rows if row["train_return_mean"]]
    assert trained and all(float(row["train_return_mean"]) >= 8 for row in trained)
    evaluations = [row for row in rows if row["eval_return_mean"]]
    assert evaluations and all(row["env_steps"] == row["step"] for row in evaluations)


@pytest.mark.parametrize("memory", ["gru", "lstm"])
def test_recurrent_ppo_smoke_run_saves_its_memory_and_statistics(tmp_path: Path, memory: str) -> None:
    config = ppo.Config(
        env="CartPole-v1",
        total_steps=512,
        n_envs=4,
        n_steps=32,
        n_epochs=2,
        minibatch_size=64,  # 2 rows per minibatch
        recurrent=True,
        memory=memory,
        normalize=True,
        scale_rewards=True,
        eval_every=256,
        eval_episodes=2,
        run_dir=str(tmp_path),
        progress=False,
    )
    results = ppo.train(config)
    assert results["env_steps"] == 512
    assert_the_run_replays_its_final_evaluation(results)
    model = ActorCritic(obs_dim=4, n_actions=2, recurrent=True, memory=memory, normalize=True)
    stored = load_checkpoint(Path(results["run_dir"]) / "checkpoint.pt", model=model)
    assert model.obs_norm is not None and model.obs_norm.count.item() == 512  # every collected step seen
    assert stored["reward_scaler"]["stats.count"].item() == 512
    assert {"actor_memory.weight_hh_l0", "critic_memory.weight_hh_l0"} <= set(stored["model"])


def test_tuned_booleans_are_shown_as_their_flags_and_can_be_turned_off(
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = parse_config(ppo.Config, ["--env", "CueMemory-v0", "--no-normalize"], tuned=ppo.TUNED)
    assert config.recurrent and not config.normalize
    assert capsys.readouterr().out.startswith("tuned settings for CueMemory-v0: --recurrent (")


# ---------------------------------------------------------------------------- PPO's wiring, by hand


def constant_actor_critic(value: float, logits: tuple[float, float] = (0.0, 0.0)) -> ActorCritic:
    """An ActorCritic on 1-d observations whose critic says ``value`` and whose actor says ``logits`` everywhere."""
    model = ActorCritic(obs_dim=1, n_actions=2, action_low=None, action_high=None)
    with torch.no_grad():
        for net, out in ((model.critic, torch.tensor([value])), (model.actor, torch.tensor(logits))):
            last = [m for m in net if isinstance(m, torch.nn.Linear)][-1]
            last.weight.zero_()
            last.bias.copy_(out)
    return model


def two_rows(value: float, ends: str) -> TemporalDictTensor:
    """Two rows of 3 steps of reward 1, both ending at their last step: row 0 terminated, row 1 as ``ends`` says."""
    terminated = torch.tensor([[False, False, True], [False, False, ends == "terminated"]])
    return TemporalDictTensor(
        DictTensor(
            {
                "observation": torch.zeros(2, 3, 1),
                "next/observation": torch.zeros(2, 3, 1),
                "value": torch.full((2, 3), value),
                "next/reward": torch.ones(2, 3),
                "next/terminated": terminated,
                "next/done": torch.tensor([[False, False, True], [False, False, True]]),
            }
        ),
        torch.tensor([3, 3]),
    )


@pytest.mark.parametrize("lam", [1.0, 0.0])
def test_add_advantages_cuts_at_a_termination_and_bootstraps_at_a_truncation(lam: float) -> None:
    gamma, c = 0.9, 2.0
    steps = two_rows(c, ends="truncated")
    add_advantages(constant_actor_critic(c), Trajectories(DictTensor(batch_size=2), steps), gamma, lam)
    if lam == 1.0:  # Monte-Carlo returns minus the value
        terminated = [1 + gamma + gamma**2, 1 + gamma, 1.0]
        truncated = [1 + gamma + gamma**2 + gamma**3 * c, 1 + gamma + gamma**2 * c, 1 + gamma * c]
        expected = [[g - c for g in terminated], [g - c for g in truncated]]
    else:  # one-step TD errors
        expected = [[1 + gamma * c - c, 1 + gamma * c - c, 1 - c], [1 + gamma * c - c] * 3]
    assert torch.allclose(steps["advantage"], torch.tensor(expected), atol=1e-5)
    assert torch.allclose(steps["target"], torch.tensor(expected) + c, atol=1e-5)


def test_a_value_of_one_over_one_minus_gamma_is_exact_only_where_truncation_bootstraps() -> None:
    gamma = 0.9
    c = 1 / (1 - gamma)  # the value of reward 1 forever
    truncated = two_rows(c, ends="truncated")
    add_advantages(constant_actor_critic(c), Trajectories(DictTensor(batch_size=2), truncated), gamma, 0.95)
    assert torch.allclose(truncated["advantage"][1], torch.zeros(3), atol=1e-4)  # nothing to learn
    terminated = two_rows(c, ends="terminated")
    add_advantages(constant_actor_critic(c), Trajectories(DictTensor(batch_size=2), terminated), gamma, 0.95)
    assert bool((terminated["advantage"][1] < -1).all())  # the episode stops: V is too high


def test_ppo_loss_by_hand() -> None:
    # the policy says P(action 1) = 0.75 everywhere; the critic says 2
    model = constant_actor_critic(2.0, logits=(0.0, math.log(3.0)))
    p = [0.25, 0.75]
    action = [1, 1, 0, 0]
    behaviour = [0.5, 0.8, 0.5, 0.1]  # the behaviour policy's probabilities of those actions
    advantage = [1.0, -1.0, 2.0, -2.0]
    target = [3.0, 2.0, 1.0, 2.0]
    minibatch = DictTensor(
        {
            "observation": torch.zeros(4, 1),
            "next/observation": torch.zeros(4, 1),
            "action": torch.tensor(action),
            "log_prob": torch.tensor(behaviour).log(),
            "advantage": torch.tensor(advantage),
            "target": torch.tensor(target),
        }
    )
    clip, vf_coef, ent_coef = 0.2, 0.5, 0.01
    loss, terms = ppo_minibatch_loss(model, minibatch, clip=clip, vf_coef=vf_coef, ent_coef=ent_coef)

    ratio = [p[a] / b for a, b in zip(action, behaviour, strict=True)]  # 1.5, 0.9375, 0.5, 2.5
    mean = sum(advantage) / 4
    std = math.sqrt(sum((a - mean) ** 2 for a in advantage) / 3)  # the sample standard deviation
    normed = [(a - mean) / (std + 1e-8) for a in advantage]
    surrogate = [min(r * a, min(max(r, 1 - clip), 1 + clip) * a) for r, a in zip(ratio, normed, strict=True)]
    policy_loss = -sum(surrogate) / 4
    value_loss = 0.5 * sum((2.0 - t) ** 2 for t in target) / 4
    entropy = -sum(q * math.log(q) for q in p)
    assert terms["policy_loss"] == pytest.approx(policy_loss, abs=1e-5)
    assert terms["value_loss"] == pytest.approx(value_loss, abs=1e-6)
    assert terms["entropy"] == pytest.approx(entropy, abs=1e-6)
    assert terms["clip_fraction"] == pytest.approx(3 / 4)  # 1.5, 0.5 and 2.5 lie outside [0.8, 1.2]
    assert float(loss.detach()) == pytest.approx(
        policy_loss + vf_coef * value_loss - ent_coef * entropy, abs=1e-5
    )
