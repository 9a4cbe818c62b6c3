"""Returns, TD(lambda), GAE and V-trace: rlstruct.returns against straightforward loops.

Each row times one function of ``rlstruct.returns`` and a straightforward
implementation of the same maths, side by side: a Python loop over the T time
steps, backwards, of vector operations on [B] (the per-step flags turned into
floats once, before the loop). Both see the same float32 inputs on the CPU,
with one torch thread: fixed-length rows (as a batcher's ``mode="fixed"``
returns them) with terminations and truncations, and, for the "padded" rows,
rows of random lengths with zero padding. The two sides are checked to agree
before they are timed. Values are calls per second; the ratio is the speed-up
over the loop, against a target of 1.0 (never slower). When TorchRL is
installed, a row compares ``gae`` with TorchRL's vectorised GAE (target 1.0).

Usage:
    python benchmarks/returns.py [--quick] [--repeats N] [--json PATH]
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from _common import Row, compare, parse_args, report

from rlstruct.returns import discounted_returns, gae, td_lambda, vtrace

SIZES = [(64, 256), (8, 128)]
GAMMA, LAM = 0.99, 0.95
TARGET = 1.0

Tensor = torch.Tensor
Batch = dict[str, Tensor]


def make_batch(rows: int, steps: int, padded: bool, gen: torch.Generator) -> Batch:
    """Random float32 inputs; ``next_value[:, t] == value[:, t + 1]`` wherever step t continues."""
    lengths = torch.randint(1, steps + 1, (rows,), generator=gen) if padded else torch.full((rows,), steps)
    mask = torch.arange(steps) < lengths[:, None]
    terminated = (torch.rand(rows, steps, generator=gen) < 0.02) & mask
    done = terminated | ((torch.rand(rows, steps, generator=gen) < 0.01) & mask)
    value = torch.randn(rows, steps, generator=gen)
    next_value = torch.randn(rows, steps, generator=gen)
    next_value[:, :-1] = torch.where(~done[:, :-1] & mask[:, 1:], value[:, 1:], next_value[:, :-1])
    batch = {
        "log_rho": torch.randn(rows, steps, generator=gen) * 0.3,
        "reward": torch.randn(rows, steps, generator=gen),
        "value": value,
        "next_value": next_value,
    }
    batch = {k: v * mask for k, v in batch.items()}  # zero padding, as a batcher leaves it
    return {**batch, "terminated": terminated, "done": done, "mask": mask}


# ---------------------------------------------------------------------------- straightforward loops


def _floats(b: Batch) -> tuple[Tensor, Tensor, Tensor]:
    """(not terminated, continues to t + 1, valid) as floats [B, T]."""
    mask = b["mask"]
    cont = torch.zeros_like(b["reward"])
    cont[:, :-1] = (~b["done"][:, :-1] & mask[:, 1:]).float()
    return (~b["terminated"]).float(), cont, mask.float()


def loop_discounted_returns(b: Batch) -> Tensor:
    reward, next_value = b["reward"], b["next_value"]
    not_term, cont, valid = _floats(b)
    out = torch.zeros_like(reward)
    future = torch.zeros(reward.shape[0])
    for t in reversed(range(reward.shape[1])):
        c = cont[:, t]
        future = reward[:, t] + GAMMA * not_term[:, t] * (c * future + (1 - c) * next_value[:, t])
        out[:, t] = future
    return out * valid


def loop_td_lambda(b: Batch) -> Tensor:
    reward, next_value = b["reward"], b["next_value"]
    not_term, cont, valid = _floats(b)
    out = torch.zeros_like(reward)
    future = torch.zeros(reward.shape[0])
    for t in reversed(range(reward.shape[1])):
        c = cont[:, t]
        mix = (1 - LAM * c) * next_value[:, t] + LAM * c * future
        future = reward[:, t] + GAMMA * not_term[:, t] * mix
        out[:, t] = future
    return out * valid


def loop_gae(b: Batch) -> Tensor:
    reward, value, next_value = b["reward"], b["value"], b["next_value"]
    not_term, cont, valid = _floats(b)
    out = torch.zeros_like(reward)
    future = torch.zeros(reward.shape[0])
    for t in reversed(range(reward.shape[1])):
        delta = reward[:, t] + GAMMA * not_term[:, t] * next_value[:, t] - value[:, t]
        future = delta + GAMMA * LAM * cont[:, t] * future
        out[:, t] = future
    return out * valid


def loop_vtrace(b: Batch) -> tuple[Tensor, Tensor]:
    reward, value, next_value = b["reward"], b["value"], b["next_value"]
    not_term, cont, valid = _floats(b)
    ratio = b["log_rho"].exp()
    rho, c = ratio.clamp(max=1.0), ratio.clamp(max=1.0)
    vs = torch.zeros_like(reward)
    pg = torch.zeros_like(reward)
    acc = torch.zeros(reward.shape[0])
    next_vs = torch.zeros(reward.shape[0])
    for t in reversed(range(reward.shape[1])):
        k = cont[:, t]
        delta = rho[:, t] * (reward[:, t] + GAMMA * not_term[:, t] * next_value[:, t] - value[:, t])
        acc = delta + GAMMA * c[:, t] * k * acc
        bootstrap = k * next_vs + (1 - k) * next_value[:, t]
        pg[:, t] = rho[:, t] * (reward[:, t] + GAMMA * not_term[:, t] * bootstrap - value[:, t])
        next_vs = value[:, t] + acc
        vs[:, t] = next_vs
    return vs * valid, pg * valid


# ---------------------------------------------------------------------------- the rows


def cases(b: Batch, padded: bool) -> list[tuple[str, Callable[[], object], Callable[[], object]]]:
    r, v, nv, term, done = b["reward"], b["value"], b["next_value"], b["terminated"], b["done"]
    mask = b["mask"] if padded else None
    all_cases = [
        (
            "discounted_returns",
            lambda: discounted_returns(r, terminated=term, done=done, gamma=GAMMA, next_value=nv, mask=mask),
            lambda: loop_discounted_returns(b),
        ),
        (
            "td_lambda",
            lambda: td_lambda(r, next_value=nv, terminated=term, done=done, gamma=GAMMA, lam=LAM, mask=mask),
            lambda: loop_td_lambda(b),
        ),
        (
            "gae",
            lambda: gae(
                r, value=v, next_value=nv, terminated=term, done=done, gamma=GAMMA, lam=LAM, mask=mask
            ),
            lambda: loop_gae(b),
        ),
        (
            "vtrace",
            lambda: vtrace(
                r,
                log_rho=b["log_rho"],
                value=v,
                next_value=nv,
                terminated=term,
                done=done,
                gamma=GAMMA,
                mask=mask,
            ),
            lambda: loop_vtrace(b),
        ),
    ]
    return [case for case in all_cases if not padded or case[0] == "gae"]


def check_same(name: str, got: object, expected: object) -> None:
    pairs = zip(got, expected, strict=True) if isinstance(got, tuple) else [(got, expected)]
    for a, e in pairs:
        assert isinstance(a, Tensor) and isinstance(e, Tensor)
        if a.dtype != e.dtype or not torch.allclose(a, e, rtol=1e-4, atol=1e-4):
            raise AssertionError(f"{name}: rlstruct and the loop disagree")


def torchrl_gae() -> Callable[..., tuple[Tensor, Tensor]] | None:
    """TorchRL's vectorised GAE, or None when TorchRL is not installed."""
    try:
        from torchrl.objectives.value.functional import vec_generalized_advantage_estimate
    except ImportError:
        return None
    return vec_generalized_advantage_estimate


def main() -> None:
    args, budget = parse_args(__doc__)
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(0)
    rows: list[Row] = []
    times: list[tuple[str, float, float]] = []
    vec_gae = torchrl_gae()
    for n_rows, steps in SIZES:
        for padded in (False, True):
            b = make_batch(n_rows, steps, padded, gen)
            for name, ours, loop in cases(b, padded):
                label = f"{name}{' padded' if padded else ''} [{n_rows}, {steps}] vs loop"
                check_same(label, ours(), loop())
                t_ours, t_loop = compare([ours, loop], budget)
                times.append((label, t_ours, t_loop))
                rows.append(Row(label, 1 / t_ours, "calls/s", 1 / t_loop, TARGET, higher_is_better=True))
        if vec_gae is not None:
            b = make_batch(n_rows, steps, False, gen)
            r, v, nv, term, done = (b[k] for k in ("reward", "value", "next_value", "terminated", "done"))

            def theirs(
                r: Tensor = r, v: Tensor = v, nv: Tensor = nv, term: Tensor = term, done: Tensor = done
            ) -> Tensor:
                adv, _ = vec_gae(
                    GAMMA,
                    LAM,
                    v[..., None],
                    nv[..., None],
                    r[..., None],
                    done[..., None],
                    terminated=term[..., None],
                )
                return adv[..., 0]

            def ours(
                r: Tensor = r, v: Tensor = v, nv: Tensor = nv, term: Tensor = term, done: Tensor = done
            ) -> Tensor:
                return gae(r, value=v, next_value=nv, terminated=term, done=done, gamma=GAMMA, lam=LAM)

            label = f"gae [{n_rows}, {steps}] vs TorchRL vec GAE"
            if not torch.allclose(ours(), theirs(), rtol=1e-4, atol=1e-4):
                print(f"skipped {label}: TorchRL's GAE computes something else on these inputs")
                continue
            t_ours, t_theirs = compare([ours, theirs], budget)
            times.append((label, t_ours, t_theirs))
            rows.append(Row(label, 1 / t_ours, "calls/s", 1 / t_theirs, TARGET, higher_is_better=True))
    print(
        f"torch {torch.__version__}, 1 thread, median of {budget.repeats} repeats; microseconds per call:\n"
    )
    width = max(len(label) for label, _, _ in times)
    for label, t_ours, t_other in times:
        print(f"{label.ljust(width)}  {t_ours * 1e6:9.1f}  {t_other * 1e6:9.1f}")
    print()
    report(args, rows, "rlstruct", "baseline")


if __name__ == "__main__":
    main()
