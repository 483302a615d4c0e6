"""``ReContextReplayer``: local attention picks the evidence, any chat model (hosted too) reads it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from langchain_core.documents import Document
from langchain_core.runnables import RunnableConfig, RunnableSerializable
from pydantic import Field

from .chat_models import load_engine

if TYPE_CHECKING:
    from recontext_engine import ReContextEngine

EVIDENCE_KIND = "recontext_evidence"


def _as_documents(value: Any) -> list[Document]:
    items = [value] if isinstance(value, (str, Document)) else list(value)
    return [d if isinstance(d, Document) else Document(page_content=str(d)) for d in items]


def is_evidence(document: Document) -> bool:
    """Whether ``document`` is the evidence document a :class:`ReContextReplayer` added."""
    return document.metadata.get("kind") == EVIDENCE_KIND


class ReContextReplayer(RunnableSerializable[dict[str, Any], dict[str, Any]]):
    """Adds an evidence document, chosen by the local model's retrieval heads, after the documents.

    Input: ``{"question": str, "documents": list[Document]}`` (``"context"``: a string, a list of
    strings or Documents, is accepted instead of ``"documents"``). Output: the input with
    ``"documents"`` = the same documents plus one evidence Document placed last. Its
    ``page_content`` is the replayed sentences inside the engine's evidence template (quoted as
    data); its metadata holds ``kind="recontext_evidence"``, ``source_documents`` (``doc_index``
    plus ``id``/``source`` of each document that gave evidence), ``spans`` (``doc_index``,
    ``char_start``, ``char_end``, ``score``, ``round``: ``documents[doc_index].page_content
    [char_start:char_end]`` is the sentence) and ``model``. Feed it to any chat model, e.g. with
    :func:`format_replay_prompt`, so the model reads ``[C; E; q]``.
    """

    engine: Any = Field(default=None, exclude=True)
    """A loaded ``ReContextEngine``; when set, ``model``, ``heads`` and ``device`` are unused."""
    model: str | None = None
    heads: str | list[tuple[int, int]] = "auto"
    device: str = "cpu"
    rounds: int | None = None
    top_k: int | None = None
    replay_options: dict[str, Any] = Field(default_factory=dict)
    """Other ``ReplayConfig`` fields used for selection (e.g. ``max_evidence``, ``unit``)."""

    def get_engine(self) -> ReContextEngine:
        """The injected engine, or the one for ``model``/``heads``/``device`` (loaded on first use)."""
        if self.engine is not None:
            return self.engine
        return load_engine(self.model, heads=self.heads, device=self.device)

    def _options(self) -> dict[str, Any]:
        options = dict(self.replay_options)
        if self.rounds is not None:
            options["rounds"] = self.rounds
        if self.top_k is not None:
            options["top_k"] = self.top_k
        return options

    def evidence_document(self, documents: Sequence[Document], question: str) -> Document:
        """The evidence Document for ``question`` over ``documents`` (empty documents are skipped)."""
        engine = self.get_engine()
        options = self._options()
        kept = [i for i, d in enumerate(documents) if d.page_content.strip()]
        if not kept:
            raise ValueError("ReContextReplayer needs at least one document with text")
        evidence = engine.select_evidence([documents[i].page_content for i in kept], question, **options)
        config = engine.default_config.with_options(**options)
        spans, sources = [], {}
        for item in evidence:
            index = kept[item.doc_index]
            spans.append(
                {
                    "doc_index": index,
                    "char_start": item.char_start,
                    "char_end": item.char_end,
                    "score": item.score,
                    "round": item.round,
                }
            )
            source = {"doc_index": index}
            document = documents[index]
            if document.id is not None:
                source["id"] = document.id
            if "source" in document.metadata:
                source["source"] = document.metadata["source"]
            sources[index] = source
        text = config.evidence_template.format(
            evidence=config.evidence_separator.join(item.text for item in evidence)
        )
        metadata = {
            "kind": EVIDENCE_KIND,
            "source_documents": [sources[i] for i in sorted(sources)],
            "spans": spans,
            "model": engine.model_name,
        }
        return Document(page_content=text, metadata=metadata)

    def _replay(self, inputs: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(inputs, dict) or "question" not in inputs:
            raise ValueError('ReContextReplayer expects a dict with "question" and "documents"')
        if "documents" in inputs:
            documents = _as_documents(inputs["documents"])
        elif "context" in inputs:
            documents = _as_documents(inputs["context"])
        else:
            raise ValueError('ReContextReplayer input needs "documents" (or "context")')
        documents = [d for d in documents if not is_evidence(d)]  # replaying twice replaces the old one
        evidence = self.evidence_document(documents, inputs["question"])
        return {**inputs, "documents": [*documents, evidence]}

    def invoke(
        self, input: dict[str, Any], config: RunnableConfig | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        """Select evidence for ``input["question"]`` and append it to the documents."""
        return self._call_with_config(self._replay, input, config, **kwargs)


def format_replay_prompt(inputs: dict[str, Any], question_template: str | None = None) -> str:
    """A prompt string in ReContext's layout ``[C; E; q]`` from a :class:`ReContextReplayer` output.

    Context documents are numbered as the engine numbers them, the evidence document follows
    them, then the question (``question_template`` must hold ``{question}``; default: the engine's).
    """
    from recontext_engine.config import DEFAULT_QUESTION_TEMPLATE
    from recontext_engine.prompt import context_block

    documents = _as_documents(inputs["documents"])
    context = [d.page_content for d in documents if not is_evidence(d)]
    evidence = [d.page_content for d in documents if is_evidence(d)]
    text, _ = context_block(context) if context else ("", [])
    template = question_template or DEFAULT_QUESTION_TEMPLATE
    parts = ["Context:\n" + text, *evidence, template.format(question=inputs["question"])]
    return "\n\n".join(parts)
