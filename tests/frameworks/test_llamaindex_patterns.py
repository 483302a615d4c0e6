"""Replay in LlamaIndex's query and chat engines, on the real classes and the embedded model.

Every LLM call is recorded through LlamaIndex's instrumentation; each test checks that the call
whose context holds the answering sentence replayed it (evidence holds that sentence).
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

pytest.importorskip("llama_index.core")

from llama_index.core import SummaryIndex  # noqa: E402
from llama_index.core.chat_engine import CondensePlusContextChatEngine, ContextChatEngine  # noqa: E402
from llama_index.core.instrumentation.events.llm import LLMChatInProgressEvent  # noqa: E402
from llama_index.core.instrumentation.events.rerank import ReRankEndEvent, ReRankStartEvent  # noqa: E402
from llama_index.core.query_engine import CitationQueryEngine  # noqa: E402
from llama_index.core.schema import NodeRelationship, NodeWithScore, QueryBundle, TextNode  # noqa: E402

from recontext_integrations.llama_index import (  # noqa: E402
    ReContextEvidenceEvent,
    ReContextEvidencePostprocessor,
    ReContextLLM,
)
from recontext_integrations.llama_index.postprocessor import SENTENCE_KEY  # noqa: E402
from tests.frameworks.corpus import CHUNKS, FACT, FAST, MAX_TOKENS, QUESTION, holds_fact  # noqa: E402
from tests.frameworks.llamaindex_events import Recorder  # noqa: E402


@pytest.fixture(scope="module")
def llm(engine: Any) -> ReContextLLM:
    return ReContextLLM(engine=engine, max_tokens=MAX_TOKENS, replay_options=FAST)


def _nodes() -> list[TextNode]:
    return [TextNode(text=c, id_=f"chunk-{i}", metadata={"page": i + 1}) for i, c in enumerate(CHUNKS)]


def _answering_call(recorder: Recorder, rule: str | None = None) -> dict:
    """The recorded LLM call whose evidence holds the fact; all calls replayed."""
    extras = [r.additional_kwargs for r in recorder.responses()]
    assert extras and all(x["replayed"] for x in extras), extras
    hits = [x for x in extras if holds_fact(x["evidence"])]
    assert hits, [x["evidence"] for x in extras]
    if rule is not None:
        assert hits[0]["split_rule"] == rule
    return hits[0]


@pytest.mark.model
@pytest.mark.parametrize(
    ("mode", "rule"),
    [
        (None, "llama_index_text_qa"),  # the default: compact
        ("compact", "llama_index_text_qa"),
        ("refine", None),  # text-QA on the first chunk, then the refine template per chunk
        ("tree_summarize", "llama_index_text_qa"),
    ],
)
def test_query_engine_response_modes(
    llm: ReContextLLM, recorder: Recorder, mode: str | None, rule: str
) -> None:
    kwargs = {} if mode is None else {"response_mode": mode}
    nodes = _nodes()[:3] if mode == "refine" else _nodes()
    response = SummaryIndex(nodes).as_query_engine(llm=llm, **kwargs).query(QUESTION)
    assert str(response).strip()
    _answering_call(recorder, rule)
    if mode == "refine":
        rules = [r.additional_kwargs["split_rule"] for r in recorder.responses()]
        assert rules[0] == "llama_index_text_qa" and "llama_index_chat_refine" in rules[1:]


@pytest.mark.model
def test_context_chat_engine(llm: ReContextLLM, recorder: Recorder) -> None:
    chat = ContextChatEngine.from_defaults(retriever=SummaryIndex(_nodes()).as_retriever(), llm=llm)
    chat.chat(QUESTION)
    _answering_call(recorder, "system_context")


@pytest.mark.model
def test_condense_plus_context_chat_engine(llm: ReContextLLM, recorder: Recorder) -> None:
    chat = CondensePlusContextChatEngine.from_defaults(
        retriever=SummaryIndex(_nodes()).as_retriever(), llm=llm
    )
    chat.chat(QUESTION)
    _answering_call(recorder, "system_context")


@pytest.mark.model
def test_citation_query_engine(llm: ReContextLLM, recorder: Recorder) -> None:
    index = SummaryIndex(_nodes())
    engine = CitationQueryEngine.from_args(index, llm=llm, citation_chunk_size=1024)
    response = engine.query(QUESTION)
    assert response.source_nodes[0].node.get_content().startswith("Source 1:")
    _answering_call(recorder, "delimited")


@pytest.mark.model
def test_evidence_event_before_the_first_token_and_fallback(
    llm: ReContextLLM, recorder: Recorder, caplog: pytest.LogCaptureFixture
) -> None:
    from llama_index.core.base.llms.types import ChatMessage

    messages = [ChatMessage(role="user", content=f"Context: {CHUNKS[1]}\x0c\nQuestion: {QUESTION}")]
    chunks = list(llm.stream_chat(messages))
    kinds = [type(e) for e in recorder.events]
    assert kinds.index(ReContextEvidenceEvent) < kinds.index(LLMChatInProgressEvent)
    event = next(e for e in recorder.events if isinstance(e, ReContextEvidenceEvent))
    assert holds_fact(event.evidence) and event.evidence == chunks[-1].additional_kwargs["evidence"]
    plain = ReContextLLM(engine=llm.engine, max_tokens=2)
    with caplog.at_level(logging.WARNING, logger="recontext_integrations"):
        first = plain.chat([ChatMessage(role="user", content="Hello")])
        plain.chat([ChatMessage(role="user", content="Hi")])
    assert first.additional_kwargs["replayed"] is False and first.additional_kwargs["evidence"] == []
    assert len([r for r in caplog.records if "plain chat" in r.getMessage()]) == 1


# -- the postprocessor --------------------------------------------------------------------------------


@pytest.mark.model
def test_postprocessor_extract_mode(engine: Any, recorder: Recorder) -> None:
    post = ReContextEvidencePostprocessor(engine=engine, mode="extract", replay_options=FAST)
    nodes = [NodeWithScore(node=n, score=0.5) for n in _nodes()]
    out = post.postprocess_nodes(nodes, QueryBundle(QUESTION))
    assert any(n.node.get_content() == FACT for n in out)
    by_id = {n.node.node_id: n.node for n in nodes}
    for item in out:
        meta = item.node.metadata
        source = by_id[meta["source_node_id"]]
        assert meta[SENTENCE_KEY] is True and meta["page"] == source.metadata["page"]
        assert source.get_content()[meta["char_start"] : meta["char_end"]] == item.node.get_content()
        assert item.node.relationships[NodeRelationship.SOURCE].node_id == source.node_id
        assert "char_start" not in item.node.get_content(metadata_mode="llm")
    evidence_events = [e for e in recorder.events if isinstance(e, ReContextEvidenceEvent)]
    assert len(evidence_events) == 1 and holds_fact(evidence_events[0].evidence)


@pytest.mark.model
def test_postprocessor_rerank_emits_rerank_events(engine: Any, recorder: Recorder) -> None:
    post = ReContextEvidencePostprocessor(engine=engine, mode="rerank", top_n=2)
    out = post.postprocess_nodes([NodeWithScore(node=n) for n in _nodes()], query_str=QUESTION)
    start = next(e for e in recorder.events if isinstance(e, ReRankStartEvent))
    end = next(e for e in recorder.events if isinstance(e, ReRankEndEvent))
    assert start.top_n == 2 and len(start.nodes) == 5 and start.model_name == engine.model_name
    assert [n.node.node_id for n in end.nodes] == [n.node.node_id for n in out] and len(out) == 2


@pytest.mark.model
def test_llm_and_postprocessor_share_one_lazy_engine() -> None:
    llm, post = ReContextLLM(), ReContextEvidencePostprocessor()
    assert llm._engine is None and post._engine is None
    assert llm.engine is post.engine
