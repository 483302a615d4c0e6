"""What the engine returns: evidence with provenance, usage and timings."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from .structured import ToolCall


@dataclass(frozen=True)
class Evidence:
    """One replayed sentence and where it came from.

    ``char_start``/``char_end`` index the caller's document ``doc_index`` exactly:
    ``documents[doc_index][char_start:char_end] == text``. ``heading``: not picked itself but the
    heading of a picked sentence's section (``ReplayConfig.replay_headings``), replayed with it.
    """

    text: str
    doc_index: int
    char_start: int
    char_end: int
    score: float
    round: int
    heading: bool = False

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

    ``tool_calls`` are the calls the model made (``finish_reason`` "tool_calls"; ``text`` is what it
    said besides); ``parsed`` is the answer's JSON where a schema constrained it (None where the
    token limit cut it off); ``citations`` the evidence an answer with ``cite_evidence`` names.
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
    tool_calls: list[ToolCall] = field(default_factory=list)
    parsed: Any = None

    @property
    def citations(self) -> list[Evidence]:
        """The evidence the answer cites (``cite_evidence``): its ``evidence_ids`` are 1-based
        numbers of :attr:`evidence`, as the prompt numbered them."""
        if not isinstance(self.parsed, dict):
            return []
        ids = self.parsed.get("evidence_ids") or []
        count = len(self.evidence)
        return [self.evidence[i - 1] for i in dict.fromkeys(ids) if isinstance(i, int) and 0 < i <= count]

    def to_dict(self) -> dict[str, Any]:
        data = {
            "answer": self.text,
            "evidence": [e.to_dict() for e in self.evidence],
            "usage": asdict(self.usage),
            "timings": dict(self.timings),
            "model": self.model,
            "finish_reason": self.finish_reason,
        }
        if self.tool_calls:
            data["tool_calls"] = [call.to_dict() for call in self.tool_calls]
        if self.parsed is not None:
            data["parsed"] = self.parsed
        return data

    def _repr_html_(self) -> str:
        from .view import render_html

        return render_html(self, full_page=False)
