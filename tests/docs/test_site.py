"""The docs site: its navigation covers every page, the API reference every public name, and the built
site works in headless Chromium (no console errors, the search finds a word, a screenshot).

``bash .ci/docs`` builds the site (``mkdocs build --strict``) and runs this module with
``RECONTEXT_SITE`` set to the built folder; without it the browser check skips.
"""

from __future__ import annotations

import functools
import http.server
import os
import re
import threading
from pathlib import Path

import pytest

from tests.browser import DevTools, chromium_binary

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
SITE = os.environ.get("RECONTEXT_SITE", "")
SEARCH_WORD = "replay"


def nav_pages() -> set[str]:
    """The pages mkdocs.yml's nav names (read as text: no YAML dependency in the test extra)."""
    text = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    nav = text[text.index("\nnav:") :]
    return set(re.findall(r":\s*([\w/.-]+\.md)\s*$", nav, re.M))


def test_every_page_is_in_the_nav() -> None:
    pages = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md") if not p.is_relative_to(DOCS / "bench")}
    assert "vllm.md" in pages and "index.md" in pages
    assert nav_pages() == pages


def test_the_api_reference_names_every_public_name() -> None:
    import recontext_engine
    import recontext_integrations.langchain as langchain
    import recontext_integrations.llama_index as llama_index

    reference = (DOCS / "api" / "engine.md").read_text() + (DOCS / "api" / "integrations.md").read_text()
    documented = set(re.findall(r"^::: [\w.]+\.(\w+)$", reference, re.M))
    public = {*recontext_engine.__all__, *langchain.__all__, *llama_index.__all__}
    assert public - documented == set()


def test_the_readme_is_one_screen_of_answers_and_its_links_resolve() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 250, "README.md is a user's guide: move the depth to docs/"
    for page in ("README.md", "CHANGELOG.md"):
        text = (ROOT / page).read_text(encoding="utf-8")
        targets = [t.split("#")[0] for t in re.findall(r"\]\(([^)\s]+)\)", text) if "://" not in t]
        missing = [t for t in targets if t and not (ROOT / t).exists()]
        assert missing == [], f"{page} links to missing files: {missing}"
    assert "docs/bench/niah/niah_heatmap.png" in readme and "docs/vllm.md" in readme


def test_the_readme_settings_table_names_real_settings() -> None:
    from dataclasses import fields

    from recontext_engine import ReplayConfig

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    table = readme[readme.index("## Settings") :].split("\n\n")[1]
    named = re.findall(r"^\| `(\w+)` \|", table, re.M)
    assert len(named) >= 6
    assert set(named) <= {f.name for f in fields(ReplayConfig)}


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def site_url():
    if not SITE:
        pytest.skip("the built site is checked by `bash .ci/docs` (RECONTEXT_SITE unset)")
    handler = functools.partial(QuietHandler, directory=SITE)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def browser(site_url, tmp_path_factory):
    tools = DevTools(chromium_binary(), tmp_path_factory.mktemp("chromium"), 1280, 900)
    yield tools
    tools.close()


@pytest.mark.browser
@pytest.mark.parametrize("page", ["", "how-it-works/", "benchmarks/", "api/engine/"])
def test_pages_load_without_console_errors(browser, site_url, page) -> None:
    browser.open(f"{site_url}/{page}")
    assert browser.evaluate("document.querySelector('.md-content h1') !== null")
    assert browser.problems() == []


@pytest.mark.browser
def test_the_search_finds_a_word(browser, site_url) -> None:
    browser.open(f"{site_url}/")
    browser.evaluate("document.querySelector('.md-search__input').focus()")
    browser.call("Input.insertText", text=SEARCH_WORD)
    browser.evaluate(
        """(() => { const input = document.querySelector('.md-search__input');
        input.dispatchEvent(new KeyboardEvent('keyup', {key: 'y', bubbles: true})); })()"""
    )
    results = browser.call(
        "Runtime.evaluate",
        awaitPromise=True,
        returnByValue=True,
        expression="""new Promise(resolve => { const started = Date.now(); const poll = () => {
          const items = document.querySelectorAll('.md-search-result__item');
          if (items.length || Date.now() - started > 20000) resolve([...items].map(i => i.textContent));
          else setTimeout(poll, 200); }; poll(); })""",
    )["result"]["value"]
    assert results, "the search returned nothing"
    assert any(SEARCH_WORD in r.lower() for r in results), results[:3]
    assert browser.problems() == []
    shot = Path(os.environ.get("RECONTEXT_SITE_SCREENSHOT", Path(SITE).parent / "docs-search.png"))
    assert browser.screenshot(shot)[:8] == b"\x89PNG\r\n\x1a\n"
