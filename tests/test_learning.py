"""The learning suite's machinery on a tiny budget; CI runs the suite itself in full (tests/learning_suite.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import learning_suite
import pytest

PERFORMANCE = Path(__file__).resolve().parents[1] / "docs" / "performance.md"


def test_every_entry_is_a_command_of_the_documentation() -> None:
    page = PERFORMANCE.read_text()
    block = page.split(learning_suite.START, 1)[1].split(learning_suite.END, 1)[0]
    for entry in learning_suite.ENTRIES:
        assert f"`{entry.shown()}`" in block, entry.shown()


@pytest.mark.timeout(600)
def test_a_smoke_run_writes_its_table_and_results(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    page = tmp_path / "page.md"
    kept = "| `rlstruct train ppo --env CartPole-v1` | >= 475 within 50k | 0 | 500.0 | 49,920 | 20 | yes |"
    stale = "| `rlstruct train ppo --env CueMemory-v0` | old | 0 | 0.0 | 1 | 1 | **no** |"
    page.write_text(f"before\n{learning_suite.START}\n{stale}\n{kept}\n{learning_suite.END}\nafter\n")
    out = tmp_path / "results.json"
    argv = ["--only", "CueMemory-v0", "--total-steps", "1024", "--write", str(page), "--json", str(out)]
    assert learning_suite.main(argv) == 0
    records = json.loads(out.read_text())
    assert [r["command"] for r in records] == [
        "rlstruct train ppo --env CueMemory-v0",
        "python tutorials/09_attention_history.py --env CueMemory-v0 --steps 50000",
    ]
    for record in records:
        assert record["met"] is None  # a smoke run checks no threshold
        assert record["env_steps"][0] <= 1024 and -1.0 <= record["final"][0] <= 1.0
    text = page.read_text()
    assert text.startswith("before\n") and text.endswith("after\n") and stale not in text
    lines = text.splitlines()
    # the line of an entry not run is kept, in the order of the entries; the runs' lines replace theirs
    assert lines[2:4] == learning_suite.HEADER.splitlines() and lines[4] == kept
    assert lines[5].startswith(
        "| `rlstruct train ppo --env CueMemory-v0` | the optimum, 1.0, within 50k | 0 |"
    )
    assert lines[5].endswith("| - |")  # a smoke run checks no threshold
    assert "ran  rlstruct train ppo --env CueMemory-v0" in capsys.readouterr().out
    # the learning curve of the rlstruct train entry, next to the page; none for the tutorial
    curves = sorted((tmp_path / "img" / "learning").iterdir())
    assert [p.name for p in curves] == ["ppo-CueMemory-v0.png"]
    assert curves[0].read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


def test_without_write_no_curve_is_drawn(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    drawn: list[str] = []
    monkeypatch.setattr(learning_suite, "run", lambda *args: learning_suite.Result(1.0, 1, 1.0, tmp_path))
    monkeypatch.setattr(learning_suite, "plot", lambda entry, *args: drawn.append(entry.shown()))
    assert learning_suite.main(["--only", "CueMemory-v0"]) == 0
    assert drawn == []
    page = tmp_path / "page.md"
    page.write_text(f"{learning_suite.START}\n{learning_suite.END}\n")
    assert learning_suite.main(["--only", "CueMemory-v0", "--write", str(page)]) == 0
    assert drawn == [
        "rlstruct train ppo --env CueMemory-v0",
        "python tutorials/09_attention_history.py --env CueMemory-v0 --steps 50000",
    ]


def test_every_curve_an_algorithm_page_shows_is_one_the_suite_draws() -> None:
    curves = {e.curve for e in learning_suite.ENTRIES if e.curve is not None}
    assert len(curves) == len([e for e in learning_suite.ENTRIES if not e.tutorial])  # no two alike
    shown: set[str] = set()
    for algo in ("ppo", "a2c", "dqn", "sac", "impala"):
        page = (PERFORMANCE.parent / "algos" / f"{algo}.md").read_text()
        images = set(re.findall(r"\]\(\.\./img/learning/([^)]+)\)", page))
        assert images, f"docs/algos/{algo}.md shows no learning curve"
        assert images <= curves, images - curves
        assert all(image.startswith(f"{algo}-") for image in images), images
        shown |= images
    assert shown == curves  # every curve the suite draws is on its algorithm's page


def test_a_missed_threshold_fails_the_suite(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(learning_suite, "run", lambda *args: learning_suite.Result(0.5, 50_000, 1.0))
    assert learning_suite.main(["--only", "CueMemory-v0"]) == 1


def test_the_table_goes_only_between_its_markers(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("no markers here\n")
    with pytest.raises(ValueError, match=re.escape("has no <!-- learning-suite:start -->")):
        learning_suite.write(page, "table")


def test_a_known_miss_is_shown_but_does_not_fail_the_suite(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(learning_suite, "run", lambda *args: learning_suite.Result(300.0, 100_000, 1.0))
    assert learning_suite.main(["--only", "a2c --env CartPole-v1 --recurrent"]) == 0
    out = capsys.readouterr().out
    assert "| 300.0 / 300.0 / 300.0 | 100,000 | 1 / 1 / 1 | **no** (known) |" in out
    assert "1 known misses" in out


def test_ci_runs_the_entries_that_fit_its_time_and_all_runs_every_entry(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ran: list[str] = []

    def fake(entry: learning_suite.Entry, *args: object) -> learning_suite.Result:
        ran.append(entry.shown())
        return learning_suite.Result(10.0**6, 1, 1.0)

    monkeypatch.setattr(learning_suite, "run", fake)
    outside = [e.shown() for e in learning_suite.ENTRIES if not e.ci]
    assert "rlstruct train sac --env PendulumNoVel-v1" in outside
    assert learning_suite.main([]) == 0
    assert ran and not set(outside) & set(ran)
    ran.clear()
    assert learning_suite.main(["--all"]) == 0
    assert set(outside) <= set(ran)
    ran.clear()
    assert learning_suite.main(["--only", "PendulumNoVel"]) == 0  # --only names one, in CI or not
    assert set(ran) == {"rlstruct train sac --env PendulumNoVel-v1"}


def test_ci_runs_its_seeds_of_an_entry_and_starts_the_longest_runs_first(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ran: list[tuple[str, int]] = []

    def fake(entry: learning_suite.Entry, seed: int, *args: object) -> learning_suite.Result:
        ran.append((entry.shown(), seed))
        return learning_suite.Result(10.0**6, 1, 1.0)

    monkeypatch.setattr(learning_suite, "run", fake)
    novel = "rlstruct train ppo --env CartPoleNoVel-v1"
    assert learning_suite.main(["--jobs", "1"]) == 0
    assert [seed for command, seed in ran if command == novel] == [0]  # its ci_seeds, of 0-4
    out = capsys.readouterr().out
    assert f"| `{novel}` | >= 475 within 100k | 0 |" in out
    ci = [e for e in learning_suite.ENTRIES if e.ci]
    # the table keeps the entries' order, whatever order they ran in
    table = [line.split("`")[1] for line in out.splitlines() if line.startswith("| `")]
    assert table == [e.shown() for e in ci]
    longest = max(ci, key=lambda e: e.minutes)
    assert ran[0] == (longest.shown(), longest.seeds[0])  # one worker: started in the queue's order
    minutes = {e.shown(): e.minutes for e in learning_suite.ENTRIES}
    assert [minutes[command] for command, _ in ran] == sorted((minutes[c] for c, _ in ran), reverse=True)
    ran.clear()
    assert learning_suite.main(["--only", "ppo --env CartPoleNoVel-v1"]) == 0  # the LSTM row's too
    assert [seed for command, seed in ran if command == novel] == [0, 1, 2, 3, 4]  # --only runs every seed
