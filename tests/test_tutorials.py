"""Every tutorial runs to completion on its tiny budget (``--quick``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

TUTORIALS = sorted((Path(__file__).resolve().parents[1] / "tutorials").glob("[0-9][0-9]_*.py"))


def test_tutorials_are_found() -> None:
    assert any(path.name == "01_structures.py" for path in TUTORIALS)


@pytest.mark.parametrize("path", TUTORIALS, ids=lambda p: p.stem)
def test_tutorial_runs(path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-W", "error", str(path), "--quick"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, f"{path.name} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    assert result.stdout.strip(), f"{path.name} printed nothing"
