"""Behaviour tests for rlstruct.trajectories: Trajectories."""

from __future__ import annotations

import re
from typing import Any

import pytest
import torch

from rlstruct import DictTensor, TemporalDictTensor, Trajectories


def make_batch(lengths: list[int], t: int, offset: int = 0) -> Trajectories:
    """Row b has info "id" = b + offset and steps "reward"[b, s] = 10 * (b + offset) + s."""
    b = len(lengths)
    ids = torch.arange(offset, offset + b)
    info = DictTensor({"id": ids.clone(), "epsilon": ids.double() / 10})
    reward = (ids.view(b, 1) * 10 + torch.arange(t)).float()
    steps = TemporalDictTensor(
        {"reward": reward, "obs": reward.view(b, t, 1, 1).expand(b, t, 2, 3).clone()}, torch.tensor(lengths)
    )
    return Trajectories(info, steps)


def message(text: str) -> str:
    return re.escape(text)


def test_construction_and_accessors() -> None:
    batch = make_batch([3, 0, 2], t=3)
    assert batch.n_elems() == 3
    assert batch.lengths is batch.trajectories.lengths
    assert batch.lengths.tolist() == [3, 0, 2]
    assert batch.device == torch.device("cpu")
    assert batch.info["id"].tolist() == [0, 1, 2]
    assert batch.trajectories["reward"].shape == (3, 3)


def test_info_may_be_keyless() -> None:
    steps = TemporalDictTensor({"x": torch.zeros(2, 3)})
    batch = Trajectories(DictTensor(batch_size=2), steps)
    assert batch.n_elems() == 2
    assert batch[1].info.n_elems() == 1


def test_repr_shows_both_parts() -> None:
    text = repr(make_batch([1], t=1))
    assert text.startswith("Trajectories(info=DictTensor(n_elems=1")
    assert "trajectories=TemporalDictTensor(n_elems=1, n_timesteps=1" in text


@pytest.mark.parametrize(
    ("info", "trajectories", "error", "text"),
    [
        (
            {"id": torch.zeros(2)},
            TemporalDictTensor({"x": torch.zeros(2, 3)}),
            TypeError,
            "info must be a DictTensor, got a dict",
        ),
        (
            DictTensor({"id": torch.zeros(2)}),
            DictTensor({"x": torch.zeros(2, 3)}),
            TypeError,
            "trajectories must be a TemporalDictTensor, got a DictTensor",
        ),
        (
            DictTensor({"id": torch.zeros(2)}),
            TemporalDictTensor({"x": torch.zeros(3, 3)}),
            ValueError,
            "info has 2 rows but trajectories has 3; they must match",
        ),
        (
            DictTensor({"id": torch.empty(2, device="meta")}),
            TemporalDictTensor({"x": torch.zeros(2, 3)}),
            ValueError,
            "info is on meta but trajectories on cpu",
        ),
    ],
)
def test_bad_construction_is_rejected(
    info: object, trajectories: object, error: type[Exception], text: str
) -> None:
    with pytest.raises(error, match=message("Trajectories: " + text)):
        Trajectories(info, trajectories)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("index", "rows"),
    [
        (2, [2]),
        (-1, [3]),
        (slice(1, 3), [1, 2]),
        (slice(None, None, 3), [0, 3]),
        ([3, 1, 3], [3, 1, 3]),
        (torch.tensor([0, -2]), [0, 2]),
        (torch.tensor([True, False, False, True]), [0, 3]),
    ],
)
def test_index_selects_the_same_rows_of_both_parts(index: Any, rows: list[int]) -> None:
    lengths = [3, 0, 2, 1]
    batch = make_batch(lengths, t=3)
    for selected in (batch[index], batch.index(index)):
        assert isinstance(selected, Trajectories)
        assert selected.n_elems() == len(rows)
        assert selected.info["id"].tolist() == rows
        assert selected.lengths.tolist() == [lengths[r] for r in rows]
        assert torch.equal(selected.trajectories["obs"], batch.trajectories["obs"][rows])
        assert selected.trajectories.n_timesteps() == 3


@pytest.mark.parametrize(
    ("index", "error", "text"),
    [
        (4, IndexError, "row index 4 is out of range for 4 rows"),
        (torch.tensor([1, 7]), IndexError, "row indices must lie in [-4, 4), got values from 1 to 7"),
        (torch.tensor([True, False]), IndexError, "a bool row mask must have 4 elements, got 2"),
        (
            "id",
            TypeError,
            "Trajectories: rows are indexed by an int, a slice, a list of ints or a tensor, got the str "
            "'id'; read a key from batch.trajectories['id'] or batch.info['id']",
        ),
    ],
)
def test_bad_row_indices_are_rejected(index: Any, error: type[Exception], text: str) -> None:
    with pytest.raises(error, match=message(text)):
        make_batch([1, 1, 1, 1], t=1)[index]


def test_to_moves_both_parts_and_keeps_dtypes() -> None:
    batch = make_batch([2, 1], t=2)
    moved = batch.to("meta")
    assert moved.device == torch.device("meta")
    assert moved.info.device == torch.device("meta")
    assert moved.lengths.device == torch.device("meta")
    assert moved.info.specs() == batch.info.specs()
    assert moved.trajectories.specs() == batch.trajectories.specs()
    assert batch.device == torch.device("cpu")


def test_to_names_itself_for_a_bad_device() -> None:
    # the messages began "DictTensor.to:", a method the caller never called
    batch = make_batch([2, 1], t=2)
    with pytest.raises(ValueError, match=re.escape("Trajectories.to: device must name a torch device")):
        batch.to("float32")
    with pytest.raises(TypeError, match=re.escape("Trajectories.to: device must be a str")):
        batch.to(torch.float32)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=re.escape("TemporalDictTensor.to: device must name a torch device")):
        batch.trajectories.to("float32")
    with pytest.raises(ValueError, match=re.escape("DictTensor.to: device must name a torch device")):
        batch.info.to("float32")


def test_clone_is_deep() -> None:
    batch = make_batch([2, 1], t=2)
    copy = batch.clone()
    assert copy.equal(batch)
    copy.info["id"].fill_(-1)
    copy.trajectories["reward"].zero_()
    copy.lengths.zero_()
    assert batch.equal(make_batch([2, 1], t=2))


def test_cat_pads_the_shorter_trajectories() -> None:
    a, b = make_batch([2, 1], t=2), make_batch([4, 0, 3], t=4, offset=2)
    out = Trajectories.cat([a, b])
    assert out.n_elems() == 5
    assert out.info["id"].tolist() == [0, 1, 2, 3, 4]
    assert out.lengths.tolist() == [2, 1, 4, 0, 3]
    assert out.trajectories.n_timesteps() == 4
    assert out[0:2].trajectories.equal(a.trajectories.expand(4))
    assert out[2:5].equal(b)
    assert not out.trajectories["obs"][:2, 2:].any()


def test_cat_of_one_batch_is_equal_to_it() -> None:
    batch = make_batch([2, 1], t=2)
    assert Trajectories.cat([batch]).equal(batch)


def test_cat_rejects_bad_input() -> None:
    batch = make_batch([1], t=1)
    with pytest.raises(
        ValueError, match=message("Trajectories.cat: expected at least one Trajectories, got an empty list")
    ):
        Trajectories.cat([])
    with pytest.raises(
        TypeError, match=message("Trajectories.cat: expected a list of Trajectories, got a Trajectories")
    ):
        Trajectories.cat(batch)  # type: ignore[arg-type]
    with pytest.raises(
        TypeError, match=message("Trajectories.cat: element 1 must be Trajectories, got a DictTensor")
    ):
        Trajectories.cat([batch, batch.info])  # type: ignore[list-item]
    other_info = Trajectories(batch.info.get("id"), batch.trajectories)
    with pytest.raises(
        ValueError,
        match=message("Trajectories.cat (info): element 1 has keys ['id'], expected ['epsilon', 'id']"),
    ):
        Trajectories.cat([batch, other_info])
    other_steps = Trajectories(batch.info, batch.trajectories.get("reward"))
    with pytest.raises(
        ValueError,
        match=message(
            "Trajectories.cat (trajectories): element 1 has keys ['reward'], expected ['obs', 'reward']"
        ),
    ):
        Trajectories.cat([batch, other_steps])


def test_equal() -> None:
    batch = make_batch([2, 0], t=2)
    assert batch.equal(make_batch([2, 0], t=2))
    assert not batch.equal(make_batch([2, 1], t=2))
    assert not batch.equal(make_batch([2, 0], t=3))
    changed_info = batch.clone()
    changed_info.info["epsilon"][1] = 0.5
    assert not batch.equal(changed_info)
    changed_padding = batch.clone()
    changed_padding.trajectories["reward"][1, 1] = -1.0
    assert not batch.equal(changed_padding)
    assert not batch.equal(batch.trajectories)  # type: ignore[arg-type]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="pin_memory needs a CUDA build and device")
def test_pin_memory() -> None:
    batch = make_batch([2, 1], t=2)
    pinned = batch.pin_memory()
    assert pinned.lengths.is_pinned()
    assert all(v.is_pinned() for v in pinned.info.values())
    assert pinned.equal(batch)
