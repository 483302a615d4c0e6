"""The LlamaIndex adapters on real llama-index-core objects (and the embedded model where marked)."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest

pytest.importorskip("llama_index.core")

from llama_index.core import SummaryIndex  # noqa: E402
from llama_index.core.base.llms.types import ChatMessage  # noqa: E402
from llama_index.core.instrumentation import get_dispatcher  # noqa: E402
from llama_index.core.instrumentation.event_handlers import BaseEventHandler  # noqa: E402
from llama_index.core.instrumentation.events.llm import LLMChatEndEvent  # noqa: E402
from llama_index.core.prompts import chat_prompts, default_prompts  # noqa: E402
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle, TextNode  # noqa: E402

from recontext_engine import Evidence, ReplayConfig, SplitPattern  # noqa: E402
from recontext_engine.messages import split_prompt  # noqa: E402
from recontext_integrations.llama_index import ReContextEvidencePostprocessor, ReContextLLM  # noqa: E402
from recontext_integrations.llama_index.postprocessor import EVIDENCE_KEY, evidence_node  # noqa: E402

DOCS = [
    "Alice lives in Paris. She paints old bridges.",
    "Bob lives in Rome. He sells maps of the sea.",
    "Carol lives in Oslo. She builds wooden boats.",
]
CONTEXT = "\n\n".join(DOCS)
QUESTION = "Where does Bob live?"
# A context that holds the template's own markers, to check the split takes the template's ones.
TRICKY = "Notes.\n---------------------\nQuery: not this one\nAnswer: no\n\nBob lives in Rome."
FAST = {"rounds": 1, "top_k": 2}
HELLO = "Reply with one word: hello"


def _nodes() -> list[NodeWithScore]:
    return [NodeWithScore(node=TextNode(text=t, id_=f"n{i}"), score=1.0 - i / 10) for i, t in enumerate(DOCS)]


# -- the split rule on LlamaIndex's own templates (no model) -----------------------------------


@pytest.mark.parametrize(
    "template", [default_prompts.DEFAULT_TEXT_QA_PROMPT, default_prompts.DEFAULT_TREE_SUMMARIZE_PROMPT]
)
def test_split_completion_qa_templates(template):
    split = split_prompt(template.format(context_str=TRICKY, query_str=QUESTION))
    assert split is not None
    assert (split.context, split.question, split.pattern) == (TRICKY, QUESTION, "llama_index_text_qa")


@pytest.mark.parametrize(
    "template", [chat_prompts.CHAT_TEXT_QA_PROMPT, chat_prompts.CHAT_TREE_SUMMARIZE_PROMPT]
)
def test_split_chat_qa_templates(template):
    messages = template.format_messages(context_str=TRICKY, query_str=QUESTION)
    assert messages[0].role.value == "system"
    split = split_prompt(messages[-1].content)
    assert split is not None and (split.context, split.question) == (TRICKY, QUESTION)


def test_split_rich_content_template():
    context_messages = [ChatMessage(content=d) for d in DOCS]
    messages = chat_prompts.CHAT_CONTENT_QA_PROMPT.format_messages(
        context_messages=context_messages, query_str=QUESTION
    )
    split = split_prompt(messages[-1].content)
    assert split is not None and split.question == QUESTION
    assert split.context == "\n\n".join(DOCS)


@pytest.mark.parametrize(
    ("format_prompt", "pattern"),
    [
        (lambda **kw: default_prompts.DEFAULT_REFINE_PROMPT.format(**kw), "llama_index_refine"),
        (
            lambda **kw: chat_prompts.CHAT_REFINE_PROMPT.format_messages(**kw)[-1].content,
            "llama_index_chat_refine",
        ),
    ],
)
def test_split_refine_templates_keep_the_existing_answer(format_prompt, pattern):
    split = split_prompt(format_prompt(context_msg=TRICKY, query_str=QUESTION, existing_answer="Maybe Rome."))
    assert split is not None and split.pattern == pattern
    assert split.context == TRICKY
    assert split.question.startswith(QUESTION + "\n") and split.question.endswith("Maybe Rome.")


def test_split_generic_marker_and_no_match():
    split = split_prompt(f"Context:\n{CONTEXT}\n\nQuestion: {QUESTION}\nAnswer:")
    assert split is not None and (split.context, split.question, split.pattern) == (
        CONTEXT,
        QUESTION,
        "question_marker",
    )
    assert split_prompt("Say hello in French.") is None
    assert split_prompt(f"Question: {QUESTION}") is None  # no context before the marker
    assert (
        split_prompt(default_prompts.DEFAULT_TEXT_QA_PROMPT.format(context_str="", query_str=QUESTION))
        is None
    )


def test_split_patterns_are_tried_in_order():
    custom = SplitPattern.from_markers("mine", r"<docs>", r"</docs>\s*Ask:")
    text = f"<docs>{CONTEXT}</docs>\nAsk: {QUESTION}"
    assert split_prompt(text) is None
    split = split_prompt(text, [custom])
    assert split is not None and (split.context, split.question, split.pattern) == (CONTEXT, QUESTION, "mine")


# -- construction (no model) ------------------------------------------------------------------


def test_construction_loads_nothing_and_validates():
    started = time.perf_counter()
    for _ in range(10):
        llm = ReContextLLM(max_tokens=16, replay_options=FAST)
        post = ReContextEvidencePostprocessor(mode="rerank", top_n=2)
    assert time.perf_counter() - started < 1.0
    assert llm._engine is None and post._engine is None
    assert (llm.class_name(), post.class_name()) == ("ReContextLLM", "ReContextEvidencePostprocessor")
    json.dumps(llm.to_dict()), json.dumps(post.to_dict())
    with pytest.raises(ValueError, match="unknown ReplayConfig option"):
        ReContextLLM(replay_options={"bogus": 1})
    with pytest.raises(ValueError, match="as ReContextLLM fields"):
        ReContextLLM(replay_options={"max_new_tokens": 8})
    with pytest.raises(ValueError, match="rounds"):
        ReContextEvidencePostprocessor(replay_options={"rounds": 99})


def test_postprocessor_needs_a_query_but_not_for_no_nodes():
    post = ReContextEvidencePostprocessor()
    assert post.postprocess_nodes([], query_str=QUESTION) == []
    with pytest.raises(ValueError, match="needs the query"):
        post.postprocess_nodes(_nodes())
    # An earlier evidence node is dropped (chained twice, the new one replaces it), so this is empty.
    stale = evidence_node(
        [n.node for n in _nodes()], [Evidence("Bob lives in Rome.", 1, 0, 18, 0.5, 1)], ReplayConfig()
    )
    assert post.postprocess_nodes([NodeWithScore(node=stale)], query_str=QUESTION) == []
    assert post._engine is None


def test_evidence_node_provenance_and_metadata_exclusion():
    nodes = [n.node for n in _nodes()]
    evidence = [
        Evidence("Bob lives in Rome.", 1, 0, 18, 0.5, 1),
        Evidence("She builds wooden boats.", 2, 21, 45, 0.2, 2),
    ]
    node = evidence_node(nodes, evidence, ReplayConfig())
    spans = node.metadata["spans"]
    assert [s["node_id"] for s in spans] == ["n1", "n2"] and node.metadata["source_node_ids"] == ["n1", "n2"]
    for span, item in zip(spans, evidence, strict=True):
        assert nodes[item.doc_index].get_content()[span["char_start"] : span["char_end"]] == item.text
        assert (span["score"], span["round"]) == (item.score, item.round)
    assert "<evidence>\nBob lives in Rome.\nShe builds wooden boats.\n</evidence>" in node.text
    assert node.get_content(MetadataMode.LLM) == node.text == node.get_content(MetadataMode.EMBED)


# -- the LLM on the embedded model ----------------------------------------------------------------


@pytest.fixture(scope="module")
def llm(engine):
    return ReContextLLM(engine=engine, max_tokens=8, replay_options=FAST)


@pytest.fixture(scope="module")
def qa_prompt():
    return default_prompts.DEFAULT_TEXT_QA_PROMPT.format(context_str=CONTEXT, query_str=QUESTION)


@pytest.fixture(scope="module")
def qa_completion(llm, qa_prompt):
    return llm.complete(qa_prompt)


@pytest.mark.model
def test_metadata_is_the_models(llm, engine):
    meta = llm.metadata
    assert meta.context_window == engine.context_window == 8192
    assert meta.num_output == 8 and meta.is_chat_model is True
    assert meta.model_name == engine.model_name == "SmolLM2-135M-Instruct"


@pytest.mark.model
def test_lazy_load_happens_once_under_threads():
    llm = ReContextLLM()
    assert llm._engine is None
    seen = []
    threads = [threading.Thread(target=lambda: seen.append(llm.engine)) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(seen) == 3 and all(e is seen[0] for e in seen)
    assert llm.metadata.context_window == seen[0].context_window


@pytest.mark.model
def test_complete_replays_evidence_from_the_context(qa_completion):
    extras = qa_completion.additional_kwargs
    assert extras["split_pattern"] == "llama_index_text_qa"
    assert qa_completion.text.strip() and qa_completion.raw["answer"] == qa_completion.text
    assert 1 <= len(extras["evidence"]) <= 2
    for item in extras["evidence"]:
        assert CONTEXT[item["char_start"] : item["char_end"]] == item["text"]
    assert 0 < extras["usage"]["output_tokens"] <= 8 and extras["usage"]["evidence_tokens"] > 0
    assert qa_completion.raw["usage"]["input_tokens"] > 0  # what LlamaIndex's token counter reads


@pytest.mark.model
def test_stream_complete_deltas_join_to_the_complete_text(llm, qa_prompt, qa_completion):
    chunks = list(llm.stream_complete(qa_prompt))
    assert "".join(c.delta for c in chunks) == chunks[-1].text == qa_completion.text
    assert all(b.text.startswith(a.text) for a, b in zip(chunks, chunks[1:], strict=False))
    assert chunks[-1].additional_kwargs["evidence"] == qa_completion.additional_kwargs["evidence"]


@pytest.mark.model
def test_per_call_overrides(llm, qa_prompt):
    response = llm.complete(qa_prompt, rounds=0, max_new_tokens=2, unrelated_kwarg=1)
    assert response.additional_kwargs["evidence"] == []
    assert response.additional_kwargs["usage"]["output_tokens"] <= 2
    with pytest.raises(ValueError, match="top_k"):
        llm.complete(qa_prompt, top_k=0)


@pytest.mark.model
def test_plain_chat_and_stream_chat(llm):
    messages = [ChatMessage(role="system", content="You are terse."), ChatMessage(role="user", content=HELLO)]
    response = llm.chat(messages, max_tokens=4)
    assert response.message.role.value == "assistant" and response.message.content
    assert (
        response.additional_kwargs["split_pattern"] is None and response.additional_kwargs["evidence"] == []
    )
    chunks = list(llm.stream_chat(messages, max_tokens=4))
    assert "".join(c.delta for c in chunks) == chunks[-1].message.content == response.message.content


@pytest.mark.model
async def test_acomplete_does_not_block_the_loop(llm):
    ticks = 0

    async def ticker():
        nonlocal ticks
        while True:
            await asyncio.sleep(0.005)
            ticks += 1

    task = asyncio.create_task(ticker())
    started = time.perf_counter()
    response = await llm.acomplete(HELLO, max_tokens=4)
    elapsed = time.perf_counter() - started
    task.cancel()
    assert response.text == llm.complete(HELLO, max_tokens=4).text
    assert ticks >= min(5, int(elapsed / 0.05))  # the loop kept running while the model worked


@pytest.mark.model
async def test_async_streams_and_achat(llm):
    stream = await llm.astream_complete(HELLO, max_tokens=4)
    chunks = [c async for c in stream]
    assert "".join(c.delta for c in chunks) == chunks[-1].text and chunks[-1].additional_kwargs["usage"]
    messages = [ChatMessage(role="user", content=HELLO)]
    reply = await llm.achat(messages, max_tokens=4)
    assert reply.message.content == chunks[-1].text
    chat_stream = await llm.astream_chat(messages, max_tokens=4)
    assert [c.message.content async for c in chat_stream][-1] == reply.message.content


@pytest.mark.model
async def test_async_stream_closed_early_frees_the_engine(llm):
    stream = await llm.astream_complete(HELLO, max_tokens=16)
    async for _ in stream:
        break
    await stream.aclose()
    again = await asyncio.wait_for(llm.acomplete(HELLO, max_tokens=2), timeout=120)
    assert again.additional_kwargs["usage"]["output_tokens"] <= 2


# -- the postprocessor on the embedded model --------------------------------------------------------


@pytest.mark.model
def test_postprocessor_keeps_nodes_and_adds_provenance(engine):
    post = ReContextEvidencePostprocessor(engine=engine, replay_options=FAST)
    nodes = _nodes()
    out = post.postprocess_nodes(nodes, QueryBundle(QUESTION))
    assert [n.node.node_id for n in out[:-1]] == ["n0", "n1", "n2"]
    assert [n.score for n in out[:-1]] == [n.score for n in nodes]
    evidence = out[-1].node
    assert evidence.metadata[EVIDENCE_KEY] is True and out[-1].score is None
    by_id = {n.node.node_id: n.node for n in nodes}
    assert 1 <= len(evidence.metadata["spans"]) <= 2
    for span in evidence.metadata["spans"]:
        quoted = by_id[span["node_id"]].get_content()[span["char_start"] : span["char_end"]]
        assert quoted and quoted in evidence.text


@pytest.mark.model
def test_rerank_follows_attention_mass(engine):
    post = ReContextEvidencePostprocessor(engine=engine, mode="rerank", top_n=2)
    out = post.postprocess_nodes(_nodes(), query_str=QUESTION)
    mass = engine.document_scores(DOCS, QUESTION)
    expected = sorted(range(3), key=lambda i: -mass[i])[:2]
    assert [n.node.node_id for n in out] == [f"n{i}" for i in expected]
    assert [n.score for n in out] == pytest.approx([mass[i] for i in expected], abs=1e-5)


@pytest.mark.model
def test_rerank_then_append_by_chaining_two(engine):
    """Rerank and evidence in one query: two postprocessors, as LangChain's compressor pipeline."""
    chain = [
        ReContextEvidencePostprocessor(engine=engine, mode="rerank", top_n=2),
        ReContextEvidencePostprocessor(engine=engine, replay_options=FAST),
    ]
    out = _nodes()
    for post in chain:
        out = post.postprocess_nodes(out, query_str=QUESTION)
    mass = engine.document_scores(DOCS, QUESTION)
    expected = sorted(range(3), key=lambda i: -mass[i])[:2]
    assert [n.node.node_id for n in out[:-1]] == [f"n{i}" for i in expected]
    assert out[-1].node.metadata[EVIDENCE_KEY] is True and "Rome" in out[-1].node.get_content()


class _ChatEnds(BaseEventHandler):
    responses: list = []

    def handle(self, event, **kwargs):
        if isinstance(event, LLMChatEndEvent):
            self.responses.append(event.response)


@pytest.mark.model
def test_query_engine_end_to_end(engine):
    nodes = [n.node for n in _nodes()]
    llm = ReContextLLM(engine=engine, max_tokens=8, replay_options=FAST)
    post = ReContextEvidencePostprocessor(engine=engine, replay_options=FAST)
    query_engine = SummaryIndex(nodes).as_query_engine(llm=llm, node_postprocessors=[post])
    handler = _ChatEnds(responses=[])
    dispatcher = get_dispatcher()
    dispatcher.add_event_handler(handler)
    try:
        response = query_engine.query(QUESTION)
    finally:
        dispatcher.event_handlers.remove(handler)
    assert response.response and response.response.strip()
    assert [n.node.node_id for n in response.source_nodes[:3]] == ["n0", "n1", "n2"]
    assert response.source_nodes[-1].node.metadata[EVIDENCE_KEY] is True
    # The synthesizer sent LlamaIndex's chat text-QA prompt; the LLM split it and replayed.
    assert len(handler.responses) == 1
    assert handler.responses[0].additional_kwargs["split_pattern"] == "llama_index_text_qa"
    assert handler.responses[0].message.content.strip() == response.response.strip()
