"""The history window of rlstruct.history, in batchers and in replay_agent.

The contract (docs/agents.md, "History"): the window holds previous steps of
the current episode only, left-aligned, with the same keys at every step
(lengths 0 at the first); for n it keeps n steps across execute() calls in
"fixed" mode and is recorded in ``info`` so that replay_agent rebuilds it;
for True it holds the steps of the current execute(). Expected windows are
worked out by hand, the arithmetic in comments.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
import torch
from mp_helpers import WindowAgent

from rlstruct import (
    DictTensor,
    LocalBatcher,
    MultiprocessBatcher,
    TemporalDictTensor,
    Trajectories,
    derive_seed,
    replay_agent,
)
from rlstruct.history import StepHistory, history_windows, window_after
from rlstruct.testing import CounterEnv, CountingAgent

OBSERVATION_KEYS = {
    "t",
    "seed",
    "episode",
    "length",
    "reward",
    "terminated",
    "truncated",
    "done",
    "initial_state",
}


def ints(*values: int) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int64)


def window_of(rows: list[list[int]], lengths: list[int]) -> TemporalDictTensor:
    return TemporalDictTensor({"x": torch.tensor(rows)}, torch.tensor(lengths))


def collect(
    batcher_class: Any, history: bool | int, n_batches: int = 3, mode: str = "fixed", **kwargs: Any
) -> list[Trajectories]:
    """Batches of WindowAgent over CounterEnv, with episode lengths 3 and 5 (and 2, 4 for a second group)."""
    n_processes = kwargs.pop("n_processes", 1)
    lengths = ints(3, 5, 2, 4)[: 2 * n_processes]
    factory = kwargs.pop("agent_factory", None)
    batches = []
    with batcher_class(
        factory or WindowAgent,
        {} if factory else {"history": history},
        CounterEnv,
        {},
        n_envs=2,
        n_timesteps=4,
        mode=mode,
        n_processes=n_processes,
        **kwargs,
    ) as batcher:
        batcher.reset(env_info=DictTensor({"length": lengths}))
        for _ in range(n_batches):
            batcher.execute()
            batch = batcher.get()
            assert batch is not None
            batches.append(batch)
    return batches


# ---------------------------------------------------------------------------- the pure functions


def test_step_history_fills_then_shifts_and_empties_rows_that_start() -> None:
    history = StepHistory({"x": (torch.int64, ())}, batch_size=2, n=2)
    before = history.begin(n_timesteps=3)
    assert (
        before is not None and before["x"].tolist() == [[0, 0], [0, 0]] and before.lengths.tolist() == [0, 0]
    )
    no, row_1 = torch.tensor([False, False]), torch.tensor([False, True])
    window = history.window(0, no)
    assert window["x"].tolist() == [[0, 0], [0, 0]] and window.lengths.tolist() == [0, 0]
    history.push(0, DictTensor({"x": ints(1, 5)}))
    history.push(1, DictTensor({"x": ints(2, 6)}))
    window = history.window(2, row_1)  # row 1 starts an episode at step 2: empty
    assert window["x"].tolist() == [[1, 2], [0, 0]] and window.lengths.tolist() == [2, 0]
    history.push(2, DictTensor({"x": ints(3, 7)}))
    history.end(3)
    # row 0 was full: 1 drops out, 3 comes last; row 1 had 0 steps: 7 first, then padding
    after = history.begin(n_timesteps=3)
    assert after is not None and after["x"].tolist() == [[2, 3], [7, 0]] and after.lengths.tolist() == [2, 1]
    assert history.window(0, no).equal(after)  # the next run starts from it


def test_step_history_for_true_holds_the_run_so_far() -> None:
    history = StepHistory({"x": (torch.int64, ())}, batch_size=1, n=None)
    assert history.begin(n_timesteps=3) is None
    no = torch.tensor([False])
    assert history.window(0, no).n_timesteps() == 0 and "x" in history.window(0, no)
    history.push(0, DictTensor({"x": ints(4)}))
    history.push(1, DictTensor({"x": ints(5)}))
    window = history.window(2, no)
    assert window["x"].tolist() == [[4, 5]] and window.lengths.tolist() == [2]
    history.end(2)
    history.begin(n_timesteps=3)
    assert history.window(0, no).lengths.tolist() == [0]  # not kept across runs


def test_history_windows_start_from_before_and_stop_at_episode_starts() -> None:
    # row 0: 2 steps before (7, 8), then x = 1 2 3 4 5 with an episode start at step 2
    # row 1: 1 step before (9), then x = 1 2 3 4 5 in the same episode
    before = window_of([[7, 8], [9, 0]], [2, 1])
    steps = TemporalDictTensor({"x": torch.tensor([[1, 2, 3, 4, 5], [1, 2, 3, 4, 5]])})
    starts = torch.tensor([[False, False, True, False, False], [False] * 5])
    windows = history_windows(before, steps, starts, 2)
    assert windows.n_elems() == 10 and windows.n_timesteps() == 2
    # row 0: t0 sees 7 8; t1 sees 8 1; t2 starts (empty); t3 sees 3; t4 sees 3 4
    # row 1: t0 sees 9; t1 sees 9 1; t2 sees 1 2; t3 sees 2 3; t4 sees 3 4
    assert windows["x"].tolist() == [
        [7, 8], [8, 1], [0, 0], [3, 0], [3, 4],
        [9, 0], [9, 1], [1, 2], [2, 3], [3, 4],
    ]  # fmt: skip
    assert windows.lengths.tolist() == [2, 2, 0, 1, 2, 1, 2, 2, 2, 2]


def test_history_windows_without_before_holds_every_step_of_the_episode() -> None:
    steps = TemporalDictTensor({"x": torch.tensor([[1, 2, 3, 4]])})
    starts = torch.tensor([[False, True, False, False]])
    windows = history_windows(None, steps, starts, 4)
    # t0: nothing before; t1 starts; t2: 2; t3: 2 3
    assert windows["x"].tolist() == [[0, 0, 0, 0], [0, 0, 0, 0], [2, 0, 0, 0], [2, 3, 0, 0]]
    assert windows.lengths.tolist() == [0, 0, 1, 2]


@pytest.mark.parametrize("n", [1, 3, 6, None])
def test_history_windows_equal_the_step_by_step_windows(n: int | None) -> None:
    generator = torch.Generator().manual_seed(n or 0)
    b, t_max = 5, 6
    x = torch.randint(1, 100, (b, 2 * t_max), generator=generator)
    y = torch.rand(b, 2 * t_max, 2, generator=generator)
    starts = torch.rand(b, 2 * t_max, generator=generator) < 0.3
    history = StepHistory({"x": (torch.int64, ()), "y": (torch.float32, (2,))}, b, n)
    for run in range(2):  # the second run starts with a window carried over (n)
        part = slice(run * t_max, (run + 1) * t_max)
        steps = TemporalDictTensor({"x": x[:, part], "y": y[:, part]})
        before = history.begin(t_max)
        if run == 1:  # something was carried over, for n only
            assert (before is not None and bool(before.lengths.gt(0).any())) == (n is not None)
        windows = history_windows(before, steps, starts[:, part], n or t_max)
        for t in range(t_max):
            window = history.window(t, starts[:, run * t_max + t])
            expected = windows.index(torch.arange(b) * t_max + t)
            expected = expected if n else expected.temporal_slice(0, t)
            assert expected.equal(window), f"run {run}, step {t}"
            history.push(t, steps.temporal_index(t))
        history.end(t_max)


# ---------------------------------------------------------------------------- in the batchers


def test_n_windows_cross_execute_calls_but_not_episode_starts() -> None:
    first, second = collect(LocalBatcher, 2, n_batches=2)
    # row 0 (episodes of 3): t = 0 1 2 0 | 1 2 0 1, action = 10 + t; row 1 (episodes of 5): t = 0 1 2 3 | 4 0 1 2
    assert first.trajectories["t"].tolist() == [[0, 1, 2, 0], [0, 1, 2, 3]]
    assert second.trajectories["t"].tolist() == [[1, 2, 0, 1], [4, 0, 1, 2]]
    # the last 2 actions of the current episode, oldest first, zero-padded
    assert first.trajectories["window_action"].tolist() == [
        [[0, 0], [10, 0], [10, 11], [0, 0]],  # step 3 starts an episode: empty
        [[0, 0], [10, 0], [10, 11], [11, 12]],  # step 3: 10 drops out
    ]
    assert first.trajectories["window_length"].tolist() == [[0, 1, 2, 0], [0, 1, 2, 2]]
    assert second.trajectories["window_action"].tolist() == [
        [[10, 0], [10, 11], [0, 0], [10, 0]],  # step 0 sees step 3 of the first batch
        [[12, 13], [0, 0], [10, 0], [10, 11]],  # step 0 sees steps 2 and 3 of the first batch
    ]
    assert second.trajectories["window_length"].tolist() == [[1, 2, 0, 1], [2, 0, 1, 2]]
    # info records the window before step 0, for replay
    assert first.info["history_length"].tolist() == [0, 0]
    assert first.info["history/action"].tolist() == [[0, 0], [0, 0]]
    assert second.info["history_length"].tolist() == [1, 2]
    assert second.info["history/action"].tolist() == [[10, 0], [12, 13]]
    assert second.info["history/t"].tolist() == [[0, 0], [2, 3]]
    assert set(second.info.truncate_key("history/").keys()) == {
        k for k in second.trajectories if not k.startswith("next/")
    }


@pytest.mark.parametrize("batcher_class", [LocalBatcher, MultiprocessBatcher])
def test_the_recorded_window_is_empty_where_step_0_starts_an_episode(batcher_class: Any) -> None:
    """Row 0's episode of 4 ends at the last step of the first run: the second run's step 0 starts one."""
    with batcher_class(
        WindowAgent, {"history": 2}, CounterEnv, {}, n_envs=2, n_timesteps=4, n_processes=1
    ) as batcher:
        batcher.reset(env_info=DictTensor({"length": ints(4, 5)}))
        batcher.execute()
        batcher.get()
        batcher.execute()
        second = batcher.get()
    assert second.trajectories["t"][:, 0].tolist() == [0, 4]
    assert second.trajectories["window_length"][:, 0].tolist() == [0, 2]  # what the agent saw
    assert second.info["history_length"].tolist() == [0, 2]  # what the batch records agrees
    assert second.info["history/action"].tolist() == [[0, 0], [12, 13]]
    assert second.info["history/t"].tolist() == [[0, 0], [2, 3]]


def test_true_windows_hold_the_episode_since_the_start_of_the_execute_call() -> None:
    first, second = collect(LocalBatcher, True, n_batches=2)
    # row 0: t = 0 1 2 0 | 1 2 0 1; row 1: t = 0 1 2 3 | 4 0 1 2 (as above)
    assert first.trajectories["window_length"].tolist() == [[0, 1, 2, 0], [0, 1, 2, 3]]
    assert first.trajectories["window_action_sum"].tolist() == [[0, 10, 21, 0], [0, 10, 21, 33]]
    # nothing before the call's first step; row 0 restarts at step 2, row 1 at step 1
    assert second.trajectories["window_length"].tolist() == [[0, 1, 0, 1], [0, 0, 1, 2]]
    assert second.trajectories["window_action_sum"].tolist() == [[0, 11, 0, 10], [0, 0, 10, 21]]
    assert "history_length" not in second.info and not any(k.startswith("history/") for k in second.info)


@pytest.mark.parametrize("history", [2, True])
def test_the_window_has_every_key_from_the_first_step_and_the_probe_call_is_undone(
    history: bool | int,
) -> None:
    agent = WindowAgent(history)
    (batch,) = collect(LocalBatcher, history, n_batches=1, agent_factory=lambda: agent)
    stored = {k for k in batch.trajectories if not k.startswith("next/")}
    assert stored == OBSERVATION_KEYS | {
        "action",
        "noise",
        "window_length",
        "window_t_sum",
        "window_action_sum",
    } | ({"window_action"} if history is not True else set())
    # one probe call at reset (observation keys only, to learn the outputs), then 4 steps with every key
    assert agent.keys_seen == [OBSERVATION_KEYS] + [stored] * 4
    assert batch.trajectories["window_length"][:, 0].tolist() == [0, 0]
    # the probe call's draw was undone: the first step draws the first numbers of group 0's agent seed
    first = torch.rand(2, generator=torch.Generator().manual_seed(derive_seed(0, "agent")))
    assert batch.trajectories["noise"][:, 0].equal(first)


def test_agents_without_history_get_none_and_no_window_in_info() -> None:
    with LocalBatcher(CountingAgent, {}, CounterEnv, {}, n_envs=2, n_timesteps=3) as batcher:
        batcher.reset()
        batcher.execute()
        batch = batcher.get()
    assert batch is not None
    assert not any(k.startswith("history") for k in batch.info)
    assert "history_length" not in batch.trajectories


@pytest.mark.parametrize(("history", "mode"), [(2, "fixed"), (True, "fixed"), (3, "episodes")])
def test_multiprocess_batcher_gives_the_local_batcher_windows(history: bool | int, mode: str) -> None:
    # 2 groups of 2 envs, episodes of 3, 5, 2 and 4 steps: episodes end inside rows and across calls
    local = collect(LocalBatcher, history, mode=mode, n_processes=2)
    remote = collect(MultiprocessBatcher, history, mode=mode, n_processes=2, timeout=60.0)
    for got, expected in zip(remote, local, strict=True):
        assert sorted(got.info.keys()) == sorted(expected.info.keys())
        for key, value in expected.info.items():
            assert torch.equal(got.info[key], value), f"info {key}"
        for key, value in expected.trajectories.items():
            assert torch.equal(got.trajectories[key], value), f"trajectories {key}"
        assert torch.equal(got.lengths, expected.lengths)
    # the windows did reach across the calls (n, fixed mode) or stayed inside them
    carried = local[1].trajectories["window_length"][:, 0]
    assert bool(carried.gt(0).any()) == (mode == "fixed" and history is not True)


# ---------------------------------------------------------------------------- replay


@pytest.mark.parametrize(("history", "mode"), [(1, "fixed"), (2, "fixed"), (True, "fixed"), (2, "episodes")])
def test_replay_shows_the_agent_the_windows_of_collection(history: bool | int, mode: str) -> None:
    for batch in collect(LocalBatcher, history, mode=mode, n_processes=2):
        replayed = replay_agent(WindowAgent(history), batch)
        mask = batch.trajectories.mask()
        for key in replayed.keys() - {"noise"}:  # noise comes from another generator
            assert replayed[key][mask].equal(batch.trajectories[key][mask]), key


def test_keys_a_learner_adds_to_the_steps_stay_out_of_the_replayed_windows() -> None:
    (batch,) = collect(LocalBatcher, 2, n_batches=1)
    plain = replay_agent(WindowAgent(2), batch)
    steps = batch.trajectories
    steps.set("advantage", torch.randn(steps.n_elems(), steps.n_timesteps()))  # as PPO adds its targets
    replayed = replay_agent(WindowAgent(2), batch)
    for key in plain.keys() - {"noise"}:
        assert replayed[key].equal(plain[key]), key
    # a window holding a key the steps lack is not the window of these steps
    info = DictTensor({k.replace("history/t", "history/elsewhere"): v for k, v in batch.info.items()})
    other = Trajectories(info, steps)
    with pytest.raises(ValueError, match=re.escape("the agent wants 2 steps of (some of)")):
        replay_agent(WindowAgent(2), other)


def test_replay_of_an_n_agent_needs_the_window_before_step_0() -> None:
    (batch,) = collect(LocalBatcher, 2, n_batches=1)
    bare = Trajectories(batch.info.get(["env_info/length"]), batch.trajectories)
    with pytest.raises(
        ValueError, match=re.escape("the agent wants the last 2 steps, but batch.info has no")
    ):
        replay_agent(WindowAgent(2), bare)
    with pytest.raises(
        ValueError, match=re.escape("has the keys") + ".*" + re.escape("and 2 steps; the agent wants 3")
    ):
        replay_agent(WindowAgent(3), batch)


class ShiftyAgent(WindowAgent):
    """Outputs one more key once its window holds ``action``: its probe call learns other keys."""

    def forward(
        self,
        state: DictTensor,
        observation: DictTensor,
        agent_info: DictTensor,
        history: TemporalDictTensor | None = None,
    ) -> tuple[DictTensor, DictTensor]:
        output, state = super().forward(state, observation, agent_info, history)
        if history is not None and "action" in history:
            output.set("extra", output["action"].clone())
        return output, state


def test_outputs_that_differ_from_the_probe_call_raise() -> None:
    with pytest.raises(ValueError, match=re.escape("but its probe call at the first reset gave")):
        collect(LocalBatcher, 2, n_batches=1, agent_factory=lambda: ShiftyAgent(2))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_replay_builds_the_windows_on_the_batch_device() -> None:
    (batch,) = collect(LocalBatcher, 2, n_batches=1)
    on_gpu = Trajectories(batch.info.to("cuda"), batch.trajectories.to("cuda"))
    replayed = replay_agent(WindowAgent(2).to("cuda"), on_gpu)
    assert replayed["window_action"].cpu().equal(batch.trajectories["window_action"])


def test_stream_mode_records_the_carried_window_and_replay_reproduces_it() -> None:
    batches = []
    with MultiprocessBatcher(
        WindowAgent, {"history": 2}, CounterEnv, {}, n_envs=2, n_timesteps=4, mode="stream", n_processes=2
    ) as batcher:
        batcher.reset(env_info=DictTensor({"length": ints(3, 5, 2, 4)}))
        for _ in range(6):
            batch = batcher.get()
            assert batch is not None
            batches.append(batch)
    # each worker fills slot after slot, so from its second slot on the window carries over
    assert any(bool(batch.info["history_length"].gt(0).any()) for batch in batches)
    for batch in batches:
        replayed = replay_agent(WindowAgent(2), batch)
        for key in replayed.keys() - {"noise"}:
            assert replayed[key].equal(batch.trajectories[key]), key


def test_window_after_a_step_is_the_window_before_the_next_step() -> None:
    """window_after(window before t, step t) == window before t + 1, wherever t + 1 starts no episode."""
    steps = TemporalDictTensor({"x": torch.arange(1, 9).view(1, 8), "y": torch.arange(1, 9).view(1, 8) > 4})
    starts = torch.zeros(1, 8, dtype=torch.bool)
    starts[0, 3] = True  # an episode starts at step 3
    windows = history_windows(None, steps, starts, 3)  # [8, 3]: the window before each step
    after = window_after(windows, DictTensor({k: v[0] for k, v in steps.items()}))
    for t in range(7):
        if bool(starts[0, t + 1]):
            continue
        assert after["x"][t].tolist() == windows["x"][t + 1].tolist(), t
        assert after["y"][t].tolist() == windows["y"][t + 1].tolist(), t
        assert after.lengths[t] == windows.lengths[t + 1], t
    # by hand: before step 7 the window holds steps 4..6 (x = 5, 6, 7); after step 7 it holds 6, 7, 8
    assert after["x"][7].tolist() == [6, 7, 8] and int(after.lengths[7]) == 3
    with pytest.raises(ValueError, match=re.escape("window_after: step lacks the window's keys ['y']")):
        window_after(windows, DictTensor({"x": steps["x"][0]}))


def test_history_windows_names_the_argument_that_is_not_what_it_must_be() -> None:
    steps = TemporalDictTensor({"x": torch.zeros(2, 3)}, torch.tensor([3, 3]))
    starts = torch.zeros(2, 3, dtype=torch.bool)
    before = TemporalDictTensor({"x": torch.zeros(2, 2)}, torch.tensor([0, 1]))
    assert history_windows(before, steps, starts, 2).n_elems() == 6  # the arguments that fit
    for args, error, text in [
        (
            (None, steps, starts.long(), 2),
            TypeError,
            "starts must be a bool tensor [B, T] = [2, 3], got dtype torch.int64",
        ),
        (
            (None, steps, starts[:1], 2),
            ValueError,
            "starts must be [B, T] = [2, 3] on cpu, got [1, 3] on cpu",
        ),
        ((None, steps, starts, 0), ValueError, "n must be at least 1, got 0"),
        ((None, steps, starts, 2.0), TypeError, "n must be an int (the window's length), got a float"),
        ((None, {"x": torch.zeros(2, 3)}, starts, 2), TypeError, "steps must be a TemporalDictTensor"),
        (
            (before, steps, starts, 3),
            ValueError,
            "before must be [B, n] = [2, 3] with the keys of steps, got [2, 2]",
        ),
    ]:
        with pytest.raises(error, match=re.escape(f"history_windows: {text}")):
            history_windows(*args)  # type: ignore[arg-type]


def test_window_after_names_a_step_of_other_rows_dtype_or_shape() -> None:
    window = TemporalDictTensor({"x": torch.zeros(2, 3, dtype=torch.int64)}, torch.tensor([1, 2]))
    for step, text in [
        (
            DictTensor({"x": torch.zeros(3, dtype=torch.int64)}),
            "window_after: step must have the window's 2 rows, got 3",
        ),
        (
            DictTensor({"x": torch.zeros(2)}),
            "step key 'x' must be one step of the window's, torch.int64 [] per row, got torch.float32 []",
        ),
        (
            DictTensor({"x": torch.zeros(2, 1, dtype=torch.int64)}),
            "torch.int64 [] per row, got torch.int64 [1]",
        ),
    ]:
        with pytest.raises(ValueError, match=re.escape(text)):
            window_after(window, step)
