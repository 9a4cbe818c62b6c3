"""The CUDA paths: trajectories reach the learner's device through pinned memory.

Skipped without a CUDA device; each test compares with the CPU result of the
same seeds, so a wrong copy, a lost row or a silent dtype change fails.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from rlstruct import GymEnv, LocalBatcher, MultiprocessBatcher, Trajectories
from tests.mp_helpers import LinearAgent

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

# every batcher acts with LinearAgent's fixed weights, given explicitly as a learner would
ARGS: dict[str, Any] = {
    "n_envs": 3,
    "n_timesteps": 6,
    "seed": 5,
    "n_processes": 2,
    "weights": LinearAgent().state_dict(),
}
ENV: dict[str, Any] = {"env": "CartPole-v1"}


def assert_on_cuda_and_equal(got: Trajectories, expected: Trajectories) -> None:
    assert got.trajectories.device.type == "cuda"
    assert all(v.device.type == "cuda" for v in got.info.values())
    assert got.lengths.device.type == "cuda"
    assert sorted(got.trajectories.keys()) == sorted(expected.trajectories.keys())
    for key, value in expected.trajectories.items():
        assert got.trajectories[key].dtype == value.dtype, key
        assert torch.equal(got.trajectories[key].cpu(), value), key
    for key, value in expected.info.items():
        assert got.info[key].dtype == value.dtype, key
        assert torch.equal(got.info[key].cpu(), value), key
    assert torch.equal(got.lengths.cpu(), expected.lengths)


@pytest.mark.parametrize("mode", ["fixed", "episodes"])
def test_get_on_cuda_equals_the_cpu_batch(mode: str) -> None:
    gpu = MultiprocessBatcher(LinearAgent, {}, GymEnv, ENV, mode=mode, device="cuda", **ARGS)  # type: ignore[arg-type]
    cpu = LocalBatcher(LinearAgent, {}, GymEnv, ENV, mode=mode, **ARGS)  # type: ignore[arg-type]
    with gpu, cpu:
        gpu.reset()
        cpu.reset()
        for _ in range(3):
            gpu.execute()
            cpu.execute()
            got, expected = gpu.get(), cpu.get()
            assert got is not None and expected is not None
            assert_on_cuda_and_equal(got, expected)


@pytest.mark.parametrize("mode", ["fixed", "stream"])
def test_local_batcher_get_on_cuda_equals_the_cpu_batch(mode: str) -> None:
    gpu = LocalBatcher(LinearAgent, {}, GymEnv, ENV, mode=mode, device="cuda", **ARGS)  # type: ignore[arg-type]
    cpu = LocalBatcher(LinearAgent, {}, GymEnv, ENV, mode=mode, **ARGS)  # type: ignore[arg-type]
    with gpu, cpu:
        # the device as tensors report it: "cuda" is the current CUDA device, with its index
        assert gpu.device == torch.device("cuda", torch.cuda.current_device())
        gpu.reset()
        cpu.reset()
        for _ in range(4):  # "stream": each group twice
            if mode == "fixed":
                gpu.execute()
                cpu.execute()
            got = gpu.get()
            assert got.trajectories.device == gpu.device
            assert_on_cuda_and_equal(got, cpu.get())


def test_a_cuda_batch_survives_the_next_execute() -> None:
    """The copy is complete before get() returns: refilling the shared slot does not touch it."""
    with MultiprocessBatcher(LinearAgent, {}, GymEnv, ENV, device="cuda", **ARGS) as batcher:
        batcher.reset()
        batcher.execute()
        first = batcher.get()
        assert first is not None
        kept = first.trajectories["observation"].cpu().clone()
        batcher.execute()
        second = batcher.get()
        assert second is not None
        torch.cuda.synchronize()
        assert torch.equal(first.trajectories["observation"].cpu(), kept)
        assert not torch.equal(second.trajectories["observation"].cpu(), kept)


def test_update_takes_weights_from_a_cuda_model() -> None:
    model = LinearAgent().cuda()
    with torch.no_grad():
        model.linear.weight.zero_()
        model.linear.bias.copy_(torch.tensor([-20.0, 20.0]))
    with MultiprocessBatcher(LinearAgent, {}, GymEnv, ENV, device="cuda", **ARGS) as batcher:
        batcher.reset()
        batcher.update(model.state_dict())
        batcher.execute()
        batch = batcher.get()
        assert batch is not None
        assert batch.info["policy_version"].tolist() == [1] * 6
        # logits follow the CUDA model's weights, so every action pushes right
        assert bool((batch.trajectories["action"][batch.trajectories.mask()] == 1).all())


def test_stream_mode_delivers_on_cuda() -> None:
    args = dict(ARGS, n_slots=4)
    with MultiprocessBatcher(LinearAgent, {}, GymEnv, ENV, mode="stream", device="cuda", **args) as batcher:
        batcher.reset()
        for _ in range(4):
            batch = batcher.get()
            assert batch is not None
            assert batch.trajectories["observation"].device.type == "cuda"
            assert batch.trajectories["observation"].dtype == torch.float32
            assert batch.info["policy_version"].device.type == "cuda"


def test_in_process_scheme_learns_on_cuda_like_on_the_cpu() -> None:
    # The same seeds on the CPU and on CUDA: the weights stay close (float32 kernels differ slightly),
    # the model and its optimiser state live on CUDA, and the saved weights come back on the CPU.
    import functools

    from rlstruct.distributed import PPO, Collection, Learner, MinibatchBuffer, Scheme
    from rlstruct.learning.actor_critic import ActorCritic

    weights = {}
    for device in ("cpu", "cuda"):
        scheme = Scheme(
            ActorCritic,
            {"obs_dim": 4, "n_actions": 2},
            GymEnv,
            ENV,
            PPO,
            functools.partial(MinibatchBuffer, n_epochs=2, minibatch_size=64),
            collection=Collection(n_envs=2, n_steps=32),
            device=device,
        )
        with Learner(scheme, target_steps=256, progress=False) as learner:
            while not learner.done():
                learner.step()
            assert all(p.device.type == device for p in scheme.model.parameters())
            state = scheme.algorithm.optimizer.state_dict()["state"]
            assert all(s["exp_avg"].device.type == device for s in state.values())
            weights[device] = scheme.weights()
    for key, value in weights["cpu"].items():
        assert weights["cuda"][key].device.type == "cpu" and weights["cuda"][key].dtype == value.dtype
        assert torch.allclose(weights["cuda"][key], value, atol=1e-4), key


def test_off_policy_local_steps_and_prioritized_replay_run_on_cuda() -> None:
    # Local steps carry the parameters and the target critics back from the device and load them
    # there: on CUDA as on the CPU, one gradient worker gives the weights of 1-step rounds. A
    # prioritized storage made on the device serves its draws and takes its priorities there.
    import functools

    from rlstruct.distributed import (
        DQN,
        SAC,
        Collection,
        Gradients,
        Learner,
        PrioritizedStorage,
        ReplayStorage,
        Scheme,
    )
    from rlstruct.learning.q_learning import QNetwork
    from rlstruct.learning.soft_actor_critic import SquashedGaussianActor

    actor = {"obs_dim": 3, "action_low": [-2.0], "action_high": [2.0], "hidden": (16, 16)}
    trained = []
    for local_steps in (1, 8):
        scheme = Scheme(
            SquashedGaussianActor,
            actor,
            GymEnv,
            {"env": "Pendulum-v1"},
            functools.partial(SAC, hidden=(16, 16)),
            functools.partial(ReplayStorage, 10_000, batch_size=32, gradient_steps=0.25, learning_starts=64),
            collection=Collection(n_envs=2, n_steps=16),
            gradients=Gradients(local_steps=local_steps),
            device="cuda",
            seed=3,
        )
        with Learner(scheme, target_steps=256, progress=False) as learner:
            while not learner.done():
                learner.step()
        assert all(v.device.type == "cuda" for v in scheme.trained.state_dict().values())
        trained.append({k: v.cpu() for k, v in scheme.trained.state_dict().items()})
    for key, value in trained[0].items():
        assert torch.allclose(trained[1][key], value, atol=1e-6), key

    scheme = Scheme(
        QNetwork,
        {"obs_dim": 4, "n_actions": 2, "hidden": (16, 16)},
        GymEnv,
        ENV,
        DQN,
        functools.partial(PrioritizedStorage, 10_000, batch_size=32, gradient_steps=0.25, learning_starts=64),
        collection=Collection(n_envs=2, n_steps=16),
        device="cuda",
    )
    with Learner(scheme, target_steps=256, progress=False) as learner:
        while not learner.done():
            learner.step()
        assert learner.updates > 0
    assert scheme.local is not None and isinstance(scheme.local.buffer, PrioritizedStorage)
    replay = scheme.local.buffer.replay
    assert replay is not None and replay.device.type == "cuda"
