"""Tutorial 6: an asynchronous actor-learner (IMPALA) on the streaming batcher.

Run it with ``python tutorials/06_impala_async.py`` (``--quick`` for a tiny
budget). Worker processes (the actors) keep filling trajectory slots with the
weights they last loaded; the learner takes finished slots, corrects for the
policy lag with V-trace (``rlstruct.vtrace``), takes a gradient step and
publishes new weights. Nothing waits for anything but a finished slot: the
learner and the actors run at the same time. ``rlstruct train impala`` is the
full version, with logging and evaluation alongside training.
"""

from __future__ import annotations

import argparse
import time

import torch

from rlstruct import DictTensor, GymEnv, LocalBatcher, MultiprocessBatcher, vtrace
from rlstruct.learning.actor_critic import ActorCritic


def main() -> None:
    parser = argparse.ArgumentParser(
        description="An asynchronous actor-learner on the streaming batcher."
    )
    parser.add_argument("--quick", action="store_true", help="a tiny budget")
    args = parser.parse_args()
    total_steps = 4_096 if args.quick else 150_000
    torch.manual_seed(0)
    torch.set_num_threads(1)
    agent_args = {"obs_dim": 4, "n_actions": 2, "hidden": (64, 64)}
    learner = ActorCritic(**agent_args)  # type: ignore[arg-type]
    optimizer = torch.optim.RMSprop(learner.parameters(), lr=1e-3, alpha=0.99, eps=1e-5)
    weights = {k: v.detach().clone() for k, v in learner.state_dict().items()}
    n_envs, n_steps = 8, 32  # per worker: each slot holds 8 trajectories of 32 steps

    print("=== Actors stream slots; the learner takes the oldest finished one ===")
    with MultiprocessBatcher(
        ActorCritic,
        agent_args,
        GymEnv,
        {"env": "CartPole-v1"},
        n_envs=n_envs,
        n_timesteps=n_steps,
        n_processes=2,
        mode="stream",
        # at most 4 slots in flight: actors wait when all are full (back-pressure)
        n_slots=4,
    ) as batcher:
        batcher.update(weights)  # version 1: what the actors load first
        batcher.reset()  # the actors start at once
        env_steps, updates, lags, start = 0, 0, [], time.perf_counter()
        while env_steps < total_steps:
            # Never learn from data more than 3 updates old: older slots are dropped
            # and refilled.
            batch = batcher.get(max_staleness=3)
            steps = batch.trajectories
            env_steps += n_envs * n_steps
            # updates since it was produced
            lag = batcher.policy_version() - batch.info["policy_version"]
            lags.append(int(lag.max()))

            # V-trace: the learner's policy pi against the behaviour policy mu that
            # acted.
            b, t = steps.n_elems(), steps.n_timesteps()
            params, value = learner.heads(
                learner.features(steps["observation"].flatten(0, 1))[0]
            )
            log_pi = learner.log_prob(params, steps["action"].flatten(0, 1)).view(b, t)
            value = value.view(b, t)
            with torch.no_grad():
                next_value = learner.value_of(
                    steps["next/observation"].flatten(0, 1)
                ).view(b, t)
                vs, advantage = vtrace(
                    # values of order 10, easier to learn than 100
                    0.1 * steps["next/reward"],
                    # log pi(a) - log mu(a), mu's stored by the actor
                    log_rho=log_pi - steps["log_prob"],
                    value=value,
                    next_value=next_value,
                    terminated=steps["next/terminated"],
                    done=steps["next/done"],
                    gamma=0.99,
                )
                advantage = (advantage - advantage.mean()) / (advantage.std() + 1e-8)
            value_loss = 0.5 * (value - vs).pow(2).mean()
            loss = -(log_pi * advantage).mean() + 0.5 * value_loss
            # anneal to 0 so the end of the run holds
            for group in optimizer.param_groups:
                group["lr"] = 1e-3 * max(0.0, 1.0 - env_steps / total_steps)
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(learner.parameters(), 0.5)
            optimizer.step()
            # the next trajectories each actor starts use these
            batcher.update(learner.state_dict())
            updates += 1
            if updates % max(1, (total_steps // (n_envs * n_steps)) // 8) == 0:
                print(
                    f"update {updates:4d}  env steps {env_steps:6d}  "
                    f"policy version {batcher.policy_version():4d}"
                    f"  lag of this slot {lags[-1]}  value loss {value_loss.item():.3f}"
                )
        rate = env_steps / (time.perf_counter() - start)
        print(
            f"{updates} updates, {rate:.0f} env steps/s; "
            f"policy lag mean {sum(lags) / len(lags):.2f}, max {max(lags)}"
        )

    print("\n=== Greedy evaluation in-process ===")
    with LocalBatcher(
        ActorCritic,
        agent_args,
        GymEnv,
        {"env": "CartPole-v1"},
        n_envs=8,
        n_timesteps=500,
        mode="episodes",
        seed=7,
    ) as evaluation:
        evaluation.update(learner.state_dict())
        evaluation.reset(
            agent_info=DictTensor({"greedy": torch.ones(8, dtype=torch.bool)})
        )
        evaluation.execute()
        episodes = evaluation.get()
        assert episodes is not None
        returns = episodes.trajectories["next/reward"].sum(1)  # padding is zero
        print(f"greedy return over 8 episodes: {returns.mean():.1f} (500 is the most)")


if __name__ == "__main__":
    main()
