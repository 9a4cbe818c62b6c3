"""The README's example runs against the real API and prints what it claims."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_example_runs_and_prints_its_comments() -> None:
    code = re.search(r"```python\n(.*?)```", README.read_text(), re.S)
    assert code is not None, "README.md has no python example"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code.group(1), str(README), "exec"), {})
    claimed = re.findall(r"print\(.*\)\s+# (.*)", code.group(1))
    assert claimed, "the example documents no output"
    assert out.getvalue().splitlines() == claimed


def commands(text: str) -> list[str]:
    """The README's set-up command lines, each with its continuation lines joined."""
    return re.findall(r"^python3 -m venv.*$", text.replace("\\\n", " "), re.M)


def test_readme_pins_torch_before_the_package() -> None:
    text = README.read_text()
    lines = commands(text)
    assert lines, "README.md has no set-up command"
    for line in lines:
        assert line.index("pip install torch==") < line.index("pip install -e")


def test_ci_installs_what_the_readme_test_command_installs() -> None:
    readme = README.read_text()
    test_line = next(line for line in commands(readme) if "pytest" in line)
    readme_installs = re.findall(r"pip install ([^&]+?)\s*(?:&&|$)", test_line)
    ci = (README.parent / ".ci" / "run").read_text()
    ci_installs = [
        line.split("--quiet", 1)[1].strip() for line in re.findall(r"^pip install --quiet .*$", ci, re.M)
    ]
    assert ci_installs == [s.strip() for s in readme_installs]
