"""Behaviour tests for rlstruct.temporal: TemporalDictTensor."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from rlstruct import DictTensor, Specs, TemporalDictTensor, TensorSpec

B, T = 3, 4
LENGTHS = [4, 0, 2]
MASK = [
    [True, True, True, True],
    [False, False, False, False],
    [True, True, False, False],
]


def make_values(b: int = B, t: int = T, offset: int = 0) -> dict[str, torch.Tensor]:
    """Values of rank 2 to 5 and five dtypes; element [b, t] is recognisable as 100 * (b + offset) + t."""
    code = (torch.arange(offset, offset + b).view(b, 1) * 100 + torch.arange(t)).view(b, t)
    return {
        "obs": code.view(b, t, 1).float() + torch.tensor([0.0, 0.5]),  # [B, T, 2] float32
        "action": code.clone(),  # [B, T] int64
        "done": code % 3 == 0,  # [B, T] bool
        "value": code.double(),  # [B, T] float64
        "frame": (code % 256).to(torch.uint8).view(b, t, 1, 1).expand(b, t, 2, 2).clone(),  # [B, T, 2, 2]
    }


def make_tdt(lengths: list[int] | None = None, t: int = T, offset: int = 0) -> TemporalDictTensor:
    lengths = LENGTHS if lengths is None else lengths
    return TemporalDictTensor(make_values(len(lengths), t, offset), torch.tensor(lengths))


def message(text: str) -> str:
    return re.escape(text)


# ---------------------------------------------------------------------------- construction


def test_construction_and_accessors() -> None:
    values = make_values()
    lengths = torch.tensor(LENGTHS)
    tdt = TemporalDictTensor(values, lengths)
    assert tdt.n_elems() == B
    assert tdt.n_timesteps() == T
    assert tdt.lengths is lengths
    assert tdt.device == torch.device("cpu")
    assert list(tdt.keys()) == list(values)
    assert list(tdt) == list(values)
    assert all(tdt[k] is v for k, v in values.items())
    assert all(v is values[k] for k, v in tdt.items())
    assert [v.shape for v in tdt.values()] == [v.shape for v in values.values()]
    assert "obs" in tdt
    assert "missing" not in tdt
    assert not tdt.empty()


def test_lengths_default_to_full_rows() -> None:
    tdt = TemporalDictTensor({"x": torch.zeros(2, 5)})
    assert tdt.lengths.dtype == torch.int64
    assert tdt.lengths.tolist() == [5, 5]
    assert tdt.full()


def test_construction_from_a_dicttensor_keeps_it() -> None:
    dt = DictTensor(make_values())
    tdt = TemporalDictTensor(dt, torch.tensor(LENGTHS), n_timesteps=T)
    assert tdt.to_dicttensor() is dt


def test_keyless_temporal_dicttensors() -> None:
    tdt = TemporalDictTensor({}, torch.tensor([0, 2]), n_timesteps=3)
    assert tdt.empty()
    assert tdt.n_elems() == 2
    assert tdt.n_timesteps() == 3
    assert tdt.mask().tolist() == [[False, False, False], [True, True, False]]
    assert tdt[1].lengths.tolist() == [2]
    assert tdt.masked_flatten().n_elems() == 2
    none = TemporalDictTensor({})
    assert (none.n_elems(), none.n_timesteps(), none.mask().shape) == (0, 0, (0, 0))
    assert TemporalDictTensor(DictTensor(batch_size=3)).lengths.tolist() == [0, 0, 0]


def test_zero_lengths_and_zero_rows_are_allowed() -> None:
    tdt = make_tdt([0, 0, 0])
    assert tdt.mask().sum() == 0
    assert not tdt.full()
    zero_rows = TemporalDictTensor({"x": torch.zeros(0, 3, 2)}, torch.zeros(0, dtype=torch.int64))
    assert zero_rows.n_elems() == 0
    assert zero_rows.full()
    assert zero_rows.mask().shape == (0, 3)


def test_repr() -> None:
    text = repr(TemporalDictTensor({"x": torch.zeros(2, 3, 4)}))
    assert text == "TemporalDictTensor(n_elems=2, n_timesteps=3, device=cpu, {x: (4,) torch.float32})"


@pytest.mark.parametrize(
    ("build", "error", "text"),
    [
        (
            lambda: TemporalDictTensor({"x": torch.zeros(3)}),
            ValueError,
            "value of key 'x' must have shape [B, T, ...], got shape (3,)",
        ),
        (
            lambda: TemporalDictTensor({"a": torch.zeros(3, 4), "b": torch.zeros(3, 5)}),
            ValueError,
            "value of key 'b' has 5 time steps, expected 4 (from key 'a'); got shape (3, 5)",
        ),
        (
            lambda: TemporalDictTensor({"a": torch.zeros(3, 4)}, n_timesteps=6),
            ValueError,
            "value of key 'a' has 4 time steps, expected 6 (from n_timesteps)",
        ),
        (
            lambda: TemporalDictTensor({"a": torch.zeros(3, 4), "b": torch.zeros(2, 4)}),
            ValueError,
            "value of key 'b' has 2 rows, expected 3 (from key 'a')",
        ),
        (
            lambda: TemporalDictTensor({"a": [[0.0]]}),  # type: ignore[dict-item]
            TypeError,
            "value of key 'a' must be a torch.Tensor, got a list",
        ),
        (
            lambda: TemporalDictTensor({0: torch.zeros(2, 2)}),  # type: ignore[dict-item]
            TypeError,
            "keys must be str, got 0 (int)",
        ),
        (
            lambda: TemporalDictTensor([torch.zeros(2, 2)]),  # type: ignore[arg-type]
            TypeError,
            "data must be a mapping of tensors or a DictTensor, got a list",
        ),
        (
            lambda: TemporalDictTensor({}, n_timesteps=-1),
            ValueError,
            "n_timesteps must be a non-negative int, got -1",
        ),
        (
            lambda: TemporalDictTensor({"a": torch.zeros(3, 4)}, n_timesteps="4"),  # type: ignore[arg-type]
            ValueError,
            "n_timesteps must be a non-negative int, got '4'",
        ),
        (
            lambda: TemporalDictTensor({"a": torch.zeros(3, 4)}, n_timesteps=4.0),  # type: ignore[arg-type]
            ValueError,
            "n_timesteps must be a non-negative int, got 4.0",
        ),
        (
            lambda: TemporalDictTensor({"a": torch.zeros(3, 4)}, [4, 4, 4]),  # type: ignore[arg-type]
            TypeError,
            "lengths must be an int64 tensor of shape [3], got a list",
        ),
        (
            lambda: TemporalDictTensor({"a": torch.zeros(3, 4)}, torch.tensor([4, 4, 4], dtype=torch.int32)),
            TypeError,
            "lengths must have dtype torch.int64, got torch.int32",
        ),
        (
            lambda: TemporalDictTensor({"a": torch.zeros(3, 4)}, torch.tensor([4.0, 4.0, 4.0])),
            TypeError,
            "lengths must have dtype torch.int64, got torch.float32",
        ),
        (
            lambda: TemporalDictTensor({"a": torch.zeros(3, 4)}, torch.tensor([4, 4])),
            ValueError,
            "lengths must have shape [3] (one per row), got (2,)",
        ),
        (
            lambda: TemporalDictTensor({"a": torch.zeros(3, 4)}, torch.tensor([[4], [4], [4]])),
            ValueError,
            "lengths must have shape [3] (one per row), got (3, 1)",
        ),
        (
            lambda: TemporalDictTensor({"a": torch.zeros(3, 4)}, torch.tensor(4)),
            ValueError,
            "lengths must have shape [3] (one per row), got ()",
        ),
        (
            lambda: TemporalDictTensor(
                {"a": torch.zeros(3, 4)}, torch.empty(3, dtype=torch.int64, device="meta")
            ),
            ValueError,
            "lengths is on meta, expected cpu (the values' device)",
        ),
        (
            lambda: TemporalDictTensor({"a": torch.zeros(3, 4)}, torch.tensor([4, 5, 0])),
            ValueError,
            "lengths must lie in [0, 4] (T), got lengths[1] = 5",
        ),
        (
            lambda: TemporalDictTensor({"a": torch.zeros(3, 4)}, torch.tensor([4, 0, -1])),
            ValueError,
            "lengths must lie in [0, 4] (T), got lengths[2] = -1",
        ),
        (
            lambda: TemporalDictTensor({}, torch.tensor([0, 1]), n_timesteps=0),
            ValueError,
            "lengths must lie in [0, 0] (T), got lengths[1] = 1",
        ),
    ],
)
def test_bad_construction_is_rejected_with_a_message(
    build: Callable[[], TemporalDictTensor], error: type[Exception], text: str
) -> None:
    with pytest.raises(error, match=message(text)):
        build()


# ---------------------------------------------------------------------------- keys


def test_get_shares_values_and_lengths_unless_cloned() -> None:
    tdt = make_tdt()
    sub = tdt.get(["frame", "obs"])
    assert list(sub.keys()) == ["frame", "obs"]
    assert sub["obs"] is tdt["obs"]
    assert sub.lengths is tdt.lengths
    assert sub.n_timesteps() == T
    copy = tdt.get("obs", clone=True)
    assert copy.equal(tdt.get("obs"))
    copy["obs"].zero_()
    copy.lengths.zero_()
    assert tdt.lengths.tolist() == LENGTHS
    assert tdt["obs"].abs().sum() > 0


def test_missing_key() -> None:
    with pytest.raises(KeyError, match=message("no key 'nope'")):
        make_tdt()["nope"]
    with pytest.raises(KeyError, match=message("no key 'nope'")):
        make_tdt().get(["obs", "nope"])


def test_set_adds_a_key_in_place() -> None:
    tdt = make_tdt()
    value = torch.ones(B, T, 7, dtype=torch.float16)
    tdt.set("extra", value)
    assert tdt["extra"] is value
    assert tdt.specs()["extra"] == TensorSpec((7,), torch.float16)


@pytest.mark.parametrize(
    ("value", "error", "text"),
    [
        (torch.zeros(B, T + 1), ValueError, "value of key 'x' must have shape [3, 4, ...], got (3, 5)"),
        (torch.zeros(B), ValueError, "value of key 'x' must have shape [3, 4, ...], got (3,)"),
        (torch.zeros(B + 1, T), ValueError, "value of key 'x' must have 3 rows, got shape (4, 4)"),
        (torch.empty(B, T, device="meta"), ValueError, "value of key 'x' is on meta, expected cpu"),
        ("nope", TypeError, "value of key 'x' must be a torch.Tensor, got a str"),
    ],
)
def test_set_rejects_bad_values(value: object, error: type[Exception], text: str) -> None:
    tdt = make_tdt()
    with pytest.raises(error, match=message(text)):
        tdt.set("x", value)  # type: ignore[arg-type]
    assert "x" not in tdt


def test_set_on_a_keyless_temporal_dicttensor_checks_the_lengths_device() -> None:
    tdt = TemporalDictTensor({}, torch.tensor([1, 2]), n_timesteps=2)
    with pytest.raises(ValueError, match=message("value of key 'x' is on meta, expected cpu")):
        tdt.set("x", torch.empty(2, 2, device="meta"))
    tdt.set("x", torch.zeros(2, 2))
    assert tdt.to_dicttensor().device == torch.device("cpu")


def test_specs_give_per_step_shapes_and_dtypes() -> None:
    assert make_tdt().specs() == Specs(
        {
            "obs": TensorSpec((2,), torch.float32),
            "action": TensorSpec((), torch.int64),
            "done": TensorSpec((), torch.bool),
            "value": TensorSpec((), torch.float64),
            "frame": TensorSpec((2, 2), torch.uint8),
        }
    )


# ---------------------------------------------------------------------------- time


def test_mask_marks_the_real_steps() -> None:
    mask = make_tdt().mask()
    assert mask.dtype == torch.bool
    assert mask.shape == (B, T)
    assert mask.tolist() == MASK
    assert mask.sum(1).tolist() == LENGTHS


def test_full() -> None:
    assert make_tdt([4, 4, 4]).full()
    assert not make_tdt([4, 4, 3]).full()
    assert TemporalDictTensor({}, torch.tensor([0]), n_timesteps=0).full()


def test_temporal_index_gives_every_row_at_one_step_as_views() -> None:
    tdt = make_tdt()
    step = tdt.temporal_index(1)
    assert step.n_elems() == B
    assert step["action"].tolist() == [1, 101, 201]  # padding rows included
    assert step["frame"].shape == (B, 2, 2)
    assert step.specs() == tdt.specs()
    assert tdt.temporal_index(-1)["action"].tolist() == [3, 103, 203]
    step["obs"].fill_(-1.0)
    assert (tdt["obs"][:, 1] == -1.0).all()


@pytest.mark.parametrize("t", [4, -5])
def test_temporal_index_out_of_range(t: int) -> None:
    with pytest.raises(
        IndexError, match=message(f"temporal_index: time index {t} is out of range for 4 steps")
    ):
        make_tdt().temporal_index(t)


def test_temporal_index_needs_an_int() -> None:
    with pytest.raises(TypeError, match=message("temporal_index: time index must be an int, got a float")):
        make_tdt().temporal_index(1.0)  # type: ignore[arg-type]
    with pytest.raises(
        TypeError, match=message("masked_temporal_index: time index must be an int, got a bool")
    ):
        make_tdt().masked_temporal_index(True)


def test_temporal_index_of_zero_steps_is_out_of_range() -> None:
    with pytest.raises(IndexError, match=message("time index 0 is out of range for 0 steps")):
        TemporalDictTensor({"x": torch.zeros(2, 0)}).temporal_index(0)


def test_masked_temporal_index_keeps_the_running_rows() -> None:
    tdt = make_tdt([4, 0, 2, 3], offset=0)
    for t, expected_rows in [(0, [0, 2, 3]), (1, [0, 2, 3]), (2, [0, 3]), (3, [0])]:
        step, rows = tdt.masked_temporal_index(t)
        assert rows.dtype == torch.int64
        assert rows.tolist() == expected_rows
        assert step["action"].tolist() == [100 * r + t for r in expected_rows]
        for key, value in tdt.items():
            assert torch.equal(step[key], value[rows, t])
    step, rows = make_tdt([1, 0, 1]).masked_temporal_index(2)
    assert rows.tolist() == []
    assert step.n_elems() == 0
    assert step["frame"].shape == (0, 2, 2)


def test_masked_temporal_index_out_of_range() -> None:
    with pytest.raises(
        IndexError, match=message("masked_temporal_index: time index 9 is out of range for 4 steps")
    ):
        make_tdt().masked_temporal_index(9)


def test_temporal_multi_index_picks_one_step_per_row() -> None:
    tdt = make_tdt()
    out = tdt.temporal_multi_index(torch.tensor([3, 0, 1]))
    assert out.n_elems() == B
    assert out["action"].tolist() == [3, 100, 201]
    for key, value in tdt.items():
        assert torch.equal(out[key], torch.stack([value[0, 3], value[1, 0], value[2, 1]]))
    full = make_tdt([4, 2, 1])
    assert full.temporal_multi_index(full.lengths - 1)["action"].tolist() == [3, 101, 200]


@pytest.mark.parametrize(
    ("t", "error", "text"),
    [
        (
            torch.tensor([0, 1, 2], dtype=torch.int32),
            TypeError,
            "t must be an int64 tensor, got a tensor of shape (3,), dtype torch.int32",
        ),
        ([0, 1, 2], TypeError, "t must be an int64 tensor, got a list"),
        (torch.tensor([0, 1]), ValueError, "t must have shape [3], got (2,)"),
        (torch.tensor([[0, 1, 2]]), ValueError, "t must have shape [3], got (1, 3)"),
        (torch.tensor([0, 4, 1]), IndexError, "t must lie in [0, 4), got values from 0 to 4"),
        (torch.tensor([0, -1, 1]), IndexError, "t must lie in [0, 4), got values from -1 to 1"),
    ],
)
def test_temporal_multi_index_rejects_bad_steps(t: object, error: type[Exception], text: str) -> None:
    with pytest.raises(error, match=message("TemporalDictTensor.temporal_multi_index: " + text)):
        make_tdt().temporal_multi_index(t)  # type: ignore[arg-type]


def test_temporal_slice_cuts_steps_and_clamps_lengths() -> None:
    tdt = make_tdt()
    part = tdt.temporal_slice(1, 3)
    assert part.n_timesteps() == 2
    assert part.lengths.tolist() == [2, 0, 1]  # clamp([4, 0, 2] - 1, 0, 2)
    for key, value in tdt.items():
        assert torch.equal(part[key], value[:, 1:3])
    assert part.specs() == tdt.specs()
    part["value"].fill_(-1.0)
    assert (tdt["value"][:, 1:3] == -1.0).all()  # views
    assert tdt.lengths.tolist() == LENGTHS


def test_temporal_slice_whole_and_empty() -> None:
    tdt = make_tdt()
    assert tdt.temporal_slice(0, T).equal(tdt)
    empty = tdt.temporal_slice(2, 2)
    assert empty.n_timesteps() == 0
    assert empty.lengths.tolist() == [0, 0, 0]
    assert empty["frame"].shape == (B, 0, 2, 2)
    assert tdt.temporal_slice(3, 4).lengths.tolist() == [1, 0, 0]


@pytest.mark.parametrize(("start", "end"), [(3, 2), (0, 5), (-1, 2), (1.0, 2)])
def test_temporal_slice_out_of_range(start: int, end: int) -> None:
    with pytest.raises(
        ValueError, match=message(f"expected 0 <= start <= end <= 4, got start={start!r}, end={end!r}")
    ):
        make_tdt().temporal_slice(start, end)


def test_shorten_drops_the_padding_shared_by_every_row() -> None:
    tdt = make_tdt([2, 0, 1], t=5)
    short = tdt.shorten()
    assert short.n_timesteps() == 2
    assert short.lengths.tolist() == [2, 0, 1]
    assert short.equal(tdt.temporal_slice(0, 2))
    short["action"].fill_(-7)
    assert (tdt["action"][:, :2] == -7).all()
    assert make_tdt([0, 0, 0]).shorten().n_timesteps() == 0
    assert make_tdt([4, 1, 0]).shorten().equal(make_tdt([4, 1, 0]))
    zero_rows = TemporalDictTensor({"x": torch.zeros(0, 3)}, torch.zeros(0, dtype=torch.int64))
    assert zero_rows.shorten().n_timesteps() == 0


def test_expand_pads_with_zeros_of_the_same_dtype() -> None:
    tdt = make_tdt()
    longer = tdt.expand(6)
    assert longer.n_timesteps() == 6
    assert longer.lengths.tolist() == LENGTHS
    assert longer.specs() == tdt.specs()
    for key, value in tdt.items():
        assert longer[key].dtype == value.dtype
        assert torch.equal(longer[key][:, :T], value)
        assert not longer[key][:, T:].any()
    assert longer.temporal_slice(0, T).equal(tdt)


def test_expand_to_the_same_length_returns_self() -> None:
    tdt = make_tdt()
    assert tdt.expand(T) is tdt


def test_expand_a_keyless_temporal_dicttensor() -> None:
    tdt = TemporalDictTensor({}, torch.tensor([1, 0]), n_timesteps=1).expand(3)
    assert tdt.n_timesteps() == 3
    assert tdt.mask().tolist() == [[True, False, False], [False, False, False]]


@pytest.mark.parametrize("n", [3, 0, 5.0])
def test_expand_cannot_shorten(n: int) -> None:
    with pytest.raises(ValueError, match=message(f"expand: n_timesteps must be an int >= 4, got {n!r}")):
        make_tdt().expand(n)


@pytest.mark.parametrize(
    ("key", "fill"), [("obs", -1.0), ("action", -1), ("done", True), ("value", 2.5), ("frame", 9)]
)
def test_fill_padding_writes_only_padding_for_every_rank(key: str, fill: float) -> None:
    tdt = make_tdt().get(key)
    before = tdt.clone()
    filled = tdt.fill_padding(fill)
    value = filled[key]
    mask = torch.tensor(MASK).view((B, T) + (1,) * (value.dim() - 2)).expand_as(value)
    assert torch.equal(value[mask], tdt[key][mask])
    assert (value[~mask] == fill).all()
    assert value.dtype == tdt[key].dtype
    assert filled.lengths.tolist() == LENGTHS
    assert tdt.equal(before)  # a copy


def test_fill_padding_defaults_to_zero() -> None:
    filled = make_tdt().fill_padding()
    assert filled["frame"][1].sum() == 0
    assert filled["action"][2].tolist() == [200, 201, 0, 0]


def test_masked_flatten_lists_the_real_steps_row_after_row() -> None:
    tdt = make_tdt()
    flat = tdt.masked_flatten()
    assert flat.n_elems() == sum(LENGTHS)
    assert flat["action"].tolist() == [0, 1, 2, 3, 200, 201]
    assert flat["frame"].shape == (6, 2, 2)
    assert flat["obs"].shape == (6, 2)
    assert flat.specs() == tdt.specs()
    empty = make_tdt([0, 0, 0]).masked_flatten()
    assert empty.n_elems() == 0
    assert empty["frame"].shape == (0, 2, 2)


# ---------------------------------------------------------------------------- rows


@pytest.mark.parametrize(
    ("index", "rows"),
    [
        (1, [1]),
        (-1, [2]),
        (slice(0, 2), [0, 1]),
        (slice(None, None, 2), [0, 2]),
        ([2, 2, 0], [2, 2, 0]),
        (torch.tensor([2, -3]), [2, 0]),
        (torch.tensor([False, True, True]), [1, 2]),
        ([], []),
    ],
)
def test_row_indexing_selects_values_and_lengths(index: Any, rows: list[int]) -> None:
    tdt = make_tdt()
    for selected in (tdt[index], tdt.index(index)):
        assert isinstance(selected, TemporalDictTensor)
        assert selected.n_elems() == len(rows)
        assert selected.n_timesteps() == T
        assert selected.lengths.tolist() == [LENGTHS[r] for r in rows]
        for key, value in tdt.items():
            assert torch.equal(selected[key], value[rows])


def test_int_and_slice_row_indexing_give_views() -> None:
    tdt = make_tdt()
    tdt[1:3]["action"].fill_(-1)
    tdt[0]["obs"].fill_(-1.0)
    assert (tdt["action"][1:] == -1).all()
    assert (tdt["obs"][0] == -1.0).all()
    copy = tdt[[0]]
    copy["obs"].fill_(5.0)
    assert (tdt["obs"][0] == -1.0).all()


@pytest.mark.parametrize(
    ("index", "error", "text"),
    [
        (3, IndexError, "row index 3 is out of range for 3 rows"),
        (-4, IndexError, "row index -4 is out of range for 3 rows"),
        (torch.tensor([0, 3]), IndexError, "row indices must lie in [-3, 3), got values from 0 to 3"),
        (torch.tensor([True, False]), IndexError, "a bool row mask must have 3 elements, got 2"),
        (1.5, TypeError, "or a bool tensor, got a float"),
    ],
)
def test_bad_row_indices_are_rejected(index: Any, error: type[Exception], text: str) -> None:
    for tdt in (make_tdt(), TemporalDictTensor({}, torch.tensor(LENGTHS), n_timesteps=T)):
        with pytest.raises(error, match=message(text)):
            tdt[index]


def test_cat_with_the_same_number_of_steps() -> None:
    a, b = make_tdt([4, 0, 2]), make_tdt([1, 3], offset=10)
    out = TemporalDictTensor.cat([a, b])
    assert out.n_elems() == 5
    assert out.n_timesteps() == T
    assert out.lengths.tolist() == [4, 0, 2, 1, 3]
    assert out[0:3].equal(a)
    assert out[3:5].equal(b)


def test_cat_with_different_steps_pads_with_zeros_and_keeps_dtypes() -> None:
    short, long = make_tdt([2, 1], t=2), make_tdt([0, 5, 3], t=6, offset=10)
    out = TemporalDictTensor.cat([short, long])
    assert out.n_timesteps() == 6
    assert out.lengths.tolist() == [2, 1, 0, 5, 3]
    assert out.specs() == short.specs()
    for key in short:
        assert out[key].dtype == short[key].dtype
        assert torch.equal(out[key][:2, :2], short[key])
        assert not out[key][:2, 2:].any()
        assert torch.equal(out[key][2:], long[key])
    assert out[0:2].temporal_slice(0, 2).equal(short)
    assert out[0:2].equal(short.expand(6))


def test_cat_keeps_the_device() -> None:
    short = make_tdt([1, 2], t=2).to("meta")
    long = make_tdt([3], t=3).to("meta")
    out = TemporalDictTensor.cat([short, long])
    assert out.device == torch.device("meta")
    assert all(v.device == torch.device("meta") for v in out.values())
    assert out.n_timesteps() == 3
    assert out.specs() == short.specs()


def test_zeros_on_the_meta_device_has_the_shapes_and_no_values() -> None:
    specs = Specs({"obs": TensorSpec((2,), torch.float32), "done": TensorSpec((), torch.bool)})
    buffer = TemporalDictTensor.zeros(specs, 3, 4, device="meta")
    assert buffer.device == torch.device("meta") and buffer.lengths.is_meta
    assert buffer["obs"].shape == (3, 4, 2) and buffer["done"].dtype == torch.bool
    assert buffer.mask().shape == (3, 4) and buffer.specs() == specs


def test_cat_of_keyless_temporal_dicttensors() -> None:
    a = TemporalDictTensor({}, torch.tensor([1]), n_timesteps=1)
    b = TemporalDictTensor({}, torch.tensor([0, 3]), n_timesteps=3)
    out = TemporalDictTensor.cat([a, b])
    assert out.n_elems() == 3
    assert out.n_timesteps() == 3
    assert out.lengths.tolist() == [1, 0, 3]


@pytest.mark.parametrize(
    ("second", "error", "text"),
    [
        (
            TemporalDictTensor({"a": torch.zeros(1, 2)}),
            ValueError,
            "element 1 has keys ['a'], expected ['a', 'b'] (the keys of element 0)",
        ),
        (
            TemporalDictTensor(
                {"a": torch.zeros(1, 5, dtype=torch.float64), "b": torch.zeros(1, 5, 2, dtype=torch.uint8)}
            ),
            TypeError,
            "key 'a' of element 1 has dtype torch.float64, expected torch.float32",
        ),
        (
            TemporalDictTensor({"a": torch.zeros(1, 2), "b": torch.zeros(1, 2, 3, dtype=torch.uint8)}),
            ValueError,
            "key 'b' of element 1 has rows of shape (4, 3), expected (4, 2)",
        ),
        (
            TemporalDictTensor({"a": torch.zeros(1, 2), "b": torch.zeros(1, 2, 2, dtype=torch.uint8)}).to(
                "meta"
            ),
            ValueError,
            "element 1 is on meta, expected cpu",
        ),
        (
            DictTensor({"a": torch.zeros(1, 4), "b": torch.zeros(1, 4, 2, dtype=torch.uint8)}),
            TypeError,
            "element 1 must be a TemporalDictTensor, got a DictTensor",
        ),
    ],
)
def test_cat_of_mismatched_temporal_dicttensors_is_rejected(
    second: object, error: type[Exception], text: str
) -> None:
    first = TemporalDictTensor({"a": torch.zeros(2, 4), "b": torch.zeros(2, 4, 2, dtype=torch.uint8)})
    with pytest.raises(error, match=message("TemporalDictTensor.cat: " + text)):
        TemporalDictTensor.cat([first, second])  # type: ignore[list-item]


def test_cat_needs_a_non_empty_list() -> None:
    with pytest.raises(
        ValueError,
        match=message("TemporalDictTensor.cat: expected at least one TemporalDictTensor, got an empty list"),
    ):
        TemporalDictTensor.cat([])
    with pytest.raises(
        TypeError,
        match=message(
            "TemporalDictTensor.cat: expected a list of TemporalDictTensors, got a TemporalDictTensor"
        ),
    ):
        TemporalDictTensor.cat(make_tdt())  # type: ignore[arg-type]


# ---------------------------------------------------------------------------- storage


def test_to_moves_values_and_lengths_and_keeps_dtypes() -> None:
    tdt = make_tdt()
    moved = tdt.to("meta")
    assert moved.device == torch.device("meta")
    assert moved.lengths.device == torch.device("meta")
    assert moved.lengths.dtype == torch.int64
    assert all(v.device == torch.device("meta") for v in moved.values())
    assert moved.specs() == tdt.specs()
    assert moved.n_timesteps() == T
    same = tdt.to("cpu")
    assert same.lengths is tdt.lengths
    assert all(same[k] is v for k, v in tdt.items())


def test_to_moves_the_lengths_of_a_keyless_temporal_dicttensor() -> None:
    moved = TemporalDictTensor({}, torch.tensor([1, 0]), n_timesteps=2).to("meta")
    assert moved.device == torch.device("meta")
    assert moved.n_elems() == 2


@pytest.mark.skipif(torch.backends.cuda.is_built(), reason="needs a torch built without CUDA")
def test_to_cuda_on_a_torch_without_it_is_a_value_error_with_or_without_keys() -> None:
    for tdt in (make_tdt(), TemporalDictTensor({}, torch.tensor([1, 0]), n_timesteps=2)):
        with pytest.raises(ValueError, match="device 'cuda' cannot be used on this machine"):
            tdt.to("cuda")
        for index in (0, np.int64(0)):  # a CUDA index
            with pytest.raises(ValueError, match="device 'cuda:0' cannot be used on this machine"):
                tdt.to(index)


def test_clone_is_deep_and_detach_shares_storage() -> None:
    tdt = make_tdt()
    copy = tdt.clone()
    assert copy.equal(tdt)
    copy["obs"].zero_()
    copy.lengths.zero_()
    assert tdt.lengths.tolist() == LENGTHS
    assert tdt["obs"].abs().sum() > 0
    graph = TemporalDictTensor({"w": torch.ones(2, 3, requires_grad=True) * 3})
    detached = graph.detach()
    assert not detached["w"].requires_grad
    assert detached["w"].data_ptr() == graph["w"].data_ptr()
    assert detached.lengths is graph.lengths


def test_share_memory_moves_values_and_lengths() -> None:
    tdt = make_tdt()
    assert tdt.share_memory_() is tdt
    assert tdt.lengths.is_shared()
    assert tdt.to_dicttensor().is_shared()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="pin_memory needs a CUDA build and device")
def test_pin_memory() -> None:
    pinned = make_tdt().pin_memory()
    assert pinned.lengths.is_pinned()
    assert all(v.is_pinned() for v in pinned.values())
    assert pinned.equal(make_tdt())


def test_equal_compares_steps_lengths_and_padding() -> None:
    tdt = make_tdt()
    assert tdt.equal(make_tdt())
    assert not tdt.equal(make_tdt([4, 1, 2]))
    assert not tdt.equal(tdt.expand(5))
    padded = tdt.clone()
    padded["action"][1, 0] = -1  # row 1 has length 0: only its padding changes
    assert not tdt.equal(padded)
    assert not tdt.equal(tdt.to_dicttensor())  # type: ignore[arg-type]
    assert not tdt.equal(tdt.to("meta"))


def test_fill_padding_refuses_to_truncate_a_float_into_integer_keys() -> None:
    tdt = TemporalDictTensor({"a": torch.zeros(2, 3, dtype=torch.int64)}, torch.tensor([1, 3]))
    with pytest.raises(
        ValueError, match=re.escape("value 2.5 cannot be stored exactly in key 'a' of dtype torch.int64")
    ):
        tdt.fill_padding(2.5)
    assert tdt.fill_padding(2.0)["a"].tolist() == [[0, 2, 2], [0, 0, 0]]


def test_fill_padding_names_the_key_a_value_does_not_fit() -> None:
    tdt = TemporalDictTensor({"u": torch.zeros(2, 3, dtype=torch.uint8)}, torch.tensor([1, 3]))
    for value in (-1, 256, 0.5):
        with pytest.raises(
            ValueError, match=re.escape(f"value {value!r} cannot be stored exactly in key 'u'")
        ):
            tdt.fill_padding(value)
    assert tdt.fill_padding(255)["u"].tolist() == [[0, 255, 255], [0, 0, 0]]
    flags = TemporalDictTensor({"d": torch.zeros(1, 2, dtype=torch.bool)}, torch.tensor([1]))
    with pytest.raises(
        ValueError, match=re.escape("cannot be stored exactly in key 'd' of dtype torch.bool")
    ):
        flags.fill_padding(-1)
    assert flags.fill_padding(True)["d"].tolist() == [[False, True]]
    assert flags.fill_padding(np.True_)["d"].tolist() == [[False, True]]  # NumPy's bool as Python's
    assert TemporalDictTensor({"f": torch.zeros(1, 2)}, torch.tensor([1])).fill_padding(np.True_)[
        "f"
    ].tolist() == [[0.0, 1.0]]


def test_temporal_multi_index_wants_t_on_the_data_device() -> None:
    tdt = TemporalDictTensor({"a": torch.zeros(2, 3)})
    t = torch.zeros(2, dtype=torch.int64, device="meta")
    with pytest.raises(ValueError, match=re.escape("t is on meta, expected cpu")):
        tdt.temporal_multi_index(t)


def test_missing_key_and_bad_set_name_the_temporal_class() -> None:
    tdt = TemporalDictTensor({"a": torch.zeros(2, 3)})
    with pytest.raises(KeyError, match=re.escape("TemporalDictTensor has no key 'b'; its keys are ['a']")):
        tdt["b"]
    with pytest.raises(
        ValueError, match=re.escape("TemporalDictTensor.set: value of key 'b' must have 2 rows")
    ):
        tdt.set("b", torch.zeros(5, 3))


def test_is_shared_covers_values_and_lengths() -> None:
    tdt = TemporalDictTensor({"a": torch.zeros(2, 3)})
    assert not tdt.is_shared()
    assert tdt.share_memory_().is_shared()
    assert tdt.lengths.is_shared()


def test_bools_are_not_time_steps() -> None:
    tdt = TemporalDictTensor({"a": torch.zeros(2, 3)})
    with pytest.raises(ValueError, match="n_timesteps must be an int >= 3, got True"):
        tdt.expand(True)
    with pytest.raises(ValueError, match="expected 0 <= start <= end <= 3"):
        tdt.temporal_slice(False, 2)


def test_rows_of_a_buffer_are_written_with_their_lengths_and_padded_with_zeros() -> None:
    buffer = TemporalDictTensor.zeros(Specs({"x": TensorSpec((2,), torch.float32)}), 4, 5, shared=True)
    buffer["x"].fill_(7.0)
    episodes = TemporalDictTensor({"x": torch.ones(2, 3, 2)}, torch.tensor([3, 1]))
    buffer[1:3] = episodes
    assert buffer.lengths.tolist() == [5, 3, 1, 5]
    assert torch.equal(buffer["x"][1:3, :3], episodes["x"])
    assert torch.equal(buffer["x"][1:3, 3:], torch.zeros(2, 2, 2))  # nothing of the rows' old contents
    assert torch.equal(buffer["x"][0], torch.full((5, 2), 7.0))
    assert buffer.is_shared()  # written in place
    buffer.copy_(episodes[0], torch.tensor([0, 3]))  # one row, written to both
    assert buffer.lengths.tolist() == [3, 3, 1, 3]


def test_row_writes_check_what_they_write() -> None:
    buffer = TemporalDictTensor.zeros(Specs({"x": TensorSpec((), torch.float32)}), 3, 4)
    with pytest.raises(TypeError, match="rows are assigned from a TemporalDictTensor, got a tensor"):
        buffer[0] = torch.zeros(1, 4)  # type: ignore[assignment]
    with pytest.raises(ValueError, match="src has 5 time steps, more than this TemporalDictTensor's 4"):
        buffer[0] = TemporalDictTensor({"x": torch.zeros(1, 5)})
    with pytest.raises(
        TypeError, match=re.escape("TemporalDictTensor.copy_: key 'x' has dtype torch.float64")
    ):
        buffer[0] = TemporalDictTensor({"x": torch.zeros(1, 4, dtype=torch.float64)})
    with pytest.raises(
        ValueError, match=re.escape("TemporalDictTensor.copy_: src has 2 rows, the index selects 3")
    ):
        buffer.copy_(TemporalDictTensor({"x": torch.zeros(2, 4)}))
    with pytest.raises(IndexError, match="out of range"):
        buffer[5] = TemporalDictTensor({"x": torch.zeros(1, 4)})
    buffer["y"] = torch.ones(3, 4)
    assert buffer["y"].sum() == 12


def test_fill_padding_refuses_values_a_float_dtype_cannot_hold() -> None:
    tdt = TemporalDictTensor({"r": torch.zeros(2, 3, dtype=torch.float16)}, torch.tensor([1, 3]))
    with pytest.raises(
        ValueError, match=re.escape("value 70000 cannot be stored exactly in key 'r' of dtype torch.float16")
    ):
        tdt.fill_padding(70000)
    with pytest.raises(ValueError, match="cannot be stored exactly in key 'r'"):
        tdt.fill_padding(2**2000)
    with pytest.raises(TypeError, match="fill_padding: value must be a real number, got a NoneType"):
        tdt.fill_padding(None)  # type: ignore[arg-type]
    assert tdt.fill_padding(float("-inf"))["r"][0, 1].item() == float("-inf")


def test_numpy_ints_count_as_ints_for_sizes_and_time_indices() -> None:
    tdt = TemporalDictTensor(
        {"x": torch.arange(15.0).view(3, 5)}, torch.tensor([5, 3, 1]), n_timesteps=np.int64(5)
    )
    assert type(tdt.n_timesteps()) is int
    assert torch.equal(tdt.temporal_index(np.int64(1))["x"], tdt.temporal_index(1)["x"])
    assert tdt.temporal_slice(np.int64(0), np.int32(2)).n_timesteps() == 2
    assert type(tdt.expand(np.int64(8)).n_timesteps()) is int
    zeros = TemporalDictTensor.zeros(tdt.specs(), np.int64(2), np.int64(3))
    assert (zeros.n_elems(), zeros.n_timesteps()) == (2, 3)
    assert type(DictTensor(batch_size=np.int64(3)).n_elems()) is int


def test_get_and_cat_name_the_temporal_class() -> None:
    tdt = TemporalDictTensor({"a": torch.zeros(2, 3)})
    with pytest.raises(KeyError, match=re.escape("TemporalDictTensor has no key 'b'")):
        tdt.get("b")
    with pytest.raises(
        TypeError, match=re.escape("TemporalDictTensor.get: keys must be a str or an iterable of str")
    ):
        tdt.get(5)  # type: ignore[arg-type]
    on_meta = TemporalDictTensor.unchecked(
        DictTensor(batch_size=2), torch.zeros(2, dtype=torch.int64, device="meta"), 0
    )
    with pytest.raises(
        ValueError, match=re.escape("TemporalDictTensor.cat: element 1 is on meta, expected cpu")
    ):
        TemporalDictTensor.cat([TemporalDictTensor({}, torch.zeros(2, dtype=torch.int64)), on_meta])
