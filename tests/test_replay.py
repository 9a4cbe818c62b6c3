"""Tests of rlstruct.replay and its sum tree: ring-buffer invariants, sampling laws, relabelling, saving, sharing.

Statistical tests run at fixed seeds, so they give the same answer every time;
their thresholds are far in the tail of the law they check (a chi-square
p-value below 1e-4), so a correct sampler passes at almost any seed while a
wrong law (off by a factor, or ignoring ``alpha``) fails by orders of magnitude.
"""

from __future__ import annotations

import gc
import math
import multiprocessing
import pickle
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from mp_helpers import add_replay_rows, assert_nothing_left_in_shm, replay_rows, shm_entries

from rlstruct import (
    DictTensor,
    HindsightReplayBuffer,
    PrioritizedReplayBuffer,
    ReplayBuffer,
    ReplaySample,
    SequenceReplayBuffer,
    TemporalDictTensor,
)
from rlstruct.replay.sumtree import BRANCHING, SumTree


def seeded(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def rows(ids: range | list[int]) -> DictTensor:
    return replay_rows(torch.as_tensor(list(ids), dtype=torch.int64))


def held_ids(buffer: ReplayBuffer) -> list[int]:
    """The ids in storage order (slot 0 first), read through the saved state."""
    return buffer.state_dict()["storage"]["id"].tolist()


def chi_square(counts: torch.Tensor, expected: torch.Tensor) -> float:
    return float(((counts - expected) ** 2 / expected).sum())


# chi-square quantiles at p = 1e-4, from scipy.stats.chi2.isf(1e-4, df)
CHI2_1E4 = {9: 33.72, 15: 42.58}


# ---------------------------------------------------------------------- ring buffer


def test_add_wraps_around_and_keeps_the_last_capacity_rows() -> None:
    buffer = ReplayBuffer(5, generator=seeded())
    assert len(buffer) == 0 and buffer.capacity == 5 and buffer.specs() is None
    buffer.add(rows(range(3)))
    assert len(buffer) == 3 and held_ids(buffer) == [0, 1, 2]
    buffer.add(rows(range(3, 7)))  # slots 3, 4, then 0, 1
    assert len(buffer) == 5 and held_ids(buffer) == [5, 6, 2, 3, 4]
    assert buffer.state_dict()["position"] == 2
    buffer.add(rows(range(7, 19)))  # more than the capacity: the last 5, as if added one by one
    assert held_ids(buffer) == [15, 16, 17, 18, 14]
    assert buffer.state_dict()["position"] == (2 + 12) % 5
    buffer.add(rows([]))  # zero rows: nothing changes
    assert held_ids(buffer) == [15, 16, 17, 18, 14]


def test_random_adds_match_a_row_by_row_reference() -> None:
    gen = seeded(1)
    buffer = ReplayBuffer(7, generator=seeded())
    reference: list[int | None] = [None] * 7
    position, next_id = 0, 0
    for _ in range(40):
        n = int(torch.randint(0, 20, (), generator=gen))
        buffer.add(rows(range(next_id, next_id + n)))
        for i in range(next_id, next_id + n):
            reference[position] = i
            position = (position + 1) % 7
        next_id += n
        held = [r for r in reference if r is not None]
        assert len(buffer) == len(held)
        assert held_ids(buffer) == held
        assert buffer.state_dict()["position"] == position
    state = buffer.state_dict()["storage"]
    assert torch.equal(state["twice"], 2 * state["id"])


def test_add_trajectories_stores_the_valid_steps_row_after_row() -> None:
    steps = torch.arange(8).view(2, 4)
    trajectories = TemporalDictTensor(
        {"id": steps, "twice": 2 * steps, "obs": steps.double().unsqueeze(2).repeat(1, 1, 3)},
        torch.tensor([3, 2]),
    )
    buffer = ReplayBuffer(10)
    buffer.add_trajectories(trajectories)
    assert held_ids(buffer) == [0, 1, 2, 4, 5]
    only = ReplayBuffer(10)
    only.add_trajectories(trajectories, keys=["id"])
    assert list(only.specs() or {}) == ["id"]
    with pytest.raises(ValueError, match=r"keys \['action'\] are not in the trajectories"):
        only.add_trajectories(trajectories, keys=["action"])
    with pytest.raises(TypeError, match="must be a TemporalDictTensor, got a DictTensor"):
        only.add_trajectories(rows(range(2)))  # type: ignore[arg-type]


def test_add_never_casts_and_names_the_key() -> None:
    buffer = ReplayBuffer(4)
    buffer.add(rows(range(2)))
    with pytest.raises(TypeError, match=r"key 'twice' has dtype torch.int32, expected torch.int64"):
        buffer.add(
            DictTensor(
                {
                    "id": torch.arange(2),
                    "twice": torch.arange(2, dtype=torch.int32),
                    "obs": torch.zeros(2, 3, dtype=torch.float64),
                }
            )
        )
    with pytest.raises(ValueError, match=r"key 'obs' has rows of shape \(4,\), expected \(3,\)"):
        buffer.add(
            DictTensor(
                {
                    "id": torch.arange(2),
                    "twice": torch.arange(2),
                    "obs": torch.zeros(2, 4, dtype=torch.float64),
                }
            )
        )
    with pytest.raises(ValueError, match=r"missing \['twice'\], unexpected \['action'\]"):
        buffer.add(
            DictTensor(
                {
                    "id": torch.arange(2),
                    "action": torch.arange(2),
                    "obs": torch.zeros(2, 3, dtype=torch.float64),
                }
            )
        )
    with pytest.raises(TypeError, match="transitions must be a DictTensor, got a dict"):
        buffer.add({"id": torch.arange(2)})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="at least one key"):
        ReplayBuffer(4).add(DictTensor(batch_size=3))
    assert len(buffer) == 2  # failed adds wrote nothing


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"capacity": 0}, ValueError, "capacity must be at least 1, got 0"),
        ({"capacity": 2.5}, TypeError, "capacity must be an int, got a float"),
        (
            {"capacity": 4, "shared": True, "device": "cuda"},
            ValueError,
            "shared storage must be on the CPU, got device cuda",
        ),
        (
            {"capacity": 4, "generator": 3},
            TypeError,
            "generator must be a torch.Generator or None, got an int",
        ),
        ({"capacity": 4, "timeout": 0}, ValueError, r"timeout must be in \(0, inf\), got 0"),
        ({"capacity": 4, "specs": {"x": 1}}, TypeError, "specs must be a Specs, got a dict"),
    ],
)
def test_constructor_errors(kwargs: dict[str, object], error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        ReplayBuffer(**kwargs)  # type: ignore[arg-type]


def test_a_device_that_cannot_hold_the_rows_is_refused_when_made() -> None:
    with pytest.raises(ValueError, match="ReplayBuffer: device must hold data; 'meta' tensors have none"):
        ReplayBuffer(4, device="meta")
    if not torch.cuda.is_available():
        with pytest.raises(
            ValueError, match="SequenceReplayBuffer: device 'cuda' cannot be used on this machine"
        ):
            SequenceReplayBuffer(4, device="cuda")


def test_cpu_0_is_the_cpu_so_priorities_update_on_the_samples_indices() -> None:
    buffer = PrioritizedReplayBuffer(100, device="cpu:0", generator=seeded())
    assert buffer.device == torch.device("cpu")  # as tensors report it
    buffer.add(rows(range(10)))
    _, indices, _ = buffer.sample(4)
    buffer.update_priorities(indices, torch.ones(4))  # raised: indices is on cpu, expected cpu:0


def test_stored_rows_carry_no_autograd_history() -> None:
    layer = torch.nn.Linear(2, 2)
    for buffer in (ReplayBuffer(10), PrioritizedReplayBuffer(10)):
        buffer.add(DictTensor({"logits": layer(torch.ones(3, 2))}))  # not detached by the caller
        sampled = buffer.sample(4).rows["logits"]
        assert not sampled.requires_grad and sampled.grad_fn is None
        assert not any(v.requires_grad for v in buffer.state_dict()["storage"].values())


def test_a_prioritized_state_is_not_loaded_into_a_uniform_buffer() -> None:
    prioritized = PrioritizedReplayBuffer(10)
    prioritized.add(rows(range(3)))
    with pytest.raises(
        ValueError, match=r"holds priorities \(saved by a PrioritizedReplayBuffer\); load it into one"
    ):
        ReplayBuffer(10).load_state_dict(prioritized.state_dict())


# ---------------------------------------------------------------------- uniform sampling


def test_uniform_sample_frequencies_are_flat() -> None:
    buffer = ReplayBuffer(10, generator=seeded(3))
    buffer.add(rows(range(25)))  # wrapped: ids 15..24 are held
    batch = buffer.sample(20_000).rows
    assert torch.equal(batch["twice"], 2 * batch["id"])
    counts = torch.bincount(batch["id"] - 15, minlength=10).double()
    assert counts.shape == (10,)  # nothing outside the held ids
    assert chi_square(counts, torch.full((10,), 2000.0)) < CHI2_1E4[9]


def test_every_buffer_samples_rows_with_their_slots_and_weights() -> None:
    uniform = ReplayBuffer(8, generator=seeded(3))
    uniform.add(rows(range(11)))  # slots hold ids 8, 9, 10, 3, 4, 5, 6, 7
    prioritized = PrioritizedReplayBuffer(8, generator=seeded(3))
    prioritized.add(rows(range(11)))
    prioritized.update_priorities(torch.arange(8), torch.arange(8, dtype=torch.float32))
    for buffer in (uniform, prioritized):
        sample = buffer.sample(64)
        assert isinstance(sample, ReplaySample)
        rows_, indices, weights = sample  # unpacks like a tuple
        assert indices.dtype == torch.int64 and weights.dtype == torch.float32
        assert indices.shape == weights.shape == (64,)
        assert rows_["id"].tolist() == [held_ids(buffer)[i] for i in indices.tolist()]
    assert torch.equal(uniform.sample(5).weights, torch.ones(5))
    assert not bool((prioritized.sample(64).weights == 1).all())  # unequal priorities: unequal weights
    hindsight = HindsightReplayBuffer(30, reached, k=3, generator=seeded(4))
    hindsight.add_trajectories(goal_episodes([6, 9, 4], 9))
    sample = hindsight.sample(32)
    assert isinstance(sample, ReplaySample) and sample.rows.n_elems() == 32
    assert sample.indices.dtype == torch.int64 and bool((sample.indices < len(hindsight)).all())
    assert torch.equal(sample.weights, torch.ones(32))


def test_sample_returns_new_tensors_and_is_reproducible() -> None:
    buffer = ReplayBuffer(8, generator=seeded(5))
    buffer.add(rows(range(8)))
    first = buffer.sample(16).rows
    first["id"].fill_(-1)
    first["obs"].fill_(-1)
    assert held_ids(buffer) == list(range(8))
    again = ReplayBuffer(8, generator=seeded(5))
    again.add(rows(range(8)))
    torch.manual_seed(0)  # the default generator is seeded from torch's global one
    a = ReplayBuffer(8)
    torch.manual_seed(0)
    b = ReplayBuffer(8)
    for buf in (a, b):
        buf.add(rows(range(8)))
    assert a.sample(32).rows.equal(b.sample(32).rows)
    assert again.sample(16).rows["id"].tolist() != [-1] * 16


def test_a_row_s_keys_lie_side_by_side_and_samples_are_contiguous() -> None:
    # a bool before a float64, an int32 of odd length, a scalar and an empty key: offsets stay aligned
    specs = DictTensor(
        {
            "done": torch.zeros(1, dtype=torch.bool),
            "obs": torch.zeros(1, 3, dtype=torch.float64),
            "ids": torch.zeros(1, 5, dtype=torch.int32),
            "none": torch.zeros(1, 0),
        }
    ).specs()
    buffer = ReplayBuffer(6, specs=specs, generator=seeded(1))
    held = buffer._storage
    assert held is not None
    block = {key: value.untyped_storage().data_ptr() for key, value in held.items() if value.numel()}
    assert len(set(block.values())) == 1  # one allocation for the keys that hold values
    row_bytes = held["obs"].stride(0) * 8
    assert held["done"].stride(0) == row_bytes and held["ids"].stride(0) * 4 == row_bytes
    for key in ("obs", "ids"):
        assert held[key].data_ptr() % held[key].element_size() == 0
    added = DictTensor(
        {
            "done": torch.tensor([True, False, True, True]),
            "obs": torch.arange(12, dtype=torch.float64).view(4, 3),
            "ids": torch.arange(20, dtype=torch.int32).view(4, 5),
            "none": torch.zeros(4, 0),
        }
    )
    buffer.add(added)
    saved = buffer.state_dict()["storage"]
    assert all(value.is_contiguous() for value in saved.values())
    assert DictTensor(saved).equal(added)  # no key wrote over another's bytes
    sample = buffer.sample(8).rows
    assert all(value.is_contiguous() for value in sample.values())
    assert torch.equal(sample["ids"][:, 0] // 5, sample["obs"][:, 0].long() // 3)


def test_sample_errors() -> None:
    buffer = ReplayBuffer(4)
    with pytest.raises(RuntimeError, match="cannot sample from an empty buffer"):
        buffer.sample(2)
    buffer.add(rows(range(2)))
    with pytest.raises(ValueError, match="batch_size must be at least 1, got 0"):
        buffer.sample(0)


# ---------------------------------------------------------------------- sum tree


def slow_tree_check(tree: SumTree, given: dict[int, float]) -> None:
    """Every node against sums and minima recomputed from the leaves, and find against a running sum."""
    leaves = torch.zeros(tree.sums[-1].shape[0], dtype=torch.float64)
    leaves[list(given)] = torch.tensor(list(given.values()), dtype=torch.float64)
    assert torch.equal(tree.get(torch.arange(tree.capacity)), leaves[: tree.capacity])
    for level in range(tree.depth + 1):
        span = BRANCHING ** (tree.depth - level)  # leaves under one node of this level
        for node in range(tree.sums[level].shape[0]):
            under = range(node * span, (node + 1) * span)
            expected_min = min((v for s, v in given.items() if s in under), default=math.inf)
            assert float(tree.sums[level][node]) == pytest.approx(
                float(leaves[under.start : under.stop].sum()), rel=1e-12
            )
            assert float(tree.mins[level][node]) == expected_min
    assert tree.total() == pytest.approx(sum(given.values()), rel=1e-12)
    assert tree.min() == min(given.values(), default=math.inf)
    running = leaves[: tree.capacity].cumsum(0)
    u = torch.rand(500, dtype=torch.float64, generator=seeded(9)) * float(running[-1])
    assert torch.equal(tree.find(u), torch.searchsorted(running, u, right=True))


@pytest.mark.parametrize("capacity", [1, 5, 32, 33, 1500])
def test_sum_tree_matches_a_slow_reference_after_updates(capacity: int) -> None:
    gen = seeded(capacity)
    tree = SumTree(capacity)
    given: dict[int, float] = {}
    for _ in range(6):
        n = int(torch.randint(1, capacity + 1, (), generator=gen))
        slots = torch.randint(0, capacity, (n,), generator=gen)  # with repeats
        values = torch.rand(n, dtype=torch.float64, generator=gen) + 0.01
        tree.update(slots, values)
        for s, v in zip(slots.tolist(), values.tolist(), strict=True):
            given[s] = v  # the last occurrence wins
        slow_tree_check(tree, given)
    full = {s: float(s % 7 + 1) for s in range(capacity)}
    tree.update(torch.arange(capacity), torch.tensor(list(full.values()), dtype=torch.float64))
    slow_tree_check(tree, full)
    loaded = SumTree(capacity)
    loaded.load_(tree.get(torch.arange(capacity)))
    assert all(
        torch.equal(a, b) for a, b in zip(loaded.sums + loaded.mins, tree.sums + tree.mins, strict=True)
    )


def test_sum_tree_takes_numpy_sizes_and_names_bad_arguments() -> None:
    tree = SumTree(np.int64(40))
    assert tree.capacity == 40 and type(tree.capacity) is int
    with pytest.raises(TypeError, match="SumTree: capacity must be an int, got a float"):
        SumTree(10.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="SumTree: capacity must be at least 1, got 0"):
        SumTree(0)
    with pytest.raises(ValueError, match="SumTree: device must name a torch device such as 'cpu'"):
        SumTree(10, device="gpu")


def test_sum_tree_find_never_returns_an_empty_slot() -> None:
    tree = SumTree(100)
    tree.update(torch.tensor([3, 40, 41]), torch.tensor([1e-300, 2.0, 0.1], dtype=torch.float64))
    total = tree.total()
    u = torch.tensor(
        [0.0, total / 2, total, total * (1 + 1e-12), math.nextafter(total, 0)], dtype=torch.float64
    )
    assert set(tree.find(u).tolist()) <= {3, 40, 41}
    assert tree.find(torch.tensor([total], dtype=torch.float64)).tolist() == [41]


# ---------------------------------------------------------------------- prioritized replay


def test_prioritized_frequencies_follow_p_to_the_alpha() -> None:
    buffer = PrioritizedReplayBuffer(16, alpha=0.7, generator=seeded(11))
    buffer.add(rows(range(16)))
    priorities = torch.arange(1, 17, dtype=torch.float32)  # 1 .. 16
    buffer.update_priorities(torch.arange(16), priorities)
    counts = torch.zeros(16, dtype=torch.float64)
    n_batches, batch_size = 200, 256
    for _ in range(n_batches):
        batch, indices, _ = buffer.sample(batch_size)
        assert torch.equal(batch["id"], indices)  # row i was added at slot i
        counts += torch.bincount(indices, minlength=16)
    p = (priorities.double() + buffer.eps) ** 0.7
    expected = p / p.sum() * n_batches * batch_size
    assert chi_square(counts, expected) < CHI2_1E4[15]
    # ignoring alpha (p^1) would be far outside the tolerance
    wrong = priorities.double() / priorities.sum() * n_batches * batch_size
    assert chi_square(counts, wrong) > 10 * CHI2_1E4[15]


def test_prioritized_sampling_is_stratified() -> None:
    buffer = PrioritizedReplayBuffer(4, alpha=1.0, generator=seeded(2))
    buffer.add(rows(range(4)))
    buffer.update_priorities(torch.arange(4), torch.tensor([1.0, 1.0, 1.0, 1.0]))
    for _ in range(20):
        _, indices, _ = buffer.sample(4)  # one draw per quarter of the total: each row exactly once
        assert indices.tolist() == [0, 1, 2, 3]


def test_importance_weights_by_hand() -> None:
    buffer = PrioritizedReplayBuffer(4, alpha=1.0, beta=0.5, eps=1e-9, generator=seeded(4))
    buffer.add(rows(range(4)))
    buffer.update_priorities(torch.arange(4), torch.tensor([1.0, 2.0, 3.0, 4.0]))
    # P = p / 10, N = 4: w = (4 P)^-0.5 / max_j (4 P_j)^-0.5 = (p / 1)^-0.5
    by_hand = torch.tensor([1.0, 1 / math.sqrt(2), 1 / math.sqrt(3), 0.5])
    _, indices, weights = buffer.sample(64)
    assert weights.dtype == torch.float32 and weights.shape == (64,)
    assert torch.allclose(weights, by_hand[indices], atol=1e-6)
    _, indices, weights = buffer.sample(64, beta=1.0)
    assert torch.allclose(weights, (by_hand**2)[indices], atol=1e-6)
    _, _, weights = buffer.sample(8, beta=0.0)
    assert torch.equal(weights, torch.ones(8))


def test_new_rows_get_the_largest_priority_so_far() -> None:
    buffer = PrioritizedReplayBuffer(6, alpha=0.5, eps=1e-6)
    buffer.add(rows(range(2)))
    tree = buffer.sum_tree
    assert tree.get(torch.arange(2)).tolist() == [1.0, 1.0]  # nothing given yet: 1
    buffer.update_priorities(torch.tensor([0, 1, 1]), torch.tensor([8.0, 0.0, 3.0]))  # the last 1 wins
    assert tree.get(torch.arange(2)).tolist() == pytest.approx([(8 + 1e-6) ** 0.5, (3 + 1e-6) ** 0.5])
    buffer.update_priorities(torch.tensor([0]), torch.tensor([0.5]))  # the maximum is not forgotten
    buffer.add(rows(range(2, 5)))
    assert tree.get(torch.arange(2, 5)).tolist() == pytest.approx([(8 + 1e-6) ** 0.5] * 3)
    assert tree.total() == pytest.approx(float(tree.get(torch.arange(6)).sum()))
    buffer.add(rows(range(5, 8)))  # wraps: slots 5, 0, 1 overwritten with the maximum
    assert tree.get(torch.arange(6)).tolist() == pytest.approx([(8 + 1e-6) ** 0.5] * 6)


def test_prioritized_errors() -> None:
    with pytest.raises(ValueError, match=r"alpha must be in \[0, inf\), got -1"):
        PrioritizedReplayBuffer(4, alpha=-1)
    with pytest.raises(ValueError, match=r"beta must be in \[0, 1\], got 1.5"):
        PrioritizedReplayBuffer(4, beta=1.5)
    with pytest.raises(ValueError, match=r"eps must be in \(0, inf\), got 0"):
        PrioritizedReplayBuffer(4, eps=0)
    buffer = PrioritizedReplayBuffer(4)
    with pytest.raises(RuntimeError, match="cannot sample from an empty buffer"):
        buffer.sample(2)
    buffer.add(rows(range(2)))
    with pytest.raises(ValueError, match=r"beta must be in \[0, 1\], got -0.1"):
        buffer.sample(2, beta=-0.1)
    with pytest.raises(ValueError, match=r"beta must be in \[0, 1\], got nan"):
        buffer.beta = math.nan
    update = buffer.update_priorities
    with pytest.raises(
        TypeError, match=r"indices must be an int64 tensor, got a tensor of shape \(1,\), dtype torch.int32"
    ):
        update(torch.tensor([0], dtype=torch.int32), torch.tensor([1.0]))
    with pytest.raises(TypeError, match="priorities must be a floating-point tensor"):
        update(torch.tensor([0]), torch.tensor([1]))
    with pytest.raises(ValueError, match=r"both have shape \[n\], got \(2,\) and \(1,\)"):
        update(torch.tensor([0, 1]), torch.tensor([1.0]))
    with pytest.raises(
        ValueError, match=r"indices must lie in \[0, 2\) \(the rows held\), got values from 0 to 3"
    ):
        update(torch.tensor([0, 3]), torch.tensor([1.0, 1.0]))
    with pytest.raises(ValueError, match="priorities must be finite and >= 0"):
        update(torch.tensor([0, 1]), torch.tensor([1.0, -2.0]))
    with pytest.raises(ValueError, match="priorities must be finite and >= 0"):
        update(torch.tensor([0]), torch.tensor([math.inf]))
    # a NaN made aminmax say "got values from nan to nan": the message names the first bad value
    with pytest.raises(
        ValueError, match=re.escape("priorities must be finite and >= 0, got priorities[1] = nan")
    ):
        update(torch.tensor([0, 1]), torch.tensor([1.0, math.nan]))
    with pytest.raises(ValueError, match=re.escape("got priorities[1] = -2.0")):
        update(torch.tensor([0, 1, 0]), torch.tensor([1.0, -2.0, math.nan]))
    with pytest.raises(ValueError, match="indices is on meta, expected cpu"):
        update(torch.tensor([0], device="meta"), torch.tensor([1.0]))


# ---------------------------------------------------------------------- hindsight relabelling


def reached(achieved: torch.Tensor, desired: torch.Tensor) -> torch.Tensor:
    """1 where the goal is reached, else 0 (float32, shape [n])."""
    return (achieved == desired).all(1).float()


def goal_episodes(
    lengths: list[int], n_timesteps: int, done_at: dict[int, int] | None = None
) -> TemporalDictTensor:
    """Rows of steps whose achieved goal is (row, step + 1) after step t; the desired goal is (-1, -1).

    ``done_at`` ends an episode inside a row (row -> step): the next episode of the row starts after it.
    """
    b = len(lengths)
    t = torch.arange(n_timesteps).expand(b, n_timesteps)
    row = torch.arange(b).unsqueeze(1).expand(b, n_timesteps)
    done = t == torch.tensor(lengths).unsqueeze(1) - 1
    for r, step in (done_at or {}).items():
        done[r, step] = True
    return TemporalDictTensor(
        {
            "row": row,
            "t": t,
            "achieved_goal": torch.stack([row, t], 2).float(),
            "desired_goal": torch.full((b, n_timesteps, 2), -1.0),
            "next/achieved_goal": torch.stack([row, t + 1], 2).float(),
            "next/desired_goal": torch.full((b, n_timesteps, 2), -1.0),
            "next/reward": torch.zeros(b, n_timesteps),
            "next/done": done,
        },
        torch.tensor(lengths),
    )


def check_relabelling(batch: DictTensor, episode_end: torch.Tensor, strategy: str) -> torch.Tensor:
    """Goals come from the same row, at or after the step, within the episode; rewards follow. Returns the mask."""
    goal = batch["desired_goal"]
    assert torch.equal(goal, batch["next/desired_goal"])
    relabelled = goal[:, 0] >= 0
    kept = ~relabelled
    assert bool((goal[kept] == -1).all()) and bool((batch["next/reward"][kept] == 0).all())
    g = goal[relabelled].long()
    row, t = batch["row"][relabelled], batch["t"][relabelled]
    assert torch.equal(g[:, 0], row)  # the same episode
    later = g[:, 1] - 1  # the step whose next/achieved_goal it is
    end = episode_end[row, t]
    assert bool((later >= t).all()) and bool((later <= end).all())
    if strategy == "final":
        assert torch.equal(later, end)
    expected = (later == t).float()  # the goal is reached only if it is this transition's own
    assert torch.equal(batch["next/reward"][relabelled], expected)
    return relabelled


def episode_ends(trajectories: TemporalDictTensor) -> torch.Tensor:
    """[B, T]: the last step of the episode each step belongs to, by a plain loop."""
    b, n = trajectories.n_elems(), trajectories.n_timesteps()
    ends = torch.zeros(b, n, dtype=torch.int64)
    for r in range(b):
        end = int(trajectories.lengths[r]) - 1
        for t in reversed(range(n)):
            if t < end and bool(trajectories["next/done"][r, t]):
                end = t
            ends[r, t] = end
    return ends


@pytest.mark.parametrize("strategy", ["future", "final"])
def test_hindsight_goals_come_from_later_in_the_same_episode(strategy: str) -> None:
    trajectories = goal_episodes([6, 3, 8], 8, done_at={2: 4})  # row 2 holds two episodes
    buffer = HindsightReplayBuffer(100, reached, strategy=strategy, k=4, generator=seeded(6))
    buffer.add_trajectories(trajectories)
    assert len(buffer) == 17
    batch = buffer.sample(4000).rows
    assert "hindsight/steps_left" not in batch
    relabelled = check_relabelling(batch, episode_ends(trajectories), strategy)
    fraction = float(relabelled.double().mean())
    assert abs(fraction - 4 / 5) < 0.03  # 6 standard deviations of a binomial(4000, 0.8) fraction
    if strategy == "future":  # every later step of a long episode is drawn, about equally
        first = relabelled & (batch["row"] == 0) & (batch["t"] == 0)
        counts = torch.bincount(batch["desired_goal"][first][:, 1].long() - 1, minlength=6)
        assert counts.shape == (6,) and bool((counts > 0).all())
        assert chi_square(counts.double(), torch.full((6,), counts.sum() / 6.0)) < 25.7  # df 5, p 1e-4


def test_hindsight_ring_buffer_keeps_goals_inside_the_episode() -> None:
    trajectories = goal_episodes([7, 5, 6], 7)
    buffer = HindsightReplayBuffer(10, reached, k=2, generator=seeded(7))  # 18 steps: wraps mid-episode
    buffer.add_trajectories(trajectories)
    buffer.add_trajectories(goal_episodes([4], 7))  # row 0 again, a later episode
    assert len(buffer) == 10
    batch = buffer.sample(2000).rows
    assert set(batch["row"].tolist()) <= {0, 1, 2}
    ends = torch.zeros(3, 7, dtype=torch.int64)
    ends[0], ends[1], ends[2] = 3, 4, 5  # the episodes held: row 0 is now the 4-step one
    relabelled = check_relabelling(batch, ends, "future")
    assert abs(float(relabelled.double().mean()) - 2 / 3) < 0.04


def test_hindsight_k_zero_keeps_every_goal_and_reward() -> None:
    buffer = HindsightReplayBuffer(50, reached, k=0)
    buffer.add_trajectories(goal_episodes([5, 5], 5))
    batch = buffer.sample(200).rows
    assert bool((batch["desired_goal"] == -1).all()) and bool((batch["next/reward"] == 0).all())


def test_hindsight_errors() -> None:
    with pytest.raises(ValueError, match="strategy must be 'future' or 'final', got 'episode'"):
        HindsightReplayBuffer(10, reached, strategy="episode")
    with pytest.raises(ValueError, match="HindsightReplayBuffer: k must be at least 0, got -1"):
        HindsightReplayBuffer(10, reached, k=-1)
    with pytest.raises(TypeError, match="HindsightReplayBuffer: k must be an int, got a float"):
        HindsightReplayBuffer(10, reached, k=1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="HindsightReplayBuffer: capacity must be at least 1, got 0"):
        HindsightReplayBuffer(0, reached)
    with pytest.raises(
        ValueError, match="HindsightReplayBuffer: desired_goal_keys must name at least one key"
    ):
        HindsightReplayBuffer(10, reached, desired_goal_keys=[])  # sample would fail with an IndexError
    with pytest.raises(ValueError, match="ReplayBuffer: device must name a torch device such as 'cpu'"):
        ReplayBuffer(10, device="foo")
    with pytest.raises(
        TypeError, match=r"ReplayBuffer: device must be a str, a torch\.device or an int, got a float"
    ):
        ReplayBuffer(10, device=3.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="reward_fn must be callable, got an int"):
        HindsightReplayBuffer(10, 3)  # type: ignore[arg-type]
    trajectories = goal_episodes([3], 3)
    buffer = HindsightReplayBuffer(10, reached)
    with pytest.raises(ValueError, match=r"lack the keys \['next/reward'\]"):
        buffer.add_trajectories(
            trajectories,
            keys=["achieved_goal", "desired_goal", "next/achieved_goal", "next/desired_goal", "next/done"],
        )
    with pytest.raises(ValueError, match="done key 'next/done' is not in the trajectories"):
        buffer.add_trajectories(
            trajectories.get(["desired_goal", "next/achieved_goal", "next/desired_goal", "next/reward"])
        )
    bad_goal = trajectories.get([k for k in trajectories if k != "desired_goal"])
    bad_goal.set("desired_goal", torch.zeros(1, 3, 2, dtype=torch.float64))
    with pytest.raises(
        TypeError,
        match=r"key 'desired_goal' has dtype torch.float64, expected torch.float32 \(the dtype of 'next/achieved_goal'\)",
    ):
        buffer.add_trajectories(bad_goal)
    with pytest.raises(RuntimeError, match="cannot sample from an empty buffer"):
        buffer.sample(1)
    wrong = HindsightReplayBuffer(10, lambda achieved, desired: reached(achieved, desired).double(), k=1000)
    wrong.add_trajectories(trajectories)
    with pytest.raises(
        TypeError,
        match=r"reward_fn must return a tensor of dtype torch.float32 \(the stored 'next/reward'\), got a tensor of shape \(4,\), dtype torch.float64",
    ):
        wrong.sample(4)
    short = HindsightReplayBuffer(10, lambda achieved, desired: reached(achieved, desired)[:1])
    short.add_trajectories(trajectories)
    with pytest.raises(ValueError, match=r"reward_fn must return shape \(4,\) on cpu"):
        short.sample(4)


# ---------------------------------------------------------------------- saving


def test_save_load_round_trip_uniform(tmp_path: Path) -> None:
    buffer = ReplayBuffer(6, generator=seeded(8))
    buffer.add(rows(range(9)))
    buffer.sample(5)  # move the generator
    buffer.save(tmp_path / "buffer.pt")
    expected = buffer.sample(10).rows
    restored = ReplayBuffer(6, generator=seeded(123))
    restored.load(tmp_path / "buffer.pt")
    assert len(restored) == 6 and held_ids(restored) == held_ids(buffer)
    assert restored.state_dict()["position"] == buffer.state_dict()["position"] == 3
    assert restored.sample(10).rows.equal(expected)
    restored.add(rows([100]))
    buffer.add(rows([100]))
    assert held_ids(restored) == held_ids(buffer)
    with pytest.raises(ValueError, match="the state has capacity 6, this buffer 7"):
        ReplayBuffer(7).load(tmp_path / "buffer.pt")
    other = ReplayBuffer(6)
    other.add(DictTensor({"id": torch.arange(2)}))
    with pytest.raises(ValueError, match=r"unexpected \['obs', 'twice'\]"):
        other.load(tmp_path / "buffer.pt")
    with pytest.raises(ValueError, match=r"state lacks the entries \['generator'\]"):
        other.load_state_dict({"capacity": 6, "position": 0, "size": 0, "storage": None})


@pytest.mark.parametrize("kind", ["uniform", "prioritized", "hindsight"])
def test_save_and_load_name_a_bad_path(tmp_path: Path, kind: str) -> None:
    if kind == "hindsight":
        buffer: ReplayBuffer | HindsightReplayBuffer = HindsightReplayBuffer(30, reached, k=3)
        buffer.add_trajectories(goal_episodes([6], 9))
        name = "HindsightReplayBuffer"
    else:
        buffer = ReplayBuffer(6) if kind == "uniform" else PrioritizedReplayBuffer(6)
        buffer.add(rows(range(3)))
        name = type(buffer).__name__
    missing = tmp_path / "no_such_folder" / "buffer.pt"
    with pytest.raises(
        FileNotFoundError, match=re.escape(f"{name}.save: the folder of path {str(missing)!r}")
    ):
        buffer.save(missing)  # torch said "Parent directory ... does not exist", a RuntimeError
    with pytest.raises(IsADirectoryError, match=re.escape(f"{name}.save: path must name the file to write")):
        buffer.save(tmp_path)
    with pytest.raises(TypeError, match=f"{name}.save: path must be a str or os.PathLike, got a NoneType"):
        buffer.save(None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=f"{name}.save: path must name the file to write, got ''"):
        buffer.save("")
    with pytest.raises(FileNotFoundError, match=re.escape(f"{name}.load: there is no file {str(missing)!r}")):
        buffer.load(missing)
    with pytest.raises(IsADirectoryError, match=f"{name}.load: path must name a file written by save"):
        buffer.load(tmp_path)
    with pytest.raises(ValueError, match=f"{name}.load: path must name a file written by save, got ''"):
        buffer.load("")
    (tmp_path / "empty.pt").write_bytes(b"")
    with pytest.raises(ValueError, match=f"{name}.load: .* is empty, not a buffer written by save"):
        buffer.load(tmp_path / "empty.pt")
    (tmp_path / "notes.txt").write_text("hello")  # torch.load said only "KeyError: 101"
    with pytest.raises(ValueError, match=f"{name}.load: .* is not a buffer written by save"):
        buffer.load(tmp_path / "notes.txt")
    buffer.save(tmp_path / "buffer.pt")
    buffer.load(tmp_path / "buffer.pt")


def test_save_load_round_trip_prioritized(tmp_path: Path) -> None:
    buffer = PrioritizedReplayBuffer(50, alpha=0.6, beta=0.5, generator=seeded(10))
    buffer.add(rows(range(70)))
    _, indices, _ = buffer.sample(32)
    buffer.update_priorities(indices, torch.rand(32, generator=seeded(1)) * 4)
    buffer.beta = 0.7
    buffer.save(tmp_path / "per.pt")
    restored = PrioritizedReplayBuffer(50, alpha=0.6)
    restored.load(tmp_path / "per.pt")
    assert restored.beta == 0.7
    for mine, theirs in zip(
        buffer.sum_tree.sums + buffer.sum_tree.mins,
        restored.sum_tree.sums + restored.sum_tree.mins,
        strict=True,
    ):
        assert torch.equal(mine, theirs)  # bit for bit
    for a, b in ((buffer, restored), (restored, buffer)):
        batch, indices, weights = a.sample(16)
        other_batch, other_indices, other_weights = b.sample(16)
        assert (
            batch.equal(other_batch)
            and torch.equal(indices, other_indices)
            and torch.equal(weights, other_weights)
        )
    buffer.add(rows([500]))
    restored.add(rows([500]))  # the largest priority was restored too
    assert torch.equal(buffer.sum_tree.get(torch.arange(50)), restored.sum_tree.get(torch.arange(50)))
    with pytest.raises(ValueError, match=r"the state has alpha=0\.6, this buffer alpha=0\.5"):
        PrioritizedReplayBuffer(50, alpha=0.5).load(tmp_path / "per.pt")


def test_save_load_round_trip_hindsight(tmp_path: Path) -> None:
    buffer = HindsightReplayBuffer(30, reached, k=3, generator=seeded(12))
    buffer.add_trajectories(goal_episodes([6, 9, 4], 9))
    buffer.save(tmp_path / "her.pt")
    restored = HindsightReplayBuffer(30, reached, k=3)
    restored.load(tmp_path / "her.pt")
    assert restored.sample(64).rows.equal(buffer.sample(64).rows)
    with pytest.raises(ValueError, match="the state has k=3, this buffer k=2"):
        HindsightReplayBuffer(30, reached, k=2).load(tmp_path / "her.pt")


def test_hindsight_errors_of_the_storage_name_the_hindsight_buffer(tmp_path: Path) -> None:
    buffer = HindsightReplayBuffer(30, reached, k=3)
    buffer.add_trajectories(goal_episodes([6], 9))
    buffer.save(tmp_path / "her.pt")
    with pytest.raises(
        ValueError, match=r"HindsightReplayBuffer\.load_state_dict: the state has capacity 30, this buffer 31"
    ):
        HindsightReplayBuffer(31, reached, k=3).load(tmp_path / "her.pt")
    extra = goal_episodes([6], 9)
    extra.set("more", torch.zeros(1, 9))
    with pytest.raises(ValueError, match=r"HindsightReplayBuffer.add_trajectories: expected the keys"):
        buffer.add_trajectories(extra)
    with pytest.raises(RuntimeError, match="HindsightReplayBuffer: a shared buffer needs its storage"):
        pickle.dumps(HindsightReplayBuffer(10, reached, shared=True))


def test_hindsight_k_given_as_a_numpy_int_saves_and_loads(tmp_path: Path) -> None:
    buffer = HindsightReplayBuffer(30, reached, k=np.int64(3), generator=seeded(12))
    assert type(buffer.k) is int
    buffer.add_trajectories(goal_episodes([6, 9, 4], 9))
    buffer.save(tmp_path / "her.pt")  # weights_only=True loads Python numbers, not NumPy scalars
    restored = HindsightReplayBuffer(30, reached, k=3)
    restored.load(tmp_path / "her.pt")
    assert restored.sample(64).rows.equal(buffer.sample(64).rows)


# ---------------------------------------------------------------------- shared storage


def test_a_spawned_process_writes_into_a_shared_buffer() -> None:
    shm_before = shm_entries()
    specs = rows([0]).specs()
    buffer = PrioritizedReplayBuffer(
        1000, alpha=0.5, shared=True, specs=specs, generator=seeded(13), timeout=60
    )
    buffer.add(rows(range(4)))
    buffer.update_priorities(
        torch.arange(4), torch.tensor([1.0, 1.0, 1.0, 9.0])
    )  # the largest is now 9 + eps
    ctx = multiprocessing.get_context("spawn")
    writer = ctx.Process(target=add_replay_rows, args=(buffer, 1000, 60, 5), daemon=True)
    writer.start()
    try:
        add_replay_rows(buffer, 5000, 60, 3)  # the parent adds at the same time
        writer.join(timeout=120)
        assert writer.exitcode == 0, f"the writer ended with exit code {writer.exitcode}"
    finally:
        if writer.is_alive():
            writer.kill()
            writer.join(timeout=10)
    assert len(buffer) == 4 + 300 + 180
    held = buffer.state_dict()["storage"]
    assert sorted(held["id"].tolist()) == sorted([*range(4), *range(1000, 1300), *range(5000, 5180)])
    assert torch.equal(held["twice"], 2 * held["id"])  # no row was torn by the concurrent adds
    assert torch.equal(held["obs"], held["id"].double().unsqueeze(1).repeat(1, 3))
    leaves = buffer.sum_tree.get(torch.arange(len(buffer)))
    assert leaves[4:].tolist() == pytest.approx([(9 + buffer.eps) ** 0.5] * 480)  # the writer saw the maximum
    batch, indices, _ = buffer.sample(256)
    assert torch.equal(batch["id"], held["id"][indices])
    with pytest.raises(RuntimeError, match="needs its storage before it is handed to another process"):
        pickle.dumps(ReplayBuffer(4, shared=True))
    del buffer, batch, held
    gc.collect()
    assert_nothing_left_in_shm(shm_before)


def test_a_held_lock_times_out_with_a_clear_error() -> None:
    buffer = ReplayBuffer(4, shared=True, timeout=0.05)
    buffer.add(rows(range(2)))
    assert buffer.shared and buffer.state_dict()["storage"]["id"].tolist() == [0, 1]
    assert buffer._lock.acquire(timeout=1)  # as a process that died while adding would leave it
    try:
        with pytest.raises(
            TimeoutError, match=r"ReplayBuffer.sample: could not take the shared buffer's lock within 0.05 s"
        ):
            buffer.sample(1)
        with pytest.raises(TimeoutError, match=r"ReplayBuffer\.add: could not take"):
            buffer.add(rows([5]))
    finally:
        buffer._lock.release()
    assert len(buffer) == 2


# ---------------------------------------------------------------------- devices


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_storage_samples_and_priorities_on_the_device() -> None:
    buffer = PrioritizedReplayBuffer(100, device="cuda", generator=torch.Generator("cuda").manual_seed(0))
    buffer.add(rows(range(150)))  # CPU rows, copied to the device
    batch, indices, weights = buffer.sample(64)
    assert batch.device == indices.device == weights.device == buffer.device
    assert torch.equal(batch["twice"], 2 * batch["id"])
    buffer.update_priorities(indices, torch.rand(64, device="cuda"))
    with pytest.raises(ValueError, match="priorities is on cpu, expected cuda"):
        buffer.update_priorities(indices, torch.rand(64))
    uniform = ReplayBuffer(10, device="cuda")
    uniform.add(rows(range(3)).to("cuda"))
    assert uniform.sample(4).rows.device == buffer.device


def test_a_saved_state_that_requires_grad_is_loaded_without_it() -> None:
    source = ReplayBuffer(10)
    source.add(rows(range(3)))
    state = source.state_dict()
    state["storage"] = {k: v.float().requires_grad_(True) * 1.0 for k, v in state["storage"].items()}
    buffer = ReplayBuffer(10)
    buffer.load_state_dict(state)
    assert not any(v.requires_grad for v in buffer.state_dict()["storage"].values())
    assert not buffer.sample(2).rows["id"].requires_grad
