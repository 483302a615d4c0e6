"""``ReContextReplayer``: local attention picks the evidence, any chat model (hosted too) reads it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.callbacks import dispatch_custom_event
from langchain_core.documents import Document
from langchain_core.runnables import RunnableConfig, RunnableSerializable

from ..common import EVIDENCE_EVENT, evidence_payload
from .selection import EVIDENCE_KIND, EngineSettings, evidence_document, is_evidence, select_evidence

__all__ = ["EVIDENCE_KIND", "ReContextReplayer", "format_replay_prompt", "is_evidence"]


def _as_documents(value: Any) -> list[Document]:
    items = [value] if isinstance(value, (str, Document)) else list(value)
    return [d if isinstance(d, Document) else Document(page_content=str(d)) for d in items]


class ReContextReplayer(EngineSettings, RunnableSerializable[dict[str, Any], dict[str, Any]]):
    """Adds an evidence document, chosen by the local model's retrieval heads, after the documents.

    Input: ``{"question": str, "documents": list[Document]}`` (``"context"``: a string, a list of
    strings or Documents, is accepted instead of ``"documents"``). Output: the input with
    ``"documents"`` = the same documents plus one evidence Document placed last. Its
    ``page_content`` is the replayed sentences inside the engine's evidence template (quoted as
    data); its metadata holds ``kind="recontext_evidence"``, ``source_documents`` (``doc_index``
    plus ``id``/``source`` of each document that gave evidence), ``spans`` (``doc_index``,
    ``char_start``, ``char_end``, ``score``, ``round``, ``heading``: ``documents[doc_index].page_content
    [char_start:char_end]`` is the sentence) and ``model``. Feed it to any chat model, e.g. with
    :func:`format_replay_prompt`, so the model reads ``[C; E; q]``. Inside a chain it also
    dispatches the custom event ``"recontext_evidence"`` as soon as the evidence is chosen.
    """

    def evidence_document(self, documents: Sequence[Document], question: str) -> Document:
        """The evidence Document for ``question`` over ``documents`` (empty documents are skipped)."""
        engine = self.get_engine()
        config = self.selection_config()
        evidence = select_evidence(engine, documents, question, config)
        return evidence_document(documents, evidence, config, engine.model_name)

    def _replay(self, inputs: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
        if not isinstance(inputs, dict) or "question" not in inputs:
            raise ValueError('ReContextReplayer expects a dict with "question" and "documents"')
        if "documents" in inputs:
            documents = _as_documents(inputs["documents"])
        elif "context" in inputs:
            documents = _as_documents(inputs["context"])
        else:
            raise ValueError('ReContextReplayer input needs "documents" (or "context")')
        documents = [d for d in documents if not is_evidence(d)]  # replaying twice replaces the old one
        engine, selection = self.get_engine(), self.selection_config()
        evidence = select_evidence(engine, documents, inputs["question"], selection)
        data = {"evidence": evidence_payload(evidence), "question": inputs["question"]}
        dispatch_custom_event(EVIDENCE_EVENT, {**data, "model_name": engine.model_name}, config=config)
        added = evidence_document(documents, evidence, selection, engine.model_name)
        return {**inputs, "documents": [*documents, added]}

    def invoke(
        self, input: dict[str, Any], config: RunnableConfig | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        """Select evidence for ``input["question"]`` and append it to the documents."""
        # the ignore: _call_with_config's annotation omits the (input, config) form of ``func`` that the
        # call_func_with_variable_args it calls accepts (it passes ``config`` to a function that takes it)
        return self._call_with_config(self._replay, input, config, **kwargs)  # type: ignore[arg-type]


def format_replay_prompt(inputs: dict[str, Any], question_template: str | None = None) -> str:
    """A prompt string in ReContext's layout ``[C; E; q]`` from a :class:`ReContextReplayer` output.

    Context documents are numbered as the engine numbers them, the evidence document follows
    them, then the question (``question_template`` must hold ``{question}``; default: the engine's).
    """
    from recontext_engine import ReplayConfig, context_block

    documents = _as_documents(inputs["documents"])
    context = [d.page_content for d in documents if not is_evidence(d)]
    evidence = [d.page_content for d in documents if is_evidence(d)]
    text, _ = context_block(context) if context else ("", [])
    template = question_template or ReplayConfig().question_template
    parts = ["Context:\n" + text, *evidence, template.replace("{question}", inputs["question"])]
    return "\n\n".join(parts)
