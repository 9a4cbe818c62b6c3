"""Behaviour tests for rlstruct.distributed.codec: pack / unpack round trips, sizes and errors."""

from __future__ import annotations

import dataclasses
import pickle
import sys
import types
import warnings
from typing import Any

import numpy as np
import pytest
import torch

from rlstruct import DictTensor, TemporalDictTensor, Trajectories
from rlstruct.distributed.codec import CODECS, Packed, check_codec, pack, unpack

MODULES = {"lz4": "lz4.frame", "zstd": "zstandard"}
DTYPES = [torch.bool, torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.uint8, torch.int64]
CONTAINERS = ["tensor", "dict", "DictTensor", "TemporalDictTensor", "Trajectories"]
SHAPES = ["regular", "0-dim", "empty", "non-contiguous"]


@pytest.fixture(params=CODECS)
def codec(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    if name in MODULES:
        pytest.importorskip(MODULES[name])
    return name


def random_tensor(shape: tuple[int, ...], dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    """Random bit patterns (NaNs with payloads, infinities, subnormals included); 0 or 1 for bool."""
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=gen).bool()
    n_bytes = int(np.prod(shape)) * dtype.itemsize
    return torch.randint(0, 256, (n_bytes,), dtype=torch.uint8, generator=gen).view(dtype).reshape(shape)


def make_tensor(case: str, dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    """A tensor of 3 rows (or 0-dim) of the shape case."""
    if case == "0-dim":
        return random_tensor((), dtype, gen)
    if case == "empty":
        return random_tensor((3, 4, 0), dtype, gen)
    if case == "non-contiguous":
        value = random_tensor((3, 8, 2), dtype, gen)[:, ::2].transpose(1, 2)  # [3, 2, 4]
        assert not value.is_contiguous()
        return value
    return random_tensor((3, 4, 2), dtype, gen)


def make_value(container: str, tensor: torch.Tensor, gen: torch.Generator) -> Any:
    other = random_tensor((3,), torch.float32, gen)
    if container == "tensor":
        return tensor
    if container == "dict":
        return {"x": tensor, "other": other}
    if container == "DictTensor":
        return DictTensor({"x": tensor, "other": other})
    lengths = torch.tensor([tensor.shape[1], 0, 1])
    steps = TemporalDictTensor(
        {"x": tensor, "reward": random_tensor((3, tensor.shape[1]), torch.float32, gen)}, lengths
    )
    if container == "TemporalDictTensor":
        return steps
    return Trajectories(DictTensor({"agent_info/epsilon": other, "x": tensor[:, 0]}), steps)


def tensors(value: Any) -> list[tuple[str, torch.Tensor]]:
    """Every tensor of a packable value, named, lengths included."""
    if isinstance(value, torch.Tensor):
        return [("", value)]
    if isinstance(value, Trajectories):
        return [(f"info/{k}", v) for k, v in value.info.items()] + tensors(value.trajectories)
    if isinstance(value, TemporalDictTensor):
        return [*value.items(), ("lengths", value.lengths)]
    return list(value.items())


def assert_same(out: Any, value: Any) -> None:
    """Same type (dict for any mapping), rows, time steps, keys, dtypes, shapes and bytes."""
    assert type(out) is (dict if isinstance(value, dict) else type(value))
    if isinstance(value, DictTensor | TemporalDictTensor | Trajectories):
        assert out.n_elems() == value.n_elems()
    if isinstance(value, TemporalDictTensor | Trajectories):
        steps = value if isinstance(value, TemporalDictTensor) else value.trajectories
        assert out_steps(out).n_timesteps() == steps.n_timesteps()
    got, expected = tensors(out), tensors(value)
    assert [k for k, _ in got] == [k for k, _ in expected]
    for (key, a), (_, b) in zip(got, expected, strict=True):
        assert (a.dtype, a.shape, a.device) == (b.dtype, b.shape, torch.device("cpu")), key
        assert a.is_contiguous(), key
        a_bytes = a.contiguous().reshape(-1).view(torch.uint8)
        b_bytes = b.contiguous().reshape(-1).view(torch.uint8)
        assert torch.equal(a_bytes, b_bytes), key


def out_steps(out: TemporalDictTensor | Trajectories) -> TemporalDictTensor:
    return out if isinstance(out, TemporalDictTensor) else out.trajectories


ROUND_TRIPS = [
    (container, dtype, case)
    for container in CONTAINERS
    for dtype in DTYPES
    for case in SHAPES
    if not (case == "0-dim" and container not in ("tensor", "dict"))
]


@pytest.mark.parametrize(("container", "dtype", "case"), ROUND_TRIPS, ids=str)
def test_round_trip_is_bit_exact(codec: str, container: str, dtype: torch.dtype, case: str) -> None:
    gen = torch.Generator().manual_seed(0)
    value = make_value(container, make_tensor(case, dtype, gen), gen)
    packed = pack(value, codec)
    assert packed.codec == codec
    assert packed.raw_nbytes == sum(t.numel() * t.element_size() for _, t in tensors(value))
    assert_same(unpack(packed), value)


def test_nan_payloads_survive(codec: str) -> None:
    bits = torch.tensor([0x7FC00001, 0x7F800123, -0x00400001, 0x7F800000, 1], dtype=torch.int32)
    value = bits.view(torch.float32)  # quiet and signalling NaNs with payloads, +inf, a subnormal
    out = unpack(pack(value, codec))
    assert torch.equal(out.view(torch.int32), bits)


def test_empty_structures_keep_their_rows_and_time_steps(codec: str) -> None:
    no_keys = DictTensor(batch_size=5)
    assert unpack(pack(no_keys, codec)).n_elems() == 5
    steps = TemporalDictTensor(DictTensor(batch_size=2), torch.tensor([7, 3]), n_timesteps=7)
    out = unpack(pack(steps, codec))
    assert (out.n_elems(), out.n_timesteps(), out.lengths.tolist()) == (2, 7, [7, 3])
    no_rows = Trajectories(
        DictTensor({"eps": torch.zeros(0)}),
        TemporalDictTensor({"obs": torch.zeros(0, 4, 3)}, torch.zeros(0, dtype=torch.int64)),
    )
    assert_same(unpack(pack(no_rows, codec)), no_rows)
    assert unpack(pack({}, codec)) == {}


def test_any_mapping_unpacks_as_a_dict(codec: str) -> None:
    value = types.MappingProxyType({"a": torch.arange(3)})
    out = unpack(pack(value, codec))
    assert type(out) is dict and torch.equal(out["a"], torch.arange(3))


def test_unpacked_tensors_are_writable_and_do_not_alias_the_input(codec: str) -> None:
    value = DictTensor({"obs": torch.zeros(4, 3)})
    out = unpack(pack(value, codec))
    out["obs"].add_(1.0)
    assert bool((value["obs"] == 0).all())
    assert bool((out["obs"] == 1).all())


def test_autograd_history_is_dropped(codec: str) -> None:
    weight = torch.ones(3, requires_grad=True)
    out = unpack(pack(weight * 2, codec))
    assert not out.requires_grad and torch.equal(out, torch.full((3,), 2.0))


def test_conjugated_and_negated_views_pack_their_values(codec: str) -> None:
    z = torch.tensor([1 + 2j, -3j], dtype=torch.complex64)
    assert torch.equal(unpack(pack(z.conj(), codec)), torch.tensor([1 - 2j, 3j]))
    assert torch.equal(unpack(pack(z.conj().imag, codec)), torch.tensor([-2.0, 3.0]))


def test_pickle_round_trip(codec: str) -> None:
    gen = torch.Generator().manual_seed(1)
    value = make_value("Trajectories", make_tensor("regular", torch.float32, gen), gen)
    packed = pack(value, codec)
    again = pickle.loads(pickle.dumps(packed))
    assert isinstance(again, Packed) and again.nbytes == packed.nbytes
    assert_same(unpack(again), value)


@pytest.mark.parametrize("name", ["lz4", "zstd"])
def test_small_tensors_share_frames_and_large_ones_have_their_own(name: str) -> None:
    pytest.importorskip(MODULES[name])
    gen = torch.Generator().manual_seed(0)
    # 64 KiB frames: [a, b, c] (60 kB), [d, e] (40 kB) and the 80 kB tensor alone.
    sizes = {"a": 5000, "b": 5000, "big": 20_000, "c": 5000, "d": 5000, "e": 5000}
    value = {k: random_tensor((n,), torch.float32, gen) for k, n in sizes.items()}
    value["empty"] = torch.zeros(0, 3)
    packed = pack(value, name)
    assert len(packed.buffers) == 3
    assert_same(unpack(packed), value)
    many = {f"key{i}": torch.full((100,), i) for i in range(50)}
    assert len(pack(many, name).buffers) == 1
    assert_same(unpack(pack(many, name)), many)


def test_codec_none_shares_memory_and_goes_out_of_band() -> None:
    grads = {"w": torch.randn(64, 64), "b": torch.randn(64)}
    packed = pack(grads)
    assert all(
        np.shares_memory(buf, grads[k].numpy()) for k, buf in zip(packed.keys, packed.buffers, strict=True)
    )
    assert packed.nbytes == packed.raw_nbytes == (64 * 64 + 64) * 4
    out_of_band: list[pickle.PickleBuffer] = []
    header = pickle.dumps(packed, protocol=5, buffer_callback=out_of_band.append)
    assert len(out_of_band) == 2 and len(header) < 1000  # the tensors' bytes travel beside the pickle


def test_read_only_buffers_unpack_without_a_warning(codec: str) -> None:
    """As after ray.get: out-of-band buffers come back as read-only numpy arrays."""
    value = DictTensor({"obs": torch.randn(4, 3), "done": torch.tensor([True, False, True, False])})
    out_of_band: list[pickle.PickleBuffer] = []
    header = pickle.dumps(pack(value, codec), protocol=5, buffer_callback=out_of_band.append)
    received = pickle.loads(header, buffers=[bytes(b.raw()) for b in out_of_band])
    if codec == "none":
        assert all(not buf.flags.writeable for buf in received.buffers)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = unpack(received)
    assert_same(out, value)
    out["obs"].mul_(2.0)  # writable


@pytest.mark.parametrize("name", ["lz4", "zstd"])
def test_zeros_compress(name: str) -> None:
    pytest.importorskip(MODULES[name])
    packed = pack({"grad": torch.zeros(10_000)}, name)
    assert packed.raw_nbytes == 40_000
    assert packed.nbytes < packed.raw_nbytes / 50


def test_random_floats_do_not_compress_with_lz4() -> None:
    pytest.importorskip("lz4.frame")
    packed = pack(torch.randn(10_000, generator=torch.Generator().manual_seed(0)), "lz4")
    assert packed.nbytes >= packed.raw_nbytes * 0.9


@pytest.mark.parametrize(("name", "default"), [("lz4", 0), ("zstd", 3)])
def test_default_levels(name: str, default: int) -> None:
    pytest.importorskip(MODULES[name])
    value = torch.arange(5000) % 7
    assert pack(value, name).buffers == pack(value, name, level=default).buffers
    assert pack(value, name, level=default).buffers != pack(value, name, level=9).buffers
    assert torch.equal(unpack(pack(value, name, level=9)), value)


# ---------------------------------------------------------------------------------- errors


def test_check_codec() -> None:
    assert check_codec("none") == "none"
    with pytest.raises(ValueError, match=r"compression must be one of \('none', 'lz4', 'zstd'\), got 'gzip'"):
        check_codec("gzip")
    with pytest.raises(TypeError, match=r"compression must be a str.*got a NoneType"):
        check_codec(None)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["lz4", "zstd"])
def test_missing_package_raises_import_error(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for module in (MODULES[name], MODULES[name].split(".")[0]):
        monkeypatch.setitem(sys.modules, module, None)
    message = rf"codec '{name}' needs the \w+ package: pip install -e \"\.\[ray\]\""
    with pytest.raises(ImportError, match=message):
        check_codec(name)
    with pytest.raises(ImportError, match=message):
        pack(torch.zeros(2), name)


def test_pack_rejects_a_bad_codec() -> None:
    with pytest.raises(ValueError, match=r"codec must be one of \('none', 'lz4', 'zstd'\), got 'LZ4'"):
        pack(torch.zeros(2), "LZ4")
    with pytest.raises(TypeError, match="codec must be a str"):
        pack(torch.zeros(2), 1)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("name", "level", "error", "message"),
    [
        ("lz4", 17, ValueError, r"level for 'lz4' must be in \[0, 16\], got 17"),
        ("lz4", -1, ValueError, r"level for 'lz4' must be in \[0, 16\], got -1"),
        ("zstd", 23, ValueError, r"level for 'zstd' must be in \[-131072, 22\], got 23"),
        ("zstd", 2.5, TypeError, "level must be an int or None, got a float"),
        ("zstd", True, TypeError, "level must be an int or None, got a bool"),
        ("none", 1, ValueError, "level applies to 'lz4' and 'zstd' only, got level=1 with codec 'none'"),
    ],
)
def test_bad_level(name: str, level: Any, error: type[Exception], message: str) -> None:
    if name in MODULES:
        pytest.importorskip(MODULES[name])
    with pytest.raises(error, match=message):
        pack(torch.zeros(2), name, level=level)


@pytest.mark.parametrize("name", ["lz4", "zstd"])
def test_a_numpy_int_level_is_a_level(name: str) -> None:
    """Before, pack refused a NumPy int level ("level must be an int or None, got an int64")."""
    pytest.importorskip(MODULES[name])
    value = torch.arange(1000.0)
    packed = pack(value, name, level=np.int64(3))
    assert packed.nbytes == pack(value, name, level=3).nbytes and torch.equal(unpack(packed), value)
    with pytest.raises(ValueError, match=rf"level for '{name}' must be in \[.*\], got 99"):
        pack(value, name, level=np.int32(99))


STEPS = TemporalDictTensor({"obs": torch.zeros(2, 3)}, torch.tensor([3, 1]))


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (torch.zeros(2, device="meta"), "value is on meta; pack takes CPU tensors only"),
        ({"obs": torch.zeros(2, device="meta")}, "value of key 'obs' is on meta"),
        (DictTensor({"obs": torch.zeros(2, device="meta")}), "value of key 'obs' is on meta"),
        (STEPS.to("meta"), "value of key 'obs' is on meta"),
        (Trajectories(DictTensor({"eps": torch.zeros(2)}), STEPS).to("meta"), "info key 'eps' is on meta"),
        (Trajectories(DictTensor(batch_size=2), STEPS.to("meta")), "trajectories key 'obs' is on meta"),
        (
            Trajectories(
                DictTensor(batch_size=2),
                TemporalDictTensor(DictTensor(batch_size=2), torch.ones(2, dtype=torch.int64), n_timesteps=1),
            ).to("meta"),
            "trajectories lengths is on meta",
        ),
        (torch.zeros(3, 3).to_sparse(), "value must be a dense tensor, got a torch.sparse_coo tensor"),
    ],
)
def test_pack_rejects_tensors_off_the_cpu_or_not_dense(value: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        pack(value)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_pack_rejects_cuda_tensors() -> None:
    value = DictTensor({"obs": torch.zeros(2, 3)}).to("cuda")
    with pytest.raises(ValueError, match=r"value of key 'obs' is on cuda:0; pack takes CPU tensors only"):
        pack(value)
    assert unpack(pack(value.to("cpu")))["obs"].device == torch.device("cpu")


def test_pack_rejects_values_of_the_wrong_type() -> None:
    with pytest.raises(TypeError, match=r"value must be a torch\.Tensor, a Mapping.*got a list"):
        pack([torch.zeros(2)])  # type: ignore[call-overload]
    with pytest.raises(TypeError, match=r"value of key 'a' must be a torch\.Tensor, got a ndarray"):
        pack({"a": np.zeros(2)})  # type: ignore[dict-item]
    with pytest.raises(TypeError, match=r"keys of value must be str, got 1 \(int\)"):
        pack({1: torch.zeros(2)})  # type: ignore[dict-item]


def test_unpack_rejects_what_pack_did_not_make() -> None:
    with pytest.raises(TypeError, match=r"unpack: packed must be a Packed.*got a dict"):
        unpack({"obs": torch.zeros(2)})  # type: ignore[arg-type]


def test_unpack_rejects_a_corrupted_payload(codec: str) -> None:
    packed = pack({"obs": torch.zeros(2, 3)}, codec)
    short = pack({"obs": torch.zeros(5)}, codec)
    with pytest.raises(ValueError, match=r"buffer of key 'obs' holds 20 bytes, expected 24"):
        unpack(dataclasses.replace(packed, buffers=short.buffers))
    if codec != "none":
        packed = pack({"obs": torch.zeros(2, 3), "done": torch.zeros(2, dtype=torch.bool)}, codec)
        with pytest.raises(ValueError, match=r"buffer of keys 'obs', 'done' holds 20 bytes, expected 26"):
            unpack(dataclasses.replace(packed, buffers=short.buffers))


def test_packed_checks_its_fields() -> None:
    packed = pack({"obs": torch.zeros(2)})
    with pytest.raises(ValueError, match="1 tensors of these sizes packed with 'none' need 1 buffers, got 0"):
        dataclasses.replace(packed, buffers=())
    with pytest.raises(
        ValueError, match="keys, dtypes and shapes must have one entry per tensor, got 2, 1 and 1"
    ):
        dataclasses.replace(packed, keys=("obs", "action"))
    with pytest.raises(ValueError, match=r"codec must be one of .*got 'gzip'"):
        dataclasses.replace(packed, codec="gzip")
    with pytest.raises(ValueError, match=r"kind must be one of .*got 'list'"):
        dataclasses.replace(packed, kind="list")
