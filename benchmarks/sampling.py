"""Sampling throughput: rlstruct's batchers against gymnasium's vector environments and the floor.

Every row drives CartPole-v1 with the same policy (an MLP 4-64-64-2, softmax
and ``torch.multinomial`` sampling, one call per step for all environments
of a process) and reports real transitions per second: a step of gymnasium's
vector environments that only resets an environment which ended at the
previous step (its "next step" auto-reset) is not counted. Every row runs
the same number of transitions, and the repeats are interleaved (one
measurement of every row per repeat) so that a noisy machine hits all rows
alike; the median is reported.

- The floor is measured, not computed: ``n_processes`` processes at once,
  each stepping ``n_envs`` ``gymnasium.make`` environments with the policy
  in the loop and resetting the ones that ended, storing nothing and
  exchanging nothing. A batcher cannot beat it; how close it comes is its
  overhead.
- ``MultiprocessBatcher`` 2 x 8 against its floor (target 0.9) and
  ``SyncVectorEnv(16)``; 2 x 64 against its floor (target 0.95);
  ``LocalBatcher(16)`` against ``SyncVectorEnv(16)`` (target 1.3);
  ``AsyncVectorEnv(16)`` for reference.
- The time from constructing a 2 x 8 batcher to its first batch, with the
  default start method (target 1 s) and with "spawn".
- A Bullet row (HalfCheetahBulletEnv-v0, 2 x 4) against its floor (target
  0.95), when the ``bullet`` extra is installed.
- ``MultiprocessBatcher`` 2 x 8 in "stream" mode against the 2 x 8 floor.
- EnvPool's C++ CartPole-v1, 16 environments stepped synchronously on one
  thread per core, driven by the same policy (the batcher's target is 1.2x
  it), when ``envpool`` is installed.
- 84x84x4 uint8 observations (``FramesEnv``, whose step costs next to
  nothing), 2 x 4: the floor, ``AsyncVectorEnv(8)`` with shared memory (the
  batcher's target is 3x it), and the batcher with the "full" and the
  "compact" storage layout.

``--plot PATH`` also draws the steps/s rows as a horizontal bar chart, one
panel per environment, the floors hatched in grey; ``--from-json JSON``
draws it from the rows of an earlier ``--json`` instead of measuring.

Usage:
    python benchmarks/sampling.py [--quick] [--repeats N] [--json PATH] [--plot PATH]
    python benchmarks/sampling.py --from-json JSON --plot PATH
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import multiprocessing
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from _common import Row, parse_args, report

from rlstruct import Agent, DictTensor, GymEnv, LocalBatcher, MultiprocessBatcher, TemporalDictTensor

T = 64


class FramesEnv(gym.Env[np.ndarray, np.int64]):
    """An Atari-sized environment whose step costs nearly nothing: 84x84x4 uint8 frames, 100-step episodes.

    Each step returns one of 16 frames made at construction (a copy, as a
    real environment returns a new array), so that the rows measure moving
    the observations, not making them.
    """

    observation_space = gym.spaces.Box(0, 255, (84, 84, 4), np.uint8)
    action_space = gym.spaces.Discrete(4)

    def __init__(self) -> None:
        self.frames = np.random.default_rng(0).integers(0, 256, (16, 84, 84, 4), dtype=np.uint8)
        self.t = 0

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.t = 0
        return self.frames[0].copy(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self.t += 1
        return self.frames[self.t % 16].copy(), 1.0, False, self.t >= 100, {}


class MLPAgent(Agent):
    """The policy every row uses: an MLP and categorical sampling (or a tanh Gaussian for Box actions)."""

    def __init__(
        self, n_inputs: int = 4, n_actions: int = 2, continuous: bool = False, pixels: bool = False
    ) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.continuous = continuous
        self.pixels = pixels  # frames [B, 84, 84, 4] uint8, read every 8th pixel: 11 x 11 x 4 inputs
        self.net = torch.nn.Sequential(
            torch.nn.Linear(n_inputs, 64),
            torch.nn.Tanh(),
            torch.nn.Linear(64, 64),
            torch.nn.Tanh(),
            torch.nn.Linear(64, n_actions),
        )

    def act(self, observation: torch.Tensor) -> torch.Tensor:
        if self.pixels:
            observation = observation[:, ::8, ::8, :].flatten(1).float() / 255
        out = self.net(observation)
        if self.continuous:
            return torch.tanh(out + torch.randn(out.shape, generator=self.generator))
        return torch.multinomial(torch.softmax(out, -1), 1, generator=self.generator).squeeze(1)

    def forward(
        self,
        state: DictTensor,
        observation: DictTensor,
        agent_info: DictTensor,
        history: TemporalDictTensor | None = None,
    ) -> tuple[DictTensor, DictTensor]:
        return DictTensor({"action": self.act(observation["observation"])}), state


def vector_env_rate(envs: gym.vector.VectorEnv, agent: MLPAgent, transitions: int) -> float:
    """Real transitions per second of a gymnasium vector env driven by ``agent``, filling [B, T] tensors.

    With gymnasium's "next step" auto-reset, the step after an episode ended
    only resets that environment: it is stored (as a user of the vector env
    must) but not counted.
    """
    n = envs.num_envs
    shape = envs.single_observation_space.shape or ()
    obs_dtype = torch.from_numpy(np.zeros(0, envs.single_observation_space.dtype)).dtype
    obs_buf = torch.zeros((n, T, *shape), dtype=obs_dtype)
    act_buf = torch.zeros((n, T, *(envs.single_action_space.shape or ())))
    rew_buf, done_buf = torch.zeros(n, T), torch.zeros(n, T, dtype=torch.bool)
    observation, _ = envs.reset(seed=0)
    ended = np.zeros(n, dtype=bool)
    counted = 0
    start = time.perf_counter()
    with torch.no_grad():
        while counted < transitions:
            for t in range(T):
                obs = torch.from_numpy(observation)  # float32, or uint8 frames the agent reads itself
                action = agent.act(obs)
                observation, reward, terminated, truncated, _ = envs.step(action.numpy())
                obs_buf[:, t] = obs
                act_buf[:, t] = action
                rew_buf[:, t] = torch.from_numpy(reward)
                done_buf[:, t] = torch.from_numpy(terminated | truncated)
                counted += n - int(ended.sum())  # the rows that only reset are not transitions
                ended = terminated | truncated
    return counted / (time.perf_counter() - start)


class EnvPoolVector:
    """EnvPool's C++ CartPole-v1, stepped synchronously (batch size = n_envs), seen as a gymnasium vector env.

    EnvPool resets an environment at the step after it ended, as gymnasium
    does, so ``vector_env_rate`` counts its real transitions the same way.
    """

    def __init__(self, n_envs: int, threads: int) -> None:
        import envpool

        self.num_envs = n_envs
        self.envs = envpool.make(
            "CartPole-v1",
            env_type="gymnasium",
            num_envs=n_envs,
            batch_size=n_envs,
            num_threads=threads,
            seed=0,
        )
        self.single_observation_space = self.envs.observation_space
        self.single_action_space = self.envs.action_space

    def reset(self, seed: int | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        return self.envs.reset()

    def step(self, actions: np.ndarray) -> tuple[Any, ...]:
        return self.envs.step(actions)

    def close(self) -> None:
        self.envs.close()


def batcher_rate(batcher: Any, transitions: int) -> float:
    """Transitions per second of a batcher that is reset and warm: every row of every step is one."""
    batches = max(1, transitions // (batcher.n_elems() * T))
    start = time.perf_counter()
    for _ in range(batches):
        batcher.execute()
        batcher.get()
    return batcher.n_elems() * T * batches / (time.perf_counter() - start)


def stream_rate(batcher: Any, transitions: int) -> float:
    """Transitions per second of a "stream" batcher, from a reset (no slot filled while others ran)."""
    gets = max(1, transitions // (batcher.n_elems() * T))
    batcher.reset()  # stops the workers, frees every slot and starts streaming again
    start = time.perf_counter()
    for _ in range(gets):
        batcher.get()
    return batcher.n_elems() * T * gets / (time.perf_counter() - start)


def _floor_process(
    env_id: str | Callable[[], gym.Env[Any, Any]],
    agent_args: dict[str, Any],
    n_envs: int,
    steps: int,
    go: Any,
    out: Any,
) -> None:
    """One process of the floor: ``n_envs`` environments and the policy, nothing stored, nothing sent."""
    torch.set_num_threads(1)
    agent = MLPAgent(**agent_args)
    agent.seed(0)
    envs = [gym.make(env_id) if isinstance(env_id, str) else env_id() for _ in range(n_envs)]
    observations = [env.reset(seed=i)[0] for i, env in enumerate(envs)]
    go.wait()
    out.put(bare_loop(agent, envs, observations, steps))


def bare_loop(agent: MLPAgent, envs: list[gym.Env[Any, Any]], observations: list[Any], steps: int) -> float:
    """Seconds for ``steps`` steps of ``envs`` with the policy in the loop, the ended ones reset, nothing stored."""
    start = time.perf_counter()
    with torch.no_grad():
        for _ in range(steps):
            actions = agent.act(torch.from_numpy(np.stack(observations))).numpy()
            for i, env in enumerate(envs):
                observation, _, terminated, truncated, _ = env.step(actions[i])
                observations[i] = env.reset()[0] if terminated or truncated else observation
    return time.perf_counter() - start


def floor_rate(
    env_id: str | Callable[[], gym.Env[Any, Any]],
    agent_args: dict[str, Any],
    n_processes: int,
    n_envs: int,
    transitions: int,
) -> float:
    """Transitions per second of ``n_processes`` processes stepping ``n_envs`` environments with the policy."""
    ctx = multiprocessing.get_context("fork")  # only gymnasium and the policy: nothing threaded to fear
    go, out = ctx.Event(), ctx.Queue()
    steps = max(1, transitions // (n_processes * n_envs))
    processes = [
        ctx.Process(target=_floor_process, args=(env_id, agent_args, n_envs, steps, go, out))
        for _ in range(n_processes)
    ]
    for process in processes:
        process.start()
    go.set()
    elapsed = max(out.get(timeout=600) for _ in processes)
    for process in processes:
        process.join()
    return n_processes * n_envs * steps / elapsed


def interleaved(measures: dict[str, Callable[[], float]], repeats: int) -> dict[str, float]:
    """The median of each measure over ``repeats`` rounds, each round measuring every one once."""
    samples: dict[str, list[float]] = {name: [] for name in measures}
    for _ in range(repeats):
        for name, measure in measures.items():
            samples[name].append(measure())
    return {name: statistics.median(values) for name, values in samples.items()}


def image_rows(transitions: int, repeats: int) -> list[Row]:
    """84x84x4 uint8 frames, 2 x 4: the floor, AsyncVectorEnv(8) with shared memory, both layouts."""
    pixels = {"n_inputs": 11 * 11 * 4, "n_actions": 4, "pixels": True}
    weights = MLPAgent(**pixels).state_dict()
    frames = {"env": FramesEnv}
    with contextlib.ExitStack() as opened:  # whatever was made is closed, even if a later one fails
        batchers = {
            layout: opened.enter_context(
                MultiprocessBatcher(
                    MLPAgent, pixels, GymEnv, frames, n_envs=4, n_timesteps=T, weights=weights, layout=layout
                )
            )
            for layout in ("full", "compact")
        }
        async_ = gym.vector.AsyncVectorEnv([FramesEnv] * 8, shared_memory=True)
        opened.callback(async_.close)
        for batcher in batchers.values():
            batcher.reset()
            batcher.execute()
            batcher.get()
        rates = interleaved(
            {
                "floor": lambda: floor_rate(FramesEnv, pixels, 2, 4, transitions),
                "async": lambda: vector_env_rate(async_, MLPAgent(**pixels), transitions),
                "full": lambda: batcher_rate(batchers["full"], transitions),
                "compact": lambda: batcher_rate(batchers["compact"], transitions),
            },
            repeats,
        )
    return [
        Row("84x84x4 floor: 2 processes x 4 envs + policy", rates["floor"], "steps/s", higher_is_better=True),
        Row("84x84x4 AsyncVectorEnv(8), shared memory", rates["async"], "steps/s", higher_is_better=True),
        Row(
            "84x84x4 Multiprocess 2 x 4 vs Async(8)",
            rates["full"],
            "steps/s",
            rates["async"],
            3.0,
            higher_is_better=True,
        ),
        Row(
            "84x84x4 Multiprocess 2 x 4 vs its floor",
            rates["full"],
            "steps/s",
            rates["floor"],
            higher_is_better=True,
        ),
        Row(
            "84x84x4 Multiprocess 2 x 4 compact vs full",
            rates["compact"],
            "steps/s",
            rates["full"],
            higher_is_better=True,
        ),
        Row(
            "84x84x4 Multiprocess 2 x 4 compact vs its floor",
            rates["compact"],
            "steps/s",
            rates["floor"],
            higher_is_better=True,
        ),
    ]


PANELS = (("HalfCheetah ", "HalfCheetahBulletEnv-v0, 2 x 4"), ("84x84x4 ", "84x84x4 frames, 2 x 4"))
"""Row-name prefixes with a panel of their own; every other row is CartPole-v1's."""

KIND_COLOURS = {"floor": "0.6", "gymnasium": "C1", "EnvPool": "C2", "rlstruct": "C0"}


def bars(
    rows: list[dict[str, Any]],
    panels_by_prefix: tuple[tuple[str, str], ...] = PANELS,
    first: str = "CartPole-v1",
) -> dict[str, list[tuple[str, float, str]]]:
    """The chart's bars, by panel title: ``(label, steps/s, kind)``, in the order of ``rows``.

    Only the rows in steps/s are drawn. ``kind`` is ``"floor"``,
    ``"gymnasium"`` (a vector environment), ``"EnvPool"`` or ``"rlstruct"``. A measurement
    reported against two baselines (``X vs its floor``, ``X vs Sync(16)``) is
    one bar, labelled ``X``. A row whose name starts with a prefix of
    ``panels_by_prefix`` goes to that panel, the prefix dropped; the others
    to the panel ``first``.
    """
    panels: dict[str, list[tuple[str, float, str]]] = {first: []}
    for row in rows:
        if row["unit"] != "steps/s":
            continue
        name = str(row["name"])
        title = first
        for prefix, panel in panels_by_prefix:
            if name.startswith(prefix):
                name, title = name.removeprefix(prefix), panel
        label = name.partition(" vs ")[0]
        if label.startswith("floor:"):
            kind = "floor"
        elif "VectorEnv" in label and not label.startswith(("LocalBatcher", "Multiprocess")):
            kind = "gymnasium"
        else:
            kind = "EnvPool" if label.startswith("EnvPool") else "rlstruct"
        shown = panels.setdefault(title, [])
        if all(label != other for other, _, _ in shown):
            shown.append((label, float(row["value"]), kind))
    return {title: shown for title, shown in panels.items() if shown}


def plot(
    rows: list[dict[str, Any]],
    path: Path,
    panels_by_prefix: tuple[tuple[str, str], ...] = PANELS,
    first: str = "CartPole-v1",
) -> Path:
    """Draw the steps/s rows of ``rows`` (the ``--json`` records) as horizontal bars into ``path``.

    Raises:
        ValueError: if no row is in steps/s.
    """
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    panels = bars(rows, panels_by_prefix, first)
    if not panels:
        raise ValueError("plot: no row is in steps/s, nothing to draw")
    counts = [len(shown) for shown in panels.values()]
    present = {kind for shown in panels.values() for _, _, kind in shown}
    figure = Figure(figsize=(8.0, 1.0 + 0.32 * sum(counts) + 0.5 * len(counts)), layout="constrained")
    axes_list = figure.subplots(len(panels), 1, squeeze=False, height_ratios=counts)[:, 0]
    for axes, (title, shown) in zip(axes_list, panels.items(), strict=True):
        labels, values, kinds = zip(*shown, strict=True)
        drawn = axes.barh(
            range(len(shown)),
            values,
            color=[KIND_COLOURS[k] for k in kinds],
            hatch=["//" if k == "floor" else "" for k in kinds],
        )
        axes.bar_label(drawn, labels=[f"{v:,.0f}" for v in values], padding=3, fontsize="small")
        axes.set_yticks(range(len(shown)), labels)
        axes.invert_yaxis()  # the first row on top, as in the table
        axes.set_xlim(0, max(values) * 1.18)  # room for the figures after the bars
        axes.set_title(title, fontsize="medium", loc="left")
        axes.grid(axis="x", alpha=0.3)
    axes_list[-1].set_xlabel("real transitions per second (steps/s)")
    figure.legend(
        handles=[Patch(facecolor=KIND_COLOURS["floor"], hatch="//", label="floor (no batcher)")]
        + [
            Patch(color=KIND_COLOURS[k], label=k)
            for k in ("gymnasium", "EnvPool", "rlstruct")
            if k in present
        ],
        loc="outside lower center",
        ncols=4,
        fontsize="small",
    )
    figure.savefig(path)
    return path


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of a ``--json`` file, checked to be a list of objects with a name, a value and a unit."""
    rows = json.loads(path.read_text())
    if not isinstance(rows, list) or not all(
        isinstance(r, dict) and {"name", "value", "unit"} <= set(r) for r in rows
    ):
        raise ValueError(
            f"--from-json: {str(path)!r} must hold a list of rows with a name, a value and a unit, "
            "as --json writes"
        )
    return rows


def _plot_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--plot", type=Path, metavar="PATH", help="also draw the steps/s rows into PATH")
    parser.add_argument(
        "--from-json",
        type=Path,
        metavar="JSON",
        help="draw --plot from the rows of an earlier --json file instead of measuring",
    )


def main() -> None:
    args, budget = parse_args(__doc__, default_repeats=3, extra=_plot_options)
    if args.from_json is not None:
        if args.plot is None:
            sys.exit("sampling.py: --from-json JSON needs --plot PATH (the image to draw)")
        try:
            print(f"wrote {plot(read_rows(args.from_json), args.plot)}")
        except (OSError, ValueError) as error:
            sys.exit(f"sampling.py: {error}")
        return
    torch.set_num_threads(1)
    quick = args.quick
    transitions = 4096 if quick else 65536  # per row and repeat
    repeats = 1 if quick else budget.repeats
    cores = len(os.sched_getaffinity(0))
    cartpole = {"env": "CartPole-v1"}
    agent = MLPAgent()
    weights = agent.state_dict()  # every batcher acts with the same policy as the vector envs
    n_async = 2 if quick else 16  # each AsyncVectorEnv instance is a process: keep the smoke run short

    with contextlib.ExitStack() as opened:  # whatever was made is closed, even if a later one fails
        start = time.perf_counter()
        mp8 = opened.enter_context(
            MultiprocessBatcher(
                MLPAgent, {}, GymEnv, cartpole, n_envs=8, n_timesteps=T, n_processes=2, weights=weights
            )
        )
        mp8.reset()
        mp8.execute()
        mp8.get()
        first_batch = time.perf_counter() - start
        print(f"the default start method chose {mp8.start_method!r}")
        start = time.perf_counter()
        with MultiprocessBatcher(
            MLPAgent, {}, GymEnv, cartpole, n_envs=8, n_timesteps=T, weights=weights, start_method="spawn"
        ) as spawned:
            spawned.reset()
            spawned.execute()
            spawned.get()
            first_batch_spawn = time.perf_counter() - start
        mp64 = opened.enter_context(
            MultiprocessBatcher(
                MLPAgent, {}, GymEnv, cartpole, n_envs=64, n_timesteps=T, n_processes=2, weights=weights
            )
        )
        stream8 = opened.enter_context(
            MultiprocessBatcher(
                MLPAgent,
                {},
                GymEnv,
                cartpole,
                n_envs=8,
                n_timesteps=T,
                n_processes=2,
                weights=weights,
                mode="stream",
            )
        )
        local = opened.enter_context(
            LocalBatcher(MLPAgent, {}, GymEnv, cartpole, n_envs=16, n_timesteps=T, weights=weights)
        )
        sync = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * 16)
        opened.callback(sync.close)
        async_ = gym.vector.AsyncVectorEnv([lambda: gym.make("CartPole-v1")] * n_async)
        opened.callback(async_.close)
        measures: dict[str, Callable[[], float]] = {}
        if importlib.util.find_spec("envpool") is not None:
            pool = EnvPoolVector(16, threads=cores)
            opened.callback(pool.close)
            measures["envpool"] = lambda: vector_env_rate(pool, agent, transitions)  # type: ignore[arg-type]
        else:
            print("envpool is not installed: no EnvPool row")
        for batcher in (mp64, local):
            batcher.reset()
            batcher.execute()
            batcher.get()  # warm: buffers allocated, workers running
        stream8.reset()
        stream8.get()
        rates = interleaved(
            {
                "floor 2 x 8": lambda: floor_rate("CartPole-v1", {}, 2, 8, transitions),
                "floor 2 x 64": lambda: floor_rate("CartPole-v1", {}, 2, 64, transitions),
                "sync": lambda: vector_env_rate(sync, agent, transitions),
                "async": lambda: vector_env_rate(async_, agent, transitions),
                "local": lambda: batcher_rate(local, transitions),
                "mp8": lambda: batcher_rate(mp8, transitions),
                "mp64": lambda: batcher_rate(mp64, transitions),
                "stream8": lambda: stream_rate(stream8, transitions),
                **measures,
            },
            repeats,
        )

    rows = [
        Row("floor: 2 processes x 8 envs + policy", rates["floor 2 x 8"], "steps/s", higher_is_better=True),
        Row("floor: 2 processes x 64 envs + policy", rates["floor 2 x 64"], "steps/s", higher_is_better=True),
        Row("gymnasium SyncVectorEnv(16)", rates["sync"], "steps/s", higher_is_better=True),
        Row(f"gymnasium AsyncVectorEnv({n_async})", rates["async"], "steps/s", higher_is_better=True),
        Row(
            "LocalBatcher 16 envs vs Sync(16)",
            rates["local"],
            "steps/s",
            rates["sync"],
            1.3,
            higher_is_better=True,
        ),
        Row(
            "Multiprocess 2 x 8 vs its floor",
            rates["mp8"],
            "steps/s",
            rates["floor 2 x 8"],
            0.9,
            higher_is_better=True,
        ),
        Row("Multiprocess 2 x 8 vs Sync(16)", rates["mp8"], "steps/s", rates["sync"], higher_is_better=True),
        Row(
            "Multiprocess 2 x 8 stream vs its floor",
            rates["stream8"],
            "steps/s",
            rates["floor 2 x 8"],
            higher_is_better=True,
        ),
        Row(
            "Multiprocess 2 x 64 vs its floor",
            rates["mp64"],
            "steps/s",
            rates["floor 2 x 64"],
            0.95,
            higher_is_better=True,
        ),
        *(
            [
                Row(
                    f"EnvPool 16 envs sync ({cores} threads)",
                    rates["envpool"],
                    "steps/s",
                    higher_is_better=True,
                ),
                Row(
                    "Multiprocess 2 x 8 vs EnvPool(16)",
                    rates["mp8"],
                    "steps/s",
                    rates["envpool"],
                    1.2,
                    higher_is_better=True,
                ),
            ]
            if "envpool" in rates
            else []
        ),
        # the target is 1 s: against a baseline of 1 s, the ratio must stay at most 1
        Row("first batch of 2 x 8 after construction", first_batch, "s", 1.0, 1.0),
        Row("first batch of 2 x 8 after construction, spawn", first_batch_spawn, "s"),
    ]

    try:
        import pybullet_envs_gymnasium  # noqa: F401  (registers the Bullet environments)
    except ImportError:
        print("pybullet_envs_gymnasium is not installed: no Bullet row")
    else:
        cheetah = "pybullet_envs_gymnasium:HalfCheetahBulletEnv-v0"
        bullet_args = {"n_inputs": 26, "n_actions": 6, "continuous": True}
        budget_bullet = transitions // 8  # a Bullet step costs some 30 CartPole steps
        with MultiprocessBatcher(
            MLPAgent,
            bullet_args,
            GymEnv,
            {"env": cheetah},
            n_envs=4,
            n_timesteps=T,
            n_processes=2,
            weights=MLPAgent(**bullet_args).state_dict(),
        ) as bullet:
            bullet.reset()
            bullet.execute()
            bullet.get()
            cheetah_rates = interleaved(
                {
                    "floor": lambda: floor_rate(cheetah, bullet_args, 2, 4, budget_bullet),
                    "mp": lambda: batcher_rate(bullet, budget_bullet),
                },
                repeats,
            )
        rows.append(
            Row(
                "HalfCheetah floor: 2 processes x 4 envs + policy",
                cheetah_rates["floor"],
                "steps/s",
                higher_is_better=True,
            )
        )
        rows.append(
            Row(
                "HalfCheetah Multiprocess 2 x 4 vs its floor",
                cheetah_rates["mp"],
                "steps/s",
                cheetah_rates["floor"],
                0.95,
                higher_is_better=True,
            )
        )
    rows += image_rows(transitions // 8, repeats)
    if importlib.util.find_spec("torchrl") is not None:
        print("torchrl is installed, but this benchmark has no row for it yet")

    print(
        f"CartPole-v1, T = {T}, {cores} cores, torch {torch.__version__}, {transitions} transitions "
        f"per row, median of {repeats} interleaved repeats\n"
    )
    report(args, rows, "rlstruct", "baseline")
    if args.plot is not None:
        print(f"wrote {plot([row.to_json() for row in rows], args.plot)}")


if __name__ == "__main__":
    main()
