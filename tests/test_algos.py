"""The algorithms' shared pieces: configs and command lines, the actor-critic, episode returns, runs."""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from rlstruct import DictTensor, GymEnv, LocalBatcher, TemporalDictTensor, Trajectories, replay_agent
from rlstruct.algos import ALGORITHMS, a2c, dqn, impala, load_run, ppo, sac
from rlstruct.algos import run as run_module
from rlstruct.algos.config import TrainConfig, check_config, field_docs, parse_config
from rlstruct.algos.evaluation import env_spaces
from rlstruct.algos.run import Run
from rlstruct.checkpoint import load_checkpoint
from rlstruct.cli import main as cli_main
from rlstruct.learning.actor_critic import ActorCritic, run_memory
from rlstruct.learning.metrics import EpisodeReturns
from rlstruct.learning.on_policy import add_advantages, ppo_minibatch_loss


def message(text: str) -> str:
    return re.escape(text)


# ---------------------------------------------------------------------------- configs


def test_every_config_field_has_a_docstring() -> None:
    for name in ALGORITHMS:
        module = __import__(f"rlstruct.algos.{name}", fromlist=["Config"])
        docs = field_docs(module.Config)
        missing = [f.name for f in dataclasses.fields(module.Config) if not docs.get(f.name)]
        assert missing == [], f"{name}: fields without a docstring: {missing}"


def test_parse_config_reads_flags_of_every_type() -> None:
    config = parse_config(
        ppo.Config,
        ["--env", "Pendulum-v1", "--total-steps", "300", "--lr", "0.5", "--no-anneal", "--json", "out.json"],
    )
    assert (config.env, config.total_steps, config.lr, config.anneal, config.json) == (
        "Pendulum-v1",
        300,
        0.5,
        False,
        "out.json",
    )
    assert config.n_epochs == ppo.Config.n_epochs  # untouched fields keep their default


def test_parse_config_needs_env_and_rejects_bad_values(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_config(TrainConfig, [])
    assert "--env" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_config(TrainConfig, ["--env", "CartPole-v1", "--seed", "one"])
    assert "invalid int value: 'one'" in capsys.readouterr().err


def test_help_shows_the_field_docstrings(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_config(ppo.Config, ["--help"], prog="rlstruct train ppo")
    out = " ".join(capsys.readouterr().out.split())
    assert "The clip range of the probability ratio. (default: 0.2)" in out


@pytest.mark.parametrize(
    ("changes", "text"),
    [
        ({"env": ""}, "config.env must name an environment, got ''"),
        ({"total_steps": 0}, "config: total_steps must be in (0, inf), got 0"),
        ({"n_processes": -1}, "config: n_processes must be in (0, inf), got -1"),
    ],
)
def test_check_config_names_the_field(changes: dict[str, object], text: str) -> None:
    config = dataclasses.replace(TrainConfig(env="CartPole-v1"), **changes)
    with pytest.raises(ValueError, match=message(text)):
        check_config(config)


def test_ppo_rejects_a_layout_it_cannot_split() -> None:
    with pytest.raises(
        ValueError, match=message("config.n_envs (3) must be a multiple of config.n_processes (2)")
    ):
        ppo.train(ppo.Config(env="CartPole-v1", n_envs=3))
    with pytest.raises(ValueError, match=message("config.total_steps (100) must allow one iteration")):
        ppo.train(ppo.Config(env="CartPole-v1", total_steps=100))


def test_cli_rejects_an_unknown_algorithm(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["train", "nope", "--env", "CartPole-v1"]) == 2
    assert "unknown algorithm 'nope'; choose one of" in capsys.readouterr().err
    assert cli_main(["--help"]) == 0


@pytest.mark.parametrize("argv", [["--help"], ["-h"], ["train", "--help"], ["train", "-h"]])
def test_cli_help_at_every_level_prints_the_usage(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli_main(argv) == 0
    out = capsys.readouterr()
    assert out.out.startswith("usage: rlstruct train {a2c,dqn,impala,ppo,sac}") and out.err == ""


def test_cli_names_the_likely_fix_for_an_unknown_environment_in_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli_main(["train", "ppo", "--env", "CartPol-v1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rlstruct: unknown environment 'CartPol-v1' (")
    assert err.endswith("; did you mean 'CartPole-v1'?\n") and err.count("\n") == 1
    # a Bullet id typed without its module, in a fresh process (where nothing imported the module yet)
    env = "InvertedPendulumBulletEnv-v0"
    done = subprocess.run(
        [sys.executable, "-m", "rlstruct.cli", "train", "sac", "--env", env],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and done.stdout == ""
    fix = (
        "Bullet environments need the module prefix and the bullet extra: "
        f"--env pybullet_envs_gymnasium:{env} (pip install -e '.[bullet]')"
    )
    assert done.stderr.startswith(f"rlstruct: unknown environment {env!r} (")
    assert done.stderr.endswith(f"; {fix}\n") and done.stderr.count("\n") == 1


def test_cli_trains_on_an_environment_made_by_a_module_level_factory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["train", "ppo", "--env", "rlstruct.envs:make_cartpole_novel", "--total-steps", "512"]
    argv += ["--n-envs", "4", "--n-steps", "32", "--n-epochs", "1", "--minibatch-size", "64"]
    argv += ["--eval-every", "256", "--eval-episodes", "2", "--run-dir", str(tmp_path), "--no-progress"]
    assert cli_main(argv) == 0
    (run_dir,) = tmp_path.iterdir()
    assert run_dir.name.startswith("ppo-make_cartpole_novel-s0-")
    assert "final greedy return" in capsys.readouterr().out
    assert env_spaces("rlstruct.envs:make_cartpole_novel").obs_dim == 2  # no velocities: the factory's env
    assert cli_main(["train", "ppo", "--env", "rlstruct.envs:make_nothing"]) == 2
    assert "unknown environment 'rlstruct.envs:make_nothing'" in capsys.readouterr().err


ACTOR_CRITIC: tuple[Any, dict[str, Any]] = (
    ActorCritic,
    {"obs_dim": 4, "n_actions": 2, "action_low": None, "action_high": None},
)


def test_a_mean_training_return_of_zero_is_shown_and_logged(tmp_path: Path) -> None:
    run = Run("ppo", ppo.Config(env="CartPole-v1", run_dir=str(tmp_path), progress=False), *ACTOR_CRITIC)
    with run:
        episodes = EpisodeReturns(2)
        episodes.finished = [0.0, 0.0]
        run.episode_return = 3.0
        run.add_returns(episodes)
        assert run.episode_return == 0.0 and episodes.finished == []
        run.add_returns(episodes)  # nothing new: the last mean stays
        assert run.episode_return == 0.0
        run.step(16, ActorCritic(**ACTOR_CRITIC[1]), loss=1.0)
    with (run.dir / "progress.csv").open() as f:
        (row,) = list(csv.DictReader(f))
    assert row["train_return_mean"] == "0.0"


def test_a_run_that_cannot_start_its_evaluator_closes_its_logger(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    closed = []

    class Recording(run_module.Logger):
        def close(self) -> None:
            closed.append(self)
            super().close()

    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("no evaluator today")

    monkeypatch.setattr(run_module, "Logger", Recording)
    monkeypatch.setattr(run_module, "Evaluator", broken)
    with pytest.raises(RuntimeError, match="no evaluator today"):
        Run("ppo", ppo.Config(env="CartPole-v1", run_dir=str(tmp_path), progress=False), *ACTOR_CRITIC)
    assert len(closed) == 1


@pytest.mark.parametrize("algo", [a2c, dqn, impala, ppo, sac])
def test_a_batcher_that_cannot_start_still_closes_the_run(
    algo: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # every algorithm makes its batcher with Run.collector
    closed = []
    close = run_module.Run.close

    def recording(self: Run) -> None:
        closed.append(self)
        close(self)

    def broken(*args: Any, **kwargs: Any) -> None:
        raise OSError("no processes today")

    monkeypatch.setattr(run_module, "MultiprocessBatcher", broken)
    monkeypatch.setattr(run_module.Run, "close", recording)
    env = "Pendulum-v1" if algo is sac else "CartPole-v1"
    with pytest.raises(OSError, match="no processes today"):
        algo.train(algo.Config(env=env, progress=False, run_dir=str(tmp_path)))
    assert len(closed) == 1


# ---------------------------------------------------------------------------- the actor-critic


def test_env_spaces_reads_discrete_and_continuous_envs() -> None:
    cartpole = env_spaces("CartPole-v1")
    assert (cartpole.obs_dim, cartpole.n_actions, cartpole.max_episode_steps) == (4, 2, 500)
    pendulum = env_spaces("Pendulum-v1")
    assert (pendulum.obs_dim, pendulum.n_actions, pendulum.action_low, pendulum.action_high) == (
        3,
        None,
        [-2.0],
        [2.0],
    )
    assert pendulum.max_episode_steps == 200


def test_discrete_actor_critic_log_prob_and_entropy_match_torch_distributions() -> None:
    agent = ActorCritic(obs_dim=3, n_actions=4)
    agent.seed(0)
    z = DictTensor({"greedy": torch.tensor([False, False, True])})
    obs = DictTensor({"observation": torch.randn(3, 3, dtype=torch.float64)})  # cast to float32 inside
    out, _ = agent(agent.initial_state(z, 3), obs, z)
    dist = torch.distributions.Categorical(logits=out["logits"])
    assert out["action"].dtype == torch.int64 and out["log_prob"].dtype == torch.float32
    assert torch.allclose(out["log_prob"], dist.log_prob(out["action"]))
    assert torch.allclose(agent.entropy(out["logits"]), dist.entropy())
    assert out["action"][2] == out["logits"][2].argmax()  # the greedy row


def test_continuous_actor_critic_clamps_actions_but_scores_the_raw_sample() -> None:
    agent = ActorCritic(obs_dim=2, action_low=[-0.1], action_high=[0.1])
    with torch.no_grad():
        agent.log_std.fill_(1.0)
    agent.seed(1)
    z = DictTensor({"greedy": torch.tensor([False] * 63 + [True])})
    obs = DictTensor({"observation": torch.zeros(64, 2)})
    out, _ = agent(agent.initial_state(z, 64), obs, z)
    assert bool((out["action"].abs() <= 0.1).all()) and bool((out["raw_action"].abs() > 0.1).any())
    dist = torch.distributions.Normal(out["mean"], agent.log_std.exp())
    assert torch.allclose(out["log_prob"], dist.log_prob(out["raw_action"]).sum(-1))
    assert torch.allclose(agent.entropy(out["mean"]), dist.entropy().sum(-1))
    assert torch.equal(out["raw_action"][63], out["mean"][63])


@pytest.mark.parametrize(
    ("memory", "keys"), [("gru", ["h_pi", "h_v"]), ("lstm", ["c_pi", "c_v", "h_pi", "h_v"])]
)
def test_recurrent_actor_critic_carries_a_memory_per_head(memory: str, keys: list[str]) -> None:
    agent = ActorCritic(obs_dim=4, n_actions=2, hidden=(8,), recurrent=True, memory=memory)
    z = DictTensor(batch_size=2)
    state = agent.initial_state(z, 2)
    assert sorted(state.keys()) == keys
    assert all(torch.equal(v, torch.zeros(2, 8)) for v in state.values())
    obs = DictTensor({"observation": torch.ones(2, 4)})
    out, state = agent(state, obs, z)
    assert sorted(k for k in out if k.endswith("_v")) == [k for k in keys if k.endswith("_v")]
    assert torch.equal(out["h_v"], state["h_v"])  # the value memory after the step is an output too
    first, second = agent(state, obs, z)[0], agent(agent.initial_state(z, 2), obs, z)[0]
    assert not torch.equal(first["value"], second["value"])
    with pytest.raises(
        ValueError, match=message("ActorCritic.features: a recurrent agent has a memory per head")
    ):
        agent.features(torch.ones(2, 4))
    with pytest.raises(
        ValueError, match=message("ActorCritic.value_of: a recurrent agent needs its value memory")
    ):
        agent.value_of(torch.ones(2, 4))


def test_actor_critic_names_hidden_when_given_an_int() -> None:
    # a config.json stores "hidden": 64 for both layers; the agent takes one size per layer
    with pytest.raises(
        TypeError,
        match=message(
            "ActorCritic: hidden must be a sequence of layer sizes such as (64, 64), got the int 64"
        ),
    ):
        ActorCritic(obs_dim=4, n_actions=2, hidden=64)  # type: ignore[arg-type]


def test_actor_critic_rejects_an_unknown_memory() -> None:
    with pytest.raises(
        ValueError, match=message("ActorCritic: memory must be one of ['gru', 'lstm'], got 'rnn'")
    ):
        ActorCritic(obs_dim=4, n_actions=2, recurrent=True, memory="rnn")


@pytest.mark.parametrize("memory", ["gru", "lstm"])
def test_run_memory_restarts_at_episode_starts_like_a_step_loop(memory: str) -> None:
    """One call over episode pieces equals stepping the cell and zeroing the state at each start."""
    torch.manual_seed(0)
    rnn = torch.nn.GRU(3, 5, batch_first=True) if memory == "gru" else torch.nn.LSTM(3, 5, batch_first=True)
    x = torch.randn(4, 7, 3)
    state = [torch.randn(4, 5) for _ in range(1 if memory == "gru" else 2)]
    starts = torch.zeros(4, 7, dtype=torch.bool)
    starts[0, 0] = True  # row 0 starts an episode at its first step: the carried state is dropped
    starts[1, 3] = starts[1, 5] = True  # row 1: two episode starts inside
    starts[2, 6] = True  # row 2: a start at the last step
    out = run_memory(rnn, x, state, starts)
    expected = []
    hidden = [s.clone() for s in state]
    for t in range(7):
        keep = (~starts[:, t]).float().unsqueeze(-1)
        hidden = [h * keep for h in hidden]
        hx = hidden[0].unsqueeze(0) if memory == "gru" else (hidden[0].unsqueeze(0), hidden[1].unsqueeze(0))
        step, new = rnn(x[:, t : t + 1], hx)
        hidden = [new.squeeze(0)] if memory == "gru" else [new[0].squeeze(0), new[1].squeeze(0)]
        expected.append(step.squeeze(1))
    assert torch.allclose(out, torch.stack(expected, 1), atol=1e-6)


def test_normalized_actor_critic_reads_its_statistics_from_the_weights() -> None:
    agent = ActorCritic(obs_dim=2, n_actions=2, normalize=True)
    assert agent.obs_norm is not None
    agent.obs_norm.update(torch.tensor([[1.0, 10.0], [3.0, 30.0]]))
    copy = ActorCritic(obs_dim=2, n_actions=2, normalize=True)
    copy.load_state_dict(agent.state_dict())  # what batcher.update and the evaluator do
    assert torch.equal(copy.normalized(torch.tensor([[3.0, 20.0]])), torch.tensor([[1.0, 0.0]]))


@pytest.mark.parametrize(
    ("kwargs", "text"),
    [
        ({"obs_dim": 0, "n_actions": 2}, "ActorCritic: obs_dim must be positive, got 0"),
        ({"obs_dim": 2, "n_actions": 0}, "ActorCritic: n_actions must be positive, got 0"),
        ({"obs_dim": 2, "action_low": [0.0]}, "continuous actions need action_low and action_high"),
    ],
)
def test_actor_critic_rejects_bad_sizes(kwargs: dict[str, object], text: str) -> None:
    with pytest.raises(ValueError, match=message(text)):
        ActorCritic(**kwargs)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------- runs


def test_episode_returns_follow_episodes_across_batches_and_ignore_padding() -> None:
    returns = EpisodeReturns(2)
    reward = torch.tensor([[1.0, 2.0, 3.0], [1.0, 1.0, 5.0]])
    done = torch.tensor([[False, True, False], [False, False, True]])
    lengths = torch.tensor([3, 2])  # row 1's done at t=2 is padding
    returns.add(TemporalDictTensor({"next/reward": reward, "next/done": done}, lengths))
    assert returns.pop_mean() == 3.0  # only row 0's episode ended: 1 + 2
    assert returns.pop_mean() is None
    returns.add(
        TemporalDictTensor({"next/reward": torch.ones(2, 1), "next/done": torch.ones(2, 1, dtype=torch.bool)})
    )
    assert returns.finished == [4.0, 3.0]  # 3 + 1 carried over; 1 + 1 + 1


def assert_the_run_replays_its_final_evaluation(results: dict[str, Any]) -> None:
    """The figure a run reports is what its saved agent plays: the checkpoint, config.json and seeds agree."""
    assert math.isfinite(results["eval_return_mean"])
    replayed = load_run(results["run_dir"]).evaluate()
    assert (replayed.mean, replayed.std) == (results["eval_return_mean"], results["eval_return_std"])


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
def test_recurrent_actor_critic_replays_what_it_did_and_values_the_reached_observation(memory: str) -> None:
    """replay_agent (one call per episode piece) gives back the collected outputs; value_of(next obs,
    stored value memory) is the next step's value."""
    args = {"obs_dim": 4, "n_actions": 2, "hidden": (16,), "recurrent": True, "memory": memory}
    model = ActorCritic(**args)  # type: ignore[arg-type]
    with LocalBatcher(
        ActorCritic, args, GymEnv, {"env": "CartPole-v1"}, n_envs=3, n_timesteps=40, seed=2
    ) as b:
        b.update(model.state_dict())
        b.reset()
        b.execute()
        b.get()
        b.execute()  # the second piece starts from a carried, non-zero state
        batch = b.get()
    assert batch is not None
    steps = batch.trajectories
    assert bool(batch.info["agent_state/h_pi"].abs().sum() > 0)
    out = replay_agent(model, batch)
    assert sorted(out.keys()) == ["logits", "value"]  # no sampling in the one-call replay
    assert torch.allclose(out["logits"], steps["logits"], atol=1e-5)
    assert torch.allclose(out["value"], steps["value"], atol=1e-5)
    with torch.no_grad():
        after = DictTensor({k: steps[k].flatten(0, 1) for k in model.value_memory})
        next_value = model.value_of(steps["next/observation"].flatten(0, 1), after).view(3, 40)
    same_episode = ~steps["next/done"][:, :-1]
    assert bool(same_episode.any() and (~same_episode).any())  # episodes end inside the batch
    assert torch.allclose(next_value[:, :-1][same_episode], steps["value"][:, 1:][same_episode], atol=1e-5)


def test_recurrent_a2c_smoke_run(tmp_path: Path) -> None:
    config = a2c.Config(
        env="CartPole-v1",
        total_steps=512,
        n_envs=4,
        n_steps=16,
        recurrent=True,
        eval_every=256,
        eval_episodes=2,
        run_dir=str(tmp_path),
        progress=False,
    )
    results = a2c.train(config)
    assert results["env_steps"] == 512 and results["algo"] == "a2c"
    header = (Path(results["run_dir"]) / "progress.csv").read_text().splitlines()[0].split(",")
    assert {"policy_loss", "value_loss", "explained_variance", "eval_return_mean"} <= set(header)


# ---------------------------------------------------------------------------- IMPALA


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


def test_every_evaluation_plays_the_same_episodes() -> None:
    from rlstruct.algos.evaluation import Evaluator

    args = {"obs_dim": 4, "n_actions": 2}
    weights = ActorCritic(**args).state_dict()  # type: ignore[arg-type]
    with Evaluator(ActorCritic, args, "CartPole-v1", n_episodes=3, max_steps=500, seed=5) as evaluator:
        first = evaluator.evaluate(weights, env_steps=0)
        second = evaluator.evaluate(weights, env_steps=10)
    assert second.returns == first.returns and second.env_steps == 10
    assert len(set(first.returns)) > 1  # three different episodes, each replayed


def test_orthogonal_initialisation_uses_the_stated_gains() -> None:
    agent = ActorCritic(obs_dim=4, n_actions=2, orthogonal=True)
    first, policy_out, value_out = agent.actor[0].weight, agent.actor[-1].weight, agent.critic[-1].weight
    assert torch.allclose(first.T @ first, 2.0 * torch.eye(4), atol=1e-5)  # [64, 4]: orthogonal columns
    assert torch.allclose(policy_out @ policy_out.T, 1e-4 * torch.eye(2), atol=1e-8)  # gain 0.01
    assert torch.allclose(value_out @ value_out.T, torch.ones(1, 1), atol=1e-5)
    assert all(not m.bias.detach().any() for m in agent.modules() if isinstance(m, torch.nn.Linear))


# ---------------------------------------------------------------------------- memory and normalisation


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


def test_a_recurrent_actor_critic_clips_its_policy_and_value_gradients_apart() -> None:
    torch.manual_seed(0)
    agent = ActorCritic(obs_dim=4, n_actions=2, hidden=(8,), recurrent=True)
    every = list(agent.parameters())
    assert {id(p) for p in agent.policy_parameters()} | {id(p) for p in agent.value_parameters()} == {
        id(p) for p in every
    }
    for p in agent.policy_parameters():
        p.grad = torch.full_like(p, 0.01)  # a small policy gradient...
    for p in agent.value_parameters():
        p.grad = torch.full_like(p, 100.0)  # ...next to a huge value gradient
    small = torch.nn.utils.get_total_norm([p.grad for p in agent.policy_parameters()])
    agent.clip_grad_norm_(0.5)
    # the policy's gradient is untouched (below 0.5), the value's rescaled to 0.5
    assert torch.allclose(torch.nn.utils.get_total_norm([p.grad for p in agent.policy_parameters()]), small)
    value_norm = torch.nn.utils.get_total_norm([p.grad for p in agent.value_parameters()])
    assert torch.allclose(value_norm, torch.tensor(0.5), atol=1e-4)


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


# ---------------------------------------------------------------------------- tuned settings


def test_tuned_settings_fill_the_flags_not_given_and_say_so(capsys: pytest.CaptureFixture[str]) -> None:
    tuned = {"InvertedPendulumBulletEnv-v0": {"hidden": 64, "gradient_steps": 2.0, "total_steps": 30_000}}
    argv = ["--env", "pybullet_envs_gymnasium:InvertedPendulumBulletEnv-v0", "--total-steps", "500"]
    config = parse_config(sac.Config, argv, tuned=tuned)
    assert (config.hidden, config.gradient_steps, config.total_steps) == (64, 2.0, 500)  # the flag wins
    assert capsys.readouterr().out == (
        "tuned settings for InvertedPendulumBulletEnv-v0: --hidden 64 --gradient-steps 2.0 "
        "(flags given override them)\n"
    )
    config = parse_config(sac.Config, ["--env", "Pendulum-v1"], tuned=tuned)  # not tuned: the defaults
    assert (config.hidden, config.gradient_steps) == (sac.Config.hidden, sac.Config.gradient_steps)
    assert capsys.readouterr().out == ""


def test_tuned_booleans_are_shown_as_their_flags_and_can_be_turned_off(
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = parse_config(ppo.Config, ["--env", "CueMemory-v0", "--no-normalize"], tuned=ppo.TUNED)
    assert config.recurrent and not config.normalize
    assert capsys.readouterr().out.startswith("tuned settings for CueMemory-v0: --recurrent (")


@pytest.mark.parametrize("module", [ppo, sac], ids=["ppo", "sac"])
def test_every_tuned_setting_names_a_field_of_the_config(module: Any) -> None:
    for env in module.TUNED:
        config = parse_config(module.Config, ["--env", env, "--no-progress"], tuned=module.TUNED)
        for name, value in module.TUNED[env].items():
            assert getattr(config, name) == value


def test_tuned_settings_that_name_no_field_are_refused() -> None:
    with pytest.raises(
        ValueError, match=re.escape("the tuned settings of 'X-v0' name no field of Config: ['hiden']")
    ):
        parse_config(sac.Config, ["--env", "X-v0"], tuned={"X-v0": {"hiden": 64}})
