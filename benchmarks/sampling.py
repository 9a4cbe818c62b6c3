"""Sampling throughput: rlstruct's batchers against gymnasium's vector environments.

Every row drives CartPole-v1 with the same policy (an MLP 4-64-64-2, softmax
and ``torch.multinomial`` sampling, one call per step for all environments)
and fills the same [B, T] tensors (observation, action, reward, done), then
reports environment steps per second: the median over repeats, all measured
in one run. Ratios compare rows measured side by side:

- the floor: ``n_cores / bare step cost`` (``CartPoleEnv.step`` without wrappers);
- ``MultiprocessBatcher`` 2 x 8 against ``SyncVectorEnv(16)`` (target 1.5) and
  ``AsyncVectorEnv(16)`` (target 5);
- ``MultiprocessBatcher`` 2 x 64 against the floor (target 0.5);
- the time from constructing a 2-process batcher to its first batch (target 2 s);
- a Bullet row (HalfCheetahBulletEnv-v0, 2 x 4) against ``SyncVectorEnv(8)``, when
  the ``bullet`` extra is installed.

Usage:
    python benchmarks/sampling.py [--quick] [--repeats N] [--json PATH]
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from _common import Row, parse_args, report

from rlstruct import Agent, DictTensor, GymEnv, LocalBatcher, MultiprocessBatcher, TemporalDictTensor

T = 64


class MLPAgent(Agent):
    """The policy every row uses: an MLP and categorical sampling (or a tanh Gaussian for Box actions)."""

    def __init__(self, n_inputs: int = 4, n_actions: int = 2, continuous: bool = False) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.continuous = continuous
        self.net = torch.nn.Sequential(
            torch.nn.Linear(n_inputs, 64),
            torch.nn.Tanh(),
            torch.nn.Linear(64, 64),
            torch.nn.Tanh(),
            torch.nn.Linear(64, n_actions),
        )

    def act(self, observation: torch.Tensor) -> torch.Tensor:
        out = self.net(observation)
        if self.continuous:
            return torch.tanh(out + torch.randn(out.shape, generator=self.generator))
        return torch.multinomial(torch.softmax(out, -1), 1, generator=self.generator).squeeze(1)

    def forward(
        self,
        state: DictTensor,
        observation: DictTensor,
        agent_info: DictTensor,
        history: TemporalDictTensor | None = None,
    ) -> tuple[DictTensor, DictTensor]:
        return DictTensor({"action": self.act(observation["observation"])}), state


def vector_env_rate(envs: gym.vector.VectorEnv, agent: MLPAgent, batches: int) -> float:
    """Env steps per second of a gymnasium vector env driven by ``agent``, filling [B, T] tensors."""
    n = envs.num_envs
    shape = envs.single_observation_space.shape or ()
    obs_buf = torch.zeros((n, T, *shape))
    act_buf = torch.zeros((n, T, *(envs.single_action_space.shape or ())))
    rew_buf, done_buf = torch.zeros(n, T), torch.zeros(n, T, dtype=torch.bool)
    observation, _ = envs.reset(seed=0)
    start = time.perf_counter()
    with torch.no_grad():
        for _ in range(batches):
            for t in range(T):
                obs = torch.from_numpy(observation).float()
                action = agent.act(obs)
                observation, reward, terminated, truncated, _ = envs.step(action.numpy())
                obs_buf[:, t] = obs
                act_buf[:, t] = action
                rew_buf[:, t] = torch.from_numpy(reward)
                done_buf[:, t] = torch.from_numpy(terminated | truncated)
    return n * T * batches / (time.perf_counter() - start)


def batcher_rate(batcher: Any, batches: int) -> float:
    batcher.reset()
    batcher.execute()
    batcher.get()  # warm up: buffers allocated, workers running
    start = time.perf_counter()
    for _ in range(batches):
        batcher.execute()
        batcher.get()
    return batcher.n_elems() * T * batches / (time.perf_counter() - start)


def bare_step_cost(steps: int) -> float:
    """Seconds per ``CartPoleEnv.step`` without wrappers."""
    env = gym.make("CartPole-v1").unwrapped
    env.reset(seed=0)
    actions = np.random.default_rng(0).integers(0, 2, steps)
    start = time.perf_counter()
    for a in actions:
        _, _, terminated, _, _ = env.step(int(a))
        if terminated:
            env.reset()
    return (time.perf_counter() - start) / steps


def median_rate(measure: Callable[[], float], repeats: int) -> float:
    return statistics.median(measure() for _ in range(repeats))


def main() -> None:
    args, budget = parse_args(__doc__, default_repeats=3)
    torch.set_num_threads(1)
    quick = args.quick
    batches = 2 if quick else 20
    repeats = 1 if quick else budget.repeats
    cores = len(os.sched_getaffinity(0))
    cartpole = {"env": "CartPole-v1"}
    rows: list[Row] = []

    floor = cores / bare_step_cost(2000 if quick else 100_000)
    agent = MLPAgent()
    weights = agent.state_dict()  # every batcher acts with the same policy as the vector envs
    sync16 = median_rate(
        lambda: vector_env_rate(
            gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 16), agent, batches
        ),
        repeats,
    )

    n_async = 2 if quick else 16  # each AsyncVectorEnv instance is a process: keep the smoke run short

    def async_rate() -> float:
        envs = gym.vector.AsyncVectorEnv([lambda: gym.make("CartPole-v1")] * n_async)
        try:
            return vector_env_rate(envs, agent, max(1, batches // 4))
        finally:
            envs.close()

    async16 = median_rate(async_rate, repeats)
    with LocalBatcher(MLPAgent, {}, GymEnv, cartpole, n_envs=16, n_timesteps=T, weights=weights) as local:
        local16 = median_rate(lambda: batcher_rate(local, batches), repeats)

    start = time.perf_counter()
    with MultiprocessBatcher(
        MLPAgent, {}, GymEnv, cartpole, n_envs=8, n_timesteps=T, n_processes=2, weights=weights
    ) as mp8:
        mp8.reset()
        mp8.execute()
        mp8.get()
        first_batch = time.perf_counter() - start
        mp2x8 = median_rate(lambda: batcher_rate(mp8, batches), repeats)
    with MultiprocessBatcher(
        MLPAgent, {}, GymEnv, cartpole, n_envs=64, n_timesteps=T, n_processes=2, weights=weights
    ) as mp64:
        mp2x64 = median_rate(lambda: batcher_rate(mp64, max(1, batches // 4)), repeats)

    rows += [
        Row("floor: cores / bare CartPole step", floor, "steps/s", higher_is_better=True),
        Row("gymnasium SyncVectorEnv(16)", sync16, "steps/s", higher_is_better=True),
        Row(f"gymnasium AsyncVectorEnv({n_async})", async16, "steps/s", higher_is_better=True),
        Row("LocalBatcher 16 envs vs Sync(16)", local16, "steps/s", sync16, higher_is_better=True),
        Row("Multiprocess 2 x 8 vs Sync(16)", mp2x8, "steps/s", sync16, 1.5, higher_is_better=True),
        Row(f"Multiprocess 2 x 8 vs Async({n_async})", mp2x8, "steps/s", async16, 5.0, higher_is_better=True),
        Row("Multiprocess 2 x 64 vs floor", mp2x64, "steps/s", floor, 0.5, higher_is_better=True),
        # the target is 2 s: against a baseline of 2 s, the ratio must stay at most 1
        Row("first batch of 2 x 8 after construction", first_batch, "s", 2.0, 1.0),
    ]

    try:
        import pybullet_envs_gymnasium  # noqa: F401  (registers the Bullet environments)
    except ImportError:
        print("pybullet_envs_gymnasium is not installed: no Bullet row")
    else:
        cheetah = "pybullet_envs_gymnasium:HalfCheetahBulletEnv-v0"
        bullet_agent = {"n_inputs": 26, "n_actions": 6, "continuous": True}
        cheetah_agent = MLPAgent(**bullet_agent)
        sync8 = median_rate(
            lambda: vector_env_rate(
                gym.vector.SyncVectorEnv([lambda: gym.make(cheetah)] * 8), cheetah_agent, 1
            ),
            repeats,
        )
        with MultiprocessBatcher(
            MLPAgent,
            bullet_agent,
            GymEnv,
            {"env": cheetah},
            n_envs=4,
            n_timesteps=T,
            n_processes=2,
            weights=cheetah_agent.state_dict(),
        ) as bullet:
            mp_bullet = median_rate(lambda: batcher_rate(bullet, 1), repeats)
        rows.append(
            Row(
                "HalfCheetah Multiprocess 2 x 4 vs Sync(8)",
                mp_bullet,
                "steps/s",
                sync8,
                higher_is_better=True,
            )
        )

    print(f"CartPole-v1, T = {T}, {cores} cores, torch {torch.__version__}, median of {repeats} repeats\n")
    report(args, rows, "rlstruct", "baseline")


if __name__ == "__main__":
    main()
