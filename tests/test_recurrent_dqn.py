"""DQN with a memory (``--recurrent``): the recurrent Q-network, n-step targets inside chunks, the loss
on replayed chunks, the checks, and smoke runs whose saved agents replay their final evaluation.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest
import torch
from algo_helpers import assert_the_run_replays_its_final_evaluation, message

from rlstruct import DictTensor, TemporalDictTensor, Trajectories
from rlstruct.algos import dqn
from rlstruct.errors import AgentError
from rlstruct.learning.recurrent_q import RecurrentQNetwork, n_step_targets, recurrent_dqn_loss
from rlstruct.learning.recurrent_sac import RecurrentSquashedGaussianActor, RecurrentTwinQ


def slow_n_step_targets(reward, terminated, done, valid, next_value, gamma, n):  # type: ignore[no-untyped-def]
    """Step by step, as the definition reads."""
    b, t = reward.shape
    out = torch.zeros(b, t, dtype=torch.float64)
    for i in range(b):
        for s in range(t):
            if not valid[i, s]:
                continue
            total, k = 0.0, 0
            while True:
                total += gamma**k * float(reward[i, s + k])
                end = s + k
                k += 1
                if bool(done[i, end]) or k == n or end + 1 >= t or not bool(valid[i, end + 1]):
                    break
            if not bool(terminated[i, end]):
                total += gamma**k * float(next_value[i, end])
            out[i, s] = total
    return out


@pytest.mark.parametrize("n", [1, 3, 5])
def test_n_step_targets_match_the_definition(n: int) -> None:
    g = torch.Generator().manual_seed(n)
    b, t = 6, 12
    reward = torch.randn(b, t, generator=g, dtype=torch.float64)
    done = torch.rand(b, t, generator=g) < 0.2
    terminated = done & (torch.rand(b, t, generator=g) < 0.5)  # the rest were truncated
    lengths = torch.tensor([12, 12, 7, 1, 12, 9])
    valid = torch.arange(t) < lengths.unsqueeze(1)
    value = torch.randn(b, t, generator=g, dtype=torch.float64)
    fast = n_step_targets(reward, terminated, done, valid, value, 0.9, n)
    torch.testing.assert_close(fast, slow_n_step_targets(reward, terminated, done, valid, value, 0.9, n))


def chunk(b: int = 3, t: int = 10, seed: int = 0) -> Trajectories:
    """Rows of a collected batch by hand: 2 observation numbers, episode starts inside some rows."""
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(b, t + 1, 2, generator=g)
    starts = torch.rand(b, t, generator=g) < 0.2
    steps = TemporalDictTensor(
        {
            "observation": obs[:, :-1],
            "next/observation": obs[:, 1:],
            "action": torch.randint(0, 3, (b, t), generator=g),
            "next/reward": torch.randn(b, t, generator=g),
            "next/terminated": torch.zeros(b, t, dtype=torch.bool),
            "next/done": torch.zeros(b, t, dtype=torch.bool),
            "initial_state": starts,
        },
        torch.full((b,), t),
    )
    info = DictTensor({"agent_state/h": torch.randn(b, 8, generator=g)})
    return Trajectories(info, steps)


def test_q_sequence_is_forward_step_by_step() -> None:
    torch.manual_seed(0)
    agent = RecurrentQNetwork(obs_dim=2, n_actions=3, hidden=(8, 16), dueling=True)
    batch = chunk()
    steps = batch.trajectories
    q, q_next = agent.q_sequence(batch)
    h = batch.info["agent_state/h"]
    for s in range(steps.n_timesteps()):
        h = torch.where(steps["initial_state"][:, s : s + 1], torch.zeros_like(h), h)
        out, _ = agent.memory(steps["observation"][:, s].unsqueeze(1), h.unsqueeze(0))
        h = out.squeeze(1)
        torch.testing.assert_close(q[:, s], agent.heads(h))
        reached, _ = agent.memory(steps["next/observation"][:, s].unsqueeze(1), h.unsqueeze(0))
        torch.testing.assert_close(q_next[:, s], agent.heads(reached.squeeze(1)))


def test_burn_in_changes_no_value_and_takes_no_gradient() -> None:
    torch.manual_seed(0)
    agent = RecurrentQNetwork(obs_dim=2, n_actions=3, hidden=(8, 16))
    batch = chunk()
    q, q_next = agent.q_sequence(batch)
    warm_q, warm_next = agent.q_sequence(batch, burn_in=4)
    torch.testing.assert_close(warm_q, q)
    torch.testing.assert_close(warm_next, q_next)
    # a loss on the burn-in steps alone reaches no parameter through them
    x = torch.zeros(3, 10, 2, requires_grad=True)
    steps = batch.trajectories.clone()
    steps.set("observation", x)
    warm_q, _ = agent.q_sequence(Trajectories(batch.info, steps), burn_in=4)
    warm_q[:, :4].sum().backward()
    assert x.grad is None or float(x.grad.abs().sum()) == 0.0


def test_the_loss_counts_only_the_learned_steps() -> None:
    torch.manual_seed(0)
    model = RecurrentQNetwork(obs_dim=2, n_actions=3, hidden=(8, 8))
    target = RecurrentQNetwork(obs_dim=2, n_actions=3, hidden=(8, 8))
    batch = chunk()
    learn = torch.zeros(3, 10, dtype=torch.bool)
    learn[:, 6:] = True
    loss, q, y = recurrent_dqn_loss(model, target, batch, learn, torch.ones(3), 0.9, 2, True, 4)
    huber = torch.nn.functional.smooth_l1_loss(q[:, 6:], y[:, 6:])
    torch.testing.assert_close(loss, huber)
    # a chunk of weight 0 drops out
    weights = torch.tensor([1.0, 0.0, 1.0])
    loss, q, y = recurrent_dqn_loss(model, target, batch, learn, weights, 0.9, 2, True, 4)
    kept = torch.nn.functional.smooth_l1_loss(q[[0, 2], 6:], y[[0, 2], 6:], reduction="sum") / 12
    torch.testing.assert_close(loss, kept)
    # what it would misread is refused, naming the argument
    with pytest.raises(
        TypeError,
        match=re.escape("recurrent_dqn_loss: learn must be a bool tensor [3, 10], got dtype torch.int64"),
    ):
        recurrent_dqn_loss(model, target, batch, learn.long(), weights, 0.9, 2, True, 4)
    with pytest.raises(
        ValueError,
        match=re.escape("recurrent_dqn_loss: weights must be a float tensor [3], got shape [3, 1]"),
    ):
        recurrent_dqn_loss(model, target, batch, learn, weights[:, None], 0.9, 2, True, 4)
    with pytest.raises(
        ValueError, match=re.escape("recurrent_dqn_loss: burn_in must be below the chunks' T = 10, got 10")
    ):
        recurrent_dqn_loss(model, target, batch, learn, weights, 0.9, 2, True, 10)


def test_the_network_acts_greedily_where_told_and_carries_its_memory() -> None:
    torch.manual_seed(0)
    agent = RecurrentQNetwork(obs_dim=2, n_actions=3, hidden=(8, 8))
    z = DictTensor({"greedy": torch.ones(4, dtype=torch.bool)})
    state = agent.initial_state(z, 4)
    assert state["h"].shape == (4, 8) and not bool(state["h"].any())
    obs = DictTensor({"observation": torch.randn(4, 2)})
    out, new = agent(state, obs, z)
    assert out["action"].dtype == torch.int64
    assert bool(new["h"].any())
    q = agent.heads(agent.memory(obs["observation"].unsqueeze(1))[0].squeeze(1))
    assert torch.equal(out["action"], q.argmax(1))


@pytest.mark.parametrize(
    ("changes", "text"),
    [
        (
            {"recurrent": True, "burn_in": 32},
            "config.burn_in (32) must be below config.n_steps (32) with config.recurrent",
        ),
        ({"td_steps": 3}, "config.td_steps (3) above 1 needs recurrent (--recurrent)"),
        ({"recurrent": True, "td_steps": 0}, "config: td_steps must be at least 1, got 0"),
        ({"recurrent": True, "burn_in": -1}, "config: burn_in must be at least 0, got -1"),
    ],
)
def test_recurrent_configs_are_checked(changes: dict[str, object], text: str) -> None:
    config = dataclasses.replace(dqn.Config(env="CartPole-v1", n_steps=32), **changes)
    with pytest.raises(ValueError, match=message(text)):
        dqn.train(config)


@pytest.mark.parametrize("prioritized", [False, True])
def test_recurrent_dqn_smoke_run_replays_its_final_evaluation(tmp_path: Path, prioritized: bool) -> None:
    config = dqn.Config(
        env="CartPoleNoVel-v1",
        recurrent=True,
        total_steps=512,
        n_envs=4,
        n_steps=16,
        burn_in=4,
        td_steps=3,
        learning_starts=128,
        batch_size=64,
        hidden=16,
        prioritized=prioritized,
        eval_every=256,
        eval_episodes=2,
        run_dir=str(tmp_path / "runs"),
        progress=False,
    )
    results = dqn.train(config)
    assert results["env_steps"] == 512
    assert_the_run_replays_its_final_evaluation(results)
    checkpoint = torch.load(Path(results["run_dir"]) / "checkpoint.pt", weights_only=True)
    assert checkpoint["grad_steps"] == 7 * 16  # every batch of 64 steps from 128 on: 0.25 x 64 steps


def test_an_agent_without_q_sequence_is_refused_with_recurrent(tmp_path: Path) -> None:
    config = dqn.Config(
        env="CartPole-v1",
        recurrent=True,
        agent="own_agents:QAgent",
        total_steps=256,
        n_steps=16,
        burn_in=4,
        run_dir=str(tmp_path),
        progress=False,
    )
    with pytest.raises(AgentError, match="lacks q_sequence"):
        dqn.train(config)


@pytest.mark.parametrize(
    ("make", "owner"),
    [
        (lambda: RecurrentQNetwork(obs_dim=2, n_actions=2, hidden=64), "RecurrentQNetwork"),
        (lambda: RecurrentTwinQ(obs_dim=2, action_dim=1, hidden=64), "RecurrentTwinQ"),
        (
            lambda: RecurrentSquashedGaussianActor(
                obs_dim=2, action_low=[-1.0], action_high=[1.0], hidden=64
            ),
            "RecurrentSquashedGaussianActor",
        ),
    ],
)
def test_an_int_hidden_is_refused_naming_the_network(make: Any, owner: str) -> None:
    with pytest.raises(
        TypeError,
        match=re.escape(
            f"{owner}: hidden must be a sequence of layer sizes such as (64, 64), got the int 64"
        ),
    ):
        make()


def test_n_step_targets_refuse_what_they_would_misread() -> None:
    r, v = torch.ones(1, 3), torch.full((1, 3), 10.0)
    no = torch.zeros(1, 3, dtype=torch.bool)
    with pytest.raises(
        TypeError,
        match=re.escape("n_step_targets: done must be a bool tensor [1, 3], got dtype torch.float32"),
    ):
        n_step_targets(r, no, no.float(), ~no, v, 0.5, 2)
    with pytest.raises(
        ValueError, match=re.escape("n_step_targets: valid must be a bool tensor [1, 3], got shape [3]")
    ):
        n_step_targets(r, no, no, ~no[0], v, 0.5, 2)
    with pytest.raises(ValueError, match=re.escape("n_step_targets: gamma must be in [0, 1], got 1.5")):
        n_step_targets(r, no, no, ~no, v, 1.5, 2)


def test_n_step_targets_keep_what_padding_holds_out_of_the_valid_steps() -> None:
    nan = float("nan")
    reward, value = torch.tensor([[1.0, 1.0, nan]]), torch.tensor([[10.0, 10.0, nan]])
    no = torch.zeros(1, 3, dtype=torch.bool)
    valid = torch.tensor([[True, True, False]])
    y = n_step_targets(reward, no, no, valid, value, 0.5, 2)
    clean = n_step_targets(reward.nan_to_num(), no, no, valid, value.nan_to_num(), 0.5, 2)
    assert torch.equal(y, clean) and bool(torch.isfinite(y).all())
