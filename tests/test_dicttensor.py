"""Behaviour tests for rlstruct.dicttensor: DictTensor and masked_dicttensor."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
import torch

from rlstruct import DictTensor, Specs, TemporalDictTensor, TensorSpec, masked_dicttensor

B = 4


def make_dt(b: int = B, offset: int = 0) -> DictTensor:
    """B rows with values of rank 1 to 4 and four dtypes; row i is recognisable from its values."""
    rows = torch.arange(offset, offset + b)
    return DictTensor(
        {
            "obs": rows.view(b, 1).float() * 10 + torch.arange(3).float(),  # [B, 3] float32
            "action": rows.clone(),  # [B] int64, one scalar per row
            "done": rows % 2 == 0,  # [B] bool
            "grid": rows.view(b, 1, 1).double().expand(b, 2, 3).clone(),  # [B, 2, 3] float64
            "image": (rows.view(b, 1, 1, 1) % 256).to(torch.uint8).expand(b, 2, 2, 3).clone(),  # [B, 2, 2, 3]
        }
    )


def rows_of(dt: DictTensor) -> list[int]:
    """The row identities of a DictTensor built by make_dt."""
    return dt["action"].tolist()


def message(text: str) -> str:
    """A `match` pattern for an exact substring of an error message."""
    return re.escape(text)


# ---------------------------------------------------------------------------- construction


def test_construction_stores_the_given_tensors_without_copying() -> None:
    obs, reward = torch.zeros(3, 2), torch.arange(3.0)
    dt = DictTensor({"obs": obs, "reward": reward})
    assert dt["obs"] is obs
    assert dt["reward"] is reward
    assert dt.n_elems() == 3
    assert dt.device == torch.device("cpu")


def test_mapping_interface_keeps_insertion_order() -> None:
    dt = make_dt()
    expected = ["obs", "action", "done", "grid", "image"]
    assert list(dt.keys()) == expected
    assert list(dt) == expected
    assert [k for k, _ in dt.items()] == expected
    assert all(v is dt[k] for k, v in zip(expected, dt.values(), strict=True))
    assert "obs" in dt
    assert "missing" not in dt


def test_len_is_not_defined() -> None:
    with pytest.raises(TypeError):
        len(make_dt())  # type: ignore[arg-type]


def test_batch_size_is_checked_against_the_values_and_required_only_without_keys() -> None:
    assert DictTensor({"a": torch.zeros(3)}, batch_size=3).n_elems() == 3
    assert DictTensor(batch_size=5).n_elems() == 5
    assert DictTensor().n_elems() == 0
    assert DictTensor({}).n_elems() == 0


def test_empty_dicttensor_without_and_with_batch_size() -> None:
    for dt, rows in [(DictTensor(), 0), (DictTensor(batch_size=3), 3)]:
        assert dt.empty()
        assert dt.n_elems() == rows
        assert dt.device is None
        assert list(dt.keys()) == []
        assert len(dt.specs()) == 0
        assert dt.is_shared()


def test_zero_row_dicttensor_with_keys_is_not_empty() -> None:
    dt = DictTensor({"obs": torch.zeros(0, 3), "action": torch.zeros(0, dtype=torch.int64)})
    assert not dt.empty()
    assert dt.n_elems() == 0
    assert dt.specs()["obs"] == TensorSpec((3,), torch.float32)
    assert dt[0:5].n_elems() == 0
    assert dt[torch.zeros(0, dtype=torch.bool)].n_elems() == 0


def test_repr_names_rows_device_and_keys() -> None:
    text = repr(DictTensor({"obs": torch.zeros(2, 3)}))
    assert text == "DictTensor(n_elems=2, device=cpu, {obs: (3,) torch.float32})"


@pytest.mark.parametrize(
    ("build", "error", "text"),
    [
        (
            lambda: DictTensor({"a": torch.zeros(3), "b": torch.zeros(4, 2)}),
            ValueError,
            "value of key 'b' has 4 rows, expected 3 (from key 'a'); got shape (4, 2)",
        ),
        (
            lambda: DictTensor({"a": torch.zeros(3)}, batch_size=4),
            ValueError,
            "value of key 'a' has 3 rows, expected 4 (from batch_size); got shape (3,)",
        ),
        (
            lambda: DictTensor({"a": torch.zeros(4), "b": torch.zeros(3)}, batch_size=4),
            ValueError,
            "value of key 'b' has 3 rows, expected 4 (from batch_size)",
        ),
        (
            lambda: DictTensor({"a": [1.0, 2.0]}),  # type: ignore[dict-item]
            TypeError,
            "value of key 'a' must be a torch.Tensor, got a list",
        ),
        (
            lambda: DictTensor({"a": torch.zeros(2), 1: torch.zeros(2)}),  # type: ignore[dict-item]
            TypeError,
            "keys must be str, got 1 (int)",
        ),
        (
            lambda: DictTensor({"a": torch.tensor(1.0)}),
            ValueError,
            "value of key 'a' must have a batch dimension (shape [B, ...]), got a 0-d tensor",
        ),
        (
            lambda: DictTensor({"a": torch.zeros(3), "b": torch.empty(3, device="meta")}),
            ValueError,
            "value of key 'b' is on meta, expected cpu (the device of key 'a')",
        ),
        (lambda: DictTensor(batch_size=-1), ValueError, "batch_size must be a non-negative int, got -1"),
        (lambda: DictTensor(batch_size=True), ValueError, "batch_size must be a non-negative int, got True"),
        (
            lambda: DictTensor(batch_size=2.0),  # type: ignore[arg-type]
            ValueError,
            "batch_size must be a non-negative int, got 2.0",
        ),
    ],
)
def test_bad_construction_is_rejected_with_a_message(
    build: Callable[[], DictTensor], error: type[Exception], text: str
) -> None:
    with pytest.raises(error, match=message(text)):
        build()


# ---------------------------------------------------------------------------- keys


def test_getitem_of_a_missing_key_names_the_key_and_the_keys() -> None:
    with pytest.raises(KeyError, match=message("DictTensor has no key 'z'; its keys are ['a']")):
        DictTensor({"a": torch.zeros(2)})["z"]


def test_get_one_key_or_several_shares_storage() -> None:
    dt = make_dt()
    one = dt.get("obs")
    assert list(one.keys()) == ["obs"]
    assert one["obs"] is dt["obs"]
    assert one.n_elems() == B
    several = dt.get(["done", "action"])
    assert list(several.keys()) == ["done", "action"]
    assert several["done"] is dt["done"]


def test_get_with_clone_copies() -> None:
    dt = make_dt()
    copy = dt.get(["obs", "image"], clone=True)
    assert copy.equal(dt.get(["obs", "image"]))
    copy["obs"].fill_(-1.0)
    copy["image"].fill_(7)
    assert dt["obs"].min() >= 0
    assert not (dt["image"] == 7).all()


def test_get_no_keys_keeps_the_rows() -> None:
    sub = make_dt().get([])
    assert sub.empty()
    assert sub.n_elems() == B
    assert sub.device is None


def test_get_missing_key_raises_key_error() -> None:
    with pytest.raises(KeyError, match=message("DictTensor has no key 'nope'")):
        make_dt().get(["obs", "nope"])


def test_set_adds_and_replaces_keys_in_place_without_copying() -> None:
    dt = make_dt()
    value = torch.ones(B, 5)
    dt.set("new", value)
    assert dt["new"] is value
    assert list(dt.keys())[-1] == "new"
    replacement = torch.zeros(B, dtype=torch.int32)
    dt["action"] = replacement
    assert dt["action"] is replacement
    assert dt.specs()["action"] == TensorSpec((), torch.int32)


def test_set_on_a_keyless_dicttensor_fixes_the_device() -> None:
    dt = DictTensor(batch_size=3)
    dt.set("x", torch.empty(3, device="meta"))
    assert dt.device == torch.device("meta")
    with pytest.raises(ValueError, match=message("value of key 'y' is on cpu, expected meta")):
        dt.set("y", torch.zeros(3))


def test_replacing_the_only_key_does_not_change_the_device() -> None:
    dt = DictTensor({"x": torch.zeros(3)})
    with pytest.raises(
        ValueError, match=re.escape("DictTensor.set: value of key 'x' is on meta, expected cpu")
    ):
        dt.set("x", torch.empty(3, device="meta"))
    assert dt.device == torch.device("cpu")


def test_an_empty_dicttensor_takes_the_device_of_its_first_key() -> None:
    dt = DictTensor(batch_size=3)
    dt.set("x", torch.empty(3, device="meta"))
    assert dt.device == torch.device("meta")


@pytest.mark.parametrize(
    ("key", "value", "error", "text"),
    [
        (1, torch.zeros(B), TypeError, "DictTensor.set: key must be str, got 1"),
        ("x", 1.0, TypeError, "DictTensor.set: value of key 'x' must be a torch.Tensor, got a float"),
        (
            "x",
            torch.zeros(3),
            ValueError,
            "DictTensor.set: value of key 'x' must have 4 rows, got shape (3,)",
        ),
        (
            "x",
            torch.tensor(2.0),
            ValueError,
            "DictTensor.set: value of key 'x' must have 4 rows, got shape ()",
        ),
        (
            "x",
            torch.empty(B, device="meta"),
            ValueError,
            "DictTensor.set: value of key 'x' is on meta, expected cpu",
        ),
    ],
)
def test_set_rejects_bad_values(key: object, value: object, error: type[Exception], text: str) -> None:
    dt = make_dt()
    with pytest.raises(error, match=message(text)):
        dt.set(key, value)  # type: ignore[arg-type]
    assert "x" not in dt


def test_setitem_with_a_key_rejects_a_non_tensor() -> None:
    with pytest.raises(TypeError, match=message("value of key 'x' must be a torch.Tensor, got a list")):
        make_dt()["x"] = [0, 1, 2, 3]  # type: ignore[assignment]


def test_prepend_key_and_truncate_key_share_storage_and_round_trip() -> None:
    dt = make_dt()
    prefixed = dt.prepend_key("env/")
    assert list(prefixed.keys()) == [f"env/{k}" for k in dt]
    assert prefixed["env/obs"] is dt["obs"]
    assert prefixed.truncate_key("env/").equal(dt)
    both = prefixed | DictTensor({"agent/eps": torch.zeros(B)})
    assert list(both.truncate_key("agent/").keys()) == ["eps"]
    assert both.truncate_key("agent/")["eps"] is both["agent/eps"]


def test_truncate_key_without_a_match_is_empty_with_the_same_rows() -> None:
    none = make_dt().truncate_key("zzz/")
    assert none.empty()
    assert none.n_elems() == B
    assert none.device is None


def test_merge_and_or_give_the_union_in_order() -> None:
    a = make_dt().get(["obs", "action"])
    b = make_dt().get(["done"])
    for merged in (a.merge(b), a | b):
        assert list(merged.keys()) == ["obs", "action", "done"]
        assert merged["done"] is b["done"]
        assert merged.n_elems() == B
    assert list(a.keys()) == ["obs", "action"]  # not modified


def test_merge_with_a_keyless_dicttensor_keeps_the_device() -> None:
    meta = DictTensor({"x": torch.empty(3, device="meta")})
    assert (DictTensor(batch_size=3) | meta).device == torch.device("meta")
    assert (meta | DictTensor(batch_size=3)).device == torch.device("meta")


@pytest.mark.parametrize(
    ("other", "error", "text"),
    [
        (DictTensor({"obs": torch.zeros(B)}), ValueError, "the keys must be disjoint, both hold ['obs']"),
        (DictTensor({"x": torch.zeros(3)}), ValueError, "other has 3 rows, expected 4"),
        (DictTensor(batch_size=3), ValueError, "other has 3 rows, expected 4"),
        (DictTensor({"x": torch.empty(B, device="meta")}), ValueError, "other is on meta, expected cpu"),
        ({"x": torch.zeros(B)}, TypeError, "other must be a DictTensor, got a dict"),
    ],
)
def test_merge_rejects_bad_input(other: object, error: type[Exception], text: str) -> None:
    with pytest.raises(error, match=message("DictTensor.merge: " + text)):
        make_dt().merge(other)  # type: ignore[arg-type]


def test_specs_give_per_row_shapes_and_dtypes() -> None:
    assert make_dt().specs() == Specs(
        {
            "obs": TensorSpec((3,), torch.float32),
            "action": TensorSpec((), torch.int64),
            "done": TensorSpec((), torch.bool),
            "grid": TensorSpec((2, 3), torch.float64),
            "image": TensorSpec((2, 2, 3), torch.uint8),
        }
    )


# ---------------------------------------------------------------------------- row selection


@pytest.mark.parametrize(
    ("index", "rows"),
    [
        (1, [1]),
        (-1, [3]),
        (-4, [0]),
        (slice(1, 3), [1, 2]),
        (slice(None, None, 2), [0, 2]),
        (slice(1, None, 2), [1, 3]),
        (slice(-3, None), [1, 2, 3]),
        (slice(10, 20), []),
        ([3, 0, 0], [3, 0, 0]),
        ([-1], [3]),
        ([], []),
        (torch.tensor([2, 0, 2, -1]), [2, 0, 2, 3]),
        (torch.tensor([], dtype=torch.int64), []),
        (torch.tensor([True, False, False, True]), [0, 3]),
        (torch.zeros(B, dtype=torch.bool), []),
    ],
)
def test_row_indexing_selects_rows_of_every_key(index: Any, rows: list[int]) -> None:
    dt = make_dt()
    for selected in (dt[index], dt.index(index)):
        assert isinstance(selected, DictTensor)
        assert selected.n_elems() == len(rows)
        assert rows_of(selected) == rows
        assert selected.specs() == dt.specs()
        for key, value in dt.items():
            assert torch.equal(selected[key], value[rows])


def test_int_index_keeps_the_batch_dimension() -> None:
    one = make_dt()[2]
    assert one["image"].shape == (1, 2, 2, 3)
    assert one["action"].shape == (1,)


def test_slice_method_with_and_without_end() -> None:
    dt = make_dt()
    assert rows_of(dt.slice(1, 3)) == [1, 2]
    assert rows_of(dt.slice(2)) == [2]
    assert rows_of(dt.slice(-1)) == [3]
    assert rows_of(dt.slice(3, 1)) == []
    with pytest.raises(IndexError, match=message("row index 4 is out of range for 4 rows")):
        dt.slice(4)


def test_unfold_gives_one_row_views() -> None:
    dt = make_dt()
    parts = dt.unfold()
    assert [rows_of(p) for p in parts] == [[0], [1], [2], [3]]
    assert DictTensor.cat(parts).equal(dt)
    parts[1]["obs"].fill_(-5.0)
    assert (dt["obs"][1] == -5.0).all()
    assert DictTensor(batch_size=2).unfold()[1].n_elems() == 1
    assert DictTensor().unfold() == []


@pytest.mark.parametrize("index", [1, -1, slice(1, 3), slice(0, None, 2)])
def test_int_and_slice_indexing_give_views(index: int | slice) -> None:
    dt = make_dt()
    selected = dt[index]
    for value in selected.values():
        value.zero_()
    assert dt["obs"][index].abs().sum() == 0
    assert not dt["done"][index].any()
    assert dt["image"][index].sum() == 0


@pytest.mark.parametrize("index", [[1, 2], torch.tensor([1, 2]), torch.tensor([False, True, True, False])])
def test_list_and_tensor_indexing_give_copies(index: Any) -> None:
    dt = make_dt()
    before = dt.clone()
    selected = dt[index]
    for value in selected.values():
        value.zero_()
    assert dt.equal(before)


def test_indexing_a_keyless_dicttensor_counts_rows() -> None:
    dt = DictTensor(batch_size=5)
    assert dt[1:4].n_elems() == 3
    assert dt[::2].n_elems() == 3
    assert dt[-1].n_elems() == 1
    assert dt[[0, 0, 1]].n_elems() == 3
    assert dt[torch.tensor([True, False, True, False, True])].n_elems() == 3
    assert dt[2].empty()


@pytest.mark.parametrize(
    ("index", "error", "text"),
    [
        (4, IndexError, "row index 4 is out of range for 4 rows"),
        (-5, IndexError, "row index -5 is out of range for 4 rows"),
        (torch.tensor([0, 9]), IndexError, "row indices must lie in [-4, 4), got values from 0 to 9"),
        (torch.tensor([-5, 1]), IndexError, "row indices must lie in [-4, 4), got values from -5 to 1"),
        ([1, 4], IndexError, "row indices must lie in [-4, 4), got values from 1 to 4"),
        (torch.tensor([True, False, True]), IndexError, "a bool row mask must have 4 elements, got 3"),
        (torch.ones(5, dtype=torch.bool), IndexError, "a bool row mask must have 4 elements, got 5"),
        (True, TypeError, "a bool is not a row index; use a bool tensor of shape [B]"),
        (
            [True, False, True, False],
            TypeError,
            "a list row index must hold ints, got an element True (bool)",
        ),
        ([0, 1.5], TypeError, "a list row index must hold ints, got an element 1.5 (float)"),
        (slice(None, None, -1), ValueError, "slice step must be positive, got -1"),
        (slice(1.5, 3), TypeError, "a row slice's start must be an int or None, got a float"),
        (slice(0, "2"), TypeError, "a row slice's stop must be an int or None, got a str"),
        (slice(0, 2, 1.0), TypeError, "a row slice's step must be an int or None, got a float"),
        (
            slice(torch.tensor(0.0), 2),
            TypeError,
            "a row slice's start must be an int or None, got a tensor of shape ()",
        ),
        (
            torch.tensor([0.0, 1.0]),
            TypeError,
            "a row index tensor must be int64 (or int32) or bool, got torch.float32",
        ),
        (torch.tensor([[0, 1]]), ValueError, "a row index tensor must be 1-D, got shape (1, 2)"),
        (torch.tensor(1.0), ValueError, "a row index tensor must be 1-D, got shape ()"),
        (torch.tensor(True), ValueError, "a row index tensor must be 1-D, got shape ()"),
        (
            (0, 1),
            TypeError,
            "rows are indexed by an int, a slice, a list of ints, an int64 (or int32) tensor",
        ),
        (1.0, TypeError, "or a bool tensor, got a float"),
    ],
)
def test_bad_row_indices_are_rejected(index: Any, error: type[Exception], text: str) -> None:
    for dt in (make_dt(), DictTensor(batch_size=B)):
        with pytest.raises(error, match=message(text)):
            dt[index]


def test_out_of_range_on_a_zero_row_dicttensor() -> None:
    dt = DictTensor({"x": torch.zeros(0, 2)})
    with pytest.raises(IndexError, match=message("row index 0 is out of range for 0 rows")):
        dt[0]
    with pytest.raises(IndexError, match=message("row indices must lie in [-0, 0), got values from 0 to 0")):
        dt[torch.tensor([0])]


# ---------------------------------------------------------------------------- writing rows


def test_setitem_on_rows_fills_a_preallocated_buffer() -> None:
    parts = [make_dt(2, offset=0), make_dt(2, offset=2), make_dt(2, offset=4)]
    buffer = DictTensor.zeros(parts[0].specs(), 6)
    for i, part in enumerate(parts):
        buffer[2 * i : 2 * i + 2] = part
    assert buffer.equal(DictTensor.cat(parts))


@pytest.mark.parametrize(
    ("index", "rows"),
    [
        (2, [2]),
        (-1, [3]),
        (slice(1, 3), [1, 2]),
        ([3, 0], [3, 0]),
        (torch.tensor([1, 3]), [1, 3]),
        (torch.tensor([False, True, False, True]), [1, 3]),
    ],
)
def test_copy_writes_the_selected_rows_only(index: Any, rows: list[int]) -> None:
    buffer = DictTensor.zeros(make_dt().specs(), B)
    src = make_dt(len(rows), offset=10)
    assert buffer.copy_(src, index) is buffer
    for key, value in buffer.items():
        assert torch.equal(value[rows], src[key])
        others = [r for r in range(B) if r not in rows]
        assert not value[others].any()


def test_copy_without_index_writes_all_rows_and_does_not_alias() -> None:
    buffer = DictTensor.zeros(make_dt().specs(), B)
    src = make_dt(offset=3)
    buffer.copy_(src)
    assert buffer.equal(src)
    src["obs"].fill_(-1.0)
    assert buffer["obs"].min() >= 0


def test_copy_broadcasts_one_row_to_several() -> None:
    buffer = DictTensor.zeros(make_dt().specs(), B)
    buffer[1:4] = make_dt(1, offset=7)
    assert rows_of(buffer) == [0, 7, 7, 7]
    assert torch.equal(buffer["grid"][1:], torch.full((3, 2, 3), 7.0, dtype=torch.float64))


def test_copy_into_a_view_writes_through() -> None:
    buffer = DictTensor.zeros(make_dt().specs(), B)
    buffer[2].copy_(make_dt(1, offset=9))
    assert rows_of(buffer) == [0, 0, 9, 0]


@pytest.mark.parametrize(
    ("src", "index", "error", "text"),
    [
        (
            DictTensor({"a": torch.zeros(3, 2)}),
            None,
            ValueError,
            "DictTensor.copy_: the keys differ: expected ['a', 'b'], got ['a']",
        ),
        (
            DictTensor({"a": torch.zeros(3, 2, dtype=torch.float64), "b": torch.zeros(3, dtype=torch.int64)}),
            None,
            TypeError,
            "DictTensor.copy_: key 'a' has dtype torch.float64, expected torch.float32",
        ),
        (
            DictTensor({"a": torch.zeros(3, 5), "b": torch.zeros(3, dtype=torch.int64)}),
            None,
            ValueError,
            "DictTensor.copy_: key 'a' has rows of shape (5,), expected (2,)",
        ),
        (
            DictTensor({"a": torch.zeros(2, 2), "b": torch.zeros(2, dtype=torch.int64)}),
            None,
            ValueError,
            "DictTensor.copy_: src has 2 rows, the index selects 3",
        ),
        (
            DictTensor({"a": torch.zeros(2, 2), "b": torch.zeros(2, dtype=torch.int64)}),
            torch.tensor([True, True, True]),
            ValueError,
            "DictTensor.copy_: src has 2 rows, the index selects 3",
        ),
        (
            DictTensor({"a": torch.zeros(1, 2), "b": torch.zeros(1, dtype=torch.int64)}),
            torch.tensor([5]),
            IndexError,
            "row indices must lie in [-3, 3), got values from 5 to 5",
        ),
        (
            DictTensor({"a": torch.zeros(1, 2), "b": torch.zeros(1, dtype=torch.int64)}),
            3,
            IndexError,
            "row index 3 is out of range for 3 rows",
        ),
        ({"a": torch.zeros(3, 2)}, None, TypeError, "DictTensor.copy_: expected a DictTensor, got a dict"),
    ],
)
def test_copy_rejects_bad_input_and_writes_nothing(
    src: object, index: Any, error: type[Exception], text: str
) -> None:
    buffer = DictTensor({"a": torch.zeros(3, 2), "b": torch.zeros(3, dtype=torch.int64)})
    with pytest.raises(error, match=message(text)):
        buffer.copy_(src, index)  # type: ignore[arg-type]
    assert not buffer["a"].any()
    assert not buffer["b"].any()


def test_assigning_rows_from_a_non_dicttensor_is_rejected() -> None:
    with pytest.raises(
        TypeError, match=message("rows are assigned from a DictTensor, got a tensor of shape (4,)")
    ):
        make_dt()[0:4] = torch.zeros(4)


# ---------------------------------------------------------------------------- cat, stack, where


def test_cat_concatenates_rows_in_order_into_new_storage() -> None:
    a, b, c = make_dt(2), make_dt(0, offset=50), make_dt(3, offset=2)
    out = DictTensor.cat([a, b, c])
    assert out.n_elems() == 5
    assert rows_of(out) == [0, 1, 2, 3, 4]
    assert out.specs() == a.specs()
    out["obs"].fill_(-1.0)
    assert a["obs"].min() >= 0


def test_cat_uses_the_key_order_of_the_first_element() -> None:
    a = DictTensor({"x": torch.zeros(1), "y": torch.ones(1)})
    b = DictTensor({"y": torch.ones(2), "x": torch.zeros(2)})
    out = DictTensor.cat([a, b])
    assert list(out.keys()) == ["x", "y"]
    assert torch.equal(out["y"], torch.ones(3))


def test_cat_and_stack_of_keyless_dicttensors_count_rows() -> None:
    assert DictTensor.cat([DictTensor(batch_size=2), DictTensor(batch_size=3)]).n_elems() == 5
    assert DictTensor.cat([DictTensor(), DictTensor()]).n_elems() == 0
    assert DictTensor.stack([DictTensor(batch_size=2)] * 3).n_elems() == 3
    assert DictTensor.stack([DictTensor(batch_size=2)] * 3, dim=1).n_elems() == 2


def test_cat_of_a_tuple_and_of_one_element() -> None:
    dt = make_dt()
    assert DictTensor.cat((dt,)).equal(dt)
    assert DictTensor.cat([dt]).equal(dt)


def test_stack_dim_0_adds_a_leading_dimension() -> None:
    parts = [make_dt(offset=0), make_dt(offset=10), make_dt(offset=20)]
    out = DictTensor.stack(parts)
    assert out.n_elems() == 3
    assert out["image"].shape == (3, B, 2, 2, 3)
    assert out["action"].shape == (3, B)
    for i, part in enumerate(parts):
        for key, value in part.items():
            assert torch.equal(out[key][i], value)


def test_stack_dim_1_gives_rows_of_steps() -> None:
    steps = [make_dt(offset=0), make_dt(offset=10)]
    out = DictTensor.stack(steps, dim=1)
    assert out.n_elems() == B
    assert out["action"].shape == (B, 2)
    assert out["grid"].shape == (B, 2, 2, 3)
    assert out["action"].tolist() == [[0, 10], [1, 11], [2, 12], [3, 13]]
    for t, step in enumerate(steps):
        for key, value in step.items():
            assert torch.equal(out[key][:, t], value)


def test_where_selects_rows_for_values_of_every_rank() -> None:
    a, b = make_dt(offset=0), make_dt(offset=100)
    condition = torch.tensor([True, False, False, True])
    out = DictTensor.where(condition, a, b)
    assert rows_of(out) == [0, 101, 102, 3]
    for key in a:
        assert torch.equal(out[key][0], a[key][0])
        assert torch.equal(out[key][1], b[key][1])
    assert out.specs() == a.specs()


def test_masked_dicttensor_takes_dt1_where_the_mask_is_true() -> None:
    dt0, dt1 = make_dt(offset=0), make_dt(offset=100)
    mask = torch.tensor([False, True, False, True])
    out = masked_dicttensor(dt0, dt1, mask)
    assert rows_of(out) == [0, 101, 2, 103]
    assert out.equal(DictTensor.where(mask, dt1, dt0))


def test_where_on_zero_rows_and_on_keyless_dicttensors() -> None:
    empty_rows = DictTensor({"x": torch.zeros(0, 2, 3)})
    out = DictTensor.where(torch.zeros(0, dtype=torch.bool), empty_rows, empty_rows)
    assert out["x"].shape == (0, 2, 3)
    keyless = DictTensor(batch_size=2)
    assert DictTensor.where(torch.tensor([True, False]), keyless, keyless).n_elems() == 2


def _cat(dts: list[DictTensor]) -> DictTensor:
    return DictTensor.cat(dts)


def _stack(dts: list[DictTensor]) -> DictTensor:
    return DictTensor.stack(dts)


def _stack_1(dts: list[DictTensor]) -> DictTensor:
    return DictTensor.stack(dts, dim=1)


def _where(dts: list[DictTensor]) -> DictTensor:
    return DictTensor.where(torch.ones(dts[0].n_elems(), dtype=torch.bool), dts[0], dts[1])


COMBINERS = [
    pytest.param(_cat, "DictTensor.cat", id="cat"),
    pytest.param(_stack, "DictTensor.stack", id="stack"),
    pytest.param(_stack_1, "DictTensor.stack", id="stack-dim1"),
    pytest.param(_where, "DictTensor.where", id="where"),
]


@pytest.mark.parametrize(("combine", "op"), COMBINERS)
@pytest.mark.parametrize(
    ("second", "error", "text"),
    [
        (
            DictTensor({"a": torch.zeros(2, 3)}),
            ValueError,
            "element 1 has keys ['a'], expected ['a', 'b'] (the keys of element 0)",
        ),
        (
            DictTensor({"a": torch.zeros(2, 3), "b": torch.zeros(2), "c": torch.zeros(2)}),
            ValueError,
            "element 1 has keys ['a', 'b', 'c'], expected ['a', 'b']",
        ),
        (
            DictTensor({"a": torch.zeros(2, 3, dtype=torch.float64), "b": torch.zeros(2, dtype=torch.int64)}),
            TypeError,
            "key 'a' of element 1 has dtype torch.float64, expected torch.float32 (the dtype in element 0)",
        ),
        (
            DictTensor({"a": torch.zeros(2, 3), "b": torch.zeros(2, dtype=torch.bool)}),
            TypeError,
            "key 'b' of element 1 has dtype torch.bool, expected torch.int64",
        ),
        (
            DictTensor({"a": torch.zeros(2, 4), "b": torch.zeros(2, dtype=torch.int64)}),
            ValueError,
            "key 'a' of element 1 has rows of shape (4,), expected (3,)",
        ),
        (
            DictTensor({"a": torch.zeros(2, 3, 1), "b": torch.zeros(2, dtype=torch.int64)}),
            ValueError,
            "key 'a' of element 1 has rows of shape (3, 1), expected (3,)",
        ),
        (
            DictTensor(
                {"a": torch.empty(2, 3, device="meta"), "b": torch.empty(2, dtype=torch.int64, device="meta")}
            ),
            ValueError,
            "element 1 is on meta, expected cpu",
        ),
        ({"a": torch.zeros(2, 3)}, TypeError, "element 1 must be a DictTensor, got a dict"),
    ],
)
def test_combining_mismatched_dicttensors_is_rejected(
    combine: Callable[[list[DictTensor]], DictTensor],
    op: str,
    second: object,
    error: type[Exception],
    text: str,
) -> None:
    first = DictTensor({"a": torch.zeros(2, 3), "b": torch.zeros(2, dtype=torch.int64)})
    with pytest.raises(error, match=message(f"{op}: {named(op, text)}")):
        combine([first, second])  # type: ignore[list-item]


def named(op: str, text: str) -> str:
    """The message's words for the two DictTensors: where's are its arguments, input and other."""
    return text.replace("element 1", "other").replace("element 0", "input") if op.endswith("where") else text


@pytest.mark.parametrize(("combine", "op"), [COMBINERS[1], COMBINERS[2], COMBINERS[3]])
def test_stack_and_where_need_the_same_number_of_rows(
    combine: Callable[[list[DictTensor]], DictTensor], op: str
) -> None:
    with pytest.raises(ValueError, match=message(f"{op}: {named(op, 'element 1 has 3 rows, expected 2')}")):
        combine([DictTensor({"a": torch.zeros(2)}), DictTensor({"a": torch.zeros(3)})])


@pytest.mark.parametrize(("combine", "op"), COMBINERS[:3])
def test_cat_and_stack_of_an_empty_list_are_rejected(
    combine: Callable[[list[DictTensor]], DictTensor], op: str
) -> None:
    with pytest.raises(
        ValueError, match=message(f"{op}: expected at least one DictTensor, got an empty list")
    ):
        combine([])


@pytest.mark.parametrize("op", ["cat", "stack"])
def test_cat_and_stack_want_a_list(op: str) -> None:
    dt = make_dt()
    with pytest.raises(
        TypeError, match=message(f"DictTensor.{op}: expected a list of DictTensors, got a DictTensor")
    ):
        getattr(DictTensor, op)(dt)
    with pytest.raises(
        TypeError, match=message(f"DictTensor.{op}: element 0 must be a DictTensor, got an int")
    ):
        getattr(DictTensor, op)([1])


@pytest.mark.parametrize("dim", [2, -1])
def test_stack_dim_must_be_0_or_1(dim: int) -> None:
    with pytest.raises(ValueError, match=message(f"DictTensor.stack: dim must be 0 or 1, got {dim}")):
        DictTensor.stack([make_dt()], dim=dim)


@pytest.mark.parametrize(
    ("condition", "error", "text"),
    [
        (
            torch.tensor([1, 0, 1, 0]),
            TypeError,
            "condition must be a bool tensor, got a tensor of shape (4,), dtype torch.int64",
        ),
        ([True, False, True, False], TypeError, "condition must be a bool tensor, got a list"),
        (torch.tensor([True, False]), ValueError, "condition must have shape [4], got (2,)"),
        (torch.ones(B, 1, dtype=torch.bool), ValueError, "condition must have shape [4], got (4, 1)"),
    ],
)
def test_where_rejects_a_bad_condition(condition: object, error: type[Exception], text: str) -> None:
    with pytest.raises(error, match=message("DictTensor.where: " + text)):
        DictTensor.where(condition, make_dt(), make_dt())  # type: ignore[arg-type]


# ---------------------------------------------------------------------------- storage


def test_to_the_same_device_does_not_copy() -> None:
    dt = make_dt()
    moved = dt.to("cpu")
    assert all(moved[k] is v for k, v in dt.items())
    assert moved.device == torch.device("cpu")


@pytest.mark.parametrize("device", ["meta", torch.device("meta")])
def test_to_moves_every_value_and_keeps_dtypes_and_shapes(device: str | torch.device) -> None:
    dt = make_dt()
    moved = dt.to(device, non_blocking=True)
    assert moved.device == torch.device("meta")
    assert all(v.device == torch.device("meta") for v in moved.values())
    assert moved.specs() == dt.specs()
    assert moved.n_elems() == B
    assert dt.device == torch.device("cpu")  # the original is untouched


def test_a_0_d_integer_tensor_selects_a_row_as_an_int_does() -> None:
    dt = make_dt()
    for index in (torch.tensor(2), torch.tensor(-1, dtype=torch.int32), torch.tensor(1, dtype=torch.uint8)):
        assert dt[index].equal(dt[int(index)])
    with pytest.raises(IndexError, match="row index 7 is out of range for 4 rows"):
        dt[torch.tensor(7)]


def test_zeros_and_to_check_the_device_and_name_themselves() -> None:
    specs = make_dt().specs()
    with pytest.raises(
        ValueError, match=message("DictTensor.zeros: device must name a torch device such as")
    ):
        DictTensor.zeros(specs, 2, device="gpu")
    with pytest.raises(
        TypeError, match=message("DictTensor.zeros: device must be a str, a torch.device or an int")
    ):
        DictTensor.zeros(specs, 2, device=3.0)  # type: ignore[arg-type]
    with pytest.raises(
        ValueError, match=message("DictTensor.to: device as an int is a CUDA index, at least 0")
    ):
        make_dt().to(-1)
    with pytest.raises(
        ValueError, match=message("DictTensor.to: device as an int is a CUDA index, at least 0, got -1")
    ):
        make_dt().to(pytest.importorskip("numpy").int64(-1))  # a NumPy int is an int, as an index is
    assert (
        DictTensor.zeros(specs, 2, device="cpu:0").device
        == make_dt().to("cpu:0").device
        == torch.device("cpu")
    )


@pytest.mark.skipif(torch.backends.cuda.is_built(), reason="needs a torch built without CUDA")
def test_cuda_on_a_torch_without_it_is_a_value_error() -> None:
    for call, owner in [
        (lambda: make_dt().to("cuda"), "DictTensor.to"),
        (lambda: make_dt().to(0), "DictTensor.to"),
        (lambda: DictTensor.zeros(make_dt().specs(), 2, device="cuda"), "DictTensor.zeros"),
        (
            lambda: TemporalDictTensor.zeros(make_dt().specs(), 2, 3, device="cuda"),
            "TemporalDictTensor.zeros",
        ),
    ]:
        with pytest.raises(
            ValueError, match=message(f"{owner}: device 'cuda") + ".* cannot be used on this machine"
        ):
            call()


def test_to_on_a_keyless_dicttensor_keeps_the_rows() -> None:
    moved = DictTensor(batch_size=3).to("meta")
    assert moved.n_elems() == 3
    assert moved.device is None


def test_clone_has_independent_storage() -> None:
    dt = make_dt()
    copy = dt.clone()
    assert copy.equal(dt)
    assert all(copy[k].data_ptr() != v.data_ptr() for k, v in dt.items())
    for value in copy.values():
        value.zero_()
    assert rows_of(dt) == [0, 1, 2, 3]
    assert DictTensor(batch_size=2).clone().n_elems() == 2


def test_detach_shares_storage_and_leaves_the_graph() -> None:
    weights = torch.ones(3, 2, requires_grad=True)
    dt = DictTensor({"w": weights * 2})
    assert dt["w"].requires_grad
    detached = dt.detach()
    assert not detached["w"].requires_grad
    assert detached["w"].data_ptr() == dt["w"].data_ptr()


def test_share_memory_is_in_place_and_is_shared_reports_it() -> None:
    dt = make_dt()
    values = dict(dt.items())
    assert not dt.is_shared()
    assert dt.share_memory_() is dt
    assert dt.is_shared()
    assert all(dt[k] is v for k, v in values.items())
    dt.set("fresh", torch.zeros(B))
    assert not dt.is_shared()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="pin_memory needs a CUDA build and device")
def test_pin_memory_copies_into_page_locked_memory() -> None:
    dt = make_dt()
    pinned = dt.pin_memory()
    assert all(v.is_pinned() for v in pinned.values())
    assert pinned.equal(dt)


# ---------------------------------------------------------------------------- equal


def test_equal_compares_keys_dtypes_shapes_devices_and_values() -> None:
    dt = make_dt()
    assert dt.equal(dt.clone())
    changed = dt.clone()
    changed["image"][3, 1, 1, 2] = 200
    assert not dt.equal(changed)
    assert not dt.equal(dt.get(["obs", "action"]))
    assert not dt.get(["obs", "action"]).equal(dt)
    retyped = dt.clone()
    retyped.set("action", dt["action"].to(torch.int32))
    assert not dt.equal(retyped)
    reshaped = dt.clone()
    reshaped.set("grid", dt["grid"].reshape(B, 3, 2))
    assert not dt.equal(reshaped)
    assert not dt.equal(dt.to("meta"))
    assert not dt.equal(dt[0:3])
    assert not dt.equal({"obs": dt["obs"]})  # type: ignore[arg-type]


def test_equal_ignores_key_order() -> None:
    a = DictTensor({"x": torch.zeros(2), "y": torch.ones(2)})
    b = DictTensor({"y": torch.ones(2), "x": torch.zeros(2)})
    assert a.equal(b)


def test_equal_of_keyless_dicttensors_compares_rows() -> None:
    assert DictTensor(batch_size=2).equal(DictTensor(batch_size=2))
    assert not DictTensor(batch_size=2).equal(DictTensor(batch_size=3))


def test_equal_treats_nan_as_unequal() -> None:
    dt = DictTensor({"x": torch.tensor([float("nan")])})
    assert not dt.equal(dt)


def test_where_wants_the_condition_on_the_data_device() -> None:
    a = DictTensor({"x": torch.zeros(3)})
    condition = torch.zeros(3, dtype=torch.bool, device="meta")
    with pytest.raises(ValueError, match=re.escape("DictTensor.where: condition is on meta, expected cpu")):
        DictTensor.where(condition, a, a)


def test_where_and_masked_dicttensor_name_their_own_arguments() -> None:
    a = DictTensor({"x": torch.zeros(2)})
    mask = torch.tensor([True, False])
    with pytest.raises(
        TypeError, match=re.escape("DictTensor.where: other must be a DictTensor, got a dict")
    ):
        DictTensor.where(mask, a, {"x": 1})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="masked_dicttensor: dt0 must be a DictTensor, got a dict"):
        masked_dicttensor({"x": 1}, a, mask)  # type: ignore[arg-type]
    with pytest.raises(
        ValueError, match=re.escape("masked_dicttensor: dt0 has keys ['y'], expected ['x'] (the keys of dt1)")
    ):
        masked_dicttensor(DictTensor({"y": torch.zeros(2)}), a, mask)
    with pytest.raises(TypeError, match="masked_dicttensor: mask must be a bool tensor"):
        masked_dicttensor(a, a, torch.zeros(2))


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (
            lambda: DictTensor(5),
            TypeError,
            "DictTensor: data must be a mapping of str keys to tensors, got an int",
        ),
        (
            lambda: DictTensor("ab"),
            TypeError,
            "DictTensor: data must be a mapping of str keys to tensors, got a str",
        ),
        (
            lambda: DictTensor({"x": torch.zeros(2)}).get(5),
            TypeError,
            "DictTensor.get: keys must be a str or an iterable of str",
        ),
        (
            lambda: DictTensor({"x": torch.zeros(2)}).prepend_key(3),
            TypeError,
            "DictTensor.prepend_key: prefix must be a str, got an int",
        ),
        (
            lambda: DictTensor({"x": torch.zeros(2)}).truncate_key(3),
            TypeError,
            "DictTensor.truncate_key: prefix must be a str, got an int",
        ),
        (
            lambda: DictTensor({"x": torch.zeros(2)}).slice(1.0, 2),
            TypeError,
            "DictTensor.slice: start must be an int, got a float",
        ),
        (
            lambda: DictTensor.stack([DictTensor({"x": torch.zeros(2)})] * 2, dim=True),
            ValueError,
            "DictTensor.stack: dim must be 0 or 1, got True",
        ),
        (
            lambda: DictTensor({"x": torch.zeros(2)}).to(torch.float64),
            TypeError,
            "DictTensor.to: device must be a str, a torch.device or an int, got a dtype",
        ),
        (
            lambda: DictTensor({"x": torch.zeros(2)}).to("nope"),
            ValueError,
            "DictTensor.to: device must name a torch device such as 'cpu' or 'cuda:0', got 'nope'",
        ),
    ],
)
def test_bad_arguments_are_named(call: Callable[[], Any], error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=re.escape(message)):
        call()


def test_row_writes_without_keys_still_count_rows() -> None:
    buffer = DictTensor(batch_size=8)
    with pytest.raises(ValueError, match=re.escape("DictTensor.copy_: src has 3 rows, the index selects 2")):
        buffer[0:2] = DictTensor(batch_size=3)
    buffer[0:2] = DictTensor(batch_size=2)


def test_numpy_ints_index_rows() -> None:
    np = pytest.importorskip("numpy")
    dt = DictTensor({"x": torch.arange(4)})
    assert dt[np.int64(2)]["x"].tolist() == [2]
