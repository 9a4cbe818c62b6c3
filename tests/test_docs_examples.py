"""Every python example in README.md and docs/ runs and prints what the page shows; code lines fit.

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

What a block prints is checked too. A run ```python block whose next fenced block
on the page (with only prose between) is a ```text block must print that text:
each block's closing-fence line, empty in the script, prints a marker, and the
main script's standard output is cut at the markers. The comparison ignores
trailing whitespace and blank lines at the start and end; ``...`` inside a line
matches any text within that line, and a line that is only ``...`` matches any
number of lines (wall times, throughput, dated run directories, memory
addresses). A printed line longer than the page (88 characters) is shown
wrapped, continued 4 spaces in (as docs/gen_tutorials.py wraps), and a line
break followed by indentation on the page matches a space where the output did
not break. A text block preceded by ``<!-- output not compared: REASON -->`` is
not compared: one that is not the output of the block above it (a shell session,
a file listing), or output that varies in a way ``...`` cannot express. On a
mismatch the test shows a diff against the text block, named by its page line,
and what the block printed, wrapped as the page shows it.

Only the main script's own ``print`` output is compared: line 1 of the script
(never code: a page's first code line is below its opening fence) points
``sys.stdout`` at a file of its own, so worker processes (forked, spawned, Ray
actors, ``rlstruct.cluster`` ranks) and C libraries, which write to the inherited
standard output, are left out, and so is the standard error, where training's
progress lines go (warnings are errors already). A page cannot use
``from __future__`` imports, which would have to come before that line.

Pages are found by globbing, so a page added to docs/ is checked without
changing this file. A page that fails only because a package of an optional
extra (``bullet``, ``ray``) is not installed is skipped, saying which extra to
install; CI installs them all.
"""

from __future__ import annotations

import difflib
import importlib.util
import itertools
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import NamedTuple

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("**/*.md"))]
MAX_LINE = 88
NOT_RUN = re.compile(r"^\s*<!--\s*not run:\s*\S.*-->\s*$")
NOT_COMPARED = re.compile(r"^\s*<!--\s*output not compared:\s*\S.*-->\s*$")
MARKER = re.compile(r"^\x1e<block (\d+)>$")  # what a block's closing-fence line prints
STDOUT = "RLSTRUCT_DOCS_STDOUT"  # the file the main script's sys.stdout writes to
# Line 1 of every script: the main process prints into the file named by $STDOUT, and
# unsets it so that processes started later do not; a forked child, which inherits
# sys.stdout, gets the standard output back (flushed before, so it writes nothing twice).
PRELUDE = (
    "import os, sys\n"
    f"path = os.environ.pop({STDOUT!r}, None)\n"
    "if path is not None:\n"
    "    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)\n"
    "    out = sys.stdout = open(fd, 'w', buffering=1, encoding='utf-8', closefd=False)\n"
    "    os.register_at_fork(\n"
    "        before=out.flush, after_in_child=lambda: setattr(sys, 'stdout', sys.__stdout__)\n"
    "    )\n"
)
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)")
# packages of the optional extras, by the extra that installs them
EXTRAS = {
    "pybullet": "bullet",
    "pybullet_envs_gymnasium": "bullet",
    "ray": "ray",
    "lz4": "ray",
    "zstandard": "ray",
}


class Block(NamedTuple):
    """A fenced code block of a page."""

    language: str  # the fence's language, "" when none
    first_line: int  # the 1-based page line of the first code line
    lines: list[str]  # the code lines, with the fence's indentation removed
    not_run: bool  # the last non-blank line before the fence is <!-- not run: ... -->
    not_compared: bool  # ... or <!-- output not compared: ... -->

    @property
    def closing_line(self) -> int:
        """The 1-based page line of the closing fence."""
        return self.first_line + len(self.lines)


def code_blocks(text: str) -> list[Block]:
    """The fenced code blocks of a markdown text, in page order."""
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
        blocks.append(
            Block(
                language,
                start + 1,
                body,
                NOT_RUN.match(previous) is not None,
                NOT_COMPARED.match(previous) is not None,
            )
        )
        i = end + 1
    return blocks


def runs(block: Block) -> bool:
    return block.language == "python" and not block.not_run


def compared(blocks: list[Block]) -> list[tuple[Block, Block]]:
    """The (python block, text block) pairs of a page whose output is compared.

    The text block is the next fenced block after a run python block (only prose
    between), and is not marked ``<!-- output not compared: ... -->``.
    """
    return [
        (block, after)
        for block, after in itertools.pairwise(blocks)
        if runs(block) and after.language == "text" and not after.not_compared
    ]


def page_script(text: str) -> str:
    """The page's python blocks as one script, each block on its page lines.

    Line 1 is the ``PRELUDE`` and each block's closing-fence line prints the
    block's marker, ``\\x1e<block N>`` with N the page line of its first code line.
    """
    lines = text.splitlines()
    script = [""] * len(lines)
    for block in code_blocks(text):
        if runs(block):
            first = block.first_line - 1
            script[first : first + len(block.lines)] = block.lines
            if block.closing_line > len(script):  # a fence left open at the end of the page
                script.append("")
            script[block.closing_line - 1] = f'print("\\x1e<block {block.first_line}>", flush=True)'
    if any(line.strip() for line in script):
        assert not script[0], "a page's first code line is below its opening fence"
        script[0] = f"exec({PRELUDE!r}, {{}})"
    return "\n".join(script) + "\n"


def printed_by_block(stdout: str) -> dict[int, str]:
    """What each block printed, by the page line of its first code line, cut at the markers."""
    printed: dict[int, str] = {}
    lines: list[str] = []
    for line in stdout.split("\n"):  # not splitlines(), which cuts at \x1e too
        marker = MARKER.match(line)
        if marker is None:
            lines.append(line)
            continue
        printed[int(marker.group(1))] = "\n".join(lines)
        lines = []
    return printed


def normalized(text: str) -> list[str]:
    """The lines of ``text`` without trailing whitespace, and without blank lines at its start and end."""
    lines = [line.rstrip() for line in text.splitlines()]
    while lines and not lines[0]:
        del lines[0]
    while lines and not lines[-1]:
        del lines[-1]
    return lines


def wrapped(text: str) -> list[str]:
    """Printed text as a page shows it: lines longer than the page wrapped, continued 4 spaces in."""
    lines = []
    for line in normalized(text):
        if len(line) <= MAX_LINE:
            lines.append(line)
        else:
            lines += textwrap.wrap(line, MAX_LINE, subsequent_indent="    ", break_on_hyphens=False)
    return lines


def output_pattern(expected: list[str]) -> re.Pattern[str]:
    """A regular expression for printed text (its lines, each ending in a newline) that ``expected`` shows.

    A line that is only ``...`` matches any number of lines and ``...`` inside a
    line any text within it. A line break followed by an indented line matches
    itself or spaces (the page wrapped a long printed line there).
    """

    def wildcard(line: str) -> bool:
        return line.strip() == "..."

    def continues(line: str, following: str) -> bool:
        return not wildcard(line) and following.startswith(" ") and not wildcard(following)

    parts = []
    for k, line in enumerate(expected):
        if wildcard(line):
            parts.append(r"(?:[^\n]*\n)*?")
            continue
        shown = line.lstrip(" ") if k > 0 and continues(expected[k - 1], line) else line
        # (the indentation of a continued line is in the previous line's ending)
        parts.append("[^\n]*?".join(re.escape(piece) for piece in shown.split("...")))
        following = expected[k + 1] if k + 1 < len(expected) else ""
        if continues(line, following):
            indent = len(following) - len(following.lstrip(" "))
            parts.append(rf"(?:\n {{{indent}}}| +)")
        else:
            parts.append(r"\n")
    return re.compile("".join(parts))


def output_differs(printed: str, expected: list[str], where: str) -> str | None:
    """``None`` when ``printed`` matches the text block's lines ``expected``; else a diff saying how not.

    ``where`` names the text block, as ``page:line``.
    """
    expected = normalized("\n".join(expected))
    actual = normalized(printed)
    if output_pattern(expected).fullmatch("".join(line + "\n" for line in actual)):
        return None
    diff = difflib.unified_diff(
        expected, wrapped(printed), f"{where} (the page)", "printed", n=2, lineterm=""
    )
    shown = "\n".join(wrapped(printed)) or "(nothing)"
    return (
        f"{where}: the text block is not what the python block above it printed "
        "(`...` matches any text)\n"
        + "\n".join(diff)
        + f"\n\nwhat it printed, as the page shows it:\n{shown}"
    )


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
        "Prose between a block and its output.\n"
        "```text\n"
        "1\n"
        "```\n"
        "<!-- output not compared: a shell session -->\n"
        "```text\n"
        "$ ls\n"
        "```\n"
    )
    script = page_script(text).splitlines()
    assert script[0] == f"exec({PRELUDE!r}, {{}})"
    assert script[1:] == [
        "",
        "x = 1",
        'print("\\x1e<block 3>", flush=True)',
        *[""] * 7,
        "print(x)",
        'print("\\x1e<block 12>", flush=True)',
        *[""] * 8,
    ]
    assert len(script) == len(text.splitlines())  # every block on its page lines
    blocks = code_blocks(text)
    assert [(b.language, b.first_line, b.not_run, b.not_compared) for b in blocks] == [
        ("python", 3, False, False),
        ("python", 8, True, False),
        ("python", 12, False, False),
        ("text", 16, False, False),
        ("text", 20, False, True),
    ]
    assert compared(blocks) == [(blocks[2], blocks[3])]


def test_a_not_run_block_has_no_output_to_compare() -> None:
    text = "# A page\n<!-- not run: needs a GPU -->\n```python\nprint(1)\n```\n```text\n1\n```\n"
    assert compared(code_blocks(text)) == []
    assert not page_script(text).strip()


def run_page(text: str, tmp_path: Path) -> tuple[subprocess.CompletedProcess[str], Path]:
    """Run ``text``'s python blocks as the page test does; returns the process and the file of the script's prints."""
    (tmp_path / "page.py").write_text(page_script(text))
    stdout = tmp_path / "stdout.txt"
    result = subprocess.run(
        [sys.executable, "page.py"],
        cwd=tmp_path,
        env={**os.environ, STDOUT: str(stdout)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    return result, stdout


def test_the_printed_text_is_cut_at_the_markers(tmp_path: Path) -> None:
    text = (
        "# A page\n"
        "```python\n"
        "print('one')\n"
        "```\n"
        "```python\n"
        "x = 2\n"
        "```\n"
        "```python\n"
        "import sys\n"
        "print('three', file=sys.stderr)\n"
        "print('three')\n"
        "print()\n"
        "```\n"
    )
    result, stdout = run_page(text, tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""  # the main script prints into the file
    assert printed_by_block(stdout.read_text()) == {3: "one", 6: "", 9: "three\n"}


def test_other_processes_print_to_the_standard_output(tmp_path: Path) -> None:
    if not hasattr(os, "fork"):
        pytest.skip("no os.fork here")
    text = (
        "# A page\n"
        "```python\n"
        "import os, subprocess, sys\n"
        "print('before')\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    print('forked', flush=True)\n"
        "    os._exit(0)\n"
        "os.waitpid(pid, 0)\n"
        "subprocess.run([sys.executable, '-c', 'print(\"started\")'], check=True)\n"
        "print('after')\n"
        "```\n"
    )
    result, stdout = run_page(text, tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "forked\nstarted\n"
    assert printed_by_block(stdout.read_text()) == {3: "before\nafter"}


@pytest.mark.parametrize(
    ("printed", "page"),
    [
        ("1\n", ["1"]),
        ("\n\n1   \n2\n\n", ["", "1", "2  ", ""]),  # trailing spaces, blank lines around
        ("loss 1.019 in 2.5 s\n", ["loss 1.019 in ... s"]),
        ("a\nb\nc\nd\n", ["a", "...", "d"]),
        ("a\nd\n", ["a", "...", "d"]),  # ... may stand for no line
        ("anything\nat all\n", ["..."]),
        ("", []),
        ("a long line, as printed\n", ["a long line,", "    as printed"]),  # wrapped by the page
        ("an indented\n    line\n", ["an indented", "    line"]),
        (
            "run runs/ppo-20261125-160239 (file runs/ppo-20261125-160239)\n",
            ["run runs/ppo-... (file", "    runs/ppo-...)"],
        ),
    ],
)
def test_output_that_matches(printed: str, page: list[str]) -> None:
    assert output_differs(printed, page, "page.md:9") is None


@pytest.mark.parametrize(
    ("printed", "page"),
    [
        ("1\n", ["2"]),
        ("1\n2\n", ["1"]),  # a line more
        ("1\n", ["1", "2"]),  # a line less
        ("a b\n", ["a", "b"]),  # a break the output does not have
        ("a\nb\n", ["a", "    b"]),  # an indentation it does not have
        ("loss 1.0\nin 2.5 s\n", ["loss ... s"]),  # ... within a line only
        ("a\nb\n", ["a", "...", "c"]),
        ("", ["1"]),
    ],
)
def test_output_that_differs(printed: str, page: list[str]) -> None:
    assert output_differs(printed, page, "page.md:9") is not None


def test_a_difference_is_shown_as_a_diff_naming_the_page_line() -> None:
    printed = "ppo on CartPole-v1: final greedy return 264.5 +- 37.9 over 10 episodes after 9984 env steps\n"
    page = [
        "ppo on CartPole-v1: final greedy return 241.4 +- 62.6 over 10 episodes after 9984 env",
        "    steps",
    ]
    assert output_differs(printed, page, "docs/getting-started.md:274") == (
        "docs/getting-started.md:274: the text block is not what the python block above it "
        "printed (`...` matches any text)\n"
        "--- docs/getting-started.md:274 (the page)\n"
        "+++ printed\n"
        "@@ -1,2 +1,2 @@\n"
        "-ppo on CartPole-v1: final greedy return 241.4 +- 62.6 over 10 episodes after 9984 env\n"
        "+ppo on CartPole-v1: final greedy return 264.5 +- 37.9 over 10 episodes after 9984 env\n"
        "     steps\n"
        "\n"
        "what it printed, as the page shows it:\n"
        "ppo on CartPole-v1: final greedy return 264.5 +- 37.9 over 10 episodes after 9984 env\n"
        "    steps"
    )


def test_pages_are_found() -> None:
    ids = {page_id(page) for page in RUNNABLE}
    assert {"README.md", "docs/agents.md", "docs/batchers.md"} <= ids


@pytest.mark.slow
@pytest.mark.timeout(360)
@pytest.mark.parametrize("page", RUNNABLE, ids=page_id)
def test_page_examples_run(page: Path, tmp_path: Path) -> None:
    """The page's python blocks run, and those followed by a text block print it."""
    text = page.read_text()
    workdir = tmp_path / "examples"  # the examples' working directory: page.py and what they write
    workdir.mkdir()
    script = workdir / "page.py"
    script.write_text(page_script(text))
    stdout = tmp_path / "stdout.txt"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.setdefault("MPLBACKEND", "Agg")
    env[STDOUT] = str(stdout)
    try:
        result = subprocess.run(
            [sys.executable, "-W", "error", script.name],
            cwd=workdir,
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
    printed = printed_by_block(stdout.read_text(encoding="utf-8"))
    differences = [
        output_differs(printed.get(block.first_line, ""), after.lines, f"{page_id(page)}:{after.first_line}")
        for block, after in compared(code_blocks(text))
    ]
    differences = [difference for difference in differences if difference is not None]
    assert not differences, "\n\n".join(differences)


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_code_lines_fit_the_page(page: Path) -> None:
    too_long = [
        f"{page_id(page)}:{first_line + k}: {len(line)} characters"
        for _, first_line, body, _, _ in code_blocks(page.read_text())
        for k, line in enumerate(body)
        if len(line) > MAX_LINE
    ]
    assert not too_long, f"code lines longer than {MAX_LINE} characters:\n" + "\n".join(too_long)
