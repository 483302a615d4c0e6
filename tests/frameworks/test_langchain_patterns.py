"""Replay in the LangChain chains people write, on the real classes and the embedded model.

Each pattern answers the same question over a ~3,000-character document; each test checks that the
evidence holds the sentence that answers, not only that some evidence exists.
"""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langchain_core")

from langchain_core.callbacks import BaseCallbackHandler  # noqa: E402
from langchain_core.documents import Document  # noqa: E402
from langchain_core.messages import HumanMessage  # noqa: E402
from langchain_core.prompts import ChatPromptTemplate  # noqa: E402
from langchain_core.vectorstores import InMemoryVectorStore  # noqa: E402

from recontext_integrations.common import EVIDENCE_EVENT  # noqa: E402
from recontext_integrations.langchain import ChatReContext, ReContextCompressor  # noqa: E402
from recontext_integrations.langchain.compressor import SENTENCE_KIND  # noqa: E402
from recontext_integrations.langchain.selection import is_evidence  # noqa: E402
from tests.frameworks.corpus import CHUNKS, DOCUMENT, FACT, FAST, MAX_TOKENS, QUESTION, holds_fact  # noqa: E402

COOKBOOK = Path(__file__).resolve().parents[2] / "cookbook"
# The LangChain hub prompt rlm/rag-prompt, verbatim (the hub is not reachable offline).
RAG_PROMPT = ChatPromptTemplate.from_messages(
    [
        (
            "human",
            "You are an assistant for question-answering tasks. Use the following pieces of retrieved "
            "context to answer the question. If you don't know the answer, just say that you don't know. "
            "Use three sentences maximum and keep the answer concise.\nQuestion: {question} \n"
            "Context: {context} \nAnswer:",
        )
    ]
)
# The RAG tutorial's prompt (LangChain 0.3 docs), as create_stuff_documents_chain is used with it.
TUTORIAL_SYSTEM = (
    "You are an assistant for question-answering tasks. Use the following pieces of retrieved context to "
    "answer the question. If you don't know the answer, say that you don't know. Use three sentences "
    "maximum and keep the answer concise.\n\n{context}"
)
TUTORIAL_PROMPT = ChatPromptTemplate.from_messages([("system", TUTORIAL_SYSTEM), ("human", "{input}")])


@pytest.fixture(scope="module")
def llm(engine: Any) -> ChatReContext:
    return ChatReContext(engine=engine, max_tokens=MAX_TOKENS, **FAST)


@pytest.fixture(scope="module")
def store() -> InMemoryVectorStore:
    """The five chunks in an InMemoryVectorStore with the offline MiniLM embedder (cookbook's)."""
    spec = importlib.util.spec_from_file_location("rag_recipe", COOKBOOK / "langchain_rag_chain.py")
    recipe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(recipe)
    documents = [
        Document(page_content=c, id=f"chunk-{i}", metadata={"source": "log.pdf"})
        for i, c in enumerate(CHUNKS)
    ]
    return InMemoryVectorStore.from_documents(documents, recipe.MiniLMEmbeddings())


def _replayed(message: Any, rule: str) -> list[dict]:
    meta = message.response_metadata
    assert meta["replayed"] is True and meta["split_rule"] == rule
    assert holds_fact(meta["evidence"]), meta["evidence"]
    return meta["evidence"]


@pytest.mark.model
def test_hub_rag_prompt_question_before_context(llm: ChatReContext) -> None:
    message = (RAG_PROMPT | llm).invoke({"question": QUESTION, "context": DOCUMENT})
    for item in _replayed(message, "question_first"):
        assert DOCUMENT[item["char_start"] : item["char_end"]] == item["text"]


@pytest.mark.model
def test_system_message_context_rag_tutorial(llm: ChatReContext) -> None:
    message = (TUTORIAL_PROMPT | llm).invoke({"context": DOCUMENT, "input": QUESTION})
    assert all(item["message_index"] == 0 for item in _replayed(message, "system_context"))


@pytest.mark.model
def test_pdf_form_feeds(llm: ChatReContext) -> None:
    pdf = DOCUMENT.replace(". ", ".\x0c", 5)  # page breaks as PDF loaders emit them
    prompt = ChatPromptTemplate.from_messages([("human", "Context: {context}\n\nQuestion: {question}")])
    message = (prompt | llm).invoke({"context": pdf, "question": QUESTION})
    for item in _replayed(message, "question_marker"):
        assert pdf[item["char_start"] : item["char_end"]] == item["text"]


@pytest.mark.model
def test_create_stuff_documents_and_retrieval_chain(llm: ChatReContext, store: InMemoryVectorStore) -> None:
    pytest.importorskip("langchain_classic")
    from langchain_classic.chains import create_retrieval_chain
    from langchain_classic.chains.combine_documents import create_stuff_documents_chain

    recorder = MessageRecorder()
    stuff = create_stuff_documents_chain(llm, TUTORIAL_PROMPT)
    docs = [Document(page_content=c) for c in CHUNKS]
    answer = stuff.invoke({"context": docs, "input": QUESTION}, config={"callbacks": [recorder]})
    assert isinstance(answer, str)
    _replayed(recorder.messages[-1], "system_context")
    chain = create_retrieval_chain(store.as_retriever(search_kwargs={"k": 3}), stuff)
    out = chain.invoke({"input": QUESTION}, config={"callbacks": [recorder]})
    assert any(FACT in d.page_content for d in out["context"])
    _replayed(recorder.messages[-1], "system_context")


@pytest.mark.model
def test_v1_agent_with_dynamic_prompt_middleware(llm: ChatReContext) -> None:
    pytest.importorskip("langchain.agents")
    from langchain.agents import create_agent
    from langchain.agents.middleware import ModelRequest, dynamic_prompt

    @dynamic_prompt
    def prompt_with_context(request: ModelRequest) -> str:
        # The docs' RAG agent (a tool-less agent: ChatReContext does not call tools).
        return f"You are a helpful assistant. Use the following context in your response:\n\n{DOCUMENT}"

    agent = create_agent(llm, tools=[], middleware=[prompt_with_context])
    state = agent.invoke({"messages": [HumanMessage(QUESTION)]})
    _replayed(state["messages"][-1], "system_context")


class MessageRecorder(BaseCallbackHandler):
    """Records the chat model's output messages and the custom events, in order."""

    def __init__(self) -> None:
        self.messages: list[Any] = []
        self.order: list[str] = []
        self.events: list[dict] = []

    def on_llm_new_token(self, token: str, **kwargs: Any) -> None:
        self.order.append("token")

    def on_llm_end(self, response: Any, **kwargs: Any) -> None:
        self.messages.append(response.generations[0][0].message)

    def on_custom_event(self, name: str, data: Any, **kwargs: Any) -> None:
        self.order.append(name)
        self.events.append(data)


@pytest.mark.model
def test_plain_chat_fallback_is_announced_once(engine: Any, caplog: pytest.LogCaptureFixture) -> None:
    model = ChatReContext(engine=engine, max_tokens=2)
    with caplog.at_level(logging.WARNING, logger="recontext_integrations"):
        first, second = model.invoke("Hello"), model.invoke("Hi there")
    assert first.response_metadata["replayed"] is False and second.response_metadata["replayed"] is False
    assert first.response_metadata["split_rule"] == "none" and first.response_metadata["evidence"] == []
    warnings = [r for r in caplog.records if "plain chat" in r.getMessage()]
    assert len(warnings) == 1 and "ChatReContext" in warnings[0].getMessage()


@pytest.mark.model
def test_evidence_event_comes_before_the_first_token(llm: ChatReContext) -> None:
    prompt = ChatPromptTemplate.from_messages([("human", "Context: {context}\n\nQuestion: {question}")])
    recorder = MessageRecorder()
    inputs = {"context": DOCUMENT, "question": QUESTION}
    chunks = list((prompt | llm).stream(inputs, config={"callbacks": [recorder]}))
    assert recorder.order[0] == EVIDENCE_EVENT and recorder.order.count(EVIDENCE_EVENT) == 1
    assert "token" in recorder.order
    assert holds_fact(recorder.events[0]["evidence"])
    assert recorder.events[0]["evidence"] == chunks[-1].response_metadata["evidence"]
    # invoke hands the chat model its run: the event belongs to it
    invoked = MessageRecorder()
    message = llm.invoke(prompt.invoke(inputs), config={"callbacks": [invoked]})
    assert invoked.events and invoked.events[0]["evidence"] == message.response_metadata["evidence"]


@pytest.mark.model
async def test_evidence_event_in_astream_events(llm: ChatReContext) -> None:
    chain = RAG_PROMPT | llm
    kinds, evidence = [], None
    async for event in chain.astream_events({"question": QUESTION, "context": DOCUMENT}, version="v2"):
        if event["event"] == "on_custom_event" and event["name"] == EVIDENCE_EVENT:
            evidence = event["data"]["evidence"]
        kinds.append(event["event"])
    assert evidence is not None and holds_fact(evidence)
    assert kinds.index("on_custom_event") < kinds.index("on_chat_model_stream")


# -- ReContextCompressor ---------------------------------------------------------------------------


@pytest.mark.model
def test_compressor_extract_in_contextual_compression_retriever(
    engine: Any, store: InMemoryVectorStore
) -> None:
    pytest.importorskip("langchain_classic")
    from langchain_classic.retrievers import ContextualCompressionRetriever

    retriever = store.as_retriever(search_kwargs={"k": 3})
    compressor = ReContextCompressor(engine=engine, mode="extract", **FAST)
    compressed = ContextualCompressionRetriever(base_compressor=compressor, base_retriever=retriever)
    sentences = compressed.invoke(QUESTION)
    retrieved = {d.id: d for d in retriever.invoke(QUESTION)}
    assert any(d.page_content == FACT for d in sentences)
    for doc in sentences:
        meta = doc.metadata
        assert meta["kind"] == SENTENCE_KIND and meta["source"] == "log.pdf"
        assert (
            retrieved[meta["source_id"]].page_content[meta["char_start"] : meta["char_end"]]
            == doc.page_content
        )


@pytest.mark.model
def test_compressor_rerank_then_append_in_a_pipeline(engine: Any, store: InMemoryVectorStore) -> None:
    pytest.importorskip("langchain_classic")
    from langchain_classic.retrievers.document_compressors import DocumentCompressorPipeline

    pipeline = DocumentCompressorPipeline(
        transformers=[
            ReContextCompressor(engine=engine, mode="rerank", top_n=2),
            ReContextCompressor(engine=engine, mode="append", **FAST),
        ]
    )
    docs = store.as_retriever(search_kwargs={"k": 4}).invoke(QUESTION)
    out = pipeline.compress_documents(docs, QUESTION)
    assert len(out) == 3 and is_evidence(out[-1]) and FACT in out[-1].page_content
    scores = [d.metadata["relevance_score"] for d in out[:2]]
    mass = engine.document_scores([d.page_content for d in docs], QUESTION)
    assert scores == pytest.approx(sorted(mass, reverse=True)[:2], abs=1e-5)
    spans = out[-1].metadata["spans"]
    assert any(out[s["doc_index"]].page_content[s["char_start"] : s["char_end"]] == FACT for s in spans)


@pytest.mark.model
def test_compressor_on_retrieved_documents_with_form_feeds(engine: Any) -> None:
    docs = [Document(page_content=c.replace(". ", ".\x0c", 2), id=f"p{i}") for i, c in enumerate(CHUNKS)]
    docs.insert(1, Document(page_content="  "))
    out = ReContextCompressor(engine=engine, mode="append", **FAST).compress_documents(docs, QUESTION)
    assert out[:-1] == docs and is_evidence(out[-1]) and FACT in out[-1].page_content
    again = ReContextCompressor(engine=engine, mode="append", **FAST).compress_documents(out, QUESTION)
    assert sum(is_evidence(d) for d in again) == 1
