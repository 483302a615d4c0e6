"""``ReContextCompressor``: a LangChain document compressor driven by the local model's attention."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from langchain_core.callbacks import Callbacks
from langchain_core.documents import BaseDocumentCompressor, Document
from pydantic import Field, model_validator

from recontext_engine import clean_text

from ..common import evidence_span
from .selection import EngineSettings, evidence_document, is_evidence, select_evidence, source_of, with_text

SENTENCE_KIND = "recontext_evidence_sentence"


class ReContextCompressor(EngineSettings, BaseDocumentCompressor):
    """Compress retrieved documents with ReContext, for ``ContextualCompressionRetriever`` and
    ``DocumentCompressorPipeline`` (or ``compress_documents`` directly).

    ``mode``:

    - ``"append"``: the documents unchanged plus one evidence Document last (as
      :class:`ReContextReplayer` adds it: the sentences in the engine's evidence template,
      ``kind="recontext_evidence"``, ``spans`` and ``source_documents`` in metadata).
    - ``"extract"``: only the evidence, one Document per sentence in the order the engine replays
      them (``ReplayConfig.evidence_order``: document order by default); metadata is
      the source document's plus ``kind="recontext_evidence_sentence"``, ``source_doc_index``,
      ``source_id``, ``char_start``/``char_end`` (into the source ``page_content``), ``score``,
      ``round`` and ``heading`` (a section heading replayed with a picked sentence).
    - ``"rerank"``: the documents ordered by ``ReContextEngine.document_scores`` (each read in its
      own prompt, so the order they come in does not matter: the retrieval heads' attention from
      the question minus the null question's, rank-fused with BM25 and the
      input-embedding similarity by the selector's fusion weights), written
      to ``metadata["relevance_score"]``, cut to ``top_n``; documents without text are dropped.
      No evidence is selected.

    The same ``mode`` and ``top_n`` as LlamaIndex's ``ReContextEvidencePostprocessor``. To rerank
    and then add evidence, chain two in a ``DocumentCompressorPipeline``:
    ``[ReContextCompressor(mode="rerank", top_n=3), ReContextCompressor()]`` (same settings: they
    share the loaded model).

    Page contents go to the engine as they are (no regex), form feeds and other control
    characters turned into spaces. Evidence documents from an earlier ReContext step are dropped
    first, so the compressor can run twice in a pipeline.
    """

    mode: Literal["append", "extract", "rerank"] = "append"
    top_n: int | None = Field(default=None, ge=1)
    """``mode="rerank"``: keep this many documents (None: all); refused with the other modes."""

    @model_validator(mode="after")
    def _top_n_reranks(self) -> ReContextCompressor:
        if self.top_n is not None and self.mode != "rerank":
            raise ValueError(f"top_n= applies to mode='rerank' only (mode is {self.mode!r})")
        return self

    def compress_documents(
        self, documents: Sequence[Document], query: str, callbacks: Callbacks | None = None
    ) -> Sequence[Document]:
        documents = [d for d in documents if not is_evidence(d) and d.metadata.get("kind") != SENTENCE_KIND]
        if not with_text(documents):
            return []
        if self.mode == "rerank":
            return self._rerank(documents, query)
        engine, config = self.get_engine(), self.selection_config()
        evidence = select_evidence(engine, documents, query, config)
        if self.mode == "append":
            return [*documents, evidence_document(documents, evidence, config, engine.model_name)]
        extracted = []
        for item in evidence:
            source = source_of(documents, item.doc_index)
            metadata = {
                **documents[item.doc_index].metadata,
                "kind": SENTENCE_KIND,
                "source_doc_index": item.doc_index,
                "source_id": source.get("id"),
                **evidence_span(item),
            }
            extracted.append(Document(page_content=item.text, metadata=metadata))
        return extracted

    def _rerank(self, documents: list[Document], query: str) -> list[Document]:
        kept = [documents[i] for i in with_text(documents)]
        scores = self.get_engine().document_scores(
            [clean_text(d.page_content) for d in kept], query, self.selection_config()
        )
        ranked = sorted(zip(scores, range(len(kept))), key=lambda pair: -pair[0])
        out = [
            Document(
                page_content=kept[i].page_content,
                metadata={**kept[i].metadata, "relevance_score": s},
                id=kept[i].id,
            )
            for s, i in ranked
        ]
        return out[: self.top_n] if self.top_n else out
