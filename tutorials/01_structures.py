"""Tutorial 1: the structures rlstruct's data travels in.

Run it with ``python tutorials/01_structures.py``. It walks through
DictTensor (named tensors sharing a batch dimension), TemporalDictTensor
(padded sequences with lengths and masks), Trajectories (what a batcher
returns) and Specs (how buffers are allocated), printing what each step
produces. ``--quick`` is accepted for uniformity with the other tutorials;
this one is always quick.
"""

from __future__ import annotations

import argparse

import torch

from rlstruct import DictTensor, TemporalDictTensor, Trajectories


def section(title: str) -> None:
    print(f"\n=== {title} ===")


def main() -> None:
    parser = argparse.ArgumentParser(
        description="The structures rlstruct's data travels in."
    )
    parser.add_argument(
        "--quick", action="store_true", help="accepted for uniformity; always quick"
    )
    parser.parse_args()
    torch.manual_seed(0)

    section("DictTensor: one row per environment")
    # Four environments, each with a 3-d observation, a scalar reward and a done flag.
    # Every value has 4 rows: that shared leading dimension is the batch B.
    step = DictTensor(
        {
            "observation": torch.randn(4, 3),
            "reward": torch.tensor([0.0, 1.0, 0.5, 1.0]),
            "done": torch.tensor([False, False, True, False]),
        }
    )
    print(step)
    print("rows:", step.n_elems(), "keys:", list(step.keys()))

    # Rows are indexed like a tensor, and the result is always a DictTensor.
    print("row 2:", step[2]["reward"])
    print("rows 1..2:", step[1:3]["reward"])
    print("rows 3 and 0:", step[torch.tensor([3, 0])]["reward"])
    running = step[~step["done"]]
    print("running rows:", running.n_elems())

    # Filling a preallocated buffer row by row, without casting anything.
    buffer = DictTensor.zeros(step.specs(), 8)
    buffer[4:8] = step
    print("buffer rewards after writing rows 4..7:", buffer["reward"])

    section("Combining DictTensors")
    both = DictTensor.cat([step, step])
    print("cat of two batches:", both.n_elems(), "rows")
    z = DictTensor({"epsilon": torch.tensor([0.0, 0.05, 0.1, 0.2])})
    print("merged keys:", list((step | z.prepend_key("agent_info/")).keys()))
    print(
        "where(done, zeros, step):",
        DictTensor.where(step["done"], buffer[0:4], step)["reward"],
    )

    section("TemporalDictTensor: B rows of up to T steps")
    # Three episodes of lengths 5, 2 and 4, padded to T = 5.
    rewards = torch.ones(3, 5)
    observations = torch.arange(15.0).view(3, 5, 1).expand(3, 5, 2).clone()
    episodes = TemporalDictTensor(
        {"reward": rewards, "observation": observations},
        lengths=torch.tensor([5, 2, 4]),
    )
    print(episodes)
    print("mask:\n", episodes.mask())
    print(
        "returns (masked sum of rewards):",
        (episodes["reward"] * episodes.mask()).sum(1),
    )
    print("step 3 of the episodes still running:", episodes.masked_temporal_index(3)[1])
    last = episodes.temporal_multi_index(episodes.lengths - 1)
    print("last observation of each episode:", last["observation"][:, 0])
    print("all real steps, flattened:", episodes.masked_flatten().n_elems(), "rows")

    # Slicing in time keeps the lengths right; cat pads shorter batches with zeros.
    first_two = episodes.temporal_slice(0, 2)
    print("first two steps, lengths:", first_two.lengths)
    longer = TemporalDictTensor.cat([first_two, episodes])
    print(
        "cat of T=2 and T=5 batches:",
        longer.n_timesteps(),
        "steps, lengths",
        longer.lengths,
    )

    section("Trajectories: per-row info plus the steps")
    info = DictTensor(
        {
            "agent_info/epsilon": torch.tensor([0.0, 0.1, 0.2]),
            "env_info/seed": torch.tensor([7, 8, 9]),
        }
    )
    batch = Trajectories(info, episodes)
    print(
        batch.n_elems(), "trajectories; the second one:", batch[1].info["env_info/seed"]
    )

    section("Specs: per-row shapes and dtypes, allocating shared buffers")
    specs = episodes.specs()
    print(specs)
    shared = TemporalDictTensor.zeros(specs, 16, 32, shared=True)
    print("shared buffer:", shared, "in shared memory:", shared["reward"].is_shared())


if __name__ == "__main__":
    main()
