"""Behaviour tests for rlstruct.agent: the Agent defaults, state resets, history lengths and replay_agent.

replay_agent must give back what the agent output during collection, step by
step (stateful and history agents) and flattened (stateless agents), with
gradients; the batches come from LocalBatcher over CounterEnv, whose
observation ``t`` is the step count of the episode.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
import torch
from mp_helpers import HistorySumAgent

from rlstruct import (
    Agent,
    DictTensor,
    LocalBatcher,
    SequenceReplayBuffer,
    TemporalDictTensor,
    Trajectories,
    replay_agent,
)
from rlstruct.agent import history_length, reset_finished_states
from rlstruct.errors import AgentError
from rlstruct.testing import CounterEnv, CountingAgent, RandomAgent


def message(text: str) -> str:
    """A `match` pattern for an exact substring of an error message."""
    return re.escape(text)


def ints(*values: int) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int64)


class LinearAgent(Agent):
    """Stateless: logits = Linear(1, 2)(t), action = argmax. Weights are exact binary fractions."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(1, 2)
        with torch.no_grad():
            self.linear.weight.copy_(torch.tensor([[0.5], [-0.25]]))
            self.linear.bias.copy_(torch.tensor([-1.0, 0.0]))

    def forward(
        self,
        state: DictTensor,
        observation: DictTensor,
        agent_info: DictTensor,
        history: TemporalDictTensor | None = None,
    ) -> tuple[DictTensor, DictTensor]:
        logits = self.linear(observation["t"].float().unsqueeze(1))
        return DictTensor({"action": logits.argmax(1), "logits": logits}), state


class RunningSumAgent(Agent):
    """Stateful with a parameter: value = total + scale * t, and the new total is that value.

    Over an episode, value at step k is scale * (t_0 + ... + t_k), so d value / d scale is a
    running sum of the observed t.
    """

    def __init__(self) -> None:
        super().__init__()
        self.scale = torch.nn.Parameter(torch.tensor(0.5))

    def initial_state(self, agent_info: DictTensor, n: int) -> DictTensor:
        return DictTensor({"total": torch.zeros(n)})

    def forward(
        self,
        state: DictTensor,
        observation: DictTensor,
        agent_info: DictTensor,
        history: TemporalDictTensor | None = None,
    ) -> tuple[DictTensor, DictTensor]:
        value = state["total"] + self.scale * observation["t"].float()
        action = torch.zeros(observation.n_elems(), dtype=torch.int64)
        return DictTensor({"action": action, "value": value}), DictTensor({"total": value})


class InPlaceAgent(Agent):
    """Counts its steps in its state, updated in place (``add_``) rather than returned anew."""

    def initial_state(self, agent_info: DictTensor, n: int) -> DictTensor:
        return DictTensor({"count": torch.zeros(n, dtype=torch.int64)})

    def forward(
        self,
        state: DictTensor,
        observation: DictTensor,
        agent_info: DictTensor,
        history: TemporalDictTensor | None = None,
    ) -> tuple[DictTensor, DictTensor]:
        output = DictTensor({"action": torch.zeros(observation.n_elems(), dtype=torch.int64)})
        output.set("seen", state["count"].clone())
        state["count"].add_(1)
        return output, state


class KeyCountingAgent(Agent):
    """Outputs how many observation keys it was given (collection and replay must agree)."""

    def initial_state(self, agent_info: DictTensor, n: int) -> DictTensor:
        return DictTensor({"t": torch.zeros(n)})

    def forward(
        self,
        state: DictTensor,
        observation: DictTensor,
        agent_info: DictTensor,
        history: TemporalDictTensor | None = None,
    ) -> tuple[DictTensor, DictTensor]:
        n = observation.n_elems()
        seen = torch.full((n,), len(list(observation.keys())), dtype=torch.int64)
        return DictTensor({"action": torch.zeros(n, dtype=torch.int64), "n_keys": seen}), state


class SequenceAgent(RunningSumAgent):
    """A RunningSumAgent that replays a whole batch in one forward_sequence call."""

    calls = 0

    def forward_sequence(
        self,
        state: DictTensor,
        observation: TemporalDictTensor,
        agent_info: DictTensor,
        history: TemporalDictTensor | None = None,
    ) -> TemporalDictTensor | None:
        SequenceAgent.calls += 1
        total, values = state["total"], []
        for t in range(observation.n_timesteps()):  # the running sum, restarted where an episode starts
            total = torch.where(observation["initial_state"][:, t], 0.0, total)
            total = total + self.scale * observation["t"][:, t].float()
            values.append(total)
        return TemporalDictTensor({"value": torch.stack(values, 1)}, observation.lengths)


def collect(
    agent: Any, agent_args: dict[str, Any] | None = None, n_batches: int = 2, **kwargs: Any
) -> list[Trajectories]:
    """``n_batches`` successive batches from a LocalBatcher over CounterEnv."""
    z = kwargs.pop("agent_info", None)
    w = kwargs.pop("env_info", None)
    env_args = {"length": kwargs.pop("length", 3)}
    kwargs.setdefault("n_envs", 2)
    kwargs.setdefault("n_timesteps", 4)
    kwargs.setdefault("weights", agent(**(agent_args or {})).state_dict())  # a learner's, as a user would
    batches = []
    with LocalBatcher(agent, agent_args or {}, CounterEnv, env_args, **kwargs) as batcher:
        batcher.reset(z, w)
        for _ in range(n_batches):
            batcher.execute()
            batch = batcher.get()
            assert batch is not None
            batches.append(batch)
    return batches


# ---------------------------------------------------------------------------- Agent defaults


def test_agent_defaults_are_stateless_without_history() -> None:
    agent = RandomAgent(3)
    state = agent.initial_state(DictTensor(batch_size=4), 4)
    assert state.empty() and state.n_elems() == 4
    assert agent.require_history() is False
    assert history_length(agent) is None
    agent.close()
    agent.close()


def test_seed_makes_the_agent_generator_reproducible_and_independent_of_the_global_one() -> None:
    obs = DictTensor({"t": torch.zeros(8, dtype=torch.int64)})
    z = DictTensor(batch_size=8)

    def actions(seed: int) -> torch.Tensor:
        agent = RandomAgent(5)
        agent.seed(seed)
        torch.manual_seed(seed + 1000)  # the global generator must not matter
        output: DictTensor = agent(agent.initial_state(z, 8), obs, z)[0]
        return output["action"]

    assert actions(1).equal(actions(1))
    assert not actions(1).equal(actions(2))


def test_seed_takes_a_numpy_int_and_refuses_what_is_not_an_int() -> None:
    numpy = pytest.importorskip("numpy")
    agent = RandomAgent(5)
    agent.seed(numpy.int64(7))
    assert agent.generator.initial_seed() == 7
    for bad, received in ((1.5, "a float"), ("7", "a str"), (True, "a bool")):
        with pytest.raises(
            TypeError, match=message(f"RandomAgent.seed: seed must be an int, got {received}")
        ):
            agent.seed(bad)


def test_agent_without_forward_cannot_be_made() -> None:
    class NoForward(Agent):
        pass

    with pytest.raises(TypeError, match="abstract"):
        NoForward()  # type: ignore[abstract]


# ---------------------------------------------------------------------------- state resets and history


def test_reset_finished_states_replaces_only_the_rows_that_start_an_episode() -> None:
    agent = CountingAgent()
    z = DictTensor({"start": ints(100, 200, 300)})
    state = DictTensor({"count": ints(5, 6, 7)})
    obs = DictTensor({"initial_state": torch.tensor([False, True, False])})
    assert reset_finished_states(agent, state, obs, z)["count"].tolist() == [5, 200, 7]
    assert state["count"].tolist() == [5, 6, 7]  # not in place
    none = DictTensor({"initial_state": torch.zeros(3, dtype=torch.bool)})
    assert reset_finished_states(agent, state, none, z) is state
    stateless = DictTensor(batch_size=3)
    assert reset_finished_states(RandomAgent(), stateless, obs, z) is stateless


@pytest.mark.parametrize(("wanted", "expected"), [(False, None), (True, -1), (1, 1), (7, 7)])
def test_history_length_maps_require_history(wanted: bool | int, expected: int | None) -> None:
    assert history_length(CountingAgent(history=wanted)) == expected


def test_history_length_takes_a_numpy_int_as_an_int() -> None:
    wanted = history_length(CountingAgent(history=pytest.importorskip("numpy").int64(3)))
    assert wanted == 3 and type(wanted) is int


@pytest.mark.parametrize("bad", [0, -3, 2.0, "2", None])
def test_history_length_rejects_other_values(bad: Any) -> None:
    with pytest.raises(
        ValueError,
        match=message(f"CountingAgent.require_history() must return a bool or a positive int, got {bad!r}"),
    ):
        history_length(CountingAgent(history=bad))


# ---------------------------------------------------------------------------- replay_agent: step by step


def test_replay_of_a_stateful_agent_matches_collection_across_calls_and_episodes() -> None:
    z = DictTensor({"start": ints(10, 20, 30, 40)})
    batches = collect(CountingAgent, agent_info=z, n_envs=2, n_processes=2, n_timesteps=4, length=3)
    # the second batch starts mid-episode: replay must start from agent_state/, not initial_state
    assert batches[1].info["agent_state/count"].tolist() == [11, 21, 31, 41]
    for batch in batches:
        replayed = replay_agent(CountingAgent(), batch)
        assert replayed.lengths.equal(batch.lengths)
        assert replayed["count"].equal(batch.trajectories["count"])
        assert replayed["action"].equal(batch.trajectories["action"])
    assert batches[1].trajectories["count"][0].tolist() == [11, 12, 10, 11]


@pytest.mark.parametrize("history", [1, 2, True])
def test_replay_gives_history_agents_the_same_history_as_collection(history: bool | int) -> None:
    batches = collect(CountingAgent, {"history": history}, n_timesteps=5)
    for batch in batches:
        replayed = replay_agent(CountingAgent(history=history), batch)
        assert replayed["history_length"].equal(batch.trajectories["history_length"])
        assert replayed["count"].equal(batch.trajectories["count"])


@pytest.mark.parametrize("history", [2, True])
def test_replay_refuses_steps_stored_without_the_outputs_a_history_agent_saw(history: bool | int) -> None:
    """Windows hold the agent's outputs; steps kept without them would give other windows (or none)."""
    (batch,) = collect(CountingAgent, {"history": history}, n_batches=1, n_timesteps=5)
    buffer = SequenceReplayBuffer(4)
    steps = batch.trajectories
    observed = [k for k in steps if k.startswith("next/") or f"next/{k}" in steps]
    buffer.add(batch, keys=observed)  # what replay.md advises for an agent without a history
    with pytest.raises(ValueError, match="replay_agent: ") as caught:
        replay_agent(CountingAgent(history=history), buffer.sample(2).batch)
    if history is True:  # no window before step 0 to compare: the outputs are found missing at step 0
        assert (
            "CountingAgent outputs ['action', 'count', 'history_length'], which its history windows"
            in str(caught.value)
        )
    buffer = SequenceReplayBuffer(4)
    buffer.add(batch)  # every key: the same outputs as collection
    sample = buffer.sample(2)
    replayed = replay_agent(CountingAgent(history=history), sample.batch)
    assert replayed["count"].equal(sample.batch.trajectories["count"])


def test_replay_gives_history_agents_the_stored_observations() -> None:
    batches = collect(HistorySumAgent, n_envs=1, n_timesteps=5, length=10)
    # t = 5..9, the last 2 steps of the episode summed; the window carries over from t = 3, 4: 3 + 4 = 7
    assert batches[1].trajectories["seen"][0].tolist() == [7, 9, 11, 13, 15]
    for batch in batches:
        assert replay_agent(HistorySumAgent(), batch)["seen"].equal(batch.trajectories["seen"])


def test_replay_of_episodes_matches_collection_on_the_real_steps() -> None:
    z = DictTensor({"start": ints(100, 200)})
    w = DictTensor({"length": ints(2, 9)})
    (batch,) = collect(CountingAgent, n_batches=1, agent_info=z, env_info=w, mode="episodes", n_timesteps=4)
    assert batch.lengths.tolist() == [2, 4]
    replayed = replay_agent(CountingAgent(), batch)
    mask = batch.trajectories.mask()
    assert replayed["count"][mask].equal(batch.trajectories["count"][mask])
    assert replayed["count"][0, :2].tolist() == [100, 101]


def test_replay_of_a_stateful_agent_has_gradients() -> None:
    (batch,) = collect(RunningSumAgent, n_batches=1, n_timesteps=4, length=3)
    assert batch.trajectories["t"][0].tolist() == [0, 1, 2, 0]
    assert batch.trajectories["value"][0].tolist() == [0.0, 0.5, 1.5, 0.0]
    learner = RunningSumAgent()
    replayed = replay_agent(learner, batch)
    assert replayed["value"].requires_grad
    assert replayed["value"].detach().equal(batch.trajectories["value"])
    replayed["value"].masked_select(batch.trajectories.mask()).sum().backward()
    assert learner.scale.grad is not None
    # d value / d scale = running sums of t in each episode: 0, 1, 3, 0 per row, two rows
    assert learner.scale.grad.item() == 8.0


# ---------------------------------------------------------------------------- replay_agent: flattened


def test_replay_of_a_stateless_agent_matches_collection_flattened_and_step_by_step() -> None:
    batches = collect(LinearAgent, n_envs=3, n_timesteps=4, length=3)
    for batch in batches:
        flat = replay_agent(LinearAgent(), batch)
        stepwise = replay_agent(LinearAgent(), batch, stateless=False)
        for replayed in (flat, stepwise):
            assert replayed.lengths.equal(batch.lengths)
            assert replayed["action"].equal(batch.trajectories["action"])
            assert replayed["logits"].detach().equal(batch.trajectories["logits"])
    # t = 0 1 2 0 | 1 2 0 1: logit 0 (0.5 t - 1) beats logit 1 (-0.25 t) only at t = 2
    assert batches[0].trajectories["action"][0].tolist() == [1, 1, 0, 1]


def test_replay_of_a_stateless_agent_has_gradients() -> None:
    (batch,) = collect(LinearAgent, n_batches=1, n_envs=2, n_timesteps=4, length=3)
    learner = LinearAgent()
    replayed = replay_agent(learner, batch, stateless=True)
    assert replayed["logits"].requires_grad
    replayed["logits"][..., 0].masked_select(batch.trajectories.mask()).sum().backward()
    assert learner.linear.weight.grad is not None and learner.linear.bias.grad is not None
    # d sum(logit 0) / d w0 = sum of t over the 8 steps (0 1 2 0 in both rows), / d b0 = 8 steps
    assert learner.linear.weight.grad[:, 0].tolist() == [6.0, 0.0]
    assert learner.linear.bias.grad.tolist() == [8.0, 0.0]


def test_replay_leaves_the_batch_unchanged() -> None:
    (batch,) = collect(CountingAgent, n_batches=1)
    kept = batch.clone()
    replay_agent(CountingAgent(), batch)
    assert batch.equal(kept)


def test_replay_of_an_agent_updating_its_state_in_place_matches_collection_and_keeps_the_batch() -> None:
    batches = collect(InPlaceAgent, n_envs=1, n_timesteps=3, length=100)
    assert batches[1].info["agent_state/count"].tolist() == [3]
    assert batches[1].trajectories["seen"][0].tolist() == [3, 4, 5]
    kept = batches[1].clone()
    for _ in range(2):  # several epochs over one batch
        assert replay_agent(InPlaceAgent(), batches[1])["seen"].equal(kept.trajectories["seen"])
    assert batches[1].equal(kept)


# ---------------------------------------------------------------------------- replay_agent: errors


def test_stateless_replay_of_a_stateful_or_history_agent_raises() -> None:
    (batch,) = collect(CountingAgent, n_batches=1)
    with pytest.raises(
        ValueError,
        match=message(
            "replay_agent: stateless=True needs an agent without state and history, got state keys ['count'] "
            "and require_history() = False"
        ),
    ):
        replay_agent(CountingAgent(), batch, stateless=True)
    (batch,) = collect(HistorySumAgent, n_batches=1)
    with pytest.raises(ValueError, match=message("got state keys [] and require_history() = 2")):
        replay_agent(HistorySumAgent(), batch, stateless=True)


def test_replay_of_trajectories_without_steps_raises() -> None:
    info = DictTensor({"agent_state/count": ints(0, 0)})
    steps = TemporalDictTensor({"t": torch.zeros(2, 0, dtype=torch.int64)})
    with pytest.raises(ValueError, match=message("replay_agent: the trajectories have no time steps")):
        replay_agent(CountingAgent(), Trajectories(info, steps))


def test_replay_of_a_stateful_agent_over_steps_without_initial_state_raises() -> None:
    info = DictTensor({"agent_state/count": ints(0, 0)})
    t = torch.zeros(2, 3, dtype=torch.int64)
    for steps in (
        TemporalDictTensor({"t": t, "next/t": t}),
        TemporalDictTensor({"t": t, "next/t": t, "initial_state": torch.zeros(2, 3, dtype=torch.bool)}),
    ):
        with pytest.raises(
            ValueError,
            match=message(
                "replay_agent: CountingAgent has a state or a history, which restart where an episode "
                "begins, but the steps hold no observed 'initial_state'"
            ),
        ):
            replay_agent(CountingAgent(), Trajectories(info, steps))


def test_replay_with_a_bad_require_history_raises() -> None:
    (batch,) = collect(CountingAgent, n_batches=1)
    with pytest.raises(
        ValueError, match=message("CountingAgent.require_history() must return a bool or a positive int")
    ):
        replay_agent(CountingAgent(history=0), batch)


def test_replay_shows_the_agent_the_observation_keys_it_saw_not_its_outputs() -> None:
    (batch,) = collect(KeyCountingAgent, n_batches=1)
    assert "n_keys" in batch.trajectories  # stored next to the observation...
    replayed = replay_agent(KeyCountingAgent(), batch)
    assert replayed["n_keys"].equal(batch.trajectories["n_keys"])  # ...but not shown to the agent again


def test_replay_uses_forward_sequence_when_the_agent_defines_it() -> None:
    batches = collect(SequenceAgent, n_batches=2)  # the second starts from a carried state
    before = SequenceAgent.calls
    replayed = replay_agent(SequenceAgent(), batches[1])
    assert SequenceAgent.calls == before + 1
    assert list(replayed.keys()) == ["value"]  # what forward_sequence returned: no step loop
    assert torch.allclose(replayed["value"], batches[1].trajectories["value"])


class BadSequenceAgent(RunningSumAgent):
    def forward_sequence(
        self,
        state: DictTensor,
        observation: TemporalDictTensor,
        agent_info: DictTensor,
        history: TemporalDictTensor | None = None,
    ) -> TemporalDictTensor | None:
        return TemporalDictTensor({"x": torch.zeros(observation.n_elems(), 1)})


def test_replay_refuses_a_forward_sequence_of_another_shape() -> None:
    (batch,) = collect(BadSequenceAgent, n_batches=1)
    with pytest.raises(
        TypeError,
        match=re.escape(
            "BadSequenceAgent.forward_sequence must return None or a TemporalDictTensor [2, 4, ...], got"
        ),
    ):
        replay_agent(BadSequenceAgent(), batch)


class WideSequenceAgent(SequenceAgent):
    """Replays a 'value' of one more column than forward gives it at collection."""

    def forward_sequence(
        self,
        state: DictTensor,
        observation: TemporalDictTensor,
        agent_info: DictTensor,
        history: TemporalDictTensor | None = None,
    ) -> TemporalDictTensor | None:
        replayed = super().forward_sequence(state, observation, agent_info, history)
        assert replayed is not None
        return TemporalDictTensor({"value": replayed["value"].unsqueeze(-1)}, observation.lengths)


def test_replay_refuses_a_forward_sequence_output_of_another_shape_than_forward_s() -> None:
    (batch,) = collect(WideSequenceAgent, n_batches=1)
    with pytest.raises(
        AgentError,
        match=re.escape(
            "WideSequenceAgent.forward_sequence: its output 'value' has shape [2, 4, 1], but the steps "
            "hold it from forward with shape [2, 4]"
        ),
    ):
        replay_agent(WideSequenceAgent(), batch)


class PredictingSequenceAgent(SequenceAgent):
    """Replays, beside its value, a prediction named as an environment key, of its own shape."""

    def forward_sequence(
        self,
        state: DictTensor,
        observation: TemporalDictTensor,
        agent_info: DictTensor,
        history: TemporalDictTensor | None = None,
    ) -> TemporalDictTensor | None:
        replayed = super().forward_sequence(state, observation, agent_info, history)
        assert replayed is not None
        predicted = observation["reward"].unsqueeze(-1).float()  # [B, T, 1]: not the steps' [B, T]
        return TemporalDictTensor({"value": replayed["value"], "reward": predicted}, observation.lengths)


def test_replay_takes_a_prediction_named_as_an_environment_key_in_its_own_shape() -> None:
    (batch,) = collect(PredictingSequenceAgent, n_batches=1)
    replayed = replay_agent(PredictingSequenceAgent(), batch)
    assert replayed["reward"].shape == (*batch.trajectories["reward"].shape, 1)


@pytest.mark.parametrize(
    ("agent", "batch", "stateless", "expected"),
    [
        (object(), "batch", None, "replay_agent: agent must be an Agent, got an object"),
        (
            "agent",
            "steps",
            None,
            "replay_agent: batch must be Trajectories (what a batcher's get() returns, "
            "the whole batch, not batch.trajectories), got a TemporalDictTensor",
        ),
        (
            "agent",
            "dict",
            None,
            "replay_agent: batch must be Trajectories (what a batcher's get() returns), got a dict",
        ),
        ("agent", "batch", "yes", "replay_agent: stateless must be True, False or None, got a str"),
    ],
)
def test_replay_refuses_arguments_of_the_wrong_type(
    agent: Any, batch: str, stateless: Any, expected: str
) -> None:
    (collected,) = collect(LinearAgent, n_batches=1)
    arguments = {"agent": LinearAgent(), "batch": collected, "steps": collected.trajectories, "dict": {}}
    with pytest.raises(TypeError, match=message(expected)):
        replay_agent(arguments.get(agent, agent), arguments[batch], stateless=stateless)
