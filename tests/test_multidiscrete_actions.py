"""MultiDiscrete and MultiBinary actions: ActorCritic's k categoricals, the spaces, the learners and the commands.

The log-probabilities and entropies are checked against one
``torch.distributions.Categorical`` per component; the refusals of the
learners that cannot take such actions (DQN, SAC) and of the spaces none
takes are checked by message; PPO learns ``MatchEnv`` (tests/spaces_envs.py);
and a POPGym MineSweeper run trains, evaluates and exports from the command line.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import spaces_envs
import torch
from algo_helpers import message

import rlstruct.distributed as distributed
from rlstruct import DictTensor, GymEnv, LocalBatcher
from rlstruct.algos import dqn, load_run, ppo, sac
from rlstruct.algos.agents import actor_critic_agent
from rlstruct.algos.config import check_env
from rlstruct.algos.evaluation import env_spaces
from rlstruct.learning.actor_critic import ActorCritic

NVEC = [3, 2, 4]


def step(agent: ActorCritic, greedy: list[bool]) -> DictTensor:
    z = DictTensor({"greedy": torch.tensor(greedy)})
    observation = DictTensor({"observation": torch.randn(len(greedy), 5)})
    out, _ = agent(agent.initial_state(z, len(greedy)), observation, z)
    return out


def test_log_prob_and_entropy_are_the_sums_of_one_categorical_per_component() -> None:
    torch.manual_seed(0)
    agent = ActorCritic(obs_dim=5, action_nvec=NVEC)
    torch.nn.init.normal_(agent.actor[-1].weight)  # away from uniform, so that a wrong slice shows
    agent.seed(0)
    out = step(agent, [False] * 6)
    assert out["action"].dtype == torch.int64 and out["action"].shape == (6, 3)
    assert out["logits"].shape == (6, sum(NVEC)) and out["log_prob"].shape == (6,)
    parts = [torch.distributions.Categorical(logits=p) for p in out["logits"].split(NVEC, -1)]
    log_prob = sum(d.log_prob(out["action"][:, i]) for i, d in enumerate(parts))
    entropy = sum(d.entropy() for d in parts)
    assert torch.allclose(out["log_prob"], log_prob)
    assert torch.allclose(agent.action_log_prob(out, out["action"]), log_prob)
    assert torch.allclose(agent.action_entropy(out), entropy)
    for i, n in enumerate(NVEC):  # every component within its count
        assert bool(((out["action"][:, i] >= 0) & (out["action"][:, i] < n)).all())


def test_greedy_rows_take_each_components_most_likely_choice() -> None:
    torch.manual_seed(1)
    agent = ActorCritic(obs_dim=5, action_nvec=NVEC, recurrent=True)
    torch.nn.init.normal_(agent.actor[-1].weight)
    out = step(agent, [True, False, True])
    best = torch.stack([p.argmax(-1) for p in out["logits"].split(NVEC, -1)], -1)
    assert torch.equal(out["action"][[0, 2]], best[[0, 2]])


def test_sampling_follows_the_agents_generator_and_each_components_distribution() -> None:
    torch.manual_seed(2)
    agent = ActorCritic(obs_dim=5, action_nvec=[2, 3])
    agent.seed(7)
    first = step_same(agent)
    agent.seed(7)
    assert torch.equal(step_same(agent), first)  # the same draws from the same seed
    logits = agent.actor(torch.zeros(1, 5))[0]
    for i, part in enumerate(logits.split([2, 3])):
        frequencies = torch.bincount(first[:, i], minlength=part.shape[0]).float() / first.shape[0]
        assert torch.allclose(frequencies, part.softmax(-1), atol=0.02)  # 20000 draws: std <= 0.004


def step_same(agent: ActorCritic) -> torch.Tensor:
    z = DictTensor(batch_size=20000)
    observation = DictTensor({"observation": torch.zeros(20000, 5)})
    out, _ = agent(agent.initial_state(z, 20000), observation, z)
    action: torch.Tensor = out["action"]
    return action


@pytest.mark.parametrize(
    ("kwargs", "error", "text"),
    [
        ({"action_nvec": 3}, TypeError, "ActorCritic: action_nvec must be a sequence of ints, the number of"),
        (
            {"action_nvec": [2, 2.5]},
            TypeError,
            "ActorCritic: action_nvec must be a sequence of ints, got [2, 2.5]",
        ),
        (
            {"action_nvec": []},
            ValueError,
            "ActorCritic: action_nvec must hold at least one count, each at least 1",
        ),
        ({"action_nvec": [3, 0]}, ValueError, "ActorCritic: action_nvec must hold at least one count"),
        (
            {"action_nvec": [3, 3], "n_actions": 3},
            ValueError,
            "ActorCritic: give one of n_actions (discrete actions), action_nvec (multi-discrete ones) or",
        ),
        (
            {"action_nvec": [3], "action_low": [0.0], "action_high": [1.0]},
            ValueError,
            "ActorCritic: give one of",
        ),
    ],
)
def test_action_nvec_that_does_not_fit_is_named(
    kwargs: dict[str, object], error: type[Exception], text: str
) -> None:
    with pytest.raises(error, match=message(text)):
        ActorCritic(obs_dim=4, **kwargs)  # type: ignore[arg-type]


def test_env_spaces_give_the_counts_of_multidiscrete_and_multibinary_actions() -> None:
    spaces = env_spaces("spaces_envs:SpacesTest/BoxMultiDiscreteActions-v0")
    assert spaces.action_nvec == [2, 3]
    assert (spaces.n_actions, spaces.action_low, spaces.action_high) == (None, None, None)
    assert env_spaces("spaces_envs:SpacesTest/BoxMultiBinaryActions-v0").action_nvec == [2, 2, 2]
    assert env_spaces("CartPole-v1").action_nvec is None
    agent, args = actor_critic_agent(ppo.Config(env="CartPole-v1", hidden=8), spaces)
    assert args["action_nvec"] == [2, 3] and isinstance(agent, ActorCritic) and agent.action_nvec == [2, 3]
    _, args = actor_critic_agent(ppo.Config(env="CartPole-v1", hidden=8), env_spaces("CartPole-v1"))
    assert "action_nvec" not in args  # the arguments of other runs are as they were


def register(name: str, action_space: gym.Space[np.ndarray]) -> str:
    class Env(spaces_envs.SpacesEnv):
        def __init__(self) -> None:
            super().__init__("Box")
            self.action_space = action_space

    env_id = f"MultiDiscreteActionsTest/{name}-v0"
    if env_id not in gym.registry:
        gym.register(env_id, entry_point=Env)
    return env_id


def test_a_start_or_several_dimensions_are_refused_in_one_line() -> None:
    started = register("Started", gym.spaces.MultiDiscrete([3, 3], start=[1, 0]))
    with pytest.raises(
        ValueError,
        match=message(
            "0 to nvec - 1, and its action space MultiDiscrete([3 3], start=[1 0]) starts at [1, 0]; shift it"
        ),
    ):
        env_spaces(started)
    square = register("Square", gym.spaces.MultiDiscrete([[2, 2], [2, 2]]))
    with pytest.raises(
        ValueError,
        match=message("has shape (2, 2); flatten it in the environment (a gymnasium ActionWrapper)"),
    ):
        env_spaces(square)
    with pytest.raises(ValueError, match=message("has shape (2, 3); flatten it")):
        env_spaces(register("BinarySquare", gym.spaces.MultiBinary([2, 3])))


def test_dqn_and_sac_refuse_multidiscrete_actions_naming_the_space_and_the_learners_that_take_them() -> None:
    env = "spaces_envs:SpacesTest/BoxMultiDiscreteActions-v0"
    with pytest.raises(ValueError) as caught:
        check_env("dqn", env)
    assert str(caught.value) == (
        f"dqn needs single discrete (Discrete) actions; config.env {env!r} has MultiDiscrete([2 3]): "
        "try a2c, impala or ppo"
    )
    with pytest.raises(
        ValueError,
        match=message(
            f"sac needs continuous (Box) actions; config.env {env!r} has MultiDiscrete([2 3]): try a2c, impala or ppo"
        ),
    ):
        sac.check(sac.Config(env=env))
    binary = "spaces_envs:SpacesTest/BoxMultiBinaryActions-v0"
    with pytest.raises(ValueError, match=message("has MultiDiscrete([2 2 2]): try a2c, impala or ppo")):
        dqn.check(dqn.Config(env=binary))
    assert check_env("ppo", env).action_nvec == [2, 3]


def test_gym_env_converts_int64_multibinary_actions_that_fit_and_refuses_those_that_do_not() -> None:
    env = GymEnv("spaces_envs:SpacesTest/BoxMultiBinaryActions-v0", n_envs=2, seed=0)
    try:
        env.reset(DictTensor(batch_size=2))
        _, observation = env.step(DictTensor({"action": torch.tensor([[1, 0, 1], [0, 0, 1]])}))
        assert observation["last_action"].dtype == torch.int8  # the space's dtype
        assert observation["last_action"].tolist() == [[1, 0, 1], [0, 0, 1]]
        with pytest.raises(
            ValueError,
            match=message("key 'action' of row 1 is [0, 257, 1], outside the action space MultiBinary(3)"),
        ):
            env.step(DictTensor({"action": torch.tensor([[1, 0, 1], [0, 257, 1]])}))  # 257 would wrap to 1
        with pytest.raises(TypeError, match=message("key 'action' has dtype torch.float32")):
            env.step(DictTensor({"action": torch.zeros(2, 3)}))
    finally:
        env.close()


def test_ppo_learns_to_match_each_component(tmp_path: Path) -> None:
    # MatchEnv: a random policy earns 8 / 3 an episode on average (std 0.94; 0.33 for a mean of 8), a
    # perfect one 8. 4096 steps take PPO to 8 (seed 0); 6 is out of a random policy's reach.
    config = ppo.Config(
        env="spaces_envs:SpacesTest/Match-v0",
        total_steps=4096,
        n_envs=8,
        n_steps=32,
        n_processes=1,
        hidden=32,
        seed=0,
        eval_every=10**9,
        eval_episodes=8,
        run_dir=str(tmp_path),
        progress=False,
    )
    results = ppo.train(config)
    assert results["eval_return_mean"] >= 6.0


def test_a_minesweeper_run_trains_evaluates_and_exports_from_the_command_line(tmp_path: Path) -> None:
    pytest.importorskip("popgym")
    from rlstruct.cli import main as cli

    argv = [
        "train",
        "ppo",
        "--env",
        "popgym:popgym-MineSweeperEasy-v0",
        "--recurrent",
        "--total-steps",
        "2048",
    ]
    argv += [
        "--n-envs",
        "4",
        "--n-steps",
        "32",
        "--eval-episodes",
        "2",
        "--run-dir",
        str(tmp_path),
        "--no-progress",
    ]
    assert cli(argv) == 0
    (run_dir,) = tmp_path.iterdir()
    assert cli(["eval", str(run_dir), "--episodes", "2"]) == 0
    assert cli(["export", str(run_dir), str(tmp_path / "minesweeper.pt2")]) == 0
    program = torch.export.load(str(tmp_path / "minesweeper.pt2")).module()
    agent = load_run(run_dir).agent
    assert isinstance(agent, ActorCritic) and agent.action_nvec == [4, 4]
    state = {k: torch.zeros(1, 64) for k in ("h_pi", "h_v")}
    observation = {"observation": torch.tensor([1]), "initial_state": torch.tensor([True])}
    action, _ = program(observation, state)
    assert (
        action.dtype == torch.int64 and action.shape == (1, 2) and bool(((action >= 0) & (action < 4)).all())
    )


@pytest.mark.parametrize("algorithm", [distributed.PPO, distributed.IMPALA])
def test_the_ray_schemes_algorithms_take_a_multidiscrete_recurrent_actor_critic(algorithm: Any) -> None:
    # what a scheme's gradient workers compute (prepare, loss), here without Ray
    args = {"obs_dim": 3, "action_nvec": [2, 3], "hidden": (8,), "recurrent": True}
    model = ActorCritic(**args)
    env_args = {"env": "spaces_envs:SpacesTest/BoxMultiDiscreteActions-v0"}
    with LocalBatcher(ActorCritic, args, GymEnv, env_args, n_envs=2, n_timesteps=8, seed=0) as batcher:
        batcher.update(model.state_dict())
        batcher.reset()
        batcher.execute()
        batch = batcher.get()
    assert batch.trajectories["action"].shape == (2, 8, 2)
    scheme_algorithm = algorithm(model)
    data = scheme_algorithm.prepare(batch)
    loss, terms = scheme_algorithm.loss(data)
    loss.backward()
    assert math.isfinite(loss.item()) and terms["entropy"] > 0
    assert all(p.grad is not None and bool(torch.isfinite(p.grad).all()) for p in model.parameters())
