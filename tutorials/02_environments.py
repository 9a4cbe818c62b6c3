"""Tutorial 2: environments, parametrised by env_info w.

Run it with ``python tutorials/02_environments.py`` (``--quick`` for a shorter
run). It shows what an rlstruct Environment returns, how GymEnv turns
gymnasium environments into one batch, how each instance gets its own
parameters w, and the difference between episodic and auto-reset modes.
"""

from __future__ import annotations

import argparse

import torch

from rlstruct import DictTensor, GymEnv
from rlstruct.testing import CounterEnv


def section(title: str) -> None:
    print(f"\n=== {title} ===")


def main() -> None:
    parser = argparse.ArgumentParser(
        description="Environments, parametrised by env_info w."
    )
    parser.add_argument("--quick", action="store_true", help="fewer steps")
    args = parser.parse_args()
    n_steps = 20 if args.quick else 200

    section("GymEnv: n gymnasium instances as one batch")
    env = GymEnv("CartPole-v1", n_envs=3, seed=0)
    first = env.reset(DictTensor(batch_size=3))
    # Every key has one row per instance; dtypes come from the spaces, never cast.
    for key, value in first.items():
        print(f"  {key:14s} {value.dtype!s:14s} {tuple(value.shape)}")
    action = DictTensor({"action": torch.tensor([0, 1, 0])})
    reached, observation = env.step(action)
    print(
        "reward after one step:",
        reached["reward"],
        "last_action:",
        reached["last_action"],
    )
    env.close()

    section("w: one parameter row per instance")
    # env_info rows become keyword arguments of gymnasium.make, here Pendulum's
    # gravity g.
    pendulum = GymEnv("Pendulum-v1", n_envs=2, seed=0)
    pendulum.reset(DictTensor({"g": torch.tensor([1.0, 20.0])}))
    torque = DictTensor({"action": torch.zeros(2, 1)})
    for _ in range(n_steps // 4):
        reached, _ = pendulum.step(torque)
    print(
        "angular velocity after free fall, g=1 vs g=20:", reached["observation"][:, 2]
    )
    pendulum.close()

    section("Episodic mode: finished instances stop")
    # CounterEnv's observation t counts steps; w sets each instance's episode length.
    counter = CounterEnv(n_envs=3)
    counter.reset(DictTensor({"length": torch.tensor([1, 2, 4])}), auto_reset=False)
    zero = DictTensor({"action": torch.zeros(3, dtype=torch.int64)})
    for step in range(4):
        reached, _ = counter.step(zero)
        print(
            f"  step {step}: t={reached['t'].tolist()} done={reached['done'].tolist()}"
        )

    section("Auto-reset mode: a continuing stream")
    counter.reset(DictTensor({"length": torch.tensor([1, 2, 4])}), auto_reset=True)
    for step in range(3):
        reached, observation = counter.step(zero)
        # reached: the final observation when an episode ends (to bootstrap from);
        # observation: what the agent sees next, a fresh episode for those instances.
        print(
            f"  step {step}: reached t={reached['t'].tolist()} "
            f"done={reached['done'].tolist()}\n"
            f"          next t={observation['t'].tolist()} "
            f"initial={observation['initial_state'].tolist()}"
        )

    section("Terminated or truncated")
    cut = CounterEnv(n_envs=1, length=2, truncate=True)
    cut.reset(DictTensor(batch_size=1))
    cut.step(zero[0])
    reached, _ = cut.step(zero[0])
    print(
        "a time limit is truncated, not terminated:",
        reached["truncated"],
        reached["terminated"],
    )


if __name__ == "__main__":
    main()
