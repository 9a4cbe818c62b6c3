"""Every tutorial runs to completion on its tiny budget (``--quick``), and its page on the site holds it.

The pages (docs/tutorials/NN_name.md) are written by ``python docs/gen_tutorials.py``:
each holds its script byte for byte, and in its ```text block what the script
printed. ``test_tutorial_runs`` runs the script as the page says and compares its
standard output (the worker processes' included) with that block, with the
matcher of tests/test_docs_examples.py: trailing whitespace and blank lines at
the start and end are ignored, ``...`` inside a line matches any text within the
line, and a printed line longer than 88 characters is shown wrapped, continued 4
spaces in. What varies between runs or machines (wall times, steps per second,
dated run directories, temporary paths, and what depends on which worker
process finished first) is written as ``...`` by the generator, from its
per-tutorial table ``VARIES`` of regular expressions; the figures a seed decides
are compared exactly. On a mismatch the test shows a diff and says to run the
generator for that tutorial.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from test_docs_examples import code_blocks, output_differs

ROOT = Path(__file__).resolve().parents[1]
TUTORIALS = sorted((ROOT / "tutorials").glob("[0-9][0-9]_*.py"))
PAGES = ROOT / "docs" / "tutorials"
NOT_RUN = "<!-- not run: tests/test_tutorials.py runs the script itself -->"


def generator() -> ModuleType:
    """docs/gen_tutorials.py, imported (docs/ is not a package)."""
    spec = importlib.util.spec_from_file_location("gen_tutorials", ROOT / "docs" / "gen_tutorials.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_tutorials_are_found() -> None:
    assert any(path.name == "01_structures.py" for path in TUTORIALS)


@pytest.mark.timeout(660)  # the script's own limit, 600 s, decides; pytest's 120 s would stop it first
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
    page = PAGES / f"{path.stem}.md"
    shown = [block for block in code_blocks(page.read_text()) if block.language == "text"]
    assert len(shown) == 1, f"{page.name} has {len(shown)} text blocks, not one: its output"
    where = f"{page.relative_to(ROOT).as_posix()}:{shown[0].first_line}"
    difference = output_differs(result.stdout, shown[0].lines, where)
    if difference is not None:
        pytest.fail(
            f"{difference}\n\n{path.name} no longer prints what its page shows: if that is meant, "
            f"run python docs/gen_tutorials.py {path.stem[:2]} (what varies from run to run "
            "is written as `...` by its VARIES)"
        )


def test_what_varies_is_written_as_an_ellipsis() -> None:
    gen = generator()
    assert set(gen.VARIES) <= {t.name[:2] for t in TUTORIALS}, "VARIES names a tutorial that is not there"
    for name in gen.VARIES:
        assert gen.varies(Path(f"{name}_x.py"))  # each expression compiles and has a group
    script = Path("09_x.py")
    printed = (
        "final return 9.4 (training 2.7 s, set-up 0.2 s, total 3.5 s)\n"
        "run directory: runs/ppo-s0-20261126-142012 (logdir runs/ppo-s0-20261126-142012)"
    )
    assert gen.unvarying(script, printed) == (
        "final return 9.4 (training ... s, set-up ... s, total ... s)\n"
        "run directory: runs/ppo-s0-... (logdir runs/ppo-s0-...)",
        True,
    )
    with pytest.raises(ValueError, match="matched no line"):
        gen.unvarying(script, "final return 9.4")
    assert gen.unvarying(Path("00_x.py"), "a 1.5 s\nb") == ("a 1.5 s\nb", False)


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
