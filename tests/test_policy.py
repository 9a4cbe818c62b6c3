"""Policy: an agent acting on one raw observation as a batcher would act on it, and its exported program.

The references: the agent's own ``forward`` on a batch of one row with the
z of evaluations (``greedy`` True), chained by hand; a ``LocalBatcher``
playing the same seeded episodes; ``GymEnv``'s own keying of Dict and Tuple
observations. The agents are the ones each algorithm builds (``make_agent``),
untrained: acting does not depend on how the weights were found.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from algo_helpers import message
from spaces_envs import OBSERVATIONS, SpacesEnv

from rlstruct import Agent, DictTensor, GymEnv, LocalBatcher, TemporalDictTensor, save_checkpoint
from rlstruct.algos import Policy, a2c, dqn, impala, load_run, ppo, sac
from rlstruct.algos.evaluation import env_spaces
from rlstruct.gym_env import observation_spaces
from rlstruct.learning.actor_critic import ActorCritic
from rlstruct.learning.q_learning import QNetwork
from rlstruct.specs import ObservationSpace
from rlstruct.testing import CountingAgent

ALGOS: dict[str, tuple[Any, dict[str, Any]]] = {
    "ppo": (ppo, {"env": "CartPole-v1"}),
    "ppo-lstm-normalize": (
        ppo,
        {"env": "CartPole-v1", "recurrent": True, "memory": "lstm", "normalize": True},
    ),
    "a2c-continuous": (a2c, {"env": "Pendulum-v1", "hidden": 16}),
    "impala-gru": (impala, {"env": "CartPole-v1", "recurrent": True, "hidden": 16}),
    "dqn": (dqn, {"env": "CartPole-v1", "dueling": True, "hidden": 32}),
    "sac": (sac, {"env": "Pendulum-v1", "hidden": 32}),
}
RECURRENT = ["ppo-lstm-normalize", "impala-gru"]


@pytest.fixture(autouse=True, scope="module")
def one_thread() -> Iterator[None]:
    """Calls on one row gain nothing from threads, and lose much to them on a busy machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def made(name: str, seed: int = 0) -> tuple[Agent, dict[str, Any], str]:
    """The agent ``make_agent`` builds for ``ALGOS[name]``, seeded, with its arguments and environment id."""
    algo, options = ALGOS[name]
    config = algo.Config(**options)
    torch.manual_seed(seed)
    agent, agent_args = algo.make_agent(config, env_spaces(config.env))
    if getattr(agent, "obs_norm", None) is not None:  # statistics of a trained run, not the identity
        agent.obs_norm.merge(torch.tensor(10.0), torch.full((4,), 0.5), torch.full((4,), 2.0))
    return agent, agent_args, config.env


def greedy_z(n: int = 1) -> DictTensor:
    return DictTensor({"greedy": torch.ones(n, dtype=torch.bool)})


def rollout(env_id: str, n: int, seed: int = 0, episode: int = 40) -> list[tuple[Any, bool]]:
    """``n`` raw observations of random play, each with whether it starts an episode (every ``episode`` steps at most)."""
    env = gym.make(env_id)
    env.action_space.seed(seed)
    observation, _ = env.reset(seed=seed)
    seen, t = [], 0
    for _ in range(n):
        seen.append((observation, t == 0))
        observation, _, terminated, truncated, _ = env.step(env.action_space.sample())
        t += 1
        if terminated or truncated or t == episode:
            observation, _ = env.reset()
            t = 0
    env.close()
    return seen


@torch.no_grad()
def step(
    agent: Agent, state: DictTensor, observation: DictTensor, z: DictTensor
) -> tuple[DictTensor, DictTensor]:
    """The agent's forward on rows, as a batcher calls it (without gradients)."""
    return agent(state, observation, z)  # type: ignore[no-any-return]


def as_row(observation: Any, starting: bool) -> DictTensor:
    return DictTensor(
        {"observation": torch.from_numpy(observation)[None], "initial_state": torch.tensor([starting])}
    )


# ---------------------------------------------------------------------------- acting as the agent acts


@pytest.mark.parametrize("name", list(ALGOS))
def test_act_is_the_agents_greedy_action_on_a_batch_of_one(name: str) -> None:
    agent, _, env_id = made(name)
    env = gym.make(env_id)
    policy = Policy(agent, env.observation_space)
    for observation, _ in rollout(env_id, 30):
        policy.reset()
        action = policy.act(observation)
        z = greedy_z()
        expected, _ = step(agent, agent.initial_state(z, 1), as_row(observation, True), z)
        assert np.array_equal(action, expected["action"][0].numpy())
        assert env.action_space.contains(action)
        assert isinstance(action, np.int64 if env_id == "CartPole-v1" else np.ndarray)
    env.close()


@pytest.mark.parametrize("name", RECURRENT)
def test_the_state_carries_over_as_forward_chained_by_hand_and_restarts_at_reset(name: str) -> None:
    agent, _, env_id = made(name)
    policy = Policy(agent, env_spaces(env_id).observation)
    z = greedy_z()
    state = agent.initial_state(z, 1)
    moved = False
    for observation, starting in rollout(env_id, 60, episode=25):
        if starting:
            policy.reset()
            assert policy.state is None
            state = agent.initial_state(z, 1)
        action = policy.act(observation)
        expected, state = step(agent, state, as_row(observation, starting), z)
        assert action == expected["action"][0].item()
        assert policy.state is not None and policy.state.keys() == state.keys()
        assert all(torch.equal(policy.state[k], state[k]) for k in state)
        moved |= not torch.equal(state["h_pi"], torch.zeros_like(state["h_pi"]))
    assert moved


def batcher_episode(agent: Agent, agent_args: dict[str, Any], env_id: str, seed: int) -> TemporalDictTensor:
    """One greedy episode of one environment, reset with ``seed``, as evaluations play it: the reference."""
    with LocalBatcher(
        type(agent),
        agent_args,
        GymEnv,
        {"env": env_id},
        n_envs=1,
        n_timesteps=500,
        mode="episodes",
        weights=agent.state_dict(),
    ) as batcher:
        batcher.reset(agent_info=greedy_z(), env_info=DictTensor({"seed": torch.tensor([seed])}))
        batcher.execute()
        steps = batcher.get().trajectories
    return steps.temporal_slice(0, int(steps.lengths[0]))


def play(policy: Policy, env_id: str, seed: int) -> tuple[list[Any], list[DictTensor]]:
    """A plain gymnasium loop: the actions of one episode, and the agent's state after each."""
    env = gym.make(env_id)
    observation, _ = env.reset(seed=seed)
    policy.reset()
    actions, states = [], []
    done = False
    while not done:
        action = policy.act(observation)
        actions.append(action)
        assert policy.state is not None
        states.append(policy.state)
        observation, _, terminated, truncated, _ = env.step(action)
        done = terminated or truncated
    env.close()
    return actions, states


@pytest.mark.parametrize("name", ["ppo", "impala-gru", "ppo-lstm-normalize", "dqn"])
def test_a_gymnasium_loop_plays_the_episodes_a_batcher_plays(name: str) -> None:
    agent, agent_args, env_id = made(name)
    policy = Policy(agent, gym.make(env_id).observation_space)
    for seed in (3, 4):  # one policy, reset between the episodes
        steps = batcher_episode(agent, agent_args, env_id, seed)
        actions, states = play(policy, env_id, seed)
        assert actions == steps["action"][0].tolist()
        for key in getattr(agent, "value_memory", []):  # the value memory after each step, as stored
            assert torch.equal(torch.cat([s[key] for s in states]), steps[key][0])


class WindowParity(Agent):
    """Acts on its history: 1 where the window's first observation entries sum above 0 xor its length is odd."""

    def __init__(self, history: bool | int) -> None:
        super().__init__()
        self.history = history

    def require_history(self) -> bool | int:
        return self.history

    def forward(
        self,
        state: DictTensor,
        observation: DictTensor,
        agent_info: DictTensor,
        history: TemporalDictTensor | None = None,
    ) -> tuple[DictTensor, DictTensor]:
        assert history is not None
        above = history["observation"][:, :, 0].sum(1) > 0
        odd = history.lengths % 2 == 1
        return DictTensor({"action": (above ^ odd).long(), "seen": history.lengths.clone()}), state


@pytest.mark.parametrize("history", [3, True], ids=["last-3", "all"])
def test_an_agent_with_a_history_sees_the_windows_a_batcher_gives_it(history: bool | int) -> None:
    agent = WindowParity(history)
    policy = Policy(agent, gym.make("CartPole-v1").observation_space)
    for seed in (0, 1):
        steps = batcher_episode(agent, {"history": history}, "CartPole-v1", seed)
        actions, _ = play(policy, "CartPole-v1", seed)
        assert actions == steps["action"][0].tolist()
        assert steps["seen"][0].max() == (3 if history == 3 else len(actions) - 1)


def test_a_stateful_history_agent_counts_its_steps_and_restarts_at_reset() -> None:
    agent = CountingAgent(action=1, history=2)
    policy = Policy(agent, {"observation": ObservationSpace("box", (4,), torch.float32)})
    for _ in range(3):
        policy.act(np.zeros(4, dtype=np.float32))
    assert policy.state is not None and policy.state["count"].tolist() == [3]
    policy.reset()
    assert policy.act(np.zeros(4, dtype=np.float32)) == 1
    assert policy.state is not None and policy.state["count"].tolist() == [1]


def test_sampled_actions_draw_from_the_agents_generator() -> None:
    agent, _, env_id = made("a2c-continuous")
    policy = Policy(agent, gym.make(env_id).observation_space, greedy=False)
    observations = [o for o, _ in rollout(env_id, 5)]
    agent.seed(7)
    sampled = [policy.act(o) for o in observations]
    agent.seed(7)
    z = DictTensor({"greedy": torch.zeros(1, dtype=torch.bool)})
    expected = [
        step(agent, DictTensor(batch_size=1), as_row(o, False), z)[0]["action"][0].numpy()
        for o in observations
    ]
    assert all(np.array_equal(a, b) for a, b in zip(sampled, expected, strict=True))
    greedy = Policy(agent, gym.make(env_id).observation_space).act(observations[0])
    assert not np.array_equal(sampled[0], greedy)


def test_agent_info_reaches_the_agent_beside_greedy() -> None:
    agent = CountingAgent()
    policy = Policy(
        agent,
        {"observation": ObservationSpace("box", (1,), torch.float32)},
        agent_info=DictTensor({"start": torch.tensor([5])}),
    )
    policy.act(np.zeros(1, dtype=np.float32))
    assert policy.state is not None and policy.state["count"].tolist() == [6]


@pytest.mark.parametrize("kind", ["Dict", "Tuple", "Discrete", "MultiDiscrete", "MultiBinary", "Image"])
def test_every_kind_of_observation_is_keyed_as_gymenv_keys_it(kind: str) -> None:
    torch.manual_seed(0)
    space = OBSERVATIONS[kind]
    agent = ActorCritic(observation_spaces=observation_spaces(space), n_actions=2, hidden=(8,))
    with torch.no_grad():
        agent.actor[-1].weight.normal_()  # decisive: greedy actions that tell observations apart
    policy = Policy(agent, space)
    env, reference = SpacesEnv(kind), GymEnv(lambda: SpacesEnv(kind), n_envs=1)
    z = greedy_z()
    for seed in range(6):
        observation, _ = env.reset(seed=seed)
        row = reference.reset(DictTensor({"seed": torch.tensor([seed])}))
        policy.reset()
        expected, _ = step(agent, agent.initial_state(z, 1), row, z)
        assert policy.act(observation) == expected["action"][0].item()
    reference.close()


# ---------------------------------------------------------------------------- export


def load(path: Path) -> Any:
    return torch.export.load(path).module()


@pytest.mark.parametrize("name", list(ALGOS))
def test_the_exported_program_acts_as_the_policy(name: str, tmp_path: Path) -> None:
    agent, _, env_id = made(name)
    policy = Policy(agent, gym.make(env_id).observation_space)
    program = load(policy.export(tmp_path / "policy.pt2"))
    state = {k: torch.zeros(1, *v.shape[1:]) for k, v in agent.initial_state(greedy_z(), 1).items()}
    for observation, starting in rollout(env_id, 200):
        if starting:
            policy.reset()
        action = policy.act(observation)
        inputs = {"observation": torch.from_numpy(observation)[None]}
        if state:
            inputs["initial_state"] = torch.tensor([starting])
            exported, state = program(inputs, state)
        else:
            exported = program(inputs)
        assert np.array_equal(exported[0].numpy(), action)


def test_an_exported_batch_acts_as_the_agent_on_that_batch(tmp_path: Path) -> None:
    agent, _, env_id = made("impala-gru")
    policy = Policy(agent, gym.make(env_id).observation_space)
    program = load(policy.export(tmp_path / "policy.pt2", batch_size=3))
    z = greedy_z(3)
    state = agent.initial_state(z, 3)
    starts = torch.tensor([True, True, True])
    observations = [o for o, _ in rollout(env_id, 30)]
    exported_state = {k: torch.full_like(v, 9.0) for k, v in state.items()}  # replaced at episode starts
    for t in range(10):
        batch = torch.from_numpy(np.stack(observations[3 * t : 3 * t + 3]))
        expected, state = step(agent, state, DictTensor({"observation": batch, "initial_state": starts}), z)
        action, exported_state = program({"observation": batch, "initial_state": starts}, exported_state)
        assert torch.equal(action, expected["action"])
        assert all(torch.equal(exported_state[k], state[k]) for k in state)
        starts = torch.tensor([False, t == 4, False])
        if t == 4:
            state = DictTensor.where(starts, agent.initial_state(z, 3), state)


def test_a_dict_observation_is_exported_as_a_dict_of_its_keys(tmp_path: Path) -> None:
    torch.manual_seed(0)
    space = OBSERVATIONS["Dict"]
    agent = ActorCritic(observation_spaces=observation_spaces(space), n_actions=2, hidden=(8,))
    policy = Policy(agent, space)
    program = load(policy.export(tmp_path / "policy.pt2"))
    env = SpacesEnv("Dict")
    observation, _ = env.reset(seed=0)
    for _ in range(20):
        inputs = {
            "position": torch.from_numpy(observation["position"])[None],
            "room": torch.tensor([observation["room"]]),
        }
        assert program(inputs)[0].item() == policy.act(observation)
        observation, *_ = env.step(0)


def test_the_exported_file_runs_without_rlstruct_and_warns_of_nothing(tmp_path: Path) -> None:
    agent, _, env_id = made("ppo-lstm-normalize")
    path = Policy(agent, gym.make(env_id).observation_space).export(tmp_path / "policy.pt2")
    observation = rollout(env_id, 1)[0][0]
    expected = Policy(agent, gym.make(env_id).observation_space).act(observation)
    script = (
        "import sys, torch\n"
        f"program = torch.export.load({str(path)!r}).module()\n"
        f"observation = torch.tensor([{observation.tolist()!r}])\n"
        "state = {k: torch.zeros(1, 64) for k in ('h_pi', 'c_pi', 'h_v', 'c_v')}\n"
        "action, state = program({'observation': observation, 'initial_state': torch.tensor([True])}, state)\n"
        "print(action.item(), 'rlstruct' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-W", "error", "-c", script],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(expected), "False"]


def test_an_agent_with_a_history_is_not_exported(tmp_path: Path) -> None:
    policy = Policy(WindowParity(3), {"observation": ObservationSpace("box", (4,), torch.float32)})
    with pytest.raises(
        ValueError,
        match=message(
            "Policy.export: WindowParity asks for a history window (require_history() = 3), which an exported "
            "program does not carry; act with Policy instead"
        ),
    ):
        policy.export(tmp_path / "policy.pt2")


class BranchesOnTheObservation(Agent):
    def forward(
        self,
        state: DictTensor,
        observation: DictTensor,
        agent_info: DictTensor,
        history: TemporalDictTensor | None = None,
    ) -> tuple[DictTensor, DictTensor]:
        first = 1 if observation["observation"][0, 0] > 0 else 0  # Python control flow on data
        return DictTensor({"action": torch.full((observation.n_elems(),), first)}), state


def test_an_agent_torch_export_cannot_trace_is_named(tmp_path: Path) -> None:
    policy = Policy(BranchesOnTheObservation(), {"observation": ObservationSpace("box", (2,), torch.float32)})
    assert policy.act(np.ones(2, dtype=np.float32)) == 1
    with pytest.raises(
        ValueError,
        match=message(
            "Policy.export: torch.export cannot trace BranchesOnTheObservation.forward (greedy, 1 rows): "
        ),
    ):
        policy.export(tmp_path / "policy.pt2")


# ---------------------------------------------------------------------------- runs


def test_from_run_acts_with_the_runs_trained_agent(tmp_path: Path) -> None:
    config = ppo.Config(env="CartPole-v1", recurrent=True, hidden=16)
    agent, _, _ = made(
        "impala-gru", seed=1
    )  # the same network: ppo's make_agent with recurrent and hidden 16
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.json").write_text(json.dumps(dataclasses.asdict(config)))
    save_checkpoint(tmp_path / "run" / "checkpoint.pt", model=agent, env_steps=100)
    policy = Policy.from_run(tmp_path / "run")
    assert policy.greedy and policy.spaces == env_spaces("CartPole-v1").observation
    mine = Policy(agent, policy.spaces)
    for observation, starting in rollout("CartPole-v1", 40):
        if starting:
            policy.reset()
            mine.reset()
        assert policy.act(observation) == mine.act(observation)
    assert Policy.from_run(load_run(tmp_path / "run"), greedy=False).greedy is False


# ---------------------------------------------------------------------------- mistakes


def cartpole_policy() -> Policy:
    torch.manual_seed(0)
    return Policy(QNetwork(obs_dim=4, n_actions=2, hidden=(8,)), gym.make("CartPole-v1").observation_space)


@pytest.mark.parametrize(
    ("observation", "error", "text"),
    [
        (
            np.zeros(3, dtype=np.float32),
            ValueError,
            "Policy.act: observation must have shape (4,) and dtype torch.float32, as its box space declares; "
            "got shape (3,)",
        ),
        (
            np.zeros((1, 4), dtype=np.float32),
            ValueError,
            "Policy.act: observation must have shape (4,) and dtype torch.float32, as its box space declares; "
            "got shape (1, 4) (act takes one observation, not a batch)",
        ),
        (
            np.zeros(4),
            TypeError,
            "Policy.act: observation must have shape (4,) and dtype torch.float32, as its box space declares; "
            "got dtype torch.float64",
        ),
        (
            "left",
            TypeError,
            "Policy.act: observation must be a numpy array or a tensor of shape (4,) and dtype torch.float32, "
            "as its box space declares; got a str",
        ),
        (
            np.array(["a", "b", "c", "d"]),
            TypeError,
            "Policy.act: observation must have shape (4,) and dtype torch.float32, as its box space declares; "
            "got a numpy array of dtype <U1",
        ),
        (
            np.zeros(4, dtype="datetime64[s]"),
            TypeError,
            "Policy.act: observation must have shape (4,) and dtype torch.float32, as its box space declares; "
            "got a numpy array of dtype datetime64[s]",
        ),
    ],
    ids=["shape", "batch", "dtype", "type", "strings", "datetime"],
)
def test_a_bad_observation_names_what_was_expected_and_received(
    observation: Any, error: type, text: str
) -> None:
    with pytest.raises(error, match=message(text) + "$"):
        cartpole_policy().act(observation)


def test_a_read_only_or_big_endian_array_is_read_as_any_other() -> None:
    policy = cartpole_policy()
    observation = np.array([0.1, -0.2, 0.03, 0.4], dtype=np.float32)
    expected = policy.act(observation)
    read_only = observation.copy()
    read_only.setflags(write=False)  # np.frombuffer, a broadcast: torch warned that it cannot write to it
    big_endian = observation.astype(">f4")  # torch refused it: "byte order different from the native"
    assert policy.act(read_only) == expected
    assert policy.act(big_endian) == expected
    assert policy.act(np.zeros(8, dtype=np.float32)[::2]) == policy.act(np.zeros(4, dtype=np.float32))


@pytest.mark.parametrize("greedy", [True, False])
def test_a_nan_in_the_observation_is_named_before_the_agent_samples_from_it(greedy: bool) -> None:
    torch.manual_seed(0)
    policy = Policy(
        ActorCritic(obs_dim=4, n_actions=2), gym.make("CartPole-v1").observation_space, greedy=greedy
    )
    observation = np.zeros(4, dtype=np.float32)
    observation[2] = np.nan
    with pytest.raises(
        ValueError,
        match=message(
            "Policy.act: observation must hold no NaN (a box space holds none); got nan at index (2,)"
        )
        + "$",
    ):
        policy.act(observation)
    observation[2] = np.inf  # a value a box space with infinite bounds holds: the agent's to judge
    assert policy.act(observation) in (0, 1)


@pytest.mark.parametrize(
    ("space", "observation", "text"),
    [
        (gym.spaces.Discrete(3), 3, "discrete space (n=(3,), start=(0,)); got 3 at index ()"),
        (
            gym.spaces.Discrete(3, start=-1),
            np.int32(-2),
            "discrete space (n=(3,), start=(-1,)); got -2 at index ()",
        ),
        (
            gym.spaces.MultiDiscrete([[2, 3], [4, 5]]),
            np.array([[1, 2], [4, 0]]),
            "multidiscrete space (n=(2, 3, 4, 5), start=(0, 0, 0, 0)); got 4 at index (1, 0)",
        ),
    ],
    ids=["discrete", "start", "multidiscrete"],
)
def test_a_discrete_value_outside_the_space_is_named(
    space: gym.Space[Any], observation: Any, text: str
) -> None:
    policy = Policy(CountingAgent(), space)
    with pytest.raises(
        ValueError, match=message(f"Policy.act: observation must hold values of its {text}") + "$"
    ):
        policy.act(observation)
    policy.act(space.sample())


def test_a_bad_dict_observation_names_the_entry() -> None:
    policy = Policy(CountingAgent(), OBSERVATIONS["Dict"])
    with pytest.raises(
        TypeError,
        match=message(
            "Policy.act: observation must be the environment's dict or tuple observation, with the keys "
            "['position', 'room'] (joined by '/'), got a ndarray"
        ),
    ):
        policy.act(np.zeros(2, dtype=np.float32))
    with pytest.raises(
        ValueError,
        match=message(
            "Policy.act: observation lacks the entry observation['room'] (the observation space has"
        ),
    ):
        policy.act({"position": np.zeros(2, dtype=np.float32)})
    with pytest.raises(
        TypeError, match=message("Policy.act: observation['room'] must have shape () and dtype torch.int64")
    ):
        policy.act({"position": np.zeros(2, dtype=np.float32), "room": 1.5})
    policy.act(
        {"position": np.zeros(2, dtype=np.float32), "room": np.int32(2)}
    )  # any integer, as GymEnv takes it
    tuples = Policy(CountingAgent(), OBSERVATIONS["Tuple"])
    with pytest.raises(
        TypeError, match=message("Policy.act: observation[1] must have shape (2,) and dtype torch.int8")
    ):
        tuples.act((np.zeros(2, dtype=np.int64), np.zeros(2, dtype=np.float32)))


def test_bad_arguments_are_named(tmp_path: Path) -> None:
    space = gym.make("CartPole-v1").observation_space
    with pytest.raises(TypeError, match=message("Policy: agent must be an rlstruct.Agent, got a str")):
        Policy("agent", space)  # type: ignore[arg-type]
    with pytest.raises(
        TypeError,
        match=message(
            "Policy: observation_space must be a gymnasium space or a mapping of str to ObservationSpace, got a str"
        ),
    ):
        Policy(CountingAgent(), "CartPole-v1")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=message("Policy: greedy must be a bool, got an int")):
        Policy(CountingAgent(), space, greedy=1)  # type: ignore[arg-type]
    with pytest.raises(
        ValueError,
        match=message(
            "Policy: agent_info must be a DictTensor of one row without the key 'greedy' (give greedy=), got 1 rows "
            "with the keys ['greedy']"
        ),
    ):
        Policy(CountingAgent(), space, agent_info=greedy_z())
    with pytest.raises(ValueError, match=message("got 2 rows with the keys ['start']")):
        Policy(CountingAgent(), space, agent_info=DictTensor({"start": torch.tensor([1, 2])}))
    with pytest.raises(TypeError, match=message("Policy.export: batch_size must be an int, got a str")):
        cartpole_policy().export("x.pt2", batch_size="2")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=message("Policy.export: batch_size must be at least 1, got 0")):
        cartpole_policy().export("x.pt2", batch_size=0)
    # not a crash of the interpreter in torch.export.save (an int), nor its RuntimeError after the trace
    with pytest.raises(
        TypeError, match=message("Policy.export: path must be a path (a str or os.PathLike), got an int")
    ):
        cartpole_policy().export(5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=message("Policy.export: path must name the file to write, got ''")):
        cartpole_policy().export("")
    with pytest.raises(
        ValueError,
        match=message(f"Policy.export: path must name the file to write, got the folder {str(tmp_path)!r}"),
    ):
        cartpole_policy().export(tmp_path)
    with pytest.raises(
        FileNotFoundError,
        match=message(f"Policy.export: path's folder {str(tmp_path / 'no')!r} does not exist"),
    ):
        cartpole_policy().export(tmp_path / "no" / "x.pt2")


class NoAction(Agent):
    def forward(
        self,
        state: DictTensor,
        observation: DictTensor,
        agent_info: DictTensor,
        history: TemporalDictTensor | None = None,
    ) -> tuple[DictTensor, DictTensor]:
        return DictTensor({"move": torch.zeros(observation.n_elems())}), state


def test_an_output_without_action_is_named() -> None:
    policy = Policy(NoAction(), {"observation": ObservationSpace("box", (1,), torch.float32)})
    with pytest.raises(
        ValueError,
        match=message(
            "Policy.act: NoAction's output must be a DictTensor with the key 'action', got ['move']"
        ),
    ):
        policy.act(np.zeros(1, dtype=np.float32))
