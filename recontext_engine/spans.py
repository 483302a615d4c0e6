"""Sentence spans with exact character offsets, and input checks on the caller's text."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

from .errors import InputError
from .language import detect_language
from .segment import replay_text, segment, split_sentences

__all__ = [
    "REFUSED_CONTROL",
    "Sentence",
    "check_text",
    "clean_control",
    "document_sentences",
    "normalize_documents",
    "replay_text",
    "split_sentences",
]

# The one rule for control characters, shared by check_text (the engine, the CLI) and
# messages.clean_text (the integrations, the server). Tab, LF, CR, vertical tab, form feed
# (a page break), NEL (U+0085) and U+2028/U+2029 are whitespace: line and paragraph breaks for
# the segmentation. Every other C0/C1 control (NUL, ESC, DEL, the C1 block, the file/group/record/
# unit separators U+001C-U+001F) is refused. A character class: linear in Python's re.
REFUSED_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1f\x7f-\x84\x86-\x9f]")


@dataclass(frozen=True)
class Sentence:
    """A sentence of document ``doc_index``: ``documents[doc_index][start:end]``; ``headings``: the
    ids of the sentences heading its section (a changelog entry's version line, a markdown title),
    outermost first."""

    doc_index: int
    start: int
    end: int
    headings: tuple[int, ...] = ()


def check_text(text: object, what: str) -> str:
    """Return ``text`` if usable, else raise one clear :class:`InputError`."""
    if not isinstance(text, str):
        raise InputError(f"{what} must be a string, got {type(text).__name__}")
    if not text.strip():
        raise InputError(f"{what} is empty")
    bad = REFUSED_CONTROL.search(text)
    if bad:
        name = unicodedata.name(bad.group(), f"U+{ord(bad.group()):04X}")
        raise InputError(f"{what} contains a control character ({name}) at offset {bad.start()}")
    return text


def clean_control(text: str) -> str:
    """``text`` with each refused control character replaced by a space: same length, same
    offsets; the whitespace controls (form feeds from PDF loaders, ...) are kept as they are."""
    return REFUSED_CONTROL.sub(" ", text)


def normalize_documents(context: str | Sequence[str]) -> list[str]:
    """Accept one text or a list of documents; every document must have text."""
    documents = [context] if isinstance(context, str) else list(context)
    if not documents:
        raise InputError("context is empty: no documents given")
    return [
        check_text(doc, f"document {i}" if len(documents) > 1 else "context")
        for i, doc in enumerate(documents)
    ]


def document_sentences(
    documents: Sequence[str], max_chars: int = 400, language: str | None = None
) -> list[Sentence]:
    """All sentences of all documents, in document order; ``language`` None: detected per document."""
    sentences: list[Sentence] = []
    for doc_index, doc in enumerate(documents):
        base = len(sentences)
        sentences.extend(
            Sentence(doc_index, unit.start, unit.end, tuple(base + h for h in unit.headings))
            for unit in segment(doc, max_chars, language or detect_language(doc))
        )
    return sentences
