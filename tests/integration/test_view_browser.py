"""The evidence view of a real run, loaded in headless Chromium over the DevTools protocol.

Chromium comes from Debian's package (``.ci/browser`` installs it). Under CI (``CI=true``) a
missing browser fails the test; elsewhere it skips.
"""

from __future__ import annotations

import io

import pytest

from recontext_engine import ReplayConfig
from recontext_engine.view import render_html
from tests.browser import DevTools, chromium_binary
from tests.documents import planted_document

pytestmark = [pytest.mark.model, pytest.mark.browser]

FACT = "The vault code is 4172."
QUESTION = "What is the vault code?"
NASTY = "Note: <script>console.error('injected')</script> & \"quoted\" 'single' stays text."
MULTILINGUAL = (
    "الرمز السري للخزنة هو ٤١٧٢. هذه جملة ثانية.\n"
    "שלום עולם. הקוד הוא 4172.\n"
    "金库的密码是四一七二。这是第二句。\n"
    "Emoji 🔐 stay whole 👩‍👩‍👧 here."
)
WIDTH, HEIGHT = 1280, 1000


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    tools = DevTools(chromium_binary(), tmp_path_factory.mktemp("chromium"), WIDTH, HEIGHT)
    yield tools
    tools.close()


@pytest.fixture(scope="module")
def run(engine):
    """A real run of the embedded model over a long English document and a multilingual one."""
    long = planted_document(FACT, sentences=120, depth=0.6, seed=21).replace(
        "in March.", f"in March. {NASTY}", 1
    )
    documents = [long, MULTILINGUAL]
    result = engine.answer(
        documents, QUESTION, ReplayConfig(rounds=2, top_k=4).with_options(max_new_tokens=16)
    )
    return result, documents


PAGE_STATE = """(() => {
  const marks = [...document.querySelectorAll('mark.rcx-ev')];
  return {
    marks: marks.map(m => ({text: m.textContent, doc: +m.dataset.doc, start: +m.dataset.start,
      end: +m.dataset.end, round: +m.dataset.round, background: getComputedStyle(m).backgroundColor,
      width: m.getBoundingClientRect().width})),
    scripts: document.querySelectorAll('script').length,
    folds: [...document.querySelectorAll('details.rcx-fold > summary')].map(s => s.textContent),
    directions: [...document.querySelectorAll('.rcx-text')].map(t => getComputedStyle(t).direction),
    question: document.querySelector('.rcx-question').textContent,
    answer: document.querySelector('.rcx-answer').textContent,
    panel: document.querySelectorAll('.rcx-panel li').length,
    injected: document.body.textContent.includes("<script>console.error('injected')</script>"),
  };
})()"""
FIRST_MARK_BOX = """(() => {
  const mark = document.querySelector('mark.rcx-ev');
  mark.scrollIntoView({block: 'center'});
  const box = mark.getClientRects()[0];
  return {x: box.left + box.width / 2, y: box.top + box.height / 2};
})()"""
TIP = "getComputedStyle(document.querySelector('mark.rcx-ev'), '::after').content"


def test_the_error_detector_catches_console_errors_and_failed_loads(browser, tmp_path) -> None:
    control = tmp_path / "control.html"
    control.write_text(
        '<p>x</p><img src="missing.png"><script>console.error("boom")</script>', encoding="utf-8"
    )
    browser.open(control.as_uri())
    problems = browser.problems()
    assert any("boom" in p for p in problems), problems
    assert any("missing.png" in p or "ERR_FILE_NOT_FOUND" in p for p in problems), problems


def test_the_view_of_a_real_run_renders_highlights_without_console_errors(browser, run, tmp_path) -> None:
    result, documents = run
    assert FACT in [e.text for e in result.evidence]  # the sentence that answers was replayed
    page = tmp_path / "view.html"
    page.write_text(render_html(result), encoding="utf-8")
    browser.open(page.as_uri())
    state = browser.evaluate(PAGE_STATE)
    assert browser.problems() == []
    assert state["scripts"] == 0 and state["injected"]  # the document's <script> stayed text

    assert len(state["marks"]) == len(result.evidence) == state["panel"]
    for mark, item in zip(state["marks"], sorted(result.evidence, key=lambda e: (e.doc_index, e.char_start))):
        assert (mark["text"], mark["doc"], mark["start"], mark["end"], mark["round"]) == (
            item.text,
            item.doc_index,
            item.char_start,
            item.char_end,
            item.round,
        )
        assert mark["background"] not in ("rgba(0, 0, 0, 0)", "transparent") and mark["width"] > 0
    fact = next(m for m in state["marks"] if m["text"] == FACT)
    assert fact["round"] in (1, 2)
    assert browser.evaluate(TIP) == "none"  # the details show on hover only
    box = browser.evaluate(FIRST_MARK_BOX)
    browser.call("Input.dispatchMouseEvent", type="mouseMoved", x=box["x"], y=box["y"])
    tip, first = browser.evaluate(TIP), state["marks"][0]
    assert (
        f"doc {first['doc']} · chars {first['start']}–{first['end']}" in tip
        and f"round {first['round']}" in tip
    )
    browser.call("Input.dispatchMouseEvent", type="mouseMoved", x=1, y=1)
    browser.evaluate("window.scrollTo(0, 0)")
    assert state["folds"] and all("characters" in f and "hidden" in f for f in state["folds"])
    assert state["directions"] == ["ltr", "rtl"]  # dir="auto": the Arabic document reads right to left
    assert state["question"] == QUESTION and state["answer"] == result.text

    from PIL import Image

    image = Image.open(io.BytesIO(browser.screenshot(tmp_path / "view.png"))).convert("RGB")
    assert image.size == (WIDTH, HEIGHT)
    coloured = sum(1 for r, g, b in image.getdata() if max(r, g, b) - min(r, g, b) > 60)
    assert coloured > 500, "the highlights should colour the screenshot"
