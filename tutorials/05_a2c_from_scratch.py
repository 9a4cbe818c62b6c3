"""Tutorial 5: a recurrent actor-critic written from scratch with rlstruct's pieces.

Run it with ``python tutorials/05_a2c_from_scratch.py`` (``--quick`` for a
tiny budget). Everything an A2C learner with memory needs is here, top to
bottom:

1. an ``Agent`` with two GRU memories, one under the policy and one under
   the value: a shared one is pulled around by the value's large errors and
   the policy then learns nothing;
2. its ``forward_sequence``: the whole ``[B, T]`` batch in one GRU call per
   memory (``run_memory`` restarts the memory where an episode began);
3. a ``MultiprocessBatcher`` collecting fixed-length trajectories in two
   worker processes, episodes and memories carrying over from one batch to
   the next, starting from the learner's weights (``weights=``);
4. ``replay_agent``: the agent re-run over the batch with gradients, from the
   memory stored when each row began;
5. ``gae`` for the advantages, bootstrapping from the value of the reached
   observation: one more step of the value memory stored after each step;
6. one gradient step (the policy's and the value's gradients clipped apart),
   then ``update`` pushes the weights to the workers; a greedy evaluation at
   the end.

On the 2-core machine (seed 0) the training returns climb from about 20 to
230-310 over the 256k env steps, and the final greedy return is 225.8.
``rlstruct train a2c --recurrent`` is the full version (logging, evaluation,
checkpoints).
"""

from __future__ import annotations

import argparse

import torch

from rlstruct import (
    Agent,
    DictTensor,
    GymEnv,
    MultiprocessBatcher,
    TemporalDictTensor,
    gae,
    replay_agent,
)
from rlstruct.algos.evaluation import Evaluator
from rlstruct.learning.actor_critic import run_memory


class GRUActorCritic(Agent):
    """A GRU memory and a head for the policy, another pair for the value (CartPole)."""

    def __init__(self, hidden: int = 64) -> None:
        super().__init__()
        self.policy_memory = torch.nn.GRU(4, hidden, batch_first=True)
        self.value_memory = torch.nn.GRU(4, hidden, batch_first=True)
        self.policy = torch.nn.Sequential(
            torch.nn.Linear(hidden, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, 2)
        )
        self.value = torch.nn.Sequential(
            torch.nn.Linear(hidden, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, 1)
        )
        with torch.no_grad():
            self.policy[-1].weight.mul_(0.01)  # an almost uniform first policy

    def initial_state(self, agent_info: DictTensor, n: int) -> DictTensor:
        size = self.policy_memory.hidden_size
        return DictTensor({"h_pi": torch.zeros(n, size), "h_v": torch.zeros(n, size)})

    def forward(
        self,
        state: DictTensor,
        observation: DictTensor,
        agent_info: DictTensor,
        history: TemporalDictTensor | None = None,
    ) -> tuple[DictTensor, DictTensor]:
        # [B, 1, 4]: one step of each memory
        x = observation["observation"].unsqueeze(1)
        h_pi = self.policy_memory(x, state["h_pi"].unsqueeze(0))[1].squeeze(0)
        h_v = self.value_memory(x, state["h_v"].unsqueeze(0))[1].squeeze(0)
        logits = self.policy(h_pi)
        action = torch.multinomial(
            logits.softmax(-1), 1, generator=self.generator
        ).squeeze(-1)
        if "greedy" in agent_info:  # evaluation
            action = torch.where(agent_info["greedy"], logits.argmax(-1), action)
        # "h_v" is also an output: the value of the observation reached after this
        # step needs it
        out = {
            "action": action,
            "logits": logits,
            "value": self.value(h_v).squeeze(-1),
            "h_v": h_v,
        }
        return DictTensor(out), DictTensor({"h_pi": h_pi, "h_v": h_v})

    def forward_sequence(
        self,
        state: DictTensor,
        observation: TemporalDictTensor,
        agent_info: DictTensor,
        history: TemporalDictTensor | None = None,
    ) -> TemporalDictTensor:
        x, starts = observation["observation"], observation["initial_state"]
        # [B, T, hidden]
        h_pi = run_memory(self.policy_memory, x, [state["h_pi"]], starts)
        h_v = run_memory(self.value_memory, x, [state["h_v"]], starts)
        return TemporalDictTensor(
            {"logits": self.policy(h_pi), "value": self.value(h_v).squeeze(-1)},
            observation.lengths,
        )

    def value_after(
        self, next_observation: torch.Tensor, h_v: torch.Tensor
    ) -> torch.Tensor:
        """V [N] of observations [N, 4] reached from value memories [N, hidden]."""
        h = self.value_memory(next_observation.unsqueeze(1), h_v.unsqueeze(0))[
            1
        ].squeeze(0)
        return self.value(h).squeeze(-1)  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser(
        description="A recurrent actor-critic from scratch."
    )
    parser.add_argument("--quick", action="store_true", help="a tiny budget")
    args = parser.parse_args()
    iterations = 5 if args.quick else 1_000  # 256 env steps each
    torch.set_num_threads(1)
    torch.manual_seed(0)
    learner = GRUActorCritic()
    optimizer = torch.optim.Adam(learner.parameters(), lr=1e-3, eps=1e-5)
    batcher = MultiprocessBatcher(
        GRUActorCritic,
        {},
        GymEnv,
        {"env": "CartPole-v1"},
        n_envs=8,
        n_timesteps=16,
        n_processes=2,
        seed=0,
        # the workers act with the learner's weights from the first step
        weights=learner.state_dict(),
    )
    evaluator = Evaluator(
        GRUActorCritic, {}, "CartPole-v1", n_episodes=10, max_steps=500, seed=10**6
    )
    running = torch.zeros(16)  # the return of each row's current episode
    finished: list[float] = []
    with batcher, evaluator:
        batcher.reset()
        for iteration in range(1, iterations + 1):
            batcher.execute()
            batch = batcher.get()
            # [16 rows, 16 steps], every row full in "fixed" mode
            steps = batch.trajectories

            # Returns of the episodes that ended in this batch, for printing.
            for t in range(steps.n_timesteps()):
                running += steps["next/reward"][:, t]
                ended = steps["next/done"][:, t]
                finished.extend(running[ended].tolist())
                running[ended] = 0.0

            # The agent again, with gradients, seeing what it saw while collecting.
            out = replay_agent(learner, batch)  # forward_sequence: one call per memory
            with torch.no_grad():
                next_obs, h_v = (
                    steps["next/observation"].flatten(0, 1),
                    steps["h_v"].flatten(0, 1),
                )
                next_value = learner.value_after(next_obs, h_v).view(
                    steps["value"].shape
                )
                advantage = gae(
                    steps["next/reward"],
                    value=out["value"],
                    next_value=next_value,
                    terminated=steps["next/terminated"],
                    done=steps["next/done"],
                    gamma=0.99,
                    lam=0.95,
                )
                target = advantage + out["value"]
                advantage = (advantage - advantage.mean()) / (advantage.std() + 1e-8)
            log_prob = (
                out["logits"]
                .log_softmax(-1)
                .gather(-1, steps["action"].unsqueeze(-1))
                .squeeze(-1)
            )
            loss = (
                -(log_prob * advantage).mean()
                + 0.5 * (out["value"] - target).pow(2).mean()
            )

            # the learning rate decays linearly to 0
            for group in optimizer.param_groups:
                group["lr"] = 1e-3 * (1 - (iteration - 1) / iterations)
            optimizer.zero_grad()
            loss.backward()
            for part in (
                [learner.policy_memory, learner.policy],
                [learner.value_memory, learner.value],
            ):
                torch.nn.utils.clip_grad_norm_(
                    [p for m in part for p in m.parameters()], 0.5
                )
            optimizer.step()
            # one copy per tensor into shared memory
            batcher.update(learner.state_dict())

            if iteration % (1 if args.quick else 100) == 0:
                mean = sum(finished) / len(finished) if finished else float("nan")
                print(
                    f"iteration {iteration}: {iteration * 256} env steps, "
                    f"loss {loss.item():.3f}, "
                    f"{len(finished)} episodes ended, mean return {mean:.1f}"
                )
                finished.clear()
        result = evaluator.evaluate(learner.state_dict(), iterations * 256)
    print(f"final greedy return {result.mean:.1f} over {len(result.returns)} episodes")


if __name__ == "__main__":
    main()
