"""Every tutorial runs to completion on its tiny budget (``--quick``), and its page on the site holds it.

The pages (docs/tutorials/NN_name.md) are written by ``python docs/gen_tutorials.py``.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TUTORIALS = sorted((ROOT / "tutorials").glob("[0-9][0-9]_*.py"))
PAGES = ROOT / "docs" / "tutorials"
NOT_RUN = "<!-- not run: tests/test_tutorials.py runs the script itself -->"


def test_tutorials_are_found() -> None:
    assert any(path.name == "01_structures.py" for path in TUTORIALS)


@pytest.mark.parametrize("path", TUTORIALS, ids=lambda p: p.stem)
def test_tutorial_runs(path: Path, tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-W", "error", str(path), "--quick"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,  # where a tutorial that trains with ppo.train leaves its run directory
    )
    assert result.returncode == 0, f"{path.name} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    assert result.stdout.strip(), f"{path.name} printed nothing"


def test_every_tutorial_has_a_page_in_the_navigation() -> None:
    pages = sorted(PAGES.glob("*.md"))
    assert [p.stem for p in pages] == [t.stem for t in TUTORIALS]  # no page missing, none left over
    nav = (ROOT / "mkdocs.yml").read_text()
    index = (ROOT / "docs" / "tutorials.md").read_text()
    for tutorial in TUTORIALS:
        assert f": tutorials/{tutorial.stem}.md\n" in nav, f"mkdocs.yml's nav lacks {tutorial.stem}.md"
        assert f"](tutorials/{tutorial.stem}.md)" in index, f"docs/tutorials.md does not link {tutorial.stem}"


@pytest.mark.parametrize("path", TUTORIALS, ids=lambda p: p.stem)
def test_the_page_holds_the_script_byte_for_byte(path: Path) -> None:
    page = (PAGES / f"{path.stem}.md").read_text()
    blocks = re.findall(r"^```python\n(.*?)^```$", page, flags=re.M | re.S)
    assert len(blocks) == 1, f"{path.stem}.md has {len(blocks)} python blocks, not one"
    assert blocks[0] == path.read_text(), (
        f"docs/tutorials/{path.stem}.md does not hold {path.name} as it is now: "
        f"run python docs/gen_tutorials.py {path.stem[:2]}"
    )
    assert f"{NOT_RUN}\n```python\n" in page  # the docs examples' test leaves it to this file
    assert f"```bash\npython tutorials/{path.name} --quick\n```" in page
    assert "```text\n" in page  # what it printed
    fenced = re.findall(r"^```\w*\n(.*?)^```$", page, flags=re.M | re.S)
    too_long = [line for block in fenced for line in block.splitlines() if len(line) > 88]
    assert not too_long, f"lines the site would cut at the right: {too_long}"
