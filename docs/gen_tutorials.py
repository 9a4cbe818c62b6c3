"""Write the tutorial pages of the site: each script's docstring, source and printed output.

For every ``tutorials/NN_name.py`` this runs ``python tutorials/NN_name.py --quick``
(the budget the test suite runs them on) in a fresh temporary directory and
writes ``docs/tutorials/NN_name.md``: the docstring's first line as the title,
its other paragraphs as the introduction, the command, the whole script and
what it printed on standard output. An image the script writes into its
working directory (``.png``, ``.gif``, ``.svg``) is copied next to the page and
shown under the output.

What varies from one run or machine to the next (wall times, steps per second,
dated run directories, temporary paths, and what depends on which worker
process finished first: policy lags, and what an asynchronous learner learnt)
is written as ``...`` in the output: ``VARIES`` holds, per tutorial, the regular
expressions that find it, each with why it varies. Everything else, the figures
a seed decides (losses and returns of synchronous runs), is written as printed.
A line longer than the site's code blocks (88 characters) is wrapped, continued
4 spaces in.

Usage:
    python docs/gen_tutorials.py [NAME ...]

With names (``05``, ``05_a2c_from_scratch``), only those pages are written.
tests/test_tutorials.py checks that every tutorial has a page, that each page
holds its script byte for byte, and that what the script prints matches the
page's output block (with the matcher of tests/test_docs_examples.py, for which
``...`` in a line stands for any text in it): run this again after editing a
tutorial, and add to ``VARIES`` what a rerun shows to vary.
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
ELLIPSIS = "..."  # in a page's output block: any text within the line

# What varies between runs or machines, by tutorial (the "NN" of NN_name.py): regular
# expressions searched in every line the tutorial prints; the text of each of their
# groups is written as "...". Each must match some line: if a tutorial no longer
# prints it, writing its page fails until the entry is updated. Figures that a seed
# decides (losses, returns, episode lengths of synchronous runs) are not listed: the
# page keeps them exact, and a change of them is a change to look at.
VARIES: dict[str, list[str]] = {
    "04": [
        # How many training batches arrived before the evaluation in the background
        # finished: a race between the worker processes of two batchers.
        r"^(\d+) training batches of ",
        # Streaming: the slot finished first, and the weights its worker had loaded,
        # depend on how the worker processes were scheduled.
        r"trajectories, policy lag (\d+)$",
        # Throughput: wall time.
        r"^(\d+) env steps/s consumed$",
    ],
    "06": [
        # IMPALA on the streaming batcher: which slot the learner takes, and so its
        # policy lag and the value loss computed on it, depends on which actor finished
        # first. (Updates, env steps and policy versions are counted: they stay.)
        r"  lag of this slot (\d+)  value loss (\S+)$",
        # Throughput (wall time), and the policy lags, as above.
        r"^\d+ updates, (\d+) env steps/s; policy lag mean (\S+), max (\d+)$",
        # The weights learnt depend on the order the slots came in.
        r"^greedy return over 8 episodes: (\S+) ",
    ],
    "08": [
        # Wall time and throughput.
        r" env steps in (\S+) s \((\d+)/s\), ",
        # The models are saved in a temporary directory.
        r"^\w+: saved to (.+)/\w+\.pt$",
        # PPO, synchronous: a gradient worker's batch joins the rollouts of its two
        # collection workers in the order they finished, so its minibatches, and what
        # it learns, depend on that order. (Env steps, updates, and the policy lag and
        # gradient asynchrony of a synchronous scheme, 0, stay.)
        r"^ppo: training return (\S+), ",
        r"^ppo: greedy evaluation (\S+) \+- (\S+) over ",
        # IMPALA, asynchronous: a step applies every gradient that has arrived, so the
        # run can end past its 4096 env steps with more updates; the lags, and what it
        # learns, depend on which worker finished first.
        r"^impala: (\d+) env steps in .*, (\d+) updates,$",
        r"^impala: training return (\S+), policy lag (\S+), gradient asynchrony (\S+),$",
        r"^impala: greedy evaluation (\S+) \+- (\S+) over ",
    ],
    "09": [
        # Wall times of ppo.train's final line.
        r"\(training (\S+) s, set-up (\S+) s, total (\S+) s\)$",
        # The run directory is named after the date and time it was made.
        r"runs/\S+?-(\d{8}-\d{6})\b",
    ],
}


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


def varies(script: Path) -> list[re.Pattern[str]]:
    """The expressions of ``VARIES`` for ``script`` (none when its number is not there)."""
    patterns = [re.compile(pattern) for pattern in VARIES.get(script.name[:2], [])]
    for pattern in patterns:
        if not pattern.groups:
            raise ValueError(f"VARIES[{script.name[:2]!r}]: {pattern.pattern!r} has no group to write as ...")
    return patterns


def unvarying(script: Path, output: str) -> tuple[str, bool]:
    """``output`` with what varies between runs (``VARIES``) written as ``...``; and whether any was.

    Raises:
        ValueError: if an expression of ``VARIES`` matches no line (the tutorial
            changed: update it), or would leave a line that is only ``...`` (which
            the test takes for any number of lines).
    """
    patterns = varies(script)
    used: set[str] = set()
    lines = []
    for line in output.splitlines():
        spans: list[tuple[int, int]] = []
        for pattern in patterns:
            for match in pattern.finditer(line):
                used.add(pattern.pattern)
                spans += [match.span(g) for g in range(1, pattern.groups + 1) if match.start(g) >= 0]
        merged: list[list[int]] = []
        for start, end in sorted(spans):
            if merged and start <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], end)
            else:
                merged.append([start, end])
        for start, end in reversed(merged):
            line = line[:start] + ELLIPSIS + line[end:]
        if merged and line.strip() == ELLIPSIS:
            raise ValueError(f"{script.name}: VARIES would leave a line that is only {ELLIPSIS}")
        lines.append(line)
    unused = [pattern.pattern for pattern in patterns if pattern.pattern not in used]
    if unused:
        raise ValueError(
            f"VARIES[{script.name[:2]!r}]: {unused} matched no line of what {script.name} printed: "
            f"update them\n{output}"
        )
    return "\n".join(lines), bool(used)


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
        line = line.rstrip()
        if len(line) <= WIDTH:
            lines.append(line)
            continue
        lines += textwrap.wrap(line, WIDTH, subsequent_indent="    ", break_on_hyphens=False)
    return "\n".join(lines), any(len(line.rstrip()) > WIDTH for line in output.splitlines())


def page(script: Path, output: str, images: list[str]) -> str:
    """The Markdown page of ``script``, given what it printed and the images it wrote."""
    source = script.read_text()
    docstring = ast.get_docstring(ast.parse(source), clean=True)
    if not docstring:
        raise ValueError(f"{script.name} has no module docstring to take the page's title from")
    title, text = intro(docstring)
    shown = " ".join(command(script))
    output, varied = unvarying(script, output.strip("\n"))
    output, wrapped = wrap(output)
    said = ""
    if varied:
        said += f" `{ELLIPSIS}` stands for what changes from run to run (timings, and what depends on them)."
    if wrapped:
        said += f" Lines longer than {WIDTH} characters are wrapped, continued 4 spaces in."
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
