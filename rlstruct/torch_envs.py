"""The library's tasks written in torch: CartPole, Pendulum and CueMemory as ``TorchEnv`` s.

| id | class | observation | limit |
|---|---|---|---|
| ``CartPole-v1`` | ``TorchCartPole()`` | float32 [4] | 500 |
| ``CartPoleNoVel-v1`` | ``TorchCartPole(velocities=False)`` | float32 [2] | 500 |
| ``Pendulum-v1`` | ``TorchPendulum()`` | float32 [3] | 200 |
| ``PendulumNoVel-v1`` | ``TorchPendulum(velocities=False)`` | float32 [2] | 200 |
| ``CueMemory-v0`` | ``TorchCueMemory()`` | float32 [3] | none |

Each has the dynamics, rewards, termination and truncation of its gymnasium
counterpart (``gymnasium.make(id)``), which tests check step by step from the
same states; only the random draws of the first states differ (a
``torch.Generator`` here, numpy's there). The state is float32 by default;
``dtype=torch.float64`` computes in double precision, as gymnasium does. The
observation is under the key ``observation``, the action under ``action``:
int64 ``[n_envs]`` for CartPole and CueMemory, float32 ``[n_envs, 1]`` for
Pendulum, on the environment's device. The physical constants are
parameters: w can set them per row (``{"length": ...}`` for CartPole,
``{"g": ...}`` for Pendulum, ``{"delay": ...}`` for CueMemory).

``make_torch_env(env, n_envs, seed, device="cpu", **kwargs)`` makes one by
its gymnasium id; it is what batchers take as ``env_factory``.

Examples:
    >>> from rlstruct import LocalBatcher
    >>> from rlstruct.testing import RandomAgent
    >>> with LocalBatcher(RandomAgent, {"n_actions": 2}, make_torch_env, {"env": "CartPole-v1"},
    ...                   n_envs=1024, n_timesteps=8) as batcher:
    ...     batcher.reset()
    ...     batcher.execute()
    ...     batch = batcher.get()
    >>> batch.trajectories["observation"].shape
    torch.Size([1024, 8, 4])
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, ClassVar

import torch

from rlstruct.checks import is_int
from rlstruct.dicttensor import DictTensor
from rlstruct.errors import describe
from rlstruct.specs import TensorSpec
from rlstruct.torch_env import TorchEnv

__all__ = ["TORCH_TASKS", "TorchCartPole", "TorchCueMemory", "TorchPendulum", "make_torch_env"]


def _uniform(
    env: TorchEnv, shape: tuple[int, ...], low: float, high: float, dtype: torch.dtype
) -> torch.Tensor:
    draw = torch.rand(shape, generator=env.generator, dtype=dtype, device=env.device)
    return draw * (high - low) + low


def _check_state_options(owner: str, velocities: object, dtype: object) -> None:
    if not isinstance(velocities, bool):
        raise TypeError(f"{owner}: velocities must be a bool, got {describe(velocities)}")
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"{owner}: dtype must be a floating torch.dtype (float32, float64), got {dtype!r}")


class TorchCartPole(TorchEnv):
    """``CartPole-v1`` (and ``CartPoleNoVel-v1`` with ``velocities=False``), every row a cart.

    Action 1 pushes the cart right, any other value left, as gymnasium's.
    The state ``[n_envs, 4]`` is (x, x_dot, theta, theta_dot), drawn
    uniformly in [-0.05, 0.05) at the start of an episode; an episode
    terminates when |x| > 2.4 or |theta| > 12 degrees, and is truncated after
    ``max_episode_steps``. The reward is 1 at every step.

    Args:
        n_envs: as for ``TorchEnv``.
        seed: as for ``TorchEnv``.
        device: as for ``TorchEnv``.
        max_episode_steps: as for ``TorchEnv``.
        velocities: False observes (x, theta) only, as ``CartPoleNoVel-v1``.
        dtype: the state's dtype; the observation is float32 either way.
    """

    parameters: ClassVar[dict[str, float]] = {
        "gravity": 9.8,
        "masscart": 1.0,
        "masspole": 0.1,
        "length": 0.5,
        "force_mag": 10.0,
    }
    action_spec: ClassVar[TensorSpec | None] = TensorSpec((), torch.int64)
    tau = 0.02
    x_threshold = 2.4
    theta_threshold = 12 * 2 * math.pi / 360

    def __init__(
        self,
        n_envs: int,
        seed: int = 0,
        device: torch.device | str = "cpu",
        max_episode_steps: int | None = 500,
        velocities: bool = True,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        _check_state_options("TorchCartPole", velocities, dtype)
        super().__init__(n_envs, seed, device, max_episode_steps)
        self.velocities = velocities
        self.state = torch.zeros((n_envs, 4), dtype=dtype, device=self.device)

    def start(self, rows: torch.Tensor) -> None:
        """Each row in ``rows`` gets a state drawn uniformly in [-0.05, 0.05)^4."""
        new = _uniform(self, (self.n_envs, 4), -0.05, 0.05, self.state.dtype)
        torch.where(rows.unsqueeze(1), new, self.state, out=self.state)

    def observe(self) -> dict[str, torch.Tensor]:
        """``observation``: the state as float32 ``[n_envs, 4]`` (``[n_envs, 2]``, x and theta, without velocities)."""
        if self.velocities:
            return {"observation": self.state.to(torch.float32, copy=True)}
        return {"observation": self.state[:, 0::2].to(torch.float32, copy=True)}

    def advance(self, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One Euler step of 0.02 s pushed by +-force_mag; reward 1, terminated past the bounds."""

        def p(name: str) -> torch.Tensor | float:
            return self.parameter(name, self.state.dtype)

        gravity, masscart, masspole, length = p("gravity"), p("masscart"), p("masspole"), p("length")
        total_mass = masspole + masscart
        polemass_length = masspole * length
        x, x_dot, theta, theta_dot = self.state.unbind(1)
        force_mag = p("force_mag")
        force = torch.where(action == 1, force_mag, -force_mag).to(self.state.dtype)
        costheta, sintheta = torch.cos(theta), torch.sin(theta)
        temp = (force + polemass_length * theta_dot.square() * sintheta) / total_mass
        thetaacc = (gravity * sintheta - costheta * temp) / (
            length * (4.0 / 3.0 - masspole * costheta.square() / total_mass)
        )
        xacc = temp - polemass_length * thetaacc * costheta / total_mass
        x, x_dot = x + self.tau * x_dot, x_dot + self.tau * xacc
        theta, theta_dot = theta + self.tau * theta_dot, theta_dot + self.tau * thetaacc
        self.state = torch.stack((x, x_dot, theta, theta_dot), dim=1)
        terminated = (x.abs() > self.x_threshold) | (theta.abs() > self.theta_threshold)
        return torch.ones_like(x, dtype=torch.float32), terminated


def _angle_normalize(x: torch.Tensor) -> torch.Tensor:
    return torch.remainder(x + math.pi, 2 * math.pi) - math.pi


class TorchPendulum(TorchEnv):
    """``Pendulum-v1`` (and ``PendulumNoVel-v1`` with ``velocities=False``), every row a pendulum.

    The state ``[n_envs, 2]`` is (theta, theta_dot), drawn uniformly in
    [-pi, pi) x [-1, 1) at the start of an episode. The action, float
    ``[n_envs, 1]``, is a torque clipped to [-2, 2]; the reward is
    ``-(theta^2 + 0.1 theta_dot^2 + 0.001 torque^2)`` (theta normalised to
    [-pi, pi)). Episodes never terminate; they are truncated after
    ``max_episode_steps``.

    Args:
        n_envs: as for ``TorchEnv``.
        seed: as for ``TorchEnv``.
        device: as for ``TorchEnv``.
        max_episode_steps: as for ``TorchEnv``.
        velocities: False observes (cos theta, sin theta) only, as ``PendulumNoVel-v1``.
        dtype: the state's dtype; the observation is float32 either way.
    """

    parameters: ClassVar[dict[str, float]] = {"g": 10.0, "m": 1.0, "l": 1.0}
    action_spec: ClassVar[TensorSpec | None] = TensorSpec((1,), torch.float32)
    max_speed = 8.0
    max_torque = 2.0
    dt = 0.05

    def __init__(
        self,
        n_envs: int,
        seed: int = 0,
        device: torch.device | str = "cpu",
        max_episode_steps: int | None = 200,
        velocities: bool = True,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        _check_state_options("TorchPendulum", velocities, dtype)
        super().__init__(n_envs, seed, device, max_episode_steps)
        self.velocities = velocities
        self.state = torch.zeros((n_envs, 2), dtype=dtype, device=self.device)

    def start(self, rows: torch.Tensor) -> None:
        """Each row in ``rows`` gets theta in [-pi, pi) and theta_dot in [-1, 1), uniformly."""
        theta = _uniform(self, (self.n_envs,), -math.pi, math.pi, self.state.dtype)
        theta_dot = _uniform(self, (self.n_envs,), -1.0, 1.0, self.state.dtype)
        torch.where(rows.unsqueeze(1), torch.stack((theta, theta_dot), dim=1), self.state, out=self.state)

    def observe(self) -> dict[str, torch.Tensor]:
        """``observation``: (cos, sin, theta_dot) as float32 ``[n_envs, 3]`` (``[n_envs, 2]`` without velocities)."""
        theta, theta_dot = self.state.unbind(1)
        entries = (theta.cos(), theta.sin(), theta_dot) if self.velocities else (theta.cos(), theta.sin())
        return {"observation": torch.stack(entries, dim=1).to(torch.float32)}

    def advance(self, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One step of 0.05 s with the clipped torque; the reward is the cost of the state before it, negated."""
        dtype = self.state.dtype
        g, m, length = (self.parameter(name, dtype) for name in ("g", "m", "l"))
        theta, theta_dot = self.state.unbind(1)
        u = action[:, 0].clamp(-self.max_torque, self.max_torque)
        costs = _angle_normalize(theta).square() + 0.1 * theta_dot.square() + 0.001 * u.square()
        # gymnasium scales the torque in the action's dtype (float32) before adding it to its float64
        # state; so does this, or float64 drifts from it by ~1e-6 over an episode
        torque = (3.0 / (m * length**2) * u).to(self.state.dtype)
        new_theta_dot = theta_dot + (3 * g / (2 * length) * theta.sin() + torque) * self.dt
        new_theta_dot = new_theta_dot.clamp(-self.max_speed, self.max_speed)
        self.state = torch.stack((theta + new_theta_dot * self.dt, new_theta_dot), dim=1)
        return (-costs).to(torch.float32), torch.zeros_like(theta, dtype=torch.bool)  # float32 at any dtype


class TorchCueMemory(TorchEnv):
    """``CueMemory-v0``: remember a cue over ``delay`` blank steps, then answer it, every row a game.

    As ``rlstruct.envs.CueMemoryEnv``: the first observation shows the cue
    (one-hot in the first two entries, drawn uniformly from {0, 1}), the next
    ``delay`` are zeros, the one after is (0, 0, 1); the action on it is the
    answer, +1 if it equals the cue and -1 otherwise, and the episode then
    terminates (``delay + 2`` steps). Other actions are worth 0.

    Args:
        n_envs: as for ``TorchEnv``.
        seed: as for ``TorchEnv``.
        device: as for ``TorchEnv``.
        max_episode_steps: as for ``TorchEnv`` (None by default, as the gymnasium id).
        delay: the default delay; w's ``delay`` sets it per row.
    """

    parameters: ClassVar[dict[str, float]] = {"delay": 10}
    action_spec: ClassVar[TensorSpec | None] = TensorSpec((), torch.int64)

    def __init__(
        self,
        n_envs: int,
        seed: int = 0,
        device: torch.device | str = "cpu",
        max_episode_steps: int | None = None,
        delay: int = 10,
    ) -> None:
        if not is_int(delay) or delay < 0:
            raise ValueError(f"TorchCueMemory: delay must be an int >= 0, got {delay!r}")
        delay = int(delay)
        super().__init__(n_envs, seed, device, max_episode_steps)
        self.defaults["delay"] = delay
        self.cue = torch.zeros(n_envs, dtype=torch.int64, device=self.device)
        self.t = torch.zeros(n_envs, dtype=torch.int64, device=self.device)

    def reset(self, env_info: DictTensor, auto_reset: bool = False) -> DictTensor:
        """As ``TorchEnv.reset``; w's ``delay``, if given, must hold integers >= 0.

        Raises:
            TypeError, ValueError: as ``TorchEnv.reset``, and for a ``delay``
                that is not integers >= 0.
        """
        delay = env_info.tensors.get("delay") if isinstance(env_info, DictTensor) else None
        if delay is not None:
            if delay.dtype.is_floating_point or delay.dtype.is_complex or delay.dtype == torch.bool:
                raise TypeError(
                    f"TorchCueMemory.reset: env_info['delay'] must hold integers, got {delay.dtype}"
                )
            if bool((delay < 0).any()):
                raise ValueError(f"TorchCueMemory.reset: env_info['delay'] must be >= 0, got {delay}")
        return super().reset(env_info, auto_reset)

    def start(self, rows: torch.Tensor) -> None:
        """Each row in ``rows`` draws a new cue, 0 or 1, and goes back to its first step."""
        cue = torch.randint(0, 2, (self.n_envs,), generator=self.generator, device=self.device)
        torch.where(rows, cue, self.cue, out=self.cue)
        self.t.masked_fill_(rows, 0)

    def observe(self) -> dict[str, torch.Tensor]:
        """``observation``: float32 ``[n_envs, 3]``, the cue one-hot at the first step, the answer flag at the last."""
        shown = self.t == 0
        answer_now = self.t == self.parameter("delay") + 1
        entries = (shown & (self.cue == 0), shown & (self.cue == 1), answer_now)
        return {"observation": torch.stack(entries, dim=1).to(torch.float32)}

    def advance(self, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The answer step pays +1 or -1 and terminates; every other step pays 0."""
        answering = self.t == self.parameter("delay") + 1
        right = torch.where(action == self.cue, 1.0, -1.0)
        self.t += 1
        return torch.where(answering, right, 0.0), answering


TORCH_TASKS: dict[str, Callable[..., TorchEnv]] = {
    "CartPole-v1": TorchCartPole,
    "CartPoleNoVel-v1": lambda **kwargs: TorchCartPole(velocities=False, **kwargs),
    "Pendulum-v1": TorchPendulum,
    "PendulumNoVel-v1": lambda **kwargs: TorchPendulum(velocities=False, **kwargs),
    "CueMemory-v0": TorchCueMemory,
}
"""The gymnasium ids written in torch here, and what makes each."""


def make_torch_env(
    env: str, n_envs: int, seed: int = 0, device: torch.device | str = "cpu", **kwargs: Any
) -> TorchEnv:
    """The torch version of the gymnasium id ``env`` (a key of ``TORCH_TASKS``); a batcher's ``env_factory``.

    Args:
        env: the gymnasium id.
        n_envs: as for ``TorchEnv``.
        seed: as for ``TorchEnv``.
        device: as for ``TorchEnv``.
        **kwargs: the class's other arguments (``dtype``, ``delay``,
            ``max_episode_steps``).

    Raises:
        TypeError: for an ``env`` that is not a str, or ``velocities`` given
            for a ``NoVel`` id (which fixes it).
        ValueError: for an id not written in torch here.

    Examples:
        >>> make_torch_env("PendulumNoVel-v1", n_envs=2).velocities
        False
    """
    if not isinstance(env, str):
        raise TypeError(f"make_torch_env: env must be a gymnasium id (str), got {describe(env)}")
    if env not in TORCH_TASKS:
        raise ValueError(f"make_torch_env: env must be one of {sorted(TORCH_TASKS)}, got {env!r}")
    if env.endswith("NoVel-v1") and "velocities" in kwargs:
        raise TypeError(
            f"make_torch_env: {env!r} observes no velocities, so it takes no velocities argument; "
            f"got velocities={kwargs['velocities']!r} ({env.replace('NoVel', '')!r} observes them)"
        )
    return TORCH_TASKS[env](n_envs=n_envs, seed=seed, device=device, **kwargs)
