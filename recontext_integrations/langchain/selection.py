"""Evidence selection over LangChain Documents, shared by the replayer and the document compressor."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, ClassVar

from langchain_core.documents import Document
from pydantic import BaseModel, Field, model_validator

from recontext_engine import clean_text, render_evidence_block

from ..common import (
    checked_settings,
    evidence_span,
    load_engine,
    refuse_pickling_an_engine,
    shared_engine_memo,
)

if TYPE_CHECKING:
    from recontext_engine import Evidence, ReContextEngine, ReplayConfig

EVIDENCE_KIND = "recontext_evidence"


class EngineSettings(BaseModel):
    """Engine and replay settings shared by the chat model, the replayer and the compressor.

    Unknown constructor arguments are an error (naming the closest field); ``model_name=`` is
    ``model=`` (ChatOpenAI's name). Copies share the ``engine``; one with an ``engine`` cannot be
    pickled (build it with ``model=`` instead: the model then loads on first use).
    """

    setting_aliases: ClassVar[dict[str, str]] = {"model_name": "model"}
    # ReplayConfig option -> the field that sets it (and would override it in replay_options).
    option_fields: ClassVar[dict[str, str]] = {"rounds": "rounds", "top_k": "top_k"}

    engine: Any = Field(default=None, exclude=True)
    """A loaded ``ReContextEngine``; when set, ``model``, ``heads`` and ``device`` are unused."""
    model: str | None = None
    """Hub id, local folder or GGUF path; None: the embedded default model."""
    heads: str | list[tuple[int, int]] = "auto"
    """Retrieval heads: ``"auto"``, a JSON path or ``(layer, head)`` pairs."""
    device: str = "cpu"
    rounds: int | None = None
    """Replay rounds (0: vanilla); None: the engine default."""
    top_k: int | None = None
    replay_options: dict[str, Any] = Field(default_factory=dict)
    """Other ``ReplayConfig`` fields, e.g. ``{"max_evidence": 4, "unit": "token"}``."""

    @model_validator(mode="before")
    @classmethod
    def _refuse_unknown_settings(cls, data: Any) -> Any:
        return checked_settings(data, cls.model_fields, cls.setting_aliases)

    @model_validator(mode="after")
    def _check_replay_options(self) -> EngineSettings:
        for option, field in self.option_fields.items():
            if option in self.replay_options and getattr(self, field) is not None:
                raise ValueError(
                    f"replay_options[{option!r}] would be overridden by {field}={getattr(self, field)!r}: "
                    f"set {field}= instead"
                )
        if self.replay_options:
            from recontext_engine import ReplayConfig

            ReplayConfig().with_options(**self.replay_options)  # ReContextError (a ValueError) on bad ones
        return self

    def __deepcopy__(self, memo: dict[int, Any] | None = None) -> EngineSettings:
        return super().__deepcopy__(shared_engine_memo(self.engine, memo))

    def __getstate__(self) -> dict[Any, Any]:
        refuse_pickling_an_engine(self, self.engine)
        return super().__getstate__()

    def get_engine(self) -> ReContextEngine:
        """The injected engine, or the shared one for ``model``/``heads``/``device`` (loaded on first use)."""
        if self.engine is not None:
            return self.engine
        return load_engine(self.model, heads=self.heads, device=self.device)

    def selection_options(self) -> dict[str, Any]:
        """The ``ReplayConfig`` options set here (``replay_options`` with ``rounds`` and ``top_k``)."""
        options = dict(self.replay_options)
        if self.rounds is not None:
            options["rounds"] = self.rounds
        if self.top_k is not None:
            options["top_k"] = self.top_k
        return options

    def selection_config(self) -> ReplayConfig:
        return self.get_engine().default_config.with_options(**self.selection_options())


def is_evidence(document: Document) -> bool:
    """Whether ``document`` is an evidence document a ReContext component added."""
    return document.metadata.get("kind") == EVIDENCE_KIND


def with_text(documents: Sequence[Document]) -> list[int]:
    """Indices of the documents that have text (the engine rejects empty ones)."""
    return [i for i, d in enumerate(documents) if d.page_content.strip()]


def select_evidence(
    engine: ReContextEngine, documents: Sequence[Document], question: str, config: ReplayConfig
) -> list[Evidence]:
    """Evidence over ``documents`` (empty ones skipped); ``doc_index`` indexes ``documents`` itself.

    Page contents are passed as they are (no regex), less control characters (same length, so the
    char offsets slice ``page_content``).
    """
    kept = with_text(documents)
    if not kept:
        raise ValueError("evidence selection needs at least one document with text")
    texts = [clean_text(documents[i].page_content) for i in kept]
    return [replace(e, doc_index=kept[e.doc_index]) for e in engine.select_evidence(texts, question, config)]


def source_of(documents: Sequence[Document], index: int) -> dict[str, Any]:
    """``doc_index`` plus the ``id`` and ``source`` metadata of a document, where it has them."""
    source: dict[str, Any] = {"doc_index": index}
    document = documents[index]
    if document.id is not None:
        source["id"] = document.id
    if "source" in document.metadata:
        source["source"] = document.metadata["source"]
    return source


def evidence_document(
    documents: Sequence[Document], evidence: Sequence[Evidence], config: ReplayConfig, model: str
) -> Document:
    """The replayed sentences as one Document in the engine's evidence template, with provenance."""
    spans = [{"doc_index": e.doc_index, **evidence_span(e)} for e in evidence]
    sources = sorted({e.doc_index for e in evidence})
    metadata = {
        "kind": EVIDENCE_KIND,
        "source_documents": [source_of(documents, i) for i in sources],
        "spans": spans,
        "model": model,
    }
    return Document(page_content=render_evidence_block([e.text for e in evidence], config), metadata=metadata)
