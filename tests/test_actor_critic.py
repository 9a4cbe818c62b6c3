"""The actor-critic of rlstruct.learning.actor_critic and its run_memory.

Log-probabilities and entropies against torch's distributions, clamped
continuous actions, a recurrent memory (GRU or LSTM) per head that restarts at
episode starts and replays what was collected, observation statistics carried
in the weights, a value learned in its targets' scale (PopArt), orthogonal
initialisation, policy and value gradients clipped apart, and the messages for
bad sizes.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from algo_helpers import message

from rlstruct import DictTensor, GymEnv, LocalBatcher, replay_agent
from rlstruct.learning.actor_critic import ActorCritic, run_memory


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
    with pytest.raises(  # a list is not hashable: the lookup among the memories failed inside Python
        ValueError, match=message("ActorCritic: memory must be one of ['gru', 'lstm'], got ['gru']")
    ):
        ActorCritic(obs_dim=4, n_actions=2, recurrent=True, memory=["gru"])  # type: ignore[arg-type]


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
        ({"obs_dim": 2, "n_actions": 0}, "ActorCritic: n_actions must be at least 1, got 0"),
        ({"obs_dim": 2, "action_low": [0.0]}, "continuous actions need action_low and action_high"),
        ({"obs_dim": 2, "action_low": [], "action_high": []}, "of the same, non-zero length, got [] and []"),
        (
            {"obs_dim": 2, "action_low": [1.0], "action_high": [-1.0]},
            "ActorCritic: action_low must be below action_high in every dimension, got [1.0] and [-1.0]",
        ),
    ],
)
def test_actor_critic_rejects_bad_sizes(kwargs: dict[str, object], text: str) -> None:
    with pytest.raises(ValueError, match=message(text)):
        ActorCritic(**kwargs)  # type: ignore[arg-type]


def test_n_actions_must_be_an_int() -> None:
    from rlstruct.learning.q_learning import QNetwork

    with pytest.raises(TypeError, match=message("ActorCritic: n_actions must be an int, got a float")):
        ActorCritic(obs_dim=2, n_actions=2.0)  # type: ignore[arg-type]
    with pytest.raises(
        TypeError, match=message("QNetwork: n_actions must be a positive int (discrete actions), got a bool")
    ):
        QNetwork(obs_dim=2, n_actions=True)


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


def test_orthogonal_initialisation_uses_the_stated_gains() -> None:
    agent = ActorCritic(obs_dim=4, n_actions=2, orthogonal=True)
    first, policy_out, value_out = agent.actor[0].weight, agent.actor[-1].weight, agent.critic[-1].weight
    assert torch.allclose(first.T @ first, 2.0 * torch.eye(4), atol=1e-5)  # [64, 4]: orthogonal columns
    assert torch.allclose(policy_out @ policy_out.T, 1e-4 * torch.eye(2), atol=1e-8)  # gain 0.01
    assert torch.allclose(value_out @ value_out.T, torch.ones(1, 1), atol=1e-5)
    assert all(not m.bias.detach().any() for m in agent.modules() if isinstance(m, torch.nn.Linear))


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


def test_an_image_encoder_is_trained_and_clipped_with_the_policy() -> None:
    from rlstruct.specs import ObservationSpace

    image = {"observation": ObservationSpace("box", (8, 8, 3), torch.uint8)}
    agent = ActorCritic(observation_spaces=image, n_actions=2, hidden=(8,), recurrent=True)
    assert agent.encoder is not None
    encoder = {id(p) for p in agent.encoder.parameters()}
    assert encoder and encoder <= {id(p) for p in agent.policy_parameters()}
    assert {id(p) for p in agent.policy_parameters()} | {id(p) for p in agent.value_parameters()} == {
        id(p) for p in agent.parameters()
    }


@pytest.mark.parametrize("recurrent", [False, True])
def test_a_value_normalised_actor_critic_keeps_its_values_through_an_update(recurrent: bool) -> None:
    args = {"obs_dim": 4, "n_actions": 2, "hidden": (16, 16), "recurrent": recurrent, "value_norm": True}
    agent = ActorCritic(**args)  # type: ignore[arg-type]
    assert agent.value_norm is not None and ActorCritic(obs_dim=4, n_actions=2).value_norm is None
    assert ActorCritic(obs_dim=4, n_actions=2).value_scale() is None
    z = DictTensor({"greedy": torch.zeros(5, dtype=torch.bool)})
    obs = DictTensor({"observation": torch.randn(5, 4)})
    state = agent.initial_state(z, 5)
    before, _ = agent(state, obs, z)
    agent.update_value_norm(torch.tensor([40.0, 60.0, 80.0]))
    after, _ = agent(state, obs, z)
    torch.testing.assert_close(after["value"], before["value"], rtol=1e-5, atol=1e-5)
    scale = agent.value_scale()
    assert scale is not None and scale.dtype == torch.float32 and float(scale) > 1.0
    copy = ActorCritic(**args)  # type: ignore[arg-type]
    copy.load_state_dict(agent.state_dict())  # the scale travels with the weights: batchers, checkpoints
    assert torch.equal(copy(state, obs, z)[0]["value"], after["value"])
    assert sum(k.endswith(".mean") for k in agent.state_dict()) == 1  # one normaliser, under critic only


def test_the_entropy_of_masked_logits_counts_them_as_zero() -> None:
    inf = float("inf")
    logits = torch.tensor([[0.0, -inf, 1.0, 2.0], [-inf, -inf, 0.0, 0.0]], requires_grad=True)
    entropy = ActorCritic(obs_dim=2, n_actions=4).entropy(logits)
    assert torch.allclose(entropy, torch.distributions.Categorical(logits=logits).entropy())
    entropy.sum().backward()
    assert logits.grad is not None and bool(torch.isfinite(logits.grad).all())


@pytest.mark.parametrize("reward_dtype", [torch.float16, torch.float64])
def test_advantages_and_vtrace_take_rewards_of_any_float_dtype(reward_dtype: torch.dtype) -> None:
    from rlstruct.learning.on_policy import add_advantages, vtrace_agent_loss

    agent = ActorCritic(obs_dim=4, n_actions=2)
    env_args = {"env": "CartPole-v1", "reward_dtype": reward_dtype}
    with LocalBatcher(
        ActorCritic, {"obs_dim": 4, "n_actions": 2}, GymEnv, env_args, n_envs=2, n_timesteps=4
    ) as batcher:
        batcher.update(agent.state_dict())
        batcher.reset()
        batcher.execute()
        batch = batcher.get()
    assert batch.trajectories["next/reward"].dtype == reward_dtype
    add_advantages(agent, batch, 0.99, 0.95)
    assert batch.trajectories["advantage"].dtype == torch.float32
    loss, _ = vtrace_agent_loss(
        agent,
        batch,
        gamma=0.99,
        reward_scale=1.0,
        rho_bar=1.0,
        c_bar=1.0,
        vf_coef=0.5,
        ent_coef=0.0,
        normalize=True,
    )
    assert loss.dtype == torch.float32 and bool(torch.isfinite(loss))


def test_run_memory_refuses_rows_without_steps_and_stacked_memories() -> None:
    gru = torch.nn.GRU(3, 4, batch_first=True)
    no_step = torch.zeros(2, 0, dtype=torch.bool)
    with pytest.raises(ValueError, match=message("run_memory: x must hold at least one step (T >= 1)")):
        run_memory(gru, torch.zeros(2, 0, 3), [torch.zeros(2, 4)], no_step)
    two = torch.nn.GRU(3, 4, num_layers=2, batch_first=True)
    with pytest.raises(ValueError, match=message("run_memory: rnn must be one layer with batch_first=True")):
        run_memory(two, torch.zeros(2, 5, 3), [torch.zeros(2, 4)], torch.zeros(2, 5, dtype=torch.bool))
    both_ways = torch.nn.GRU(3, 4, batch_first=True, bidirectional=True)
    with pytest.raises(
        ValueError, match=message("one direction, got num_layers=1, batch_first=True, bidirectional=True")
    ):
        run_memory(both_ways, torch.zeros(2, 5, 3), [torch.zeros(2, 4)], torch.zeros(2, 5, dtype=torch.bool))
    with pytest.raises(
        TypeError,
        match=message("run_memory: each state must have the dtype of x, torch.float32, got torch.float64"),
    ):
        run_memory(
            gru,
            torch.zeros(2, 5, 3),
            [torch.zeros(2, 4, dtype=torch.float64)],
            torch.zeros(2, 5, dtype=torch.bool),
        )


@pytest.mark.parametrize(
    ("kwargs", "error", "text"),
    [
        (
            {"action_low": -2.0, "action_high": 2.0},
            TypeError,
            "ActorCritic: action_low must be a sequence of floats, one per action dimension ([-2.0] for one), "
            "got a float",
        ),
        (
            {"n_actions": 2, "hidden": (64.5,)},
            TypeError,
            "ActorCritic: hidden must be a sequence of int layer sizes",
        ),
        (
            {"n_actions": 2, "action_low": [-1.0], "action_high": [1.0]},
            ValueError,
            "ActorCritic: give one of n_actions (discrete actions), action_nvec (multi-discrete ones) or "
            "action_low and action_high (continuous ones); got n_actions=2, action_nvec=None",
        ),
    ],
)
def test_actor_critic_names_arguments_that_do_not_fit(
    kwargs: dict[str, object], error: type[Exception], text: str
) -> None:
    with pytest.raises(error, match=message(text)):
        ActorCritic(obs_dim=4, **kwargs)  # type: ignore[arg-type]


def test_greedy_must_be_bool_per_row() -> None:
    agent = ActorCritic(obs_dim=4, n_actions=2)
    observation = DictTensor({"observation": torch.zeros(2, 4)})
    z = DictTensor({"greedy": torch.tensor([0, 1])})  # an int would select rows by index
    with pytest.raises(
        TypeError, match=message("ActorCritic: agent_info['greedy'] must be bool per row, got a tensor")
    ):
        agent(agent.initial_state(z, 2), observation, z)


def test_bounds_may_be_numpy_arrays_as_gymnasium_gives_them() -> None:
    agent = ActorCritic(obs_dim=4, action_low=np.array([-2.0]), action_high=np.array([2.0]))
    assert agent.high.tolist() == [2.0]


def test_the_q_network_and_the_sac_actor_want_greedy_bool_too() -> None:
    from rlstruct.learning.q_learning import QNetwork
    from rlstruct.learning.soft_actor_critic import SquashedGaussianActor

    observation = DictTensor({"observation": torch.zeros(2, 4)})
    z = DictTensor({"greedy": torch.tensor([0, 1])})
    q = QNetwork(obs_dim=4, n_actions=np.int64(2))  # gymnasium's Discrete(2).n
    actor = SquashedGaussianActor(obs_dim=4, action_low=[-1.0], action_high=[1.0])
    for agent in (q, actor):
        with pytest.raises(
            TypeError, match=message(f"{type(agent).__name__}: agent_info['greedy'] must be bool")
        ):
            agent(agent.initial_state(z, 2), observation, z)
