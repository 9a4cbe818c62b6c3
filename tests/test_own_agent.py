"""Bring your own agent: every learner trains agents written in tests/own_agents.py, not the package's.

From Python (``Config(agent=Class, agent_args=...)``) and from the command
line (``--agent own_agents:Class --agent-args JSON``), with checkpoints,
``--resume``, ``load_run`` and ``rlstruct eval``; an agent that lacks what a
learner needs is refused before any worker starts, naming what it lacks.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest
import torch
from own_agents import (
    ColumnEntropyAgent,
    ColumnValueAgent,
    DoubleLogProbAgent,
    FlatBootstrapAgent,
    GaussianActor,
    GruAgent,
    MixinActor,
    MlpAgent,
    NoValueAgent,
    OutputOnlyAgent,
    QAgent,
    QAgentWithState,
    WindowAgent,
)

from rlstruct import Agent, DictTensor, GymEnv, LocalBatcher, load_checkpoint
from rlstruct.algos import a2c, dqn, impala, load_run, ppo, sac
from rlstruct.algos.agents import ENV_ARGUMENTS, agent_class, user_agent
from rlstruct.algos.evaluation import EnvSpaces, env_spaces
from rlstruct.cli import main as cli
from rlstruct.errors import AgentError
from rlstruct.learning import check_on_policy_agent
from rlstruct.learning.on_policy import ppo_minibatches
from rlstruct.learning.protocols import policy_outputs
from rlstruct.learning.q_learning import check_q_agent
from rlstruct.learning.soft_actor_critic import check_sac_agent

TINY: dict[str, dict[str, Any]] = {
    "ppo": {"n_envs": 4, "n_steps": 16, "n_epochs": 2, "minibatch_size": 32, "total_steps": 256},
    "a2c": {"n_envs": 4, "n_steps": 16, "total_steps": 256},
    "impala": {"n_envs": 4, "n_steps": 16, "n_slots": 4, "batch_slots": 1, "total_steps": 256},
}
MODULES = {"ppo": ppo, "a2c": a2c, "impala": impala}


def config(algo: str, tmp_path: Path, agent: Any, **fields: Any) -> Any:
    return MODULES[algo].Config(
        env="CartPole-v1",
        agent=agent,
        eval_every=10**9,
        eval_episodes=2,
        run_dir=str(tmp_path),
        progress=False,
        **{**TINY[algo], **fields},
    )


def only_run(root: Path) -> Path:
    (run_dir,) = root.iterdir()
    return run_dir


@pytest.mark.parametrize("agent", [MlpAgent, GruAgent, WindowAgent], ids=["stateless", "memory", "history"])
@pytest.mark.parametrize("algo", ["ppo", "a2c", "impala"])
def test_every_on_policy_learner_trains_every_kind_of_users_agent(
    algo: str, agent: type[Agent], tmp_path: Path
) -> None:
    torch.manual_seed(0)
    before = agent(obs_dim=4, n_actions=2).state_dict()  # what train makes first, from the same seed
    results = MODULES[algo].train(config(algo, tmp_path, agent))
    run_dir = Path(results["run_dir"])
    stored = json.loads((run_dir / "config.json").read_text())
    assert stored["agent"] == f"own_agents:{agent.__name__}" and stored["agent_args"] is None
    trained = load_checkpoint(run_dir / "checkpoint.pt")["model"]
    assert trained.keys() == before.keys()
    assert not all(torch.equal(trained[k], before[k]) for k in before)  # the learner moved its weights
    assert all(bool(torch.isfinite(v).all()) for v in trained.values())
    # the run rebuilds its agent from config.json and replays the final evaluation it reported
    saved = load_run(run_dir)
    assert type(saved.agent) is agent and saved.agent_args == {"obs_dim": 4, "n_actions": 2}
    assert saved.evaluate().mean == results["eval_return_mean"]


def test_ppo_learns_cartpole_with_a_users_agent(tmp_path: Path) -> None:
    """Not only runs: the user's MLP balances the pole (a random policy lasts about 22 steps)."""
    results = ppo.train(
        ppo.Config(
            env="CartPole-v1",
            agent=MlpAgent,
            agent_args={"hidden": 64},
            total_steps=16_384,
            eval_every=10**9,
            run_dir=str(tmp_path),
            progress=False,
        )
    )
    assert results["eval_return_mean"] >= 150, results


def test_z_reaches_a_users_agent_when_ppo_replays_flat_steps() -> None:
    """PPO's flat minibatches carry each row's z (``task``, added to the observation by ``MlpAgent``)."""
    agent = MlpAgent(obs_dim=4, n_actions=2)
    args = {"obs_dim": 4, "n_actions": 2}
    with LocalBatcher(MlpAgent, args, GymEnv, {"env": "CartPole-v1"}, n_envs=2, n_timesteps=4) as b:
        b.update(agent.state_dict())
        b.reset(agent_info=DictTensor({"task": torch.tensor([0.0, 1000.0])}))
        b.execute()
        batch = b.get()
    data, size = ppo_minibatches(agent, batch, 64)
    assert size == 64 and data["agent_info/task"].tolist() == [0.0] * 4 + [1000.0] * 4
    with torch.no_grad():
        replayed = policy_outputs(agent, data)
    # the values replayed with z are those the agent output when it collected
    assert torch.allclose(replayed["value"], batch.trajectories.masked_flatten()["value"])


def test_the_command_line_trains_resumes_and_evaluates_a_users_agent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from test_resume import Interrupted, crash_after_first_checkpoint

    args = ["train", "ppo", "--env", "CartPole-v1", "--agent", "own_agents:GruAgent"]
    args += ["--agent-args", '{"hidden": 8}', "--total-steps", "512", "--n-envs", "4", "--n-steps", "16"]
    args += ["--minibatch-size", "32", "--n-epochs", "1", "--checkpoint-every", "256", "--eval-episodes", "2"]
    with monkeypatch.context() as patch:
        crash_after_first_checkpoint(patch)
        with pytest.raises(Interrupted):
            cli([*args, "--run-dir", str(tmp_path), "--no-progress"])
    run_dir = only_run(tmp_path)
    assert json.loads((run_dir / "config.json").read_text())["agent_args"] == {"hidden": 8}
    assert cli(["train", "ppo", "--resume", str(run_dir), "--no-progress"]) == 0
    state = load_checkpoint(run_dir / "checkpoint.pt")
    assert state["env_steps"] == 512 and state["model"]["cell.weight_hh"].shape == (24, 8)
    capsys.readouterr()
    assert cli(["eval", str(run_dir), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["algo"] == "ppo" and len(report["returns"]) == 2


def test_an_agent_named_by_its_file_trains(tmp_path: Path) -> None:
    source = Path(__file__).parent / "own_agents.py"
    agent = agent_class(f"{source}:MlpAgent")
    assert agent.__name__ == "MlpAgent" and issubclass(agent, Agent)
    results = ppo.train(config("ppo", tmp_path, f"{source}:MlpAgent"))
    assert results["env_steps"] == 256


def test_env_arguments_fill_only_what_the_constructor_takes() -> None:
    spaces = env_spaces("CartPole-v1")
    agent, args = user_agent(WindowAgent, {"n": 2}, spaces)
    assert args == {"n": 2, "obs_dim": 4, "n_actions": 2} and agent.n == 2  # type: ignore[attr-defined]
    assert ENV_ARGUMENTS == (
        "obs_dim",
        "n_actions",
        "action_low",
        "action_high",
        "action_nvec",
        "observation_spaces",
    )
    _, given = user_agent(MlpAgent, {"obs_dim": 4, "hidden": 3}, spaces)
    assert given == {"obs_dim": 4, "hidden": 3, "n_actions": 2}  # what agent_args gives wins
    with pytest.raises(
        AgentError, match=r"config.agent: MlpAgent\(\*\*\{.*\}\) failed: .*unexpected keyword"
    ):
        user_agent(MlpAgent, {"depth": 3}, spaces)


def test_an_agent_given_none_for_the_actions_of_another_kind_is_told_the_environments_kind() -> None:
    # a discrete agent (n_actions) on multi-discrete or continuous actions: its constructor fails on None
    multi = EnvSpaces(obs_dim=4, n_actions=None, action_low=None, action_high=None, max_episode_steps=8)
    multi = dataclasses.replace(multi, action_nvec=[3, 3])
    with pytest.raises(AgentError) as caught:
        user_agent(MlpAgent, None, multi)
    assert str(caught.value).startswith("config.agent: MlpAgent(**{")
    assert str(caught.value).endswith(
        " (n_actions is None: config.env's actions are multi-discrete (nvec [3, 3]), "
        "which a constructor receives as action_nvec)"
    )
    with pytest.raises(AgentError) as caught:
        user_agent(MlpAgent, None, env_spaces("Pendulum-v1"))
    assert str(caught.value).endswith(
        " (n_actions is None: config.env's actions are continuous (Box), "
        "which a constructor receives as action_low and action_high)"
    )
    with pytest.raises(AgentError) as caught:  # a failure of another cause says nothing of the actions
        user_agent(MlpAgent, {"depth": 3}, env_spaces("CartPole-v1"))
    assert "is None" not in str(caught.value)


def test_a_class_of_the_training_script_is_named_as_such_where_it_cannot_be_rebuilt() -> None:
    with pytest.raises(AgentError) as caught:
        agent_class("__main__:AttentionAgent")  # what config.json keeps of a class in the script that trained
    assert str(caught.value) == (
        "config.agent (--agent): module '__main__' has no 'AttentionAgent' (a class of the script that trained "
        "the run: define it in a module to rebuild it)"
    )


@pytest.mark.parametrize(
    ("agent", "message"),
    [
        (
            "own_agents",
            "config.agent (--agent) must be 'module:Class' or 'path/to/file.py:Class', got 'own_agents'",
        ),
        ("no_such_module:Agent", "config.agent (--agent): cannot import 'no_such_module'"),
        ("own_agents:Missing", "config.agent (--agent): module 'own_agents' has no 'Missing'"),
        (
            "own_agents:categorical",
            "config.agent (--agent) must name an rlstruct.Agent subclass, got a function",
        ),
        ("missing.py:Agent", "config.agent (--agent): no file 'missing.py' (from 'missing.py:Agent')"),
        (
            "own_agents:NoBootstrapAgent",
            "ppo cannot train NoBootstrapAgent: it lacks bootstrap_values (see rlstruct.learning.OnPolicyAgent)",
        ),
    ],
)
def test_an_agent_a_learner_cannot_train_is_refused_before_any_run_starts(
    agent: str, message: str, tmp_path: Path
) -> None:
    with pytest.raises(AgentError) as caught:
        ppo.train(config("ppo", tmp_path, agent))
    assert str(caught.value).startswith(message)
    assert list(tmp_path.iterdir()) == []  # no run directory left behind


def test_the_command_line_reports_an_agent_it_cannot_train_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["train", "a2c", "--env", "CartPole-v1", "--agent", "own_agents:NoBootstrapAgent"]
    assert cli([*argv, "--run-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err == (
        "rlstruct: a2c cannot train NoBootstrapAgent: it lacks bootstrap_values "
        "(see rlstruct.learning.OnPolicyAgent)\n"
    )
    assert cli(["train", "ppo", "--env", "CartPole-v1", "--agent-args", "[1]"]) == 2
    assert capsys.readouterr().err == (
        "rlstruct train ppo: argument --agent-args: must be a JSON object such as '{\"hidden\": 128}', "
        "got '[1]' (rlstruct train ppo --help lists the flags)\n"
    )


def test_an_agent_without_a_needed_output_is_refused_at_the_first_batch(tmp_path: Path) -> None:
    with pytest.raises(AgentError, match=r"ppo cannot train NoValueAgent: its outputs lack \['value'\]"):
        ppo.train(config("ppo", tmp_path, NoValueAgent))


@pytest.mark.parametrize("algo", ["ppo", "a2c", "impala"])
@pytest.mark.parametrize(
    ("agent", "text"),
    [
        (ColumnValueAgent, "its output 'value' must be float32 [B, 16], one number per step"),
        (DoubleLogProbAgent, "its output 'log_prob' must be float32 [B, 16], one number per step"),
        (FlatBootstrapAgent, "FlatBootstrapAgent.bootstrap_values(batch) must be float32 [B, 16]"),
    ],
    ids=["value-column", "float64-log-prob", "flat-bootstrap"],
)
def test_an_output_of_another_shape_or_dtype_is_refused_at_the_first_batch(
    algo: str, agent: Any, text: str, tmp_path: Path
) -> None:
    """A value ``[B, 1]`` broadcast against ``[B, T]`` returns in A2C's loss and trained on; now it is named."""
    rows = 2 if algo == "impala" else 4  # IMPALA's batches are one slot of its 2 processes' 2 environments
    with pytest.raises(AgentError, match=re.escape(text.replace("[B,", f"[{rows},"))) as caught:
        MODULES[algo].train(config(algo, tmp_path, agent))
    assert f"cannot train {agent.__name__}" in str(caught.value)


def test_ppo_names_an_entropy_that_is_not_one_number_per_step(tmp_path: Path) -> None:
    """Against the [N] log-probabilities an [N, 1] entropy would broadcast to [N, N] in the loss."""
    with pytest.raises(AgentError) as caught:
        ppo.train(config("ppo", tmp_path, ColumnEntropyAgent))
    assert str(caught.value).startswith("ppo cannot train ColumnEntropyAgent: action_entropy must return [")
    assert "got shape [" in str(caught.value) and str(caught.value).endswith(", 1]")


def test_a_forward_that_returns_its_output_alone_is_named(tmp_path: Path) -> None:
    text = "OutputOnlyAgent.forward must return (output, new_state), two DictTensors, got a DictTensor"
    with pytest.raises(AgentError, match=re.escape(f"probe: {text}")):  # the multiprocess batcher's probe
        a2c.train(config("a2c", tmp_path, OutputOnlyAgent))
    agent = OutputOnlyAgent(4, 2)
    with LocalBatcher(
        OutputOnlyAgent,
        {"obs_dim": 4, "n_actions": 2},
        GymEnv,
        {"env": "CartPole-v1"},
        n_envs=2,
        n_timesteps=4,
    ) as batcher:
        batcher.update(agent.state_dict())
        with pytest.raises(AgentError, match=re.escape(f"group 0: {text}")):
            batcher.reset()
            batcher.execute()
            batcher.get()


def test_the_protocol_check_names_every_missing_piece() -> None:
    class Bare(Agent):
        def forward(self, state: Any, observation: Any, agent_info: Any, history: Any = None) -> Any:
            raise NotImplementedError

    with pytest.raises(
        AgentError,
        match=r"IMPALA cannot train Bare: it lacks action_key \(a str attribute\), action_log_prob, "
        r"action_entropy, bootstrap_values",
    ):
        check_on_policy_agent(Bare(), "IMPALA")
    with pytest.raises(TypeError, match="PPO trains an Agent"):  # an AgentError is a TypeError too
        check_on_policy_agent(torch.nn.Linear(2, 2), "PPO")


OFF_POLICY: dict[str, dict[str, Any]] = {
    "dqn": {"env": "CartPole-v1", "n_envs": 2, "n_steps": 16, "learning_starts": 64, "batch_size": 16},
    "sac": {"env": "Pendulum-v1", "n_envs": 2, "n_steps": 16, "learning_starts": 64, "batch_size": 16},
}


def off_policy(algo: str, tmp_path: Path, **fields: Any) -> Any:
    module = {"dqn": dqn, "sac": sac}[algo]
    given = {"total_steps": 256, "eval_every": 10**9, "eval_episodes": 2, "hidden": 8}
    return module.Config(run_dir=str(tmp_path), progress=False, **{**OFF_POLICY[algo], **given, **fields})


@pytest.mark.parametrize(
    ("algo", "agent", "args"),
    [
        ("dqn", QAgent, {"obs_dim": 4, "n_actions": 2}),
        ("sac", GaussianActor, {"obs_dim": 3, "action_low": [-2.0], "action_high": [2.0]}),
    ],
)
def test_dqn_and_sac_train_a_users_agent(
    algo: str, agent: type[Agent], args: dict[str, Any], tmp_path: Path
) -> None:
    module = {"dqn": dqn, "sac": sac}[algo]
    torch.manual_seed(0)
    before = agent(**args, hidden=8).state_dict()  # type: ignore[call-arg]
    results = module.train(off_policy(algo, tmp_path, agent=agent, agent_args={"hidden": 8}))
    run_dir = Path(results["run_dir"])
    assert json.loads((run_dir / "config.json").read_text())["agent"] == f"own_agents:{agent.__name__}"
    state = load_checkpoint(run_dir / "checkpoint.pt")
    assert state["model"].keys() == before.keys()
    assert not all(torch.equal(state["model"][k], before[k]) for k in before)
    if algo == "sac":  # its own critics, not the learner's TwinQ
        assert any(key.startswith("pair.") for key in state["critic"])
    saved = load_run(run_dir)
    assert type(saved.agent) is agent and saved.agent_args == {**args, "hidden": 8}
    assert saved.evaluate().mean == results["eval_return_mean"]


def test_dqn_trains_a_users_agent_as_it_trains_its_own_network(tmp_path: Path) -> None:
    # QAgent is built as QNetwork without the dueling head: the same weights, draws and losses
    own = dqn.train(
        off_policy("dqn", tmp_path / "own", agent=QAgent, agent_args={"hidden": 8}, dueling=False)
    )
    built = dqn.train(off_policy("dqn", tmp_path / "built", dueling=False))
    trained = [load_checkpoint(Path(r["run_dir"]) / "checkpoint.pt") for r in (own, built)]
    mine, theirs = trained[0]["model"], trained[1]["model"]
    assert [v.shape for v in mine.values()] == [v.shape for v in theirs.values()]
    assert all(torch.equal(a, b) for a, b in zip(mine.values(), theirs.values(), strict=True))
    assert own["eval_return_mean"] == built["eval_return_mean"]


def test_sac_trains_a_squashed_gaussian_policy_with_its_twin_q(tmp_path: Path) -> None:
    results = sac.train(off_policy("sac", tmp_path, agent=MixinActor, agent_args={"hidden": 8}))
    state = load_checkpoint(Path(results["run_dir"]) / "checkpoint.pt")
    # the learner's TwinQ on the key the agent reads: 3 numbers and the action in, 8 units out
    assert state["critic"]["weights.0"].shape == (2, 3 + 1, 8)
    assert results["env_steps"] == 256


def test_the_command_line_trains_resumes_and_evaluates_a_users_dqn_agent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from test_resume import Interrupted, crash_after_first_checkpoint

    args = ["train", "dqn", "--env", "CartPole-v1", "--agent", "own_agents:QAgent"]
    args += ["--agent-args", '{"hidden": 8}', "--total-steps", "512", "--n-envs", "2", "--n-steps", "16"]
    args += ["--learning-starts", "64", "--checkpoint-every", "256", "--eval-episodes", "2"]
    with monkeypatch.context() as patch:
        crash_after_first_checkpoint(patch)
        with pytest.raises(Interrupted):
            cli([*args, "--run-dir", str(tmp_path / "resumed"), "--no-progress"])
    run_dir = only_run(tmp_path / "resumed")
    assert cli(["train", "dqn", "--resume", str(run_dir), "--no-progress"]) == 0
    assert cli([*args, "--run-dir", str(tmp_path / "whole"), "--no-progress"]) == 0
    resumed, whole = (load_checkpoint(d / "checkpoint.pt") for d in (run_dir, only_run(tmp_path / "whole")))
    assert resumed["env_steps"] == whole["env_steps"] == 512
    assert all(torch.equal(resumed["model"][k], whole["model"][k]) for k in whole["model"])  # bit for bit
    capsys.readouterr()
    assert cli(["eval", str(run_dir), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["algo"] == "dqn" and len(report["returns"]) == 2


@pytest.mark.parametrize(
    ("algo", "agent", "message"),
    [
        (
            "dqn",
            "own_agents:MlpAgent",
            "dqn cannot train MlpAgent: it lacks q_values, epsilon (a float32 0-d buffer) "
            "(see rlstruct.learning.q_learning.QAgent)",
        ),
        (
            "sac",
            "own_agents:MlpAgent",
            "sac cannot train MlpAgent: it lacks sample, action_dim (a positive int), "
            "uniform (a bool 0-d buffer) (see rlstruct.learning.soft_actor_critic.SACAgent)",
        ),
        (
            "dqn",
            "own_agents:WindowQAgent",
            "dqn cannot train WindowQAgent: it asks for a history, and dqn replays single transitions",
        ),
    ],
)
def test_dqn_and_sac_refuse_an_agent_they_cannot_train_before_any_run_starts(
    algo: str, agent: str, message: str, tmp_path: Path
) -> None:
    with pytest.raises(AgentError) as caught:
        args = {"n_actions": 2} if algo == "sac" else None  # MlpAgent takes them; Pendulum has none
        {"dqn": dqn, "sac": sac}[algo].train(off_policy(algo, tmp_path, agent=agent, agent_args=args))
    assert str(caught.value) == message
    assert list(tmp_path.iterdir()) == []


def test_the_off_policy_checks_name_every_missing_piece() -> None:
    class Bare(Agent):
        make_critics = 3

        def forward(self, state: Any, observation: Any, agent_info: Any, history: Any = None) -> Any:
            raise NotImplementedError

    with pytest.raises(AgentError) as caught:
        check_q_agent(Bare(), "DQN")
    assert str(caught.value) == (
        "DQN cannot train Bare: it lacks q_values, epsilon (a float32 0-d buffer) "
        "(see rlstruct.learning.q_learning.QAgent)"
    )
    with pytest.raises(AgentError) as caught:
        check_sac_agent(Bare(), "SAC")
    assert str(caught.value) == (
        "SAC cannot train Bare: it lacks sample, action_dim (a positive int), uniform (a bool 0-d "
        "buffer), a callable make_critics (see rlstruct.learning.soft_actor_critic.SACAgent)"
    )
    for check in (check_q_agent, check_sac_agent):
        with pytest.raises(TypeError, match="SAC trains an Agent"):  # an AgentError is a TypeError too
            check(torch.nn.Linear(2, 2), "SAC")


def test_sac_refuses_critics_that_are_not_a_module(tmp_path: Path) -> None:
    with pytest.raises(AgentError, match=r"sac: NotACritic.make_critics\(\) must return a torch.nn.Module"):
        sac.train(off_policy("sac", tmp_path, agent="own_agents:NotACritic"))


def test_dqn_refuses_an_agent_with_a_state_at_the_first_batch(tmp_path: Path) -> None:
    with pytest.raises(
        AgentError, match=r"dqn cannot train QAgentWithState: it keeps a state \['h'\], and dqn replays"
    ):
        dqn.train(off_policy("dqn", tmp_path, agent=QAgentWithState))


@pytest.mark.parametrize("module", [ppo, dqn, sac])
def test_agent_args_without_an_agent_are_refused(module: Any, tmp_path: Path) -> None:
    name = module.__name__.rsplit(".", 1)[1]
    env = "Pendulum-v1" if name == "sac" else "CartPole-v1"
    with pytest.raises(AgentError, match=f"{name}: config.agent_args .* is for the agent --agent names"):
        module.train(module.Config(env=env, agent_args={"hidden": 8}, run_dir=str(tmp_path)))


@pytest.mark.parametrize("module", [a2c, ppo, impala, dqn, sac])
def test_check_finds_an_agent_that_cannot_be_found_before_train(module: Any, tmp_path: Path) -> None:
    name = module.__name__.rsplit(".", 1)[1]
    env = "Pendulum-v1" if name == "sac" else "CartPole-v1"
    with pytest.raises(AgentError, match=re.escape("config.agent (--agent): cannot import 'no_such_module'")):
        module.check(module.Config(env=env, agent="no_such_module:Agent"))
    with pytest.raises(AgentError, match=f"{name}: config.agent_args .* is for the agent --agent names"):
        module.check(module.Config(env=env, agent_args={"hidden": 8}))
    broken = tmp_path / "broken.py"
    broken.write_text('raise RuntimeError("at import")\n')
    with pytest.raises(AgentError, match=re.escape("cannot import 'broken' (RuntimeError: at import)")):
        module.check(module.Config(env=env, agent=f"{broken}:Agent"))


def test_a_config_holding_the_class_is_stored_by_name(tmp_path: Path) -> None:
    original = config("a2c", tmp_path, MlpAgent)
    a2c.train(original)
    assert original.agent is MlpAgent  # the caller's config is left alone
    stored = json.loads((only_run(tmp_path) / "config.json").read_text())
    assert stored["agent"] == "own_agents:MlpAgent"
    assert dataclasses.replace(original, agent=stored["agent"]).agent == "own_agents:MlpAgent"


def test_eval_records_a_gif_of_a_users_agent(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("PIL")
    # CartPole drawn with numpy (tests/render_helpers.py): no pygame needed
    results = ppo.train(
        dataclasses.replace(
            config("ppo", tmp_path / "runs", MlpAgent), env="render_helpers:make_drawn_cartpole"
        )
    )
    gif = tmp_path / "episode.gif"
    capsys.readouterr()
    assert cli(["eval", results["run_dir"], "--gif", str(gif), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["gif"]["path"] == str(gif) and gif.stat().st_size > 0
    assert report["gif"]["return"] == report["returns"][0]


def test_a_network_that_takes_obs_dim_or_observation_spaces_gets_the_spaces_alone() -> None:
    from rlstruct.learning.actor_critic import ActorCritic
    from rlstruct.learning.recurrent_q import RecurrentQNetwork

    spaces = env_spaces("CartPoleNoVel-v1")
    agent, args = user_agent(RecurrentQNetwork, None, spaces)
    assert "obs_dim" not in args and args["observation_spaces"] == spaces.observation
    assert isinstance(agent, RecurrentQNetwork)
    _, args = user_agent(RecurrentQNetwork, {"obs_dim": 2}, spaces)  # the one given, alone
    assert args["obs_dim"] == 2 and "observation_spaces" not in args
    # a constructor's ValueError is the agent's mistake, in one line
    with pytest.raises(AgentError, match=r"config.agent: ActorCritic\(\*\*.*\) failed: ActorCritic: hidden"):
        user_agent(ActorCritic, {"hidden": 0}, spaces)


def test_an_agent_of_your_own_gets_no_tuned_setting_of_the_built_in_agent(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from rlstruct.algos.agents import ACTOR_CRITIC_FIELDS
    from rlstruct.algos.config import parse_config

    def parse(*argv: str) -> ppo.Config:
        return parse_config(ppo.Config, list(argv), tuned=ppo.TUNED, agent_fields=ACTOR_CRITIC_FIELDS)

    built_in = parse("--env", "CartPoleNoVel-v1")
    assert (built_in.recurrent, built_in.normalize, built_in.n_envs) == (True, True, 16)
    assert capsys.readouterr().out == (
        "tuned settings for CartPoleNoVel-v1: --recurrent --normalize --n-envs 16 --total-steps 100000 "
        "(flags given override them)\n"
    )
    own = parse("--env", "CartPoleNoVel-v1", "--agent", "own_agents:GruAgent")
    assert (own.recurrent, own.normalize, own.n_envs) == (
        False,
        False,
        16,
    )  # what the run does, not the agent
    assert capsys.readouterr().out == (
        "tuned settings for CartPoleNoVel-v1: --n-envs 16 --total-steps 100000 (flags given override them)\n"
    )


@pytest.mark.parametrize("module", [a2c, ppo, impala, dqn, sac])
def test_make_agent_names_an_argument_that_is_not_a_config_or_spaces(module: Any) -> None:
    name = module.__name__.rsplit(".", 1)[1]
    expected = re.escape(f"{name}: make_agent's spaces must be an EnvSpaces")
    with pytest.raises(TypeError, match=expected) as caught:  # was an AttributeError naming .flat
        module.make_agent(module.Config(), None)
    assert str(caught.value).endswith("got a NoneType")
    spaces = env_spaces("Pendulum-v1" if name == "sac" else "CartPole-v1")
    with pytest.raises(TypeError, match=rf"config must be an? {name}\.Config, got a NoneType"):
        module.make_agent(None, spaces)
    with pytest.raises(TypeError, match=rf"config must be an? {name}\.Config, got an? (ppo|a2c)\.Config"):
        module.make_agent((ppo if module is a2c else a2c).Config(), spaces)
