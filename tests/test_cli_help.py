"""``rlstruct --help``, ``--version`` and ``rlstruct train ALGO --help``: what each command and flag is, without markup."""

from __future__ import annotations

import pytest

import rlstruct
from rlstruct.algos import ALGORITHMS
from rlstruct.cli import main


def test_the_top_level_help_says_what_each_command_and_algorithm_is(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("rlstruct: train reinforcement-learning agents")
    for command in ("train ALGO --env ENV_ID", "eval RUN_DIR", "plot RUN_DIR", "export RUN_DIR OUT"):
        assert f"\n  {command} " in out
    lines = out.splitlines()
    for algo in ALGORITHMS:  # one line each: the name, then the first line of its module's docstring
        (line,) = [line for line in lines if line.startswith(f"  {algo} ")]
        assert f"{algo.upper()}: " in line
    assert main(["train", "--help"]) == 0
    assert capsys.readouterr().out == out


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_version(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([flag]) == 0
    assert capsys.readouterr().out == f"rlstruct {rlstruct.__version__}\n"


@pytest.mark.parametrize("algo", ALGORITHMS)
def test_an_algorithms_help_shows_env_required_and_no_markup(
    algo: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["train", algo, "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "``" not in out
    assert "(required, unless --resume)" in out
    assert "(default: )" not in out
