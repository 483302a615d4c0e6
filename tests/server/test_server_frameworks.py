"""LangChain ``ChatOpenAI`` and LlamaIndex ``OpenAILike`` pointed at a real ``recontext serve`` process."""

from __future__ import annotations

import json

import httpx
import pytest

from .cases import case, evidence_slices_back
from .conftest import MODEL, running_server

pytest.importorskip("langchain_openai")
pytest.importorskip("llama_index.llms.openai_like")

from langchain_core.output_parsers import StrOutputParser  # noqa: E402
from langchain_core.prompts import ChatPromptTemplate  # noqa: E402
from langchain_openai import ChatOpenAI  # noqa: E402
from llama_index.core.llms import ChatMessage  # noqa: E402
from llama_index.llms.openai_like import OpenAILike  # noqa: E402

pytestmark = pytest.mark.model
CASE = case(2)


@pytest.fixture(scope="module")
def server():
    with running_server("--max-tokens", "16") as process:
        yield process


class RecordingTransport(httpx.HTTPTransport):
    """A real HTTP transport that also keeps each JSON response body (to read ``evidence``)."""

    def __init__(self) -> None:
        super().__init__()
        self.bodies: list[dict] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        if response.headers.get("content-type", "").startswith("application/json"):
            response.read()
            self.bodies.append(json.loads(response.content))
        return response


def chat_openai(server, **kwargs) -> ChatOpenAI:
    return ChatOpenAI(
        base_url=server.base_url, api_key="unused", model=MODEL, temperature=0, max_retries=0, timeout=300,
        **kwargs,
    )  # fmt: skip


def test_langchain_chat_openai_with_documents_in_extra_body(server) -> None:
    transport = RecordingTransport()
    llm = chat_openai(
        server, extra_body={"documents": CASE.documents}, http_client=httpx.Client(transport=transport)
    )
    message = llm.invoke(CASE.question)
    assert CASE.answer in message.content
    assert message.response_metadata["model_name"] == MODEL and message.usage_metadata["output_tokens"] <= 16
    (body,) = transport.bodies
    assert body["replayed"] is True and CASE.fact in [e["text"] for e in body["evidence"]]
    assert evidence_slices_back(body["evidence"], CASE.documents)
    streamed = "".join(chunk.content for chunk in llm.stream(CASE.question))
    assert streamed == message.content


def test_langchain_rag_prompt_chain_without_extension_fields(server) -> None:
    """A plain ``prompt | ChatOpenAI | parser`` chain: the server's messages rule finds the context."""
    transport = RecordingTransport()
    prompt = ChatPromptTemplate.from_messages(
        [("system", "Answer briefly."), ("human", "Context:\n{context}\n\nQuestion: {question}")]
    )
    chain = prompt | chat_openai(server, http_client=httpx.Client(transport=transport)) | StrOutputParser()
    answer = chain.invoke({"context": CASE.documents[0], "question": CASE.question})
    assert CASE.answer in answer
    (body,) = transport.bodies
    assert body["replayed"] is True and CASE.fact in [e["text"] for e in body["evidence"]]


def openai_like(server, **kwargs) -> OpenAILike:
    return OpenAILike(
        model=MODEL, api_base=server.base_url, api_key="unused", is_chat_model=True, context_window=8192,
        max_tokens=16, temperature=0, max_retries=0, timeout=300, **kwargs,
    )  # fmt: skip


def test_llamaindex_openai_like_chat_with_documents(server) -> None:
    llm = openai_like(server, additional_kwargs={"extra_body": {"documents": CASE.documents}})
    response = llm.chat([ChatMessage(role="user", content=CASE.question)])
    assert CASE.answer in response.message.content
    extra = response.raw.model_extra
    assert extra["replayed"] is True and CASE.fact in [e["text"] for e in extra["evidence"]]
    streamed = "".join(
        r.delta or "" for r in llm.stream_chat([ChatMessage(role="user", content=CASE.question)])
    )
    assert streamed == response.message.content


async def test_llamaindex_openai_like_async_complete_uses_the_messages_rule(server) -> None:
    llm = openai_like(server)
    prompt = f"Context:\n{CASE.documents[0]}\n\nQuestion: {CASE.question}"
    response = await llm.acomplete(prompt)
    assert CASE.answer in response.text
    assert CASE.fact in [e["text"] for e in response.raw.model_extra["evidence"]]
