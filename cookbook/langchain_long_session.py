"""A long agent session: ``ReContextMiddleware`` replays what an early tool output said.

An agent has worked a while in a repository: the user set the task, the agent listed the files and
read a licence, a changelog and a reference page (real files shipped with recontext's benchmark:
Debian's copy of the Apache License, OpenSSH's Debian NEWS, Python's reference on ``try``). Then
the user asks something one sentence of the first file answers, thousands of tokens back. Before
the model call the middleware has the local engine read the whole session with that request as the
question, and replays the sentences it selects, quoted and labelled with their message, first in the
request. The state keeps the messages as they were; the answer's
``response_metadata["recontext_replay"]`` says what was replayed, and from which message.

The agent's model here is the embedded one without replay of its own (``ChatReContext(rounds=0)``);
any chat model works (``ChatOpenAI(...)``, ``ChatOllama(...)``): the middleware needs only the local
engine. Needs: ``pip install -e ".[cookbook]"``. Run: ``python cookbook/langchain_long_session.py``
(offline, CPU, about a minute).
"""

from __future__ import annotations

from typing import Any

from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool

from recontext_engine.bench.documents import read_document
from recontext_integrations.langchain import ChatReContext, ReContextMiddleware

FILES = {
    "LICENSE": "licence/Apache-2.0.txt",
    "debian/NEWS": "changelog/openssh.NEWS.Debian.txt",
    "docs/try.txt": "pydoc/try.txt",
}
QUESTION = (
    "Under our licence, when do the patent licenses end if someone sues claiming the Work infringes a patent?"
)
ANSWER = "litigation is filed"


@tool
def list_files(folder: str) -> str:
    """List the files of a folder of the repository."""
    return "\n".join(sorted(FILES))


@tool
def read_file(path: str) -> str:
    """Read a file of the repository."""
    return read_document(FILES[path]) if path in FILES else f"no such file: {path}"


def session(max_chars: int = 6_000) -> list[BaseMessage]:
    """The session so far: the task, the agent's tool calls and their real results, its summary,
    and the new request. ``max_chars`` caps each file read."""
    task = "Prepare the release notes. Check the licence and the docs first."
    messages: list[BaseMessage] = [HumanMessage(task)]
    steps = [("list_files", {"folder": "."})] + [("read_file", {"path": path}) for path in FILES]
    for number, (name, args) in enumerate(steps, 1):
        call_id = f"call_{number}"
        result = {"list_files": list_files, "read_file": read_file}[name].invoke(args)
        messages += [
            AIMessage("", tool_calls=[{"name": name, "args": args, "id": call_id, "type": "tool_call"}]),
            ToolMessage(result[:max_chars], tool_call_id=call_id, name=name),
        ]
    messages += [AIMessage("I have read the licence, the NEWS file and the docs."), HumanMessage(QUESTION)]
    return messages


def main(engine: Any = None, agent_model: Any = None, max_chars: int = 6_000) -> dict[str, Any]:
    """Answer the request at the end of the session; returns the answer and what was replayed."""
    model = agent_model or ChatReContext(engine=engine, rounds=0, max_tokens=40)
    replay = ReContextMiddleware(engine=engine, min_history_tokens=500)
    agent = create_agent(model, tools=[list_files, read_file], middleware=[replay])
    state = agent.invoke({"messages": session(max_chars)}, {"recursion_limit": 6})
    answer = state["messages"][-1]
    report = answer.response_metadata.get("recontext_replay", {})
    print(f"Session: {len(state['messages']) - 1} messages, {report.get('history_tokens')} tokens of history")
    print(f"Replayed ({report.get('status')}, {report.get('seconds', 0):.1f} s):")
    for item in report.get("evidence", []):
        print(f"  [message {item['message_index'] + 1}, {item['role']}] {' '.join(item['text'].split())}")
    print("Answer:", answer.content)
    return {"answer": str(answer.content), "replay": report, "messages": state["messages"]}


if __name__ == "__main__":
    main()
