"""The evidence instrumentation event, and the engine that the LlamaIndex components share."""

from __future__ import annotations

from typing import Any

from llama_index.core.instrumentation.events.base import BaseEvent

from recontext_engine import ReContextEngine

from ..common import load_engine


class ReContextEvidenceEvent(BaseEvent):
    """The evidence ReContext selected, dispatched before generation starts (or by the postprocessor).

    ``evidence``: dicts with ``text``, ``doc_index``, ``char_start``, ``char_end``, ``score``,
    ``round`` (and ``message_index`` from the LLM, ``node_id`` from the postprocessor).
    """

    evidence: list[dict[str, Any]]
    question: str
    split_rule: str = "nodes"
    model_name: str = ""

    @classmethod
    def class_name(cls) -> str:
        return "ReContextEvidenceEvent"


def shared_engine(owner: Any) -> ReContextEngine:
    """The owner's engine: the one it was given, else the process-wide one for its settings."""
    if owner._engine is None:
        owner._engine = load_engine(owner.model, heads=owner.heads, device=owner.device)
    return owner._engine
