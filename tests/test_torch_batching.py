"""Batchers driving environments written in torch, on the CPU and (when there is one) on a CUDA device.

On a device, ``LocalBatcher`` runs the agent and the environment there and
writes the trajectories there: every test below runs on the CPU, and again
on CUDA where a GPU is present. The CUDA-only tests check what the CPU
cannot show: no step waits for the device, and a batch crosses to the CPU
when asked.
"""

from __future__ import annotations

import importlib
import math
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from mp_helpers import DeviceAgent, ElsewhereCounterEnv

from rlstruct import (
    Agent,
    DictTensor,
    Environment,
    LocalBatcher,
    MultiprocessBatcher,
    TemporalDictTensor,
    Trajectories,
)
from rlstruct.algos import ppo
from rlstruct.testing import CountingAgent, RandomAgent
from rlstruct.torch_envs import TorchCartPole, make_torch_env

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
DEVICES = ["cpu", pytest.param("cuda", marks=CUDA)]


def local(device: str, mode: str = "fixed", **options: Any) -> LocalBatcher:
    agent = options.pop("agent", {})
    args: dict[str, Any] = {"n_envs": 16, "n_timesteps": 40, "seed": 3} | options
    batcher = LocalBatcher(
        DeviceAgent,
        {"device": device} | agent,
        make_torch_env,
        {"env": "CartPole-v1", "device": device},
        mode=mode,  # type: ignore[arg-type]
        device=device,
        **args,
    )
    batcher.update(DeviceAgent(device).state_dict())
    return batcher


def run(batcher: LocalBatcher, n: int = 3) -> list[Trajectories]:
    batcher.reset()
    batches = []
    for _ in range(n):
        batcher.execute()
        batches.append(batcher.get())
    return batches


def assert_consistent(batch: Trajectories) -> None:
    """Step t + 1 starts where step t arrived, unless an episode ended at t; every reward is 1."""
    steps = batch.trajectories
    done = steps["next/done"][:, :-1]
    same = (steps["next/observation"][:, :-1] == steps["observation"][:, 1:]).all(-1)
    assert bool((same | done).all())
    assert bool(steps["initial_state"][:, 1:][done].all())
    assert bool((steps["next/reward"] == 1).all())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", ["fixed", "episodes"])
def test_the_batch_is_made_where_the_environment_is(device: str, mode: str) -> None:
    with local(device, mode) as batcher:
        batches = run(batcher)
    where = torch.empty(0, device=device).device
    for batch in batches:
        assert batch.trajectories.device == where
        assert all(v.device == where for v in batch.info.values())
        assert all(v.device == where for v in batch.trajectories.values())
        assert batch.trajectories["observation"].dtype == torch.float32
        assert batch.trajectories["action"].dtype == torch.int64
        if mode == "fixed":
            assert_consistent(batch)
        else:  # every row is one episode, whole unless cut at T, zeros past its end
            lengths = batch.lengths
            last = batch.trajectories["next/done"][torch.arange(16, device=where), lengths - 1]
            assert bool((last | (lengths == 40)).all()) and bool((lengths < 40).any())
            past = torch.arange(40, device=where).unsqueeze(0) >= lengths.unsqueeze(1)
            assert bool((batch.trajectories["next/reward"][past] == 0).all())


@pytest.mark.parametrize("device", DEVICES)
def test_the_same_seeds_give_the_same_batches(device: str) -> None:
    with local(device, n_processes=2) as first, local(device, n_processes=2) as second:
        for a, b in zip(run(first), run(second), strict=True):
            for key, value in a.trajectories.items():
                assert torch.equal(value, b.trajectories[key]), key
    with local(device, seed=4) as other, local(device) as reference:
        assert not torch.equal(
            run(other, 1)[0].trajectories["observation"], run(reference, 1)[0].trajectories["observation"]
        )


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layout", ["full", "compact"])
def test_recurrent_and_history_agents_run_where_the_environment_is(device: str, layout: str) -> None:
    agent = {"recurrent": True, "history": 3}
    with local(device, layout=layout, agent=agent) as batcher:
        batches = run(batcher)
    for batch in batches:
        assert_consistent(batch)
        seen, starts = batch.trajectories["seen"], batch.trajectories["initial_state"]
        assert bool((seen[starts] == 0).all())  # an episode's first step sees an empty window
        assert int(seen.max()) == 3
        assert batch.info["agent_state/h"].device == batch.trajectories.device


def test_the_multiprocess_batcher_steps_torch_environments_as_the_local_one() -> None:
    args: dict[str, Any] = {"n_envs": 8, "n_timesteps": 30, "seed": 2, "n_processes": 2}
    env = {"env": "CartPoleNoVel-v1"}
    agent = {"n_inputs": 2}
    weights = DeviceAgent(n_inputs=2).state_dict()
    with (
        LocalBatcher(DeviceAgent, agent, make_torch_env, env, weights=weights, **args) as reference,
        MultiprocessBatcher(DeviceAgent, agent, make_torch_env, env, weights=weights, **args) as batcher,
    ):
        for expected, got in zip(run(reference), run(batcher), strict=True):  # type: ignore[arg-type]
            for key, value in expected.trajectories.items():
                assert torch.equal(got.trajectories[key], value), key


class ElsewhereAgent(Agent):
    """Acts on the "meta" device, wherever the environment is."""

    def forward(
        self,
        state: DictTensor,
        observation: DictTensor,
        agent_info: DictTensor,
        history: TemporalDictTensor | None = None,
    ) -> tuple[DictTensor, DictTensor]:
        n = observation.n_elems()
        return DictTensor({"action": torch.zeros(n, dtype=torch.int64, device="meta")}), state


def test_an_agent_acting_elsewhere_is_named() -> None:
    batcher = LocalBatcher(
        ElsewhereAgent, {}, make_torch_env, {"env": "CartPole-v1"}, n_envs=2, n_timesteps=2
    )
    with (
        batcher,
        pytest.raises(ValueError, match=r"must be on the environment's device cpu.*'action'.: 'meta'"),
    ):
        run(batcher, 1)


@CUDA
def test_no_step_waits_for_the_device() -> None:
    with local("cuda", n_envs=1024, n_timesteps=64) as batcher:
        run(batcher, 1)  # the first run checks every key once
        torch.cuda.synchronize()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # setting the mode warns that it is experimental
            try:
                torch.cuda.set_sync_debug_mode("error")
                batcher.execute()
                batch = batcher.get()
            finally:
                torch.cuda.set_sync_debug_mode("default")
    assert_consistent(batch)


@CUDA
def test_a_batch_made_on_cuda_crosses_to_the_cpu_when_asked() -> None:
    with local("cuda") as on_gpu:
        expected = run(on_gpu)
    with LocalBatcher(
        DeviceAgent,
        {"device": "cuda"},
        make_torch_env,
        {"env": "CartPole-v1", "device": "cuda"},
        n_envs=16,
        n_timesteps=40,
        seed=3,
        weights=DeviceAgent("cuda").state_dict(),
    ) as batcher:
        got = run(batcher)
    for a, b in zip(expected, got, strict=True):
        assert b.trajectories.device.type == "cpu"
        for key, value in a.trajectories.items():
            assert torch.equal(value.cpu(), b.trajectories[key]), key


@CUDA
def test_w_per_row_reaches_the_environment_on_its_device() -> None:
    lengths = torch.tensor([0.25] * 8 + [1.0] * 8)
    with local("cuda") as batcher:
        batcher.reset(env_info=DictTensor({"length": lengths}))
        batcher.execute()
        batch = batcher.get()
    assert batch.info["env_info/length"].device.type == "cuda"
    assert torch.equal(batch.info["env_info/length"].cpu(), lengths)


def test_a_multiprocess_worker_refuses_an_environment_off_the_cpu() -> None:
    with (
        MultiprocessBatcher(
            CountingAgent, {}, ElsewhereCounterEnv, {}, n_envs=2, n_timesteps=3, n_processes=1
        ) as batcher,
        pytest.raises(ValueError, match=r"the environment is on meta; workers step environments on the CPU"),
    ):
        batcher.reset()


@CUDA
def test_an_agent_made_on_the_cpu_is_moved_where_the_environment_is() -> None:
    with LocalBatcher(
        RandomAgent,
        {"n_actions": 2},
        make_torch_env,
        {"env": "CartPole-v1", "device": "cuda"},
        n_envs=8,
        n_timesteps=5,
        device="cuda",
    ) as batcher:
        (batch,) = run(batcher, 1)
        agent = batcher._groups[0].agent
    assert agent.generator.device.type == "cuda"
    assert batch.trajectories["action"].device.type == "cuda"
    assert_consistent(batch)


@CUDA
@pytest.mark.parametrize(
    ("algo", "env", "total_steps"),
    [
        ("ppo", "CartPole-v1", 4096),
        ("a2c", "CartPole-v1", 4096),
        ("dqn", "CartPole-v1", 4096),
        ("sac", "Pendulum-v1", 1024),
    ],
)
def test_the_algorithms_collect_on_the_gpu_with_the_torch_backend(
    algo: str, env: str, total_steps: int, tmp_path: Path
) -> None:
    module = importlib.import_module(f"rlstruct.algos.{algo}")
    config = module.Config(
        env=env,
        env_backend="torch",
        device="cuda",
        total_steps=total_steps,
        eval_every=10 * total_steps,
        run_dir=str(tmp_path),
        progress=False,
    )
    results = module.train(config)
    assert results["env_steps"] == total_steps
    assert math.isfinite(results["eval_return_mean"])


@CUDA
def test_ppo_collects_1024_environments_on_the_gpu(tmp_path: Path) -> None:
    config = ppo.Config(
        env="CartPole-v1",
        env_backend="torch",
        device="cuda",
        n_envs=1024,
        n_steps=16,
        minibatch_size=4096,
        n_epochs=2,
        total_steps=3 * 16384,
        eval_every=16384,
        run_dir=str(tmp_path),
        progress=False,
    )
    results = ppo.train(config)
    assert results["env_steps"] == 3 * 16384
    assert math.isfinite(results["eval_return_mean"])


class CudaWithoutIndex(Environment):
    """A CartPole on the GPU whose device says "cuda", without the index tensors report."""

    device = torch.device("cuda")

    def __init__(self, n_envs: int, seed: int) -> None:
        self.n_envs = n_envs
        self.inner = TorchCartPole(n_envs, seed, device="cuda")

    def reset(self, env_info: DictTensor, auto_reset: bool = False) -> DictTensor:
        return self.inner.reset(env_info, auto_reset)

    def step(self, action: DictTensor) -> tuple[DictTensor, DictTensor]:
        return self.inner.step(action)


@CUDA
def test_an_environment_on_cuda_without_an_index_is_on_the_current_device() -> None:
    with LocalBatcher(
        RandomAgent, {"n_actions": 2}, CudaWithoutIndex, {}, n_envs=4, n_timesteps=3, device="cuda"
    ) as batcher:
        (batch,) = run(batcher, 1)
    assert batch.trajectories.device == torch.device("cuda", torch.cuda.current_device())
