"""Tests of rlstruct.returns: hand-computed cases, slow forward-view references, identities and errors.

The references below are written from the forward (sum over future steps)
definitions in plain Python floats, one row and one step at a time, while the
library solves the backward recursions with a parallel scan: the two share no
code and no formulation.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import rlstruct
from rlstruct import LocalBatcher, discounted_returns, gae, td_lambda, vtrace
from rlstruct.testing import CounterEnv, CountingAgent

NAN = math.nan
Floats = list[float]
Flags = list[bool]
F, T_ = False, True


def message(text: str) -> str:
    return re.escape(text)


def flags(*rows: list[bool]) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.bool)


def floats(*rows: list[float], dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.tensor(rows, dtype=dtype)


def assert_close(got: torch.Tensor, expected: torch.Tensor) -> None:
    assert got.dtype == expected.dtype and got.shape == expected.shape
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def named(batch: dict[str, torch.Tensor], *keys: str) -> dict[str, torch.Tensor]:
    """``keys`` and the flags of ``batch`` as keyword arguments: the keys are the argument names."""
    return {k: batch[k] for k in (*keys, "terminated", "done", "mask")}


# ---------------------------------------------------------------------------- hand-computed cases
#
# Row 0: one row holding a terminated episode (steps 0-1), a truncated one (steps 2-3)
# and the start of a third, cut by the end of the row (step 4).
# Row 1: length 3, padded with NaN that must not reach the valid steps.

GAMMA, LAM = 0.5, 0.5


@pytest.fixture
def hand() -> dict[str, torch.Tensor]:
    return {
        "reward": floats([1, 2, 3, 4, 5], [1, 1, 1, NAN, NAN]),
        "value": floats([1, 1, 1, 1, 1], [1, 1, 1, NAN, NAN]),
        "next_value": floats([10, 20, 30, 40, 50], [2, 4, 8, NAN, NAN]),
        "terminated": flags([F, T_, F, F, F], [F, F, F, F, F]),
        "done": flags([F, T_, F, T_, F], [F, F, F, T_, F]),
        "mask": flags([T_] * 5, [T_, T_, T_, F, F]),
    }


def test_discounted_returns_by_hand(hand: dict[str, torch.Tensor]) -> None:
    h = hand
    got = discounted_returns(
        h["reward"],
        terminated=h["terminated"],
        done=h["done"],
        gamma=GAMMA,
        next_value=h["next_value"],
        mask=h["mask"],
    )
    # row 0: G4 = 5 + .5 * 50 (row end); G3 = 4 + .5 * 40 (truncated); G2 = 3 + .5 * G3;
    # G1 = 2 (terminated); G0 = 1 + .5 * G1.  Row 1: G2 = 1 + .5 * 8 (row end), then back.
    assert_close(got, floats([2, 2, 15, 24, 30], [2.75, 3.5, 5, 0, 0]))
    without_bootstrap = discounted_returns(
        h["reward"], terminated=h["terminated"], done=h["done"], gamma=GAMMA, mask=h["mask"]
    )
    assert_close(without_bootstrap, floats([2, 2, 5, 4, 5], [1.75, 1.5, 1, 0, 0]))


def test_td_lambda_by_hand(hand: dict[str, torch.Tensor]) -> None:
    h = hand
    got = td_lambda(h["reward"], **named(h, "next_value"), gamma=GAMMA, lam=LAM)
    # row 0: G4 = 30, G3 = 24 as above; G2 = 3 + .5 * (.5 * 30 + .5 * 24) = 16.5; G1 = 2;
    # G0 = 1 + .5 * (.5 * 10 + .5 * 2) = 4.  Row 1: G2 = 5; G1 = 1 + .5 * (.5 * 4 + .5 * 5) = 3.25;
    # G0 = 1 + .5 * (.5 * 2 + .5 * 3.25) = 2.3125.
    assert_close(got, floats([4, 2, 16.5, 24, 30], [2.3125, 3.25, 5, 0, 0]))


def test_gae_by_hand(hand: dict[str, torch.Tensor]) -> None:
    h = hand
    got = gae(h["reward"], **named(h, "value", "next_value"), gamma=GAMMA, lam=LAM)
    # row 0: deltas 1 + 5 - 1 = 5, 2 - 1 = 1 (terminated), 3 + 15 - 1 = 17, 4 + 20 - 1 = 23, 5 + 25 - 1 = 29;
    # A4 = 29, A3 = 23 (done), A2 = 17 + .25 * 23, A1 = 1 (terminated), A0 = 5 + .25 * 1.
    # row 1: deltas 1, 2, 4; A2 = 4, A1 = 2 + .25 * 4 = 3, A0 = 1 + .25 * 3 = 1.75.
    assert_close(got, floats([5.25, 1, 22.75, 23, 29], [1.75, 3, 4, 0, 0]))


def test_vtrace_by_hand() -> None:
    reward = floats([1, 1, 1], [1, 1, 1])
    value = floats([1, 2, 3], [1, 1, 1])
    next_value = floats([2, 3, 8], [5, 1, 2])
    terminated = flags([F, F, F], [T_, F, F])
    log_rho = torch.log(floats([2, 0.5, 0.25], [1, 1, 1]))
    vs, adv = vtrace(
        reward,
        log_rho=log_rho,
        value=value,
        next_value=next_value,
        terminated=terminated,
        done=terminated,
        gamma=0.5,
    )
    # row 0: rho = c = [1, .5, .25]; deltas 1 + 1 - 1 = 1, 1 + 1.5 - 2 = .5, 1 + 4 - 3 = 2;
    # vs2 = 3 + .25 * 2 = 3.5; vs1 = 2 + .5 * .5 + .5 * .5 * (3.5 - 3) = 2.375;
    # vs0 = 1 + 1 + .5 * 1 * (2.375 - 2) = 2.1875.
    # adv0 = 1 * (1 + .5 * 2.375 - 1), adv1 = .5 * (1 + .5 * 3.5 - 2), adv2 = .25 * (1 + .5 * 8 - 3).
    # row 1 (on-policy, terminated at step 0): deltas 0, .5, 1; vs2 = 2, vs1 = 1 + .5 + .5 * (2 - 1) = 2,
    # vs0 = 1 + 0 (the trace stops); adv0 = 1 + 0 - 1, adv1 = 1 + .5 * 2 - 1, adv2 = 1 + .5 * 2 - 1.
    assert_close(vs, floats([2.1875, 2.375, 3.5], [1, 2, 2]))
    assert_close(adv, floats([1.1875, 0.375, 0.5], [0, 1, 1]))


def test_terminated_without_done_still_ends_the_episode() -> None:
    reward, next_value = floats([1, 1]), floats([7, 7])
    terminated, done = flags([T_, F]), flags([F, F])
    got = discounted_returns(reward, terminated=terminated, done=done, gamma=1.0, next_value=next_value)
    assert_close(got, floats([1, 8]))


def test_garbage_in_padding_stays_there() -> None:
    mask = flags([T_, F, T_])  # a mask with a hole: the step before it is a row end
    reward = floats([1, NAN, 1])
    value = floats([0, math.inf, 0])
    next_value = floats([3, NAN, 5])
    no = flags([F, F, F])
    ends = {"terminated": no, "done": no, "mask": mask}
    assert_close(discounted_returns(reward, **ends, gamma=1.0, next_value=next_value), floats([4, 0, 6]))
    assert_close(td_lambda(reward, next_value=next_value, **ends, gamma=1.0, lam=0.5), floats([4, 0, 6]))
    assert_close(
        gae(reward, value=value, next_value=next_value, **ends, gamma=1.0, lam=0.5), floats([4, 0, 6])
    )
    vs, adv = vtrace(reward, log_rho=torch.zeros(1, 3), value=value, next_value=next_value, **ends, gamma=1.0)
    assert_close(vs, floats([4, 0, 6]))
    assert_close(adv, floats([4, 0, 6]))


def test_values_never_read_do_not_reach_the_targets() -> None:
    # lam=1 reads next_value only where the trace stops (the row end), as discounted_returns does
    reward, next_value, no = floats([1, 1, 1]), floats([NAN, math.inf, 5]), flags([F, F, F])
    ends = {"terminated": no, "done": no}
    expected = discounted_returns(reward, **ends, gamma=0.5, next_value=next_value)
    assert_close(expected, floats([2.375, 2.75, 3.5]))
    assert_close(td_lambda(reward, next_value=next_value, **ends, gamma=0.5, lam=1.0), expected)
    # gamma=0 reads no value at all
    assert_close(td_lambda(reward, next_value=next_value, **ends, gamma=0.0, lam=0.5), reward)


# ---------------------------------------------------------------------------- slow references


def _segment_end(done: Flags, term: Flags, valid: Flags, t: int) -> int:
    """The last step of the trace that starts at t: the first done/terminated step or row end."""
    k = t
    while not (done[k] or term[k] or k + 1 == len(valid) or not valid[k + 1]):
        k += 1
    return k


def _bootstrap(next_value: Floats | None, term: Flags, k: int) -> float:
    return 0.0 if next_value is None or term[k] else next_value[k]


def ref_discounted(
    r: Floats, nv: Floats | None, term: Flags, done: Flags, valid: Flags, gamma: float
) -> Floats:
    out = [0.0] * len(r)
    for t in range(len(r)):
        if valid[t]:
            end = _segment_end(done, term, valid, t)
            out[t] = sum(gamma ** (k - t) * r[k] for k in range(t, end + 1))
            out[t] += gamma ** (end - t + 1) * _bootstrap(nv, term, end)
    return out


def ref_td_lambda(
    r: Floats, nv: Floats, term: Flags, done: Flags, valid: Flags, gamma: float, lam: float
) -> Floats:
    """The forward view: a (1 - lam) lam^(n-1) weighted mix of n-step returns, the longest taking the rest."""
    out = [0.0] * len(r)
    for t in range(len(r)):
        if not valid[t]:
            continue
        end = _segment_end(done, term, valid, t)
        n_max = end - t + 1

        def n_step(n: int, t: int = t) -> float:
            k = t + n - 1
            return sum(gamma ** (i - t) * r[i] for i in range(t, k + 1)) + gamma**n * _bootstrap(nv, term, k)

        mixed = sum((1 - lam) * lam ** (n - 1) * n_step(n) for n in range(1, n_max))
        out[t] = mixed + lam ** (n_max - 1) * n_step(n_max)
    return out


def ref_gae(
    r: Floats, v: Floats, nv: Floats, term: Flags, done: Flags, valid: Flags, gamma: float, lam: float
) -> Floats:
    delta = [r[t] + gamma * _bootstrap(nv, term, t) - v[t] for t in range(len(r))]
    out = [0.0] * len(r)
    for t in range(len(r)):
        if valid[t]:
            end = _segment_end(done, term, valid, t)
            out[t] = sum((gamma * lam) ** (k - t) * delta[k] for k in range(t, end + 1))
    return out


def ref_vtrace(
    log_rho: Floats,
    r: Floats,
    v: Floats,
    nv: Floats,
    term: Flags,
    done: Flags,
    valid: Flags,
    gamma: float,
    rho_bar: float,
    c_bar: float,
    lam: float,
) -> tuple[Floats, Floats]:
    """Espeholt et al. 2018, eq. 1 written as a sum, and the policy-gradient advantage of section 4.2."""
    ratio = [math.exp(x) for x in log_rho]
    rho = [min(rho_bar, x) for x in ratio]
    c = [lam * min(c_bar, x) for x in ratio]
    delta = [rho[t] * (r[t] + gamma * _bootstrap(nv, term, t) - v[t]) for t in range(len(r))]
    vs = [0.0] * len(r)
    adv = [0.0] * len(r)
    for t in range(len(r)):
        if valid[t]:
            end = _segment_end(done, term, valid, t)
            vs[t] = v[t] + sum(gamma ** (k - t) * math.prod(c[t:k]) * delta[k] for k in range(t, end + 1))
    for t in range(len(r)):
        if valid[t]:
            end = _segment_end(done, term, valid, t)
            next_vs = vs[t + 1] if t < end else nv[t]
            adv[t] = rho[t] * (r[t] + gamma * (0.0 if term[t] else next_vs) - v[t])
    return vs, adv


def random_batch(
    seed: int, rows: int, steps: int, dtype: torch.dtype = torch.float64
) -> dict[str, torch.Tensor]:
    """Random inputs with terminations, truncations, random lengths and NaN padding.

    ``next_value[:, t]`` equals ``value[:, t + 1]`` wherever step t continues its episode.
    """
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, steps + 1, (rows,), generator=gen)
    mask = torch.arange(steps) < lengths[:, None]
    terminated = torch.rand(rows, steps, generator=gen) < 0.15
    done = terminated | (torch.rand(rows, steps, generator=gen) < 0.15)
    value = torch.randn(rows, steps, generator=gen, dtype=torch.float64)
    next_value = torch.randn(rows, steps, generator=gen, dtype=torch.float64)
    continues = ~done[:, :-1] & mask[:, 1:]
    next_value[:, :-1] = torch.where(continues, value[:, 1:], next_value[:, :-1])
    batch = {
        "log_rho": torch.randn(rows, steps, generator=gen, dtype=torch.float64) * 0.7,
        "reward": torch.randn(rows, steps, generator=gen, dtype=torch.float64),
        "value": value,
        "next_value": next_value,
    }
    batch = {k: v.masked_fill(~mask, NAN).to(dtype) for k, v in batch.items()}
    return {**batch, "terminated": terminated, "done": done, "mask": mask}


def per_row(
    batch: dict[str, torch.Tensor], fn: Callable[..., Any], *keys: str, **scalars: float
) -> list[Any]:
    columns = [batch[k].tolist() for k in keys]
    return [fn(*row, **scalars) for row in zip(*columns, strict=True)]


sizes = {"seed": st.integers(0, 2**31), "rows": st.integers(1, 4), "steps": st.integers(1, 12)}
unit = st.floats(0.0, 1.0)


@settings(max_examples=60, deadline=None)
@given(**sizes, gamma=unit, with_next_value=st.booleans())
def test_discounted_returns_match_the_reference(
    seed: int, rows: int, steps: int, gamma: float, with_next_value: bool
) -> None:
    b = random_batch(seed, rows, steps)
    nv = b["next_value"] if with_next_value else None
    got = discounted_returns(
        b["reward"], terminated=b["terminated"], done=b["done"], gamma=gamma, next_value=nv, mask=b["mask"]
    )
    keys = ["reward", "next_value"] if with_next_value else ["reward"]
    columns = [b[k].tolist() for k in [*keys, "terminated", "done", "mask"]]
    expected = [
        ref_discounted(c[0], c[1], *c[2:], gamma=gamma)
        if with_next_value
        else ref_discounted(c[0], None, *c[1:], gamma=gamma)
        for c in zip(*columns, strict=True)
    ]
    assert_close(got, torch.tensor(expected, dtype=torch.float64))


@settings(max_examples=60, deadline=None)
@given(**sizes, gamma=unit, lam=unit)
def test_td_lambda_and_gae_match_the_reference(
    seed: int, rows: int, steps: int, gamma: float, lam: float
) -> None:
    b = random_batch(seed, rows, steps)
    flag_keys = ("terminated", "done", "mask")
    got = td_lambda(b["reward"], **named(b, "next_value"), gamma=gamma, lam=lam)
    expected = per_row(b, ref_td_lambda, "reward", "next_value", *flag_keys, gamma=gamma, lam=lam)
    assert_close(got, torch.tensor(expected, dtype=torch.float64))
    got = gae(b["reward"], **named(b, "value", "next_value"), gamma=gamma, lam=lam)
    expected = per_row(b, ref_gae, "reward", "value", "next_value", *flag_keys, gamma=gamma, lam=lam)
    assert_close(got, torch.tensor(expected, dtype=torch.float64))


@settings(max_examples=60, deadline=None)
@given(
    **sizes,
    gamma=unit,
    lam=unit,
    rho_bar=st.sampled_from([0.5, 1.0, 2.0, math.inf]),
    c_bar=st.sampled_from([0.5, 1.0, 1.5]),
)
def test_vtrace_matches_the_reference(
    seed: int, rows: int, steps: int, gamma: float, lam: float, rho_bar: float, c_bar: float
) -> None:
    b = random_batch(seed, rows, steps)
    vs, adv = vtrace(
        b["reward"],
        **named(b, "log_rho", "value", "next_value"),
        gamma=gamma,
        rho_bar=rho_bar,
        c_bar=c_bar,
        lam=lam,
    )
    keys = ("log_rho", "reward", "value", "next_value", "terminated", "done", "mask")
    expected = per_row(b, ref_vtrace, *keys, gamma=gamma, rho_bar=rho_bar, c_bar=c_bar, lam=lam)
    assert_close(vs, torch.tensor([e[0] for e in expected], dtype=torch.float64))
    assert_close(adv, torch.tensor([e[1] for e in expected], dtype=torch.float64))


# ---------------------------------------------------------------------------- identities


@settings(max_examples=40, deadline=None)
@given(**sizes, gamma=unit, lam=unit)
def test_identities(seed: int, rows: int, steps: int, gamma: float, lam: float) -> None:
    b = random_batch(seed, rows, steps)
    r, v, nv, term, done, mask = (
        b[k] for k in ("reward", "value", "next_value", "terminated", "done", "mask")
    )
    ends = named(b)
    lam_returns = td_lambda(r, next_value=nv, **ends, gamma=gamma, lam=lam)
    # gae is the lambda-return minus the value, for values consistent along episodes
    got = gae(r, value=v, next_value=nv, **ends, gamma=gamma, lam=lam)
    assert_close(got, (lam_returns - v).masked_fill(~mask, 0))
    # lam = 1: the discounted return bootstrapped from next_value
    assert_close(
        td_lambda(r, next_value=nv, **ends, gamma=gamma, lam=1.0),
        discounted_returns(r, next_value=nv, **ends, gamma=gamma),
    )
    # lam = 0: one-step TD targets
    one_step = (r + gamma * nv.masked_fill(term, 0)).masked_fill(~mask, 0)
    assert_close(td_lambda(r, next_value=nv, **ends, gamma=gamma, lam=0.0), one_step)
    # on-policy V-trace without clipping is TD(lam), and its advantage is the one-step error on vs
    zero = torch.zeros_like(r)
    vs, adv = vtrace(r, log_rho=zero, value=v, next_value=nv, **ends, gamma=gamma, lam=lam)
    assert_close(vs, lam_returns)
    next_vs = nv.clone()
    next_vs[:, :-1] = torch.where(~done[:, :-1] & mask[:, 1:], vs[:, 1:], nv[:, :-1])
    assert_close(adv, (r + gamma * next_vs.masked_fill(term, 0) - v).masked_fill(~mask, 0))


def test_exact_values_from_a_batcher_give_zero_advantages() -> None:
    """Batcher layout: with CounterEnv's reward 1 per step and value = steps left, every TD error is 0."""
    for truncate in (False, True):
        env_args = {"length": 3, "truncate": truncate}
        with LocalBatcher(
            CountingAgent, {}, CounterEnv, env_args, n_envs=2, n_timesteps=5, mode="fixed"
        ) as b:
            b.reset()
            b.execute()
            batch = b.get()
        assert batch is not None
        traj = batch.trajectories
        reward, term, done = traj["next/reward"], traj["next/terminated"], traj["next/done"]
        value = (3 - traj["t"]).float()
        next_value = (3 - traj["next/t"]).float()
        ends = {"terminated": term, "done": done, "mask": traj.mask()}
        got = gae(reward, value=value, next_value=next_value, **ends, gamma=1.0, lam=0.9)
        assert_close(got, torch.zeros(2, 5))
        # steps 0-2 form an episode of 3 steps; steps 3-4 start the next, bootstrapped at the row end
        expected = floats([3, 2, 1, 3, 2], [3, 2, 1, 3, 2])
        assert_close(td_lambda(reward, next_value=next_value, **ends, gamma=1.0, lam=0.9), expected)
        assert_close(discounted_returns(reward, next_value=next_value, **ends, gamma=1.0), expected)
        without = floats([3, 2, 1, 2, 1], [3, 2, 1, 2, 1])
        assert_close(discounted_returns(reward, **ends, gamma=1.0), without)


# ---------------------------------------------------------------------------- contract


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16])
def test_outputs_keep_the_input_dtype(dtype: torch.dtype) -> None:
    b = random_batch(3, 4, 6, dtype=dtype)
    r = b["reward"]
    outputs = [
        discounted_returns(r, **named(b, "next_value"), gamma=0.9),
        td_lambda(r, **named(b, "next_value"), gamma=0.9, lam=0.8),
        gae(r, **named(b, "value", "next_value"), gamma=0.9, lam=0.8),
        *vtrace(r, **named(b, "log_rho", "value", "next_value"), gamma=0.9),
    ]
    for out in outputs:
        assert out.dtype == dtype and out.shape == (4, 6)
        assert bool(torch.isfinite(out).all())


def test_inputs_are_left_alone_and_no_gradient_flows() -> None:
    b = random_batch(5, 3, 7, dtype=torch.float32)
    b = {k: v.nan_to_num(0.0) if v.is_floating_point() else v for k, v in b.items()}
    value = b["value"].clone().requires_grad_()
    log_rho = b["log_rho"].clone().requires_grad_()
    before = {k: v.clone() for k, v in b.items()}
    r, ends = b["reward"], named(b, "next_value")
    outputs = [
        discounted_returns(r, **ends, gamma=0.9),
        td_lambda(r, **ends, gamma=0.9, lam=0.8),
        gae(r, value=value, **ends, gamma=0.9, lam=0.8),
        *vtrace(r, log_rho=log_rho, value=value, **ends, gamma=0.9),
    ]
    assert not any(out.requires_grad for out in outputs)
    for key, tensor in b.items():
        assert torch.equal(tensor, before[key]), key
    assert torch.equal(value.detach(), before["value"]) and torch.equal(log_rho.detach(), before["log_rho"])


@pytest.mark.parametrize("shape", [(0, 4), (3, 0), (2, 1)])
def test_edge_shapes(shape: tuple[int, int]) -> None:
    r = torch.ones(shape)
    no = torch.zeros(shape, dtype=torch.bool)
    expected = torch.full(shape, 1.5)  # one step: r + 0.5 * next_value
    assert_close(discounted_returns(r, terminated=no, done=no, gamma=0.5, next_value=r), expected)
    assert_close(td_lambda(r, next_value=r, terminated=no, done=no, gamma=0.5, lam=0.5), expected)
    assert_close(gae(r, value=r, next_value=r, terminated=no, done=no, gamma=0.5, lam=0.5), expected - 1)
    zero = torch.zeros(shape)
    vs, adv = vtrace(r, log_rho=zero, value=r, next_value=r, terminated=no, done=no, gamma=0.5)
    assert_close(vs, expected)
    assert_close(adv, expected - 1)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu() -> None:
    b = random_batch(11, 16, 33, dtype=torch.float32)
    cuda = {k: v.cuda() for k, v in b.items()}
    keys = ("log_rho", "value", "next_value")
    cpu_out = vtrace(b["reward"], **named(b, *keys), gamma=0.99)
    cuda_out = vtrace(cuda["reward"], **named(cuda, *keys), gamma=0.99)
    for got, expected in zip(cuda_out, cpu_out, strict=True):
        assert got.device.type == "cuda"
        torch.testing.assert_close(got.cpu(), expected)
    got = gae(cuda["reward"], **named(cuda, *keys[1:]), gamma=0.99, lam=0.95)
    expected = gae(b["reward"], **named(b, *keys[1:]), gamma=0.99, lam=0.95)
    torch.testing.assert_close(got.cpu(), expected)


def test_exported() -> None:
    from rlstruct import returns

    assert returns.gae is rlstruct.gae and returns.vtrace is rlstruct.vtrace
    assert {"discounted_returns", "td_lambda", "gae", "vtrace"} <= set(rlstruct.__all__)


# ---------------------------------------------------------------------------- errors

R = torch.zeros(2, 3)
V = torch.zeros(2, 3)
NO = torch.zeros(2, 3, dtype=torch.bool)
# valid arguments after the reward, one function each; a case overrides one of them
AFTER_REWARD: dict[str, dict[str, Any]] = {
    "discounted_returns": {"terminated": NO, "done": NO, "gamma": 0.9},
    "td_lambda": {"next_value": V, "terminated": NO, "done": NO, "gamma": 0.9, "lam": 0.9},
    "gae": {"value": V, "next_value": V, "terminated": NO, "done": NO, "gamma": 0.9, "lam": 0.9},
    "vtrace": {"log_rho": V, "value": V, "next_value": V, "terminated": NO, "done": NO, "gamma": 0.9},
}
FUNCTIONS: dict[str, Callable[..., Any]] = {
    "discounted_returns": discounted_returns,
    "td_lambda": td_lambda,
    "gae": gae,
    "vtrace": vtrace,
}


def calling(name: str, reward: Any = R, **changes: Any) -> Callable[[], object]:
    """A call of the function ``name`` with valid arguments but ``reward`` and ``changes``."""
    return lambda: FUNCTIONS[name](reward, **{**AFTER_REWARD[name], **changes})


@pytest.mark.parametrize(
    ("call", "error", "text"),
    [
        (calling("gae", [[0.0]]), TypeError, "gae: reward must be a tensor, got a list"),
        (
            calling("gae", R.long()),
            TypeError,
            "gae: reward must have a floating-point dtype, got torch.int64",
        ),
        (
            calling("gae", torch.zeros(3)),
            ValueError,
            "gae: reward must have shape [B, T], got shape (3,)",
        ),
        (
            calling("gae", value=torch.zeros(2, 4)),
            ValueError,
            "gae: value must have the shape of reward, (2, 3), got (2, 4)",
        ),
        (
            calling("gae", value=V.double()),
            TypeError,
            "gae: value must have the dtype of reward, torch.float32, got torch.float64",
        ),
        (
            calling("gae", next_value=torch.zeros(2, 3, device="meta")),
            ValueError,
            "gae: next_value must be on the device of reward, cpu, got meta",
        ),
        (
            calling("gae", terminated=NO.float()),
            TypeError,
            "gae: terminated must be a bool tensor, got dtype torch.float32",
        ),
        (
            calling("gae", mask=NO.long()),
            TypeError,
            "gae: mask must be a bool tensor, got dtype torch.int64",
        ),
        (calling("gae", gamma=1.5), ValueError, "gae: gamma must be in [0, 1], got 1.5"),
        (calling("gae", lam=-0.1), ValueError, "gae: lam must be in [0, 1], got -0.1"),
        (calling("gae", gamma=True), TypeError, "gae: gamma must be a number, got a bool"),
        (calling("td_lambda", lam=NAN), ValueError, "td_lambda: lam must be in [0, 1], got nan"),
        (calling("td_lambda", gamma="0.9"), TypeError, "td_lambda: gamma must be a number, got a str"),
        (
            calling("discounted_returns", done=NO[:, :2]),
            ValueError,
            "discounted_returns: done must have the shape of reward, (2, 3), got (2, 2)",
        ),
        (
            calling("discounted_returns", next_value=V.half()),
            TypeError,
            "discounted_returns: next_value must have the dtype of reward, torch.float32, got torch.float16",
        ),
        (
            calling("vtrace", log_rho=V.double()),
            TypeError,
            "vtrace: log_rho must have the dtype of reward, torch.float32, got torch.float64",
        ),
        (calling("vtrace", rho_bar=0.0), ValueError, "vtrace: rho_bar must be in (0, inf], got 0.0"),
        (calling("vtrace", c_bar=-1), ValueError, "vtrace: c_bar must be in (0, inf], got -1"),
        (calling("vtrace", lam=2.0), ValueError, "vtrace: lam must be in [0, 1], got 2.0"),
        # None is the default of discounted_returns' next_value and of mask only
        (
            calling("td_lambda", next_value=None),
            TypeError,
            "td_lambda: next_value must be a tensor, got a NoneType",
        ),
        (calling("gae", value=None), TypeError, "gae: value must be a tensor, got a NoneType"),
        (
            calling("vtrace", next_value=None),
            TypeError,
            "vtrace: next_value must be a tensor, got a NoneType",
        ),
        (
            calling("discounted_returns", terminated=None),
            TypeError,
            "discounted_returns: terminated must be a tensor, got a NoneType",
        ),
    ],
)
def test_bad_input_is_named(call: Callable[[], object], error: type[Exception], text: str) -> None:
    with pytest.raises(error, match=message(text)):
        call()


@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_only_the_reward_is_positional(name: str) -> None:
    """Every argument after the reward must be named, or Python raises a TypeError.

    ``terminated`` and ``done`` (or ``value`` and ``next_value``) swapped by position would
    pass every check of the function and give wrong targets.
    """
    fn, after = FUNCTIONS[name], AFTER_REWARD[name]
    fn(R, **after)  # the valid call
    first, *rest = after
    with pytest.raises(TypeError, match="positional argument"):
        fn(R, after[first], **{k: after[k] for k in rest})
    with pytest.raises(TypeError, match="positional argument"):
        fn(R, *after.values())
