"""Tests of rlstruct.cluster: exact reductions across 2 and 3 processes, and loud failures.

The multiprocess tests run ``tests/cluster_script.py`` as 2 or 3 gloo processes
on 127.0.0.1 (started by ``fork``, or by torchrun), with a 3-second timeout on
every collective call; the script writes what each rank got, and the test
compares it with a single-process reference computed here from the same
``rank_inputs``. Starting 3 interpreters that import torch takes seconds on a
small machine, so each run checks many things at once. Every test checks
that no process of the run is left behind.

The order of a float sum: with 2 processes ``a + b`` is exact (addition is
commutative). With 3, the backend decides which two values it adds first,
per element (gloo's ring starts at a rank that depends on the element's
position), so a random float sum must equal one of the 3 orders
(``candidates``); integer-valued floats and integers sum exactly in any
order and are compared with the single reference.
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from cluster_script import TIMEOUT_S, model_for, rank_inputs

import rlstruct
import rlstruct.cluster as ct
from rlstruct import ClusterError, DictTensor

SCRIPT = Path(__file__).with_name("cluster_script.py")
RUN_TIMEOUT_S = 100.0  # a whole run: the start of 3 interpreters plus a few collective timeouts
GONE_DEADLINE_S = 10.0


# ---------------------------------------------------------------- helpers


def launch(command: list[str]) -> subprocess.CompletedProcess[str]:
    """Run ``command`` in its own session; on timeout, kill the whole session and fail."""
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        stdout, stderr = process.communicate(timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        pytest.fail(f"{command} ran past {RUN_TIMEOUT_S} s:\n{stdout[-3000:]}\n{stderr[-3000:]}")
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


def alive(pid: int) -> bool:
    """Whether ``pid`` is a running process (a zombie waiting to be reaped does not count)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    except OSError:  # no /proc: ask the kernel
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    return state not in ("Z", "X")


def assert_gone(pids: list[int]) -> None:
    """Every process in ``pids`` ends within a deadline (polled, since they are not our children)."""
    deadline = time.monotonic() + GONE_DEADLINE_S
    while any(alive(pid) for pid in pids):
        assert time.monotonic() < deadline, f"processes left behind: {[p for p in pids if alive(p)]}"
        time.sleep(0.05)


def run_script(tmp_path: Path, scenario: str, n: int, torchrun: bool = False) -> tuple[Any, dict[int, Any]]:
    """Run the script as ``n + 1`` processes; return the run and each rank's record (ranks that wrote one)."""
    args = [str(SCRIPT), scenario, str(tmp_path), str(n)]
    if torchrun:
        command = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc-per-node={n + 1}",
            *args,
        ]
    else:
        command = [sys.executable, *args]
    result = launch(command)
    records = {int(p.stem[4:]): json.loads(p.read_text()) for p in tmp_path.glob("rank*.json")}
    assert_gone([record["pid"] for record in records.values()])
    return result, records


def candidates(values: list[torch.Tensor]) -> list[torch.Tensor]:
    """The sums of per-rank values in every order a backend may add them (one for 2 ranks)."""
    if len(values) == 2:
        return [values[0] + values[1]]
    a, b, c = values
    return [(a + b) + c, (b + c) + a, (c + a) + b]


def assert_one_of(result: torch.Tensor, options: list[torch.Tensor]) -> None:
    assert result.dtype == options[0].dtype and result.shape == options[0].shape
    assert all(torch.isfinite(option).all() for option in options)
    matches = torch.zeros(result.shape, dtype=torch.bool)
    for option in options:
        matches |= result == option
    assert bool(matches.all()), f"{int((~matches).sum())} elements match no order of summation"


def message(text: str) -> str:
    return re.escape(text)


# ---------------------------------------------------------------- one process


def test_alone_every_operation_returns_its_input() -> None:
    x = torch.arange(4.0)
    dt = DictTensor({"a": torch.ones(2, 3), "b": torch.arange(2)})
    assert (ct.rank(), ct.world_size()) == (0, 1)
    for op in (ct.sum, ct.avg, ct.max, ct.min):
        assert op(x) is x
    for op in (ct.sum, ct.max, ct.min):
        assert op(dt) is dt
    assert ct.sum_number(3) == 3 and ct.avg_number(2.5) == 2.5
    assert isinstance(ct.avg_number(3), float)  # a mean is a float, alone as with others
    net = torch.nn.Linear(2, 1)
    net(torch.ones(1, 2)).sum().backward()
    grad = net.weight.grad.clone()
    ct.average_gradients(net)
    assert torch.equal(net.weight.grad, grad)
    ct.broadcast_parameters(net)
    ct.barrier()
    ct.disconnect()
    ct.disconnect()  # twice is fine


def test_alone_statistics_match_a_direct_computation() -> None:
    samples = torch.tensor([1.0, 2.0, 4.0, 9.0])
    stats = ct.statistics_scalar(samples)
    assert stats == (4.0, math.sqrt(((samples - 4.0) ** 2).mean().item()), 1.0, 9.0)
    assert ct.statistics_scalar([3, 5]) == (4.0, 1.0, 3.0, 5.0)
    assert ct.statistics_scalar(torch.tensor([[True, False]])) == (0.5, 0.5, 0.0, 1.0)
    with pytest.raises(ValueError, match=message("no process has any sample")):
        ct.statistics_scalar([])


def test_alone_bad_input_raises_naming_the_argument() -> None:
    with pytest.raises(
        TypeError,
        match=message(
            "x must be a torch.Tensor or a DictTensor, got a list; for a Python number use sum_number"
        ),
    ):
        ct.sum([1.0])  # type: ignore[type-var]
    with pytest.raises(TypeError, match=message("avg: the tensor has dtype torch.int64; avg takes float16")):
        ct.avg(torch.arange(3))
    with pytest.raises(TypeError, match=message("sum: key 'done' has dtype torch.bool; sum takes")):
        ct.sum(DictTensor({"done": torch.zeros(2, dtype=torch.bool)}))
    with pytest.raises(TypeError, match=message("max: the tensor has dtype torch.int16")):
        ct.max(torch.zeros(2, dtype=torch.int16))
    with pytest.raises(TypeError, match=message("must be a dense tensor, got layout torch.sparse_coo")):
        ct.min(torch.zeros(2).to_sparse())
    with pytest.raises(TypeError, match=message("sum_number: x must be an int or a float, got a bool")):
        ct.sum_number(True)
    with pytest.raises(
        ValueError, match=message("avg_number: an int must fit in 64 bits, got 36893488147419103232")
    ):
        ct.avg_number(2**65)
    with pytest.raises(
        TypeError, match=message("statistics_scalar: x[1] must be an int or a float, got a str")
    ):
        ct.statistics_scalar([1.0, "2"])  # type: ignore[list-item]
    with pytest.raises(
        TypeError, match=message("statistics_scalar: x must be a tensor or a sequence of numbers, got a str")
    ):
        ct.statistics_scalar("12")
    with pytest.raises(
        TypeError,
        match=message("average_gradients: expected a torch.nn.Module or an iterable of tensors, got an int"),
    ):
        ct.average_gradients(3)  # type: ignore[arg-type]
    with pytest.raises(
        TypeError, match=message("broadcast_parameters: parameter 1 must be a torch.Tensor, got a str")
    ):
        ct.broadcast_parameters([torch.zeros(1), "w"])  # type: ignore[list-item]
    for function in (ct.broadcast_parameters, ct.average_gradients):  # was "parameter 0 ... got a str"
        with pytest.raises(
            TypeError,
            match=message(
                "expected a torch.nn.Module or an iterable of tensors, got an OrderedDict (for a state dict, pass the "
                "module or the dict's .values())"
            ),
        ):
            function(torch.nn.Linear(2, 1).state_dict())  # type: ignore[arg-type]
    embedding = torch.nn.Embedding(3, 2, sparse=True)
    embedding(torch.tensor([0, 2])).sum().backward()
    with pytest.raises(TypeError, match=message("the gradient of parameter 'weight' must be a dense tensor")):
        ct.average_gradients(embedding)


def test_alone_numpy_numbers_are_numbers() -> None:
    """Before, sum_number and avg_number refused a NumPy int or float32 ("got an int64"), and
    statistics_scalar a list holding one, which np.sum and friends give."""
    total = ct.sum_number(np.int64(3))
    assert total == 3 and type(total) is int
    assert ct.sum_number(np.float32(0.5)) == 0.5 and type(ct.sum_number(np.float32(0.5))) is float
    assert ct.avg_number(np.int32(4)) == 4.0 and type(ct.avg_number(np.int32(4))) is float
    assert ct.statistics_scalar([np.int64(1), np.float32(3.0), 2]) == ct.Statistics(
        2.0, math.sqrt(2 / 3), 1.0, 3.0
    )
    with pytest.raises(
        ValueError, match=message("sum_number: an int must fit in 64 bits, got 18446744073709551615")
    ):
        ct.sum_number(np.uint64(2**64 - 1))
    with pytest.raises(TypeError, match=message("sum_number: x must be an int or a float, got a numpy.bool")):
        ct.sum_number(np.bool_(True))
    numpy_1_bool = type("bool_", (), {"__module__": "numpy"})()  # np.bool_'s name before NumPy 2
    with pytest.raises(TypeError, match=message("sum_number: x must be an int or a float, got a numpy.bool")):
        ct.sum_number(numpy_1_bool)
    with pytest.raises(
        TypeError,
        match=message(
            "statistics_scalar: x must be a tensor or a sequence of numbers, got a ndarray "
            "(torch.as_tensor(x) for a NumPy array)"
        ),
    ):
        ct.statistics_scalar(np.array([1.0, 2.0]))  # type: ignore[arg-type]


def test_cluster_error_is_the_library_error() -> None:
    assert ct.ClusterError is ClusterError and issubclass(ClusterError, RuntimeError)
    assert not hasattr(rlstruct, "sum")  # the reductions stay in their module


def test_fork_checks_its_arguments_before_starting_anything() -> None:
    with pytest.raises(
        ValueError, match=message("fork: n must be a non-negative int (processes to add), got -1")
    ):
        ct.fork(-1)
    with pytest.raises(
        ValueError, match=message("fork: n must be a non-negative int (processes to add), got True")
    ):
        ct.fork(True)
    with pytest.raises(
        ValueError, match=message("fork: timeout must be a positive number of seconds, got 0")
    ):
        ct.fork(1, timeout=0)
    with pytest.raises(
        ValueError, match=message("fork: start_timeout must be a positive number of seconds, got inf")
    ):
        ct.fork(1, start_timeout=math.inf)
    with pytest.raises(
        ValueError,
        match=message(f"fork: n must be a non-negative int (processes to add), got {np.int64(-1)!r}"),
    ):
        ct.fork(np.int64(-1))
    with pytest.raises(
        ValueError, match=message("fork: timeout must be at most 1e+09 seconds, got 10000000000.0")
    ):
        ct.fork(1, timeout=1e10)  # gloo refused it once the processes had started (1e14: an OverflowError)
    with pytest.raises(
        ValueError,
        match=message("fork: start_timeout must be at most 1e+09 seconds, got 10000000000.0"),
    ):
        ct.fork(
            1, start_timeout=1e10
        )  # the store timed out at once (1e14: an OverflowError, marked as forked)
    with pytest.raises(TypeError, match=message("fork: backend must be a str or None, got int")):
        ct.fork(1, backend=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=message("fork: backend 'bogus' names 'bogus', which is not a")):
        ct.fork(1, backend="bogus")
    if not torch.cuda.is_available():
        with pytest.raises(
            ValueError, match=message("nccl cannot run on this machine (nccl needs CUDA GPUs)")
        ):
            ct.fork(1, backend="cpu:gloo,cuda:nccl")
    if not torch.distributed.is_backend_available("xccl"):
        with pytest.raises(
            ValueError, match=message("fork: backend 'xccl': xccl cannot run on this machine")
        ):
            ct.fork(1, backend="xccl")  # it started the children, which then failed to join
    assert ct.world_size() == 1


def test_fork_from_a_script_on_stdin_says_it_needs_a_script_file() -> None:
    code = "import rlstruct.cluster as ct\nct.fork(1, start_timeout=20)\n"
    result = subprocess.run(
        [sys.executable, "-"], input=code, capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 1
    assert "RuntimeError: fork: starts copies of the running script, so it needs one" in result.stderr


def test_fork_zero_runs_alone_and_only_once() -> None:
    code = (
        "import rlstruct.cluster as ct\n"
        "assert ct.fork(0) == 0 and ct.world_size() == 1\n"
        "try:\n    ct.fork(0)\nexcept RuntimeError as err:\n    print(err)\n"
    )
    result = launch([sys.executable, "-c", code])
    assert result.returncode == 0, result.stderr
    assert "fork: this process already called fork(); call it once per process" in result.stdout


def test_fork_takes_numpy_numbers() -> None:
    """Before, fork refused a NumPy int n or timeout as not a non-negative int or not a number."""
    code = (
        "import numpy as np\nimport rlstruct.cluster as ct\n"
        "assert ct.fork(np.int64(0), timeout=np.int64(5), start_timeout=np.float32(5)) == 0\n"
        "print(ct.world_size())\n"
    )
    result = launch([sys.executable, "-c", code])
    assert result.returncode == 0, result.stderr
    assert result.stdout == "1\n"


# ---------------------------------------------------------------- 2 and 3 processes


@pytest.mark.slow
@pytest.mark.parametrize("n", [1, 2], ids=["2 processes", "3 processes"])
def test_reductions_equal_the_single_process_reference(tmp_path: Path, n: int) -> None:
    result, records = run_script(tmp_path, "reduce", n)
    assert result.returncode == 0, result.stderr[-3000:]
    assert sorted(records) == list(range(n + 1))
    assert all(record["world_size"] == n + 1 for record in records.values())
    check_reductions(tmp_path, n + 1)


@pytest.mark.slow
def test_reductions_under_torchrun(tmp_path: Path) -> None:
    result, records = run_script(tmp_path, "reduce", 1, torchrun=True)
    assert result.returncode == 0, result.stderr[-3000:]
    assert sorted(records) == [0, 1] and records[1]["world_size"] == 2
    check_reductions(tmp_path, 2)


def check_reductions(out_dir: Path, world: int) -> None:
    inputs = [rank_inputs(r) for r in range(world)]
    outputs = [torch.load(out_dir / f"rank{r}.pt", weights_only=False) for r in range(world)]
    got = outputs[0]

    def per_rank(key: str) -> list[torch.Tensor]:
        return [x[key] for x in inputs]

    # sums: exact for integers and integer-valued floats, one of the orders of summation for random floats
    for key in ("whole_floats", "int64", "int32"):
        assert torch.equal(got[f"sum/{key}"], torch.stack(per_rank(key)).sum(0)), key
    assert torch.equal(got["sum/whole_floats"], candidates(per_rank("whole_floats"))[0])
    for key in ("random_floats", "float64"):
        assert_one_of(got[f"sum/{key}"], candidates(per_rank(key)))
        assert_one_of(got[f"avg/{key}"], [total / world for total in candidates(per_rank(key))])
    assert torch.equal(got["avg/whole_floats"], candidates(per_rank("whole_floats"))[0] / world)
    # max and min: exact, all dtypes
    for key in ("whole_floats", "random_floats", "float64", "int64", "int32", "uint8", "bool"):
        stacked = torch.stack(per_rank(key))
        assert torch.equal(got[f"max/{key}"], stacked.amax(0)), key
        assert torch.equal(got[f"min/{key}"], stacked.amin(0)), key
        assert got[f"max/{key}"].dtype == stacked.dtype
    # a NaN on any rank is the result's, as torch.maximum and torch.minimum give it
    nan_expected = torch.stack(per_rank("nan_floats")).amax(0)
    for op in ("max", "min"):
        assert torch.equal(got[f"{op}/nan_floats"].isnan(), nan_expected.isnan()), op
    # float16 averaged in float32: a sum beyond its range still gives the mean it holds
    half = torch.tensor([40000.0, 1.0], dtype=torch.float16)
    assert torch.equal(got["avg/half"], half) and torch.equal(got["average_gradients/half"], half)
    if world == 3:  # the NaN is on rank 2
        assert all(math.isnan(v) for v in got["statistics/nan_on_the_last"])
    # DictTensors: key by key
    for op in ("sum", "max", "min"):
        for key in ("obs", "action"):
            stacked = torch.stack([x["dicttensor"][key] for x in inputs])
            expected = {"sum": stacked.sum(0), "max": stacked.amax(0), "min": stacked.amin(0)}[op]
            assert torch.equal(got[f"{op}/dicttensor"][key], expected), (op, key)
    assert list(got["sum/dicttensor"]) == ["obs", "action"]  # the input's key order
    assert torch.equal(
        got["avg/dicttensor"]["obs"], torch.stack([x["dicttensor"]["obs"] for x in inputs]).sum(0) / world
    )
    # Python numbers
    ints = [x["int_number"] for x in inputs]
    assert got["sum_number/int_number"] == sum(ints) and isinstance(got["sum_number/int_number"], int)
    assert got["avg_number/int_number"] == sum(ints) / world
    floats = [torch.tensor([x["float_number"]], dtype=torch.float64) for x in inputs]
    assert got["sum_number/float_number"] in [c.item() for c in candidates(floats)]
    assert got["avg_number/float_number"] in [c.item() / world for c in candidates(floats)]
    # statistics of the union of every rank's samples (rank 0 has none)
    union = torch.cat(per_rank("samples")).double()
    mean = union.sum().item() / union.numel()
    std = math.sqrt(((union - mean) ** 2).sum().item() / union.numel())
    assert got["statistics/samples"] == (mean, std, union.min().item(), union.max().item())
    assert got["statistics/list"] == got["statistics/samples"]
    union = torch.cat(per_rank("random_samples")).double()
    assert got["statistics/random_samples"] == pytest.approx(
        (union.mean().item(), union.std(correction=0).item(), union.min().item(), union.max().item()),
        rel=1e-12,
    )
    # gradients: averaged in place; parameters and buffers: rank 0's everywhere
    assert torch.equal(
        got["average_gradients/whole_gradient"], candidates(per_rank("whole_gradient"))[0] / world
    )
    assert_one_of(
        got["average_gradients/random_gradient"], [t / world for t in candidates(per_rank("random_gradient"))]
    )
    reference = model_for(0).state_dict()
    assert list(got["broadcast_parameters"]) == list(reference)
    for key, value in reference.items():
        assert torch.equal(got["broadcast_parameters"][key], value), key
    assert not torch.equal(model_for(1).state_dict()["0.weight"], reference["0.weight"])  # they did differ
    # every rank got the same bits, and its input was left as it was
    for r, other in enumerate(outputs):
        assert torch.equal(other["unchanged_input"], inputs[r]["whole_floats"])
        for key, value in got.items():
            if key == "unchanged_input":
                continue
            if isinstance(value, torch.Tensor):
                assert torch.equal(other[key].nan_to_num(), value.nan_to_num()), (r, key)  # NaN where NaN
            elif isinstance(value, dict):
                assert all(torch.equal(other[key][k], v) for k, v in value.items()), (r, key)
            elif isinstance(value, tuple):  # statistics: NaN where NaN
                assert all(
                    a == b or (math.isnan(a) and math.isnan(b))
                    for a, b in zip(other[key], value, strict=True)
                ), (
                    r,
                    key,
                )
            else:
                assert other[key] == value, (r, key)


@pytest.mark.slow
@pytest.mark.parametrize("n", [1, 2], ids=["2 processes", "3 processes"])
def test_different_layouts_and_calls_raise_on_every_rank(tmp_path: Path, n: int) -> None:
    result, records = run_script(tmp_path, "layout", n)
    assert result.returncode == 0, result.stderr[-3000:]
    assert sorted(records) == list(range(n + 1))
    others = "ranks 0, 2" if n == 2 else "rank 0"
    expected = {
        "shape": "ValueError: cluster.sum: every process must pass the same layout (keys, shapes, dtypes), but "
        "the tensor is [4] torch.float32 cpu on rank 1 but [3] torch.float32 cpu on rank 0",
        "dtype": "ValueError: cluster.max: every process must pass the same layout (keys, shapes, dtypes), but "
        "the tensor is [3] torch.float64 cpu on rank 1 but [3] torch.float32 cpu on rank 0",
        "keys": "ValueError: cluster.sum: every process must pass the same layout (keys, shapes, dtypes), but "
        "rank 1 has no key 'c' (rank 0: [2] torch.float32 cpu); "
        "rank 1 has key 'b' ([2] torch.float32 cpu), rank 0 has not",
        "number": "ValueError: cluster.sum_number: every process must pass the same layout (keys, shapes, dtypes), "
        "but the number is a float on rank 1 but an int on rank 0",
        "overflow": f"ValueError: cluster.sum_number: the sum over all processes, {(2**63 - 1) * (n + 1)}, "
        "does not fit in 64 bits",
        "gradients": "ValueError: cluster.average_gradients: every process must pass the same layout (keys, shapes, "
        "dtypes), but the gradient of parameter 'bias' is none on rank 1 but [1] torch.float32 cpu on rank 0",
        "call": f"different calls ({others} called avg; rank 1 called barrier); every process must make the same "
        "cluster calls in the same order",
        "after": None,  # the group is still usable: no data moved before the disagreement was found
    }
    for r, record in records.items():
        for step, error in expected.items():
            if error is None or step != "call":
                assert record["steps"][step] == error, (r, step)
            else:
                assert record["steps"][step].startswith("ClusterError: cluster."), (r, step)
                assert error in record["steps"][step], (r, step)


@pytest.mark.slow
def test_a_call_some_ranks_do_not_make_times_out_on_the_others(tmp_path: Path) -> None:
    result, records = run_script(tmp_path, "absent", 2)
    assert result.returncode == 0, result.stderr[-3000:]
    assert sorted(records) == [0, 2]  # rank 1 idled past the end and was stopped by rank 0
    for r in (0, 2):
        error = records[r]["steps"]["sum"]
        assert error.startswith(f"ClusterError: cluster.sum failed on rank {r} of 3: another process died"), (
            error
        )
        assert records[r]["seconds"]["sum"] < TIMEOUT_S + 5.0
    assert "process 1 was still running 3 s after rank 0 finished; stopping it" in result.stderr


@pytest.mark.slow
@pytest.mark.parametrize("n", [1, 2], ids=["2 processes", "3 processes"])
def test_a_rank_that_dies_fails_the_call_on_every_other_rank(tmp_path: Path, n: int) -> None:
    result, records = run_script(tmp_path, "dies", n)
    assert result.returncode == 0, result.stderr[-3000:]
    assert sorted(records) == list(range(n))  # the last rank died
    for r, record in records.items():
        error = record["steps"]["sum"]
        assert error.startswith(f"ClusterError: cluster.sum failed on rank {r} of {n + 1}"), error
        assert record["seconds"]["sum"] < TIMEOUT_S + 5.0
    assert f"rlstruct.cluster: process {n} exited with code 3" in result.stderr


@pytest.mark.slow
def test_a_child_that_exits_before_joining_fails_fork_at_once(tmp_path: Path) -> None:
    start = time.monotonic()
    result, records = run_script(tmp_path, "dies_in_fork", 2)
    assert result.returncode == 1 and not records
    assert "ClusterError: fork: process 2 exited with code 3 before it joined the group" in result.stderr
    assert time.monotonic() - start < 60.0  # well before start_timeout (60 s) plus the run


@pytest.mark.slow
def test_children_die_with_rank_0(tmp_path: Path) -> None:
    result, records = run_script(tmp_path, "parent_dies", 2)  # run_script checks that every pid is gone
    assert result.returncode == -signal.SIGKILL
    assert sorted(records) == [0, 1, 2]
