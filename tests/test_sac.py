"""SAC's pieces: the squashed Gaussian's log-probability, the actor, the twin critics, the target, one update,
and a smoke run that learns after its random steps and whose saved agent replays its final evaluation.
"""

from __future__ import annotations

import copy
import math
import re
from pathlib import Path

import pytest
import torch
from algo_helpers import assert_the_run_replays_its_final_evaluation

from rlstruct import DictTensor
from rlstruct.algos import sac
from rlstruct.learning.soft_actor_critic import (
    SACLearner,
    SquashedGaussianActor,
    TwinQ,
    soft_td_target,
    squashed_log_prob,
)


def message(text: str) -> str:
    return re.escape(text)


def test_squashed_log_prob_matches_a_tanh_transformed_normal() -> None:
    generator = torch.Generator().manual_seed(0)
    mean = torch.randn(64, 3, generator=generator, dtype=torch.float64)
    log_std = torch.randn(64, 3, generator=generator, dtype=torch.float64).clamp(-2, 1)
    u = mean + log_std.exp() * torch.randn(64, 3, generator=generator, dtype=torch.float64)
    reference = torch.distributions.TransformedDistribution(
        torch.distributions.Normal(mean, log_std.exp()), [torch.distributions.TanhTransform()]
    )
    expected = reference.log_prob(u.tanh()).sum(-1)
    assert torch.allclose(squashed_log_prob(mean, log_std, u), expected, atol=1e-6)


def test_squashed_log_prob_by_hand_and_where_tanh_saturates() -> None:
    # N(u=1; 0, 1) = -0.5 - log sqrt(2 pi); log(1 - tanh(1)^2) = log(0.419974...)
    by_hand = -0.5 - 0.5 * math.log(2 * math.pi) - math.log(1 - math.tanh(1.0) ** 2)
    value = squashed_log_prob(torch.zeros(1, 1), torch.zeros(1, 1), torch.ones(1, 1))
    assert value.item() == pytest.approx(by_hand, rel=1e-6)
    # At u = 20, tanh(u) rounds to 1 in float32; the log-probability stays finite.
    far = squashed_log_prob(torch.zeros(1, 1), torch.zeros(1, 1), torch.full((1, 1), 20.0))
    assert math.isfinite(far.item())
    assert far.item() == pytest.approx(-200 - 0.5 * math.log(2 * math.pi) - 2 * (math.log(2) - 20), rel=1e-5)


def test_soft_td_target_by_hand() -> None:
    reward = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)  # cast to next_q's dtype
    terminated = torch.tensor([False, False, True])
    next_q = torch.tensor([[4.0, 1.0, 9.0], [3.0, 2.0, 7.0]])
    next_log_prob = torch.tensor([0.5, -1.0, 3.0])
    target = soft_td_target(reward, terminated, next_q, next_log_prob, alpha=0.2, gamma=0.9)
    # row 0: 1 + 0.9 (3 - 0.1); row 1: -2 + 0.9 (1 + 0.2); row 2 terminated: 0.5
    assert target.dtype == torch.float32
    assert torch.allclose(target, torch.tensor([3.61, -0.92, 0.5]))


def test_soft_td_target_refuses_flags_that_are_not_bool_and_log_probs_of_another_shape() -> None:
    reward, terminated = torch.ones(2), torch.tensor([False, True])
    next_q, next_log_prob = torch.zeros(2, 2), torch.zeros(2)
    with pytest.raises(TypeError, match=message("soft_td_target: terminated must be a bool tensor [2], got")):
        # an int flag would be inverted bitwise (~1 = -2): a negative discount instead of none
        soft_td_target(reward, terminated.long(), next_q, next_log_prob, alpha=0.2, gamma=0.9)
    with pytest.raises(
        ValueError, match=message("soft_td_target: next_log_prob must be a float tensor [2], got")
    ):
        # [N, 1] log-probabilities would broadcast against the [N] values to [N, N] targets
        soft_td_target(reward, terminated, next_q, next_log_prob.unsqueeze(-1), alpha=0.2, gamma=0.9)
    with pytest.raises(ValueError, match=message("soft_td_target: gamma must be in [0, 1], got 1.5")):
        soft_td_target(reward, terminated, next_q, next_log_prob, alpha=0.2, gamma=1.5)
    twin = torch.zeros(5, 2)  # five rows of two critics: the critics must come first
    with pytest.raises(
        ValueError,
        match=message(
            "soft_td_target: next_q must be [K, N], one row per critic, with N = 5 (reward's rows)"
        ),
    ):
        soft_td_target(
            torch.ones(5), torch.zeros(5, dtype=torch.bool), twin, torch.zeros(5), alpha=0.2, gamma=0.9
        )
    with pytest.raises(ValueError, match=message("next_q must be [K, N], one row per critic, with N = 2")):
        soft_td_target(reward, terminated, torch.zeros(0, 2), next_log_prob, alpha=0.2, gamma=0.9)


def actor(**kwargs: object) -> SquashedGaussianActor:
    args: dict[str, object] = {"obs_dim": 3, "action_low": [-2.0, 0.0], "action_high": [2.0, 1.0]}
    args.update(kwargs)
    agent = SquashedGaussianActor(hidden=(16, 16), **args)  # type: ignore[arg-type]
    agent.seed(0)
    return agent


def act(agent: SquashedGaussianActor, greedy: list[bool]) -> DictTensor:
    z = DictTensor({"greedy": torch.tensor(greedy)})
    obs = DictTensor({"observation": torch.randn(len(greedy), 3, generator=torch.Generator().manual_seed(1))})
    out: DictTensor = agent(agent.initial_state(z, len(greedy)), obs, z)[0]
    return out


def test_actor_scales_to_the_bounds_and_acts_greedily_where_asked() -> None:
    agent = actor()
    out = act(agent, [False] * 255 + [True])
    low, high = torch.tensor([-2.0, 0.0]), torch.tensor([2.0, 1.0])
    assert out["action"].dtype == torch.float32 and out["unit_action"].shape == (256, 2)
    assert bool(((out["action"] >= low) & (out["action"] <= high)).all())
    assert torch.allclose(out["action"], (high + low) / 2 + (high - low) / 2 * out["unit_action"])
    obs = torch.randn(256, 3, generator=torch.Generator().manual_seed(1))
    mean, _ = agent.distribution(obs[255:])
    assert torch.allclose(out["unit_action"][255], mean.tanh()[0])
    assert not torch.allclose(out["unit_action"][254], agent.distribution(obs[254:255])[0].tanh()[0])


def test_actor_draws_uniform_actions_while_its_buffer_says_so_and_reproducibly() -> None:
    agent = actor()
    agent.uniform.fill_(True)
    first = act(agent, [False] * 2000)
    assert "uniform" in agent.state_dict()  # travels with batcher.update(weights)
    unit = first["unit_action"]
    assert bool((unit.abs() <= 1).all())
    assert unit.mean().abs().item() < 0.05 and unit.var().item() == pytest.approx(1 / 3, abs=0.03)
    agent.seed(0)
    assert torch.equal(act(agent, [False] * 2000)["unit_action"], unit)  # from self.generator
    greedy = act(agent, [True] * 2)["unit_action"]  # greedy rows ignore the flag
    obs = torch.randn(2, 3, generator=torch.Generator().manual_seed(1))
    assert torch.allclose(greedy, agent.distribution(obs)[0].tanh())


def test_actor_sample_is_reparametrised_and_matches_its_log_prob() -> None:
    agent = actor()
    obs = torch.randn(8, 3)
    unit, log_prob = agent.sample(obs, torch.Generator().manual_seed(3))
    mean, log_std = agent.distribution(obs)
    u = torch.atanh(unit.clamp(-1 + 1e-6, 1 - 1e-6))
    assert torch.allclose(log_prob, squashed_log_prob(mean, log_std, u), atol=1e-3)
    (unit.sum() + log_prob.sum()).backward()
    assert all(p.grad is not None and bool(p.grad.abs().sum() > 0) for p in agent.parameters())


@pytest.mark.parametrize(
    ("kwargs", "text"),
    [
        ({"obs_dim": 0}, "SquashedGaussianActor: obs_dim must be positive, got 0"),
        ({"action_low": [3.0, 0.0]}, "low < high, got [3.0, 0.0] and [2.0, 1.0]"),
        ({"action_low": [0.0]}, "of the same length and low < high"),
    ],
)
def test_actor_rejects_bad_sizes_and_bounds(kwargs: dict[str, object], text: str) -> None:
    with pytest.raises(ValueError, match=message(text)):
        actor(**kwargs)


def test_twin_q_is_two_independent_mlps() -> None:
    critic = TwinQ(obs_dim=3, action_dim=2, hidden=(8, 5))
    obs, unit_action = torch.randn(6, 3), torch.rand(6, 2) * 2 - 1
    q = critic(obs, unit_action)
    assert q.shape == (2, 6)
    for i in range(2):  # a plain MLP with the i-th slice of every layer
        x = torch.cat([obs, unit_action], -1)
        for j, (weight, bias) in enumerate(zip(critic.weights, critic.biases, strict=True)):
            x = x @ weight[i] + bias[i, 0]
            x = x.relu() if j < 2 else x
        assert torch.allclose(q[i], x.squeeze(-1), atol=1e-6)
    assert not torch.allclose(q[0], q[1])


def learner(
    lr: float = 1e-2, tau: float = 0.005
) -> tuple[SACLearner, SquashedGaussianActor, TwinQ, TwinQ, torch.Tensor]:
    torch.manual_seed(0)
    agent = actor()
    critic = TwinQ(3, 2, (16, 16))
    target = copy.deepcopy(critic).requires_grad_(False)
    log_alpha = torch.zeros((), requires_grad=True)
    return (
        SACLearner(
            agent,
            critic,
            target,
            log_alpha,
            torch.optim.Adam(critic.parameters(), lr=lr),
            torch.optim.Adam([*agent.parameters(), log_alpha], lr=lr),
            torch.Generator().manual_seed(0),
            gamma=0.99,
            tau=tau,
            target_entropy=-2.0,
        ),
        agent,
        critic,
        target,
        log_alpha,
    )


def transitions(n: int = 32) -> DictTensor:
    generator = torch.Generator().manual_seed(2)
    return DictTensor(
        {
            "observation": torch.randn(n, 3, generator=generator),
            "unit_action": torch.rand(n, 2, generator=generator) * 2 - 1,
            "next/reward": torch.randn(n, generator=generator),
            "next/observation": torch.randn(n, 3, generator=generator),
            "next/terminated": torch.rand(n, generator=generator) < 0.3,
        }
    )


def test_an_actor_step_that_raises_leaves_the_critic_learning(monkeypatch: pytest.MonkeyPatch) -> None:
    step, agent, critic, _, _ = learner()

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(agent, "sample", interrupted)
    with pytest.raises(KeyboardInterrupt):
        step.step(transitions())
    assert all(p.requires_grad for p in critic.parameters())


def test_one_update_moves_targets_by_polyak_and_leaves_no_frozen_critic() -> None:
    step, _, critic, target, _ = learner(tau=0.1)
    before = [p.clone() for p in target.parameters()]
    stats = step.step(transitions())
    assert set(stats) == {"critic_loss", "actor_loss", "alpha", "entropy", "q"}
    assert all(v.ndim == 0 and not v.requires_grad for v in stats.values())
    for old, new, online in zip(before, target.parameters(), critic.parameters(), strict=True):
        assert torch.allclose(new, 0.9 * old + 0.1 * online.detach(), atol=1e-7)
        assert not torch.equal(online, old)  # the critic moved (target and critic started equal)
    assert all(p.requires_grad for p in critic.parameters())
    assert all(not p.requires_grad for p in target.parameters())


def test_critic_loss_is_half_the_summed_squared_errors_against_the_soft_target() -> None:
    step, agent, critic, target, _ = learner()
    data = transitions()
    gen = torch.Generator().manual_seed(0)  # the learner's noise: next actions are drawn first
    with torch.no_grad():
        next_action, next_log_prob = agent.sample(data["next/observation"], gen)
        next_q = torch.minimum(*target(data["next/observation"], next_action))
        y = data["next/reward"] + 0.99 * (~data["next/terminated"]).float() * (next_q - next_log_prob)
        q = critic(data["observation"], data["unit_action"])
        expected = 0.5 * ((q[0] - y) ** 2).mean() + 0.5 * ((q[1] - y) ** 2).mean()
    stats = step.step(data)
    assert stats["critic_loss"].item() == pytest.approx(expected.item(), rel=1e-5)
    assert stats["alpha"].item() == 1.0  # exp(log_alpha = 0) at the start


@pytest.mark.parametrize(("target_entropy", "direction"), [(50.0, 1), (-50.0, -1)])
def test_temperature_rises_when_entropy_is_below_target_and_falls_above(
    target_entropy: float, direction: int
) -> None:
    step, _, _, _, log_alpha = learner()
    step.target_entropy = target_entropy
    step.step(transitions())
    assert math.copysign(1, log_alpha.item()) == direction
    assert log_alpha.item() == pytest.approx(direction * 1e-2, rel=1e-3)  # Adam's first step is lr


def test_sac_rejects_bad_configs() -> None:
    with pytest.raises(ValueError, match=message("config: tau must be in (0, 1], got 1.5")):
        sac.train(sac.Config(env="Pendulum-v1", tau=1.5))
    with pytest.raises(ValueError, match=message("config: batch_size must be in (0, inf), got 0")):
        sac.train(sac.Config(env="Pendulum-v1", batch_size=0))
    with pytest.raises(ValueError, match=message("config: learning_starts must be at least 0, got -1")):
        sac.train(sac.Config(env="Pendulum-v1", learning_starts=-1))
    with pytest.raises(
        ValueError,
        match=message(
            "sac needs continuous (Box) actions; config.env 'CartPole-v1' has Discrete(2): "
            "try a2c, dqn, impala or ppo"
        ),
    ):
        sac.train(sac.Config(env="CartPole-v1"))


# ---------------------------------------------------------------------------- smoke runs


def test_sac_smoke_run_learns_after_random_steps_and_reports(tmp_path: Path) -> None:
    config = sac.Config(
        env="Pendulum-v1",
        total_steps=96,
        n_envs=2,
        n_processes=2,
        n_steps=16,
        learning_starts=64,
        batch_size=16,
        hidden=16,
        eval_every=64,
        eval_episodes=1,
        run_dir=str(tmp_path / "runs"),
        progress=False,
    )
    results = sac.train(config)
    assert results["env_steps"] == 96 and results["algo"] == "sac"
    assert -16.3 * 200 <= results["eval_return_mean"] <= 0  # Pendulum's reward is in [-16.3, 0]
    assert_the_run_replays_its_final_evaluation(results)
    run_dir = Path(results["run_dir"])
    rows = (run_dir / "progress.csv").read_text().splitlines()
    header = rows[0].split(",")
    assert {"critic_loss", "actor_loss", "alpha", "entropy", "q", "eval_return_mean"} <= set(header)
    logged = [dict(zip(header, r.split(","), strict=False)) for r in rows[1:]]
    losses = [r["critic_loss"] for r in logged if r.get("sps")]
    assert losses[0] == "" and losses[-1] != ""  # no gradient step during the random steps
