"""The evidence instrumentation event of the LlamaIndex components."""

from __future__ import annotations

from typing import Any

from llama_index.core.instrumentation.events.base import BaseEvent


class ReContextEvidenceEvent(BaseEvent):
    """The evidence ReContext selected, dispatched before generation starts (or by the postprocessor).

    ``evidence``: dicts with ``text``, ``doc_index``, ``char_start``, ``char_end``, ``score``,
    ``round``, ``heading`` (and ``message_index`` from the LLM, ``node_id`` from the postprocessor).
    """

    evidence: list[dict[str, Any]]
    question: str
    split_rule: str = "nodes"
    model_name: str = ""

    @classmethod
    def class_name(cls) -> str:
        return "ReContextEvidenceEvent"
