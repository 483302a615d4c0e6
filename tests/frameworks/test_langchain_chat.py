"""ChatReContext and ReContextReplayer: the context/question rule, streaming, async, batch, evidence."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

pytest.importorskip("langchain_core")

from langchain_core.callbacks import BaseCallbackHandler  # noqa: E402
from langchain_core.documents import Document  # noqa: E402
from langchain_core.messages import AIMessage, ChatMessage, HumanMessage, SystemMessage, ToolMessage  # noqa: E402

from recontext_engine import MessageSplit  # noqa: E402
from recontext_integrations.langchain import ChatReContext, ReContextReplayer  # noqa: E402
from recontext_integrations.langchain.chat_models import (  # noqa: E402
    EMBEDDED_MODEL_NAME,
    chat_messages,
    split_messages,
)
from recontext_integrations.langchain.replayer import EVIDENCE_KIND, format_replay_prompt, is_evidence  # noqa: E402

CONTEXT = "Ada lives in Lisbon. Bruno lives in Oslo. Chloe lives in Nairobi. The museum opens at nine."
QUESTION = "Where does Bruno live?"
MESSAGES = [SystemMessage("Answer briefly."), HumanMessage(f"Context:\n{CONTEXT}\n\nQuestion: {QUESTION}")]


# -- the context/question rule (no model) -------------------------------------------------------


def test_lone_message_is_plain_chat() -> None:
    assert split_messages([HumanMessage("Hello")]) == MessageSplit([], "Hello", None, "none", ())


def test_marker_splits_context_from_question() -> None:
    split = split_messages(MESSAGES)
    assert split == MessageSplit([CONTEXT], QUESTION, "Answer briefly.", "question_marker", (1,))


def test_langchain_messages_map_onto_the_shared_rule() -> None:
    messages = [
        SystemMessage("Be brief."),
        HumanMessage("Ada lives in Lisbon."),
        AIMessage("Noted."),
        SystemMessage("Use the notes."),
        ToolMessage("Bruno lives in Oslo.", tool_call_id="1"),
        AIMessage(""),  # no text: no document
        HumanMessage("Context: The museum opens at nine.\nQuestion: Where does Ada live?"),
    ]
    split = split_messages(messages)
    assert split.question == "Where does Ada live?"
    assert split.documents == [
        "Ada lives in Lisbon.",
        "Noted.",
        "Bruno lives in Oslo.",
        "The museum opens at nine.",
    ]
    assert split.sources == (1, 2, 4, 6)
    assert split.system == "Be brief.\n\nUse the notes."
    assert split_messages(messages, history_as_context=False).documents == ["The museum opens at nine."]


def test_content_blocks_take_text_blocks_only() -> None:
    message = HumanMessage(
        content=[
            {"type": "text", "text": "Context: Ada lives in Lisbon."},
            {"type": "image_url", "image_url": {"url": "https://example.com/x.png"}},
            {"type": "text", "text": "Question: Where does Ada live?"},
        ]
    )
    split = split_messages([message])
    assert (split.documents, split.question) == (["Ada lives in Lisbon."], "Where does Ada live?")


def test_explicit_documents_make_the_whole_message_the_question() -> None:
    docs = [Document(page_content="Ada lives in Lisbon."), "Bruno lives in Oslo."]
    messages = [HumanMessage("earlier"), HumanMessage("Question: where?")]
    split = split_messages(messages, documents=docs)
    assert split == MessageSplit(
        ["Ada lives in Lisbon.", "Bruno lives in Oslo."], "Question: where?", None, "documents", (-1, -1)
    )


def test_custom_splitter_replaces_the_rule() -> None:
    def splitter(messages: Any, documents: Any) -> MessageSplit:
        return MessageSplit(["fixed context"], "fixed question")

    model = ChatReContext(message_splitter=splitter)
    assert model.split([HumanMessage("anything")]) == MessageSplit(["fixed context"], "fixed question")


def test_chat_messages_roles() -> None:
    messages = [
        SystemMessage("a"),
        HumanMessage("hi"),
        SystemMessage("b"),
        AIMessage("hello"),
        AIMessage(""),
        ChatMessage(role="critic", content="meh"),
        ToolMessage("42", tool_call_id="1"),
    ]
    assert chat_messages(messages) == [
        {"role": "system", "content": "a\n\nb"},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {"role": "critic", "content": "meh"},
        {"role": "tool", "content": "42"},
    ]


def test_params_without_loading() -> None:
    model = ChatReContext(model="/nowhere/model", max_tokens=7, stop=["x"], temperature=0.5)
    ls = model._get_ls_params()
    assert ls["ls_provider"] == "recontext" and ls["ls_model_name"] == "/nowhere/model"
    assert (ls["ls_max_tokens"], ls["ls_stop"], ls["ls_temperature"]) == (7, ["x"], 0.5)
    assert model._get_ls_params(stop=["y"], model="other")["ls_stop"] == ["y"]
    assert ChatReContext().model_name == EMBEDDED_MODEL_NAME
    assert "engine" not in ChatReContext().model_dump()
    with pytest.raises(ValueError, match="model folder not found"):  # loads on first use, not before
        model.invoke("Hello")


def test_embedded_name_matches_engine() -> None:
    from recontext_engine.loading import EMBEDDED_NAME

    assert EMBEDDED_MODEL_NAME == EMBEDDED_NAME


def test_format_replay_prompt_layout() -> None:
    evidence = Document(page_content="<evidence>\nB.\n</evidence>", metadata={"kind": EVIDENCE_KIND})
    prompt = format_replay_prompt({"question": "Q?", "documents": [Document(page_content="A. B."), evidence]})
    from recontext_engine.config import DEFAULT_QUESTION_TEMPLATE

    expected = "Context:\nA. B.\n\n<evidence>\nB.\n</evidence>\n\n" + DEFAULT_QUESTION_TEMPLATE.format(
        question="Q?"
    )
    assert prompt == expected
    two = format_replay_prompt(
        {"question": "Q?", "documents": ["A.", "B."]}, question_template="Q: {question}"
    )
    assert two == "Context:\n[Document 1]\nA.\n\n[Document 2]\nB.\n\nQ: Q?"


# -- with the embedded model ------------------------------------------------------------------


@pytest.fixture(scope="module")
def reference(engine: Any) -> AIMessage:
    """One invoke over MESSAGES; streaming and async variants must reproduce it exactly (greedy)."""
    return ChatReContext(engine=engine, max_tokens=12).invoke(MESSAGES)


def _slices_back(evidence: list[dict[str, Any]], documents: list[str]) -> None:
    assert evidence
    for item in evidence:
        assert documents[item["doc_index"]][item["char_start"] : item["char_end"]] == item["text"]
        assert item["round"] >= 1 and isinstance(item["score"], float)


@pytest.mark.model
def test_invoke_metadata_and_evidence_provenance(reference: AIMessage, engine: Any) -> None:
    meta = reference.response_metadata
    assert meta["model_name"] == engine.model_name and meta["finish_reason"] in ("stop", "length")
    _slices_back(meta["evidence"], split_messages(MESSAGES).documents)
    usage = reference.usage_metadata
    assert usage["output_tokens"] >= 1 and usage["input_tokens"] > engine.count_tokens(CONTEXT)
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]


@pytest.mark.model
def test_a_repeated_context_reports_its_cached_tokens(engine: Any) -> None:
    model = ChatReContext(engine=engine, max_tokens=4)
    model.invoke(MESSAGES)
    usage = model.invoke(MESSAGES).usage_metadata
    assert engine.count_tokens(CONTEXT) <= usage["input_token_details"]["cache_read"] < usage["input_tokens"]


@pytest.mark.model
def test_stream_concatenates_to_invoke(reference: AIMessage, engine: Any) -> None:
    chunks = list(ChatReContext(engine=engine, max_tokens=12).stream(MESSAGES))
    assert len(chunks) > 2 and chunks[-1].chunk_position == "last"
    assert all(c.usage_metadata is None for c in chunks[:-1])
    full = chunks[0]
    for chunk in chunks[1:]:
        full = full + chunk
    assert full.content == reference.content
    # the same counts; only the cached part differs (this call found the context in the context cache)
    counts = ("input_tokens", "output_tokens", "total_tokens")
    assert {k: full.usage_metadata[k] for k in counts} == {k: reference.usage_metadata[k] for k in counts}
    assert full.response_metadata["evidence"] == reference.response_metadata["evidence"]


@pytest.mark.model
async def test_astream_matches_and_leaves_the_loop_free(reference: AIMessage, engine: Any) -> None:
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    class TokenRecorder(BaseCallbackHandler):
        def __init__(self) -> None:
            self.tokens: list[str] = []

        def on_llm_new_token(self, token: str, **kwargs: Any) -> None:
            self.tokens.append(token)

    recorder = TokenRecorder()
    task = asyncio.create_task(ticker())
    started = time.perf_counter()
    model = ChatReContext(engine=engine, max_tokens=12)
    pieces = [c.content async for c in model.astream(MESSAGES, config={"callbacks": [recorder]})]
    elapsed = time.perf_counter() - started
    task.cancel()
    assert "".join(pieces) == reference.content == "".join(recorder.tokens)
    # A blocked loop would tick ~0 times; a free one ticks about every 10 ms.
    assert ticks >= min(20, elapsed * 100 * 0.2)


@pytest.mark.model
async def test_astream_early_exit_stops_the_worker(engine: Any) -> None:
    model = ChatReContext(engine=engine, max_tokens=64)
    stream = model._astream([HumanMessage("Write a long story about a cat.")])
    first = await stream.__anext__()
    await stream.aclose()  # its `finally` waits for the worker thread, which stops after one more token
    assert first.text
    assert (await model.ainvoke("Hello", max_tokens=3)).usage_metadata["output_tokens"] <= 3


@pytest.mark.model
def test_per_call_settings_and_explicit_documents(engine: Any) -> None:
    docs = [Document(page_content="Ada lives in Lisbon. Ada is a pilot."), Document(page_content=CONTEXT)]
    model = ChatReContext(engine=engine, max_tokens=4).bind(documents=docs, rounds=1, top_k=2)
    message = model.invoke(QUESTION)
    evidence = message.response_metadata["evidence"]
    _slices_back(evidence, [d.page_content for d in docs])
    assert len(evidence) <= 2 and {e["round"] for e in evidence} == {1}
    assert message.usage_metadata["output_tokens"] <= 4
    vanilla = ChatReContext(engine=engine, max_tokens=4, rounds=0).invoke(MESSAGES)
    assert vanilla.response_metadata["evidence"] == []


@pytest.mark.model
def test_plain_chat_and_stop_sequence(engine: Any) -> None:
    model = ChatReContext(engine=engine, max_tokens=12)
    full = model.invoke("Hello")
    assert full.response_metadata["evidence"] == [] and full.content
    words = full.content.split()
    assert len(words) >= 3
    stop = words[2]
    stopped = model.invoke("Hello", stop=[stop])
    assert stopped.content == full.content[: full.content.index(stop)]
    assert stopped.response_metadata["finish_reason"] == "stop"


@pytest.mark.model
def test_batch_shares_one_engine_and_matches_invoke(reference: AIMessage, engine: Any) -> None:
    model = ChatReContext(engine=engine, max_tokens=12)
    other = [MESSAGES[0], HumanMessage(f"Context:\n{CONTEXT}\n\nQuestion: Where does Ada live?")]
    batched = model.batch([MESSAGES, other, "Hi"], config={"max_concurrency": 3})
    expected = [reference.content, model.invoke(other).content, model.invoke("Hi").content]
    assert [m.content for m in batched] == expected
    assert batched[0].response_metadata["evidence"] and not batched[2].response_metadata["evidence"]


@pytest.mark.model
def test_bad_options_fail_clearly(engine: Any) -> None:
    model = ChatReContext(engine=engine)
    with pytest.raises(ValueError, match="unknown ReplayConfig option"):
        model.invoke(MESSAGES, no_such_option=1)
    with pytest.raises(ValueError, match="serves one local model"):
        model.invoke(MESSAGES, model="gpt-4o")
    assert (
        model.get_token_ids("Hello world")
        == engine.tokenizer("Hello world", add_special_tokens=False)["input_ids"]
    )


@pytest.mark.model
def test_replayer_appends_evidence_with_provenance(engine: Any) -> None:
    docs = [
        Document(page_content="Ada lives in Lisbon. Ada is a pilot.", metadata={"source": "a.txt"}, id="a"),
        Document(page_content="   "),  # no text: skipped, indices still point into the input list
        Document(page_content=CONTEXT, id="c"),
    ]
    replayer = ReContextReplayer(engine=engine, rounds=1, top_k=3)
    out = replayer.invoke({"question": QUESTION, "documents": docs, "extra": 1})
    assert out["extra"] == 1 and out["documents"][:3] == docs
    evidence = out["documents"][-1]
    assert is_evidence(evidence) and len(out["documents"]) == 4
    spans = evidence.metadata["spans"]
    assert spans and all(s["doc_index"] in (0, 2) for s in spans)
    texts = [docs[s["doc_index"]].page_content[s["char_start"] : s["char_end"]] for s in spans]
    assert all(t in evidence.page_content for t in texts)
    expected_sources = {0: {"doc_index": 0, "id": "a", "source": "a.txt"}, 2: {"doc_index": 2, "id": "c"}}
    assert evidence.metadata["source_documents"] == [
        expected_sources[i] for i in sorted({s["doc_index"] for s in spans})
    ]
    assert evidence.metadata["model"] == engine.model_name
    # replaying an output replaces its evidence instead of stacking a second one
    again = replayer.invoke(out)
    assert sum(is_evidence(d) for d in again["documents"]) == 1
    assert again["documents"][-1].page_content == evidence.page_content
    prompt = format_replay_prompt(out)
    assert prompt.index(CONTEXT) < prompt.index(evidence.page_content) < prompt.index(QUESTION)


@pytest.mark.model
def test_replayer_accepts_a_context_string(engine: Any) -> None:
    out = ReContextReplayer(engine=engine, rounds=1, top_k=2).invoke(
        {"question": QUESTION, "context": CONTEXT}
    )
    assert [d.page_content for d in out["documents"][:-1]] == [CONTEXT]
    for span in out["documents"][-1].metadata["spans"]:
        assert CONTEXT[span["char_start"] : span["char_end"]] in out["documents"][-1].page_content
    with pytest.raises(ValueError, match="documents"):
        ReContextReplayer(engine=engine).invoke({"question": QUESTION})
