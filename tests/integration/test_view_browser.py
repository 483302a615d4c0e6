"""The evidence view of a real run, loaded in headless Chromium over the DevTools protocol.

Chromium comes from Debian's package (``.ci/browser`` installs it). Under CI (``CI=true``) a
missing browser fails the test; elsewhere it skips.
"""

from __future__ import annotations

import base64
import io
import json
import os
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from recontext_engine import ReplayConfig
from recontext_engine.view import render_html
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


def chromium_binary() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    message = "headless Chromium is not installed (run .ci/browser)"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message)
    pytest.skip(message)


class DevTools:
    """One headless Chromium page driven over the DevTools protocol; collects every event."""

    def __init__(self, binary: str, profile: Path) -> None:
        from websockets.sync.client import connect

        self.log = profile / "chromium.log"
        args = [binary, "--headless", "--disable-gpu", "--no-sandbox", "--no-first-run",
                "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0",
                "--remote-allow-origins=*", f"--user-data-dir={profile / 'profile'}",
                f"--window-size={WIDTH},{HEIGHT}", "about:blank"]  # fmt: skip
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=self.log.open("wb"))
        port_file = profile / "profile" / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not (port_file.is_file() and port_file.read_text().strip()):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"chromium did not start: {self.log.read_text(errors='replace')[-2000:]}")
            time.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=30) as response:
            targets = json.load(response)
        page = next(t for t in targets if t["type"] == "page")
        self.socket = connect(page["webSocketDebuggerUrl"], max_size=None, open_timeout=30)
        self.events: list[dict] = []
        self._id = 0

    def call(self, method: str, **params) -> dict:
        self._id += 1
        self.socket.send(json.dumps({"id": self._id, "method": method, "params": params}))
        while True:
            message = json.loads(self.socket.recv(timeout=60))
            if message.get("id") == self._id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            self.events.append(message)

    def open(self, url: str) -> None:
        """Navigate and wait for the load event, with console, errors and network log enabled."""
        for domain in ("Page.enable", "Runtime.enable", "Log.enable"):
            self.call(domain)
        self.call(
            "Emulation.setDeviceMetricsOverride",
            width=WIDTH,
            height=HEIGHT,
            deviceScaleFactor=1,
            mobile=False,
        )
        self.events.clear()
        self.call("Page.navigate", url=url)
        deadline = time.monotonic() + 60
        while not any(e.get("method") == "Page.loadEventFired" for e in self.events):
            if time.monotonic() > deadline:
                raise RuntimeError("the page did not load")
            self.call("Runtime.evaluate", expression="1")  # pumps events
        self.call("Runtime.evaluate", expression="new Promise(r => setTimeout(r, 200))", awaitPromise=True)

    def evaluate(self, expression: str):
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(result["exceptionDetails"])
        return result["result"].get("value")

    def problems(self) -> list[str]:
        """Console errors and warnings, uncaught exceptions and failed loads seen since ``open``."""
        found = []
        for event in self.events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.consoleAPICalled" and params["type"] in ("error", "warning", "assert"):
                found.append(f"console.{params['type']}: {params['args']}")
            elif method == "Runtime.exceptionThrown":
                found.append(f"exception: {params['exceptionDetails'].get('text')}")
            elif method == "Log.entryAdded" and params["entry"]["level"] in ("error", "warning"):
                found.append(f"log: {params['entry']['text']}")
        return found

    def screenshot(self, path: Path) -> bytes:
        data = base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"])
        path.write_bytes(data)
        return data

    def close(self) -> None:
        try:
            self.socket.close()
        finally:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    tools = DevTools(chromium_binary(), tmp_path_factory.mktemp("chromium"))
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
