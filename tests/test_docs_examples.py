"""Every python example in README.md and docs/ runs, and every code line fits the page.

The convention the pages follow: the ```python blocks of one page are joined, in
order, into one script that runs as ``python page.py`` in a fresh temporary
directory, so a page defines its imports, agent and environment once and later
blocks build on them. A block preceded by the line ``<!-- not run: REASON -->``
(it needs a GPU or a real cluster) is left out.

Pages run as scripts in a new interpreter rather than being executed in this
process (as pytest-markdown-docs or mktestdocs would do) because a spawned
worker (the examples' workers are spawned where the main process runs threads)
re-imports the main module to find the agent and environment classes, and only
a real file on disk can be re-imported. A new interpreter per page also keeps one page's global
state (Ray, torch.distributed, seeds) from reaching another.

The script keeps each block on the lines it has on the page (the lines between
blocks are left empty), so a traceback's line number is the page's.

Pages are found by globbing, so a page added to docs/ is checked without
changing this file. A page that fails only because a package of an optional
extra (``bullet``, ``ray``) is not installed is skipped, saying which extra to
install; CI installs them all.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("**/*.md"))]
MAX_LINE = 88
NOT_RUN = re.compile(r"^\s*<!--\s*not run:\s*\S.*-->\s*$")
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)")
# packages of the optional extras, by the extra that installs them
EXTRAS = {
    "pybullet": "bullet",
    "pybullet_envs_gymnasium": "bullet",
    "ray": "ray",
    "lz4": "ray",
    "zstandard": "ray",
}


def code_blocks(text: str) -> list[tuple[str, int, list[str], bool]]:
    """The fenced code blocks of a markdown text.

    Returns:
        One ``(language, first_line, lines, not_run)`` per block: the fence's
        language (``""`` when none), the 1-based page line of the block's first
        code line, its lines with the fence's indentation removed, and whether
        the last non-blank line before the fence is a ``<!-- not run: ... -->``
        marker.
    """
    blocks = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        indent, fence, language = opening.groups()
        previous = next((line for line in reversed(lines[:i]) if line.strip()), "")
        start = i + 1
        end = start
        while end < len(lines) and not (
            lines[end].startswith(indent) and lines[end].strip().startswith(fence)
        ):
            end += 1
        body = textwrap.dedent("\n".join(lines[start:end])).split("\n") if end > start else []
        blocks.append((language, start + 1, body, NOT_RUN.match(previous) is not None))
        i = end + 1
    return blocks


def page_script(text: str) -> str:
    """The page's python blocks as one script, each block on its page lines."""
    script = [""] * len(text.splitlines())
    for language, first_line, body, not_run in code_blocks(text):
        if language == "python" and not not_run:
            script[first_line - 1 : first_line - 1 + len(body)] = body
    return "\n".join(script) + "\n"


def page_id(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


RUNNABLE = [page for page in PAGES if page_script(page.read_text()).strip()]


def test_the_convention_is_parsed_as_written() -> None:
    text = (
        "# A page\n"
        "```python\n"
        "x = 1\n"
        "```\n"
        "<!-- not run: needs a GPU -->\n"
        "\n"
        "```python\n"
        "x = torch.zeros(1, device='cuda')\n"
        "```\n"
        "!!! note\n"
        "    ```python\n"
        "    print(x)\n"
        "    ```\n"
        "```text\n"
        "1\n"
        "```\n"
    )
    assert page_script(text).splitlines() == ["", "", "x = 1", *[""] * 8, "print(x)", *[""] * 4]
    assert [(language, not_run) for language, _, _, not_run in code_blocks(text)] == [
        ("python", False),
        ("python", True),
        ("python", False),
        ("text", False),
    ]


def test_pages_are_found() -> None:
    ids = {page_id(page) for page in RUNNABLE}
    assert {"README.md", "docs/agents.md", "docs/batchers.md"} <= ids


@pytest.mark.slow
@pytest.mark.timeout(360)
@pytest.mark.parametrize("page", RUNNABLE, ids=page_id)
def test_page_examples_run(page: Path, tmp_path: Path) -> None:
    script = tmp_path / "page.py"
    script.write_text(page_script(page.read_text()))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.setdefault("MPLBACKEND", "Agg")
    try:
        result = subprocess.run(
            [sys.executable, "-W", "error", script.name],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    except subprocess.TimeoutExpired as error:
        pytest.fail(f"{page_id(page)}: the examples ran past 300 s\n{error.stderr!s:.3000}")
    if result.returncode != 0:
        missing = {name.split(".")[0] for name in re.findall(r"No module named '([\w.]+)'", result.stderr)}
        for name in sorted(missing & EXTRAS.keys()):
            if importlib.util.find_spec(name) is None:
                pytest.skip(f'{page_id(page)} needs {name}: pip install -e ".[{EXTRAS[name]}]"')
    assert result.returncode == 0, (
        f"{page_id(page)}: the examples failed (exit code {result.returncode}; line numbers "
        f"in page.py are the page's)\n{result.stderr[-3000:]}"
    )


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_code_lines_fit_the_page(page: Path) -> None:
    too_long = [
        f"{page_id(page)}:{first_line + k}: {len(line)} characters"
        for _, first_line, body, _ in code_blocks(page.read_text())
        for k, line in enumerate(body)
        if len(line) > MAX_LINE
    ]
    assert not too_long, f"code lines longer than {MAX_LINE} characters:\n" + "\n".join(too_long)
