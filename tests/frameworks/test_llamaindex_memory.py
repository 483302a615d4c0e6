"""ReContextMemoryBlock in a real LlamaIndex ``Memory``: a chat engine and an agent over a long session.

The session reads real files through a tool (the benchmark's Apache licence and Python reference
page); its early messages are flushed out of ``Memory``'s short-term queue by the token limit. The
block must still replay the licence sentence that answers the last question, first in the latest
user message (``insert_method="user"``), and report it.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

pytest.importorskip("llama_index.core")

from llama_index.core.base.llms.types import ChatMessage  # noqa: E402
from llama_index.core.chat_engine import SimpleChatEngine  # noqa: E402
from llama_index.core.instrumentation.events.llm import LLMChatStartEvent  # noqa: E402
from llama_index.core.memory import Memory  # noqa: E402

from recontext_engine import HistoryReplayConfig  # noqa: E402
from recontext_engine.bench.documents import read_document  # noqa: E402
from recontext_integrations.llama_index import ReContextEvidenceEvent, ReContextLLM, ReContextMemoryBlock  # noqa: E402

LICENCE = read_document("licence/Apache-2.0.txt")
QUESTION = (
    "Under the Apache License, when do your patent licenses end "
    "if you sue claiming the Work infringes a patent?"
)
GOLD = "shall terminate as of the date such litigation is filed"


def flat(text: str) -> str:
    return " ".join(text.split())


def session() -> list[ChatMessage]:
    """An agent's session: a request, tool calls (LlamaIndex's ``tool_calls`` form) and their results."""

    def called(name: str, arguments: str, call_id: str) -> ChatMessage:
        calls = [{"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}]
        return ChatMessage(role="assistant", content="", additional_kwargs={"tool_calls": calls})

    def result(text: str, call_id: str, name: str) -> ChatMessage:
        return ChatMessage(
            role="tool", content=text, additional_kwargs={"tool_call_id": call_id, "name": name}
        )

    return [
        ChatMessage(role="user", content="We ship under Apache-2.0. Read the licence and the try docs."),
        called("read_file", '{"path": "LICENSE"}', "c1"),
        result(LICENCE, "c1", "read_file"),
        called("read_file", '{"path": "docs/try.txt"}', "c2"),
        result(read_document("pydoc/try.txt")[:3000], "c2", "read_file"),
        ChatMessage(role="assistant", content="I read both files."),
        ChatMessage(role="user", content="Thanks. Which folder holds the build?"),
        ChatMessage(role="assistant", content="The build folder is dist/."),
    ]


def memory(block: ReContextMemoryBlock, token_limit: int = 1500) -> Memory:
    """A ``Memory`` whose short-term queue holds ~70% of ``token_limit``: the licence is flushed out."""
    store = Memory.from_defaults(
        memory_blocks=[block], insert_method="user", token_limit=token_limit, token_flush_size=500
    )
    store.put_messages(session())
    return store


def test_the_block_replays_flushed_messages_first_in_the_latest_user_message(engine) -> None:
    block = ReContextMemoryBlock(engine=engine, min_history_tokens=200)
    store = memory(block)
    assert any(LICENCE[:200] in (m.content or "") for m in block.archive)  # flushed, kept by the block
    store.put(ChatMessage(role="user", content=QUESTION))  # as chat engines do, then they get()
    messages = store.get()
    replay = block.last_replay
    assert replay is not None and replay.status == "replayed"
    answering = [e for e in replay.evidence if GOLD in flat(e.text)]
    assert answering and answering[0].role == "tool"
    assert LICENCE[answering[0].char_start : answering[0].char_end] == answering[0].text
    latest_user = [m for m in messages if m.role.value == "user"][-1]
    text = "\n".join(b.text for b in latest_user.blocks if hasattr(b, "text"))
    assert GOLD in flat(text) and text.index(HistoryReplayConfig().header) < text.index(QUESTION)


def test_a_chat_engine_sends_the_replay_to_its_llm_and_reports_it(engine, recorder) -> None:
    block = ReContextMemoryBlock(engine=engine, min_history_tokens=200)
    llm = ReContextLLM(engine=engine, replay_options={"rounds": 0}, max_tokens=8)
    chat = SimpleChatEngine.from_defaults(llm=llm, memory=memory(block))
    chat.chat(QUESTION)
    sent = [e.messages for e in recorder.events if isinstance(e, LLMChatStartEvent)][0]
    assert GOLD in flat(sent[-1].content or "") and (sent[-1].content or "").rstrip().endswith(QUESTION)
    evidence = [
        e for e in recorder.events if isinstance(e, ReContextEvidenceEvent) and e.split_rule == "memory_block"
    ]
    assert len(evidence) == 1 and any(GOLD in flat(item["text"]) for item in evidence[0].evidence)


def test_short_sessions_get_an_empty_block(engine) -> None:
    block = ReContextMemoryBlock(engine=engine, min_history_tokens=100_000)
    store = memory(block, token_limit=100_000)
    messages = store.get(input=QUESTION)
    assert block.last_replay is not None and block.last_replay.status == "short_history"
    assert not any(HistoryReplayConfig().header in (m.content or "") for m in messages)


def test_a_selection_error_gives_an_empty_block_logged_once(engine, monkeypatch, caplog) -> None:
    block = ReContextMemoryBlock(engine=engine, min_history_tokens=200)
    store = memory(block)

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the reader failed")

    monkeypatch.setattr(block.replayer, "replay", broken)
    with caplog.at_level(logging.WARNING, logger="recontext_integrations"):
        for _ in range(2):
            messages = store.get(input=QUESTION)
            assert messages and block.last_replay is None
    assert len([r for r in caplog.records if "ReContextMemoryBlock" in r.getMessage()]) == 1


def test_history_is_read_in_one_round_unless_asked(engine) -> None:
    assert ReContextMemoryBlock(engine=engine).replayer.replay_config.rounds == 1
    asked = ReContextMemoryBlock(engine=engine, replay_options={"rounds": 2})
    assert asked.replayer.replay_config.rounds == 2


def test_unknown_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="min_history_token"):
        ReContextMemoryBlock(min_history=10)
    with pytest.raises(ValueError):
        ReContextMemoryBlock(max_replay_tokens=0)
    with pytest.raises(ValueError, match="max_result_tokens"):
        ReContextMemoryBlock(max_result_tokens=-1)
    with pytest.raises(ValueError, match="roundz"):
        ReContextMemoryBlock(replay_options={"roundz": 2})
