"""Sentence spans with exact character offsets, and input checks on the caller's text."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

import sentencex

from .errors import InputError
from .language import detect_language

_LINE = re.compile(r"[^\n]+")
# C0/C1 control characters other than tab, newline and carriage return.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


@dataclass(frozen=True)
class Sentence:
    """A sentence of document ``doc_index``: ``documents[doc_index][start:end]``."""

    doc_index: int
    start: int
    end: int


def check_text(text: object, what: str) -> str:
    """Return ``text`` if usable, else raise one clear :class:`InputError`."""
    if not isinstance(text, str):
        raise InputError(f"{what} must be a string, got {type(text).__name__}")
    if not text.strip():
        raise InputError(f"{what} is empty")
    bad = _CONTROL.search(text)
    if bad:
        name = unicodedata.name(bad.group(), f"U+{ord(bad.group()):04X}")
        raise InputError(f"{what} contains a control character ({name}) at offset {bad.start()}")
    return text


def normalize_documents(context: str | Sequence[str]) -> list[str]:
    """Accept one text or a list of documents; every document must have text."""
    documents = [context] if isinstance(context, str) else list(context)
    if not documents:
        raise InputError("context is empty: no documents given")
    return [
        check_text(doc, f"document {i}" if len(documents) > 1 else "context")
        for i, doc in enumerate(documents)
    ]


def _stripped(text: str, start: int, end: int) -> tuple[int, int]:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


def _cap(text: str, start: int, end: int, max_chars: int) -> list[tuple[int, int]]:
    """Split an over-long span into pieces of at most ``max_chars``, at whitespace where possible."""
    pieces = []
    while end - start > max_chars:
        cut = text.rfind(" ", start + max_chars // 2, start + max_chars)
        cut = cut if cut > start else start + max_chars
        pieces.append(_stripped(text, start, cut))
        start = _stripped(text, cut, end)[0]
    pieces.append((start, end))
    return [p for p in pieces if p[1] > p[0]]


def split_sentences(text: str, max_chars: int = 400, language: str = "en") -> list[tuple[int, int]]:
    """Sentence ``(start, end)`` character offsets in ``text``, whitespace trimmed.

    Lines are split first (lists, tables and key-value lines are one unit each), then
    sentencex splits each line; spans longer than ``max_chars`` are cut at whitespace.
    """
    spans: list[tuple[int, int]] = []
    for line in _LINE.finditer(text):
        base = line.start()
        for boundary in sentencex.get_sentence_boundaries(language, line.group()):
            start, end = _stripped(text, base + boundary["start_index"], base + boundary["end_index"])
            if end > start:
                spans.extend(_cap(text, start, end, max_chars))
    return spans


def document_sentences(
    documents: Sequence[str], max_chars: int = 400, language: str | None = None
) -> list[Sentence]:
    """All sentences of all documents, in document order; ``language`` None: detected per document."""
    return [
        Sentence(doc_index, start, end)
        for doc_index, doc in enumerate(documents)
        for start, end in split_sentences(doc, max_chars, language or detect_language(doc))
    ]
