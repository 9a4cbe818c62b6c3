"""The "Can I use ...?" table of docs/algos/index.md, cell by cell, read from the page.

A "yes" trains the algorithm that way through ``train`` (two worker
processes, a tiny budget, the environments of tests/spaces_envs.py); a "no"
must be refused with a message naming what is not supported. A cell the test
does not know fails the test, so the table cannot grow a column unchecked.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest
import torch

import rlstruct.distributed
from rlstruct import load_checkpoint
from rlstruct.algos import a2c, dqn, impala, ppo, sac
from rlstruct.algos.config import parse_config
from rlstruct.errors import AgentError
from rlstruct.learning import ActorCritic
from rlstruct.learning.q_learning import QNetwork
from rlstruct.learning.soft_actor_critic import SquashedGaussianActor

PAGE = Path(__file__).resolve().parents[1] / "docs" / "algos" / "index.md"
MODULES = {"PPO": ppo, "A2C": a2c, "IMPALA": impala, "DQN": dqn, "SAC": sac}
TINY: dict[str, dict[str, Any]] = {
    "PPO": {"n_envs": 2, "n_steps": 8, "n_epochs": 1, "minibatch_size": 8, "hidden": 8},
    "A2C": {"n_envs": 2, "n_steps": 8, "hidden": 8},
    "IMPALA": {"n_envs": 2, "n_steps": 8, "n_slots": 3, "batch_slots": 1, "hidden": 8},
    "DQN": {"n_envs": 2, "n_steps": 8, "learning_starts": 8, "batch_size": 8, "hidden": 8, "buffer_size": 64},
    "SAC": {"n_envs": 2, "n_steps": 8, "learning_starts": 8, "batch_size": 8, "hidden": 8, "buffer_size": 64},
}
# the agents of your own each learner trains (tests/own_agents.py)
OWN_AGENTS = {"DQN": "own_agents:QAgent", "SAC": "own_agents:GaussianActor"}
# the environments of each observation column (tests/spaces_envs.py)
OBSERVATION_COLUMNS = {
    "Box observations": ["Box"],
    "Discrete, MultiDiscrete, MultiBinary": ["Discrete", "MultiDiscrete", "MultiBinary"],
    "Dict, Tuple": ["Dict", "Tuple"],
    "uint8 images": ["Image"],
}


def table() -> dict[str, dict[str, str]]:
    """The table's cells: ``{algorithm: {column: cell}}``."""
    section = PAGE.read_text().split("## Can I use ...?", 1)[1].splitlines()
    start = next(i for i, line in enumerate(section) if line.startswith("|"))
    end = next((i for i in range(start, len(section)) if not section[i].startswith("|")), len(section))
    lines = section[start:end]  # the first table of the section
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in lines[2:]]
    return {row[0]: dict(zip(header[1:], row[1:], strict=True)) for row in rows}


CELLS = [(algo, column, cell) for algo, row in table().items() for column, cell in row.items()]


def continuous(algo: str) -> bool:
    """Whether the algorithm's runs use Box actions (it takes no Discrete ones)."""
    return table()[algo]["Discrete actions"] == "no"


def train(algo: str, env: str, tmp_path: Path, **fields: Any) -> dict[str, Any]:
    module = MODULES[algo]
    config = module.Config(
        env=f"spaces_envs:SpacesTest/{env}-v0",
        total_steps=32,
        n_processes=2,
        eval_every=10**9,
        eval_episodes=1,
        run_dir=str(tmp_path),
        progress=False,
        **{**TINY[algo], **fields},
    )
    results: dict[str, Any] = module.train(config)
    return results


def trained(results: dict[str, Any]) -> None:
    """The run went to its budget and left finite weights."""
    assert results["env_steps"] == 32
    weights = load_checkpoint(Path(results["run_dir"]) / "checkpoint.pt")["model"]
    assert all(bool(torch.isfinite(v).all()) for v in weights.values() if v.is_floating_point())


def test_the_table_has_every_algorithm_and_only_yes_or_no() -> None:
    assert list(table()) == list(MODULES)
    assert all(re.match(r"(yes|no)\b", cell) for _, _, cell in CELLS)


@pytest.mark.parametrize(("algo", "column", "cell"), CELLS, ids=[f"{a}-{c}" for a, c, _ in CELLS])
def test_every_cell_of_the_table_holds(algo: str, column: str, cell: str, tmp_path: Path) -> None:
    yes = cell.startswith("yes")
    suffix = "Continuous" if continuous(algo) else ""
    if column in OBSERVATION_COLUMNS:
        assert yes, "an observation space no algorithm takes: write its refusal check"
        for kind in OBSERVATION_COLUMNS[column]:
            trained(train(algo, f"{kind}{suffix}", tmp_path / kind))
    elif column in ("Discrete actions", "Box actions"):
        env = "Box" if column == "Discrete actions" else "BoxContinuous"
        if yes:
            trained(train(algo, env, tmp_path))
        else:
            with pytest.raises(ValueError, match=r"(needs discrete actions|needs continuous)"):
                train(algo, env, tmp_path)
    elif column == "MultiDiscrete, MultiBinary actions":
        for kind in ("MultiDiscreteActions", "MultiBinaryActions"):
            if yes:
                trained(train(algo, f"Box{kind}", tmp_path / kind))
            else:
                with pytest.raises(
                    ValueError, match=r"needs (single discrete \(Discrete\)|continuous \(Box\)) "
                ):
                    train(algo, f"Box{kind}", tmp_path / kind)
    elif column == "`--recurrent`":
        if yes:
            burn_in = {"burn_in": 2} if algo in ("DQN", "SAC") else {}  # below TINY's 8 steps per row
            trained(train(algo, f"Box{suffix}", tmp_path, recurrent=True, **burn_in))
        else:
            assert "recurrent" not in {f.name for f in dataclasses.fields(MODULES[algo].Config)}
            with pytest.raises(SystemExit) as caught:
                parse_config(MODULES[algo].Config, ["--env", "CartPole-v1", "--recurrent"])
            assert caught.value.code == 2
    elif column == "your own agent (`--agent`)":
        assert yes, "every learner trains an agent of yours: write its refusal check"
        agent = OWN_AGENTS.get(algo, "own_agents:MlpAgent")
        trained(train(algo, f"Box{suffix}", tmp_path, agent=agent, agent_args={"hidden": 4}))
        if "without memory or history" in cell:  # tests/test_own_agent.py: a state, a history refused
            with pytest.raises(AgentError, match="replays single transitions"):
                train(algo, f"Box{suffix}", tmp_path / "state", agent=f"{agent}WithState")
        else:  # tests/test_own_agent.py trains agents with memory and history with each of these
            assert cell == "yes, with memory or history too"
    elif column == "multiprocess collection":
        assert yes
        trained(train(algo, f"Box{suffix}", tmp_path))  # n_processes=2
    elif column == "Ray scheme":
        name = algo
        if yes:
            assert cell == f"yes: `distributed.{name}`"
            scheme_algorithm = getattr(rlstruct.distributed, name)
            if name == "DQN":  # tests/test_distributed_off_policy.py trains the off-policy ones
                model: torch.nn.Module = QNetwork(obs_dim=4, n_actions=2, hidden=(8, 8))
            elif name == "SAC":
                model = SquashedGaussianActor(obs_dim=3, action_low=[-1.0], action_high=[1.0], hidden=(8, 8))
            else:  # recurrent too (tests/test_distributed.py trains it)
                model = ActorCritic(obs_dim=4, n_actions=2, hidden=(8,), recurrent=True)
            assert scheme_algorithm(model).model is model
        else:
            assert not hasattr(rlstruct.distributed, name)
    else:
        pytest.fail(f"no check for the column {column!r}: add one")


def test_the_command_line_trains_a_popgym_task_with_discrete_observations(tmp_path: Path) -> None:
    pytest.importorskip("popgym")
    from rlstruct.cli import main as cli

    argv = ["train", "ppo", "--env", "popgym:popgym-RepeatPreviousEasy-v0", "--recurrent"]
    argv += ["--total-steps", "512", "--n-envs", "4", "--n-steps", "16", "--eval-episodes", "2"]
    assert cli([*argv, "--run-dir", str(tmp_path), "--no-progress"]) == 0
    (run_dir,) = tmp_path.iterdir()
    weights = load_checkpoint(run_dir / "checkpoint.pt")["model"]
    # a Discrete(4) observation, one-hot: the memories read 4 numbers
    assert weights["actor_memory.weight_ih_l0"].shape == (3 * 64, 4)
