"""DQN's pieces: the Q-network agent, the double-Q targets, the schedule, the gradient steps, the checks,
and smoke runs (plain, and dueling with prioritized replay) whose saved agents replay their final evaluation.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from pathlib import Path

import pytest
import torch
from algo_helpers import assert_the_run_replays_its_final_evaluation

from rlstruct import DictTensor, PrioritizedReplayBuffer, ReplayBuffer
from rlstruct.algos import dqn
from rlstruct.algos.dqn import QNetwork, learn, linear_schedule, q_targets


def message(text: str) -> str:
    return re.escape(text)


# ---------------------------------------------------------------------------- targets


def slow_q_targets(reward, terminated, next_q_online, next_q_target, gamma, double):  # type: ignore[no-untyped-def]
    """Row by row, as the papers write it."""
    out = []
    for i in range(len(reward)):
        online, target = next_q_online[i].tolist(), next_q_target[i].tolist()
        best = max(range(len(online)), key=lambda a: online[a]) if double else None
        next_q = target[best] if best is not None else max(target)
        out.append(float(reward[i]) + (0.0 if bool(terminated[i]) else gamma * next_q))
    return torch.tensor(out, dtype=torch.float64)


def test_q_targets_by_hand() -> None:
    reward = torch.tensor([1.0, 0.5, 2.0])
    terminated = torch.tensor([False, False, True])
    online = torch.tensor([[3.0, 1.0], [0.0, 4.0], [9.0, 0.0]])
    target = torch.tensor([[2.0, 10.0], [6.0, 8.0], [5.0, 7.0]])
    # double: a' = argmax online -> [0, 1, 0]; target values 2, 8 (5 cut by termination)
    double = q_targets(reward, terminated, online, target, 0.5, double=True)
    assert torch.allclose(double, torch.tensor([1.0 + 0.5 * 2.0, 0.5 + 0.5 * 8.0, 2.0]))
    # vanilla: max of the target network -> 10, 8
    vanilla = q_targets(reward, terminated, online, target, 0.5, double=False)
    assert torch.allclose(vanilla, torch.tensor([1.0 + 0.5 * 10.0, 0.5 + 0.5 * 8.0, 2.0]))
    assert double.dtype == torch.float32


@pytest.mark.parametrize("double", [True, False])
def test_q_targets_match_a_row_by_row_reference(double: bool) -> None:
    g = torch.Generator().manual_seed(3)
    n, k = 200, 5
    reward = torch.randn(n, generator=g, dtype=torch.float64)
    terminated = torch.rand(n, generator=g) < 0.3
    online = torch.randn(n, k, generator=g, dtype=torch.float64)
    target = torch.randn(n, k, generator=g, dtype=torch.float64)
    fast = q_targets(reward, terminated, online, target, 0.97, double=double)
    assert torch.allclose(fast, slow_q_targets(reward, terminated, online, target, 0.97, double))


@pytest.mark.parametrize(
    ("args", "error", "text"),
    [
        # an int flag would be inverted bitwise: ~1 = -2, a target of r - 2 gamma Q instead of r
        ((1, torch.tensor([0, 1]), 0.5), TypeError, "q_targets: terminated must be a bool tensor [2], got"),
        # [2, 1] rewards would broadcast against the [2] bootstraps to [2, 2] targets
        ((torch.ones(2, 1), None, 0.5), ValueError, "q_targets: reward must be a float tensor [2], got"),
        ((1, None, 2.0), ValueError, "q_targets: gamma must be in [0, 1], got 2.0"),
        ((1, None, None), TypeError, "q_targets: gamma must be a number, got a NoneType"),
    ],
)
def test_q_targets_refuse_arguments_they_cannot_use(args: tuple, error: type[Exception], text: str) -> None:
    reward, terminated, gamma = args
    reward = torch.ones(2) if isinstance(reward, int) else reward
    terminated = torch.tensor([False, True]) if terminated is None else terminated
    q = torch.zeros(2, 3)
    with pytest.raises(error, match=message(text)):
        q_targets(reward, terminated, q, q, gamma)


def test_linear_schedule() -> None:
    assert linear_schedule(1.0, 0.05, 0.2, 0.0) == 1.0
    assert linear_schedule(1.0, 0.05, 0.2, 0.1) == pytest.approx(0.525)
    assert linear_schedule(1.0, 0.05, 0.2, 0.2) == pytest.approx(0.05)
    assert linear_schedule(1.0, 0.05, 0.2, 1.0) == pytest.approx(0.05)
    assert linear_schedule(0.4, 1.0, 1.0, 0.5) == pytest.approx(0.7)


# ---------------------------------------------------------------------------- the agent


def test_dueling_head_is_value_plus_centred_advantages() -> None:
    agent = QNetwork(obs_dim=3, n_actions=4, hidden=(8, 8), dueling=True)
    obs = torch.randn(5, 3)
    q = agent.q_values(obs)
    x = agent.body(obs)
    value, advantage = agent.value(x), agent.head(x)  # type: ignore[misc]
    assert torch.allclose(q.mean(1, keepdim=True), value, atol=1e-6)
    assert torch.allclose(q - q.mean(1, keepdim=True), advantage - advantage.mean(1, keepdim=True), atol=1e-6)


def test_epsilon_travels_with_the_state_dict_and_greedy_rows_never_explore() -> None:
    agent = QNetwork(obs_dim=2, n_actions=3, hidden=(8,))
    agent.seed(0)
    other = QNetwork(obs_dim=2, n_actions=3, hidden=(8,))
    agent.epsilon.fill_(1.0)
    other.load_state_dict(agent.state_dict())
    assert float(other.epsilon) == 1.0
    n = 3000
    obs = DictTensor({"observation": torch.randn(n, 2, dtype=torch.float64)})  # cast to float32 inside
    greedy = torch.arange(n) % 2 == 0
    z = DictTensor({"greedy": greedy})
    out, _ = agent(agent.initial_state(z, n), obs, z)
    best = agent.q_values(obs["observation"]).argmax(1)
    assert out["action"].dtype == torch.int64
    assert torch.equal(out["action"][greedy], best[greedy])
    explored = out["action"][~greedy]  # epsilon 1: uniform over the 3 actions
    counts = torch.bincount(explored, minlength=3).float() / explored.numel()
    assert torch.allclose(counts, torch.full((3,), 1 / 3), atol=0.05)
    agent.epsilon.fill_(0.0)
    z = DictTensor(batch_size=n)  # no "greedy": epsilon alone decides
    out, _ = agent(agent.initial_state(z, n), obs, z)
    assert torch.equal(out["action"], best)


def test_same_seed_same_exploration() -> None:
    agent = QNetwork(obs_dim=2, n_actions=2, hidden=(4,))
    agent.epsilon.fill_(0.5)
    obs = DictTensor({"observation": torch.randn(50, 2)})
    z = DictTensor(batch_size=50)
    agent.seed(7)
    first = agent(agent.initial_state(z, 50), obs, z)[0]["action"]
    agent.seed(7)
    assert torch.equal(first, agent(agent.initial_state(z, 50), obs, z)[0]["action"])


@pytest.mark.parametrize(
    ("kwargs", "text"),
    [
        ({"obs_dim": 0, "n_actions": 2}, "QNetwork: obs_dim must be positive, got 0"),
        (
            {"obs_dim": 2, "n_actions": 0},
            "QNetwork: n_actions must be a positive int (discrete actions), got 0",
        ),
        ({"obs_dim": 2, "n_actions": 2, "hidden": ()}, "QNetwork: hidden must name at least one layer size"),
    ],
)
def test_qnetwork_rejects_bad_sizes(kwargs: dict[str, object], text: str) -> None:
    with pytest.raises(ValueError, match=message(text)):
        QNetwork(**kwargs)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------- gradient steps


def transitions(n: int, seed: int) -> DictTensor:
    """A two-state chain: action 1 ends the episode with reward 1, action 0 gives 0 and goes on."""
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(n, 2, generator=g)
    action = torch.randint(2, (n,), generator=g)
    return DictTensor(
        {
            "observation": obs,
            "action": action,
            "next/observation": torch.randn(n, 2, generator=g),
            "next/reward": action.to(torch.float32),
            "next/terminated": action == 1,
        }
    )


@pytest.mark.parametrize("prioritized", [False, True])
def test_learn_fits_the_targets_and_follows_the_target_network(prioritized: bool) -> None:
    torch.manual_seed(0)
    config = dqn.Config(env="CartPole-v1", batch_size=32, gamma=0.5, lr=1e-2, target_update_every=50)
    model = QNetwork(2, 2, hidden=(16,))
    target = copy.deepcopy(model).requires_grad_(False)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
    g = torch.Generator().manual_seed(1)
    buffer = PrioritizedReplayBuffer(512, generator=g) if prioritized else ReplayBuffer(512, generator=g)
    buffer.add(transitions(512, 2))
    before = [p.clone() for p in target.parameters()]
    stats = learn(model, target, optimizer, buffer, config, 49, 0)
    assert all(torch.equal(a, b) for a, b in zip(before, target.parameters(), strict=True))
    learn(model, target, optimizer, buffer, config, 1, 49)  # the 50th step copies
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), target.parameters(), strict=True))
    for _ in range(6):
        last = learn(model, target, optimizer, buffer, config, 50, 50)
    assert last["loss"] < stats["loss"] / 4
    assert {"loss", "q_mean", "td_abs"} == set(last)
    # Q(s, 1) = 1 (terminal reward); Q(s, 0) = 0 + 0.5 * max Q(s') = 0.5
    q = model.q_values(torch.randn(256, 2)).mean(0)
    assert torch.allclose(q, torch.tensor([0.5, 1.0]), atol=0.1)
    if prioritized:  # priorities moved off the initial value of new rows
        leaves = buffer.sum_tree.get(torch.arange(512))
        assert float(leaves.std()) > 0


def test_polyak_target_update() -> None:
    config = dqn.Config(env="CartPole-v1", batch_size=8, tau=0.25, target_update_every=1, lr=1e-3)
    model = QNetwork(2, 2, hidden=(4,))
    target = copy.deepcopy(model).requires_grad_(False)
    with torch.no_grad():
        for p in target.parameters():
            p.zero_()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)  # the online network stays put
    buffer = ReplayBuffer(64, generator=torch.Generator().manual_seed(0))
    buffer.add(transitions(64, 0))
    learn(model, target, optimizer, buffer, config, 2, 0)
    for t, p in zip(target.parameters(), model.parameters(), strict=True):
        assert torch.allclose(t, p * (1 - 0.75**2))


# ---------------------------------------------------------------------------- config checks


@pytest.mark.parametrize(
    ("changes", "text"),
    [
        ({"batch_size": 0}, "config: batch_size must be in (0, inf), got 0"),
        ({"gamma": 1.5}, "config: gamma must be in [0, 1], got 1.5"),
        ({"eps_end": -0.1}, "config: eps_end must be in [0, 1], got -0.1"),
        ({"tau": 0.0}, "config: tau must be in (0, 1], got 0.0"),
        ({"learning_starts": -1}, "config: learning_starts must be at least 0, got -1"),
        ({"alpha": -1.0}, "config: alpha must be in [0, inf), got -1.0"),
        ({"n_envs": 3, "n_processes": 2}, "config.n_envs (3) must be a multiple of config.n_processes (2)"),
        ({"total_steps": 100}, "config.total_steps (100) must allow one iteration"),
        (
            {"env": "Pendulum-v1"},
            "dqn needs discrete actions; config.env 'Pendulum-v1' has Box(1,): try a2c, impala, ppo or sac",
        ),
    ],
)
def test_train_rejects_bad_configs(changes: dict[str, object], text: str) -> None:
    config = dataclasses.replace(dqn.Config(env="CartPole-v1"), **changes)
    with pytest.raises(ValueError, match=message(text)):
        dqn.train(config)


# ---------------------------------------------------------------------------- smoke runs


@pytest.mark.parametrize(("dueling", "prioritized"), [(False, False), (True, True)])
def test_dqn_smoke_run_writes_its_run_directory(tmp_path: Path, dueling: bool, prioritized: bool) -> None:
    config = dqn.Config(
        env="CartPole-v1",
        total_steps=512,
        n_envs=4,
        n_steps=32,
        learning_starts=128,
        batch_size=32,
        hidden=16,
        dueling=dueling,
        prioritized=prioritized,
        eval_every=256,
        eval_episodes=2,
        run_dir=str(tmp_path / "runs"),
        progress=False,
    )
    results = dqn.train(config)
    assert results["env_steps"] == 512 and results["algo"] == "dqn"
    assert_the_run_replays_its_final_evaluation(results)
    run_dir = Path(results["run_dir"])
    assert {"config.json", "progress.csv", "checkpoint.pt", "learning_curve.png"} <= {
        p.name for p in run_dir.iterdir()
    }
    header = (run_dir / "progress.csv").read_text().splitlines()[0].split(",")
    assert {"loss", "q_mean", "td_abs", "epsilon", "lr", "eval_return_mean"} <= set(header)
    assert ("beta" in header) == prioritized
    checkpoint = torch.load(run_dir / "checkpoint.pt", weights_only=True)
    assert checkpoint["grad_steps"] == 4 * 32  # every batch of 128 steps (from 128 on): 0.25 x 128 steps
    assert set(checkpoint["target"]) == set(checkpoint["model"])
