"""The built site, looked at in a real headless Chromium: code that scrolls instead of wrapping, names
that do not break, and a data-flow picture a reader can read and open full size.

The site is built once (``mkdocs build --strict``), served on localhost and opened
at a desktop width and a phone width. The checks read what the browser laid out
(computed styles, client rectangles), so a stylesheet or theme change that
wraps code mid-token or shrinks the picture fails here. Screenshots of every
page at every width are written to the test's temporary directory.

Needs Playwright (the ``dev`` extra) and a system Chromium (Debian's
``chromium`` package; no browser is downloaded). Without them the tests skip,
unless ``RLSTRUCT_REQUIRE_BROWSER=1`` is set, as CI sets it: there they fail.
"""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = os.environ.get("RLSTRUCT_CHROMIUM", "/usr/bin/chromium")
PAGES = ["index.html", "concepts/index.html", "agents/index.html", "tutorials/03_agents/index.html"]
WIDTHS = {"desktop": 1280, "phone": 400}
# the smallest height, in CSS pixels, that the picture's 16-px labels may be drawn at
READABLE_LABEL_PX = 11.0
# Chromium's flags on a machine without network or display
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _unavailable(reason: str) -> None:
    if os.environ.get("RLSTRUCT_REQUIRE_BROWSER") == "1":
        pytest.fail(f"RLSTRUCT_REQUIRE_BROWSER=1 but {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The site, built from this checkout and served on localhost; yields its base URL."""
    if shutil.which("mkdocs") is None:
        _unavailable("mkdocs is not installed (pip install -e '.[dev]')")
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    handler = functools.partial(QuietHandler, directory=str(out))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("playwright is not installed (pip install -e '.[dev]')")
    if not Path(CHROMIUM).exists():
        _unavailable(f"no Chromium at {CHROMIUM} (apt-get install chromium, or set RLSTRUCT_CHROMIUM)")
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS, timeout=60_000)
        try:
            yield chromium
        finally:
            chromium.close()


# What the browser laid out, read in the page: every code block and every inline code in a table.
LAYOUT = """() => {
  const blocks = [...document.querySelectorAll('.md-typeset pre > code')].map((code) => {
    const style = getComputedStyle(code);
    const scrolls = ['auto', 'scroll'].includes(style.overflowX)
      || ['auto', 'scroll'].includes(getComputedStyle(code.parentElement).overflowX);
    const lineHeight = parseFloat(style.lineHeight);
    const lines = code.textContent.replace(/\\n$/, '').split('\\n').length;
    return {
      start: code.textContent.slice(0, 60),
      whiteSpace: style.whiteSpace,
      clipped: code.scrollWidth > code.clientWidth + 1 && !scrolls,
      wrapped: Math.round(code.getBoundingClientRect().height / lineHeight) > lines + 1,
    };
  });
  const cells = [...document.querySelectorAll('.md-typeset table code')].map((code) => ({
    text: code.textContent,
    pieces: code.getClientRects().length,
  }));
  return {blocks, cells};
}"""

# The data-flow picture: how wide it is drawn against its viewBox, and what it links to.
PICTURE = """async () => {
  const img = document.querySelector('img[src$="dataflow.svg"]');
  if (img === null) return null;
  const svg = await (await fetch(img.src)).text();
  const viewBox = svg.match(/viewBox="([^"]+)"/)[1].split(/\\s+/).map(Number);
  const link = img.closest('a');
  return {
    drawn: img.getBoundingClientRect().width,
    natural: viewBox[2],
    href: link === null ? null : link.href,
  };
}"""


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("width", WIDTHS, ids=str)
def test_code_scrolls_and_names_do_not_break(site: str, browser: Any, width: str, tmp_path: Path) -> None:
    page = browser.new_page(viewport={"width": WIDTHS[width], "height": 900})
    try:
        problems, blocks = [], 0
        for path in PAGES:
            page.goto(site + path, wait_until="load")
            page.screenshot(path=tmp_path / f"{path.replace('/', '_')}-{width}.png", full_page=True)
            layout = page.evaluate(LAYOUT)
            blocks += len(layout["blocks"])
            for block in layout["blocks"]:
                if block["whiteSpace"] != "pre" or block["wrapped"]:
                    problems.append(f"{path}: a code block wraps ({block['whiteSpace']}): {block['start']!r}")
                if block["clipped"]:
                    problems.append(
                        f"{path}: a code block is cut off and does not scroll: {block['start']!r}"
                    )
            for cell in layout["cells"]:
                if cell["pieces"] > 1:
                    problems.append(f"{path}: {cell['text']!r} in a table breaks over {cell['pieces']} lines")
        assert blocks > 10, f"only {blocks} code blocks found on {PAGES}"
        assert not problems, "\n".join(problems)
    finally:
        page.close()


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("path", ["index.html", "concepts/index.html"])
def test_the_data_flow_picture_is_readable_and_opens_full_size(site: str, browser: Any, path: str) -> None:
    page = browser.new_page(viewport={"width": WIDTHS["desktop"], "height": 900})
    try:
        page.goto(site + path, wait_until="load")
        picture = page.evaluate(PICTURE)
        assert picture is not None, f"{path} shows no data-flow picture"
        label_px = 16 * picture["drawn"] / picture["natural"]
        assert label_px >= READABLE_LABEL_PX, (
            f"{path}: the picture is drawn {picture['drawn']:.0f} px wide for {picture['natural']:.0f} px "
            f"of drawing: its 16-px labels are {label_px:.1f} px high"
        )
        assert picture["href"] is not None and picture["href"].endswith("img/dataflow.svg"), picture["href"]
        assert page.request.get(picture["href"]).ok
    finally:
        page.close()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_home_page_shows_an_example_and_the_install_line(site: str, browser: Any) -> None:
    page = browser.new_page(viewport={"width": WIDTHS["desktop"], "height": 900})
    try:
        page.goto(site + "index.html", wait_until="load")
        code = page.evaluate("() => [...document.querySelectorAll('pre > code')].map((c) => c.textContent)")
        readme = (ROOT / "README.md").read_text()
        example = readme.split("```python\n", 1)[1].split("```", 1)[0]
        assert any(block.strip() == example.strip() for block in code), "the README's example is not shown"
        assert any("pip install torch==2.13.0" in block for block in code), "no install line"
    finally:
        page.close()
