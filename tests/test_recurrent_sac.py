"""SAC with a memory (``--recurrent``): the recurrent actor and critics replayed over chunks, the step on
chunks, the checks, and smoke runs whose saved agents replay their final evaluation.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from pathlib import Path

import pytest
import torch
from algo_helpers import assert_the_run_replays_its_final_evaluation, message

from rlstruct import DictTensor, TemporalDictTensor, Trajectories
from rlstruct.algos import sac
from rlstruct.errors import AgentError
from rlstruct.learning.recurrent_sac import (
    RecurrentSACLearner,
    RecurrentSquashedGaussianActor,
    RecurrentTwinQ,
    check_recurrent_sac_agent,
)
from rlstruct.learning.soft_actor_critic import squashed_log_prob


def chunk(b: int = 3, t: int = 10, seed: int = 0) -> Trajectories:
    """Rows of a collected batch by hand: 2 observation numbers, one action, episode starts inside some rows."""
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(b, t + 1, 2, generator=g)
    steps = TemporalDictTensor(
        {
            "observation": obs[:, :-1],
            "next/observation": obs[:, 1:],
            "unit_action": torch.rand(b, t, 1, generator=g) * 2 - 1,
            "next/reward": torch.randn(b, t, generator=g),
            "next/terminated": torch.rand(b, t, generator=g) < 0.1,
            "initial_state": torch.rand(b, t, generator=g) < 0.2,
        },
        torch.full((b,), t),
    )
    info = DictTensor({"agent_state/h": torch.randn(b, 8, generator=g)})
    return Trajectories(info, steps)


def actor() -> RecurrentSquashedGaussianActor:
    return RecurrentSquashedGaussianActor(obs_dim=2, action_low=[-2.0], action_high=[2.0], hidden=(8, 16))


def test_sample_sequence_is_the_gaussian_of_forward_step_by_step() -> None:
    torch.manual_seed(0)
    agent = actor()
    batch = chunk()
    steps = batch.trajectories
    unit, log_prob, next_unit, next_log_prob = agent.sample_sequence(
        batch, 0, torch.Generator().manual_seed(1)
    )
    assert unit.shape == next_unit.shape == (3, 10, 1) and log_prob.shape == next_log_prob.shape == (3, 10)
    assert bool((unit.abs() <= 1).all())
    h = batch.info["agent_state/h"]
    for s in range(steps.n_timesteps()):
        h = torch.where(steps["initial_state"][:, s : s + 1], torch.zeros_like(h), h)
        out, _ = agent.memory(steps["observation"][:, s].unsqueeze(1), h.unsqueeze(0))
        h = out.squeeze(1)
        mean, log_std = agent.gaussian(h)
        u = torch.atanh(unit[:, s].clamp(-1 + 1e-6, 1 - 1e-6))  # the draw behind the action
        torch.testing.assert_close(log_prob[:, s], squashed_log_prob(mean, log_std, u), atol=1e-3, rtol=1e-3)
        reached, _ = agent.memory(steps["next/observation"][:, s].unsqueeze(1), h.unsqueeze(0))
        next_mean, next_log_std = agent.gaussian(reached.squeeze(1))
        u_next = torch.atanh(next_unit[:, s].clamp(-1 + 1e-6, 1 - 1e-6))
        torch.testing.assert_close(
            next_log_prob[:, s], squashed_log_prob(next_mean, next_log_std, u_next), atol=1e-3, rtol=1e-3
        )


def test_forward_carries_the_memory_and_acts_greedily_where_told() -> None:
    torch.manual_seed(0)
    agent = actor()
    z = DictTensor({"greedy": torch.tensor([True, True, False])})
    state = agent.initial_state(z, 3)
    assert not bool(state["h"].any())
    obs = DictTensor({"observation": torch.randn(3, 2)})
    out, new = agent(state, obs, z)
    memory = agent.memory(obs["observation"].unsqueeze(1))[0].squeeze(1)
    torch.testing.assert_close(new["h"], memory)
    mean, _ = agent.gaussian(memory)
    torch.testing.assert_close(out["unit_action"][:2], mean[:2].tanh())
    torch.testing.assert_close(out["action"], 2.0 * out["unit_action"])
    agent.uniform.fill_(True)
    out, _ = agent(state, obs, DictTensor({"greedy": torch.zeros(3, dtype=torch.bool)}))
    assert not torch.allclose(out["unit_action"], mean.tanh())


def test_the_actor_has_no_memoryless_distribution() -> None:
    with pytest.raises(TypeError, match="has a memory"):
        actor().distribution(DictTensor({"observation": torch.zeros(1, 2)}))


def test_burn_in_changes_no_value_and_takes_no_gradient() -> None:
    torch.manual_seed(0)
    agent = actor()
    batch = chunk()
    plain = agent.sample_sequence(batch, 0, torch.Generator().manual_seed(1))
    warm = agent.sample_sequence(batch, 4, torch.Generator().manual_seed(1))
    for a, b in zip(plain, warm, strict=True):
        torch.testing.assert_close(a, b)
    warm[1][:, :4].sum().backward()  # the log-probabilities of the burn-in steps alone
    assert all(p.grad is None or float(p.grad.abs().sum()) == 0.0 for p in agent.memory.parameters())
    with pytest.raises(
        ValueError, match=message("burn_in must be in [0, T) for chunks of T = 10 steps, got 10")
    ):
        agent.sample_sequence(batch, 10, torch.Generator())


def test_the_critics_memory_starts_each_chunk_from_zeros() -> None:
    torch.manual_seed(0)
    critic = RecurrentTwinQ(obs_dim=2, action_dim=1, hidden=(8, 16))
    batch = chunk()
    features, after = critic.features(batch, 2)
    assert features.shape == after.shape == (3, 10, 8)
    fresh = Trajectories(DictTensor({"agent_state/h": torch.zeros(3, 8)}), batch.trajectories)
    same, _ = critic.features(fresh, 2)
    torch.testing.assert_close(features, same)
    q = critic(features.flatten(0, 1), batch.trajectories["unit_action"].flatten(0, 1))
    assert q.shape == (2, 30)


def learner(seed: int = 0) -> RecurrentSACLearner:
    torch.manual_seed(seed)
    policy = actor()
    critic = RecurrentTwinQ(obs_dim=2, action_dim=1, hidden=(8, 16))
    log_alpha = torch.zeros((), requires_grad=True)
    return RecurrentSACLearner(
        policy,
        critic,
        copy.deepcopy(critic).requires_grad_(False),
        log_alpha,
        torch.optim.Adam(critic.parameters(), lr=1e-2),
        torch.optim.Adam([*policy.parameters(), log_alpha], lr=1e-2),
        torch.Generator().manual_seed(seed),
        gamma=0.9,
        tau=0.05,
        target_entropy=-1.0,
    )


def test_a_step_on_chunks_counts_only_the_learned_steps() -> None:
    batch = chunk()
    learn = torch.zeros(3, 10, dtype=torch.bool)
    learn[:, 4:] = True
    changed = batch.trajectories.clone()
    reward = changed["next/reward"].clone()
    reward[:, :4] += 100.0  # rewards of the burn-in steps: no loss reads them
    changed.set("next/reward", reward)
    a = learner().step_chunks(batch, learn, 4)
    b = learner().step_chunks(Trajectories(batch.info, changed), learn, 4)
    for key in a:
        torch.testing.assert_close(a[key], b[key])
    reward[:, 6] += 100.0  # a learned step's reward moves the critics' loss
    c = learner().step_chunks(Trajectories(batch.info, changed), learn, 4)
    assert float(c["critic_loss"]) > float(a["critic_loss"]) + 1.0


def test_steps_on_a_fixed_batch_fit_the_critics_and_move_the_target() -> None:
    sac_learner = learner()
    batch = chunk()
    learn = torch.ones(3, 10, dtype=torch.bool)
    target_before = [p.clone() for p in sac_learner.target.parameters()]
    first = sac_learner.step_chunks(batch, learn, 0)
    for _ in range(150):
        last = sac_learner.step_chunks(batch, learn, 0)
    assert float(last["critic_loss"]) < 0.5 * float(first["critic_loss"])
    assert math.isfinite(float(last["actor_loss"]))
    moved = [
        not torch.equal(a, b) for a, b in zip(target_before, sac_learner.target.parameters(), strict=True)
    ]
    assert all(moved)


def test_an_agent_without_a_memory_or_sample_sequence_is_refused() -> None:
    from rlstruct.learning.soft_actor_critic import SquashedGaussianActor

    plain = SquashedGaussianActor(obs_dim=2, action_low=[-1.0], action_high=[1.0], hidden=(4, 4))
    with pytest.raises(
        AgentError,
        match=message("sac with recurrent cannot train SquashedGaussianActor: it lacks sample_sequence"),
    ):
        check_recurrent_sac_agent(plain, "sac")

    class NoState(RecurrentSquashedGaussianActor):
        def initial_state(self, agent_info: DictTensor, n: int) -> DictTensor:
            return DictTensor(batch_size=n)

    stateless = NoState(obs_dim=2, action_low=[-1.0], action_high=[1.0], hidden=(4,))
    with pytest.raises(AgentError, match="it keeps no state"):
        check_recurrent_sac_agent(stateless, "sac")
    with pytest.raises(AgentError, match=message("sac trains an Agent (rlstruct.Agent), got")):
        check_recurrent_sac_agent(object(), "sac")


@pytest.mark.parametrize(
    ("changes", "text"),
    [
        (
            {"recurrent": True, "burn_in": 16},
            "config.burn_in (16) must be below config.n_steps (16) with config.recurrent",
        ),
        ({"recurrent": True, "burn_in": -1}, "config: burn_in must be at least 0, got -1"),
    ],
)
def test_recurrent_configs_are_checked(changes: dict[str, object], text: str) -> None:
    config = dataclasses.replace(sac.Config(env="Pendulum-v1"), **changes)
    with pytest.raises(ValueError, match=message(text)):
        sac.train(config)


def test_recurrent_sac_smoke_run_replays_its_final_evaluation(tmp_path: Path) -> None:
    config = sac.Config(
        env="PendulumNoVel-v1",
        recurrent=True,
        total_steps=512,
        n_envs=2,
        n_steps=16,
        burn_in=4,
        learning_starts=128,
        batch_size=64,
        gradient_steps=0.25,
        hidden=16,
        eval_every=256,
        eval_episodes=2,
        run_dir=str(tmp_path / "runs"),
        progress=False,
    )
    results = sac.train(config)
    assert results["env_steps"] == 512
    assert_the_run_replays_its_final_evaluation(results)
    checkpoint = torch.load(Path(results["run_dir"]) / "checkpoint.pt", weights_only=True)
    assert "critic.memory.weight_hh_l0" in {f"critic.{k}" for k in checkpoint["critic"]}
    assert checkpoint["model"]["memory.weight_hh_l0"].shape == (48, 16)


def test_own_critics_without_features_are_refused_with_recurrent(tmp_path: Path) -> None:
    class OwnCritics(RecurrentSquashedGaussianActor):
        def make_critics(self) -> torch.nn.Module:
            return torch.nn.Linear(2, 2)

    config = sac.Config(env="PendulumNoVel-v1", recurrent=True, n_steps=16, burn_in=4, run_dir=str(tmp_path))
    spaces = sac.check(config)
    agent = OwnCritics(obs_dim=2, action_low=[-2.0], action_high=[2.0], hidden=(4,))
    with pytest.raises(AgentError, match=message("must return critics with features(batch, burn_in)")):
        sac.critics(config, spaces, agent)
