"""A greedy episode recorded as frames, and frames written to an animated GIF.

``record_episode`` plays one greedy episode the way an evaluation plays its
episodes: the same batcher code in "episodes" mode (here the in-process twin,
``LocalBatcher``, so that the frames stay in this process), every row greedy,
the environment reset with a given seed. The environment is made with
``render_mode="rgb_array"`` and a frame is taken after the reset and after
every step. Given the seed of an evaluation's environment i, it plays that
environment's episode: the same actions, the same return.

``save_gif`` writes frames to an animated GIF with Pillow.
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from rlstruct.agent import Agent
from rlstruct.algos.evaluation import episode_returns
from rlstruct.batchers import LocalBatcher
from rlstruct.dicttensor import DictTensor
from rlstruct.gym_env import GymEnv, resolve_env

__all__ = ["CannotRender", "Recording", "check_renders", "record_episode", "save_gif"]

DEFAULT_FPS = 30.0
"""Frames per second of an environment whose metadata declares no ``render_fps``."""


class CannotRender(ValueError):
    """An environment that cannot render ``rgb_array`` frames, and why, in one line.

    Attributes:
        env: the environment as given.
    """

    def __init__(self, env: str, reason: str) -> None:
        super().__init__(f"environment {env!r} cannot render rgb_array frames: {reason}")
        self.env = env


@dataclass(frozen=True)
class Recording:
    """One episode's frames and return."""

    frames: list[np.ndarray[Any, np.dtype[np.uint8]]]
    """uint8 frames ``[H, W, 3]``: one after the reset, then one after each step."""
    episode_return: float
    """The undiscounted return of the episode."""
    fps: float
    """The environment's ``render_fps`` (``DEFAULT_FPS`` if it declares none)."""


def _one_line(error: BaseException) -> str:
    """``error`` as one line: its type and message, without line breaks or terminal colours."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(error))  # gymnasium colours its warnings
    return f"{type(error).__name__}: {' '.join(text.split())}"


def _rendering_maker(env: str) -> Callable[..., gym.Env[Any, Any]]:
    """What makes instances of ``env`` that render ``rgb_array`` frames (for ``GymEnv``'s factory)."""
    maker = resolve_env(env)

    def make(**kwargs: Any) -> gym.Env[Any, Any]:
        if isinstance(maker, str):
            return gym.make(maker, render_mode="rgb_array", **kwargs)
        return maker(render_mode="rgb_array", **kwargs)

    return make


def check_renders(env: str, seed: int = 0) -> float:
    """Make ``env`` with ``render_mode="rgb_array"``, render its first frame, and return its frames per second.

    Args:
        env: the environment id (or ``"module:factory"``, which must accept
            ``render_mode``).
        seed: the seed of the reset before the frame.

    Returns:
        The environment's ``render_fps`` (``DEFAULT_FPS`` if it declares none).

    Raises:
        CannotRender: (a ValueError) if the environment does not list
            ``rgb_array`` among its render modes, ignores ``render_mode``,
            fails to render (a missing dependency such as pygame, say) or
            renders something other than uint8 ``[H, W, 3]`` frames; the
            message says which, in one line.
    """
    make = _rendering_maker(env)
    try:
        with warnings.catch_warnings():
            # gymnasium only warns when the render mode is not one the environment lists
            warnings.filterwarnings("error", message=".*render_mode")
            instance = make()
    except Exception as error:
        raise CannotRender(env, _one_line(error)) from error
    try:
        if instance.render_mode != "rgb_array":
            raise CannotRender(env, f"it was made with render_mode={instance.render_mode!r}")
        try:
            instance.reset(seed=seed)
            frame = instance.render()
        except Exception as error:
            raise CannotRender(env, _one_line(error)) from error
        if not (isinstance(frame, np.ndarray) and frame.dtype == np.uint8 and frame.ndim == 3):
            shown = (
                f"an array {frame.dtype} {list(frame.shape)}"
                if isinstance(frame, np.ndarray)
                else repr(frame)
            )
            raise CannotRender(env, f"render() returned {shown}, expected uint8 frames [H, W, 3]")
        return float(instance.metadata.get("render_fps") or DEFAULT_FPS)
    finally:
        instance.close()


class _FrameRecorder(gym.Wrapper[Any, Any, Any, Any]):
    """Appends ``render()`` to ``frames`` after every reset and step."""

    def __init__(self, env: gym.Env[Any, Any], frames: list[np.ndarray[Any, np.dtype[np.uint8]]]) -> None:
        super().__init__(env)
        self._frames = frames

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        result = self.env.reset(**kwargs)
        self._frames.append(np.asarray(self.env.render(), dtype=np.uint8))
        return result

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict[str, Any]]:
        result = self.env.step(action)
        self._frames.append(np.asarray(self.env.render(), dtype=np.uint8))
        return result


def record_episode(
    agent_factory: Callable[..., Agent],
    agent_args: Mapping[str, Any],
    weights: Mapping[str, torch.Tensor],
    env: str,
    *,
    seed: int,
    max_steps: int,
) -> Recording:
    """Play one greedy episode of ``env``, reset with ``seed``, and keep its frames.

    Args:
        agent_factory: makes the agent, as for the batchers; it must read
            ``agent_info["greedy"]``.
        agent_args: keyword arguments for ``agent_factory``.
        weights: the state dict the agent loads (CPU tensors).
        env: the environment id (or ``"module:factory"``); it is made with
            ``render_mode="rgb_array"``.
        seed: the seed of the reset (and of the agent's generator). The
            evaluator's environment i is reset with its ``seed + i``: the
            same seed here plays the same episode.
        max_steps: the longest episode (the batcher's T).

    Returns:
        The frames (uint8 ``[H, W, 3]``, episode length + 1 of them), the
        episode's return and the environment's frames per second.

    Raises:
        CannotRender: (a ValueError) if ``env`` cannot render ``rgb_array``
            frames (see ``check_renders``), before any episode is played.
    """
    fps = check_renders(env, seed)
    frames: list[np.ndarray[Any, np.dtype[np.uint8]]] = []
    make = _rendering_maker(env)

    def recorded(**kwargs: Any) -> gym.Env[Any, Any]:
        return _FrameRecorder(make(**kwargs), frames)

    with LocalBatcher(
        agent_factory,
        agent_args,
        GymEnv,
        {"env": recorded},
        n_envs=1,
        n_timesteps=max_steps,
        mode="episodes",
        seed=seed,
        weights=weights,
    ) as batcher:
        batcher.reset(
            agent_info=DictTensor({"greedy": torch.ones(1, dtype=torch.bool)}),
            env_info=DictTensor({"seed": torch.tensor([seed])}),
        )
        batcher.execute()
        steps = batcher.get().trajectories
    # GymEnv steps no instance whose episode is over: a frame after the reset, then one per step
    return Recording(frames, episode_returns(steps)[0], fps)


def save_gif(
    frames: Sequence[np.ndarray[Any, np.dtype[np.uint8]]], path: str | os.PathLike[str], *, fps: float
) -> Path:
    """Write ``frames`` (uint8 ``[H, W, 3]``) to an animated GIF at ``path``, looping, at ``fps`` frames per second.

    GIF frame times are multiples of 10 ms, so the rate is rounded to the
    nearest such time per frame. Consecutive identical frames may be merged
    into one longer frame (Pillow does it).

    Returns:
        The path written.

    Raises:
        ValueError: if ``frames`` is empty or ``fps`` is not positive.
        ImportError: if Pillow is missing (it comes with matplotlib, a dependency).
    """
    if len(frames) == 0:
        raise ValueError("save_gif: frames must hold at least one frame, got none")
    if not fps > 0:
        raise ValueError(f"save_gif: fps must be positive, got {fps!r}")
    try:
        from PIL import Image
    except ImportError as error:
        raise ImportError("save_gif needs Pillow: pip install pillow") from error
    images = [Image.fromarray(np.asarray(frame, dtype=np.uint8)) for frame in frames]
    path = Path(path)
    duration = max(10, round(100 / fps) * 10)  # milliseconds per frame, in the GIF's 10 ms units
    images[0].save(path, format="GIF", save_all=True, append_images=images[1:], duration=duration, loop=0)
    return path
