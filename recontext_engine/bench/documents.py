"""Question sets over real documents that nobody on the team wrote.

The documents under ``data/documents/<family>/`` are byte-for-byte copies of texts found on a
Debian machine or inside installed packages (``SOURCES`` names each origin; ``SOURCES.md`` adds
the licences): software licences, Python reference pages, package READMEs and Debian
changelogs. ``questions.json`` asks short questions of them; each question names its gold
snippets, the sentence(s) or clause(s) that answer it, written with single spaces, and found in
the hard-wrapped document whitespace-insensitively.

A case's context is the whole document when it fits ``max_tokens``, else one contiguous slice cut
at paragraph boundaries (blank or form-feed lines) that holds every gold; where the golds sit
inside the slice is a deterministic function of the question id, so depths spread from start to
end instead of sitting in the middle.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from functools import cache
from importlib.resources import files
from typing import TYPE_CHECKING, Any

from .tasks import BenchCase, CountTokens, GoldSpan

if TYPE_CHECKING:  # importlib.resources.abc is new in Python 3.11
    from importlib.resources.abc import Traversable

FAMILIES: tuple[str, ...] = ("licence", "pydoc", "readme", "changelog")
KINDS: tuple[str, ...] = ("lookup", "two-hop", "paraphrase")

# Where each document was copied from (its bytes are unchanged): ``file:`` a path, ``gzip:`` the
# decompressed content of a path, ``pydoc:`` a topic of ``pydoc_data.topics`` under a Python
# version, ``metadata:`` the long description (after the headers) of an installed distribution.
SOURCES: dict[str, str] = {
    "licence/Apache-2.0.txt": "file:/usr/share/common-licenses/Apache-2.0",
    "licence/MPL-2.0.txt": "file:/usr/share/common-licenses/MPL-2.0",
    "licence/GPL-3.txt": "file:/usr/share/common-licenses/GPL-3",
    "licence/LGPL-2.1.txt": "file:/usr/share/common-licenses/LGPL-2.1",
    "pydoc/try.txt": "pydoc:try@3.11.7",
    "pydoc/import.txt": "pydoc:import@3.11.7",
    "pydoc/formatstrings.txt": "pydoc:formatstrings@3.11.7",
    "readme/bm25s.md": "metadata:bm25s==0.3.16",
    "readme/pyrate_limiter.md": "metadata:pyrate_limiter==4.5.1",
    "readme/fastapi.md": "metadata:fastapi==0.165.0",
    "changelog/apt.NEWS.Debian.txt": "gzip:/usr/share/doc/apt/NEWS.Debian.gz",
    "changelog/openssh.NEWS.Debian.txt": "gzip:/usr/share/doc/openssh-client/NEWS.Debian.gz",
    "changelog/gzip.changelog.Debian.txt": "gzip:/usr/share/doc/gzip/changelog.Debian.gz",
}

_REQUIRED = {"id", "family", "document", "question", "answers", "gold", "kind", "hops"}
# A paragraph ends at a run of blank lines; a line holding only a form feed (the page breaks of
# the GNU licences) counts as blank.
_PARAGRAPH_BREAK = re.compile(r"\n(?:[ \t\f\r]*\n)+")
_LEADING_BLANK_LINES = re.compile(r"(?:[ \t\f\r]*\n)+")
_FILL = 0.85  # a slice holds at least this share of the widest slice around its golds


def _data_dir() -> Traversable:
    return files("recontext_engine.bench").joinpath("data", "documents")


@cache
def read_document(document: str) -> str:
    """A document's text, decoded without newline translation (``\\r`` and ``\\f`` stay)."""
    return _data_dir().joinpath(*document.split("/")).read_bytes().decode("utf-8")


def _validate(question: dict[str, Any]) -> None:
    qid = question.get("id", "?")
    missing = _REQUIRED - question.keys()
    if missing:
        raise ValueError(f"question {qid}: missing {sorted(missing)}")
    if question["family"] not in FAMILIES:
        raise ValueError(f"question {qid}: unknown family {question['family']!r}")
    if question["kind"] not in KINDS:
        raise ValueError(f"question {qid}: unknown kind {question['kind']!r}")
    if question["document"] not in SOURCES or not question["document"].startswith(question["family"] + "/"):
        raise ValueError(f"question {qid}: unknown document {question['document']!r} for its family")
    if not question["answers"] or not all(isinstance(a, str) and a.strip() for a in question["answers"]):
        raise ValueError(f"question {qid}: answers must be non-empty strings")
    if not question["gold"] or not all(isinstance(g, str) and g.strip() for g in question["gold"]):
        raise ValueError(f"question {qid}: gold must be non-empty strings")
    two_hop = question["kind"] == "two-hop"
    if question["hops"] != (2 if two_hop else 1) or (two_hop and len(question["gold"]) < 2):
        raise ValueError(f"question {qid}: a two-hop question has hops=2 and two golds, others hops=1")


def load_questions(families: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """The validated questions, of some families (all by default), in file order."""
    unknown = set(families or ()) - set(FAMILIES)
    if unknown:
        raise ValueError(f"unknown document families {sorted(unknown)}; known: {', '.join(FAMILIES)}")
    questions = json.loads(_data_dir().joinpath("questions.json").read_text(encoding="utf-8"))
    seen: set[str] = set()
    for question in questions:
        _validate(question)
        if question["id"] in seen:
            raise ValueError(f"question {question['id']}: duplicate id")
        seen.add(question["id"])
    return [q for q in questions if families is None or q["family"] in families]


def snippet_pattern(snippet: str) -> re.Pattern[str]:
    """The snippet's words, escaped, joined by any whitespace (the documents are hard-wrapped)."""
    return re.compile(r"\s+".join(re.escape(word) for word in snippet.split()))


def find_gold(text: str, snippet: str, qid: str) -> tuple[int, int]:
    """The character span of the snippet's single occurrence in the text."""
    matches = list(snippet_pattern(snippet).finditer(text))
    if len(matches) != 1:
        raise ValueError(f"question {qid}: gold {snippet[:60]!r} found {len(matches)} times (needs 1)")
    return matches[0].span()


def paragraph_starts(text: str) -> list[int]:
    """Offsets where paragraphs start, plus ``len(text)``: the places a slice may be cut."""
    return [0, *(m.end() for m in _PARAGRAPH_BREAK.finditer(text)), len(text)]


def _target_depth(qid: str) -> float:
    """A deterministic depth in [0, 1) from the question id, spreading golds through slices."""
    return int(hashlib.sha256(qid.encode()).hexdigest()[:8], 16) / 2**32


def _choose_slice(
    text: str, spans: list[tuple[int, int]], count_tokens: CountTokens, max_tokens: int, qid: str
) -> tuple[int, int]:
    """The cut ``(start, end)`` holding every gold span whose first gold sits nearest the
    question's target depth, among the widest slices that fit ``max_tokens``."""
    if count_tokens(text) <= max_tokens:
        return 0, len(text)
    cuts = paragraph_starts(text)
    # Paragraph token counts add up to nearly the slice's count; sums pick the slice fast and the
    # real count of the chosen slice confirms it (the budget shrinks if a join cost tokens).
    sizes = [count_tokens(text[a:b]) for a, b in zip(cuts, cuts[1:])]
    first = max(i for i, c in enumerate(cuts[:-1]) if c <= min(s for s, _ in spans))
    last = min(i for i, c in enumerate(cuts) if c >= max(e for _, e in spans))  # a cut index
    target = _target_depth(qid)
    budget = max_tokens
    gold_start = min(s for s, _ in spans)
    while budget > 0:
        windows: list[tuple[int, int, int]] = []  # (tokens, start, end), each as wide as fits
        for a in range(first, -1, -1):
            if sum(sizes[a:last]) > budget:
                break
            b = last
            while b < len(sizes) and sum(sizes[a : b + 1]) <= budget:
                b += 1
            windows.append((sum(sizes[a:b]), cuts[a], cuts[b]))
        if not windows:
            break
        # Near a document's ends the widest window from some starts is short: keep the windows
        # that fill most of the budget, then take the one whose depth is nearest the target.
        widest = max(w[0] for w in windows)
        _, start, end = min(
            (w for w in windows if w[0] >= _FILL * widest),
            key=lambda w: abs((gold_start - w[1]) / (w[2] - w[1]) - target),
        )
        if count_tokens(text[start:end]) <= max_tokens:
            return start, end
        budget -= max(1, max_tokens // 50)
    raise ValueError(f"question {qid}: its golds do not fit in {max_tokens} tokens")


def _trim(text: str, start: int, end: int) -> tuple[int, int]:
    """Drop the slice's leading blank lines and trailing whitespace (first-line indentation stays)."""
    lead = _LEADING_BLANK_LINES.match(text, start, end)
    if lead:
        start = lead.end()
    return start, start + len(text[start:end].rstrip())


def document_case(question: dict[str, Any], count_tokens: CountTokens, max_tokens: int = 2048) -> BenchCase:
    """One question as a benchmark case over its document (or a slice of it)."""
    text = read_document(question["document"])
    spans = [find_gold(text, snippet, question["id"]) for snippet in question["gold"]]
    start, end = _trim(text, *_choose_slice(text, spans, count_tokens, max_tokens, question["id"]))
    context = text[start:end]
    gold = [GoldSpan(0, s - start, e - start) for s, e in spans]
    return BenchCase(
        case_id=f"{question['id']}-{max_tokens}",  # one question runs at several lengths
        task=f"doc-{question['family']}",
        context=context,
        question=question["question"],
        answers=list(question["answers"]),
        gold=gold,
        depth=min(g.char_start for g in gold) / len(context),
        length=max_tokens,
        target_tokens=max_tokens,
        context_tokens=count_tokens(context),
        hops=question["hops"],
        layout="text",
        meta={
            "question_id": question["id"],
            "family": question["family"],
            "kind": question["kind"],
            "document": question["document"],
            "source": SOURCES[question["document"]],
        },
    )


def document_cases(
    count_tokens: CountTokens, *, max_tokens: int = 2048, families: Sequence[str] | None = None
) -> list[BenchCase]:
    """Every question (of some families) as a case whose context fits ``max_tokens``."""
    return [document_case(q, count_tokens, max_tokens) for q in load_questions(families)]
