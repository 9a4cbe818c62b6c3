"""Wire compression: when lz4 or zstd pays for what it costs, per payload.

For each payload, each codec of ``rlstruct.distributed.codec`` is timed on a
round trip ``unpack(pack(x, codec))`` (median, side by side with codec
"none", which only copies the bytes once) and its compressed size measured.
Sending ``raw`` bytes at a bandwidth W takes ``raw / W``; compressing takes
``compressed / W + extra``, where ``extra`` is the round trip's time over
"none". Compression pays below the break-even bandwidth
``(raw - compressed) / extra``, reported in MB/s (1 MB = 1e6 bytes;
1 Gbit/s Ethernet carries about 118 MB/s of payload, 10 Gbit/s about 1180).

Payloads:

- ``gradients``: the gradients of ``ActorCritic(obs_dim=4, n_actions=2,
  hidden=(64, 64))`` after one backward pass of a policy-gradient loss on
  the rollout below, as one flat float32 tensor (what a gradient worker sends).
- ``cartpole rollout``: a PPO rollout of CartPole-v1 from ``LocalBatcher``
  (that ActorCritic as agent, ``GymEnv``, 8 envs x 32 steps, fixed mode),
  the whole ``Trajectories``.
- ``image rollout``: a ``TemporalDictTensor`` of uint8 frames [8, 32, 84, 84]
  (Atari-like: a constant background and playfield, paddles and a ball that
  move), with int64 actions and float32 rewards.

Rows: the compressed size (kB) against the raw size, the round trip (us)
against codec "none", and the break-even bandwidth (MB/s). Codecs whose
package is missing (``pip install "rlstruct[ray]"``) are left out.

Usage:
    python benchmarks/compression.py [--quick] [--repeats N] [--json PATH]
"""

from __future__ import annotations

import os
from typing import Any

import torch
from _common import Budget, Row, compare, parse_args, print_table, write_json

from rlstruct import GymEnv, LocalBatcher, TemporalDictTensor, Trajectories
from rlstruct.distributed.codec import check_codec, pack, unpack
from rlstruct.learning.actor_critic import ActorCritic

AGENT_ARGS: dict[str, Any] = {"obs_dim": 4, "n_actions": 2, "hidden": (64, 64)}
RESOLUTION = 1e-6  # s: the smallest extra time a round trip is credited with


def cartpole_rollout() -> Trajectories:
    policy = ActorCritic(**AGENT_ARGS)
    with LocalBatcher(
        ActorCritic,
        AGENT_ARGS,
        GymEnv,
        {"env": "CartPole-v1"},
        n_envs=8,
        n_timesteps=32,
        mode="fixed",
        weights=policy.state_dict(),
    ) as batcher:
        batcher.reset()
        batcher.execute()
        batch = batcher.get()
    return batch


def gradients(rollout: Trajectories) -> torch.Tensor:
    """One flat float32 gradient of a policy-gradient + value loss over the rollout."""
    torch.manual_seed(0)
    model = ActorCritic(**AGENT_ARGS)
    steps = rollout.trajectories
    x, _ = model.features(steps["observation"].flatten(0, 1))
    logits, value = model.heads(x)
    reward = steps["next/reward"].flatten()
    log_prob = model.log_prob(logits, steps["action"].flatten())
    loss = -(log_prob * (reward - value.detach())).mean() + (reward - value).pow(2).mean()
    loss.backward()
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])


def image_rollout(n_envs: int = 8, n_steps: int = 32, size: int = 84) -> TemporalDictTensor:
    """Frames of a Pong-like screen: walls, two paddles and a ball moving from step to step."""
    frames = torch.full((n_envs, n_steps, size, size), 17, dtype=torch.uint8)  # background
    frames[:, :, 10:12, :] = 236  # top wall
    frames[:, :, size - 6 : size - 4, :] = 236  # bottom wall
    for b in range(n_envs):
        for t in range(n_steps):
            phase = 3 * b + t
            left, right = 14 + (5 * phase) % 50, 14 + (7 * phase + 20) % 50
            frames[b, t, left : left + 12, 6:9] = 148  # left paddle
            frames[b, t, right : right + 12, size - 9 : size - 6] = 92  # right paddle
            ball_y, ball_x = 14 + (3 * phase) % 60, 10 + (4 * phase) % 64
            frames[b, t, ball_y : ball_y + 3, ball_x : ball_x + 2] = 236  # ball
    gen = torch.Generator().manual_seed(0)
    return TemporalDictTensor(
        {
            "observation": frames,
            "action": torch.randint(0, 6, (n_envs, n_steps), generator=gen),
            "next/reward": (torch.rand(n_envs, n_steps, generator=gen) < 0.05).float(),
        }
    )


def measure(name: str, value: Any, codecs: list[str], budget: Budget) -> tuple[list[Row], str]:
    """The rows of one payload and a one-line conclusion."""
    raw = pack(value).raw_nbytes
    times = compare([lambda c=c: unpack(pack(value, c)) for c in ["none", *codecs]], budget)
    rows: dict[str, list[Row]] = {
        "size": [],
        "time": [Row(f"{name}: none", times[0] * 1e6, "us")],
        "bandwidth": [],
    }
    best: tuple[float, str, bool] | None = None
    for codec, seconds in zip(codecs, times[1:], strict=True):
        sent = pack(value, codec).nbytes
        # A codec within a microsecond of "none" (or faster, by noise) costs nothing measurable:
        # the floor keeps the break-even finite and marks it as "any network" below.
        extra = max(seconds - times[0], RESOLUTION)
        break_even = max(raw - sent, 0) / extra / 1e6
        rows["size"].append(Row(f"{name}: {codec}", sent / 1e3, "kB", raw / 1e3))
        rows["time"].append(Row(f"{name}: {codec}", seconds * 1e6, "us", times[0] * 1e6))
        rows["bandwidth"].append(
            Row(f"{name}: {codec} break-even", break_even, "MB/s", higher_is_better=True)
        )
        if best is None or break_even > best[0]:
            best = (break_even, codec, extra == RESOLUTION)
    if best is None:
        conclusion = f"{name}: {raw / 1e3:.1f} kB raw; no compressing codec installed"
    elif best[0] == 0:
        conclusion = f"{name}: not worth compressing on any network (no codec makes it smaller)"
    elif best[2]:
        conclusion = f"{name}: {best[1]} costs no measurable time over 'none' here: it pays on any network"
    else:
        conclusion = (
            f"{name}: {best[1]} pays below {best[0]:.0f} MB/s ({best[0] * 8 / 1e3:.2f} Gbit/s); "
            f"not worth compressing on any network faster than that"
        )
    return [*rows["size"], *rows["time"], *rows["bandwidth"]], conclusion


def main() -> None:
    args, budget = parse_args(__doc__)
    torch.set_num_threads(1)
    codecs: list[str] = []
    missing: list[str] = []
    for codec in ("lz4", "zstd"):
        try:
            codecs.append(check_codec(codec))
        except ImportError:
            missing.append(codec)
    rollout = cartpole_rollout()
    payloads = {
        "gradients": gradients(rollout),
        "cartpole rollout": rollout,
        "image rollout": image_rollout(),
    }
    rows: list[Row] = []
    conclusions = []
    for name, value in payloads.items():
        payload_rows, conclusion = measure(name, value, codecs, budget)
        rows += payload_rows
        conclusions.append(conclusion)

    print(
        f"{os.cpu_count()} cores, torch {torch.__version__}, 1 thread, codecs at their default levels "
        f"(lz4 0, zstd 3), median of {budget.repeats} repeats"
    )
    if missing:
        print(f'not installed, left out: {", ".join(missing)} (pip install "rlstruct[ray]")')
    for unit, title, labels in [
        ("kB", "size sent", ("compressed", "raw")),
        ("us", "pack + unpack", ("codec", "none")),
        ("MB/s", "compression pays below", ("bandwidth", "-")),
    ]:
        group = [r for r in rows if r.unit == unit]
        if group:
            print(f"\n{title}")
            print_table(group, *labels)
    print()
    for conclusion in conclusions:
        print(conclusion)
    if args.json is not None:
        write_json(args.json, rows)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
