"""Scoring: answer accuracy, exact match, evidence recall, and grouped summaries.

- ``accuracy`` (HELMET's substring exact match): after normalization (lowercase, punctuation
  and the articles a/an/the removed, whitespace collapsed), some alias is contained in the answer
  as whole words, so that the alias "55" does not match "155".
- ``exact_match``: the normalized answer equals some normalized alias.
- ``evidence_recall``: the fraction of gold sentences that some evidence span overlaps (same
  document, intersecting character ranges). None when a case has no gold or a method replays none.
"""

from __future__ import annotations

import re
import statistics
import string
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans({c: " " for c in string.punctuation})


class SpanLike(Protocol):
    """A character span of one document (read-only: Evidence and GoldSpan are frozen)."""

    @property
    def doc_index(self) -> int: ...
    @property
    def char_start(self) -> int: ...
    @property
    def char_end(self) -> int: ...


def normalize_answer(text: str) -> str:
    """Lowercase, drop punctuation and articles, collapse whitespace (SQuAD/HELMET style)."""
    text = text.lower().translate(_PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def substring_match(prediction: str, answers: Iterable[str]) -> bool:
    """True if some normalized alias occurs, as whole words, in the normalized prediction."""
    pred = f" {normalize_answer(prediction)} "
    return any(norm and f" {norm} " in pred for norm in map(normalize_answer, answers))


def answer_correct(prediction: str, answers: Sequence[str], match: str = "any") -> bool:
    """Substring accuracy: some alias occurs (``match="any"``), or every alias does (``"all"``: a
    question with several answers, such as the three needles of NIAH's pizza set)."""
    if match == "all":
        return bool(answers) and all(substring_match(prediction, [alias]) for alias in answers)
    return substring_match(prediction, answers)


def exact_match(prediction: str, answers: Iterable[str]) -> bool:
    """True if the normalized prediction equals some normalized alias."""
    pred = normalize_answer(prediction)
    return any(pred == normalize_answer(alias) for alias in answers)


def overlaps(a: SpanLike, b: SpanLike) -> bool:
    return a.doc_index == b.doc_index and a.char_start < b.char_end and b.char_start < a.char_end


def evidence_recall(evidence: Sequence[SpanLike], gold: Sequence[SpanLike]) -> float | None:
    """Fraction of gold spans overlapped by some evidence span; None without gold."""
    if not gold:
        return None
    return sum(any(overlaps(e, g) for e in evidence) for g in gold) / len(gold)


def evidence_precision(evidence: Sequence[SpanLike], gold: Sequence[SpanLike]) -> float | None:
    """Fraction of evidence spans that overlap some gold span; None without evidence or gold."""
    if not evidence or not gold:
        return None
    return sum(any(overlaps(e, g) for g in gold) for e in evidence) / len(evidence)


def mean(values: Iterable[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return sum(kept) / len(kept) if kept else None


def median(values: Iterable[float | None]) -> float | None:
    kept = [v for v in values if v is not None]
    return statistics.median(kept) if kept else None


def summarize(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Aggregate figures of some records (one method, usually)."""
    return {
        "n": len(records),
        "accuracy": mean(float(r["correct"]) for r in records),
        "exact_match": mean(float(r["exact"]) for r in records),
        "recall": mean(r.get("recall") for r in records),
        "time_ratio": median(r.get("time_ratio") for r in records),
        "memory_ratio": median(r.get("memory_ratio") for r in records),
        "time_s": median(r.get("time_s") for r in records),
        "evidence_tokens": mean(r.get("evidence_tokens") for r in records),
        "evidence_count": mean(r.get("evidence_count") for r in records),
        "errors": sum(1 for r in records if r.get("error")),
    }


def group_by(
    records: Iterable[dict[str, Any]], *keys: str | Callable[[dict[str, Any]], Any]
) -> dict[tuple, list[dict[str, Any]]]:
    """Records grouped by the values of ``keys`` (field names or functions), in first-seen order."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for record in records:
        key = tuple(k(record) if callable(k) else record.get(k) for k in keys)
        groups.setdefault(key, []).append(record)
    return groups
