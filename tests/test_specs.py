"""Behaviour tests for rlstruct.specs: TensorSpec, Specs and ObservationSpace."""

from __future__ import annotations

import dataclasses
import re

import pytest
import torch

from rlstruct import DictTensor, Specs, TemporalDictTensor, TensorSpec
from rlstruct.specs import ObservationSpace

SPECS = Specs(
    {
        "obs": TensorSpec((3,), torch.float32),
        "action": TensorSpec((), torch.int64),
        "done": TensorSpec((), torch.bool),
        "frame": TensorSpec((2, 2, 3), torch.uint8),
    }
)


def message(text: str) -> str:
    return re.escape(text)


# ---------------------------------------------------------------------------- TensorSpec


def test_tensor_spec_normalises_the_shape_to_a_tuple() -> None:
    assert TensorSpec([2, 3], torch.float32).shape == (2, 3)  # type: ignore[arg-type]
    assert TensorSpec(torch.Size([4]), torch.int64).shape == (4,)
    assert TensorSpec((), torch.bool).shape == ()
    assert TensorSpec([2, 3], torch.float32) == TensorSpec((2, 3), torch.float32)  # type: ignore[arg-type]
    assert TensorSpec((2,), torch.float32) != TensorSpec((2,), torch.float64)


def test_tensor_spec_is_frozen_and_hashable() -> None:
    spec = TensorSpec((2,), torch.float32)
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.shape = (3,)  # type: ignore[misc]
    assert len({spec, TensorSpec((2,), torch.float32)}) == 1


@pytest.mark.parametrize(
    ("shape", "dtype", "error", "text"),
    [
        ((2,), "float32", TypeError, "TensorSpec: dtype must be a torch.dtype, got 'float32'"),
        ((2,), float, TypeError, "TensorSpec: dtype must be a torch.dtype, got <class 'float'>"),
        (
            (2, -1),
            torch.float32,
            ValueError,
            "TensorSpec: shape must be a tuple of non-negative ints, got (2, -1)",
        ),
        (
            (2.0,),
            torch.float32,
            TypeError,
            "TensorSpec: shape must be a tuple of non-negative ints, got (2.0,)",
        ),
        (
            (True,),
            torch.float32,
            TypeError,
            "TensorSpec: shape must be a tuple of non-negative ints, got (True,)",
        ),
        (3, torch.float32, TypeError, "TensorSpec: shape must be a tuple of non-negative ints, got 3"),
    ],
)
def test_tensor_spec_rejects_bad_input(
    shape: object, dtype: object, error: type[Exception], text: str
) -> None:
    with pytest.raises(error, match=message(text)):
        TensorSpec(shape, dtype)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------- Specs mapping


def test_specs_is_an_immutable_mapping() -> None:
    assert len(SPECS) == 4
    assert list(SPECS) == ["obs", "action", "done", "frame"]
    assert SPECS["frame"] == TensorSpec((2, 2, 3), torch.uint8)
    assert "obs" in SPECS
    assert dict(SPECS.items())["done"].dtype == torch.bool
    assert Specs(dict(SPECS)) == SPECS
    assert Specs() == Specs({})
    assert len(Specs()) == 0
    assert Specs({"obs": TensorSpec((3,), torch.float32)}) != SPECS
    with pytest.raises(TypeError):
        SPECS["x"] = TensorSpec((), torch.bool)  # type: ignore[index]
    with pytest.raises(KeyError):
        SPECS["missing"]


def test_specs_does_not_alias_the_given_dict() -> None:
    source = {"x": TensorSpec((), torch.bool)}
    specs = Specs(source)
    source["y"] = TensorSpec((), torch.bool)
    assert list(specs) == ["x"]


def test_specs_repr() -> None:
    assert repr(Specs({"x": TensorSpec((), torch.bool)})) == (
        "Specs({'x': TensorSpec(shape=(), dtype=torch.bool)})"
    )


@pytest.mark.parametrize(
    ("specs", "text"),
    [
        ({1: TensorSpec((), torch.bool)}, "Specs: keys must be str, got 1"),
        ({"x": ((2,), torch.float32)}, "Specs: value of key 'x' must be a TensorSpec, got tuple"),
        (
            [("x", TensorSpec((), torch.bool))],
            "Specs: specs must be a mapping of str keys to TensorSpecs, got list",
        ),
        ("x", "Specs: specs must be a mapping of str keys to TensorSpecs, got str"),
        (0, "Specs: specs must be a mapping of str keys to TensorSpecs, got int"),
    ],
)
def test_specs_rejects_bad_input(specs: object, text: str) -> None:
    with pytest.raises(TypeError, match=message(text)):
        Specs(specs)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------- allocation


@pytest.mark.parametrize("batch_size", [0, 1, 5])
def test_zeros_allocates_zero_rows_of_every_spec(batch_size: int) -> None:
    dt = DictTensor.zeros(SPECS, batch_size)
    assert isinstance(dt, DictTensor)
    assert dt.n_elems() == batch_size
    assert dt.specs() == SPECS
    assert dt["frame"].shape == (batch_size, 2, 2, 3)
    assert dt["action"].shape == (batch_size,)
    assert not any(v.any() for v in dt.values())
    assert not dt.is_shared()


def test_zeros_of_keyless_specs_is_an_empty_dicttensor_with_rows() -> None:
    dt = DictTensor.zeros(Specs(), 3)
    assert dt.empty()
    assert dt.n_elems() == 3


def test_zeros_on_a_device_and_in_shared_memory() -> None:
    meta = DictTensor.zeros(SPECS, 2, device="meta")
    assert meta.device == torch.device("meta")
    assert meta.specs() == SPECS
    shared = DictTensor.zeros(SPECS, 2, shared=True)
    assert shared.is_shared()
    assert shared.device == torch.device("cpu")


def test_zeros_gives_fresh_storage_each_call() -> None:
    a, b = DictTensor.zeros(SPECS, 2), DictTensor.zeros(SPECS, 2)
    a["obs"].fill_(1.0)
    assert not b["obs"].any()


def test_specs_round_trip_through_a_dicttensor_buffer() -> None:
    step = DictTensor({"obs": torch.randn(2, 3), "done": torch.tensor([True, False])})
    buffer = DictTensor.zeros(step.specs(), 6)
    buffer[2:4] = step
    assert buffer[2:4].equal(step)
    assert not buffer[0:2]["done"].any()


@pytest.mark.parametrize("batch_size", [-1, True, 2.0, "2"])
def test_zeros_rejects_a_bad_batch_size(batch_size: object) -> None:
    with pytest.raises(
        ValueError,
        match=message(f"DictTensor.zeros: batch_size must be a non-negative int, got {batch_size!r}"),
    ):
        DictTensor.zeros(SPECS, batch_size)  # type: ignore[arg-type]


@pytest.mark.parametrize(("batch_size", "n_timesteps"), [(0, 0), (2, 0), (3, 5)])
def test_zeros_temporal_allocates_full_rows(batch_size: int, n_timesteps: int) -> None:
    tdt = TemporalDictTensor.zeros(SPECS, batch_size, n_timesteps)
    assert isinstance(tdt, TemporalDictTensor)
    assert tdt.n_elems() == batch_size
    assert tdt.n_timesteps() == n_timesteps
    assert tdt.specs() == SPECS
    assert tdt["frame"].shape == (batch_size, n_timesteps, 2, 2, 3)
    assert tdt.lengths.dtype == torch.int64
    assert tdt.lengths.tolist() == [n_timesteps] * batch_size
    assert tdt.full()
    assert not any(v.any() for v in tdt.values())


def test_zeros_temporal_in_shared_memory_shares_the_lengths_too() -> None:
    tdt = TemporalDictTensor.zeros(SPECS, 2, 3, shared=True)
    assert tdt.to_dicttensor().is_shared()
    assert tdt.lengths.is_shared()
    plain = TemporalDictTensor.zeros(SPECS, 2, 3)
    assert not plain.lengths.is_shared()


def test_zeros_temporal_of_keyless_specs() -> None:
    tdt = TemporalDictTensor.zeros(Specs(), 2, 4)
    assert tdt.empty()
    assert (tdt.n_elems(), tdt.n_timesteps()) == (2, 4)
    assert tdt.lengths.tolist() == [4, 4]


@pytest.mark.parametrize(
    ("batch_size", "n_timesteps", "text"),
    [
        (-1, 3, "TemporalDictTensor.zeros: batch_size must be a non-negative int, got -1"),
        (2, -2, "TemporalDictTensor.zeros: n_timesteps must be a non-negative int, got -2"),
        (2, 3.0, "TemporalDictTensor.zeros: n_timesteps must be a non-negative int, got 3.0"),
        (2, False, "TemporalDictTensor.zeros: n_timesteps must be a non-negative int, got False"),
    ],
)
def test_zeros_temporal_rejects_bad_sizes(batch_size: object, n_timesteps: object, text: str) -> None:
    with pytest.raises(ValueError, match=message(text)):
        TemporalDictTensor.zeros(SPECS, batch_size, n_timesteps)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("allocate", "op"),
    [
        (lambda specs: DictTensor.zeros(specs, 2), "DictTensor.zeros"),
        (lambda specs: TemporalDictTensor.zeros(specs, 2, 3), "TemporalDictTensor.zeros"),
    ],
)
def test_zeros_rejects_specs_that_are_not_specs(allocate: object, op: str) -> None:
    with pytest.raises(TypeError, match=message(f"{op}: specs must be a Specs, got a dict")):
        allocate({"obs": TensorSpec((3,), torch.float32)})  # type: ignore[operator]


# ---------------------------------------------------------------------------- ObservationSpace


def test_observation_space_normalises_its_tuples_and_fills_the_starts_of_discrete_kinds() -> None:
    frame = ObservationSpace("box", [84, 84, 3], torch.uint8)  # type: ignore[arg-type]
    assert frame.shape == (84, 84, 3) and frame.n == () and frame.start == ()
    room = ObservationSpace("discrete", (), torch.int64, n=[4])  # type: ignore[arg-type]
    assert room.n == (4,) and room.start == (0,)
    cells = ObservationSpace("multidiscrete", (2, 2), torch.int64, n=(2, 3, 4, 5), start=(0, -1, 0, 7))
    assert cells.start == (0, -1, 0, 7)
    assert ObservationSpace("multidiscrete", (3,), torch.int32, n=(2, 2, 2)).start == (0, 0, 0)
    assert ObservationSpace("multibinary", (5,), torch.int8).dtype == torch.int8


def test_observation_space_takes_numpy_ints_as_a_gymnasium_space_holds_them() -> None:
    np = pytest.importorskip("numpy")
    room = ObservationSpace("discrete", (), torch.int64, n=(np.int64(4),), start=(np.int64(1),))
    assert room.n == (4,) and room.start == (1,) and type(room.n[0]) is int and type(room.start[0]) is int
    cells = ObservationSpace("multidiscrete", (np.int64(2),), torch.int64, n=tuple(np.array([2, 3])))
    assert cells.shape == (2,) and cells.n == (2, 3) and type(cells.shape[0]) is int
    assert hash(cells) == hash(ObservationSpace("multidiscrete", (2,), torch.int64, n=(2, 3)))


def test_observation_space_is_frozen_and_hashable() -> None:
    space = ObservationSpace("discrete", (), torch.int64, n=(4,))
    with pytest.raises(dataclasses.FrozenInstanceError):
        space.n = (5,)  # type: ignore[misc]
    assert len({space, ObservationSpace("discrete", (), torch.int64, n=(4,), start=(0,))}) == 1


@pytest.mark.parametrize(
    ("arguments", "error", "text"),
    [
        (
            ("image", (2,), torch.uint8),
            ValueError,
            "ObservationSpace: kind must be one of 'box', 'discrete', 'multidiscrete', 'multibinary', got 'image'",
        ),
        (("box", (2,), "float32"), TypeError, "ObservationSpace: dtype must be a torch.dtype, got 'float32'"),
        (
            ("box", (2, -1), torch.float32),
            ValueError,
            "ObservationSpace: shape must be a tuple of non-negative ints, got (2, -1)",
        ),
        (("box", 2, torch.float32), TypeError, "ObservationSpace: shape must be a tuple of ints, got 2"),
        (
            ("box", (2,), torch.float32, (3,)),
            ValueError,
            "ObservationSpace: n and start must be empty for kind 'box', got n=(3,), start=()",
        ),
        (
            ("multibinary", (2,), torch.int8, (), (0, 0)),
            ValueError,
            "ObservationSpace: n and start must be empty for kind 'multibinary', got n=(), start=(0, 0)",
        ),
        (
            ("discrete", (), torch.int64),
            ValueError,
            "ObservationSpace: n must be given for kind 'discrete' (the number of values), got ()",
        ),
        (
            ("multidiscrete", (2,), torch.int64),
            ValueError,
            "ObservationSpace: n must be given for kind 'multidiscrete'",
        ),
        (
            ("discrete", (), torch.int64, (0,)),
            ValueError,
            "ObservationSpace: n must be a tuple of positive ints, got (0,)",
        ),
        (
            ("multidiscrete", (2,), torch.int64, (3, -1)),
            ValueError,
            "ObservationSpace: n must be a tuple of positive ints, got (3, -1)",
        ),
        (
            ("discrete", (), torch.int64, (2.0,)),
            TypeError,
            "ObservationSpace: n must be a tuple of ints, got (2.0,)",
        ),
        (
            ("discrete", (1,), torch.int64, (2,)),
            ValueError,
            "ObservationSpace: shape must be () for kind 'discrete', got (1,)",
        ),
        (
            ("multidiscrete", (2, 2), torch.int64, (2, 3, 4)),
            ValueError,
            "ObservationSpace: n must hold one entry per value of a row (shape (2, 2): 4), got (2, 3, 4)",
        ),
        (
            ("multidiscrete", (2,), torch.int64, (2, 3), (0,)),
            ValueError,
            "ObservationSpace: start must be empty or hold one entry per value of a row (shape (2,): 2), got (0,)",
        ),
        (
            ("discrete", (), torch.float32, (2,)),
            TypeError,
            "ObservationSpace: dtype must be an integer dtype for kind 'discrete', got torch.float32",
        ),
    ],
)
def test_observation_space_rejects_bad_input(
    arguments: tuple[object, ...], error: type[Exception], text: str
) -> None:
    with pytest.raises(error, match=message(text)):
        ObservationSpace(*arguments)  # type: ignore[arg-type]
