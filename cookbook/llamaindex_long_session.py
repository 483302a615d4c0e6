"""A long LlamaIndex agent session: ``ReContextMemoryBlock`` replays what an early tool output said.

The agent's ``Memory`` holds a session in which it read real files through a tool (the Apache
License, OpenSSH's Debian NEWS and Python's reference on ``try``, shipped with recontext's
benchmark). The memory's token limit has flushed those early messages out of its short-term queue;
the block keeps them, and before each LLM call the local engine reads the whole session with the
new request as the question. The sentences it selects go first in the latest user message
(``insert_method="user"``), quoted and labelled with their message; a ``ReContextEvidenceEvent``
with split rule ``"memory_block"`` says what was replayed before each LLM call (``block.last_replay``
holds the latest).

The agent's LLM here is the embedded model without replay of its own; any LlamaIndex LLM works.
Needs: ``pip install -e ".[cookbook]"``. Run: ``python cookbook/llamaindex_long_session.py``
(offline, CPU, about a minute).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.memory import Memory

from recontext_engine.bench.documents import read_document
from recontext_integrations.llama_index import ReContextEvidenceEvent, ReContextLLM, ReContextMemoryBlock

FILES = {
    "LICENSE": "licence/Apache-2.0.txt",
    "debian/NEWS": "changelog/openssh.NEWS.Debian.txt",
    "docs/try.txt": "pydoc/try.txt",
}
QUESTION = (
    "Under our licence, when do the patent licenses end if someone sues claiming the Work infringes a patent?"
)
ANSWER = "litigation is filed"


def read_file(path: str) -> str:
    """Read a file of the repository."""
    return read_document(FILES[path]) if path in FILES else f"no such file: {path}"


def session(max_chars: int = 6_000) -> list[ChatMessage]:
    """The session so far, in LlamaIndex's message forms: the task, tool calls and their results."""
    task = "Prepare the release notes. Check the licence and the docs first."
    messages = [ChatMessage(role="user", content=task)]
    for number, path in enumerate(FILES, 1):
        call = {"id": f"call_{number}", "type": "function"}
        call["function"] = {"name": "read_file", "arguments": json.dumps({"path": path})}
        messages.append(ChatMessage(role="assistant", content="", additional_kwargs={"tool_calls": [call]}))
        result = {"tool_call_id": call["id"], "name": "read_file"}
        messages.append(
            ChatMessage(role="tool", content=read_file(path)[:max_chars], additional_kwargs=result)
        )
    messages += [
        ChatMessage(role="assistant", content="I have read the licence, the NEWS file and the docs."),
        ChatMessage(role="user", content="Good. Keep the notes short."),
        ChatMessage(role="assistant", content="Will do."),
    ]
    return messages


class Replays(BaseEventHandler):
    """The memory block's replays, in order (one before each LLM call), as a UI would collect them."""

    events: list = []  # noqa: RUF012 (a pydantic field; a bare list resolves in any module namespace)

    @classmethod
    def class_name(cls) -> str:
        return "Replays"

    def handle(self, event: Any, **kwargs: Any) -> None:
        if isinstance(event, ReContextEvidenceEvent) and event.split_rule == "memory_block":
            self.events.append(event)


async def ask(engine: Any = None, llm: Any = None, max_chars: int = 6_000) -> dict[str, Any]:
    """Run the agent on the new request with the session in its memory; returns the answer and replay."""
    block = ReContextMemoryBlock(engine=engine, min_history_tokens=500)
    memory = Memory.from_defaults(
        memory_blocks=[block], insert_method="user", token_limit=2000, token_flush_size=500
    )
    await memory.aput_messages(session(max_chars))
    agent = FunctionAgent(
        tools=[read_file],
        llm=llm or ReContextLLM(engine=engine, replay_options={"rounds": 0}, max_tokens=40),
        system_prompt="You are a release engineer's assistant.",
    )
    replays = Replays(events=[])
    get_dispatcher().add_event_handler(replays)
    try:
        response = await agent.run(user_msg=QUESTION, memory=memory)
    finally:
        get_dispatcher().event_handlers.remove(replays)
    print(f"Archived by the block: {len(block.archive)} messages; replays: {len(replays.events)}")
    evidence = replays.events[0].evidence if replays.events else []
    print("Replayed before the answer:")
    for item in evidence:
        print(f"  [message {item['message_index'] + 1}, {item['role']}] {' '.join(item['text'].split())}")
    print("Answer:", response)
    return {"answer": str(response), "evidence": evidence, "archive": block.archive}


if __name__ == "__main__":
    asyncio.run(ask())
