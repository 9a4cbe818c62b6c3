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


class _ConfigLoader(yaml.SafeLoader):
    """mkdocs.yml's loader for these tests: ``!!python/name:`` tags (which mkdocs allows) read as text."""


_ConfigLoader.add_multi_constructor(
    "tag:yaml.org,2002:python/name:", lambda loader, suffix, node: f"python/name:{suffix}"
)


def read_mkdocs_config() -> dict:
    """mkdocs.yml as a dict, without importing what its ``!!python/name:`` tags name."""
    return yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=_ConfigLoader)


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
    config = read_mkdocs_config()
    pages = set(nav_pages(config["nav"]))
    api = {p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs" / "api").rglob("*.md")}
    assert api, "docs/api has no page"
    assert api <= pages, sorted(api - pages)
    assert "changelog.md" in pages
    stale = [
        p.name for p in (ROOT / "docs").rglob("*.md") if re.search(r"\]\((\.\./)*api\.md", p.read_text())
    ]
    assert not stale, stale


def returned_values(annotation: str) -> int:
    """How many values a return annotation promises: the length of a fixed ``tuple[...]``, else 1."""
    if not (annotation.startswith("tuple[") and annotation.endswith("]")) or annotation.endswith("...]"):
        return 1
    depth, count = 0, 1
    for char in annotation[len("tuple[") : -1]:
        if char in "[(":
            depth += 1
        elif char in "])":
            depth -= 1
        elif char == "," and depth == 0:
            count += 1
    return count


def test_returned_values_counts_the_top_level_of_a_fixed_tuple() -> None:
    assert returned_values("DictTensor") == 1
    assert returned_values("tuple[Tensor, dict[str, float]]") == 2
    assert returned_values("tuple[DictTensor, Tensor, Tensor]") == 3
    assert returned_values("tuple[int, ...]") == 1


def test_no_returns_section_lists_more_values_than_the_function_returns() -> None:
    """The reference's Returns tables, read with the site's parser options: a row per returned value.

    With ``returns_multiple_items`` left on, every continuation line of a
    Returns section became a row of its own, each repeating the type.
    """
    griffe = pytest.importorskip("griffe")
    config = read_mkdocs_config()
    (mkdocstrings,) = [
        p["mkdocstrings"] for p in config["plugins"] if isinstance(p, dict) and "mkdocstrings" in p
    ]
    options = mkdocstrings["handlers"]["python"]["options"]
    package = griffe.load(
        "rlstruct",
        docstring_parser=options["docstring_style"],
        docstring_options=options.get("docstring_options", {}),
        search_paths=[str(ROOT)],
    )
    checked, too_many = 0, []

    def walk(parent: Any) -> None:
        nonlocal checked
        for member in parent.members.values():
            if member.is_alias:
                continue
            if member.is_module or member.is_class:
                walk(member)
            elif member.is_function and member.docstring is not None:
                for section in member.docstring.parsed:
                    if section.kind.value == "returns":
                        checked += 1
                        allowed = returned_values(str(member.returns))
                        if len(section.value) > allowed:
                            too_many.append(f"{member.path}: {len(section.value)} items, returns {allowed}")

    walk(package)
    assert checked > 40  # the walk reached the documented functions
    assert not too_many, "\n".join(too_many)
