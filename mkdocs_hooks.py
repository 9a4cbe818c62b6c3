"""mkdocs hooks: the site shows the version that pyproject.toml declares.

Read with a regular expression rather than ``tomllib`` so that the docs also
build on Python 3.10, and rather than by importing rlstruct so that the build
does not import torch.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

PYPROJECT = Path(__file__).resolve().parent / "pyproject.toml"


def project_version(pyproject: Path = PYPROJECT) -> str:
    """The ``version`` of the ``[project]`` table of ``pyproject``.

    Raises:
        ValueError: if the table or its ``version`` is missing.
    """
    table = re.search(r"^\[project\]\n(.*?)(?=^\[|\Z)", pyproject.read_text(), re.M | re.S)
    version = re.search(r'^version\s*=\s*"([^"]+)"', table.group(1), re.M) if table else None
    if version is None:
        raise ValueError(f"project_version: {pyproject} has no [project] version")
    return version.group(1)


def on_config(config: Any) -> Any:
    """Put the version in ``extra.version`` and in the footer of every page."""
    version = project_version()
    config.extra["version"] = version
    config.copyright = f"rlstruct {version}"
    return config
