"""Agent: ``create_agent(ChatReContext(...), tools=[...])`` with a tool that returns a long text.

The tool reads a 14 KB shipping log (about 300 sentences, one of them the answer). Its output comes
back as a ToolMessage; on the next model call ChatReContext takes it as context, replays the
sentences its retrieval heads point at, and answers from them. The evidence is in the answer's
``response_metadata["evidence"]`` (and in the ``"recontext_evidence"`` event of
``astream_events``), each item naming the message it came from: the tool's.
Needs: ``pip install -e ".[cookbook]"``. Run: ``python cookbook/langchain_agent.py`` (offline, CPU).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import ModelRequest, wrap_model_call
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import tool

from recontext_integrations.langchain import ChatReContext

LOG = Path(__file__).parent / "data" / "shipping_log.txt"
QUESTION = "What padlock code sealed the cold-storage hold of the Halcyon?"
ANSWER = "5816"


@tool
def read_shipping_log() -> str:
    """Read the North Sea shipping log of the autumn season: ships, cargo, crews and inspections."""
    return LOG.read_text(encoding="utf-8")


@wrap_model_call
def call_then_answer(request: ModelRequest, handler: Any) -> Any:
    # A 135M model decides neither when to call a tool nor when to stop calling: left on "auto"
    # it answers without reading the log, and once forced it would call the tool forever. So the
    # first model call must call a tool ("any": constrained to a valid call), and once a tool
    # result is in the messages no tool is offered ("none"): the model answers from it.
    called = any(isinstance(m, ToolMessage) for m in request.messages)
    return handler(request.override(tool_choice="none" if called else "any"))


def main(engine: Any = None, max_tokens: int = 24) -> dict[str, Any]:
    """Run the agent; returns its messages, the answer and the replayed evidence sentences."""
    llm = ChatReContext(engine=engine, max_tokens=max_tokens)
    agent = create_agent(llm, tools=[read_shipping_log], middleware=[call_then_answer])
    # The middleware ends the loop after two model calls; the limit only guards against surprises.
    state = agent.invoke({"messages": [("user", QUESTION)]}, {"recursion_limit": 6})
    messages = state["messages"]
    for message in messages:  # the steps: question, tool call, tool output, answer
        calls = [f"{c['name']}({c['args']})" for c in getattr(message, "tool_calls", [])]
        text = str(message.content)
        print(f"[{message.type}]", *calls, text[:120] + ("..." if len(text) > 120 else ""))
    answer = messages[-1]
    assert isinstance(answer, AIMessage)
    evidence = answer.response_metadata["evidence"]
    print("Evidence (from message", sorted({e["message_index"] for e in evidence}), "):")
    print(*(e["text"] for e in evidence), sep="\n  ")
    return {"messages": messages, "answer": str(answer.content), "evidence": evidence}


if __name__ == "__main__":
    main()
