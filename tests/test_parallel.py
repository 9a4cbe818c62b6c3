"""run_in_parallel: two memories on two threads give the numbers of running them one after the other, bit for bit."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
import torch

import rlstruct.learning.actor_critic as actor_critic_module
from rlstruct import DictTensor, TemporalDictTensor
from rlstruct.learning.actor_critic import ActorCritic, run_memory
from rlstruct.learning.parallel import run_in_parallel

B, T, D, H = 6, 12, 3, 8


def memories(cell: type[torch.nn.Module]) -> tuple[Any, Any, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    a, b = cell(D, H, batch_first=True), cell(D, H, batch_first=True)
    starts = torch.zeros(B, T, dtype=torch.bool)
    starts[0, 0] = starts[1, 5] = starts[2, 3] = starts[2, 9] = starts[4, 11] = True  # pieces inside rows
    states = [torch.randn(B, H) for _ in range(2 if cell is torch.nn.LSTM else 1)]
    return a, b, starts, states  # type: ignore[return-value]


def both(a: Any, b: Any, states: Any, starts: torch.Tensor) -> list[Callable[[torch.Tensor], torch.Tensor]]:
    return [lambda x: run_memory(a, x, states, starts), lambda x: run_memory(b, x, states, starts)]


def loss(out_a: torch.Tensor, out_b: torch.Tensor) -> torch.Tensor:
    return (out_a.tanh() * torch.arange(H)).sum() + (out_b**2).mean()


def grads(*modules: torch.nn.Module) -> list[torch.Tensor | None]:
    return [p.grad for m in modules for p in m.parameters()]


def assert_same(first: list[torch.Tensor | None], second: list[torch.Tensor | None]) -> None:
    assert len(first) == len(second)
    for one, other in zip(first, second, strict=True):
        assert (one is None) == (other is None)
        if one is not None:
            assert torch.equal(one, other)


@pytest.mark.parametrize("cell", [torch.nn.GRU, torch.nn.LSTM], ids=["gru", "lstm"])
def test_outputs_and_gradients_are_those_of_the_calls_one_after_the_other(cell: Any) -> None:
    a, b, starts, states = memories(cell)
    x = torch.randn(B, T, D)
    calls = both(a, b, states, starts)

    sequential = [call(x) for call in calls]
    loss(*sequential).backward()
    expected = [p.grad.clone() for m in (a, b) for p in m.parameters()]
    for m in (a, b):
        m.zero_grad(set_to_none=True)

    parallel = run_in_parallel(calls, x, [list(a.parameters()), list(b.parameters())])
    for one, other in zip(sequential, parallel, strict=True):
        assert torch.equal(one, other)
        assert other.grad_fn is not None
    loss(*parallel).backward()
    assert_same(expected, grads(a, b))  # type: ignore[arg-type]


def test_an_input_that_needs_a_gradient_gets_the_sum_of_both() -> None:
    a, b, starts, states = memories(torch.nn.GRU)
    encoder = torch.nn.Linear(5, D)
    raw = torch.randn(B, T, 5)
    calls = both(a, b, states, starts)

    x = encoder(raw)
    loss(*[call(x) for call in calls]).backward()
    expected = grads(encoder, a, b)
    for m in (encoder, a, b):
        m.zero_grad(set_to_none=True)

    x = encoder(raw)
    loss(*run_in_parallel(calls, x, [list(a.parameters()), list(b.parameters())])).backward()
    assert_same(expected, grads(encoder, a, b))


def test_an_output_left_out_of_the_loss_gives_its_memory_no_gradient() -> None:
    a, b, starts, states = memories(torch.nn.GRU)
    x = torch.randn(B, T, D)
    out_a, _ = run_in_parallel(both(a, b, states, starts), x, [list(a.parameters()), list(b.parameters())])
    out_a.sum().backward()
    assert all(p.grad is not None for p in a.parameters())
    assert all(p.grad is None for p in b.parameters())


def test_without_gradients_the_outputs_are_the_same_and_have_no_graph() -> None:
    a, b, starts, states = memories(torch.nn.GRU)
    x = torch.randn(B, T, D)
    calls = both(a, b, states, starts)
    with torch.no_grad():
        sequential = [call(x) for call in calls]
        parallel = run_in_parallel(calls, x, [list(a.parameters()), list(b.parameters())])
    for one, other in zip(sequential, parallel, strict=True):
        assert torch.equal(one, other)
        assert other.grad_fn is None


def test_a_second_backward_is_refused_with_a_clear_error() -> None:
    a, b, starts, states = memories(torch.nn.GRU)
    x = torch.randn(B, T, D)
    outs = run_in_parallel(both(a, b, states, starts), x, [list(a.parameters()), list(b.parameters())])
    total = loss(*outs)
    total.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match=re.escape("can be differentiated once only")):
        total.backward()


@pytest.mark.parametrize("failing", [0, 1], ids=["on-the-caller's-thread", "on-the-other-thread"])
def test_an_error_in_a_call_is_raised_to_the_caller(failing: int) -> None:
    a, b, starts, states = memories(torch.nn.GRU)

    def broken(x: torch.Tensor) -> torch.Tensor:
        raise ValueError("broken memory")

    calls = both(a, b, states, starts)
    calls[failing] = broken
    with pytest.raises(ValueError, match="broken memory"):
        run_in_parallel(calls, torch.randn(B, T, D), [list(a.parameters()), list(b.parameters())])


def test_the_operator_threads_setting_is_left_as_it_was() -> None:
    a, b, starts, states = memories(torch.nn.GRU)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        outs = run_in_parallel(
            both(a, b, states, starts), torch.randn(B, T, D), [list(a.parameters()), list(b.parameters())]
        )
        loss(*outs).backward()
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_calls_and_parameters_of_different_lengths_are_refused() -> None:
    with pytest.raises(ValueError, match=re.escape("must have the same length, got 2 and 1")):
        run_in_parallel([torch.tanh, torch.sin], torch.zeros(2), [[]])


@pytest.mark.parametrize("memory", ["gru", "lstm"])
def test_an_actor_critic_replay_gives_the_gradients_of_memories_run_one_after_the_other(
    memory: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    torch.manual_seed(1)
    agent = ActorCritic(obs_dim=D, n_actions=2, hidden=(H, H), recurrent=True, memory=memory)
    starts = torch.rand(B, T) < 0.1
    observation = TemporalDictTensor(
        {"observation": torch.randn(B, T, D), "initial_state": starts}, torch.full((B,), T)
    )
    keys = list(agent.initial_state(None, B))  # type: ignore[arg-type]
    state = DictTensor({key: torch.randn(B, H) for key in keys})  # a memory carried in from a batch before

    def replay() -> list[torch.Tensor | None]:
        agent.zero_grad(set_to_none=True)
        out = agent.forward_sequence(state, observation, None)  # type: ignore[arg-type]
        assert out is not None
        (out["logits"].log_softmax(-1)[..., 0].sum() + out["value"].pow(2).sum()).backward()
        return [None if p.grad is None else p.grad.clone() for p in agent.parameters()]

    parallel = replay()
    monkeypatch.setattr(actor_critic_module, "run_in_parallel", lambda calls, x, _: [c(x) for c in calls])
    assert_same(replay(), parallel)


def test_under_anomaly_detection_a_parameter_left_out_is_refused() -> None:
    a, b, starts, states = memories(torch.nn.GRU)
    x = torch.randn(B, T, D)
    listed = [list(a.parameters()), list(b.parameters())[:-1]]  # b's last bias left out
    run_in_parallel(both(a, b, states, starts), x, listed)  # not checked: it costs a walk of the graphs
    with torch.autograd.set_detect_anomaly(True):
        with pytest.raises(
            ValueError, match=re.escape("call 1 uses a tensor that needs a gradient (shape (24,))")
        ):
            run_in_parallel(both(a, b, states, starts), x, listed)
        run_in_parallel(both(a, b, states, starts), x, [list(a.parameters()), list(b.parameters())])


def test_misuse_of_run_in_parallel_is_a_type_error_naming_it() -> None:
    a, b = torch.nn.GRU(3, 4, batch_first=True), torch.nn.GRU(3, 4, batch_first=True)
    x = torch.randn(2, 5, 3)
    groups = [list(a.parameters()), list(b.parameters())]
    with pytest.raises(
        TypeError, match=re.escape("run_in_parallel: call 0 must return one tensor, got a tuple")
    ):
        run_in_parallel([a, b], x, groups)  # a GRU returns (output, state)
    with pytest.raises(TypeError, match=re.escape("run_in_parallel: x must be a torch.Tensor, got list")):
        run_in_parallel([lambda x: a(x)[0], lambda x: b(x)[0]], [x], groups)  # type: ignore[arg-type]
    flat = [*a.parameters(), *b.parameters()][:2]  # one flat list, not one list per call
    with pytest.raises(TypeError, match=re.escape("parameters[0] is a Parameter")):
        run_in_parallel([lambda x: a(x)[0], lambda x: b(x)[0]], x, flat)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("change", "error", "message"),
    [
        (
            {"starts": torch.zeros(2, 5, dtype=torch.int64)},
            TypeError,
            "starts must be a bool tensor [B, T], got dtype torch.int64",
        ),
        (
            {"starts": torch.zeros(2, dtype=torch.bool)},
            ValueError,
            "starts must be [B, T] = [2, 5] as x, got [2]",
        ),
        ({"state": torch.zeros(2, 4)}, TypeError, "state must be a list of 1 tensor(s) ([h] for a GRU"),
        ({"state": [torch.zeros(2, 4)] * 2}, ValueError, "state must hold 1 tensor(s) for a GRU, got 2"),
        ({"state": [torch.zeros(3, 4)]}, ValueError, "each state must be [B, H] = [2, 4], got [3, 4]"),
        ({"x": torch.zeros(2, 3)}, ValueError, "x must be a tensor [B, T, d], got shape (2, 3)"),
    ],
)
def test_run_memory_refuses_inputs_it_would_misread(
    change: dict[str, Any], error: type, message: str
) -> None:
    gru = torch.nn.GRU(3, 4, batch_first=True)
    inputs: dict[str, Any] = {
        "x": torch.randn(2, 5, 3),
        "state": [torch.zeros(2, 4)],
        "starts": torch.zeros(2, 5, dtype=torch.bool),
    }
    with pytest.raises(error, match=re.escape(f"run_memory: {message}")):
        run_memory(gru, **(inputs | change))
