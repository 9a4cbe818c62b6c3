"""Behaviour tests for rlstruct.checkpoint: exact resume, atomic writes, RNG states and errors.

The resume tests train a small model whose update draws from every generator a
training step may use: Python's ``random`` (a loss scale), NumPy's global
generator (label noise), torch's global generator (dropout) and an explicit
``torch.Generator`` (the minibatch). Resuming from a checkpoint in fresh
objects, after the global generators have moved on, must give bit-identical
parameters after the next update.
"""

from __future__ import annotations

import os
import pickle
import random
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from rlstruct import load_checkpoint, rng_state, save_checkpoint, set_rng_state

DATA_X = torch.linspace(-1.0, 1.0, 96).reshape(32, 3)
DATA_Y = DATA_X.sum(1, keepdim=True)
K = 5  # updates before the checkpoint


def message(text: str) -> str:
    return re.escape(text)


Learner = tuple[torch.nn.Module, torch.optim.Optimizer, torch.Generator]


def make_learner(seed: int) -> Learner:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(3, 16), torch.nn.Dropout(0.5), torch.nn.Linear(16, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    return model, optimizer, torch.Generator().manual_seed(seed)


def train_step(learner: Learner) -> None:
    """One update that draws from all four generators."""
    model, optimizer, generator = learner
    scale = 0.5 + random.random()
    index = torch.randint(0, DATA_X.shape[0], (8,), generator=generator)
    noise = torch.from_numpy(np.random.standard_normal((8, 1)).astype(np.float32))
    loss = scale * ((model(DATA_X[index]) - DATA_Y[index] - 0.1 * noise) ** 2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


def train_and_checkpoint(path: Path) -> Learner:
    """K updates, a checkpoint, then update K + 1."""
    random.seed(1)
    np.random.seed(1)
    learner = make_learner(0)
    for _ in range(K):
        train_step(learner)
    model, optimizer, generator = learner
    save_checkpoint(path, model=model, optimizer=optimizer, step=K, rng=rng_state(generator))
    train_step(learner)
    return learner


def resume(path: Path, restore_rng: bool = True) -> tuple[Learner, int]:
    """Fresh objects with other weights and moved-on global generators, loaded from ``path``."""
    learner = make_learner(123)
    random.seed(7)
    np.random.seed(7)
    model, optimizer, generator = learner
    state = load_checkpoint(path, model=model, optimizer=optimizer)
    if restore_rng:
        set_rng_state(state["rng"], generator)
    return learner, state["step"]


def resume_and_step(path: str, out: str) -> None:
    """Run in a fresh process: resume, do update K + 1, save the parameters to ``out``."""
    learner, _ = resume(Path(path))
    train_step(learner)
    torch.save(learner[0].state_dict(), out)


def assert_same_parameters(a: torch.nn.Module, b: torch.nn.Module) -> None:
    for (name, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        assert torch.equal(x, y), name


def test_resume_gives_the_same_next_update(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.pt"
    expected = train_and_checkpoint(path)
    assert not torch.equal(make_learner(123)[0][0].weight, expected[0][0].weight)  # resume must load
    learner, step = resume(path)
    assert step == K
    train_step(learner)
    assert_same_parameters(learner[0], expected[0])
    assert learner[1].state_dict()["state"][0]["step"] == K + 1
    for key in ("exp_avg", "exp_avg_sq"):
        assert torch.equal(
            learner[1].state_dict()["state"][0][key], expected[1].state_dict()["state"][0][key]
        )


def test_resume_without_the_rng_states_gives_another_update(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.pt"
    expected = train_and_checkpoint(path)
    learner, _ = resume(path, restore_rng=False)
    train_step(learner)
    assert not torch.equal(learner[0][0].weight, expected[0][0].weight)


@pytest.mark.parametrize("source", ["python", "numpy", "torch", "generator"])
def test_every_generator_of_the_update_matters(tmp_path: Path, source: str) -> None:
    """Moving one generator on after restoring changes the update: each one is restored, not just drawn."""
    path = tmp_path / "checkpoint.pt"
    expected = train_and_checkpoint(path)
    learner, _ = resume(path)
    draw = {
        "python": random.random,
        "numpy": np.random.random,
        "torch": lambda: torch.rand(1),
        "generator": lambda: torch.rand(1, generator=learner[2]),
    }[source]
    draw()
    train_step(learner)
    assert not torch.equal(learner[0][0].weight, expected[0][0].weight)


@pytest.mark.slow
def test_resume_in_a_fresh_process_gives_the_same_next_update(tmp_path: Path) -> None:
    path, out = tmp_path / "checkpoint.pt", tmp_path / "params.pt"
    expected = train_and_checkpoint(path)
    tests = str(Path(__file__).parent)
    code = f"from test_checkpoint import resume_and_step; resume_and_step({str(path)!r}, {str(out)!r})"
    env = {**os.environ, "PYTHONPATH": tests + os.pathsep + os.environ.get("PYTHONPATH", "")}
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=120, capture_output=True)
    got = torch.load(out, weights_only=True)
    for name, value in expected[0].state_dict().items():
        assert torch.equal(got[name], value), name


def test_a_failed_save_leaves_the_previous_checkpoint_and_no_temporary_file(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.pt"
    save_checkpoint(path, step=1, weights=torch.ones(3))
    with pytest.raises((pickle.PicklingError, AttributeError)):
        save_checkpoint(path, step=2, weights=torch.zeros(3), hook=lambda: None)  # not picklable
    assert os.listdir(tmp_path) == ["checkpoint.pt"]
    state = load_checkpoint(path)
    assert state["step"] == 1
    assert torch.equal(state["weights"], torch.ones(3))


def test_save_replaces_the_previous_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.pt"
    save_checkpoint(path, step=1)
    save_checkpoint(path, step=2, extra="x")
    assert load_checkpoint(path) == {"step": 2, "extra": "x"}
    assert os.listdir(tmp_path) == ["checkpoint.pt"]


def test_objects_with_a_state_dict_are_stored_as_their_state_dict(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.pt"
    model = torch.nn.Linear(2, 3).double()
    save_checkpoint(path, model=model, counters={"updates": 4, "env_steps": 1024})
    raw = torch.load(path, weights_only=True)
    assert set(raw["model"]) == {"weight", "bias"}
    assert raw["model"]["weight"].dtype == torch.float64
    assert raw["counters"] == {"updates": 4, "env_steps": 1024}
    other = torch.nn.Linear(2, 3).double()
    state = load_checkpoint(path, model=other)
    assert torch.equal(other.weight, model.weight)
    assert torch.equal(state["model"]["bias"], model.bias)


class NotAWeight:
    """A custom object: loading it needs weights_only=False."""

    def __init__(self, value: int) -> None:
        self.value = value


def test_loading_is_weights_only_unless_asked(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.pt"
    save_checkpoint(path, custom=NotAWeight(3))
    with pytest.raises(pickle.UnpicklingError):
        load_checkpoint(path)
    assert load_checkpoint(path, weights_only=False)["custom"].value == 3


def test_map_location_is_passed_to_torch_load(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.pt"
    save_checkpoint(path, weights=torch.ones(2, dtype=torch.float64))
    weights = load_checkpoint(path, map_location="meta")["weights"]
    assert weights.device.type == "meta" and weights.dtype == torch.float64


def test_rng_state_is_a_copy_and_restores_every_generator() -> None:
    generators = [torch.Generator().manual_seed(1), torch.Generator().manual_seed(2)]
    state = rng_state(*generators)

    def draw() -> tuple[object, ...]:
        return (
            random.random(),
            float(np.random.random()),
            torch.rand(3),
            torch.rand(3, generator=generators[0]),
            torch.rand(3, generator=generators[1]),
        )

    first = draw()
    second = draw()  # the state captured above did not move with the draws
    set_rng_state(state, *generators)
    again = draw()
    assert first[:2] == again[:2] != second[:2]
    for a, b, c in zip(first[2:], again[2:], second[2:], strict=True):
        assert isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and isinstance(c, torch.Tensor)
        assert torch.equal(a, b) and not torch.equal(a, c)


def test_rng_state_survives_a_weights_only_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "rng.pt"
    save_checkpoint(path, rng=rng_state())
    expected = (random.random(), float(np.random.standard_normal()), torch.randn(2))
    set_rng_state(load_checkpoint(path)["rng"])
    got = (random.random(), float(np.random.standard_normal()), torch.randn(2))
    assert got[:2] == expected[:2]
    assert torch.equal(got[2], expected[2])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_generators_are_captured_and_restored_after_loading_onto_cuda(tmp_path: Path) -> None:
    """map_location="cuda" moves the stored states, which set_state accepts only on the CPU."""
    generator = torch.Generator(device="cuda").manual_seed(0)
    save_checkpoint(tmp_path / "rng.pt", rng=rng_state(generator))
    expected = torch.rand(4, device="cuda"), torch.rand(4, device="cuda", generator=generator)
    state = load_checkpoint(tmp_path / "rng.pt", map_location="cuda")
    assert len(state["rng"]["cuda"]) == torch.cuda.device_count()
    assert state["rng"]["cuda"][0].device.type == "cuda"
    set_rng_state(state["rng"], generator)
    assert torch.equal(torch.rand(4, device="cuda"), expected[0])
    assert torch.equal(torch.rand(4, device="cuda", generator=generator), expected[1])


class _State:
    """An object whose state dict is not a dict: ``save_checkpoint`` stores whatever ``state_dict()`` returns."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def state_dict(self) -> Any:
        return self.value

    def load_state_dict(self, state: Any) -> None:
        self.value = state


def test_errors_name_the_argument(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=message("save_checkpoint: expected at least one named value")):
        save_checkpoint(tmp_path / "c.pt")
    with pytest.raises(FileNotFoundError, match="save_checkpoint: the directory of path"):
        save_checkpoint(tmp_path / "missing" / "c.pt", step=1)
    save_checkpoint(tmp_path / "c.pt", step=1)
    with pytest.raises(ValueError, match=message("holds no value named 'model'; it holds ['step']")):
        load_checkpoint(tmp_path / "c.pt", model=torch.nn.Linear(1, 1))
    with pytest.raises(
        TypeError, match=message("load_checkpoint: step= must have a load_state_dict method, got a int")
    ):
        load_checkpoint(tmp_path / "c.pt", step=3)
    # a plain value stored under the name gave torch's "Expected state_dict to be dict-like, got <class 'int'>"
    model = torch.nn.Linear(1, 1)
    save_checkpoint(tmp_path / "c.pt", model=model, step=1)
    with pytest.raises(
        TypeError,
        match=message(
            f"load_checkpoint: {str(tmp_path / 'c.pt')!r} holds an int under 'step', not a state dict to load into "
            "step= (Linear); read it from the returned dict instead"
        ),
    ):
        load_checkpoint(tmp_path / "c.pt", model=model, step=torch.nn.Linear(1, 1))
    # what an object's own state_dict() returns loads back, mapping or not (a tensor, an int)
    for value in (torch.arange(3.0), 7):
        save_checkpoint(tmp_path / "c.pt", stat=_State(value))
        restored = _State(None)
        load_checkpoint(tmp_path / "c.pt", stat=restored)
        assert restored.value == value if isinstance(value, int) else torch.equal(restored.value, value)
    with pytest.raises(
        TypeError, match=message("rng_state: generators must be torch.Generator, got a int at position 0")
    ):
        rng_state(0)  # type: ignore[arg-type]
    state = rng_state(torch.Generator())
    with pytest.raises(ValueError, match=message("state holds 1 generator states, got 0 generators")):
        set_rng_state(state)
    with pytest.raises(
        TypeError, match=message("set_rng_state: generators must be torch.Generator, got a str")
    ):
        set_rng_state(state, "gen")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=message("missing ['numpy']")):
        set_rng_state({k: v for k, v in state.items() if k != "numpy"}, torch.Generator())
    with pytest.raises(ValueError, match=message("state holds the generators of 99 CUDA devices")):
        set_rng_state({**state, "cuda": [torch.get_rng_state()] * 99}, torch.Generator())


def test_a_path_that_names_no_file_is_named_and_nothing_is_written(tmp_path: Path) -> None:
    with pytest.raises(  # was os.replace's IsADirectoryError, naming the temporary file
        IsADirectoryError,
        match=message(f"save_checkpoint: path must name the file to write, got the folder {str(tmp_path)!r}"),
    ):
        save_checkpoint(tmp_path, step=1)
    with pytest.raises(
        ValueError, match=message("save_checkpoint: path must name the file to write, got ''")
    ):
        save_checkpoint("", step=1)  # was "Device or resource busy", renaming over the current folder
    with pytest.raises(
        TypeError,
        match=message("save_checkpoint: path must be a path (a str or os.PathLike), got a NoneType"),
    ):
        save_checkpoint(None, step=1)  # type: ignore[arg-type]
    assert os.listdir(tmp_path) == []
    with pytest.raises(  # was "argument of type 'NoneType' is not iterable"
        TypeError, match=message("set_rng_state: state must be the dict rng_state returns, got a NoneType")
    ):
        set_rng_state(None)  # type: ignore[arg-type]


def test_a_numpy_value_is_named_at_save_as_what_weights_only_refuses(tmp_path: Path) -> None:
    path = tmp_path / "c.pt"
    with pytest.warns(
        UserWarning,
        match=message(
            "save_checkpoint: stats['best'][1] is a NumPy float32, which load_checkpoint reads back only with "
            "weights_only=False"
        ),
    ):
        save_checkpoint(path, step=1, stats={"best": [1.0, np.float32(2.0)]})
    with pytest.raises(pickle.UnpicklingError):  # what the warning foretold
        load_checkpoint(path)
    assert load_checkpoint(path, weights_only=False)["stats"]["best"][1] == np.float32(2.0)


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (b"", "the file is empty"),
        (b'{"env": 1}', "it is not a file torch.save writes: it begins with b'{\"en'"),
        (b"PK\x03\x04 truncated", "RuntimeError: PytorchStreamReader failed reading zip archive"),
    ],
)
def test_a_file_that_is_not_a_checkpoint_is_a_value_error_naming_it(
    tmp_path: Path, content: bytes, why: str
) -> None:
    path = tmp_path / "checkpoint.pt"
    path.write_bytes(content)
    with pytest.raises(
        ValueError, match=re.escape(f"load_checkpoint: {str(path)!r} cannot be read as a checkpoint ({why}")
    ) as caught:
        load_checkpoint(path)
    assert "weights_only" not in str(caught.value)  # torch's advice to load untrusted files unsafely
    with pytest.raises(
        FileNotFoundError, match=re.escape(f"load_checkpoint: {str(tmp_path)!r} is not a file")
    ):
        load_checkpoint(tmp_path)


@pytest.mark.parametrize("location", ["cpu:0", torch.device("cpu:0"), "cpu", torch.device("cpu")])
def test_cpu_0_is_the_cpu(tmp_path: Path, location: str | torch.device) -> None:
    """torch.load knows no "cpu:0" (the CPU as a device string may be written)."""
    path = tmp_path / "checkpoint.pt"
    save_checkpoint(path, weights=torch.ones(2))
    assert load_checkpoint(path, map_location=location)["weights"].device == torch.device("cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_a_map_location_this_machine_lacks_is_named_instead_of_the_file(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.pt"
    save_checkpoint(path, model=torch.nn.Linear(2, 2))
    with pytest.raises(
        ValueError,
        match=message("load_checkpoint: map_location: device 'cuda' cannot be used on this machine"),
    ) as caught:
        load_checkpoint(path, map_location="cuda")
    assert "cannot be read as a checkpoint" not in str(caught.value)  # the file is fine
    with pytest.raises(
        ValueError,
        match=message(
            "load_checkpoint: map_location: device must name a torch device such as 'cpu' or 'cuda:0', got 'gpu'"
        ),
    ):
        load_checkpoint(path, map_location="gpu")
