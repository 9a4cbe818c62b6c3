"""Every benchmark script runs on a tiny budget and writes well-formed ``--json`` rows."""

from __future__ import annotations

import importlib
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from rlstruct.algos import ppo

DIRECTORY = Path(__file__).resolve().parents[1] / "benchmarks"
BENCHMARKS = sorted(p for p in DIRECTORY.glob("*.py") if not p.name.startswith("_"))
FIELDS = {"name", "value", "unit", "baseline", "ratio", "target", "higher_is_better"}
PNG = b"\x89PNG\r\n\x1a\n"
DRAWING = {"sampling", "memory_tasks"}  # the benchmarks whose --plot the quick run checks


def test_benchmarks_are_found() -> None:
    assert any(path.name == "structures.py" for path in BENCHMARKS)


@pytest.mark.timeout(360)  # the run's own limit, 300 s, decides; pytest's 120 s would stop it first
@pytest.mark.parametrize("path", BENCHMARKS, ids=lambda p: p.stem)
def test_benchmark_quick_run_writes_json_rows(path: Path, tmp_path: Path) -> None:
    out = tmp_path / "rows.json"
    image = tmp_path / "rows.png"
    plot = ["--plot", str(image)] if path.stem in DRAWING else []
    result = subprocess.run(
        [sys.executable, str(path), "--quick", "--json", str(out), *plot],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, f"{path.name} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    if plot:
        assert image.read_bytes().startswith(PNG)
    rows = json.loads(out.read_text())
    assert isinstance(rows, list) and rows
    for row in rows:
        assert set(row) == FIELDS, row
        assert isinstance(row["name"], str) and isinstance(row["unit"], str)
        assert isinstance(row["value"], (int, float)) and math.isfinite(row["value"])
        assert isinstance(row["higher_is_better"], bool)
        assert row["target"] is None or isinstance(row["target"], (int, float))
        if row["baseline"] is not None:
            assert row["ratio"] == pytest.approx(row["value"] / row["baseline"])


def _row(name: str, value: float, unit: str = "steps/s", baseline: float | None = None) -> dict[str, object]:
    ratio = value / baseline if baseline else None
    return {"name": name, "value": value, "unit": unit, "baseline": baseline, "ratio": ratio}


ROWS = [
    _row("floor: 2 processes x 8 envs + policy", 1000.0),
    _row("gymnasium SyncVectorEnv(16)", 500.0),
    _row("Multiprocess 2 x 8 vs its floor", 800.0, baseline=1000.0),
    _row("Multiprocess 2 x 8 vs Sync(16)", 800.0, baseline=500.0),
    _row("first batch of 2 x 8 after construction", 1.5, unit="s", baseline=1.0),
    _row("84x84x4 floor: 2 processes x 4 envs + policy", 300.0),
    _row("84x84x4 Multiprocess 2 x 4 compact vs full", 200.0, baseline=250.0),
]


def test_sampling_bars_are_one_per_measurement_by_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(DIRECTORY))
    sampling = importlib.import_module("sampling")
    assert sampling.bars(ROWS) == {
        "CartPole-v1": [
            ("floor: 2 processes x 8 envs + policy", 1000.0, "floor"),
            ("gymnasium SyncVectorEnv(16)", 500.0, "gymnasium"),
            ("Multiprocess 2 x 8", 800.0, "rlstruct"),  # two rows of one measurement, one bar
        ],
        "84x84x4 frames, 2 x 4": [
            ("floor: 2 processes x 4 envs + policy", 300.0, "floor"),
            ("Multiprocess 2 x 4 compact", 200.0, "rlstruct"),
        ],
    }  # the row in seconds is not a bar


def test_sampling_plots_an_earlier_json_without_measuring(tmp_path: Path) -> None:
    rows, image = tmp_path / "rows.json", tmp_path / "sampling.png"
    rows.write_text(json.dumps(ROWS))
    script = str(DIRECTORY / "sampling.py")
    done = subprocess.run(
        [sys.executable, script, "--from-json", str(rows), "--plot", str(image)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"wrote {image}\n"  # nothing measured, no table
    assert image.read_bytes().startswith(PNG)
    no_plot = subprocess.run(
        [sys.executable, script, "--from-json", str(rows)], capture_output=True, text=True, timeout=300
    )
    assert no_plot.returncode != 0 and "--from-json JSON needs --plot PATH" in no_plot.stderr
    rows.write_text(json.dumps({"name": "not a list"}))
    bad = subprocess.run(
        [sys.executable, script, "--from-json", str(rows), "--plot", str(image)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert bad.returncode != 0 and "must hold a list of rows" in bad.stderr


def test_memory_tasks_reads_mmer_and_first_reaching_from_the_evaluations(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.syspath_prepend(str(DIRECTORY))
    memory_tasks = importlib.import_module("memory_tasks")
    curve = memory_tasks.Curve(((10_240, 0.5), (20_480, 0.96), (30_720, 0.9)), wall_s=1.0)
    assert (curve.mmer, curve.final, curve.env_steps) == (0.96, 0.9, 30_720)  # the best, not the last
    assert curve.first_reaching(0.95) == 20_480 and curve.first_reaching(1.0) is None
    assert [memory_tasks._aligned(n) for n in (100, 20_000, 200_000)] == [256, 19_968, 199_936]


def test_memory_tasks_runs_each_popgym_id_with_its_tuned_settings_and_the_benchmarks_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.syspath_prepend(str(DIRECTORY))
    memory_tasks = importlib.import_module("memory_tasks")
    untuned = memory_tasks.popgym_settings(memory_tasks.popgym_id("RepeatPreviousEasy"))
    assert untuned == {"recurrent": True, "normalize": True}
    monkeypatch.setitem(ppo.TUNED, "popgym-RepeatPreviousEasy-v0", {"gamma": 0.9, "total_steps": 5_000})
    tuned = memory_tasks.popgym_settings(memory_tasks.popgym_id("RepeatPreviousEasy"))
    assert tuned == {"recurrent": True, "normalize": True, "gamma": 0.9}  # the budget stays the benchmark's
    pendulum = memory_tasks.popgym_settings(memory_tasks.popgym_id("PositionOnlyPendulumEasy"))
    assert (pendulum["gamma"], pendulum["gae_lambda"], pendulum["n_envs"]) == (0.95, 0.95, 16)
