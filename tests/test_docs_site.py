"""The docs site's settings: the version it shows, the changelog page and the API pages in the nav."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
import yaml

import rlstruct

ROOT = Path(__file__).resolve().parents[1]


def hooks() -> ModuleType:
    spec = importlib.util.spec_from_file_location("mkdocs_hooks", ROOT / "mkdocs_hooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def nav_pages(nav: Any) -> list[str]:
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, dict):
        return [page for value in nav.values() for page in nav_pages(value)]
    return [page for item in nav for page in nav_pages(item)]


def test_the_site_shows_the_version_that_pyproject_declares() -> None:
    version = hooks().project_version()
    assert version == rlstruct.__version__
    config = hooks().on_config(SimpleNamespace(extra={}, copyright=None))
    assert config.extra["version"] == version
    assert version in config.copyright


def test_project_version_names_a_pyproject_without_one(tmp_path: Path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[tool.other]\nversion = "9.9"\n\n[project]\nname = "x"\n')
    with pytest.raises(ValueError, match=re.escape("pyproject.toml has no [project] version")):
        hooks().project_version(pyproject)


def test_the_changelog_page_is_the_changelog_and_describes_this_version() -> None:
    page = (ROOT / "docs" / "changelog.md").read_text()
    assert page.strip() == '--8<-- "CHANGELOG.md"'
    headings = re.findall(r"^## (\S+)", (ROOT / "CHANGELOG.md").read_text(), re.M)
    assert headings and headings[0] == rlstruct.__version__


def test_every_api_page_is_in_the_nav_and_nothing_links_to_the_old_page() -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    pages = set(nav_pages(config["nav"]))
    api = {p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs" / "api").rglob("*.md")}
    assert api, "docs/api has no page"
    assert api <= pages, sorted(api - pages)
    assert "changelog.md" in pages
    stale = [
        p.name for p in (ROOT / "docs").rglob("*.md") if re.search(r"\]\((\.\./)*api\.md", p.read_text())
    ]
    assert not stale, stale
