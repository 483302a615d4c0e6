"""The evidence view: escaping, exact text round trip, folding, colours and the notebook hook."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest

from recontext_engine.results import Evidence, ReplayResult, Usage
from recontext_engine.spans import split_sentences
from recontext_engine.view import render_html
from tests.documents import planted_document

NASTY = "Note: <script>alert('x')</script> & \"quoted\" 'single' </mark></div> stays text."
FACT = "The vault code is 4172."
MULTILINGUAL = (
    "مرحبا بالعالم. الرمز السري هو ٤١٧٢.\n"
    "שלום עולם. הקוד הוא 4172.\n"
    "金库的密码是四一七二。这是第二句。\n"
    "Emoji 🔐 stay whole 👩‍👩‍👧 here. Done."
)
VOID = {"meta", "br", "img", "input", "link", "hr"}


class _Page(HTMLParser):
    """Collects tags, the marks, the folds and the exact text of each document body."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.marks: list[dict] = []
        self.folds: list[dict] = []
        self.docs: dict[int, str] = {}
        self.folded: dict[int, str] = {}
        self.dirs: list[tuple[str, str]] = []
        self._stack: list[tuple[str, dict]] = []
        self._doc: int | None = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.tags.append(tag)
        if attrs.get("dir"):
            self.dirs.append((attrs.get("class", tag), attrs["dir"]))
        if tag in VOID:
            return
        self._stack.append((tag, attrs))
        classes = attrs.get("class", "").split()
        if tag == "details" and "rcx-doc" in classes:
            self._doc = int(attrs["data-doc"])
            self.docs[self._doc] = self.folded[self._doc] = ""
        if tag == "mark":
            self.marks.append({**attrs, "text": ""})
        if tag == "details" and "rcx-fold" in classes:
            self.folds.append({**attrs, "doc": self._doc, "text": ""})

    def handle_endtag(self, tag):
        if tag not in VOID:
            assert self._stack and self._stack[-1][0] == tag, f"unbalanced </{tag}>"
            self._stack.pop()

    def _inside(self, tag, cls=None):
        return any(t == tag and (cls is None or cls in a.get("class", "").split()) for t, a in self._stack)

    def handle_data(self, data):
        if self._doc is None or not self._inside("div", "rcx-text") or self._inside("summary"):
            return
        self.docs[self._doc] += data
        if self._inside("mark"):
            self.marks[-1]["text"] += data
        if self._inside("details", "rcx-fold"):
            self.folds[-1]["text"] += data
            self.folded[self._doc] += data


def parse(html: str) -> _Page:
    page = _Page()
    page.feed(html)
    page.close()
    return page


def ev(doc: str, text: str, doc_index: int = 0, score: float = 1.0, round: int = 1) -> Evidence:
    start = doc.index(text)
    return Evidence(text, doc_index, start, start + len(text), score, round)


def result(evidence, documents=None, question="What is the vault code?", text="4172") -> ReplayResult:
    return ReplayResult(
        text,
        list(evidence),
        Usage(900, 4, 30),
        {"total": 1.5},
        "tiny",
        documents=documents,
        question=question,
    )


@pytest.fixture
def documents() -> list[str]:
    long = planted_document(FACT, sentences=120, depth=0.5, seed=3)
    long = long.replace("in March.", f"in March. {NASTY}", 1)
    return [long, MULTILINGUAL, planted_document("Nothing here.", sentences=10, seed=4)]


@pytest.fixture
def evidence(documents) -> list[Evidence]:
    long, multi = documents[0], documents[1]
    return [
        ev(long, NASTY, 0, 0.1, 2),
        ev(long, FACT, 0, 0.9, 1),
        ev(multi, "الرمز السري هو ٤١٧٢.", 1, 0.5, 1),
        ev(multi, "הקוד הוא 4172.", 1, 0.3, 2),
        ev(multi, "金库的密码是四一七二。", 1, 0.2, 3),
        ev(multi, "Emoji 🔐 stay whole 👩‍👩‍👧 here.", 1, 0.2, 2),
    ]


def test_every_document_renders_back_exactly_and_marks_hold_the_evidence(documents, evidence) -> None:
    page = parse(render_html(result(evidence, documents)))
    assert page.docs == dict(enumerate(documents))  # folded text included, summaries excluded
    assert sorted(m["text"] for m in page.marks) == sorted(e.text for e in evidence)
    for mark in page.marks:
        item = next(e for e in evidence if e.text == mark["text"])
        assert (int(mark["data-doc"]), int(mark["data-start"]), int(mark["data-end"])) == (
            item.doc_index,
            item.char_start,
            item.char_end,
        )
        assert int(mark["data-round"]) == item.round
        assert f"chars {item.char_start}–{item.char_end}" in mark["data-tip"]
        assert f"round {item.round}" in mark["data-tip"] and f"doc {item.doc_index}" in mark["data-tip"]


def test_caller_text_is_escaped_never_injected(documents, evidence) -> None:
    html = render_html(result(evidence, documents, question="Why <b>bold</b> & 'q'?", text="<img src=x>"))
    page = parse(html)
    assert "script" not in page.tags and "img" not in page.tags and "b" not in page.tags
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in html
    assert "&lt;img src=x&gt;" in html and "Why &lt;b&gt;bold&lt;/b&gt; &amp; &#x27;q&#x27;?" in html


def test_the_page_is_self_contained(documents, evidence) -> None:
    html = render_html(result(evidence, documents))
    page = parse(html)
    assert not {"script", "link", "img", "iframe", "object", "embed"} & set(page.tags)
    for needle in ("http://", "https://", "src=", "url(", "@import", "//cdn"):
        assert needle not in html.replace("&lt;", "<"), needle
    assert html.startswith("<!DOCTYPE html>") and '<meta charset="utf-8">' in html


def test_text_direction_is_automatic_for_documents_question_answer_and_snippets(documents, evidence) -> None:
    page = parse(render_html(result(evidence, documents)))
    kinds = {cls for cls, direction in page.dirs if direction == "auto"}
    assert {"rcx-text", "rcx-question", "rcx-answer", "rcx-snippet"} <= kinds


def test_long_documents_fold_around_highlights_with_exact_counts(documents, evidence) -> None:
    page = parse(render_html(result(evidence, documents), context_sentences=1))
    long = documents[0]
    folds = [f for f in page.folds if f["doc"] == 0]
    assert folds, "a long document must fold"
    for fold in folds:
        assert int(fold["data-chars"]) == len(fold["text"])
        assert int(fold["data-sentences"]) == len(split_sentences(fold["text"]))
        assert f"{len(fold['text']):,} characters" in render_html(
            result(evidence, documents), context_sentences=1
        )
    visible = len(long) - len(page.folded[0])
    assert visible < len(long) / 3
    # The highlights and one sentence either side stay visible.
    sentences = split_sentences(long)
    fact_at = next(i for i, (s, _) in enumerate(sentences) if long[s:].startswith(FACT))
    for neighbour in (fact_at - 1, fact_at + 1):
        s, e = sentences[neighbour]
        assert long[s:e] not in page.folded[0]
    # Short documents and the no-evidence document keep what they need: no fold under fold_over.
    assert not [f for f in page.folds if f["doc"] == 1]


def test_a_document_without_evidence_is_collapsed_and_short_folding_can_be_disabled(documents) -> None:
    html = render_html(result([], documents), fold_over=10**9)
    assert not parse(html).folds
    assert re.search(r'<details class="rcx-doc"[^>]*data-doc="2">', html)  # closed: no "open"
    assert "None: no sentence was replayed." in html


def test_colour_tells_the_round_and_strength_the_score(documents, evidence) -> None:
    page = parse(render_html(result(evidence, documents)))
    alpha = {m["text"]: float(re.search(r"--a:([\d.]+)", m["style"]).group(1)) for m in page.marks}
    classes = {m["text"]: m["class"] for m in page.marks}
    assert (
        "rcx-r1" in classes[FACT]
        and "rcx-r2" in classes[NASTY]
        and "rcx-r3" in classes["金库的密码是四一七二。"]
    )
    assert alpha[FACT] > alpha["الرمز السري هو ٤١٧٢."] > alpha["הקוד הוא 4172."] > alpha[NASTY]
    assert alpha["金库的密码是四一七二。"] == alpha["Emoji 🔐 stay whole 👩‍👩‍👧 here."]


def test_evidence_that_does_not_slice_back_is_listed_not_marked(documents) -> None:
    wrong = Evidence("not in the text", 0, 5, 20, 0.5, 1)
    outside = Evidence("x", 7, 0, 1, 0.5, 1)
    html = render_html(result([wrong, outside], documents))
    assert not parse(html).marks
    assert html.count("not found in the documents") == 2


def test_without_documents_the_evidence_is_listed_only() -> None:
    item = Evidence("The vault code is 4172.", 0, 10, 33, 0.5, 1)
    html = render_html(result([item]))
    assert "The documents were not given" in html and "The vault code is 4172." in html
    assert not parse(html).marks


def test_documents_and_question_default_to_the_result_and_ids_are_unique(documents, evidence) -> None:
    res = result(evidence, documents)
    assert render_html(res) == render_html(res, documents, res.question)
    other = result(evidence[:2], documents)
    prefix = re.search(r'class="rcx" id="(rcx-[0-9a-f]{8})"', render_html(res)).group(1)
    assert prefix not in render_html(other)
    single = parse(render_html(result(evidence[:2]), documents[0]))  # one text, not a list
    assert single.docs == {0: documents[0]} and len(single.marks) == 2


def test_repr_html_is_a_scoped_fragment_for_notebooks(documents, evidence) -> None:
    fragment = result(evidence, documents)._repr_html_()
    assert not fragment.startswith("<!DOCTYPE") and "<html" not in fragment and "<body" not in fragment
    assert fragment.startswith("<div><style>") and "mark" in fragment
    css = fragment[fragment.index("<style>") + 7 : fragment.index("</style>")]
    rules = [r.strip() for r in re.findall(r"(?:^|[{}])\s*([^{}@;]+)\{", css) if r.strip()]
    assert rules and all(sel.strip().startswith(".rcx") for rule in rules for sel in rule.split(","))


def test_to_dict_keeps_the_json_contract(documents, evidence) -> None:
    payload = result(evidence, documents).to_dict()
    assert set(payload) == {"answer", "evidence", "usage", "timings", "model", "finish_reason"}
