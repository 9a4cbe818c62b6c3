"""The "compact" storage layout: the same batches as "full", with fewer writes while they are made."""

from __future__ import annotations

import re
from typing import Any

import pytest
import torch
from mp_helpers import HistorySumAgent

from rlstruct import DictTensor, GymEnv, LocalBatcher, MultiprocessBatcher, Trajectories
from rlstruct.batchers._group import Group, GroupSpec
from rlstruct.batchers._storage import STORED, full_layout
from rlstruct.testing import CounterEnv, CountingAgent, RandomAgent

PAIRS = [
    pytest.param(CountingAgent, {}, CounterEnv, {"length": 3, "truncate": True}, id="counter"),
    pytest.param(RandomAgent, {}, GymEnv, {"env": "CartPole-v1"}, id="cartpole"),
    pytest.param(HistorySumAgent, {}, CounterEnv, {"length": 4}, id="history"),
]


def batches(batcher: Any, n: int, env_info: DictTensor | None = None) -> list[Trajectories]:
    batcher.reset(env_info=env_info)
    out = []
    for _ in range(n):
        if batcher.mode != "stream":
            batcher.execute()
        out.append(batcher.get())
    return out


def skipped_somewhere(stored: torch.Tensor) -> bool:
    """Whether a compact storage left the next/ keys of some step unwritten (its last batch)."""
    return not bool(stored.all())


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
            if layout == "compact":
                assert skipped_somewhere(batcher._groups[0].slots[None].storage[STORED])
    for full, compact in zip(out["full"], out["compact"], strict=True):
        assert_same(full, compact)


@pytest.mark.parametrize("mode", ["fixed", "episodes", "stream"])
def test_a_compact_multiprocess_batcher_returns_the_batches_of_a_full_one(mode: str) -> None:
    """Rows of different lengths (2 to 6 steps), so that episodes end at different steps in every mode."""
    n_processes = 1 if mode == "stream" else 2  # one stream worker: its slots come in a known order
    lengths = DictTensor({"length": torch.tensor([2, 5, 6, 3, 4, 2])[: 3 * n_processes]})
    out = {}
    for layout in ("full", "compact"):
        with MultiprocessBatcher(
            CountingAgent,
            {},
            CounterEnv,
            {},
            n_envs=3,
            n_timesteps=8,
            n_processes=n_processes,
            mode=mode,
            layout=layout,
        ) as batcher:
            out[layout] = batches(batcher, 3, env_info=lengths)
            if layout == "compact":
                assert skipped_somewhere(batcher._buffers.steps[STORED])
    for full, compact in zip(out["full"], out["compact"], strict=True):
        assert_same(full, compact)


def test_a_compact_multiprocess_batcher_on_cartpole_returns_the_batches_of_a_full_one() -> None:
    out = {}
    for layout in ("full", "compact"):
        with MultiprocessBatcher(
            RandomAgent, {}, GymEnv, {"env": "CartPole-v1"}, n_envs=3, n_timesteps=40, layout=layout
        ) as batcher:
            out[layout] = batches(batcher, 2)
    for full, compact in zip(out["full"], out["compact"], strict=True):
        assert_same(full, compact)


class StoredEnv(CounterEnv):
    """CounterEnv with an observation key named ``stored``."""

    def _observation(self, reward: torch.Tensor, ended: torch.Tensor, initial: torch.Tensor) -> DictTensor:
        observation = super()._observation(reward, ended, initial)
        observation.set("stored", self.t.float())
        return observation


class ShrinkingEnv(CounterEnv):
    """CounterEnv whose reached ``t`` has another shape than the observation's (allowed in the full layout)."""

    def _observation(self, reward: torch.Tensor, ended: torch.Tensor, initial: torch.Tensor) -> DictTensor:
        observation = super()._observation(reward, ended, initial)
        if not bool(initial.any()) and self.auto_reset:
            observation.set("t", self.t.view(-1, 1))
        return observation


def test_an_observation_key_named_stored_works_in_full_and_is_refused_in_compact() -> None:
    with LocalBatcher(CountingAgent, {}, StoredEnv, {}, n_envs=2, n_timesteps=4) as batcher:
        batcher.reset()
        batcher.execute()
        assert batcher.get().trajectories["next/stored"].shape == (2, 4)
    with LocalBatcher(CountingAgent, {}, StoredEnv, {}, n_envs=2, n_timesteps=4, layout="compact") as batcher:
        batcher.reset()
        with pytest.raises(
            ValueError, match=re.escape("the observation key 'stored' is reserved by layout='compact'")
        ):
            batcher.execute()


def test_a_compact_layout_refuses_a_next_key_unlike_its_observation_key() -> None:
    with LocalBatcher(
        CountingAgent, {}, ShrinkingEnv, {}, n_envs=2, n_timesteps=4, layout="compact"
    ) as batcher:
        batcher.reset()
        with pytest.raises(
            ValueError, match=re.escape("layout='compact' reads next/t from the next step's t")
        ):
            batcher.execute()


def test_a_compact_group_skips_the_next_keys_where_the_next_step_holds_them() -> None:
    """Written only at the last step and where an episode ended (length 3: steps 2 and 5 of 8)."""
    group = Group(CountingAgent, CounterEnv, GroupSpec(0, "group", {}, {"length": 3}, 2, 0, "compact"))
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
