"""CartPole makers for the tests of ``rlstruct eval --gif``, importable by worker processes (see ``mp_helpers``).

CartPole draws its frames with pygame, an optional dependency of gymnasium;
``make_drawn_cartpole`` draws them with numpy instead, so that recording a GIF
is tested wherever the tests run. Both makers give CartPole-v1 itself: the
same spaces, dynamics and time limit, hence the same agent and the same
episodes.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

HEIGHT, WIDTH = 40, 60
"""The size of a drawn frame, in pixels."""


class DrawnCartPole(gym.Wrapper[Any, Any, Any, Any]):
    """CartPole-v1 whose ``render()`` draws the cart (a black block) and the pole (a red line) with numpy."""

    def __init__(self, env: gym.Env[Any, Any], render_mode: str | None) -> None:
        super().__init__(env)
        self.metadata = {"render_modes": ["rgb_array"], "render_fps": 50}
        self._render_mode = render_mode

    @property
    def render_mode(self) -> str | None:  # type: ignore[override]
        return self._render_mode

    def render(self) -> np.ndarray[Any, np.dtype[np.uint8]]:
        x, _, angle, _ = self.env.unwrapped.state  # type: ignore[attr-defined]
        frame = np.full((HEIGHT, WIDTH, 3), 255, dtype=np.uint8)
        column = int(np.clip((x + 2.4) / 4.8 * (WIDTH - 1), 0, WIDTH - 1))
        frame[30:34, max(column - 3, 0) : column + 4] = 0
        for r in range(20):
            row = 30 - round(r * np.cos(angle))
            frame[row, int(np.clip(column + round(r * np.sin(angle)), 0, WIDTH - 1))] = (200, 0, 0)
        return frame


def make_drawn_cartpole(render_mode: str | None = None) -> gym.Env[Any, Any]:
    """CartPole-v1 that renders ``rgb_array`` frames without pygame."""
    return DrawnCartPole(gym.make("CartPole-v1"), render_mode)


def make_blind_cartpole(render_mode: str | None = None) -> gym.Env[Any, Any]:
    """CartPole-v1 made without a render mode whatever it is asked: it cannot render."""
    return gym.make("CartPole-v1")
