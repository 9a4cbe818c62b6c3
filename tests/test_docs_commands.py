"""Every ``rlstruct train|eval|export|plot`` command that README.md and docs/ show parses, and train's validates.

The pages are found by glob (README.md and ``docs/**/*.md``), so a new page is
covered. A command is taken from a fenced block (a line starting with it, or
with ``$ `` and then it, or after ``&&``; backslash continuations joined; a
trailing ``# comment`` dropped) or from an inline code span that starts with
``rlstruct <command>`` (a span may run across a line break, as Markdown allows).

What is checked, through ``rlstruct.cli.main`` in this process, without training:

- ``rlstruct train ALGO ...``: the flags parse and the config passes the
  checks the run makes before anything starts (each algorithm's ``check``:
  field ranges, flags that fit together, the environment made once and
  stepped). Each algorithm's ``train`` is replaced by its ``check``, so no
  worker starts and no run directory is made. A command a page shows with an
  error line under it (``$ rlstruct ...`` then ``rlstruct: ...``) must fail
  with exit status 2 and that line (the page's wrapping undone); one shown
  with the tuned-settings line must print that line.
- ``rlstruct eval|export|plot ...``: the flags parse (no argparse mistake);
  the run directories they name need not exist.
- A mention of ``rlstruct train --flag`` without an algorithm: the flag is a
  field of some algorithm's ``Config``.

What is filled in or not checked:

- Placeholders: ``ALGO``, ``...`` and ``a|b|c`` in the algorithm's place stand
  for each algorithm they can be (``ALGO --resume`` not for IMPALA, which
  cannot resume); ``ID``, ``ENV_ID`` and an id with ``<...>``
  in it for CartPole-v1 (Pendulum-v1 for SAC); ``S`` for 0, ``N`` for 10000,
  ``PATH`` and ``OUT`` for a file in a temporary folder, ``COLUMN`` for
  ``eval_return_mean``; ``FLAGS`` and a bare ``...`` are dropped, and the
  brackets of a synopsis (``[--episodes N]``) are read as if the option were given.
- A fragment without ``--env`` (``rlstruct train dqn --prioritized``) is
  checked with the algorithm's default environment added (BitFlip-v0 for ``--her``).
- ``--resume RUN_DIR`` resumes a temporary run directory whose config.json
  holds the defaults (the run's environment read from a ``runs/ALGO-ENV-s0-...``
  name): the checkpoint a real resume needs is not there, so the output a
  page shows for a resume is not compared.
- Only parsing (no ``check``) for a command whose ``--env`` or ``--agent``
  module cannot be imported here (``walk:Walk-v0``, ``mymodule:Class``: the
  page's own files), and for ``--device cuda`` on a machine without CUDA
  unless the page shows that error under it.
- Nothing is trained, evaluated, plotted or exported: whether a run reaches
  the figures the pages print is the learning suite's (docs/performance.md).

The pages' ``python benchmarks/NAME.py ...`` and ``python tutorials/NAME.py ...``
lines are checked without running them: the script exists, and each ``--flag``
of the line is one its source (with benchmarks/_common.py, where the shared
flags are) gives ``add_argument``; their values are not checked (a run is
tests/test_benchmarks.py's and tests/test_tutorials.py's).
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import importlib.util
import json
import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import torch

from rlstruct.algos import ALGORITHMS
from rlstruct.cli import main as cli

ROOT = Path(__file__).resolve().parent.parent
FENCE = re.compile(r"^\s*(```|~~~)")
COMMAND = r"rlstruct (?:train|eval|export|plot)(?=\s|$)"
IN_BLOCK = re.compile(rf"(?:^|&&\s*)({COMMAND}.*)")
INLINE = re.compile(rf"(?<!`)(``?)({COMMAND}[^`]*)\1(?!`)")  # a code span: `...` or ``...``
DEFAULT_ENV = {algo: "Pendulum-v1" if algo == "sac" else "CartPole-v1" for algo in ALGORITHMS}
MODULES = {algo: importlib.import_module(f"rlstruct.algos.{algo}") for algo in ALGORITHMS}


class Command(NamedTuple):
    """One command on a page: where, its text, and the lines printed under it (a ``$`` prompt's output)."""

    page: str
    line: int
    text: str
    output: str

    def __str__(self) -> str:
        return f"{self.page}:{self.line}: {self.text}"


def pages() -> list[Path]:
    """README.md and every page under docs/."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def commands(path: Path) -> Iterator[Command]:
    """The ``rlstruct train|eval|export|plot`` commands of the page ``path``."""
    lines = path.read_text(encoding="utf-8").splitlines()
    page = str(path.relative_to(ROOT))
    prose: list[str] = []  # the page with its fenced blocks emptied, line for line
    inside = False
    i = 0
    while i < len(lines):
        if FENCE.match(lines[i]):
            inside = not inside
        elif inside:
            start, text = i, lines[i]
            while text.rstrip().endswith("\\") and i + 1 < len(lines):
                i += 1
                text = text.rstrip()[:-1] + " " + lines[i].strip()
            prompt = text.strip().startswith("$ ")
            found = IN_BLOCK.search(text.strip().removeprefix("$ "))
            if found:
                output = []
                after = i + 1
                while prompt and after < len(lines):
                    if FENCE.match(lines[after]) or lines[after].strip().startswith("$ "):
                        break
                    output.append(lines[after].strip())
                    after += 1
                command = re.sub(r"\s+#.*$", "", found.group(1)).strip()
                yield Command(page, start + 1, command, " ".join(output).strip())
            while prompt and i + 1 < len(lines) and not FENCE.match(lines[i + 1]):
                if lines[i + 1].strip().startswith("$ "):
                    break
                i += 1  # the output of a prompt: not a command
            prose.extend([""] * (i + 1 - len(prose)))
            i += 1
            continue
        prose.extend([""] * (i - len(prose)))
        prose.append("" if FENCE.match(lines[i]) else lines[i])
        i += 1
    text = "\n".join(prose)
    for span in INLINE.finditer(text):
        yield Command(page, text.count("\n", 0, span.start()) + 1, " ".join(span.group(2).split()), "")


ALL = [command for path in pages() for command in commands(path)]


def test_commands_are_found() -> None:
    """The extraction finds the pages' commands (a regex that matched nothing would pass every page)."""
    texts = {command.text for command in ALL}
    assert "rlstruct train ppo --env CartPole-v1" in texts
    assert any(text.startswith("rlstruct eval runs/") for text in texts)
    assert len(ALL) > 100


CANNOT = {"impala": "--resume"}
"""What an algorithm cannot do, as its page says: ``ALGO`` in a command with the flag does not stand for it."""


def algorithms(token: str, flags: list[str]) -> list[str]:
    """The algorithms that ``token``, in the algorithm's place of a command with ``flags``, stands for."""
    if token in ("ALGO", "..."):
        return [algo for algo in ALGORITHMS if CANNOT.get(algo) not in flags]
    return token.split("|")


def filled(tokens: list[str], algo: str, folder: Path) -> list[str]:
    """``tokens`` with the placeholders of a page's command replaced by values (see the module docstring)."""
    values = {"S": "0", "N": "10000", "COLUMN": "eval_return_mean"}
    argv: list[str] = []
    for token in tokens:
        token = token.strip("[]")
        if token in ("FLAGS", "...", ""):
            continue
        if token in ("PATH", "OUT"):
            token = str(folder / "out.png")
        elif token in ("ID", "ENV_ID") or ("<" in token and argv[-1:] == ["--env"]):
            token = DEFAULT_ENV[algo]
        elif "|" in token and argv[-1:] == ["--x"]:
            token = token.split("|")[0]
        argv.append(values.get(token, token))
    return argv


def importable(name: str) -> bool:
    """Whether the module part of ``"module:Name"`` can be imported here (True without a module part)."""
    if ":" not in name:
        return True
    try:
        return importlib.util.find_spec(name.split(":")[0]) is not None
    except (ImportError, ValueError):
        return False


def value(argv: list[str], flag: str) -> str | None:
    """The value given to ``flag`` in ``argv``; None if it is not there."""
    return argv[argv.index(flag) + 1] if flag in argv[:-1] else None


def resumable(algo: str, given: str, folder: Path) -> str:
    """A run directory to ``--resume``, whose config.json holds the defaults (the env of ``given``'s name)."""
    named = re.search(rf"{algo}-(.+?)-s\d+-", given)
    env = named.group(1) if named else DEFAULT_ENV[algo]
    run = folder / "run"
    run.mkdir(exist_ok=True)
    config = MODULES[algo].Config(env=env)
    (run / "config.json").write_text(json.dumps(dataclasses.asdict(config)), encoding="utf-8")
    return str(run)


def one_line(text: str) -> str:
    """``text`` with its wrapping undone: every run of whitespace one space."""
    return " ".join(text.split())


def check_train(
    command: Command,
    algo: str,
    argv: list[str],
    folder: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``rlstruct train algo argv`` parses and passes the checks before training (or fails as the page shows)."""
    where = f"{command} (checked as: rlstruct train {algo} {shlex.join(argv)})"
    if "--help" not in argv and "--env" not in argv and "--resume" not in argv:
        env = "BitFlip-v0" if "--her" in argv else DEFAULT_ENV[algo]  # --her needs goals
        argv = ["--env", env, *argv]  # a fragment: a flag mentioned in prose
    if (resume := value(argv, "--resume")) is not None:
        argv[argv.index("--resume") + 1] = resumable(algo, resume, folder)
    expected = command.output if command.output.startswith("rlstruct") and resume is None else ""
    module = MODULES[algo]
    check = module.check
    no_gpu = value(argv, "--device") == "cuda" and not torch.cuda.is_available() and not expected
    if not all(importable(value(argv, flag) or "") for flag in ("--env", "--agent")) or no_gpu:
        monkeypatch.setattr(module, "check", lambda config: None)  # their files are the page's own

    def checked(config: Any, **_: Any) -> dict[str, Any]:
        module.check(config)
        return {}

    monkeypatch.setattr(module, "train", checked)
    capsys.readouterr()
    status = cli(["train", algo, *argv])
    out, err = capsys.readouterr()
    monkeypatch.setattr(module, "check", check)
    if expected:
        assert status == 2, f"{where}: the page shows it failing with {expected!r}; status {status}"
        assert one_line(err) == one_line(expected), f"{where}: the page shows {expected!r}; printed {err!r}"
        return
    assert status == 0, f"{where}: exit status {status}: {err.strip()}"
    if command.output.startswith("tuned settings"):
        shown = one_line(command.output)
        assert one_line(out).startswith(shown), f"{where}: the page shows {shown!r}, it printed {out!r}"


def check_mention(command: Command, tokens: list[str]) -> None:
    """``rlstruct train --flag ...`` without an algorithm: each flag is a field of some algorithm's Config."""
    fields = {
        "--" + field.name.replace("_", "-")
        for module in MODULES.values()
        for field in dataclasses.fields(module.Config)
    }
    fields |= {"--no-" + flag.removeprefix("--") for flag in fields} | {"--help", "-h"}
    unknown = [token for token in tokens if token.startswith("-") and token not in fields]
    assert not unknown, f"{command}: no algorithm has {unknown}"


def check_other(command: Command, name: str, argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """``rlstruct eval|export|plot argv``: no argparse mistake (the run directories may not exist)."""
    capsys.readouterr()
    status = cli([name, *argv])
    err = capsys.readouterr().err
    assert status in (0, 2), f"{command}: exit status {status}: {err.strip()}"
    assert "--help lists the flags" not in err, f"{command}: its flags do not parse: {err.strip()}"


def test_a_drifted_command_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The checks catch a flag that no longer parses (they lean on the CLI's wording, which could change)."""
    monkeypatch.chdir(tmp_path)
    for name in ("eval", "export", "plot"):
        drifted = Command("page.md", 1, f"rlstruct {name} runs/x out.pt2 --no-such-flag", "")
        with pytest.raises(AssertionError, match="its flags do not parse"):
            check_other(drifted, name, ["runs/x", "out.pt2", "--no-such-flag"], capsys)
    drifted = Command("page.md", 1, "rlstruct train ppo --no-such-flag", "")
    with pytest.raises(AssertionError, match="exit status 2"):
        check_train(drifted, "ppo", ["--no-such-flag"], tmp_path, monkeypatch, capsys)
    with pytest.raises(AssertionError, match="no algorithm has"):
        check_mention(Command("page.md", 1, "rlstruct train --no-such-flag", ""), ["--no-such-flag"])


@pytest.mark.parametrize("command", ALL, ids=str)
def test_command(
    command: Command, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The command parses as the page shows it, and ``rlstruct train``'s config validates."""
    # --json result.json, --out wall.png, --gif cartpole.gif: checked in a folder of the test's own
    monkeypatch.chdir(tmp_path)
    tokens = shlex.split(command.text)[1:]
    name, rest = tokens[0], tokens[1:]
    if not rest:
        return  # the command named in prose
    if name != "train":
        check_other(command, name, filled(rest, "ppo", tmp_path), capsys)
        return
    if rest[0].startswith("-") and rest != ["--help"]:
        check_mention(command, rest)
        return
    if rest == ["--help"]:
        assert cli(["train", "--help"]) == 0, str(command)
        return
    for algo in algorithms(rest[0], rest[1:]):
        assert algo in ALGORITHMS, f"{command}: unknown algorithm {algo!r}"
        check_train(command, algo, filled(rest[1:], algo, tmp_path), tmp_path, monkeypatch, capsys)


SCRIPT = re.compile(r"python3? ((?:benchmarks|tutorials)/\w+\.py)((?:\\\n|[^\n`#|])*)")
"""A script's command line on a page: its path, then its arguments up to a comment (continuations joined)."""


def script_lines() -> Iterator[tuple[str, str, list[str]]]:
    """``(where, script, arguments)`` for each ``python benchmarks|tutorials/NAME.py ...`` of the pages."""
    for path in pages():
        text = path.read_text(encoding="utf-8")
        for found in SCRIPT.finditer(text):
            where = f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, found.start()) + 1}"
            yield where, found.group(1), found.group(2).replace("\\\n", " ").split()


def flags_of(script: Path) -> set[str]:
    """The option strings the ``add_argument`` calls of ``script`` (and of benchmarks/_common.py) give."""
    sources = [script, ROOT / "benchmarks" / "_common.py"] if script.parent.name == "benchmarks" else [script]
    flags = {"-h", "--help"}
    for source in sources:
        for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            if node.func.attr != "add_argument":
                continue
            named = [
                arg.value for arg in node.args if isinstance(arg, ast.Constant) and isinstance(arg.value, str)
            ]
            flags |= {name for name in named if name.startswith("-")}
            if any(
                isinstance(k.value, ast.Attribute) and k.value.attr == "BooleanOptionalAction"
                for k in node.keywords
            ):
                flags |= {"--no-" + name[2:] for name in named if name.startswith("--")}
    return flags


SCRIPTS = list(script_lines())


def test_script_lines_are_found() -> None:
    """The extraction finds the pages' benchmark and tutorial lines, with their flags."""
    assert any(script == "benchmarks/replay.py" for _, script, _ in SCRIPTS)
    assert any(
        script == "tutorials/07_cluster_ppo.py" and "--n-processes" in argv for _, script, argv in SCRIPTS
    )


@pytest.mark.parametrize(("where", "script", "argv"), SCRIPTS, ids=[f"{w}: {s}" for w, s, _ in SCRIPTS])
def test_script_line_flags_exist(where: str, script: str, argv: list[str]) -> None:
    """Each ``--flag`` of a page's benchmark or tutorial command line is one the script takes."""
    path = ROOT / script
    assert path.is_file(), f"{where}: {script} does not exist"
    unknown = [
        arg for arg in argv if arg.strip("[]").startswith("-") and arg.strip("[]") not in flags_of(path)
    ]
    assert not unknown, f"{where}: python {script} takes no {unknown}"
