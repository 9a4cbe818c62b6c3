"""Tutorial 4: collecting in worker processes, blocking, non-blocking and streaming.

Run it with ``python tutorials/04_batchers.py`` (``--quick`` for a shorter
run). It collects CartPole trajectories with a MultiprocessBatcher, shows
that it returns exactly what the in-process LocalBatcher returns, runs an
evaluation batcher in the background while training data keeps coming, and
streams fixed-length trajectories tagged with the policy version that
produced them, as an asynchronous learner (IMPALA) consumes them.
"""

from __future__ import annotations

import argparse
import time

import torch

from rlstruct import (
    Agent,
    DictTensor,
    GymEnv,
    LocalBatcher,
    MultiprocessBatcher,
    TemporalDictTensor,
)


class Policy(Agent):
    """A small MLP policy for CartPole; z holds each row's exploration epsilon."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)  # every copy starts from the same weights
        self.net = torch.nn.Sequential(
            torch.nn.Linear(4, 32), torch.nn.Tanh(), torch.nn.Linear(32, 2)
        )

    def forward(
        self,
        state: DictTensor,
        observation: DictTensor,
        agent_info: DictTensor,
        history: TemporalDictTensor | None = None,
    ) -> tuple[DictTensor, DictTensor]:
        logits = self.net(observation["observation"])
        sampled = torch.multinomial(
            torch.softmax(logits, -1), 1, generator=self.generator
        ).squeeze(1)
        if "epsilon" in agent_info:
            uniform = torch.randint(0, 2, sampled.shape, generator=self.generator)
            explore = (
                torch.rand(sampled.shape, generator=self.generator)
                < agent_info["epsilon"]
            )
            sampled = torch.where(explore, uniform, sampled)
        return DictTensor({"action": sampled, "logits": logits}), state


def main() -> None:
    parser = argparse.ArgumentParser(description="Collecting in worker processes.")
    parser.add_argument(
        "--quick", action="store_true", help="fewer and shorter batches"
    )
    args = parser.parse_args()
    n_timesteps, rounds = (16, 3) if args.quick else (64, 10)
    cartpole = {"env": "CartPole-v1"}
    layout = {"n_envs": 4, "n_timesteps": n_timesteps, "n_processes": 2, "seed": 0}
    epsilons = DictTensor(
        {"epsilon": torch.tensor([0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 0.8, 1.0])}
    )

    # the learner's copy: every batcher's agents act with its weights
    learner = Policy()
    weights = learner.state_dict()

    print("=== Same seeds and layout: the same trajectories as in-process ===")
    with (
        MultiprocessBatcher(
            Policy, {}, GymEnv, cartpole, **layout, weights=weights
        ) as workers,
        LocalBatcher(Policy, {}, GymEnv, cartpole, **layout, weights=weights) as local,
    ):
        for batcher in (workers, local):
            batcher.reset(agent_info=epsilons)  # 8 rows, 8 values of z
            batcher.execute()
        in_workers, in_process = workers.get(), local.get()
        print("identical:", in_workers.equal(in_process))

    print(
        "\n=== Non-blocking: evaluate in the background while training data "
        "keeps coming ==="
    )
    with (
        MultiprocessBatcher(
            Policy, {}, GymEnv, cartpole, **layout, weights=weights
        ) as train,
        MultiprocessBatcher(
            Policy,
            {},
            GymEnv,
            cartpole,
            **{**layout, "n_timesteps": 500, "seed": 100},
            mode="episodes",
            weights=weights,
        ) as evaluation,
    ):
        train.reset(agent_info=epsilons)
        evaluation.reset(agent_info=DictTensor({"epsilon": torch.zeros(8)}))
        evaluation.execute()  # returns at once; the episodes run in the background
        train_batches, report = 0, None
        while report is None:
            train.execute()
            batch = train.get()
            train_batches += 1
            # ... a learner would take a gradient step on `batch` here ...
            train.update(learner.state_dict())
            report = evaluation.get(blocking=False)  # None until the evaluation is done
        print(
            f"{train_batches} training batches of {batch.n_elems()} x {n_timesteps} "
            "steps while evaluating;"
        )
        print("evaluation episode lengths:", report.lengths.tolist())

    print(
        "\n=== Streaming: workers fill free slots, the learner takes finished ones ==="
    )
    with MultiprocessBatcher(
        Policy,
        {},
        GymEnv,
        cartpole,
        **{**layout, "n_processes": 2},
        mode="stream",
        n_slots=4,
        weights=weights,
    ) as stream:
        stream.reset(agent_info=epsilons)
        start = time.perf_counter()
        for step in range(rounds):
            piece = stream.get(max_staleness=2)  # never older than 2 updates
            lag = stream.policy_version() - int(piece.info["policy_version"][0])
            print(f"step {step}: {piece.n_elems()} trajectories, policy lag {lag}")
            # ... a learner step on `piece` here, then a new policy version ...
            stream.update(learner.state_dict())
        rate = rounds * 4 * n_timesteps / (time.perf_counter() - start)
        print(f"{rate:.0f} env steps/s consumed")


if __name__ == "__main__":
    main()
