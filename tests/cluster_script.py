"""A script that tests/test_cluster.py runs as 2 or 3 processes, with ``rlstruct.cluster.fork`` or torchrun.

``python tests/cluster_script.py SCENARIO OUT_DIR N`` runs SCENARIO in N + 1
processes; every process writes ``OUT_DIR/rank<r>.json`` (its pid and, for
each step, the error it raised, or null, and how long it took) and, for ``reduce``,
``OUT_DIR/rank<r>.pt`` (the results). The inputs of every rank come from
``rank_inputs``, which the test calls too to compute the single-process
reference. Everything runs under ``if __name__ == "__main__":``, so that
importing this module (pytest collects its doctests) does nothing.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

import rlstruct.cluster as ct
from rlstruct import DictTensor

TIMEOUT_S = 3.0  # every collective operation of the scenarios
START_TIMEOUT_S = 60.0  # a loaded 2-core machine takes seconds to start 3 interpreters importing torch


def rank_inputs(rank: int) -> dict[str, Any]:
    """What process ``rank`` reduces: the same shapes on every rank, values that depend on the rank."""
    g = torch.Generator().manual_seed(rank)
    return {
        # integer-valued floats: every order of summation gives the same exact result
        "whole_floats": torch.randint(-1000, 1000, (5, 3), generator=g).float(),
        # random floats: 3 or more processes sum in an order the backend chooses
        "random_floats": torch.randn(1000, generator=g),
        "float64": torch.randn(7, generator=g, dtype=torch.float64),
        "int64": torch.randint(-(2**40), 2**40, (6,), generator=g),
        "int32": torch.randint(-1000, 1000, (2, 2), generator=g, dtype=torch.int32),
        "uint8": torch.randint(0, 256, (9,), generator=g, dtype=torch.uint8),
        "bool": torch.rand(8, generator=g) < 0.5,
        "dicttensor": DictTensor(
            {
                "obs": torch.randint(-50, 50, (4, 3), generator=g).float(),
                "action": torch.randint(0, 10, (4,), generator=g),
            }
        ),
        "int_number": 10 * rank + 1,
        "float_number": 0.1 * (rank + 1),
        "samples": torch.arange(3.0 * rank),  # rank 0 has none
        "random_samples": torch.randn(5 + rank, generator=g),
        "whole_gradient": torch.randint(-100, 100, (3, 2), generator=g).float(),
        "random_gradient": torch.randn(3, 2, generator=g),
        "nan_floats": torch.ones(4).index_fill(0, torch.tensor([rank]), float("nan")),  # one per rank
        "half": torch.tensor([40000.0, 1.0], dtype=torch.float16),  # their sum is beyond float16
    }


def model_for(rank: int) -> torch.nn.Module:
    """A module whose weights differ on every rank, until ``broadcast_parameters``."""
    torch.manual_seed(100 + rank)
    model = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.BatchNorm1d(3))
    model[1].num_batches_tracked.fill_(rank)
    return model


def reduce(rank: int) -> dict[str, Any]:
    """Every reduction on every kind of input."""
    x = rank_inputs(rank)
    out: dict[str, Any] = {}
    for op in ("sum", "avg", "max", "min"):
        reduce_op = getattr(ct, op)
        for key in ("whole_floats", "random_floats", "float64"):
            out[f"{op}/{key}"] = reduce_op(x[key])
        if op != "avg":
            for key in ("int64", "int32"):
                out[f"{op}/{key}"] = reduce_op(x[key])
        dt = x["dicttensor"] if op != "avg" else x["dicttensor"].get(["obs"])
        out[f"{op}/dicttensor"] = dict(reduce_op(dt).items())
    for op in ("max", "min"):
        for key in ("uint8", "bool"):
            out[f"{op}/{key}"] = getattr(ct, op)(x[key])
    for op in ("sum_number", "avg_number"):
        for key in ("int_number", "float_number"):
            out[f"{op}/{key}"] = getattr(ct, op)(x[key])
    for op in ("max", "min"):
        out[f"{op}/nan_floats"] = getattr(ct, op)(x["nan_floats"])
    out["avg/half"] = ct.avg(x["half"])
    half = torch.nn.Parameter(torch.zeros(2, dtype=torch.float16))
    half.grad = x["half"].clone()
    ct.average_gradients([half])
    out["average_gradients/half"] = half.grad
    out["statistics/nan_on_the_last"] = tuple(ct.statistics_scalar([float("nan") if rank == 2 else 1.0]))
    out["statistics/samples"] = tuple(ct.statistics_scalar(x["samples"]))
    out["statistics/random_samples"] = tuple(ct.statistics_scalar(x["random_samples"]))
    out["statistics/list"] = tuple(ct.statistics_scalar(x["samples"].tolist()))
    for key in ("whole_gradient", "random_gradient"):
        weight = torch.nn.Parameter(torch.zeros(3, 2))
        (weight * x[key]).sum().backward()  # the gradient is x[key]
        grad_before = weight.grad
        ct.average_gradients([weight])
        assert weight.grad is grad_before  # in place
        out[f"average_gradients/{key}"] = weight.grad
    model = model_for(rank)
    ct.broadcast_parameters(model)
    out["broadcast_parameters"] = dict(model.state_dict())
    out["unchanged_input"] = x["whole_floats"]
    ct.barrier()
    return out


def layout(rank: int) -> list[tuple[str, Callable[[], object]]]:
    """Calls whose inputs, or the calls themselves, differ on rank 1; then calls that agree."""
    odd = rank == 1
    return [
        ("shape", lambda: ct.sum(torch.zeros(4 if odd else 3))),
        ("dtype", lambda: ct.max(torch.zeros(3, dtype=torch.float64 if odd else torch.float32))),
        (
            "keys",
            lambda: ct.sum(DictTensor({"a": torch.zeros(2), ("b" if odd else "c"): torch.zeros(2)})),
        ),
        ("number", lambda: ct.sum_number(1.0 if odd else 1)),
        ("overflow", lambda: ct.sum_number(2**63 - 1)),  # every rank agrees; the sum does not fit
        ("gradients", lambda: ct.average_gradients(_with_gradient(missing=odd))),
        ("call", ct.barrier if odd else lambda: ct.avg(torch.zeros(3))),
        ("after", lambda: ct.sum_number(1)),
    ]


def _with_gradient(missing: bool) -> torch.nn.Module:
    model = torch.nn.Linear(2, 1)
    model(torch.ones(1, 2)).sum().backward()
    if missing:
        model.bias.grad = None
    return model


def absent(rank: int) -> list[tuple[str, Callable[[], object]]]:
    """Rank 1 does not make the call and stays alive; the others wait for it, at most the timeout."""
    if rank == 1:
        return [("idle", lambda: threading.Event().wait(3 * TIMEOUT_S))]
    return [("sum", lambda: ct.sum(torch.ones(3)))]


def dies(rank: int) -> list[tuple[str, Callable[[], object]]]:
    """The last rank dies before the call; the others make it."""
    if rank == ct.world_size() - 1:
        return [("die", lambda: os._exit(3))]
    return [("sum", lambda: ct.sum(torch.ones(3)))]


def write(out_dir: Path, rank: int, record: dict[str, Any]) -> None:
    path = out_dir / f"rank{rank}.json"
    path.with_suffix(".tmp").write_text(json.dumps(record))
    path.with_suffix(".tmp").rename(path)


def main() -> None:
    scenario, out_dir, n = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
    if scenario == "dies_in_fork" and os.environ.get("RLSTRUCT_CLUSTER_RANK") == str(n):
        os._exit(3)  # the last child exits before it reaches fork()
    rank = ct.fork(n, timeout=TIMEOUT_S, start_timeout=START_TIMEOUT_S)
    record: dict[str, Any] = {
        "rank": rank,
        "world_size": ct.world_size(),
        "pid": os.getpid(),
        "steps": {},
        "seconds": {},
    }
    if scenario == "reduce":
        torch.save(reduce(rank), out_dir / f"rank{rank}.pt")
    elif scenario == "parent_dies":
        write(out_dir, rank, record)
        ct.barrier()  # every pid is on disk
        if rank == 0:
            os.kill(os.getpid(), signal.SIGKILL)
        threading.Event().wait(
            60.0
        )  # the children idle, outside any collective call, until the watchdog ends them
    else:
        steps = {"layout": layout, "absent": absent, "dies": dies}[scenario](rank)
        for name, call in steps:
            start = time.monotonic()
            try:
                call()
                record["steps"][name] = None
            except Exception as err:
                record["steps"][name] = f"{type(err).__name__}: {err}"
            record["seconds"][name] = time.monotonic() - start
    write(out_dir, rank, record)
    ct.disconnect()


if __name__ == "__main__":
    main()
