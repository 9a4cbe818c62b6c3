"""The "compact" storage layout: the same batches as "full", with fewer writes while they are made."""

from __future__ import annotations

import re
from typing import Any

import pytest
import torch
from mp_helpers import HistorySumAgent

from rlstruct import DictTensor, GymEnv, LocalBatcher, MultiprocessBatcher, Trajectories
from rlstruct.batchers._group import STORED, Group, full_layout
from rlstruct.testing import CounterEnv, CountingAgent, RandomAgent

PAIRS = [
    pytest.param(CountingAgent, {}, CounterEnv, {"length": 3, "truncate": True}, id="counter"),
    pytest.param(RandomAgent, {}, GymEnv, {"env": "CartPole-v1"}, id="cartpole"),
    pytest.param(HistorySumAgent, {}, CounterEnv, {"length": 4}, id="history"),
]


def batches(batcher: Any, n: int) -> list[Trajectories]:
    batcher.reset()
    out = []
    for _ in range(n):
        if batcher.mode != "stream":
            batcher.execute()
        out.append(batcher.get())
    return out


def assert_same(full: Trajectories, compact: Trajectories) -> None:
    assert list(compact.trajectories.keys()) == list(full.trajectories.keys())
    for key in full.trajectories:
        assert torch.equal(compact.trajectories[key], full.trajectories[key]), key
    assert torch.equal(compact.trajectories.lengths, full.trajectories.lengths)
    for key in full.info:
        assert torch.equal(compact.info[key], full.info[key]), key


@pytest.mark.parametrize("mode", ["fixed", "episodes", "stream"])
@pytest.mark.parametrize(("agent", "agent_args", "env", "env_args"), PAIRS)
def test_a_compact_local_batcher_returns_the_batches_of_a_full_one(
    mode: str, agent: Any, agent_args: dict[str, Any], env: Any, env_args: dict[str, Any]
) -> None:
    out = {}
    for layout in ("full", "compact"):
        with LocalBatcher(
            agent, agent_args, env, env_args, n_envs=3, n_timesteps=7, n_processes=2, mode=mode, layout=layout
        ) as batcher:
            out[layout] = batches(batcher, 3)
    for full, compact in zip(out["full"], out["compact"], strict=True):
        assert_same(full, compact)


@pytest.mark.parametrize("mode", ["fixed", "episodes", "stream"])
def test_a_compact_multiprocess_batcher_returns_the_batches_of_a_full_one(mode: str) -> None:
    out = {}
    for layout in ("full", "compact"):
        with MultiprocessBatcher(
            RandomAgent, {}, GymEnv, {"env": "CartPole-v1"}, n_envs=3, n_timesteps=9, mode=mode, layout=layout
        ) as batcher:
            out[layout] = batches(batcher, 3 if mode != "stream" else 1)
    for full, compact in zip(out["full"], out["compact"], strict=True):
        assert_same(full, compact)


def test_a_compact_group_skips_the_next_keys_where_the_next_step_holds_them() -> None:
    """Written only at the last step and where an episode ended (length 3: steps 2 and 5 of 8)."""
    group = Group(CountingAgent, {}, CounterEnv, {"length": 3}, 2, 0, 0, "group", layout="compact")
    group.reset(DictTensor(batch_size=2), DictTensor(batch_size=2), auto_reset=True)
    storage = {
        "count": torch.zeros(2, 8, dtype=torch.int64),
        "t": torch.zeros(2, 8, dtype=torch.int64),
        "episode": torch.zeros(2, 8, dtype=torch.int64),
        "length": torch.zeros(2, 8, dtype=torch.int64),
        "seed": torch.zeros(2, 8, dtype=torch.int64),
        "reward": torch.zeros(2, 8),
        "terminated": torch.zeros(2, 8, dtype=torch.bool),
        "truncated": torch.zeros(2, 8, dtype=torch.bool),
        "done": torch.zeros(2, 8, dtype=torch.bool),
        "initial_state": torch.zeros(2, 8, dtype=torch.bool),
        "action": torch.zeros(2, 8, dtype=torch.int64),
        STORED: torch.zeros(2, 8, dtype=torch.bool),
    }
    sentinel = {
        "next/" + k: torch.full_like(v, -1 if v.dtype != torch.bool else True) for k, v in storage.items()
    }
    storage |= {k: v for k, v in sentinel.items() if k not in ("next/action", "next/count", "next/" + STORED)}
    group.attach({0: storage})
    _, steps = group.run(8, slot=0)
    written = [2, 5, 7]
    assert storage[STORED][0].nonzero().flatten().tolist() == written
    skipped = [t for t in range(8) if t not in written]
    assert bool((storage["next/t"][:, skipped] == -1).all())  # never written
    full = full_layout(dict(steps.items()))
    assert STORED not in full
    assert full["next/t"][0].tolist() == [1, 2, 3, 1, 2, 3, 1, 2]
    assert torch.equal(full["next/t"][:, skipped], storage["t"][:, [t + 1 for t in skipped]])


@pytest.mark.parametrize("batcher_class", [LocalBatcher, MultiprocessBatcher])
def test_an_unknown_layout_is_refused_naming_it(batcher_class: type) -> None:
    with pytest.raises(ValueError, match=re.escape("layout must be 'full' or 'compact', got 'small'")):
        batcher_class(CountingAgent, {}, CounterEnv, {}, n_envs=1, n_timesteps=2, layout="small")
