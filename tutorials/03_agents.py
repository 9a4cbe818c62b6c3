"""Tutorial 3: agents with internal state, parametrised by agent_info z.

Run it with ``python tutorials/03_agents.py`` (``--quick`` for a shorter
run). It writes a recurrent agent whose hidden state the batcher carries from
step to step, runs several values of z (exploration epsilons) side by side in
one batch, compares continuing and episodic acquisition, and recomputes the
agent's outputs over the collected trajectories with gradients.
"""

from __future__ import annotations

import argparse

import torch

from rlstruct import (
    Agent,
    DictTensor,
    GymEnv,
    LocalBatcher,
    TemporalDictTensor,
    replay_agent,
)


class RecurrentAgent(Agent):
    """A GRU policy for CartPole that explores with probability epsilon (its z)."""

    def __init__(self, hidden: int = 32) -> None:
        super().__init__()
        self.hidden = hidden
        self.encoder = torch.nn.Linear(4, hidden)
        self.cell = torch.nn.GRUCell(hidden, hidden)
        self.policy = torch.nn.Linear(hidden, 2)

    def initial_state(self, agent_info: DictTensor, n: int) -> DictTensor:
        # The batcher calls this at reset and wherever an episode begins.
        return DictTensor({"h": torch.zeros(n, self.hidden)})

    def forward(
        self,
        state: DictTensor,
        observation: DictTensor,
        agent_info: DictTensor,
        history: TemporalDictTensor | None = None,
    ) -> tuple[DictTensor, DictTensor]:
        h = self.cell(torch.tanh(self.encoder(observation["observation"])), state["h"])
        logits = self.policy(h)
        sampled = torch.multinomial(
            torch.softmax(logits, -1), 1, generator=self.generator
        ).squeeze(1)
        uniform = torch.randint(0, 2, sampled.shape, generator=self.generator)
        explore = (
            torch.rand(sampled.shape, generator=self.generator) < agent_info["epsilon"]
        )
        action = torch.where(explore, uniform, sampled)
        # Everything in the output is stored in the trajectories, next to the
        # observation.
        return DictTensor({"action": action, "logits": logits}), DictTensor({"h": h})


def main() -> None:
    parser = argparse.ArgumentParser(
        description="Agents with internal state, parametrised by z."
    )
    parser.add_argument("--quick", action="store_true", help="shorter trajectories")
    args = parser.parse_args()
    n_timesteps = 20 if args.quick else 200
    torch.manual_seed(0)

    # Four trajectory slots, each with its own epsilon: z travels with every row.
    epsilons = DictTensor({"epsilon": torch.tensor([0.0, 0.1, 0.5, 1.0])})

    print("=== Continuing acquisition: fixed-length pieces of an endless stream ===")
    # the learner's copy; the batcher's copies act with its weights
    learner = RecurrentAgent()
    with LocalBatcher(
        RecurrentAgent,
        {},
        GymEnv,
        {"env": "CartPole-v1"},
        n_envs=4,
        n_timesteps=n_timesteps,
        seed=0,
        weights=learner.state_dict(),
    ) as batcher:
        batcher.reset(agent_info=epsilons)
        for piece in range(3):
            batcher.execute()
            batch = batcher.get()
            steps = batch.trajectories
            episodes_ended = steps["next/done"].sum().item()
            print(
                f"piece {piece}: {tuple(steps['observation'].shape)} steps, "
                f"lengths {steps.lengths.tolist()}, {episodes_ended} episode ends;\n"
                f"         hidden state carried in: "
                f"{batch.info['agent_state/h'].abs().sum().item():.2f}"
            )
        print(
            "z stored with every row:",
            [round(e, 2) for e in batch.info["agent_info/epsilon"].tolist()],
        )

        # Recompute the outputs over the stored steps, with gradients, as a loss would.
        replayed = replay_agent(learner, batch)
        same = torch.allclose(replayed["logits"], steps["logits"], atol=1e-5)
        print(
            "replayed logits equal the collected ones:",
            same,
            "| requires grad:",
            replayed["logits"].requires_grad,
        )
        loss = -(
            torch.log_softmax(replayed["logits"], -1).max(-1).values * steps.mask()
        ).sum()
        loss.backward()
        print("gradient reached the GRU:", learner.cell.weight_hh.grad is not None)

    print("\n=== Episodic acquisition: whole episodes, at most T steps ===")
    with LocalBatcher(
        RecurrentAgent,
        {},
        GymEnv,
        {"env": "CartPole-v1"},
        n_envs=4,
        n_timesteps=n_timesteps,
        mode="episodes",
        seed=0,
        weights=learner.state_dict(),
    ) as batcher:
        batcher.reset(agent_info=epsilons)
        batcher.execute()
        batch = batcher.get()
        returns = (batch.trajectories["next/reward"] * batch.trajectories.mask()).sum(1)
        for eps, length, ret in zip(
            epsilons["epsilon"].tolist(),
            batch.lengths.tolist(),
            returns.tolist(),
            strict=True,
        ):
            print(f"epsilon {eps:.1f}: episode of {length} steps, return {ret:.0f}")


if __name__ == "__main__":
    main()
