"""The evidence view: one self-contained HTML page showing the replayed sentences in place.

Each document is shown with its replayed sentences highlighted where they stand (colour = round,
strength = score, hover or focus for doc index, offsets, score and round), the question and the
answer on top and the evidence listed in a side panel. Long documents are folded around the
highlights into ``<details>`` blocks that say how many characters and sentences they hide.
Every piece of caller text is escaped; the page loads nothing from the network and runs no script.
"""

from __future__ import annotations

import hashlib
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from typing import TYPE_CHECKING

from .spans import split_sentences

if TYPE_CHECKING:
    from .results import Evidence, ReplayResult

# Round colours (IBM colour-blind-safe palette), as "r g b" for rgb(var(--c) / alpha).
ROUND_COLOURS = ("255 176 0", "100 143 255", "220 38 127", "254 97 0", "120 94 240", "0 158 115")
MIN_ALPHA, MAX_ALPHA = 0.22, 0.85


@dataclass(frozen=True)
class _Mark:
    index: int  # position in result.evidence
    start: int
    end: int


def _text(value: str) -> str:
    return escape(value, quote=True)


def _strengths(evidence: Sequence[Evidence]) -> list[float]:
    """Highlight alpha per evidence item: scores min-max scaled into [MIN_ALPHA, MAX_ALPHA]."""
    scores = [e.score for e in evidence]
    if not scores:
        return []
    low, high = min(scores), max(scores)
    if high - low <= 1e-12:
        return [round((MIN_ALPHA + MAX_ALPHA) / 2, 2)] * len(scores)
    return [round(MIN_ALPHA + (MAX_ALPHA - MIN_ALPHA) * (s - low) / (high - low), 2) for s in scores]


def _locate(
    evidence: Sequence[Evidence], documents: Sequence[str]
) -> tuple[dict[int, list[_Mark]], set[int]]:
    """Marks per document for the evidence that slices back to its text; the indices that do not."""
    by_doc: dict[int, list[_Mark]] = {}
    lost: set[int] = set()
    for i, e in enumerate(evidence):
        ok = 0 <= e.doc_index < len(documents) and 0 <= e.char_start < e.char_end
        if ok and documents[e.doc_index][e.char_start : e.char_end] == e.text:
            by_doc.setdefault(e.doc_index, []).append(_Mark(i, e.char_start, e.char_end))
        else:
            lost.add(i)
    for doc_index, marks in by_doc.items():
        kept, end = [], 0
        for mark in sorted(marks, key=lambda m: (m.start, m.end)):
            if mark.start < end:  # overlapping spans (caller-given evidence): keep the first
                lost.add(mark.index)
                continue
            kept.append(mark)
            end = mark.end
        by_doc[doc_index] = kept
    return by_doc, lost


def _windows(doc: str, marks: list[_Mark], keep: int, fold_over: int, min_fold: int) -> list[tuple[int, int]]:
    """Character ranges shown unfolded: each mark with ``keep`` sentences either side."""
    if len(doc) <= fold_over:
        return [(0, len(doc))]
    sentences = split_sentences(doc)
    if not sentences:
        return [(0, len(doc))]
    starts = [s for s, _ in sentences]
    ends = [e for _, e in sentences]
    last = len(sentences) - 1
    windows = []
    for mark in marks or [_Mark(-1, 0, 0)]:
        first = bisect_right(ends, mark.start)  # first sentence ending after the mark starts
        final = max(bisect_left(starts, mark.end) - 1, first)  # last sentence starting before it ends
        lo = starts[max(min(first, last) - keep, 0)]
        hi = ends[min(final + keep, last)]
        windows.append((min(lo, mark.start), max(hi, mark.end)))
    merged: list[list[int]] = []
    for lo, hi in sorted(windows):
        if merged and lo - merged[-1][1] < min_fold:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    if merged[0][0] < min_fold:
        merged[0][0] = 0
    if len(doc) - merged[-1][1] < min_fold:
        merged[-1][1] = len(doc)
    return [(lo, hi) for lo, hi in merged]


class _Page:
    """Renders one result; ``prefix`` keeps element ids unique when several views share a page."""

    def __init__(self, result: ReplayResult, documents: list[str], question: str) -> None:
        self.result = result
        self.documents = documents
        self.question = question
        self.evidence = list(result.evidence)
        self.alpha = _strengths(self.evidence)
        self.by_doc, self.lost = _locate(self.evidence, documents)
        key = "\x1f".join([question, result.text, *(f"{e.doc_index}:{e.char_start}" for e in self.evidence)])
        self.prefix = "rcx-" + hashlib.sha1(key.encode("utf-8")).hexdigest()[:8]

    # -- pieces -------------------------------------------------------------------------------

    def facts(self, e: Evidence) -> list[str]:
        return [
            f"doc {e.doc_index}",
            f"chars {e.char_start}–{e.char_end}",
            f"score {e.score:.3g}",
            f"round {e.round}",
        ]

    def tip(self, e: Evidence) -> str:
        return " · ".join(self.facts(e))

    def round_class(self, e: Evidence) -> str:
        return f"rcx-r{(e.round - 1) % len(ROUND_COLOURS) + 1}"

    def mark(self, index: int) -> str:
        e = self.evidence[index]
        return (
            f'<mark class="rcx-ev {self.round_class(e)}" id="{self.prefix}-ev-{index}" tabindex="0" '
            f'style="--a:{self.alpha[index]}" data-doc="{e.doc_index}" data-start="{e.char_start}" '
            f'data-end="{e.char_end}" data-score="{e.score:.6g}" data-round="{e.round}" '
            f'data-tip="{_text(self.tip(e))}">{_text(e.text)}</mark>'
        )

    def fold(self, doc: str, start: int, end: int) -> str:
        hidden = len(split_sentences(doc[start:end]))
        what = f"{end - start:,} characters · {hidden:,} sentence{'s' if hidden != 1 else ''} hidden"
        return (
            f'<details class="rcx-fold" data-chars="{end - start}" data-sentences="{hidden}">'
            f"<summary>{what}</summary>{_text(doc[start:end])}</details>"
        )

    def document(self, doc_index: int, keep: int, fold_over: int, min_fold: int) -> str:
        doc = self.documents[doc_index]
        marks = self.by_doc.get(doc_index, [])
        body, pos = [], 0
        for lo, hi in _windows(doc, marks, keep, fold_over, min_fold):
            if lo > pos:
                body.append(self.fold(doc, pos, lo))
            pos = lo
            for mark in (m for m in marks if lo <= m.start < hi):
                body.append(_text(doc[pos : mark.start]) + self.mark(mark.index))
                pos = mark.end
            body.append(_text(doc[pos:hi]))
            pos = hi
        if pos < len(doc):
            body.append(self.fold(doc, pos, len(doc)))
        count = len(marks)
        summary = (
            f"Document {doc_index} <span>{len(doc):,} characters · "
            f"{count} replayed sentence{'s' if count != 1 else ''}</span>"
        )
        opened = " open" if marks or len(self.documents) == 1 else ""
        return (
            f'<details class="rcx-doc" id="{self.prefix}-doc-{doc_index}" data-doc="{doc_index}"{opened}>'
            f'<summary>{summary}</summary><div class="rcx-text" dir="auto">{"".join(body)}</div></details>'
        )

    def panel(self) -> str:
        if not self.evidence:
            none = '<p class="rcx-muted">None: no sentence was replayed.</p>'
            return f'<aside class="rcx-panel"><h2>Replayed evidence</h2>{none}</aside>'
        items = []
        for i, e in enumerate(self.evidence):
            where = " · ".join(f"<span>{_text(fact)}</span>" for fact in self.facts(e))
            if i in self.lost:
                where += " · <em>not found in the documents</em>"
            else:
                where = f'<a href="#{self.prefix}-ev-{i}">{where}</a>'
            items.append(
                f'<li class="{self.round_class(e)}" style="--a:{self.alpha[i]}">'
                f'<span class="rcx-where">{where}</span>'
                f'<span class="rcx-snippet" dir="auto">{_text(e.text)}</span></li>'
            )
        return f'<aside class="rcx-panel"><h2>Replayed evidence</h2><ol>{"".join(items)}</ol></aside>'

    def header(self) -> str:
        result, rounds = self.result, sorted({e.round for e in self.evidence})
        facts = [f"{len(self.evidence)} sentence{'s' if len(self.evidence) != 1 else ''} replayed"]
        if rounds:
            facts[0] += f" over {len(rounds)} round{'s' if len(rounds) != 1 else ''}"
        facts.append(f"{len(self.documents)} document{'s' if len(self.documents) != 1 else ''}")
        facts.append(f"{result.usage.input_tokens:,} tokens in, {result.usage.output_tokens:,} out")
        if "total" in result.timings:
            facts.append(f"{result.timings['total']:.1f} s")
        if result.model:
            facts.insert(0, result.model)
        legend = "".join(
            f'<span class="rcx-key rcx-r{(r - 1) % len(ROUND_COLOURS) + 1}">round {r}</span>' for r in rounds
        )
        if legend:
            hint = "stronger colour = higher score; hover a highlight for details"
            legend = f'<p class="rcx-legend">{legend}<span class="rcx-muted">{hint}</span></p>'
        return (
            f'<header><h1>ReContext evidence</h1><p class="rcx-muted">{_text(" · ".join(facts))}</p>'
            f'<div class="rcx-qa"><div><span class="rcx-label">Question</span>'
            f'<p class="rcx-question" dir="auto">{_text(self.question)}</p></div>'
            f'<div><span class="rcx-label">Answer</span>'
            f'<p class="rcx-answer" dir="auto">{_text(result.text)}</p></div>'
            f"</div>{legend}</header>"
        )

    def body(self, keep: int, fold_over: int, min_fold: int) -> str:
        if self.documents:
            docs = "".join(self.document(i, keep, fold_over, min_fold) for i in range(len(self.documents)))
        else:
            docs = '<p class="rcx-muted">The documents were not given, so the evidence is listed only.</p>'
        return (
            f'<div class="rcx" id="{self.prefix}">{self.header()}'
            f'<div class="rcx-main"><main>{docs}</main>{self.panel()}</div></div>'
        )


def render_html(
    result: ReplayResult,
    documents: str | Sequence[str] | None = None,
    question: str | None = None,
    *,
    full_page: bool = True,
    context_sentences: int = 2,
    fold_over: int = 2400,
    min_fold: int = 200,
) -> str:
    """The evidence view of ``result`` as HTML.

    Args:
        result: what :meth:`ReContextEngine.answer` returned.
        documents: the context the result was computed on (one text or a list); defaults to
            ``result.documents``, which the engine fills.
        question: defaults to ``result.question``.
        full_page: a whole ``<!DOCTYPE html>`` page; False gives a fragment with its own scoped
            ``<style>`` (what ``_repr_html_`` shows in a notebook).
        context_sentences: sentences left unfolded either side of each highlight.
        fold_over: documents longer than this many characters are folded around the highlights.
        min_fold: gaps shorter than this many characters stay unfolded.
    """
    if documents is None:
        documents = result.documents or []
    docs = [documents] if isinstance(documents, str) else list(documents)
    page = _Page(result, docs, question if question is not None else result.question or "")
    fragment = page.body(max(context_sentences, 0), fold_over, min_fold)
    if not full_page:
        return f"<div><style>{STYLE}</style>{fragment}</div>"
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>ReContext evidence: {_text(page.question[:80])}</title><style>{STYLE}{_PAGE_STYLE}</style>"
        "</head>"
        f"<body>{fragment}</body></html>\n"
    )


_PAGE_STYLE = "body{margin:0;background:#f6f7f9}@media (prefers-color-scheme:dark){body{background:#14161b}}"
_ROUND_CSS = "".join(f".rcx .rcx-r{i + 1}{{--c:{c}}}" for i, c in enumerate(ROUND_COLOURS))

STYLE = (
    """
.rcx{--fg:#1d2230;--muted:#5f6878;--card:#fff;--line:#e2e5ea;--fold:#eef0f4;
 color:var(--fg);font:15px/1.6 system-ui,-apple-system,"Segoe UI",Roboto,"Noto Sans","Noto Sans Arabic",
 "Noto Sans Hebrew","Noto Sans CJK SC",sans-serif;padding:20px 24px;max-width:1400px;margin:0 auto;
 box-sizing:border-box}
.rcx *{box-sizing:border-box}
.rcx h1{font-size:20px;margin:0 0 2px;letter-spacing:.01em}
.rcx h2{font-size:13px;text-transform:uppercase;letter-spacing:.06em;color:var(--muted);margin:0 0 10px}
.rcx-muted{color:var(--muted);font-size:13px;margin:0}
.rcx-qa{display:grid;grid-template-columns:1fr 1fr;gap:14px;margin:14px 0 10px}
.rcx-qa>div{background:var(--card);border:1px solid var(--line);border-radius:10px;padding:10px 14px}
.rcx-label{font-size:11px;text-transform:uppercase;letter-spacing:.08em;color:var(--muted)}
.rcx-qa p{margin:2px 0 0;white-space:pre-wrap;overflow-wrap:anywhere;unicode-bidi:plaintext;
 max-height:14em;overflow:auto}
.rcx-answer{font-weight:600}
.rcx-legend{display:flex;flex-wrap:wrap;gap:10px;align-items:center;margin:0 0 14px}
.rcx-key{font-size:12px;padding:1px 8px;border-radius:4px;background:rgb(var(--c) / .55);
 box-shadow:inset 0 -2px 0 rgb(var(--c))}
.rcx-main{display:grid;grid-template-columns:minmax(0,1fr) 340px;gap:18px;align-items:start}
.rcx-doc{background:var(--card);border:1px solid var(--line);border-radius:10px;margin:0 0 14px}
.rcx-doc>summary{cursor:pointer;padding:9px 14px;font-weight:600;border-bottom:1px solid var(--line)}
.rcx-doc>summary span{font-weight:400;color:var(--muted);font-size:13px;margin-inline-start:8px}
.rcx-doc:not([open])>summary{border-bottom:0}
.rcx-text{padding:10px 16px 14px;white-space:pre-wrap;overflow-wrap:anywhere;unicode-bidi:plaintext}
.rcx-ev{position:relative;color:inherit;border-radius:3px;padding:1px 1px;
 background:rgb(var(--c) / var(--a));box-shadow:inset 0 -2px 0 rgb(var(--c));outline:none}
.rcx-ev::before{content:attr(data-round);font-size:9px;font-weight:700;vertical-align:super;
 line-height:0;margin-inline-end:2px;color:var(--fg);opacity:.7}
.rcx-ev:hover::after,.rcx-ev:focus::after,.rcx-ev:target::after{content:attr(data-tip);position:absolute;
 left:0;bottom:calc(100% + 4px);z-index:5;white-space:nowrap;direction:ltr;unicode-bidi:isolate;
 font-size:12px;line-height:1.4;padding:3px 8px;border-radius:5px;background:#1d2230;color:#fff;
 box-shadow:0 2px 8px rgb(0 0 0 / .25);pointer-events:none}
.rcx-ev:focus,.rcx-ev:target{box-shadow:inset 0 -2px 0 rgb(var(--c)),0 0 0 2px rgb(var(--c))}
.rcx-fold{display:block;margin:6px 0;background:var(--fold);border-radius:6px;color:var(--muted)}
.rcx-fold>summary{cursor:pointer;font-size:12px;padding:2px 10px;list-style-position:inside;
 unicode-bidi:isolate;direction:ltr;text-align:start}
.rcx-fold[open]{padding:0 10px 6px;color:var(--fg)}
.rcx-panel{position:sticky;top:12px;max-height:calc(100vh - 24px);overflow:auto;background:var(--card);
 border:1px solid var(--line);border-radius:10px;padding:12px 14px}
.rcx-panel ol{list-style:none;margin:0;padding:0}
.rcx-panel li{margin:0 0 10px;padding:4px 0 4px 10px;border-inline-start:4px solid rgb(var(--c) / var(--a))}
.rcx-where{display:block;font-size:11.5px;color:var(--muted)}
.rcx-where span{white-space:nowrap}
.rcx-where a{color:inherit;text-decoration:none}
.rcx-where a:hover{text-decoration:underline}
.rcx-snippet{display:block;font-size:13.5px;overflow-wrap:anywhere;unicode-bidi:plaintext}
@media (max-width:900px){.rcx-main,.rcx-qa{grid-template-columns:1fr}
 .rcx-panel{position:static;max-height:none}}
@media (prefers-color-scheme:dark){
 .rcx{--fg:#e6e8ee;--muted:#9aa3b2;--card:#1c1f26;--line:#2d323c;--fold:#252933}}
"""
    + _ROUND_CSS
).strip()
