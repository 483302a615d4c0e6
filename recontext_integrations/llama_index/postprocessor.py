"""``ReContextEvidencePostprocessor``: a local model's attention picks evidence from the retrieved nodes.

The evidence goes to whatever LLM the query engine uses (a hosted API included), so the paper's
"closed APIs cannot run it" limit does not apply: only the selection needs the local model.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, Literal

from llama_index.core.bridge.pydantic import Field, field_validator, model_validator
from llama_index.core.callbacks import CBEventType, EventPayload
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.events.rerank import ReRankEndEvent, ReRankStartEvent
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import BaseNode, NodeRelationship, NodeWithScore, QueryBundle, TextNode

from recontext_engine import Evidence, ReContextEngine, ReplayConfig, clean_text, render_evidence_block

from ..common import evidence_payload, evidence_span
from .base import LocalEngine
from .events import ReContextEvidenceEvent

EVIDENCE_KEY = "recontext_evidence"
SENTENCE_KEY = "recontext_sentence"
dispatcher = get_dispatcher(__name__)


def _span(nodes: Sequence[BaseNode], e: Evidence) -> dict[str, Any]:
    return {"node_id": nodes[e.doc_index].node_id, **evidence_span(e)}


def evidence_node(nodes: Sequence[BaseNode], evidence: Sequence[Evidence], config: ReplayConfig) -> TextNode:
    """The replayed sentences as one node, delimited as data by ``config.evidence_template``.

    ``evidence[i].doc_index`` indexes ``nodes``; its metadata ``spans`` name the source node and the
    char offsets into ``node.get_content()``. The metadata is kept out of embeddings and LLM prompts.
    """
    spans = [_span(nodes, e) for e in evidence]
    source_ids = list(dict.fromkeys(span["node_id"] for span in spans))
    metadata = {EVIDENCE_KEY: True, "source_node_ids": source_ids, "spans": spans}
    return TextNode(
        text=render_evidence_block([e.text for e in evidence], config),
        metadata=metadata,
        excluded_embed_metadata_keys=list(metadata),
        excluded_llm_metadata_keys=list(metadata),
    )


def sentence_node(nodes: Sequence[BaseNode], item: Evidence) -> TextNode:
    """One evidence sentence as a node: the source node's metadata plus its provenance, and a SOURCE
    relationship to it; the provenance keys stay out of embeddings and LLM prompts."""
    source = nodes[item.doc_index]
    provenance = {SENTENCE_KEY: True, "source_node_id": source.node_id, **_span(nodes, item)}
    del provenance["node_id"]
    hidden = list(provenance)
    return TextNode(
        text=item.text,
        metadata={**source.metadata, **provenance},
        excluded_embed_metadata_keys=[*source.excluded_embed_metadata_keys, *hidden],
        excluded_llm_metadata_keys=[*source.excluded_llm_metadata_keys, *hidden],
        relationships={NodeRelationship.SOURCE: source.as_related_node_info()},
    )


class ReContextEvidencePostprocessor(LocalEngine, BaseNodePostprocessor):
    """Evidence from the retrieved nodes, chosen by the local model's attention.

    ``mode`` (the same choice as LangChain's ``ReContextCompressor``):

    - ``"append"`` (default): every node kept, plus one evidence node, last, so it sits next to
      the question in LlamaIndex's prompts; its metadata ``spans`` (``node_id``, ``char_start``,
      ``char_end``, ``score``, ``round``) slice back into the source nodes' ``get_content()``.
    - ``"extract"``: only the evidence, one node per sentence, in the engine's replay order
      (``ReplayConfig.evidence_order``), scored by attention, with ``source_node_id`` and char
      offsets in metadata and a SOURCE relationship.
    - ``"rerank"``: the nodes reordered by ``ReContextEngine.document_scores`` (each node read in
      its own prompt, so their order does not matter; attention rank-fused with BM25 and the
      input-embedding similarity, written to ``NodeWithScore.score``; nodes without text last)
      and cut to ``top_n``; LlamaIndex's ``ReRankStartEvent`` and ``ReRankEndEvent`` (and the
      legacy RERANKING callback event) are emitted. No evidence is selected.

    To rerank and then add evidence, chain two, as with any LlamaIndex reranker:
    ``node_postprocessors=[ReContextEvidencePostprocessor(mode="rerank", top_n=3),
    ReContextEvidencePostprocessor()]`` (same settings: they share the loaded model). The selected
    evidence is dispatched as a :class:`ReContextEvidenceEvent`.

    Pass a ready ``engine=``, or set ``model``/``heads``/``device`` to load one on first use (shared
    with a ``ReContextLLM`` of the same settings). Node text goes to the engine as it is (no
    regex), control characters such as form feeds turned into spaces.
    """

    replaced_settings: ClassVar[dict[str, str]] = {
        "rerank": "write mode='rerank' (with top_n=...); to rerank and then add evidence, chain a "
        "postprocessor with mode='rerank' and one with mode='append'",
        "add_evidence": "mode='rerank' selects no evidence; mode='append' or 'extract' does",
    }

    mode: Literal["append", "extract", "rerank"] = Field(
        default="append",
        description="'append': nodes + one evidence node; 'extract': one node per sentence; "
        "'rerank': nodes by relevance, cut to top_n.",
    )
    top_n: int | None = Field(default=None, ge=1, description="mode='rerank': nodes to keep (None: all).")
    replay_options: dict[str, Any] = Field(
        default_factory=dict,
        description="ReplayConfig fields for the selection, e.g. {'rounds': 1, 'top_k': 4}.",
    )

    @field_validator("replay_options")
    @classmethod
    def _check_options(cls, value: dict[str, Any]) -> dict[str, Any]:
        ReplayConfig().with_options(**value)
        return value

    @model_validator(mode="after")
    def _top_n_reranks(self) -> ReContextEvidencePostprocessor:
        if self.top_n is not None and self.mode != "rerank":
            raise ValueError(f"top_n= applies to mode='rerank' only (mode is {self.mode!r})")
        return self

    @classmethod
    def class_name(cls) -> str:
        return "ReContextEvidencePostprocessor"

    def _postprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        # earlier evidence is dropped (chained twice, the new one replaces it)
        nodes = [
            n for n in nodes if not (n.node.metadata.get(EVIDENCE_KEY) or n.node.metadata.get(SENTENCE_KEY))
        ]
        if not nodes:
            return []
        if query_bundle is None:
            raise ValueError("ReContextEvidencePostprocessor needs the query: pass query_bundle or query_str")
        engine = self.engine
        config = engine.default_config.with_options(**self.replay_options)
        question = query_bundle.query_str
        if self.mode == "rerank":
            return self._rerank(engine, nodes, query_bundle, config)
        sources = [n.node for n in nodes if n.node.get_content().strip()]
        if not sources:
            return nodes
        documents = [clean_text(node.get_content()) for node in sources]
        evidence = engine.select_evidence(documents, question, config)
        payload = [
            {**item, "node_id": sources[item["doc_index"]].node_id} for item in evidence_payload(evidence)
        ]
        dispatcher.event(
            ReContextEvidenceEvent(evidence=payload, question=question, model_name=engine.model_name)
        )
        if self.mode == "extract":
            return [NodeWithScore(node=sentence_node(sources, e), score=e.score) for e in evidence]
        if not evidence:
            return nodes
        return [*nodes, NodeWithScore(node=evidence_node(sources, evidence, config), score=None)]

    def _rerank(
        self, engine: ReContextEngine, nodes: list[NodeWithScore], query: QueryBundle, config: ReplayConfig
    ) -> list[NodeWithScore]:
        """Nodes by ``engine.document_scores``, highest first (nodes without text last, score None),
        cut to top_n."""
        top_n = self.top_n or len(nodes)
        dispatcher.event(
            ReRankStartEvent(query=query, nodes=nodes, top_n=top_n, model_name=engine.model_name)
        )
        payload: dict[str, Any] = {EventPayload.NODES: nodes, EventPayload.MODEL_NAME: engine.model_name}
        with self.callback_manager.event(CBEventType.RERANKING, payload=payload) as event:
            with_text = [n for n in nodes if n.node.get_content().strip()]
            texts = [clean_text(n.node.get_content()) for n in with_text]
            scores = engine.document_scores(texts, query.query_str, config) if with_text else []
            ranked = sorted(zip(scores, with_text, strict=True), key=lambda pair: -pair[0])
            rescored = [NodeWithScore(node=n.node, score=float(s)) for s, n in ranked]
            rescored += [
                NodeWithScore(node=n.node, score=None) for n in nodes if not n.node.get_content().strip()
            ]
            rescored = rescored[:top_n]
            event.on_end(payload={EventPayload.NODES: rescored})
        dispatcher.event(ReRankEndEvent(nodes=rescored))
        return rescored
