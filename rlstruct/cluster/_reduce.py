"""Element-wise reductions across processes: tensors, DictTensors, numbers, statistics, gradients.

Each operation checks its input, returns it unchanged when the world size is
1, checks that every process passes the same layout (``_agree``), then moves
the data with one collective per dtype: the tensors are flattened into one
buffer, reduced, and split back.

The element-wise reductions are named ``reduce_sum``, ``reduce_avg``,
``reduce_max`` and ``reduce_min`` here, so that ``sum``, ``max`` and ``min``
stay Python's builtins in this module; the package exports them as
``rlstruct.cluster.sum``, ``avg``, ``max`` and ``min``.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Mapping, Sequence
from functools import partial
from typing import NamedTuple, TypeVar

import torch
import torch.distributed as dist

from rlstruct.checks import is_int
from rlstruct.cluster._agree import agree, collective_device, run
from rlstruct.cluster._group import rank, world_size
from rlstruct.dicttensor import DictTensor
from rlstruct.errors import describe

__all__ = [
    "Statistics",
    "average_gradients",
    "avg_number",
    "broadcast_parameters",
    "reduce_avg",
    "reduce_max",
    "reduce_min",
    "reduce_sum",
    "statistics_scalar",
    "sum_number",
]

Reducible = TypeVar("Reducible", torch.Tensor, DictTensor)

_INTEGERS = (torch.uint8, torch.int8, torch.int32, torch.int64)
_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_ACCEPTED = {
    "sum": _INTEGERS + _FLOATS,
    "avg": _FLOATS,
    "max": (torch.bool, *_INTEGERS, *_FLOATS),
    "min": (torch.bool, *_INTEGERS, *_FLOATS),
    "average_gradients": _FLOATS,
    "broadcast_parameters": (torch.bool, *_INTEGERS, *_FLOATS),
}
_REDUCE_OPS = {
    "sum": dist.ReduceOp.SUM,
    "avg": dist.ReduceOp.SUM,
    "max": dist.ReduceOp.MAX,
    "min": dist.ReduceOp.MIN,
}


def _layout(tensor: torch.Tensor) -> str:
    return f"{list(tensor.shape)} {tensor.dtype} {tensor.device.type}"


def _check(op: str, label: str, tensor: torch.Tensor) -> None:
    if tensor.layout != torch.strided:
        raise TypeError(f"cluster.{op}: {label} must be a dense tensor, got layout {tensor.layout}")
    if tensor.dtype not in _ACCEPTED[op]:
        accepted = ", ".join(str(d).removeprefix("torch.") for d in _ACCEPTED[op])
        hint = " (an average of integers would change the dtype: use sum and divide)" if op == "avg" else ""
        raise TypeError(f"cluster.{op}: {label} has dtype {tensor.dtype}; {op} takes {accepted}{hint}")


def _flat_collective(op: str, tensors: list[torch.Tensor], apply: str) -> list[torch.Tensor]:
    """Reduce (``apply`` = sum, avg, max, min) or broadcast from rank 0 (``apply`` = broadcast) ``tensors``.

    Returns new contiguous tensors, in order, each a view into one flat buffer per (dtype, device).
    """
    groups: dict[tuple[torch.dtype, torch.device], list[int]] = {}
    for i, tensor in enumerate(tensors):
        groups.setdefault((tensor.dtype, tensor.device), []).append(i)
    out: list[torch.Tensor] = [torch.empty(0)] * len(tensors)
    for indices in groups.values():
        flat = torch.cat([tensors[i].detach().reshape(-1) for i in indices])
        if flat.numel():
            if apply == "broadcast":
                run(op, partial(dist.broadcast, flat, src=0))
            elif apply == "avg" and flat.dtype in (torch.float16, torch.bfloat16):
                # summed in float32: a sum beyond the half range still averages to a value it holds
                wide = flat.float()
                run(op, partial(dist.all_reduce, wide, op=dist.ReduceOp.SUM))
                flat.copy_(wide.div_(world_size()))
            else:
                # the backends' max and min keep a NaN of the first operand only: a NaN is carried apart
                nan = (
                    torch.isnan(flat).to(torch.uint8)
                    if apply in ("max", "min") and flat.is_floating_point()
                    else None
                )
                run(op, partial(dist.all_reduce, flat, op=_REDUCE_OPS[apply]))
                if nan is not None:
                    run(op, partial(dist.all_reduce, nan, op=dist.ReduceOp.MAX))
                    flat.masked_fill_(nan.bool(), math.nan)
        if apply == "avg" and flat.dtype not in (torch.float16, torch.bfloat16):
            flat.div_(world_size())
        parts = flat.split([tensors[i].numel() for i in indices])
        for i, part in zip(indices, parts, strict=True):
            out[i] = part.view(tensors[i].shape)
    return out


def _reduce(op: str, x: Reducible) -> Reducible:
    if isinstance(x, torch.Tensor):
        _check(op, "the tensor", x)
        if world_size() == 1:
            return x
        agree(op, {"the input": "a tensor", "the tensor": _layout(x)})
        return _flat_collective(op, [x], op)[0]
    if isinstance(x, DictTensor):
        keys = sorted(x.keys())
        for key in keys:
            _check(op, f"key {key!r}", x[key])
        if world_size() == 1:
            return x
        agree(op, {"the input": "a DictTensor", **{f"key {k!r}": _layout(x[k]) for k in keys}})
        reduced = dict(zip(keys, _flat_collective(op, [x[k] for k in keys], op), strict=True))
        return DictTensor({k: reduced[k] for k in x}, batch_size=x.n_elems())
    hint = f"; for a Python number use {op}_number" if op in ("sum", "avg") else ""
    raise TypeError(f"cluster.{op}: x must be a torch.Tensor or a DictTensor, got {describe(x)}{hint}")


def reduce_sum(x: Reducible) -> Reducible:
    """The element-wise sum of ``x`` over all processes.

    Every process passes a tensor (or DictTensor) with the same shape, dtype
    and device type (and, for a DictTensor, the same keys, in any order) and
    gets the same result. With 3 or more processes, float sums are rounded
    in the order the backend adds them (gloo: around a ring, starting at a
    rank that depends on the element's position), which may differ in the
    last bit from a left-to-right sum; integer sums are exact.

    Args:
        x: a tensor or DictTensor of integers or floats (not bool).

    Returns:
        A new tensor (or DictTensor) with ``x``'s shape, dtype and device and no
        autograd history; ``x`` itself when the world size is 1. ``x`` is
        not modified.

    Raises:
        TypeError: if ``x`` is not a tensor or DictTensor, or has another dtype.
        ValueError: if the processes' layouts differ (naming ranks and keys).
        ClusterError: if a process died, stopped answering within the
            timeout, or made another call.

    Examples:
        >>> import torch
        >>> import rlstruct.cluster as ct
        >>> ct.sum(torch.tensor([1.0, 2.0]))  # alone: the input itself
        tensor([1., 2.])
    """
    return _reduce("sum", x)


def reduce_avg(x: Reducible) -> Reducible:
    """The element-wise mean of ``x`` over all processes: ``sum(x) / world_size()``.

    As ``sum``, for floating-point tensors only (an average of integers would
    change the dtype). float16 and bfloat16 are summed in float32 and the
    mean rounded back, so that a sum beyond their range (two 40000s in
    float16) still gives the mean they hold.

    Examples:
        >>> import torch
        >>> import rlstruct.cluster as ct
        >>> ct.avg(torch.tensor([1.0, 2.0]))
        tensor([1., 2.])
    """
    return _reduce("avg", x)


def reduce_max(x: Reducible) -> Reducible:
    """The element-wise maximum of ``x`` over all processes (exact).

    As ``sum``; bool tensors are accepted (``max`` is then a logical or). A
    NaN on any process makes its element NaN, as ``torch.maximum`` does.

    Examples:
        >>> import torch
        >>> import rlstruct.cluster as ct
        >>> ct.max(torch.tensor([1, 5]))
        tensor([1, 5])
    """
    return _reduce("max", x)


def reduce_min(x: Reducible) -> Reducible:
    """The element-wise minimum of ``x`` over all processes (exact).

    As ``sum``; bool tensors are accepted (``min`` is then a logical and). A
    NaN on any process makes its element NaN, as ``torch.minimum`` does.

    Examples:
        >>> import torch
        >>> import rlstruct.cluster as ct
        >>> ct.min(torch.tensor([1, 5]))
        tensor([1, 5])
    """
    return _reduce("min", x)


def _python_number(op: str, x: object) -> int | float:
    """``x`` as a Python int or float (NumPy numbers included), or a TypeError naming it."""
    if is_int(x):
        return int(x)
    if isinstance(x, numbers.Real) and not isinstance(x, bool):
        return float(x)
    raise TypeError(f"cluster.{op}: x must be an int or a float, got {describe(x)}")


def _number(op: str, x: int | float) -> torch.Tensor:
    if isinstance(x, int) and not -(2**63) <= x < 2**63:
        raise ValueError(f"cluster.{op}: an int must fit in 64 bits, got {x}")
    return torch.tensor([x], dtype=torch.int64 if isinstance(x, int) else torch.float64)


def sum_number(x: float) -> float:
    """The sum of a Python number over all processes.

    Args:
        x: an int (summed exactly, as int64) or a float (as float64); NumPy
            ints and floats are taken as Python ones.

    Returns:
        The sum, an int if ``x`` is an int, else a float; ``x`` itself (as a
        Python number) when the world size is 1.

    Raises:
        TypeError: if ``x`` is not an int or a float (bool included).
        ValueError: if the processes pass an int on some ranks and a float
            on others, or an int, or the sum of the ints, does not fit in
            64 bits.
        ClusterError: as for ``sum``.

    Examples:
        >>> import rlstruct.cluster as ct
        >>> ct.sum_number(3)
        3
    """
    x = _python_number("sum_number", x)
    value = _number("sum_number", x)
    if world_size() == 1:
        return x
    return _sum_number("sum_number", value)


def _sum_number(op: str, value: torch.Tensor) -> float:
    """The sum over all processes of a number ``_number`` made: exact for ints, or a ValueError.

    An int is split into its high and low 32 bits, each summed as int64
    (exactly, for fewer than 2**31 processes), and joined in Python, so that
    a sum beyond 64 bits is refused rather than wrapped around.
    """
    agree(op, {"the number": "an int" if value.dtype == torch.int64 else "a float"})
    if value.dtype != torch.int64:
        return _flat_collective(op, [value.to(collective_device())], "sum")[0].item()
    x = int(value)
    parts = torch.tensor([x >> 32, x & 0xFFFFFFFF], dtype=torch.int64)
    high, low = _flat_collective(op, [parts.to(collective_device())], "sum")[0].tolist()
    total: int = (high << 32) + low
    if not -(2**63) <= total < 2**63:
        raise ValueError(f"cluster.{op}: the sum over all processes, {total}, does not fit in 64 bits")
    return total


def avg_number(x: float) -> float:
    """The mean of a Python number over all processes, as a float (``float(x)`` when alone).

    Ints are summed exactly before the division. Raises as ``sum_number``.

    Examples:
        >>> import rlstruct.cluster as ct
        >>> ct.avg_number(2.5)
        2.5
    """
    x = _python_number("avg_number", x)
    value = _number("avg_number", x)
    if world_size() == 1:
        return float(x)
    return _sum_number("avg_number", value) / world_size()


class Statistics(NamedTuple):
    """Statistics of samples gathered from all processes (Python floats)."""

    mean: float
    std: float
    """The population standard deviation (divided by the number of samples)."""
    min: float
    max: float


def statistics_scalar(x: torch.Tensor | Sequence[float]) -> Statistics:
    """The mean, standard deviation, minimum and maximum of all processes' samples together.

    Each process passes its own samples (any number, zero included), e.g. the
    returns of the episodes it finished. The statistics are those of the
    union of all samples, computed in float64 in two passes (the mean, then
    the squared deviations from it).

    Args:
        x: a tensor of any shape (its elements are the samples; integer,
            float or bool dtype, on any device) or a sequence of numbers
            (Python or NumPy ints and floats).

    Returns:
        ``Statistics(mean, std, min, max)`` of the union; std is the
        population standard deviation. Every process gets the same values.

    Raises:
        TypeError: if ``x`` is not a tensor or a sequence of numbers.
        ValueError: if no process has any sample.
        ClusterError: as for ``sum``.

    Examples:
        >>> import rlstruct.cluster as ct
        >>> ct.statistics_scalar([1.0, 2.0, 3.0, 6.0])
        Statistics(mean=3.0, std=1.8708286933869707, min=1.0, max=6.0)
    """
    op = "statistics_scalar"
    if isinstance(x, torch.Tensor):
        if x.is_complex() or x.layout != torch.strided:
            raise TypeError(f"cluster.{op}: x must be a dense real tensor, got {describe(x)}")
        samples = x.detach().reshape(-1).to("cpu", torch.float64)
    elif isinstance(x, Sequence) and not isinstance(x, (str, bytes)):
        for i, item in enumerate(x):
            if isinstance(item, bool) or not isinstance(item, numbers.Real):  # NumPy numbers are numbers
                raise TypeError(f"cluster.{op}: x[{i}] must be an int or a float, got {describe(item)}")
        samples = torch.tensor([float(item) for item in x], dtype=torch.float64)
    else:
        hint = " (torch.as_tensor(x) for a NumPy array)" if type(x).__module__ == "numpy" else ""
        raise TypeError(f"cluster.{op}: x must be a tensor or a sequence of numbers, got {describe(x)}{hint}")
    alone = world_size() == 1
    if not alone:
        agree(op, {"the samples": "samples"})
    device = torch.device("cpu") if alone else collective_device()
    count_and_sum = torch.tensor([float(samples.numel()), samples.sum().item()], dtype=torch.float64)
    if not alone:
        count_and_sum = _flat_collective(op, [count_and_sum.to(device)], "sum")[0].cpu()
    count, total = count_and_sum.tolist()
    if count == 0:
        raise ValueError(f"cluster.{op}: no process has any sample")
    mean = total / count
    squares = ((samples - mean) ** 2).sum().reshape(1)
    empty = samples.numel() == 0
    extremes = torch.tensor(
        [-math.inf if empty else samples.max().item(), -math.inf if empty else -samples.min().item()],
        dtype=torch.float64,
    )
    if not alone:
        squares = _flat_collective(op, [squares.to(device)], "sum")[0].cpu()
        extremes = _flat_collective(op, [extremes.to(device)], "max")[0].cpu()
    return Statistics(mean, math.sqrt(squares.item() / count), -extremes[1].item(), extremes[0].item())


def _named_tensors(
    op: str, module_or_params: torch.nn.Module | torch.Tensor | Iterable[torch.Tensor], buffers: bool
) -> list[tuple[str, torch.Tensor]]:
    if isinstance(module_or_params, torch.nn.Module):
        named: list[tuple[str, torch.Tensor]] = [
            (f"parameter {n!r}", p) for n, p in module_or_params.named_parameters()
        ]
        if buffers:
            named += [(f"buffer {n!r}", b) for n, b in module_or_params.named_buffers()]
        return named
    if isinstance(module_or_params, torch.Tensor):
        return [("parameter 0", module_or_params)]
    if not isinstance(module_or_params, Iterable) or isinstance(module_or_params, (str, bytes, Mapping)):
        # a Mapping iterates over its keys: a state dict gave "parameter 0 must be a torch.Tensor, got a str"
        hint = (
            " (for a state dict, pass the module or the dict's .values())"
            if isinstance(module_or_params, Mapping)
            else ""
        )
        raise TypeError(
            f"cluster.{op}: expected a torch.nn.Module or an iterable of tensors, got {describe(module_or_params)}"
            + hint
        )
    named = []
    for i, tensor in enumerate(module_or_params):
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"cluster.{op}: parameter {i} must be a torch.Tensor, got {describe(tensor)}")
        named.append((f"parameter {i}", tensor))
    return named


def average_gradients(module_or_params: torch.nn.Module | torch.Tensor | Iterable[torch.Tensor]) -> None:
    """Replace every gradient by its mean over all processes, in place, in one flat all-reduce.

    Call it after ``backward()`` and before the optimiser step, on every
    process: each process then steps with the same gradient. Gradients are
    copied into one buffer per dtype (normally one), summed across processes
    and divided by the world size: ``(g_0 + ... + g_{n-1}) / n``, in the
    order ``sum`` describes (float16 and bfloat16 gradients summed in
    float32, as ``avg`` does). Parameters without a gradient are skipped, and
    must be the same on every process.

    Args:
        module_or_params: a module (its ``parameters()``), a tensor, or an
            iterable of tensors; gradients must be dense and floating-point.

    Raises:
        TypeError: for other input, or a sparse or non-float gradient.
        ValueError: if the processes' parameters or gradients differ in
            number, shape or dtype, or have gradients for different parameters.
        ClusterError: as for ``sum``.

    Examples:
        >>> import torch
        >>> import rlstruct.cluster as ct
        >>> net = torch.nn.Linear(2, 1)
        >>> net(torch.ones(1, 2)).sum().backward()
        >>> ct.average_gradients(net)  # alone: the gradients stay as they are
        >>> net.weight.grad
        tensor([[1., 1.]])
    """
    op = "average_gradients"
    named = _named_tensors(op, module_or_params, buffers=False)
    with_grad = [(label, p.grad) for label, p in named if p.grad is not None]
    for label, grad in with_grad:
        _check(op, f"the gradient of {label}", grad)
    if world_size() == 1:
        return
    agree(
        op, {f"the gradient of {label}": "none" if p.grad is None else _layout(p.grad) for label, p in named}
    )
    grads = [grad for _, grad in with_grad]
    for grad, mean in zip(grads, _flat_collective(op, grads, "avg"), strict=True):
        grad.copy_(mean)


def broadcast_parameters(module_or_params: torch.nn.Module | torch.Tensor | Iterable[torch.Tensor]) -> None:
    """Copy rank 0's parameters (and, for a module, buffers) into every process, in place.

    Call it on every process after building the model, so that all start
    from the same weights whatever their seeds. One broadcast per dtype.

    Args:
        module_or_params: a module (its ``parameters()`` and ``buffers()``), a
            tensor, or an iterable of tensors.

    Raises:
        TypeError: for other input, or a tensor of an unsupported dtype.
        ValueError: if the processes' parameters differ in number, shape or dtype.
        ClusterError: as for ``sum``.

    Examples:
        >>> import torch
        >>> import rlstruct.cluster as ct
        >>> ct.broadcast_parameters(torch.nn.Linear(2, 1))  # alone: nothing to do
    """
    op = "broadcast_parameters"
    named = _named_tensors(op, module_or_params, buffers=True)
    for label, tensor in named:
        _check(op, label, tensor)
    if world_size() == 1:
        return
    agree(op, {label: _layout(tensor) for label, tensor in named})
    tensors = [tensor for _, tensor in named]
    received = _flat_collective(op, tensors, "broadcast")
    if rank() != 0:
        with torch.no_grad():
            for tensor, value in zip(tensors, received, strict=True):
                tensor.copy_(value)
