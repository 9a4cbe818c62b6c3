"""The lower bounds that pyproject.toml declares, against what the code needs and what .ci/oldest installs.

CI installs only the newest releases; .ci/oldest (run by hand) installs the declared floors and
runs the tests that use them. These checks keep the two files in step.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11 on

ROOT = Path(__file__).resolve().parent.parent

NEEDED = {
    "gymnasium": ((1, 1), "GymVectorEnv needs AutoresetMode: 1.0's vector envs only reset NEXT_STEP"),
    "ray": ((2, 10), "Ray 2.9 imports pkg_resources in every remote actor, and setuptools 82 removed it"),
}
"""Floors found too low by running .ci/oldest: the oldest version that works, and why."""

NO_WHEEL = {"pillow": "8.x has no wheel for Python 3.11", "lz4": "4.0.x has no wheel for Python 3.11"}
"""Packages whose declared floor .ci/oldest cannot install on Python 3.11: it pins a later version."""


def version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def declared_floors() -> dict[str, tuple[int, ...]]:
    """``{name: floor}`` for the dependencies and the ray and popgym extras (torch is pinned apart)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = [*project["dependencies"], *project["optional-dependencies"]["ray"]]
    requirements += project["optional-dependencies"]["popgym"]
    floors = {}
    for requirement in requirements:
        match = re.fullmatch(r"([A-Za-z0-9_-]+)>=([0-9.]+)", requirement)
        assert match, f"{requirement!r} is not 'name>=version'"
        floors[match[1].lower()] = version(match[2])
    del floors["torch"]
    return floors


def oldest_pins() -> dict[str, tuple[int, ...]]:
    """``{name: version}`` of the ``floors=(...)`` list in .ci/oldest."""
    script = (ROOT / ".ci" / "oldest").read_text()
    block = re.search(r"^floors=\((.*?)^\)", script, re.S | re.M)
    assert block, ".ci/oldest has no floors=( ... ) list"
    pins = re.findall(r"^\s*([A-Za-z0-9_-]+)==([0-9.]+)", block[1], re.M)
    return {name.lower(): version(pinned) for name, pinned in pins}


def test_the_floors_are_no_lower_than_what_the_code_needs() -> None:
    floors = declared_floors()
    for name, (needed, why) in NEEDED.items():
        assert floors[name] >= needed, f"{name}>={floors[name]} is too low: {why}"


def test_the_oldest_script_installs_every_declared_floor() -> None:
    floors, pins = declared_floors(), oldest_pins()
    assert sorted(pins) == sorted(floors)
    for name, floor in floors.items():
        assert pins[name] >= floor, name
        if name in NO_WHEEL:
            assert pins[name][: len(floor)] != floor, f"{name} is pinned at its floor: not in NO_WHEEL"
        else:
            assert pins[name][: len(floor)] == floor, f"{name}: pinned {pins[name]}, floor {floor}"
