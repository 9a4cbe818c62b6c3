"""Write the tutorial pages of the site: each script's docstring, source and printed output.

For every ``tutorials/NN_name.py`` this runs ``python tutorials/NN_name.py --quick``
(the budget the test suite runs them on) in a fresh temporary directory and
writes ``docs/tutorials/NN_name.md``: the docstring's first line as the title,
its other paragraphs as the introduction, the command, the whole script and
what it printed on standard output. An image the script writes into its
working directory (``.png``, ``.gif``, ``.svg``) is copied next to the page and
shown under the output.

Usage:
    python docs/gen_tutorials.py [NAME ...]

With names (``05``, ``05_a2c_from_scratch``), only those pages are written.
tests/test_tutorials.py checks that every tutorial has a page and that each
page holds its script byte for byte: run this again after editing a tutorial.
"""

from __future__ import annotations

import argparse
import ast
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TUTORIALS = ROOT / "tutorials"
PAGES = ROOT / "docs" / "tutorials"
IMAGE_SUFFIXES = (".png", ".gif", ".svg")
NOT_RUN = "<!-- not run: tests/test_tutorials.py runs the script itself -->"
TIMEOUT_S = 900
WIDTH = 88  # the longest line of a code block the site shows without cutting it


def tutorials() -> list[Path]:
    """The tutorial scripts, in their order (``NN_name.py`` under ``tutorials/``)."""
    return sorted(TUTORIALS.glob("[0-9][0-9]_*.py"))


def command(script: Path) -> list[str]:
    """The command line of a tutorial's page, as run from the repository root."""
    return ["python", f"tutorials/{script.name}", "--quick"]


def intro(docstring: str) -> tuple[str, str]:
    """The title (the first line, without its final period) and the rest of a docstring, as Markdown.

    A block of lines indented by 4 spaces (shell commands, in the tutorials)
    becomes a fenced ``bash`` block.
    """
    first, _, rest = docstring.strip().partition("\n")
    out: list[str] = []
    in_block = False
    for line in rest.strip().splitlines():
        indented = line.startswith("    ")
        if indented and not in_block and (not out or out[-1] == ""):
            out.append("```bash")
            in_block = True
        elif in_block and not (indented and line.strip()):  # a blank or unindented line ends it
            out.append("```")
            in_block = False
        out.append(line[4:] if in_block else line)
    if in_block:
        out.append("```")
    return first.rstrip("."), "\n".join(out).strip()


def run(script: Path, workdir: Path) -> str:
    """Run a tutorial with ``--quick`` in ``workdir``; return its standard output."""
    done = subprocess.run(
        [sys.executable, str(script), "--quick"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        cwd=workdir,
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"{script.name} exited with status {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
    return done.stdout


def wrap(output: str) -> tuple[str, bool]:
    """``output`` with every line longer than ``WIDTH`` wrapped, continued 4 spaces in; and whether any was."""
    lines = []
    for line in output.splitlines():
        if len(line) <= WIDTH:
            lines.append(line)
            continue
        lines += textwrap.wrap(line, WIDTH, subsequent_indent="    ", break_on_hyphens=False)
    return "\n".join(lines), lines != output.splitlines()


def page(script: Path, output: str, images: list[str]) -> str:
    """The Markdown page of ``script``, given what it printed and the images it wrote."""
    source = script.read_text()
    docstring = ast.get_docstring(ast.parse(source), clean=True)
    if not docstring:
        raise ValueError(f"{script.name} has no module docstring to take the page's title from")
    title, text = intro(docstring)
    shown = " ".join(command(script))
    output, wrapped = wrap(re.sub(r"\n{3,}", "\n\n", output.strip("\n")))
    said = f" Lines longer than {WIDTH} characters are wrapped, continued 4 spaces in." if wrapped else ""
    parts = [
        f"# {title}",
        text,
        "## Run it",
        "From the repository root (`--quick`: the tiny budget the test suite runs it\n"
        f"on; without it, the full run):\n\n```bash\n{shown}\n```",
        "## The script",
        f"`tutorials/{script.name}`, in full:",
        f"{NOT_RUN}\n```python\n{source}```",
        "## What it prints",
        f"The standard output of `{shown}` (the `--quick` budget: short runs, small numbers).{said}",
        f"```text\n{output}\n```",
    ]
    parts += [f"![{name}: written by the script]({script.stem}/{name})" for name in images]
    return "\n\n".join(parts) + "\n"


def write(script: Path) -> Path:
    """Run ``script`` and write its page (and any image it wrote); return the page's path."""
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        output = run(script, workdir)
        images = sorted(p for p in workdir.rglob("*") if p.suffix in IMAGE_SUFFIXES)
        names = []
        if images:
            folder = PAGES / script.stem
            folder.mkdir(parents=True, exist_ok=True)
            for image in images:
                shutil.copyfile(image, folder / image.name)
                names.append(image.name)
    path = PAGES / f"{script.stem}.md"
    path.write_text(page(script, output, names))
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("names", nargs="*", metavar="NAME", help="tutorials to write (default: all)")
    args = parser.parse_args(argv)
    scripts = tutorials()
    if args.names:
        chosen = [s for s in scripts if any(s.stem == n or s.stem.startswith(f"{n}_") for n in args.names)]
        unknown = [
            n for n in args.names if not any(s.stem == n or s.stem.startswith(f"{n}_") for s in scripts)
        ]
        if unknown:
            parser.error(f"no tutorial is named {unknown[0]!r}; they are {[s.stem for s in scripts]}")
        scripts = chosen
    PAGES.mkdir(exist_ok=True)
    for script in scripts:
        print(f"{script.name} ...", end=" ", flush=True)
        print(write(script).relative_to(ROOT), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
