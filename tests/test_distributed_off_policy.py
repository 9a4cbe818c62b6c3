"""Off-policy schemes: the replay storages, SAC's maths for a scheme, and SAC in schemes in process and on Ray."""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
import torch
from algo_helpers import message

from rlstruct import DictTensor, GymEnv, PrioritizedReplayBuffer, TemporalDictTensor
from rlstruct.algos.evaluation import env_spaces
from rlstruct.distributed import (
    DQN,
    PPO,
    SAC,
    Collection,
    Gradients,
    HindsightStorage,
    Learner,
    MinibatchBuffer,
    PrioritizedStorage,
    ReplayStorage,
    Scheme,
    Updates,
)
from rlstruct.distributed.off_policy import INDEX, WEIGHT, SACModules
from rlstruct.envs import bitflip_reward
from rlstruct.errors import AgentError
from rlstruct.learning.actor_critic import ActorCritic
from rlstruct.learning.q_learning import QNetwork
from rlstruct.learning.recurrent_sac import RecurrentSquashedGaussianActor
from rlstruct.learning.soft_actor_critic import SquashedGaussianActor, soft_td_target

TESTS = Path(__file__).resolve().parent
ACTOR_ARGS = {"obs_dim": 3, "action_low": [-2.0], "action_high": [2.0], "hidden": (16, 16)}
PENDULUM = {"env": "Pendulum-v1"}


def sac_scheme(seed: int = 0, **options: Any) -> Scheme:
    """SAC on Pendulum-v1, 2 environments x 16 steps a round, learning from the 64th step on."""
    return Scheme(
        SquashedGaussianActor,
        ACTOR_ARGS,
        GymEnv,
        PENDULUM,
        functools.partial(SAC, hidden=(16, 16)),
        functools.partial(ReplayStorage, 10_000, batch_size=32, gradient_steps=0.25, learning_starts=64),
        seed=seed,
        **{"collection": Collection(n_envs=2, n_steps=16, worker_cpus=0.2), "timeout": 60.0, **options},
    )


def run(scheme: Scheme, target: int) -> tuple[dict[str, torch.Tensor], Learner]:
    with Learner(scheme, target_steps=target, progress=False) as learner:
        while not learner.done():
            learner.step()
        return scheme.weights(), learner


# The storages.


def steps(n_rows: int, length: int, start: float = 0.0) -> TemporalDictTensor:
    x = torch.arange(n_rows * length, dtype=torch.float32).view(n_rows, length) + start
    return TemporalDictTensor({"x": x}, torch.full((n_rows,), length))


def test_a_replay_storage_owes_gradient_steps_by_its_ratio_once_past_learning_starts() -> None:
    storage = ReplayStorage(100, batch_size=3, gradient_steps=0.3, learning_starts=8, seed=0)
    storage.insert(steps(1, 5))
    assert list(storage.minibatches()) == [] and len(storage) == 0  # 5 steps held, fewer than 8
    storage.insert(steps(1, 5, 5.0))  # 10 held: 5 x 0.3 owed
    served = list(storage.minibatches())
    assert len(served) == 1 and served[0]["x"].shape == (3,)
    assert storage.owed == pytest.approx(0.5)  # the fraction carries over
    storage.insert(steps(2, 5, 10.0))  # 10 more: 3.5 owed
    assert len(storage) == 3 and len(list(storage.minibatches())) == 3
    assert storage.replay is not None and len(storage.replay) == 20  # nothing replaced


def test_the_storages_check_their_arguments() -> None:
    with pytest.raises(ValueError, match="ReplayStorage: gradient_steps must be"):
        ReplayStorage(gradient_steps=0.0)
    with pytest.raises(ValueError, match="ReplayStorage: capacity must be at least 1, got 0"):
        ReplayStorage(0)
    with pytest.raises(
        TypeError,
        match=message(
            "ReplayStorage.insert: data must be a TemporalDictTensor, got a DictTensor: a replay stores what the "
            "off-policy algorithms (SAC, DQN) prepare; PPO and IMPALA take MinibatchBuffer or WholeBatchBuffer"
        ),
    ):
        ReplayStorage().insert(DictTensor({"x": torch.zeros(2)}))  # what PPO prepares
    with pytest.raises(TypeError, match="HindsightStorage: reward_fn must be callable, got a NoneType"):
        HindsightStorage(None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="strategy must be 'future' or 'final', got 'all'"):
        HindsightStorage(reached, 10, strategy="all")


def test_a_prioritized_storage_draws_by_the_priorities_its_algorithm_gives_back() -> None:
    storage = PrioritizedStorage(
        100, alpha=1.0, beta=0.5, beta_steps=20, batch_size=4, learning_starts=0, seed=0
    )
    storage.insert(steps(1, 10))  # 10 steps: 10 minibatches owed, beta half-way to 1
    assert storage.current_beta() == pytest.approx(0.75)
    minibatches = storage.minibatches()
    first = next(minibatches)
    assert first[INDEX].dtype == torch.int64 and first[WEIGHT].shape == (4,)
    assert torch.equal(first["x"], first[INDEX].float())  # slot i holds step i
    with pytest.raises(
        ValueError, match=r"PrioritizedStorage: the last minibatch's priorities never came back"
    ):
        next(minibatches)
    storage.update_priorities(torch.arange(10), torch.tensor([0.0] * 9 + [1.0]))
    drawn = torch.cat([m["x"] for m in _given_back(storage)])
    assert bool((drawn == 9).all())  # all the priority is on step 9 (alpha 1, eps 1e-6)
    storage.insert(steps(1, 20, 10.0))
    assert storage.current_beta() == 1.0


def _given_back(storage: PrioritizedStorage) -> Iterator[DictTensor]:
    """The storage's owed minibatches, each giving back priority 1 to step 9 and 0 to the others."""
    for minibatch in storage.minibatches():
        yield minibatch
        storage.update_priorities(minibatch[INDEX], (minibatch["x"] == 9).float())


@pytest.mark.parametrize(
    ("options", "text"),
    [
        ({"alpha": -1.0}, "PrioritizedStorage: alpha must be"),
        ({"beta": 1.5}, "PrioritizedStorage: beta must be"),
        ({"beta_steps": 0}, "PrioritizedStorage: beta_steps must be at least 1, got 0"),
    ],
)
def test_a_prioritized_storage_checks_its_exponents(options: dict[str, Any], text: str) -> None:
    with pytest.raises(ValueError, match=text):
        PrioritizedStorage(**options)


def reached(achieved: torch.Tensor, desired: torch.Tensor) -> torch.Tensor:
    return (achieved == desired).all(1).float()


def test_a_hindsight_storage_serves_relabelled_goals_with_their_rewards() -> None:
    storage = HindsightStorage(
        reached, 100, k=4, batch_size=500, gradient_steps=1.0, learning_starts=0, seed=0
    )
    at = torch.arange(5.0).view(1, 5, 1)  # one episode of 5 steps on a line, goal 9
    storage.insert(
        TemporalDictTensor(
            {
                "achieved_goal": at,
                "desired_goal": torch.full((1, 5, 1), 9.0),
                "next/achieved_goal": at + 1,
                "next/desired_goal": torch.full((1, 5, 1), 9.0),
                "next/reward": torch.zeros(1, 5),
                "next/done": torch.arange(5).view(1, 5) == 4,
            }
        )
    )
    batch = next(iter(storage.minibatches()))
    relabelled = batch["desired_goal"][:, 0] != 9
    assert 0.7 < float(relabelled.float().mean()) < 0.9
    expected = reached(batch["next/achieved_goal"], batch["desired_goal"])
    assert torch.equal(batch["next/reward"], expected)


# SAC's maths.


def transitions(n: int = 8, seed: int = 0) -> DictTensor:
    g = torch.Generator().manual_seed(seed)
    return DictTensor(
        {
            "observation": torch.randn(n, 3, generator=g),
            "next/observation": torch.randn(n, 3, generator=g),
            "unit_action": torch.rand(n, 1, generator=g) * 2 - 1,
            "next/reward": torch.randn(n, generator=g),
            "next/terminated": torch.rand(n, generator=g) < 0.2,
        }
    )


def sac() -> SAC:
    torch.manual_seed(0)
    return SAC(SquashedGaussianActor(**ACTOR_ARGS), hidden=(16, 16), tau=0.1)


def test_the_loss_gives_each_part_the_gradient_of_its_own_loss() -> None:
    algorithm, data = sac(), transitions()
    t = algorithm.trained
    state = algorithm.generator.get_state()
    loss, stats = algorithm.loss(data)
    loss.backward()
    combined = {name: p.grad.clone() for name, p in t.named_parameters() if p.grad is not None}
    assert set(combined) == {name for name, _ in t.named_parameters()}  # actor, critics and alpha

    # The critics' gradient is that of their own loss alone (the actor's loss reaches the action only).
    t.zero_grad(set_to_none=True)
    algorithm.generator.set_state(state)
    obs, reached_obs = {"observation": data["observation"]}, {"observation": data["next/observation"]}
    alpha = t.log_alpha.detach().exp()
    with torch.no_grad():
        next_action, next_log_prob = algorithm.policy.sample(reached_obs, algorithm.generator)
        y = soft_td_target(
            data["next/reward"],
            data["next/terminated"],
            t.target(reached_obs, next_action),
            next_log_prob,
            alpha,
            0.99,
        )
    critic_loss = 0.5 * (t.critic(obs, data["unit_action"]) - y).pow(2).mean(1).sum()
    critic_loss.backward()
    for name, p in t.critic.named_parameters():
        torch.testing.assert_close(combined[f"critic.{name}"], p.grad)
    assert stats["critic_loss"] == pytest.approx(float(critic_loss.detach()))

    # The actor's and the temperature's are those of theirs.
    t.zero_grad(set_to_none=True)
    action, log_prob = algorithm.policy.sample(obs, algorithm.generator)
    q_pi = t.critic(obs, action).min(0).values
    ((alpha * log_prob - q_pi).mean() - t.log_alpha * (log_prob.detach().mean() - 1.0)).backward()
    for name, p in t.actor.named_parameters():
        torch.testing.assert_close(combined[f"actor.{name}"], p.grad)
    torch.testing.assert_close(combined["log_alpha"], t.log_alpha.grad)


def test_the_target_critics_are_buffers_moved_after_each_update() -> None:
    algorithm = sac()
    t: SACModules = algorithm.trained
    params = {name for name, _ in t.named_parameters()}
    assert not any(name.startswith("target.") for name in params)
    names = [name for name, _ in t.critic.named_parameters()]
    assert {f"target.{name}" for name in names} <= set(t.state_dict())
    with torch.no_grad():
        for p in t.critic.parameters():
            p.add_(1.0)
    before = [t.target.get_buffer(name).clone() for name in names]
    algorithm.after_update()
    for old, name, p in zip(before, names, t.critic.parameters(), strict=True):
        torch.testing.assert_close(t.target.get_buffer(name), old + 0.1 * (p - old))


def test_dqn_refuses_a_bool_for_a_number_and_anything_else_for_a_flag() -> None:
    """Before, DQN(epsilon=True) explored at 1.0 and DQN(double="no") was double."""
    q = QNetwork(obs_dim=3, n_actions=2, hidden=(16,))
    with pytest.raises(TypeError, match=message("DQN: epsilon must be a float, got a bool")):
        DQN(q, epsilon=True)
    with pytest.raises(TypeError, match=message("DQN: double must be a bool, got a str")):
        DQN(q, double="no")  # type: ignore[arg-type]
    assert DQN(q, double=False, tau=1).double is False


def test_an_agent_sac_cannot_train_is_refused_by_name() -> None:
    from own_agents import MlpAgent

    with pytest.raises(TypeError, match="SAC cannot train MlpAgent: it lacks sample"):
        SAC(MlpAgent(obs_dim=3, n_actions=2))
    memory = RecurrentSquashedGaussianActor(obs_dim=3, action_low=[-1.0], action_high=[1.0], hidden=(8,))
    with pytest.raises(
        AgentError,
        match=r"SAC in a scheme cannot train RecurrentSquashedGaussianActor: it keeps a state \['h'\]",
    ):
        SAC(memory)


@pytest.mark.parametrize(
    ("options", "error", "text"),
    [
        ({"max_grad_norm": -1.0}, ValueError, "SAC: max_grad_norm must be in (0, inf), got -1.0"),
        ({"target_entropy": math.nan}, ValueError, "SAC: target_entropy must be"),
        ({"critics": lambda: 3}, TypeError, "SAC: critics() must return a torch.nn.Module, got an int"),
        ({"tau": 1.5}, ValueError, "SAC: tau must be in [0, 1], got 1.5"),
        ({"lr": True}, TypeError, "SAC: lr must be a float, got a bool"),  # was taken as 1.0
    ],
)
def test_the_schemes_sac_checks_its_arguments(options: dict[str, Any], error: type, text: str) -> None:
    with pytest.raises(error, match=message(text)):
        SAC(SquashedGaussianActor(**ACTOR_ARGS), **options)


class Empty:
    """A buffer that never serves a minibatch and is not filling."""

    def insert(self, data: Any) -> None:
        pass

    def minibatches(self) -> Iterator[Any]:
        return iter(())


def test_a_buffer_that_never_serves_is_an_error_not_a_hang() -> None:
    scheme = Scheme(
        SquashedGaussianActor,
        ACTOR_ARGS,
        GymEnv,
        PENDULUM,
        SAC,
        Empty,
        collection=Collection(n_envs=1, n_steps=4),
    )
    with (
        scheme,
        pytest.raises(ValueError, match=r"the buffer \(Empty\) gave no minibatch for a collected batch"),
    ):
        scheme.step()


# SAC in schemes.


def test_an_in_process_sac_scheme_learns_from_its_replay_and_sends_the_actor_alone() -> None:
    scheme = sac_scheme()
    actor_keys = set(SquashedGaussianActor(**ACTOR_ARGS).state_dict())
    assert set(scheme.weights()) == actor_keys
    weights, learner = run(scheme, 256)
    # 32 steps a round; 64 inserted after round 2, then 0.25 x 32 = 8 updates a round for 7 rounds
    assert learner.env_steps == 256 and learner.updates == 7 * 8
    assert scheme.local is not None
    collector = scheme.local.collectors.local
    assert collector is not None and collector.version > 0  # it loaded the actor's weights (strictly)
    assert not all(
        torch.equal(weights[k], v) for k, v in SquashedGaussianActor(**ACTOR_ARGS).state_dict().items()
    )


def trained(scheme: Scheme) -> dict[str, torch.Tensor]:
    """All the scheme trains, as its update worker holds it: the agent, critics and target networks."""
    return {k: v.clone() for k, v in scheme.trained.state_dict().items()}


def test_local_steps_move_the_target_networks_as_one_step_rounds_do_bit_for_bit() -> None:
    one = sac_scheme(seed=2)
    _, one_learner = run(one, 256)
    rounds = sac_scheme(seed=2, gradients=Gradients(local_steps=8))
    _, learner = run(rounds, 256)
    # 8 updates a round from the 3rd round on: one round trip each, against 8
    assert learner.updates == one_learner.updates == 7 * 8 and rounds.version == one.version
    first, second = trained(one), trained(rounds)
    assert any(k.startswith("target.") for k in first)
    assert all(torch.equal(first[k], second[k]) for k in first)


def test_local_steps_count_the_updates_of_dqn_targets_where_they_are_taken() -> None:
    start = trained(dqn_scheme())
    one, rounds = dqn_scheme(), dqn_scheme(gradients=Gradients(local_steps=8))
    run(one, 256)
    run(rounds, 256)
    first, second = trained(one), trained(rounds)
    assert all(torch.equal(first[k], second[k]) for k in first)
    targets = [k for k in first if k.startswith("target.") and k != "target.epsilon"]
    assert not any(torch.equal(second[k], start[k]) for k in targets)  # copied every 4th update


class MovingPPO(PPO):
    """PPO with an ``after_update`` that moves nothing the scheme can name."""

    def after_update(self) -> None:
        self.moved = True


def test_local_steps_are_refused_for_an_after_update_without_a_target_network() -> None:
    with pytest.raises(
        ValueError,
        match=r"local_steps > 1 carries the parameters and the target networks \(trained.target, a frozen_copy\)"
        r".*MovingPPO has an after_update\(\) but no trained.target made by frozen_copy; got "
        r"gradients.local_steps=4",
    ):
        Scheme(
            ActorCritic,
            {"obs_dim": 4, "n_actions": 2},
            GymEnv,
            {"env": "CartPole-v1"},
            MovingPPO,
            functools.partial(MinibatchBuffer, n_epochs=1, minibatch_size=32),
            collection=Collection(n_envs=2, n_steps=16),
            gradients=Gradients(local_steps=4),
        )


def dqn_scheme(
    env: str = "CartPole-v1", storage: Any = None, gradients: Gradients | None = None, **algo: Any
) -> Scheme:
    """DQN on ``env`` from a replay: 2 environments x 16 steps a round, learning from the 64th step on."""
    goals = env.startswith("BitFlip")
    spaces = {"observation_spaces": env_spaces(env).observation} if goals else {}
    args = spaces or {"obs_dim": 4}
    return Scheme(
        QNetwork,
        {**args, "n_actions": 15 if spaces else 2, "hidden": (16, 16)},
        GymEnv,
        {"env": env},
        functools.partial(DQN, target_update_every=4, **algo),
        storage
        or functools.partial(ReplayStorage, 10_000, batch_size=32, gradient_steps=0.25, learning_starts=64),
        collection=Collection(n_envs=2, n_steps=16),
        gradients=gradients or Gradients(),
    )


def test_an_in_process_dqn_scheme_moves_its_target_every_few_updates_and_sets_epsilon_everywhere() -> None:
    scheme = dqn_scheme(epsilon=0.5)
    names = [name for name, _ in scheme.model.named_parameters()]
    target = scheme.trained.target
    assert set(scheme.weights()) == set(QNetwork(obs_dim=4, n_actions=2, hidden=(16, 16)).state_dict())
    with Learner(scheme, target_steps=10**6, progress=False) as learner:
        while learner.updates < 3:
            learner.step()
        assert all(
            torch.equal(target.get_buffer(n), p) is False
            for n, p in zip(names, scheme.model.parameters(), strict=True)
        )
        learner.step()  # the 4th update: the target becomes a copy (tau 1)
        assert all(
            torch.equal(target.get_buffer(n), p)
            for n, p in zip(names, scheme.model.parameters(), strict=True)
        )
        learner.update_algorithm_parameter("epsilon", 0.25)
        assert (
            scheme.local is not None and float(scheme.local.weights()["epsilon"]) == 0.25
        )  # what collectors get
        while learner.step().env_steps == 0:  # to the next collection, which loads the latest weights first
            pass
        collector = scheme.local.collectors.local
        assert collector is not None and collector.version == scheme.version - 1
    with pytest.raises(ValueError, match=r"DQN.set_parameter: epsilon must be in \[0, 1\], got 2"):
        dqn_scheme().set_parameter("epsilon", 2.0)


def test_sac_and_dqn_weigh_their_losses_and_give_back_priorities() -> None:
    data = transitions()
    weighted = DictTensor({**dict(data.items()), INDEX: torch.arange(8) + 10, WEIGHT: torch.zeros(8)})
    algorithm = sac()
    _, stats = algorithm.loss(weighted)
    assert stats["critic_loss"] == 0.0 and algorithm.priorities is not None
    slots, priorities = algorithm.priorities
    assert (
        torch.equal(slots, torch.arange(8) + 10) and priorities.shape == (8,) and bool((priorities > 0).all())
    )
    torch.manual_seed(0)
    dqn = DQN(QNetwork(obs_dim=3, n_actions=2, hidden=(16,)))
    rows = {"observation", "next/observation", "next/reward", "next/terminated"}
    q_data = DictTensor(
        {**{k: weighted[k] for k in rows}, "action": torch.arange(8) % 2, INDEX: weighted[INDEX]}
    )
    loss, _ = dqn.loss(DictTensor({**dict(q_data.items()), WEIGHT: torch.zeros(8)}))
    assert float(loss.detach()) == 0.0 and dqn.priorities is not None and dqn.priorities[1].shape == (8,)
    dqn.priorities = None
    loss, _ = dqn.loss(q_data)  # no weights: the plain loss
    assert float(loss.detach()) > 0.0


def test_a_dqn_scheme_learns_from_a_prioritized_storage() -> None:
    storage = functools.partial(
        PrioritizedStorage, 10_000, batch_size=32, gradient_steps=0.25, learning_starts=64, beta_steps=256
    )
    scheme = dqn_scheme(storage=storage)
    _, learner = run(scheme, 256)
    assert learner.updates == 7 * 8 and "td_abs" in learner.metrics()
    assert scheme.local is not None and isinstance(scheme.local.buffer, PrioritizedStorage)
    replay = scheme.local.buffer.replay
    assert replay is not None
    stored = cast(PrioritizedReplayBuffer, replay).sum_tree.get(torch.arange(len(replay)))
    assert len(stored.unique()) > 100  # the priorities given back, most rows drawn at least once


def test_a_failed_loss_is_retried_on_its_minibatch_and_its_priorities_still_come_back() -> None:
    storage = functools.partial(
        PrioritizedStorage, 10_000, batch_size=32, gradient_steps=0.25, learning_starts=64
    )
    scheme = dqn_scheme(storage=storage)
    assert scheme.local is not None
    algorithm = scheme.local.algorithm
    loss = algorithm.loss
    with Learner(scheme, target_steps=10**6, progress=False) as learner:
        learner.step()
        algorithm.loss = lambda minibatch: (_ for _ in ()).throw(RuntimeError("interrupted"))  # type: ignore[method-assign]
        with pytest.raises(RuntimeError, match="interrupted"):
            learner.step()
        algorithm.loss = loss  # type: ignore[method-assign]
        learner.step()  # the same minibatch again, not "its priorities never came back"
        assert learner.updates == 2


def test_dqn_counts_its_updates_from_the_version_a_gradient_worker_loads() -> None:
    scheme = dqn_scheme()
    assert scheme.local is not None
    scheme.local.set_weights(scheme.trained.state_dict(), 7)
    algorithm = scheme.local.algorithm
    assert isinstance(algorithm, DQN) and algorithm.updates == 7
    scheme.close()


def test_dqn_relabels_goals_in_a_scheme() -> None:
    storage = functools.partial(
        HindsightStorage, bitflip_reward, 10_000, batch_size=32, gradient_steps=0.25, learning_starts=64
    )
    scheme = dqn_scheme("BitFlip-v0", storage)
    _, learner = run(scheme, 320)
    assert learner.updates > 0
    assert scheme.local is not None and isinstance(scheme.local.buffer, HindsightStorage)
    replay = scheme.local.buffer.replay
    assert replay is not None and len(replay) == 320
    relabelled = replay.sample(2_000).rows
    torch.testing.assert_close(
        relabelled["next/reward"],
        bitflip_reward(relabelled["next/achieved_goal"], relabelled["desired_goal"]),
    )
    assert bool((relabelled["next/reward"] == 0).any())  # goals reached in hindsight


def bitflip_scheme(n_bits: int, hindsight: bool) -> Scheme:
    """DQN on BitFlip-v0 with ``n_bits`` bits from a hindsight storage, or a plain replay."""
    spaces = {
        k: dataclasses.replace(v, shape=(n_bits,)) for k, v in env_spaces("BitFlip-v0").observation.items()
    }
    common: dict[str, Any] = {"batch_size": 64, "gradient_steps": 0.5, "learning_starts": 256}
    storage = (
        functools.partial(HindsightStorage, bitflip_reward, 100_000, **common)
        if hindsight
        else functools.partial(ReplayStorage, 100_000, **common)
    )
    return Scheme(
        QNetwork,
        {"observation_spaces": spaces, "n_actions": n_bits, "hidden": (64, 64)},
        GymEnv,
        {"env": "BitFlip-v0", "n_bits": n_bits},
        functools.partial(DQN, lr=1e-3, gamma=0.9, target_update_every=50, epsilon=0.2),
        storage,
        collection=Collection(n_envs=4, n_steps=2 * n_bits),
    )


@pytest.mark.slow
def test_dqn_with_hindsight_learns_to_flip_bits_in_a_scheme_where_plain_replay_does_not() -> None:
    returns = {}
    for hindsight in (True, False):
        _, learner = run(bitflip_scheme(8, hindsight), 5_000)
        returns[hindsight] = learner.metrics()["episode_return"]  # the last 100 episodes
    # 8 steps an episode, -1 a step until the goal: -8 never reaches it; acting well with
    # epsilon 0.2 gives about -6
    assert returns[True] > -6.8 and returns[False] < -7.6, returns


ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    ray.init(
        address="local",  # a Ray of its own, even where another runs on this machine
        num_cpus=2,
        include_dashboard=False,
        configure_logging=False,
        runtime_env={"env_vars": {"PYTHONPATH": str(TESTS)}},
    )
    yield
    ray.shutdown()


@pytest.mark.slow
@pytest.mark.parametrize("local_steps", [1, 8])
def test_a_remote_gradient_worker_trains_as_the_in_process_scheme_bit_for_bit(
    local_ray: None, local_steps: int
) -> None:
    here = sac_scheme(seed=3)
    run(here, 256)
    remote = sac_scheme(
        seed=3, gradients=Gradients(remote_workers=1, local_steps=local_steps, worker_cpus=0.2)
    )
    run(remote, 256)
    first, second = trained(here), trained(remote)
    assert all(torch.equal(first[k], second[k]) for k in first)


@pytest.mark.slow
def test_two_gradient_workers_take_local_steps_and_share_the_averaged_targets(local_ray: None) -> None:
    start = trained(sac_scheme(seed=4))
    scheme = sac_scheme(seed=4, gradients=Gradients(remote_workers=2, local_steps=4, worker_cpus=0.2))
    with Learner(scheme, target_steps=256, progress=False) as learner:
        while not learner.done():
            learner.step()
        central = trained(scheme)
        copies = ray.get([actor.trained_weights.remote() for actor in scheme.gradient_actors])
    targets = [k for k in central if k.startswith("target.")]
    assert learner.updates > 0 and targets
    assert not any(torch.equal(central[k], start[k]) for k in targets)  # moved on the workers, averaged here
    assert all(torch.equal(copy[k], central[k]) for copy in copies for k in central)  # and sent back to both


@pytest.mark.slow
def test_synchronous_remote_collection_is_reproducible(local_ray: None) -> None:
    options = {"collection": Collection(n_envs=2, n_steps=16, remote_workers=2, worker_cpus=0.2)}
    first, learner = run(sac_scheme(seed=1, **options), 256)
    again, _ = run(sac_scheme(seed=1, **options), 256)
    assert learner.metrics()["policy_lag"] == 0
    assert all(torch.equal(first[k], again[k]) for k in first)


@pytest.mark.slow
def test_decentralised_sac_keeps_the_copies_identical(local_ray: None) -> None:
    scheme = sac_scheme(
        gradients=Gradients(remote_workers=2, worker_cpus=0.2), updates=Updates(execution="decentralised")
    )
    with Learner(scheme, target_steps=512, progress=False) as learner:
        while not learner.done():
            learner.step()
        trained = ray.get([actor.trained_weights.remote() for actor in scheme.gradient_actors])
    assert learner.updates > 0
    assert any(key.startswith("target.") for key in trained[0])  # the target critics, each moved in place
    assert all(torch.equal(trained[0][k], trained[1][k]) for k in trained[0])


@pytest.mark.slow
def test_asynchronous_collection_and_gradients_feed_the_replays(local_ray: None) -> None:
    scheme = sac_scheme(
        collection=Collection(
            n_envs=2, n_steps=16, remote_workers=2, communication="asynchronous", worker_cpus=0.2
        ),
        gradients=Gradients(remote_workers=2, communication="asynchronous", worker_cpus=0.2),
    )
    with Learner(scheme, target_steps=1_024, progress=False) as learner:
        while not learner.done():
            learner.step()
        metrics = learner.metrics()
    assert learner.env_steps >= 1_024 and learner.updates > 0
    assert metrics["lost_workers"] == []
    assert (
        metrics["policy_lag"] >= 0 and metrics["gradient_asynchrony"] > 0
    )  # the other worker's came between
