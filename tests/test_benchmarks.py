"""Every benchmark script runs on a tiny budget and writes well-formed ``--json`` rows."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = sorted(
    p for p in (Path(__file__).resolve().parents[1] / "benchmarks").glob("*.py") if not p.name.startswith("_")
)
FIELDS = {"name", "value", "unit", "baseline", "ratio", "target", "higher_is_better"}


def test_benchmarks_are_found() -> None:
    assert any(path.name == "structures.py" for path in BENCHMARKS)


@pytest.mark.parametrize("path", BENCHMARKS, ids=lambda p: p.stem)
def test_benchmark_quick_run_writes_json_rows(path: Path, tmp_path: Path) -> None:
    out = tmp_path / "rows.json"
    result = subprocess.run(
        [sys.executable, str(path), "--quick", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, f"{path.name} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
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
