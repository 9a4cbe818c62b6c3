"""Tests of rlstruct.replay.sequence: chunks in and out, burn-in, replaying an agent, priorities, saving, sharing.

Chunks are built so that every value names its chunk and step (``id`` is
``100 * chunk + step``), so that a sampled chunk can be checked against the
row it came from. The sampling laws themselves are the chunk store's
(``ReplayBuffer``, ``PrioritizedReplayBuffer``), tested in test_replay.py;
here a chi-square test only checks that chunks follow their priorities.
"""

from __future__ import annotations

import gc
import multiprocessing
import pickle
import re
from pathlib import Path

import pytest
import torch
from mp_helpers import assert_nothing_left_in_shm, shm_entries

from rlstruct import (
    DictTensor,
    GymEnv,
    LocalBatcher,
    SequenceReplayBuffer,
    SequenceSample,
    TemporalDictTensor,
    Trajectories,
    replay_agent,
)
from rlstruct.learning import ActorCritic
from rlstruct.replay import sequence_priorities

T = 5


def seeded(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def chunks(ids: list[int], lengths: list[int], n_timesteps: int = T) -> Trajectories:
    """Rows ``ids`` of ``n_timesteps`` steps: ``id`` = 100 * row id + step, ``obs`` 2 copies as float32,
    ``next/done`` at the last valid step; info ``agent_state/h`` = the row id in 3 float64s, ``agent_info/k`` = id."""
    row = torch.tensor(ids).unsqueeze(1)
    step = torch.arange(n_timesteps)
    values = 100 * row + step
    lengths_ = torch.tensor(lengths)
    steps = TemporalDictTensor(
        {
            "id": values,
            "obs": values.float().unsqueeze(2).repeat(1, 1, 2),
            "next/obs": values.float().unsqueeze(2).repeat(1, 1, 2) + 1,
            "next/done": step == (lengths_.unsqueeze(1) - 1),
        },
        lengths_,
    )
    info = DictTensor(
        {
            "agent_state/h": torch.tensor(ids, dtype=torch.float64).unsqueeze(1).repeat(1, 3),
            "agent_info/k": torch.tensor(ids),
        }
    )
    return Trajectories(info, steps)


def chunk_ids(sample: SequenceSample) -> list[int]:
    return sample.batch.info["agent_info/k"].tolist()


def held_ids(buffer: SequenceReplayBuffer) -> list[int]:
    """The ids of the chunks in slot order, read through the saved state."""
    return buffer.state_dict()["storage"]["info/agent_info/k"].tolist()


# ---------------------------------------------------------------------- adding and sampling


def test_a_sample_gives_back_the_chunks_added_with_their_info_lengths_and_dtypes() -> None:
    buffer = SequenceReplayBuffer(10, generator=seeded())
    assert len(buffer) == 0 and buffer.n_timesteps is None and buffer.steps_held() == 0
    added = chunks([0, 1, 2], [5, 3, 1])
    buffer.add(added)
    assert len(buffer) == 3 and buffer.n_timesteps == T and buffer.steps_held() == 9
    batch, indices, weights, learn = buffer.sample(64)
    assert isinstance(batch, Trajectories) and batch.n_elems() == 64
    assert indices.dtype == torch.int64 and indices.shape == (64,)
    assert weights.dtype == torch.float32 and torch.equal(weights, torch.ones(64))
    assert learn.dtype == torch.bool and learn.shape == (64, T)
    assert set(indices.tolist()) == {0, 1, 2}  # 64 draws reach all three
    expected = added.index(indices)
    assert list(batch.info.keys()) == ["agent_state/h", "agent_info/k"]
    assert list(batch.trajectories.keys()) == ["id", "obs", "next/obs", "next/done"]
    assert batch.equal(expected)  # info, steps (padding included), lengths and dtypes
    assert batch.trajectories.n_timesteps() == T
    # new tensors, not views of the storage
    batch.trajectories["id"].fill_(-1)
    assert buffer.sample(64).batch.trajectories["id"].min() >= 0


def test_keys_choose_the_steps_stored_and_info_is_kept_whole() -> None:
    buffer = SequenceReplayBuffer(4)
    buffer.add(chunks([7], [5]), keys=["obs", "next/obs"])
    batch = buffer.sample(2).batch
    assert list(batch.trajectories.keys()) == ["obs", "next/obs"]
    assert list(batch.info.keys()) == ["agent_state/h", "agent_info/k"]
    with pytest.raises(ValueError, match=re.escape("keys ['action'] are not in the batch's trajectories")):
        buffer.add(chunks([8], [5]), keys=["action"])
    with pytest.raises(
        ValueError, match="the batch's trajectories must have at least one key to store, got none"
    ):
        SequenceReplayBuffer(4).add(chunks([8], [5]), keys=[])


def test_the_ring_overwrites_the_oldest_chunks() -> None:
    buffer = SequenceReplayBuffer(3, generator=seeded())
    buffer.add(chunks([0, 1], [5, 5]))
    buffer.add(chunks([2, 3], [5, 2]))  # slot 2, then slot 0
    assert len(buffer) == 3 and held_ids(buffer) == [3, 1, 2]
    assert buffer.state_dict()["position"] == 1
    assert buffer.steps_held() == 2 + 5 + 5
    buffer.add(chunks(list(range(10, 15)), [5] * 5))  # more than the capacity: the last 3
    assert held_ids(buffer) == [12, 13, 14]  # as if added one by one from slot 1
    assert set(chunk_ids(buffer.sample(32))) == {12, 13, 14}


def test_rows_with_nothing_to_learn_from_are_skipped() -> None:
    buffer = SequenceReplayBuffer(10, generator=seeded())
    buffer.add(chunks([0, 1, 2, 3], [3, 0, 5, 0]))
    assert len(buffer) == 2 and held_ids(buffer) == [0, 2] and buffer.steps_held() == 8
    empty = SequenceReplayBuffer(10)
    empty.add(chunks([0, 1], [0, 0]))  # nothing stored, and nothing fixed
    assert len(empty) == 0 and empty.n_timesteps is None
    empty.add(chunks([0], [2], n_timesteps=4))
    assert len(empty) == 1 and empty.n_timesteps == 4
    # a row of burn-in alone would be drawn for nothing (and, prioritized, with the least priority
    # of all, it would shrink every importance-sampling weight): it is not stored
    warm = SequenceReplayBuffer(10, burn_in=2, prioritized=True, generator=seeded())
    warm.add(chunks([0, 1, 2], [5, 2, 3]))
    assert held_ids(warm) == [0, 2]
    assert torch.equal(warm.sample(16).weights, torch.ones(16))


def test_learn_marks_the_valid_steps_after_the_burn_in() -> None:
    buffer = SequenceReplayBuffer(10, burn_in=2, generator=seeded())
    buffer.add(chunks([0, 1, 2, 3], [5, 4, 3, 1]))  # the last, all burn-in, is not stored
    batch, _, _, learn = buffer.sample(64)
    # steps:            0      1      2      3      4
    expected = {
        5: [False, False, True, True, True],
        4: [False, False, True, True, False],
        3: [False, False, True, False, False],
    }
    for length, row in zip(batch.lengths.tolist(), learn.tolist(), strict=True):
        assert row == expected[length]
    assert torch.equal(learn, batch.trajectories.mask() & (torch.arange(T) >= 2))
    no_burn_in = SequenceReplayBuffer(10, generator=seeded())
    no_burn_in.add(chunks([0, 1], [5, 3]))
    sample = no_burn_in.sample(8)
    assert torch.equal(sample.learn, sample.batch.trajectories.mask())


def test_properties_and_repr() -> None:
    buffer = SequenceReplayBuffer(
        6, burn_in=1, prioritized=True, alpha=0.5, beta=0.3, generator=seeded(), timeout=5
    )
    assert (buffer.capacity, buffer.burn_in, buffer.prioritized, buffer.alpha, buffer.beta) == (
        6,
        1,
        True,
        0.5,
        0.3,
    )
    assert buffer.device == torch.device("cpu") and not buffer.shared
    assert isinstance(buffer.generator, torch.Generator)
    buffer.beta = 0.9
    assert buffer.beta == 0.9
    buffer.add(chunks([0], [5]))
    assert repr(buffer) == (
        "SequenceReplayBuffer(capacity=6, size=1, n_timesteps=5, burn_in=1, prioritized=True, device=cpu)"
    )


# ---------------------------------------------------------------------- replaying an agent with memory


def test_replay_agent_over_a_sample_equals_replay_over_the_rows_it_came_from() -> None:
    args = {"obs_dim": 4, "n_actions": 2, "hidden": (16,), "recurrent": True}
    model = ActorCritic(**args)  # type: ignore[arg-type]
    with LocalBatcher(
        ActorCritic, args, GymEnv, {"env": "CartPole-v1"}, n_envs=3, n_timesteps=20, seed=4
    ) as batcher:
        batcher.update(model.state_dict())
        batcher.reset()
        collected = []
        for _ in range(2):  # the second batch starts from carried, non-zero states
            batcher.execute()
            collected.append(batcher.get())
    rows = Trajectories.cat(collected)  # chunk i sits in slot i
    assert bool(rows.info["agent_state/h_pi"][3:].abs().sum() > 0)
    buffer = SequenceReplayBuffer(8, burn_in=5, generator=seeded(1))
    for batch in collected:
        buffer.add(batch)
    batch, indices, _, learn = buffer.sample(16)
    assert set(indices.tolist()) >= {0, 3}  # both batches drawn
    assert batch.equal(rows.index(indices))
    with torch.no_grad():
        replayed = replay_agent(model, batch)
        reference = replay_agent(model, rows.index(indices))
    for key in ("logits", "value"):
        assert torch.equal(replayed[key], reference[key])
        # and both are what the agent output while collecting (same weights, from the stored state)
        assert torch.allclose(replayed[key], batch.trajectories[key], atol=1e-5)
    assert learn[:, :5].sum() == 0 and bool(learn[:, 5:].all())  # "fixed" mode: every step is valid

    # only the keys the replay needs: the observations (with their next/ versions) and the outputs
    keys = ["observation", "initial_state", "logits", "next/observation", "next/initial_state"]
    slim = SequenceReplayBuffer(8, generator=seeded(1))
    for batch in collected:
        slim.add(batch, keys=keys)
    slim_batch, slim_indices, _, _ = slim.sample(16)
    assert list(slim_batch.trajectories.keys()) == keys
    with torch.no_grad():
        slim_replayed = replay_agent(model, slim_batch)
        slim_reference = replay_agent(model, rows.index(slim_indices))
    assert torch.equal(slim_replayed["logits"], slim_reference["logits"])


# ---------------------------------------------------------------------- errors


def test_every_add_must_have_the_same_t_above_the_burn_in() -> None:
    with pytest.raises(ValueError, match=re.escape("burn_in=5 must be below the batch's T=5")):
        SequenceReplayBuffer(4, burn_in=5).add(chunks([0], [5]))
    buffer = SequenceReplayBuffer(4, burn_in=2)
    buffer.add(chunks([0], [5]))
    with pytest.raises(
        ValueError,
        match=re.escape("the batch has T=6 steps per row, expected T=5 (the steps of the chunks held"),
    ):
        buffer.add(chunks([1], [5], n_timesteps=6))
    with pytest.raises(TypeError, match=r"batch must be a Trajectories .* got a TemporalDictTensor"):
        buffer.add(chunks([1], [5]).trajectories)  # type: ignore[arg-type]


def test_add_names_the_batch_keys_that_differ() -> None:
    buffer = SequenceReplayBuffer(4)
    buffer.add(chunks([0], [5]))
    batch = chunks([1], [5])
    steps, info = batch.trajectories, batch.info
    with pytest.raises(
        TypeError, match=re.escape("key 'obs' has dtype torch.float64, expected torch.float32")
    ):
        wrong = TemporalDictTensor(
            {**steps.to_dicttensor().tensors, "obs": steps["obs"].double()}, steps.lengths
        )
        buffer.add(Trajectories(info, wrong))
    with pytest.raises(ValueError, match=re.escape("key 'obs' has steps of shape (3,), expected (2,)")):
        wrong = TemporalDictTensor(
            {**steps.to_dicttensor().tensors, "obs": torch.zeros(1, T, 3)}, steps.lengths
        )
        buffer.add(Trajectories(info, wrong))
    with pytest.raises(
        ValueError,
        match=re.escape("the batch's trajectories has the keys ['id', 'next/done', 'next/obs'], expected")
        + r".*missing \['obs'\], unexpected \[\]",
    ):
        buffer.add(Trajectories(info, steps.get(["id", "next/obs", "next/done"])))
    with pytest.raises(
        TypeError, match=re.escape("key info 'agent_info/k' has dtype torch.int32, expected torch.int64")
    ):
        buffer.add(
            Trajectories(
                DictTensor({**info.tensors, "agent_info/k": torch.tensor([1], dtype=torch.int32)}), steps
            )
        )
    with pytest.raises(
        ValueError, match=re.escape("key info 'agent_state/h' has rows of shape (4,), expected (3,)")
    ):
        buffer.add(
            Trajectories(
                DictTensor({**info.tensors, "agent_state/h": torch.zeros(1, 4, dtype=torch.float64)}), steps
            )
        )
    with pytest.raises(
        ValueError, match=re.escape("the batch's info has the keys ['agent_state/h'], expected")
    ):
        buffer.add(Trajectories(info.get("agent_state/h"), steps))
    assert len(buffer) == 1  # nothing was added by the failed calls


def test_bad_arguments_are_named() -> None:
    with pytest.raises(ValueError, match="SequenceReplayBuffer: capacity must be at least 1, got 0"):
        SequenceReplayBuffer(0)
    with pytest.raises(ValueError, match="SequenceReplayBuffer: burn_in must be at least 0, got -1"):
        SequenceReplayBuffer(4, burn_in=-1)
    with pytest.raises(TypeError, match="SequenceReplayBuffer: burn_in must be an int"):
        SequenceReplayBuffer(4, burn_in=1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=re.escape("SequenceReplayBuffer: beta must be in [0, 1], got 2")):
        SequenceReplayBuffer(4, beta=2)
    with pytest.raises(ValueError, match=re.escape("SequenceReplayBuffer: alpha must be in [0, inf)")):
        SequenceReplayBuffer(4, prioritized=True, alpha=-1)
    buffer = SequenceReplayBuffer(4)
    with pytest.raises(
        RuntimeError, match=r"SequenceReplayBuffer\.sample: cannot sample from an empty buffer"
    ):
        buffer.sample(1)
    buffer.add(chunks([0], [5]))
    with pytest.raises(
        ValueError, match=r"SequenceReplayBuffer\.sample: batch_size must be at least 1, got 0"
    ):
        buffer.sample(0)
    with pytest.raises(RuntimeError, match="the buffer samples uniformly; build it with prioritized=True"):
        buffer.update_priorities(torch.tensor([0]), torch.tensor([1.0]))


def test_priority_errors_name_the_sequence_buffer() -> None:
    buffer = SequenceReplayBuffer(4, prioritized=True, generator=seeded())
    buffer.add(chunks([0, 1], [5, 5]))
    update = "SequenceReplayBuffer.update_priorities"
    with pytest.raises(TypeError, match=re.escape(f"{update}: indices must be an int64 tensor")):
        buffer.update_priorities(torch.tensor([0.0]), torch.tensor([1.0]))
    with pytest.raises(ValueError, match=re.escape(f"{update}: indices must lie in [0, 2)")):
        buffer.update_priorities(torch.tensor([2]), torch.tensor([1.0]))
    with pytest.raises(ValueError, match=re.escape(f"{update}: priorities must be finite and >= 0")):
        buffer.update_priorities(torch.tensor([0]), torch.tensor([-1.0]))
    with pytest.raises(
        ValueError, match=re.escape(f"{update}: priorities must be finite and >= 0, got priorities[0] = nan")
    ):
        buffer.update_priorities(torch.tensor([0, 1]), torch.tensor([float("nan"), 1.0]))


# ---------------------------------------------------------------------- priorities


def test_sequence_priorities_mix_the_max_and_the_mean_of_the_learned_steps() -> None:
    td = torch.tensor(
        [
            [9.0, -1.0, 2.0, -4.0],  # learned: 2, 4 (abs)  -> 0.9 * 4 + 0.1 * 3   = 3.9
            [float("nan"), 1.0, 1.0, 1.0],  # learned: 1, 1, 1 (NaN ignored) -> 0.9 + 0.1 = 1.0
            [5.0, 6.0, 7.0, 8.0],  # nothing learned -> 0
        ]
    )
    learn = torch.tensor(
        [[False, False, True, True], [False, True, True, True], [False, False, False, False]]
    )
    assert torch.allclose(sequence_priorities(td, learn), torch.tensor([3.9, 1.0, 0.0]))
    assert torch.allclose(sequence_priorities(td, learn, eta=1.0), torch.tensor([4.0, 1.0, 0.0]))  # max
    assert torch.allclose(sequence_priorities(td, learn, eta=0.0), torch.tensor([3.0, 1.0, 0.0]))  # mean
    grad = td.clone().requires_grad_(True)
    out = sequence_priorities(grad, learn)
    assert not out.requires_grad and out.dtype == torch.float32
    assert sequence_priorities(td.double(), learn).dtype == torch.float64
    no_steps = sequence_priorities(torch.ones(2, 0), torch.ones(2, 0, dtype=torch.bool))
    assert torch.equal(no_steps, torch.zeros(2))  # no learned step: 0


def test_sequence_priorities_check_their_arguments() -> None:
    td, learn = torch.ones(2, 3), torch.ones(2, 3, dtype=torch.bool)
    with pytest.raises(TypeError, match="td_abs must be a floating-point tensor, got"):
        sequence_priorities(torch.ones(2, 3, dtype=torch.int64), learn)
    with pytest.raises(TypeError, match="learn must be a bool tensor, got"):
        sequence_priorities(td, learn.float())
    with pytest.raises(ValueError, match=re.escape("must both have shape [B, T], got (2, 3) and (2, 4)")):
        sequence_priorities(td, torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match=re.escape("eta must be in [0, 1], got 1.5")):
        sequence_priorities(td, learn, eta=1.5)


def test_prioritized_chunks_are_drawn_by_priority_with_weights() -> None:
    buffer = SequenceReplayBuffer(8, burn_in=1, prioritized=True, alpha=1.0, beta=1.0, generator=seeded(3))
    buffer.add(chunks([0, 1, 2, 3], [5, 5, 5, 5]))
    # |TD| per step; learned steps 1..4: priority = 0.9 max + 0.1 mean
    td = torch.tensor(
        [
            [0.0, 1.0, 1.0, 1.0, 1.0],  # 1.0
            [0.0, 0.0, 0.0, 0.0, 2.0],  # 0.9 * 2 + 0.1 * 0.5 = 1.85
            [50.0, 3.0, 3.0, 3.0, 3.0],  # 3.0 (the burn-in step does not count)
            [0.0, 4.0, 4.0, 4.0, 4.0],  # 4.0
        ]
    )
    learn = torch.arange(T).expand(4, T) >= 1
    priorities = sequence_priorities(td, learn)
    assert torch.allclose(priorities, torch.tensor([1.0, 1.85, 3.0, 4.0]))
    buffer.update_priorities(torch.arange(4), priorities)
    n = 4000
    counts = torch.zeros(4)
    for _ in range(n // 100):
        batch, indices, weights, _ = buffer.sample(100)
        counts += torch.bincount(indices, minlength=4)
        assert torch.equal(batch.info["agent_info/k"], indices)  # chunk i in slot i
        # weights (p_i / min p)^-beta, beta = 1
        assert torch.allclose(weights, (priorities[indices] / 1.0) ** -1.0, rtol=1e-5)
    expected = n * priorities / priorities.sum()
    chi_square = float(((counts - expected) ** 2 / expected).sum())
    assert chi_square < 21.11  # chi-square, 3 degrees of freedom, p = 1e-4 (scipy.stats.chi2.isf)
    new = SequenceReplayBuffer(8, prioritized=True, generator=seeded(3))
    new.add(chunks([0], [5]))
    new.update_priorities(torch.tensor([0]), torch.tensor([2.0]))
    new.add(chunks([1], [5]))  # a new chunk gets the largest priority so far
    assert torch.equal(new.sample(16).weights, torch.ones(16))


# ---------------------------------------------------------------------- saving and loading


@pytest.mark.parametrize("prioritized", [False, True])
def test_save_load_round_trips_exactly(tmp_path: Path, prioritized: bool) -> None:
    buffer = SequenceReplayBuffer(6, burn_in=2, prioritized=prioritized, generator=seeded(5))
    buffer.add(chunks([0, 1, 2, 3], [5, 4, 0, 3]))
    buffer.add(chunks([4, 5, 6], [2, 5, 5]))
    if prioritized:
        sample = buffer.sample(6)
        buffer.update_priorities(sample.indices, torch.rand(6, generator=seeded(1)) * 3)
    buffer.save(tmp_path / "sequences.pt")
    restored = SequenceReplayBuffer(6, burn_in=2, prioritized=prioritized)
    restored.load(tmp_path / "sequences.pt")
    assert len(restored) == len(buffer) and restored.n_timesteps == T
    assert restored.steps_held() == buffer.steps_held()
    for _ in range(3):
        mine, theirs = buffer.sample(16), restored.sample(16)
        assert mine.batch.equal(theirs.batch)
        for a, b in zip(mine[1:], theirs[1:], strict=True):
            assert torch.equal(a, b)
    buffer.add(chunks([9], [5]))
    restored.add(chunks([9], [5]))  # the position (and the largest priority) were restored too
    assert held_ids(restored) == held_ids(buffer)
    assert torch.equal(restored.sample(8).weights, buffer.sample(8).weights)


def test_load_checks_burn_in_t_and_prioritized(tmp_path: Path) -> None:
    buffer = SequenceReplayBuffer(6, burn_in=2)
    buffer.add(chunks([0], [5]))
    buffer.save(tmp_path / "sequences.pt")
    with pytest.raises(ValueError, match="the state has burn_in=2, this buffer burn_in=1"):
        SequenceReplayBuffer(6, burn_in=1).load(tmp_path / "sequences.pt")
    with pytest.raises(ValueError, match="the state has prioritized=False, this buffer prioritized=True"):
        SequenceReplayBuffer(6, burn_in=2, prioritized=True).load(tmp_path / "sequences.pt")
    other = SequenceReplayBuffer(6, burn_in=2)
    other.add(chunks([0], [5], n_timesteps=7))
    with pytest.raises(ValueError, match="the state holds chunks of T=5 steps, this buffer T=7"):
        other.load(tmp_path / "sequences.pt")
    with pytest.raises(
        ValueError, match=r"state lacks the entries \['burn_in', 'n_timesteps', 'prioritized'\]"
    ):
        other.load_state_dict({"capacity": 6})
    with pytest.raises(
        ValueError,
        match=r"SequenceReplayBuffer\.load_state_dict: the state has capacity=6, this buffer capacity=5",
    ):
        SequenceReplayBuffer(5, burn_in=2).load(tmp_path / "sequences.pt")


def test_save_and_load_name_a_bad_path(tmp_path: Path) -> None:
    buffer = SequenceReplayBuffer(6, burn_in=2)
    buffer.add(chunks([0], [5]))
    missing = tmp_path / "no_such_folder" / "sequences.pt"
    with pytest.raises(
        FileNotFoundError, match=re.escape(f"SequenceReplayBuffer.save: the folder of path {str(missing)!r}")
    ):
        buffer.save(missing)  # torch said "Parent directory ... does not exist", a RuntimeError
    with pytest.raises(
        IsADirectoryError, match=r"SequenceReplayBuffer\.save: path must name the file to write"
    ):
        buffer.save(tmp_path)
    with pytest.raises(FileNotFoundError, match=re.escape("SequenceReplayBuffer.load: there is no file")):
        buffer.load(missing)
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(ValueError, match=r"SequenceReplayBuffer\.load: .* is not a buffer written by save"):
        buffer.load(tmp_path / "notes.txt")


def test_load_errors_of_the_chunk_store_name_the_sequence_buffer(tmp_path: Path) -> None:
    buffer = SequenceReplayBuffer(6, burn_in=2, prioritized=True)
    buffer.add(chunks([0], [5]))
    buffer.save(tmp_path / "sequences.pt")
    with pytest.raises(
        ValueError,
        match=re.escape(
            "SequenceReplayBuffer.load_state_dict: the state has alpha=0.6, this buffer alpha=0.5"
        ),
    ):
        SequenceReplayBuffer(6, burn_in=2, prioritized=True, alpha=0.5).load(tmp_path / "sequences.pt")
    state = buffer.state_dict()
    state["storage"] = {k: v for k, v in state["storage"].items() if k != "length"}
    other = SequenceReplayBuffer(6, burn_in=2, prioritized=True)
    other.add(chunks([1], [5]))
    with pytest.raises(
        ValueError, match=re.escape("SequenceReplayBuffer.load_state_dict: expected the keys")
    ):
        other.load_state_dict(state)


# ---------------------------------------------------------------------- shared memory


def add_chunks(buffer: SequenceReplayBuffer, first_id: int, n_batches: int) -> None:
    """Add ``n_batches`` batches of 2 chunks with consecutive ids from ``first_id`` (a spawned writer's body)."""
    for batch in range(n_batches):
        start = first_id + 2 * batch
        buffer.add(chunks([start, start + 1], [5, 3]))


def test_a_spawned_process_adds_chunks_into_a_shared_buffer() -> None:
    shm_before = shm_entries()
    buffer = SequenceReplayBuffer(100, burn_in=1, prioritized=True, shared=True, timeout=60)
    buffer.add(chunks([0, 1], [5, 3]))  # the storage must exist before the buffer is handed over
    writer = multiprocessing.get_context("spawn").Process(
        target=add_chunks, args=(buffer, 1000, 10), daemon=True
    )
    writer.start()
    try:
        add_chunks(buffer, 5000, 10)
        writer.join(timeout=120)
        assert writer.exitcode == 0, f"the writer ended with exit code {writer.exitcode}"
    finally:
        if writer.is_alive():
            writer.kill()
            writer.join(timeout=10)
    assert buffer.shared and len(buffer) == 42 and buffer.steps_held() == 21 * 8
    held = buffer.state_dict()["storage"]
    assert sorted(held["info/agent_info/k"].tolist()) == [0, 1, *range(1000, 1020), *range(5000, 5020)]
    batch = buffer.sample(64).batch
    assert torch.equal(batch.trajectories["id"] // 100, batch.info["agent_info/k"].unsqueeze(1).expand(64, T))
    del buffer, batch, held
    gc.collect()
    assert_nothing_left_in_shm(shm_before)


def test_the_storage_s_checks_name_the_sequence_buffer() -> None:
    with pytest.raises(
        ValueError, match=re.escape("SequenceReplayBuffer: timeout must be in (0, inf), got -1")
    ):
        SequenceReplayBuffer(10, timeout=-1)
    with pytest.raises(
        TypeError, match=re.escape("SequenceReplayBuffer: generator must be a torch.Generator")
    ):
        SequenceReplayBuffer(10, prioritized=True, generator=3)  # type: ignore[arg-type]
    with pytest.raises(
        RuntimeError, match=re.escape("SequenceReplayBuffer: a shared buffer needs its storage")
    ):
        pickle.dumps(SequenceReplayBuffer(10, shared=True))
