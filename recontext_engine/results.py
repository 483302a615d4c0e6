"""What the engine returns: evidence with provenance, usage and timings."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class Evidence:
    """One replayed sentence and where it came from.

    ``char_start``/``char_end`` index the caller's document ``doc_index`` exactly:
    ``documents[doc_index][char_start:char_end] == text``.
    """

    text: str
    doc_index: int
    char_start: int
    char_end: int
    score: float
    round: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Usage:
    input_tokens: int
    output_tokens: int
    evidence_tokens: int = 0
    cached_tokens: int = 0  # input tokens whose KV a previous call on the same context had computed

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


@dataclass
class ReplayResult:
    """The answer of one ReContext call.

    ``documents`` and ``question`` are what the call read (filled by the engine; not part of
    :meth:`to_dict`); the evidence view (:func:`recontext_engine.view.render_html`, and
    ``_repr_html_`` in notebooks) shows the evidence in place in them.
    """

    text: str
    evidence: list[Evidence]
    usage: Usage
    timings: dict[str, float] = field(default_factory=dict)
    model: str = ""
    finish_reason: str = "stop"
    documents: list[str] | None = field(default=None, repr=False, compare=False)
    question: str | None = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "answer": self.text,
            "evidence": [e.to_dict() for e in self.evidence],
            "usage": asdict(self.usage),
            "timings": dict(self.timings),
            "model": self.model,
            "finish_reason": self.finish_reason,
        }

    def _repr_html_(self) -> str:
        from .view import render_html

        return render_html(self, full_page=False)
