"""Tutorial 5: an actor-critic written from scratch with rlstruct's pieces.

Run it with ``python tutorials/05_a2c_from_scratch.py`` (``--quick`` for a
tiny budget). Everything an A2C learner needs is here, top to bottom:

1. an ``Agent`` with a GRU memory, a policy head and a value head;
2. a ``MultiprocessBatcher`` collecting fixed-length trajectories in two
   worker processes, episodes carrying over from one batch to the next;
3. ``replay_agent``: the agent re-run over the batch with gradients, its GRU
   state starting from the one stored at collection and reset where episodes
   began;
4. ``gae`` for the advantages, bootstrapping from the value of the reached
   observation where the batch ends or an episode was truncated;
5. one gradient step, then ``update`` pushes the weights to the workers.

``rlstruct train a2c`` is the full version (logging, evaluation, checkpoints).
"""

from __future__ import annotations

import argparse

import torch

from rlstruct import Agent, DictTensor, GymEnv, MultiprocessBatcher, TemporalDictTensor, gae, replay_agent


class GRUActorCritic(Agent):
    """A GRU over CartPole's observations, with a policy and a value head."""

    def __init__(self, hidden: int = 32) -> None:
        super().__init__()
        torch.manual_seed(0)  # reproducible initial weights
        self.cell = torch.nn.GRUCell(4, hidden)
        self.policy = torch.nn.Linear(hidden, 2)
        self.value = torch.nn.Linear(hidden, 1)

    def initial_state(self, agent_info: DictTensor, n: int) -> DictTensor:
        return DictTensor({"h": torch.zeros(n, self.cell.hidden_size)})

    def forward(
        self,
        state: DictTensor,
        observation: DictTensor,
        agent_info: DictTensor,
        history: TemporalDictTensor | None = None,
    ) -> tuple[DictTensor, DictTensor]:
        h = self.cell(observation["observation"], state["h"])
        logits = self.policy(h)
        action = torch.multinomial(logits.softmax(-1), 1, generator=self.generator).squeeze(-1)
        # "h" is also an output: the value of the observation reached after this step needs it
        out = {"action": action, "logits": logits, "value": self.value(h).squeeze(-1), "h": h}
        return DictTensor(out), DictTensor({"h": h})


def main() -> None:
    parser = argparse.ArgumentParser(description="An actor-critic from scratch.")
    parser.add_argument("--quick", action="store_true", help="a tiny budget")
    args = parser.parse_args()
    iterations = 5 if args.quick else 1500
    torch.set_num_threads(1)
    learner = GRUActorCritic()
    optimizer = torch.optim.Adam(learner.parameters(), lr=2e-3)
    batcher = MultiprocessBatcher(
        GRUActorCritic,
        {},
        GymEnv,
        {"env": "CartPole-v1"},
        n_envs=8,
        n_timesteps=16,
        n_processes=2,
        seed=0,
        weights=learner.state_dict(),  # the workers act with the learner's weights from the first step
    )
    running = torch.zeros(16)  # the return of each row's current episode
    finished: list[float] = []
    with batcher:
        batcher.reset()
        for iteration in range(1, iterations + 1):
            batcher.execute()
            batch = batcher.get()
            steps = batch.trajectories  # [16 rows, 16 steps], every row full in "fixed" mode

            # Returns of the episodes that ended in this batch, for printing.
            for t in range(steps.n_timesteps()):
                running += steps["next/reward"][:, t]
                ended = steps["next/done"][:, t]
                finished.extend(running[ended].tolist())
                running[ended] = 0.0

            # The agent again, with gradients, seeing what it saw while collecting.
            out = replay_agent(learner, batch)
            with torch.no_grad():
                h_after = out["h"].flatten(0, 1)
                next_obs = steps["next/observation"].flatten(0, 1)
                next_value = learner.value(learner.cell(next_obs, h_after)).view(steps["value"].shape)
                advantage = gae(
                    steps["next/reward"],
                    out["value"],
                    next_value,
                    steps["next/terminated"],
                    steps["next/done"],
                    gamma=0.99,
                    lam=0.95,
                )
                target = advantage + out["value"]
                advantage = (advantage - advantage.mean()) / (advantage.std() + 1e-8)
            log_prob = out["logits"].log_softmax(-1).gather(-1, steps["action"].unsqueeze(-1)).squeeze(-1)
            loss = -(log_prob * advantage).mean() + 0.5 * (out["value"] - target).pow(2).mean()

            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(learner.parameters(), 0.5)
            optimizer.step()
            batcher.update(learner.state_dict())  # one copy per tensor into shared memory

            if iteration % (1 if args.quick else 100) == 0:
                mean = sum(finished) / len(finished) if finished else float("nan")
                print(
                    f"iteration {iteration}: {iteration * 256} env steps, loss {loss.item():.3f}, "
                    f"{len(finished)} episodes ended, mean return {mean:.1f}"
                )
                finished.clear()


if __name__ == "__main__":
    main()
