"""``ReContextEvidencePostprocessor``: a local model's attention picks evidence from the retrieved nodes.

The evidence goes to whatever LLM the query engine uses (a hosted API included), so the paper's
"closed APIs cannot run it" limit does not apply: only the selection needs the local model.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from llama_index.core.bridge.pydantic import Field, PrivateAttr, field_validator
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import BaseNode, NodeWithScore, QueryBundle, TextNode

from recontext_engine import Evidence, ReContextEngine, ReplayConfig

from .llm import clean_text, load_engine

EVIDENCE_KEY = "recontext_evidence"


def evidence_node(nodes: Sequence[BaseNode], evidence: Sequence[Evidence], config: ReplayConfig) -> TextNode:
    """The replayed sentences as one node, delimited as data by ``config.evidence_template``.

    ``evidence[i].doc_index`` indexes ``nodes``; its metadata ``spans`` name the source node and the
    char offsets into ``node.get_content()``. The metadata is kept out of embeddings and LLM prompts.
    """
    head, _, tail = config.evidence_template.partition("{evidence}")
    text = head + config.evidence_separator.join(e.text for e in evidence) + tail
    spans = [
        {
            "node_id": nodes[e.doc_index].node_id,
            "char_start": e.char_start,
            "char_end": e.char_end,
            "score": e.score,
            "round": e.round,
        }
        for e in evidence
    ]
    source_ids = list(dict.fromkeys(span["node_id"] for span in spans))
    metadata = {EVIDENCE_KEY: True, "source_node_ids": source_ids, "spans": spans}
    return TextNode(
        text=text,
        metadata=metadata,
        excluded_embed_metadata_keys=list(metadata),
        excluded_llm_metadata_keys=list(metadata),
    )


class ReContextEvidencePostprocessor(BaseNodePostprocessor):
    """Keeps every retrieved node and appends one evidence node, chosen by the local model's attention.

    The evidence node comes last, so it sits next to the question in LlamaIndex's prompts; its
    metadata ``spans`` (``node_id``, ``char_start``, ``char_end``, ``score``, ``round``) slice back
    into the source nodes' ``get_content()``. With ``rerank=True`` the nodes are first reordered by
    attention mass (written to ``NodeWithScore.score``) and cut to ``top_n``.

    Pass a ready ``engine=``, or set ``model``/``heads``/``device`` to load one on first use.
    """

    model: str | None = Field(default=None, description="Hub id, local folder or .gguf; None = embedded.")
    heads: str | list[tuple[int, int]] = Field(
        default="auto", description="Head set: 'auto', a JSON path or pairs."
    )
    device: str = Field(default="cpu", description="Torch device for a lazily loaded model.")
    add_evidence: bool = Field(default=True, description="Append the evidence node.")
    rerank: bool = Field(default=False, description="Reorder nodes by attention mass from the question.")
    top_n: int | None = Field(default=None, ge=1, description="With rerank: keep this many nodes.")
    replay_options: dict[str, Any] = Field(
        default_factory=dict,
        description="ReplayConfig fields for the selection, e.g. {'rounds': 1, 'top_k': 4}.",
    )

    _engine: ReContextEngine | None = PrivateAttr(default=None)
    _lock: Any = PrivateAttr(default_factory=threading.Lock)

    def __init__(self, engine: ReContextEngine | None = None, **data: Any) -> None:
        super().__init__(**data)
        self._engine = engine

    @field_validator("replay_options")
    @classmethod
    def _check_options(cls, value: dict[str, Any]) -> dict[str, Any]:
        ReplayConfig().with_options(**value)
        return value

    @classmethod
    def class_name(cls) -> str:
        return "ReContextEvidencePostprocessor"

    @property
    def engine(self) -> ReContextEngine:
        """The engine (loaded now if it is not yet)."""
        return load_engine(self)

    def _postprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        nodes = [n for n in nodes if not n.node.metadata.get(EVIDENCE_KEY)]  # idempotent when chained twice
        if not nodes:
            return []
        if query_bundle is None:
            raise ValueError("ReContextEvidencePostprocessor needs the query: pass query_bundle or query_str")
        engine = self.engine
        config = engine.default_config.with_options(**self.replay_options)
        question = query_bundle.query_str
        if self.rerank:
            nodes = self._rerank(engine, nodes, question, config)
        if not self.add_evidence:
            return nodes
        sources = [n.node for n in nodes if n.node.get_content().strip()]
        if not sources:
            return nodes
        documents = [clean_text(node.get_content()) for node in sources]
        evidence = engine.select_evidence(documents, question, config)
        if not evidence:
            return nodes
        return [*nodes, NodeWithScore(node=evidence_node(sources, evidence, config), score=None)]

    def _rerank(
        self, engine: ReContextEngine, nodes: list[NodeWithScore], question: str, config: ReplayConfig
    ) -> list[NodeWithScore]:
        """Nodes by attention mass, highest first (nodes without text last, score None), cut to top_n."""
        with_text = [n for n in nodes if n.node.get_content().strip()]
        scores = (
            engine.document_scores([clean_text(n.node.get_content()) for n in with_text], question, config)
            if with_text
            else []
        )
        ranked = sorted(zip(scores, with_text, strict=True), key=lambda pair: -pair[0])
        rescored = [NodeWithScore(node=n.node, score=float(s)) for s, n in ranked]
        rescored += [
            NodeWithScore(node=n.node, score=None) for n in nodes if not n.node.get_content().strip()
        ]
        return rescored[: self.top_n] if self.top_n else rescored
