"""Discounted returns, TD(lambda) targets, GAE advantages and V-trace targets over [B, T] batches.

The functions read the layout of a batcher's trajectories: at step t the agent
saw observation t and acted; ``reward[:, t]``, ``terminated[:, t]`` and
``done[:, t]`` describe the transition that action made (the ``next/reward``,
``next/terminated`` and ``next/done`` keys), and ``next_value[:, t]`` is the
value of the observation it reached (``next/observation``, which is the final
observation when an episode ended). ``value[:, t]`` is the value of observation
t. Every tensor has shape [B, T] and lives on one device; the float inputs share
one floating dtype, which the outputs keep; ``terminated``, ``done`` and
``mask`` are bool.

Each function takes ``reward`` by position and every other argument by name
(``gae(reward, value=..., next_value=..., terminated=..., done=..., gamma=...,
lam=...)``): ``terminated`` and ``done``, like ``value`` and ``next_value``,
share a shape and a dtype, so arguments swapped by position would give wrong
targets without an error.

Where the recursions stop:

- **termination** (``terminated[:, t]``): the episode ended in a terminal
  state, whose value is 0; nothing is bootstrapped.
- **truncation** (``done[:, t]`` without ``terminated[:, t]``): the episode was
  cut (a time limit), so the return bootstraps from ``next_value[:, t]``, the
  value of its final observation.
- **row end** (the last valid step of a row): the trajectory goes on beyond the
  batch, so the return bootstraps from ``next_value[:, t]`` too (from 0 in
  ``discounted_returns`` called without ``next_value``).
- **padding** (``mask`` False, the steps past ``lengths``): outputs are 0 there,
  and whatever the inputs hold there (even NaN) does not reach the valid steps.

A step counts as the last of its row when it is valid and the next step is not
(or t = T - 1), so ``mask`` is normally ``TemporalDictTensor.mask()``; a
terminated step ends its episode whether ``done`` says so or not.

The outputs are learning targets: every function runs under
``torch.no_grad()``, so no gradient flows through them even when an input
(a value estimate, the log-ratios of V-trace) requires one.

Speed: every function is a few element-wise operations over [B, T] and one
linear recurrence ``out_t = x_t + coef_t * out_{t+1}`` run backwards in time,
solved as a parallel prefix scan: ceil(log2 T) rounds of whole-tensor operations
instead of T rounds of [B]-sized ones. On the CPU the scan beat the loops over T
it was compared with (torch and numpy), and on a GPU it keeps to whole-tensor
kernels, where numpy cannot follow. ``benchmarks/returns.py`` times the four
functions against straightforward loops; those figures, and the comparison of
ways to solve the recurrence, are in ``docs/performance.md`` (Returns and
advantages).

Examples:
    >>> import torch
    >>> from rlstruct.returns import discounted_returns, gae
    >>> reward = torch.tensor([[1.0, 1.0, 1.0]])
    >>> terminated = torch.tensor([[False, False, True]])
    >>> discounted_returns(reward, terminated=terminated, done=terminated, gamma=0.5)
    tensor([[1.7500, 1.5000, 1.0000]])
    >>> value = torch.tensor([[1.0, 1.0, 1.0]])
    >>> next_value = torch.tensor([[1.0, 1.0, 9.0]])  # 9.0 is never used: step 2 terminates
    >>> gae(
    ...     reward, value=value, next_value=next_value, terminated=terminated, done=terminated, gamma=0.5, lam=1.0
    ... )
    tensor([[0.7500, 0.5000, 0.0000]])
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from rlstruct.checks import check_number
from rlstruct.errors import describe

__all__ = ["discounted_returns", "gae", "td_lambda", "vtrace"]

Tensor = torch.Tensor


@torch.no_grad()
def discounted_returns(
    reward: Tensor,
    *,
    terminated: Tensor,
    done: Tensor,
    gamma: float,
    next_value: Tensor | None = None,
    mask: Tensor | None = None,
) -> Tensor:
    """Discounted sums of rewards to the end of each episode or row.

    ``G_t = r_t + gamma * G_{t+1}`` within an episode; at a termination the
    sum stops (``G_t = r_t``); at a truncation or a row end it bootstraps:
    ``G_t = r_t + gamma * next_value_t``, or ``G_t = r_t`` when ``next_value``
    is None (the Monte-Carlo return of what was observed).

    Args:
        reward: float [B, T], the reward of each transition.
        terminated: bool [B, T], True where the transition reached a terminal state.
        done: bool [B, T], True where the episode ended (terminated or truncated).
        gamma: the discount, in [0, 1].
        next_value: float [B, T] or None, the value of the observation each
            transition reached; read at truncations and row ends only.
        mask: bool [B, T] or None (all steps valid); False on padding.

    Returns:
        A new tensor [B, T] with the dtype and device of ``reward``; 0 on padding.

    Raises:
        TypeError: for a non-tensor input, a non-float ``reward``, a float input
            whose dtype differs from ``reward``'s, a flag that is not bool, or a
            ``gamma`` that is not a number.
        ValueError: for inputs not of ``reward``'s [B, T] shape or device, or
            ``gamma`` outside [0, 1].

    Examples:
        >>> import torch
        >>> reward = torch.ones(1, 4)
        >>> done = torch.tensor([[False, True, False, False]])  # truncated at step 1
        >>> next_value = torch.tensor([[0.0, 10.0, 0.0, 20.0]])
        >>> discounted_returns(
        ...     reward, terminated=torch.zeros_like(done), done=done, gamma=0.5, next_value=next_value
        ... )
        tensor([[ 4.0000,  6.0000,  6.5000, 11.0000]])
    """
    _check_tensors(
        "discounted_returns",
        [("reward", reward), ("next_value", next_value)],
        [("terminated", terminated), ("done", done), ("mask", mask)],
        optional=("next_value", "mask"),
    )
    check_number("discounted_returns", "gamma", gamma, 0.0, 1.0)
    cont = _continues(terminated, done, mask)
    if next_value is None:
        x = reward.clone()
    else:
        # bootstrap where the trace stops without a termination: truncations and row ends
        x = torch.where(cont | terminated, 0.0, next_value).mul_(gamma).add_(reward)
    coef = cont.to(reward.dtype).mul_(gamma)
    return _reverse_scan_(_zero_padding_(x, mask), coef)


@torch.no_grad()
def td_lambda(
    reward: Tensor,
    *,
    next_value: Tensor,
    terminated: Tensor,
    done: Tensor,
    gamma: float,
    lam: float,
    mask: Tensor | None = None,
) -> Tensor:
    """TD(lambda) targets: lambda-returns bootstrapped from ``next_value``.

    ``G_t = r_t + gamma * [(1 - lam) * next_value_t + lam * G_{t+1}]`` within
    an episode; ``G_t = r_t + gamma * next_value_t`` at a truncation or a row
    end; ``G_t = r_t`` at a termination. ``lam=0`` gives one-step TD targets,
    ``lam=1`` equals ``discounted_returns(..., next_value=next_value)``.

    Args:
        reward: float [B, T], the reward of each transition.
        next_value: float [B, T], the value of the observation each transition
            reached; with ``lam=1`` read at truncations and row ends only, as
            by ``discounted_returns`` (with ``gamma=0``, not at all).
        terminated: bool [B, T], True where the transition reached a terminal state.
        done: bool [B, T], True where the episode ended (terminated or truncated).
        gamma: the discount, in [0, 1].
        lam: the trace decay lambda, in [0, 1].
        mask: bool [B, T] or None (all steps valid); False on padding.

    Returns:
        A new tensor [B, T] with the dtype and device of ``reward``; 0 on padding.

    Raises:
        TypeError: as for [`discounted_returns`][rlstruct.returns.discounted_returns].
        ValueError: as for [`discounted_returns`][rlstruct.returns.discounted_returns],
            or ``lam`` outside [0, 1].

    Examples:
        >>> import torch
        >>> reward, next_value = torch.ones(1, 2), torch.tensor([[2.0, 4.0]])
        >>> no = torch.zeros(1, 2, dtype=torch.bool)
        >>> # G_1 = 1 + 4; G_0 = 1 + (2 + 5) / 2
        >>> td_lambda(reward, next_value=next_value, terminated=no, done=no, gamma=1.0, lam=0.5)
        tensor([[4.5000, 5.0000]])
    """
    _check_tensors(
        "td_lambda",
        [("reward", reward), ("next_value", next_value)],
        [("terminated", terminated), ("done", done), ("mask", mask)],
    )
    check_number("td_lambda", "gamma", gamma, 0.0, 1.0)
    check_number("td_lambda", "lam", lam, 0.0, 1.0)
    cont = _continues(terminated, done, mask)
    cont_f = cont.to(reward.dtype)
    # weight of the bootstrap: gamma * (1 - lam) inside an episode, gamma where the trace stops
    weight = cont_f.mul(-lam).add_(1.0).mul_(gamma)
    # a value of weight 0 is never read (lam=1 inside an episode): a NaN there must not reach the targets
    x = next_value.masked_fill(terminated | (weight == 0), 0.0).mul_(weight).add_(reward)
    return _reverse_scan_(_zero_padding_(x, mask), cont_f.mul_(gamma * lam))


@torch.no_grad()
def gae(
    reward: Tensor,
    *,
    value: Tensor,
    next_value: Tensor,
    terminated: Tensor,
    done: Tensor,
    gamma: float,
    lam: float,
    mask: Tensor | None = None,
) -> Tensor:
    """Generalized advantage estimates (Schulman et al. 2016, "High-Dimensional
    Continuous Control Using Generalized Advantage Estimation").

    ``delta_t = r_t + gamma * (1 - terminated_t) * next_value_t - value_t`` and
    ``A_t = delta_t + gamma * lam * A_{t+1}``, the sum cut after a done step
    and after the last valid step of a row. Where ``next_value[:, t]`` equals
    ``value[:, t + 1]`` whenever step t does not end its episode (as it does
    for a batcher's trajectories), ``gae(...) == td_lambda(...) - value``.

    Args:
        reward: float [B, T], the reward of each transition.
        value: float [B, T], the value of the observation at each step.
        next_value: float [B, T], the value of the observation each transition reached.
        terminated: bool [B, T], True where the transition reached a terminal state.
        done: bool [B, T], True where the episode ended (terminated or truncated).
        gamma: the discount, in [0, 1].
        lam: the GAE lambda, in [0, 1].
        mask: bool [B, T] or None (all steps valid); False on padding.

    Returns:
        A new tensor [B, T] with the dtype and device of ``reward``; 0 on padding.

    Raises:
        TypeError: as for [`discounted_returns`][rlstruct.returns.discounted_returns].
        ValueError: as for [`discounted_returns`][rlstruct.returns.discounted_returns],
            or ``lam`` outside [0, 1].

    Examples:
        >>> import torch
        >>> reward, value = torch.ones(1, 3), torch.zeros(1, 3)
        >>> next_value = torch.tensor([[0.0, 0.0, 2.0]])
        >>> no = torch.zeros(1, 3, dtype=torch.bool)
        >>> # the row end bootstraps 2.0
        >>> gae(reward, value=value, next_value=next_value, terminated=no, done=no, gamma=1.0, lam=0.5)
        tensor([[2.2500, 2.5000, 3.0000]])
    """
    _check_tensors(
        "gae",
        [("reward", reward), ("value", value), ("next_value", next_value)],
        [("terminated", terminated), ("done", done), ("mask", mask)],
    )
    check_number("gae", "gamma", gamma, 0.0, 1.0)
    check_number("gae", "lam", lam, 0.0, 1.0)
    cont = _continues(terminated, done, mask)
    delta = _td_error(reward, value, next_value, terminated, gamma)
    return _reverse_scan_(_zero_padding_(delta, mask), cont.to(reward.dtype).mul_(gamma * lam))


@torch.no_grad()
def vtrace(
    reward: Tensor,
    *,
    log_rho: Tensor,
    value: Tensor,
    next_value: Tensor,
    terminated: Tensor,
    done: Tensor,
    gamma: float,
    rho_bar: float = 1.0,
    c_bar: float = 1.0,
    mask: Tensor | None = None,
    lam: float = 1.0,
) -> tuple[Tensor, Tensor]:
    """V-trace value targets and policy-gradient advantages (Espeholt et al. 2018, IMPALA).

    With the importance ratios ``ratio_t = exp(log_rho_t)`` of the learner's
    policy over the behaviour policy, ``rho_t = min(rho_bar, ratio_t)`` and
    ``c_t = lam * min(c_bar, ratio_t)``:

    ``vs_t = value_t + rho_t * delta_t + gamma * c_t * (vs_{t+1} - value_{t+1})``

    with ``delta_t`` as in [`gae`][rlstruct.returns.gae], the trace cut after
    a done step and after the last valid step of a row (the paper's eq. 1,
    with the termination and truncation handling of
    [`gae`][rlstruct.returns.gae]). The policy-gradient advantage is
    ``rho_t * (r_t + gamma * (1 - terminated_t) * vs_{t+1} - value_t)``,
    where ``vs_{t+1}`` is ``next_value_t`` after a done step or at a row end.
    With ``log_rho = 0`` (on-policy) and ``rho_bar, c_bar >= 1``, ``vs`` equals
    ``td_lambda(..., lam=lam)`` for consistent values, as the paper remarks.

    Args:
        reward: float [B, T], the reward of each transition.
        log_rho: float [B, T], log(pi(a_t | x_t) / mu(a_t | x_t)) of the action
            taken, learner's policy pi over behaviour policy mu.
        value: float [B, T], the value of the observation at each step.
        next_value: float [B, T], the value of the observation each transition reached.
        terminated: bool [B, T], True where the transition reached a terminal state.
        done: bool [B, T], True where the episode ended (terminated or truncated).
        gamma: the discount, in [0, 1].
        rho_bar: the clip of the ratios weighting the TD errors, > 0 (``inf``: no clip).
        c_bar: the clip of the trace ratios, > 0 (``inf``: no clip).
        mask: bool [B, T] or None (all steps valid); False on padding.
        lam: an extra trace decay in [0, 1] (the paper's remark 3); 1 by default.

    Returns:
        ``(vs, pg_advantage)``: two new tensors [B, T] with the dtype and device
        of ``reward``, 0 on padding.

    Raises:
        TypeError: as for [`discounted_returns`][rlstruct.returns.discounted_returns].
        ValueError: as for [`discounted_returns`][rlstruct.returns.discounted_returns],
            ``lam`` outside [0, 1], or ``rho_bar`` or ``c_bar`` not positive.

    Examples:
        >>> import torch
        >>> reward, value = torch.ones(1, 2), torch.zeros(1, 2)
        >>> next_value = torch.tensor([[0.0, 4.0]])
        >>> no = torch.zeros(1, 2, dtype=torch.bool)
        >>> log_rho = torch.log(torch.tensor([[2.0, 0.5]]))  # rho = c = min(1, ratio) = [1, 0.5]
        >>> vs, adv = vtrace(
        ...     reward, log_rho=log_rho, value=value, next_value=next_value, terminated=no, done=no, gamma=1.0
        ... )
        >>> vs  # vs_1 = 0 + 0.5 * (1 + 4 - 0); vs_0 = 0 + 1 * (1 + 0 - 0) + 1 * (vs_1 - 0)
        tensor([[3.5000, 2.5000]])
        >>> adv  # rho_0 * (1 + vs_1 - 0); rho_1 * (1 + next_value_1 - 0)
        tensor([[3.5000, 2.5000]])
    """
    _check_tensors(
        "vtrace",
        [("reward", reward), ("log_rho", log_rho), ("value", value), ("next_value", next_value)],
        [("terminated", terminated), ("done", done), ("mask", mask)],
    )
    check_number("vtrace", "gamma", gamma, 0.0, 1.0)
    check_number("vtrace", "lam", lam, 0.0, 1.0)
    check_number("vtrace", "rho_bar", rho_bar, 0.0, low_open=True, allow_inf=True)
    check_number("vtrace", "c_bar", c_bar, 0.0, low_open=True, allow_inf=True)
    cont = _continues(terminated, done, mask)
    ratio = log_rho.exp()
    rho = ratio.clamp(max=rho_bar)
    # where, not a product with cont: the ratios on padding may be NaN
    coef = torch.where(cont, ratio.clamp_(max=c_bar), 0.0).mul_(gamma * lam)
    x = _td_error(reward, value, next_value, terminated, gamma).mul_(rho)
    vs = _reverse_scan_(_zero_padding_(x, mask), coef).add_(value)
    _zero_padding_(vs, mask)
    # vs_{t+1} inside an episode, next_value_t where the trace stops (the wrapped column is never selected)
    next_vs = torch.where(cont, vs.roll(-1, 1), next_value)
    pg_advantage = _td_error(reward, value, next_vs, terminated, gamma).mul_(rho)
    return vs, _zero_padding_(pg_advantage, mask)


# ---------------------------------------------------------------------------- helpers


def _td_error(reward: Tensor, value: Tensor, next_value: Tensor, terminated: Tensor, gamma: float) -> Tensor:
    """``r_t + gamma * next_value_t - value_t``, with ``next_value_t`` read as 0 where terminated."""
    return next_value.masked_fill(terminated, 0.0).mul_(gamma).add_(reward).sub_(value)


def _continues(terminated: Tensor, done: Tensor, mask: Tensor | None) -> Tensor:
    """Bool [B, T]: True where the trace of step t goes on to step t + 1.

    False at done or terminated steps, at the last step of every row, and at
    valid steps followed by padding; False on padding too.
    """
    cont = torch.zeros_like(done)
    if done.shape[1] > 1:
        torch.logical_not(done[:, :-1] | terminated[:, :-1], out=cont[:, :-1])
        if mask is not None:
            cont[:, :-1] &= mask[:, 1:]
    if mask is not None:
        cont &= mask
    return cont


def _zero_padding_(x: Tensor, mask: Tensor | None) -> Tensor:
    """Write 0 into ``x`` where ``mask`` is False (in place); return ``x``."""
    return x if mask is None else x.masked_fill_(~mask, 0.0)


def _reverse_scan_(x: Tensor, coef: Tensor) -> Tensor:
    """Solve ``out_t = x_t + coef_t * out_{t+1}`` (``out_T = 0``) along dim 1, in place in ``x``.

    A Hillis-Steele scan: after the round with offset d, ``x_t`` holds the
    recurrence unrolled over steps [t, t + 2d) and ``coef_t`` the product of
    the coefficients over the same steps, so ceil(log2 T) rounds reach the end.
    ``coef`` of length T - (2d - 1) is all that later rounds read, which is why
    it shrinks by d each round.
    """
    steps = x.shape[1]
    d = 1
    while d < steps:
        x[:, :-d] += coef[:, : steps - d] * x[:, d:]
        if 2 * d < steps:
            coef = coef[:, :-d] * coef[:, d:]
        d *= 2
    return x


def _check_tensors(
    fn: str,
    floats: Sequence[tuple[str, Tensor | None]],
    flags: Sequence[tuple[str, Tensor | None]],
    optional: Sequence[str] = ("mask",),
) -> None:
    """Check that the tensors share the first float's [B, T] shape and device, and their dtypes.

    None entries of the ``optional`` arguments are skipped; None anywhere else is refused.
    """
    first, ref = floats[0]
    if not isinstance(ref, torch.Tensor):
        raise TypeError(f"{fn}: {first} must be a tensor, got {describe(ref)}")
    if not ref.is_floating_point():
        raise TypeError(f"{fn}: {first} must have a floating-point dtype, got {ref.dtype}")
    if ref.dim() != 2:
        raise ValueError(f"{fn}: {first} must have shape [B, T], got shape {tuple(ref.shape)}")
    for name, x in [*floats[1:], *flags]:
        if x is None and name in optional:
            continue
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{fn}: {name} must be a tensor, got {describe(x)}")
        if x.shape != ref.shape:
            raise ValueError(
                f"{fn}: {name} must have the shape of {first}, {tuple(ref.shape)}, got {tuple(x.shape)}"
            )
        if x.device != ref.device:
            raise ValueError(f"{fn}: {name} must be on the device of {first}, {ref.device}, got {x.device}")
    for name, x in floats[1:]:
        if x is not None and x.dtype != ref.dtype:
            raise TypeError(f"{fn}: {name} must have the dtype of {first}, {ref.dtype}, got {x.dtype}")
    for name, x in flags:
        if x is not None and x.dtype != torch.bool:
            raise TypeError(f"{fn}: {name} must be a bool tensor, got dtype {x.dtype}")
