"""Tutorial 7: PPO on several processes, each with a batcher, averaging the gradients.

Run it alone, as 2 local processes, or with torchrun (on one machine or several):

    python tutorials/07_cluster_ppo.py --n-processes 2
    torchrun --standalone --nproc-per-node 2 tutorials/07_cluster_ppo.py

(``--quick`` for a tiny budget.) ``cluster.fork`` turns the script into
``--n-processes`` processes, or joins torchrun's group. Each process collects
CartPole trajectories with its own ``LocalBatcher`` and its own seeds,
computes the PPO loss on them with ``replay_agent``, and ``average_gradients``
makes every process take the same optimiser step: the learners stay
identical, and each update learns from the data of all processes. Rank 0
prints the returns of the episodes that ended, gathered from every process.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import torch

import rlstruct.cluster as cluster
from rlstruct import (
    Agent,
    DictTensor,
    GymEnv,
    LocalBatcher,
    TemporalDictTensor,
    Trajectories,
    gae,
    replay_agent,
)


@dataclass
class Config:
    n_processes: int = 2
    """Processes started by ``cluster.fork`` (ignored under torchrun, which decides)."""
    n_envs: int = 8
    """CartPole instances per process."""
    n_timesteps: int = 64
    """Steps per trajectory; an update sees n_processes x n_envs x n_timesteps steps."""
    updates: int = 30
    """Collect-then-learn rounds."""
    epochs: int = 4
    """Gradient steps on each batch."""
    lr: float = 0.003
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip: float = 0.2
    """PPO's clipping of the probability ratio."""
    value_coef: float = 0.5
    entropy_coef: float = 0.01
    seed: int = 0


class ActorCritic(Agent):
    """A policy and a value for CartPole; stores logits and value with each step."""

    def __init__(self) -> None:
        super().__init__()
        self.policy = torch.nn.Sequential(
            torch.nn.Linear(4, 64), torch.nn.Tanh(), torch.nn.Linear(64, 2)
        )
        self.critic = torch.nn.Sequential(
            torch.nn.Linear(4, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1)
        )

    def value(self, observation: torch.Tensor) -> torch.Tensor:
        return self.critic(observation).squeeze(-1)

    def forward(
        self,
        state: DictTensor,
        observation: DictTensor,
        agent_info: DictTensor,
        history: TemporalDictTensor | None = None,
    ) -> tuple[DictTensor, DictTensor]:
        obs = observation["observation"]
        logits = self.policy(obs)
        action = torch.multinomial(
            torch.softmax(logits, -1), 1, generator=self.generator
        ).squeeze(1)
        return DictTensor(
            {"action": action, "logits": logits, "value": self.value(obs)}
        ), state


def ppo_loss(
    learner: ActorCritic,
    batch: Trajectories,
    advantage: torch.Tensor,
    target: torch.Tensor,
    cfg: Config,
) -> torch.Tensor:
    """The clipped PPO objective, a value regression and an entropy bonus."""
    steps = batch.trajectories
    # the learner's outputs on the stored steps, with gradients
    replayed = replay_agent(learner, batch)
    action = steps["action"].unsqueeze(-1)
    logp = torch.log_softmax(replayed["logits"], -1)
    old_logp = torch.log_softmax(steps["logits"], -1).gather(-1, action).squeeze(-1)
    ratio = torch.exp(logp.gather(-1, action).squeeze(-1) - old_logp)
    clipped = torch.clamp(ratio, 1 - cfg.clip, 1 + cfg.clip)
    policy_loss = -torch.min(ratio * advantage, clipped * advantage).mean()
    value_loss = (replayed["value"] - target).pow(2).mean()
    entropy = -(logp.exp() * logp).sum(-1).mean()
    return policy_loss + cfg.value_coef * value_loss - cfg.entropy_coef * entropy


def finished_returns(batch: Trajectories, running: torch.Tensor) -> list[float]:
    """Returns of the episodes ended in ``batch``; ``running`` [B] carries the rest."""
    steps = batch.trajectories
    returns = []
    for t in range(steps.n_timesteps()):
        running += steps["next/reward"][:, t]
        ended = steps["next/done"][:, t]
        returns += running[ended].tolist()
        running[ended] = 0.0
    return returns


def main() -> None:
    parser = argparse.ArgumentParser(
        description="PPO across processes with averaged gradients."
    )
    parser.add_argument("--quick", action="store_true", help="a tiny budget")
    parser.add_argument(
        "--n-processes",
        type=int,
        default=Config.n_processes,
        help="processes to run (ignored under torchrun)",
    )
    args = parser.parse_args()
    if args.n_processes < 1:
        parser.error(f"--n-processes must be at least 1, got {args.n_processes}")
    cfg = Config(n_processes=args.n_processes)
    if args.quick:
        cfg = Config(
            n_processes=args.n_processes, n_envs=4, n_timesteps=32, updates=3, epochs=2
        )

    # Everything above runs in every process; fork() starts the others (or joins
    # torchrun's group).
    rank = cluster.fork(cfg.n_processes - 1)
    world = cluster.world_size()
    if rank == 0:
        print(
            f"{world} processes x {cfg.n_envs} envs x {cfg.n_timesteps} steps "
            "per update"
        )

    torch.manual_seed(cfg.seed)
    learner = ActorCritic()
    # the same start everywhere, whatever each process did before
    cluster.broadcast_parameters(learner)
    optimizer = torch.optim.Adam(learner.parameters(), lr=cfg.lr)
    running = torch.zeros(cfg.n_envs)

    # Each process collects its own data, with its own environment seeds.
    env_args = {"env": "CartPole-v1"}
    seed = cfg.seed + 1000 * rank
    with LocalBatcher(
        ActorCritic,
        {},
        GymEnv,
        env_args,
        n_envs=cfg.n_envs,
        n_timesteps=cfg.n_timesteps,
        seed=seed,
    ) as batcher:
        batcher.reset()
        for update in range(cfg.updates):
            batcher.update(learner.state_dict())
            batcher.execute()
            batch = batcher.get()
            steps = batch.trajectories

            with torch.no_grad():
                next_value = learner.value(steps["next/observation"])
            advantage = gae(
                steps["next/reward"],
                value=steps["value"],
                next_value=next_value,
                terminated=steps["next/terminated"],
                done=steps["next/done"],
                gamma=cfg.gamma,
                lam=cfg.gae_lambda,
            )
            target = advantage + steps["value"]
            # Normalise with the statistics of every process's advantages, so that all
            # weigh alike.
            stats = cluster.statistics_scalar(advantage)
            advantage = (advantage - stats.mean) / (stats.std + 1e-8)

            for _ in range(cfg.epochs):
                loss = ppo_loss(learner, batch, advantage, target, cfg)
                optimizer.zero_grad()
                loss.backward()
                # every process now holds the same gradient
                cluster.average_gradients(learner)
                optimizer.step()

            # a collective call: every process makes it
            mean_loss = cluster.avg(loss.detach()).item()
            returns = finished_returns(batch, running)
            # the same on every process, so all take the same branch
            ended = cluster.sum_number(len(returns))
            if ended:
                r = cluster.statistics_scalar(returns)
                if rank == 0:
                    print(
                        f"update {update:3d}: {ended:3d} episodes ended, "
                        f"return {r.mean:6.1f} +- {r.std:5.1f} "
                        f"(min {r.min:3.0f}, max {r.max:3.0f}), loss {mean_loss:.3f}"
                    )
            elif rank == 0:
                print(f"update {update:3d}: no episode ended yet")

    flat = torch.cat([p.detach().reshape(-1) for p in learner.parameters()])
    identical = torch.equal(cluster.max(flat), cluster.min(flat))
    if rank == 0:
        print(f"learners identical on all {world} processes: {identical}")
    cluster.disconnect()


if __name__ == "__main__":
    main()
