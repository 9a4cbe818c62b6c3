"""Independent modules run side by side on CPU threads, forward and backward, with the same numbers.

An actor-critic with memory has two recurrent cells, one for the policy and
one for the value, that share no parameter and read the same observations.
torch runs a CPU ``GRU`` (or ``LSTM``) over a sequence inside one operator
call, which releases the interpreter lock, and its backward inside the
autograd engine: so two cells can run at the same time on two cores, where
one after the other they leave a core idle (a learner's workers wait while it
learns). ``run_in_parallel`` does that for forward and backward:

- forward: each call runs on its own thread with gradients enabled (grad mode
  is per thread), building its own autograd graph;
- backward: each graph is differentiated on its own thread
  (``torch.autograd.grad``), and the gradients are handed to the caller's
  graph whole.

The operations, and the order in which each gradient is summed, are those of
running the calls one after the other, so the results are bit for bit the
same (``tests/test_parallel.py`` checks it); only the wall time
changes. Where that cannot be promised, the calls simply run one after the
other: on other devices, under autocast, or when no input needs a gradient
only the forward is threaded.

Examples:
    >>> import torch
    >>> from rlstruct.learning.parallel import run_in_parallel
    >>> a, b = torch.nn.GRU(3, 4, batch_first=True), torch.nn.GRU(3, 4, batch_first=True)
    >>> x = torch.randn(2, 5, 3)
    >>> calls = [lambda x: a(x)[0], lambda x: b(x)[0]]
    >>> out_a, out_b = run_in_parallel(calls, x, [list(a.parameters()), list(b.parameters())])
    >>> torch.equal(out_a, a(x)[0]) and torch.equal(out_b, b(x)[0])
    True
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.autograd.function import once_differentiable

__all__ = ["run_in_parallel"]

Call = Callable[[torch.Tensor], torch.Tensor]


def run_in_parallel(
    calls: Sequence[Call], x: torch.Tensor, parameters: Sequence[Sequence[torch.nn.Parameter]]
) -> list[torch.Tensor]:
    """``[call(x) for call in calls]``, each call on its own CPU thread, forward and backward.

    Args:
        calls: functions of ``x`` alone (their other inputs bound), each
            returning one tensor; they must share no parameter and change no
            state outside their result (no in-place updates of buffers).
        x: the input they share, on any device; it may need a gradient
            (an encoder's output): the gradients the calls send it are summed.
        parameters: for each call, the parameters it uses; those that need
            a gradient get theirs as from running the calls one after the
            other. One left out gets no gradient: under
            ``torch.autograd.set_detect_anomaly(True)`` the graphs are walked
            and such a parameter is refused (a ValueError), which costs
            about 0.5 ms per GRU graph of 32 steps, too much to do always.

    Returns:
        The calls' outputs, in order, as they would be without threads (same
        values, dtypes and devices); with gradients where gradients are
        enabled. Backward through them runs once (no ``retain_graph``, no
        second-order gradients).

    With two calls the input's gradient is the sum the autograd engine makes
    of the two; with more, the calls' parts are summed in their order, which
    may round differently from the engine's order.

    Raises:
        TypeError: if ``x`` is not a tensor, an entry of ``parameters`` is
            not a list of parameters, or a call returns anything but one
            tensor.
        ValueError: if ``calls`` and ``parameters`` differ in length; under
            anomaly detection, if a call uses a parameter that needs a
            gradient and is not in its ``parameters``.
        Exception: whatever a call raises, raised again on the caller's thread.
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"run_in_parallel: x must be a torch.Tensor, got {type(x).__name__}")
    if len(calls) != len(parameters):
        raise ValueError(
            f"run_in_parallel: calls and parameters must have the same length, got {len(calls)} and {len(parameters)}"
        )
    for i, group in enumerate(parameters):
        if isinstance(group, torch.Tensor) or not isinstance(group, Sequence):
            raise TypeError(
                f"run_in_parallel: parameters must hold one list of parameters per call; parameters[{i}] "
                f"is a {type(group).__name__}"
            )
    if len(calls) < 2 or x.device.type != "cpu" or torch.is_autocast_enabled("cpu"):
        return [_one_tensor(i, call(x)) for i, call in enumerate(calls)]
    trained = [[p for p in group if p.requires_grad] for group in parameters]
    grad = torch.is_grad_enabled()
    if not grad or not (x.requires_grad or any(trained)):
        inference = torch.is_inference_mode_enabled()

        def plain(i: int, call: Call) -> Callable[[], torch.Tensor]:
            def run() -> torch.Tensor:  # the caller's modes, which are per thread
                with torch.inference_mode(inference), torch.set_grad_enabled(grad):
                    return _one_tensor(i, call(x))

            return run

        return _on_threads([plain(i, call) for i, call in enumerate(calls)])
    sizes = [len(group) for group in trained]
    flat = [p for group in trained for p in group]
    return list(_Parallel.apply(calls, sizes, x, *flat))


class _Parallel(torch.autograd.Function):
    """The calls' graphs built and differentiated on threads; the caller's graph sees one node."""

    @staticmethod
    def forward(
        ctx: Any, calls: Sequence[Call], sizes: Sequence[int], x: torch.Tensor, *flat: torch.Tensor
    ) -> Any:
        inner_x = x.detach().requires_grad_(x.requires_grad)

        def graph(i: int, call: Call) -> Callable[[], torch.Tensor]:
            def run() -> torch.Tensor:
                with torch.enable_grad():
                    return _one_tensor(i, call(inner_x))

            return run

        outputs = _on_threads([graph(i, call) for i, call in enumerate(calls)])
        groups, start = [], 0
        for size in sizes:
            groups.append(list(flat[start : start + size]))
            start += size
        if torch.is_anomaly_enabled():
            for i, (out, group) in enumerate(zip(outputs, groups, strict=True)):
                _check_leaves(i, out, [inner_x, *group])
        ctx.inner = (inner_x, outputs, groups)
        ctx.set_materialize_grads(False)
        return tuple(out.detach() for out in outputs)

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, *grads: torch.Tensor | None) -> Any:
        if ctx.inner is None:
            raise RuntimeError(
                "run_in_parallel: its outputs can be differentiated once only (retain_graph is not supported)"
            )
        inner_x, outputs, groups = ctx.inner
        ctx.inner = None  # the graphs are freed as they are differentiated

        def differentiate(out: torch.Tensor, grad: torch.Tensor | None, group: list[torch.Tensor]) -> Any:
            def run() -> list[torch.Tensor | None]:
                wrt = ([inner_x] if inner_x.requires_grad else []) + group
                if grad is None or not out.requires_grad or not wrt:
                    return [None] * len(wrt)
                return list(torch.autograd.grad(out, wrt, grad, allow_unused=True))

            return run

        results = _on_threads(
            [differentiate(out, g, group) for out, g, group in zip(outputs, grads, groups, strict=True)]
        )
        grad_x = None
        grad_flat: list[torch.Tensor | None] = []
        for result in results:
            if inner_x.requires_grad:
                part, result = result[0], result[1:]
                if part is not None:
                    grad_x = part if grad_x is None else grad_x + part
            grad_flat.extend(result)
        return (None, None, grad_x, *grad_flat)


def _one_tensor(i: int, out: object) -> torch.Tensor:
    """``out``, checked to be the one tensor call ``i`` must return."""
    if not isinstance(out, torch.Tensor):
        raise TypeError(
            f"run_in_parallel: call {i} must return one tensor, got a {type(out).__name__} "
            "(a GRU returns (output, state): return its output alone)"
        )
    return out


def _check_leaves(i: int, out: torch.Tensor, listed: list[torch.Tensor]) -> None:
    """Raise if ``out``'s graph reaches a tensor that needs a gradient and is not in ``listed``."""
    known = {id(t) for t in listed}
    seen: set[Any] = set()
    stack = [out.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        leaf = getattr(node, "variable", None)  # an AccumulateGrad node: a leaf that needs a gradient
        if leaf is not None and id(leaf) not in known:
            raise ValueError(
                f"run_in_parallel: call {i} uses a tensor that needs a gradient (shape {tuple(leaf.shape)}) "
                f"and is not in parameters[{i}]; it would get no gradient: list every parameter the call uses"
            )
        stack.extend(next_node for next_node, _ in node.next_functions)


def _on_threads(jobs: Sequence[Callable[[], Any]]) -> list[Any]:
    """Run ``jobs``: the first on this thread, the others each on a new one; their results, or the first error.

    The threads compute and end: ``join`` waits for work, never for another
    process, so it needs no timeout.
    """
    results: list[Any] = [None] * len(jobs)
    errors: list[BaseException | None] = [None] * len(jobs)

    def work(i: int) -> None:
        try:
            results[i] = jobs[i]()
        except BaseException as error:  # re-raised on the caller's thread below
            errors[i] = error

    n_threads = torch.get_num_threads()

    def work_apart(i: int) -> None:
        # a new thread starts with the library's default operator threads (OpenMP's are per thread), not
        # the caller's setting: without this each job would run on every core, and they would compete
        torch.set_num_threads(n_threads)
        work(i)

    threads = [threading.Thread(target=work_apart, args=(i,), daemon=True) for i in range(1, len(jobs))]
    for thread in threads:
        thread.start()
    work(0)
    for thread in threads:
        thread.join()
    for error in errors:
        if error is not None:
            raise error
    return results
