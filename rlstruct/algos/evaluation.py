"""Evaluation alongside training: whole greedy episodes in a worker process, polled without blocking.

The evaluator is a one-worker ``MultiprocessBatcher`` in "episodes" mode (the
in-process batcher's layout, run in another process so that evaluation
overlaps training). ``start`` hands it the current weights and returns at
once; ``poll`` returns the result when the episodes are over; ``evaluate``
waits. Every row runs with ``agent_info["greedy"] = True``, and every
evaluation plays the same episodes: environment i is reset with seed
``seed + i`` each time (the ``seed`` key of env_info, see ``GymEnv``), so
evaluations differ only by the weights, and the final one does not depend on
how many came before.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import gymnasium as gym
import numpy as np
import torch

from rlstruct.agent import Agent
from rlstruct.batchers import MultiprocessBatcher
from rlstruct.checks import check_int
from rlstruct.dicttensor import DictTensor
from rlstruct.errors import describe
from rlstruct.gym_env import (  # UnknownEnvironment, which lived here: still importable from here
    MAKE_ERRORS,
    GymEnv,
    UnknownEnvironment,
    observation_spaces,
    resolve_env,
)
from rlstruct.learning.encoders import is_image
from rlstruct.replay.hindsight import RewardFn
from rlstruct.seeding import derive_seed
from rlstruct.specs import ObservationSpace
from rlstruct.temporal import TemporalDictTensor

__all__ = [
    "EnvSpaces",
    "EvalResult",
    "Evaluator",
    "env_spaces",
    "episode_returns",
    "eval_seed",
    "hindsight_reward",
]


@dataclass(frozen=True)
class EnvSpaces:
    """What the algorithms need to know of an environment to build their networks."""

    obs_dim: int
    """The size of the observation flattened, every key joined (a discrete entry counts as its one-hot)."""
    n_actions: int | None
    """The number of discrete actions, or None for continuous or multi-discrete actions."""
    action_low: list[float] | None
    """Bounds of continuous actions (None for discrete and multi-discrete)."""
    action_high: list[float] | None
    """Upper bounds of continuous actions (None for discrete and multi-discrete)."""
    max_episode_steps: int
    """The time limit of an episode (1000 where the environment declares none)."""
    observation: dict[str, ObservationSpace] = field(default_factory=dict)
    """The observation's keys, as ``GymEnv`` stores them, and their spaces (``observation_spaces``)."""
    action_nvec: list[int] | None = None
    """Multi-discrete actions: the number of choices of each component (``MultiDiscrete``'s ``nvec``;
    ``[2] * n`` for ``MultiBinary(n)``); None for the others."""

    @property
    def flat(self) -> bool:
        """Whether the observation is one box (not an image) under ``observation``: ``obs_dim`` numbers."""
        only = self.observation.get("observation")
        return len(self.observation) == 1 and only is not None and only.kind == "box" and not is_image(only)


def env_spaces(env: str) -> EnvSpaces:
    """Read the spaces and time limit of environment ``env`` (made once, then closed).

    Raises:
        UnknownEnvironment: (a ValueError) for an id gymnasium cannot make,
            with the likely fix.
        ValueError: for an action space that is not a Discrete or
            MultiDiscrete starting at 0, a one-dimensional float32 Box or a
            one-dimensional MultiBinary, a Dict observation entry ``GymEnv``
            cannot store (one with a ``/`` in its name, or named as a key it
            adds), or a factory (``"module:factory"``) that raised, the error
            its cause.
        TypeError: for an observation space ``GymEnv`` cannot store (see
            ``observation_spaces``; the message names the env and its
            space), or a factory that does not return a ``gymnasium.Env``.
    """
    try:
        # an id that cannot be made is told in one line: the warnings gymnasium gives on the way
        # (a deprecated version) are shown only when it can
        with warnings.catch_warnings(record=True) as caught:
            maker = resolve_env(env)
            instance = gym.make(maker) if isinstance(maker, str) else maker()
    except MAKE_ERRORS as error:
        raise UnknownEnvironment(env, error) from error
    except Exception as error:  # the user's factory, or an environment's constructor
        raise ValueError(f"env {env!r}: making it raised {type(error).__name__}: {error}") from error
    for warning in caught:
        warnings.showwarning(warning.message, warning.category, warning.filename, warning.lineno)
    if not isinstance(instance, gym.Env):
        raise TypeError(f"env {env!r}: the factory must return a gymnasium.Env, got {describe(instance)}")
    try:
        obs, act = instance.observation_space, instance.action_space
        limit = _time_limit(instance)
    finally:
        instance.close()
    try:
        observation = observation_spaces(obs)
    except (TypeError, ValueError) as error:  # told as the env's, not as the helper's the user never called
        message = str(error).removeprefix("observation_spaces: ")
        raise type(error)(f"env {env!r}: its observation space {obs}: {message}") from None
    obs_dim = sum(_flat_size(space) for space in observation.values())
    if isinstance(act, gym.spaces.Discrete):
        if int(act.start) != 0:
            raise ValueError(
                f"env {env!r}: the algorithms' discrete actions are 0 to n - 1, and its action space {act} "
                "starts elsewhere; shift it in the environment (a gymnasium ActionWrapper)"
            )
        return EnvSpaces(obs_dim, int(act.n), None, None, limit or 1000, observation)
    if isinstance(act, gym.spaces.Box):
        if len(act.shape) != 1 or act.dtype != np.float32:
            raise ValueError(
                f"env {env!r}: the algorithms' continuous actions are one float32 vector per step, and its "
                f"action space is {act}; flatten it or cast it in the environment (a gymnasium ActionWrapper)"
            )
        low, high = act.low.flatten().tolist(), act.high.flatten().tolist()
        return EnvSpaces(obs_dim, None, low, high, limit or 1000, observation)
    if isinstance(act, (gym.spaces.MultiDiscrete, gym.spaces.MultiBinary)):
        return EnvSpaces(obs_dim, None, None, None, limit or 1000, observation, action_nvec=_nvec(env, act))
    raise ValueError(
        f"env {env!r}: the algorithms need a Discrete, MultiDiscrete, MultiBinary or Box action space, got {act}"
    )


def _nvec(env: str, act: gym.spaces.MultiDiscrete | gym.spaces.MultiBinary) -> list[int]:
    """The number of choices of each component of a one-dimensional MultiDiscrete or MultiBinary starting at 0."""
    if len(act.shape) != 1:
        raise ValueError(
            f"env {env!r}: the algorithms' multi-discrete actions are one vector per step, and its action space "
            f"{act} has shape {act.shape}; flatten it in the environment (a gymnasium ActionWrapper)"
        )
    if isinstance(act, gym.spaces.MultiBinary):
        return [2] * act.shape[0]
    if bool((act.start != 0).any()):
        raise ValueError(
            f"env {env!r}: the algorithms' multi-discrete actions are 0 to nvec - 1, and its action space {act} "
            f"starts at {act.start.tolist()}; shift it in the environment (a gymnasium ActionWrapper)"
        )
    return [int(n) for n in act.nvec]


def _time_limit(env: gym.Env[Any, Any]) -> int | None:
    """The episodes' time limit: the spec's, else that of a ``TimeLimit`` wrapper a factory put on; None if none."""
    if env.spec is not None and env.spec.max_episode_steps is not None:
        return int(env.spec.max_episode_steps)
    while isinstance(env, gym.Wrapper):
        if isinstance(env, gym.wrappers.TimeLimit):
            return int(env._max_episode_steps)
        env = env.env
    return None


def _flat_size(space: ObservationSpace) -> int:
    """The numbers of one key, flattened: a discrete entry counts as its one-hot."""
    if space.kind == "discrete":
        return space.n[0]
    if space.kind == "multidiscrete":
        return sum(space.n)
    return math.prod(space.shape)


def hindsight_reward(env: str) -> RewardFn:
    """The batched reward of goal-conditioned environment ``env`` that hindsight relabelling recomputes rewards with.

    It is the environment's attribute ``torch_reward`` (read on
    ``env.unwrapped``, the environment made once, then closed):
    ``torch_reward(achieved_goal, desired_goal) -> reward`` on torch tensors,
    goals ``[n, *goal_shape]``, reward float32 ``[n]`` (the dtype ``GymEnv``
    stores rewards in) on their device, as ``HindsightReplayBuffer`` takes its
    ``reward_fn``. ``rlstruct.envs.BitFlipEnv`` has one
    (``rlstruct.envs.bitflip_reward``); gymnasium-robotics' ``compute_reward``
    works on numpy arrays, so its tasks need a torch twin of it set there.

    Args:
        env: an environment id (or ``"module:Name"``) that gymnasium can make.

    Raises:
        ValueError: naming ``config.her``, if the environment has no callable
            ``torch_reward``.
    """
    maker = resolve_env(env)
    instance = gym.make(maker) if isinstance(maker, str) else maker()
    try:
        unwrapped = instance.unwrapped
        reward = getattr(unwrapped, "torch_reward", None)
    finally:
        instance.close()
    if not callable(reward):
        raise ValueError(
            f"config.her needs the environment's batched reward, to recompute the rewards of relabelled goals: "
            f"config.env {env!r} ({type(unwrapped).__name__}) has no callable torch_reward(achieved_goal, "
            "desired_goal) -> reward (see rlstruct.envs.BitFlipEnv)"
        )
    return cast(RewardFn, reward)


def episode_returns(steps: TemporalDictTensor) -> list[float]:
    """The undiscounted return of each row of an "episodes" batch ``[B, T]``: one float per row.

    The rewards ``next/reward`` are summed in float64 over each row's steps
    (the padding after an episode ends is masked out).
    """
    returns = torch.where(steps.mask(), steps["next/reward"].to(torch.float64), 0.0).sum(1)
    return [float(r) for r in returns.tolist()]


@dataclass(frozen=True)
class EvalResult:
    """The returns of one evaluation."""

    env_steps: int
    """The training env steps when the weights were taken."""
    returns: list[float]
    """The undiscounted return of each episode."""

    @property
    def mean(self) -> float:
        """The mean of ``returns``."""
        return sum(self.returns) / len(self.returns)

    @property
    def std(self) -> float:
        """The population standard deviation of ``returns`` (dividing by their number)."""
        m = self.mean
        return math.sqrt(sum((r - m) ** 2 for r in self.returns) / len(self.returns))


class Evaluator:
    """Runs ``n_episodes`` greedy episodes in one worker process, without blocking training.

    Args:
        agent_factory: makes the agent, as for the batchers; the agent must
            read ``agent_info["greedy"]``.
        agent_args: keyword arguments for ``agent_factory``.
        env: the environment id.
        n_episodes: episodes per evaluation (one environment instance each).
        max_steps: the longest episode (the batcher's T).
        seed: environment i of every evaluation is reset with ``seed + i``.
        timeout: seconds an evaluation may take before ``WorkerTimeout``.

    Raises:
        TypeError: if ``n_episodes``, ``max_steps`` or ``seed`` is not an int.
        ValueError: if ``n_episodes`` or ``max_steps`` is below 1, or ``seed``
            below 0 or so large that ``seed + i`` leaves int64.
    """

    def __init__(
        self,
        agent_factory: Callable[..., Agent],
        agent_args: Mapping[str, Any],
        env: str,
        *,
        n_episodes: int,
        max_steps: int,
        seed: int,
        timeout: float = 600.0,
    ) -> None:
        # named as given here, not as the batcher's n_envs and n_timesteps
        check_int("Evaluator", "n_episodes", n_episodes)
        check_int("Evaluator", "max_steps", max_steps)
        seed = check_int("Evaluator", "seed", seed, 0)
        if seed + n_episodes > 2**63:  # the environments' seeds, seed + i, are int64
            raise ValueError(f"Evaluator: seed + n_episodes must be at most 2**63, got {seed} + {n_episodes}")
        self._batcher = MultiprocessBatcher(
            agent_factory,
            agent_args,
            GymEnv,
            {"env": env},
            n_envs=n_episodes,
            n_timesteps=max_steps,
            mode="episodes",
            seed=seed,
            n_processes=1,
            timeout=timeout,
        )
        self._batcher.reset(
            agent_info=DictTensor({"greedy": torch.ones(n_episodes, dtype=torch.bool)}),
            env_info=DictTensor({"seed": seed + torch.arange(n_episodes)}),  # the same episodes every time
        )
        self._pending: int | None = None
        self._closed = False

    @property
    def busy(self) -> bool:
        """An evaluation is running."""
        return self._pending is not None

    def start(self, weights: Mapping[str, torch.Tensor], env_steps: int) -> bool:
        """Start evaluating ``weights`` and return at once; False (and nothing started) if busy.

        Raises:
            TypeError: if ``env_steps`` is not an int.
            ValueError: if ``env_steps`` is negative.
            RuntimeError: if the evaluator is closed.
        """
        env_steps = check_int("Evaluator", "env_steps", env_steps, 0)
        if self._closed:
            raise RuntimeError("Evaluator: closed; make a new one to evaluate again")
        if self._pending is not None:
            return False
        self._batcher.update(weights)
        self._batcher.execute()
        self._pending = env_steps
        return True

    def _result(self, blocking: bool) -> EvalResult | None:
        if self._pending is None:
            return None
        batch = self._batcher.get(blocking=blocking)
        if batch is None:
            return None
        result = EvalResult(self._pending, episode_returns(batch.trajectories))
        self._pending = None
        return result

    def poll(self) -> EvalResult | None:
        """The result of the running evaluation if it is over, else None."""
        return self._result(blocking=False)

    def wait(self) -> EvalResult | None:
        """Wait for the running evaluation (None if none runs)."""
        return self._result(blocking=True)

    def evaluate(self, weights: Mapping[str, torch.Tensor], env_steps: int) -> EvalResult:
        """Evaluate ``weights`` and wait for the result (after any running evaluation).

        Raises:
            TypeError, ValueError, RuntimeError: as ``start``.
        """
        check_int("Evaluator", "env_steps", env_steps, 0)  # before waiting for a running evaluation
        self.wait()
        self.start(weights, env_steps)
        result = self.wait()
        assert result is not None
        return result

    def close(self) -> None:
        """Stop the worker, and any evaluation running with it. Safe to call twice."""
        self._closed, self._pending = True, None
        self._batcher.close()

    def __enter__(self) -> Evaluator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def eval_seed(seed: int) -> int:
    """The seed of evaluation environment 0 of a run seeded ``seed``; environment i gets it + i.

    A stream of its own (``derive_seed(seed, "eval")``): evaluations never replay
    training episodes, nor the evaluations of a run with another seed.
    """
    return derive_seed(seed, "eval")
