"""ReContextMiddleware in real agents: ``create_agent`` graphs and LangGraph's ``create_react_agent``.

The session is an agent's: a user's request, tool calls that read real files (the benchmark's
Apache licence and Python reference page), tool results as ``ToolMessage``s, and a last request
answered by one sentence of the first tool output. The agent's model is the embedded model
without replay of its own (``ChatReContext(rounds=0)``); what it is sent is read by a callback
handler (``on_chat_model_start``), as a tracer would.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

pytest.importorskip("langchain")

from langchain.agents import create_agent  # noqa: E402
from langchain_core.callbacks import BaseCallbackHandler  # noqa: E402
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage  # noqa: E402
from langchain_core.tools import tool  # noqa: E402

from recontext_engine import HistoryReplayConfig  # noqa: E402
from recontext_engine.bench.documents import read_document  # noqa: E402
from recontext_engine.selection.bm25 import BM25Signal  # noqa: E402
from recontext_integrations.langchain import ChatReContext, ReContextMiddleware  # noqa: E402
from recontext_integrations.langchain.middleware import METADATA_KEY, REPLAY_EVENT  # noqa: E402

FILES = {
    "LICENSE": read_document("licence/Apache-2.0.txt"),
    "docs/try.txt": read_document("pydoc/try.txt")[:3000],
}
QUESTION = (
    "Under the Apache License, when do your patent licenses end "
    "if you sue claiming the Work infringes a patent?"
)
GOLD = "shall terminate as of the date such litigation is filed"


@tool
def read_file(path: str) -> str:
    """Read a file of the repository."""
    return FILES.get(path, f"no such file: {path}")


@tool
def list_files(folder: str) -> str:
    """List the files of a folder."""
    return "\n".join(sorted(FILES))


def flat(text: str) -> str:
    return " ".join(text.split())


def call(name: str, args: dict[str, Any], call_id: str) -> list[BaseMessage]:
    """An AI tool call and the real tool's result for it."""
    tool_ = {"read_file": read_file, "list_files": list_files}[name]
    return [
        AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": call_id, "type": "tool_call"}]),
        ToolMessage(content=tool_.invoke(args), tool_call_id=call_id, name=name),
    ]


def session() -> list[BaseMessage]:
    return [
        HumanMessage("We ship under Apache-2.0. Read the licence and the try statement docs."),
        *call("list_files", {"folder": "."}, "c1"),
        *call("read_file", {"path": "LICENSE"}, "c2"),
        *call("read_file", {"path": "docs/try.txt"}, "c3"),
        AIMessage("I read both files."),
        HumanMessage(QUESTION),
    ]


class Inputs(BaseCallbackHandler):
    """The messages each chat model call was sent, and the custom events of the run."""

    def __init__(self) -> None:
        self.calls: list[list[BaseMessage]] = []
        self.events: list[tuple[str, Any]] = []

    def on_chat_model_start(self, serialized: Any, messages: list[list[BaseMessage]], **kwargs: Any) -> None:
        self.calls.append(messages[0])

    def on_custom_event(self, name: str, data: Any, **kwargs: Any) -> None:
        self.events.append((name, data))


@pytest.fixture(scope="module")
def model(engine) -> ChatReContext:
    return ChatReContext(engine=engine, rounds=0, max_tokens=8)


def run(agent: Any, messages: list[BaseMessage]) -> tuple[dict[str, Any], Inputs]:
    inputs = Inputs()
    return agent.invoke({"messages": messages}, config={"callbacks": [inputs]}), inputs


@pytest.fixture(scope="module")
def replayed(engine, model) -> tuple[dict[str, Any], Inputs]:
    middleware = ReContextMiddleware(engine=engine, min_history_tokens=200)
    return run(create_agent(model, tools=[read_file, list_files], middleware=[middleware]), session())


def test_the_model_is_sent_the_answering_sentence_before_the_request(replayed) -> None:
    _, inputs = replayed
    sent = inputs.calls[0]
    assert len(sent) == len(session())  # nothing removed, nothing added but the replay in the request
    request = sent[-1]
    assert isinstance(request, HumanMessage) and request.content.endswith(QUESTION)
    block = request.content[: -len(QUESTION)]
    assert block.startswith(HistoryReplayConfig().header) and GOLD in flat(block)
    assert "[message 5, tool]" in block  # the licence's ToolMessage is message 5 of what the model saw
    assert [m.content for m in sent[:-1]] == [m.content for m in session()[:-1]]


def test_the_state_keeps_the_messages_and_the_answer_reports_the_replay(replayed) -> None:
    state, inputs = replayed
    messages = state["messages"]
    assert messages[len(session()) - 1].content == QUESTION  # the state's request is unchanged
    answer = messages[-1]
    assert isinstance(answer, AIMessage)
    report = answer.response_metadata[METADATA_KEY]
    assert report["status"] == "replayed" and report["insert_at"] == len(session()) - 1
    licence = [e for e in report["evidence"] if GOLD in flat(e["text"])]
    assert licence and licence[0]["message_index"] == 4 and licence[0]["role"] == "tool"
    replays = [data for name, data in inputs.events if name == REPLAY_EVENT]
    assert len(replays) == 1 and replays[0]["evidence"] == report["evidence"]


def test_after_a_tool_result_the_replay_follows_it_and_the_next_step_uses_the_cache(engine, model) -> None:
    middleware = ReContextMiddleware(engine=engine, min_history_tokens=200)
    agent = create_agent(model, tools=[read_file, list_files], middleware=[middleware])
    step = [*session(), *call("list_files", {"folder": "."}, "c4")]
    _, inputs = run(agent, step)
    sent = inputs.calls[0]
    assert isinstance(sent[-2], ToolMessage)  # the tool result still follows its call
    assert isinstance(sent[-1], HumanMessage) and GOLD in flat(sent[-1].content)
    replay = middleware.replay([*step, AIMessage("Checking."), *call("list_files", {"folder": "."}, "c5")])
    assert replay is not None and replay.cached_tokens >= replay.history_tokens - 40


async def test_async_agents_get_the_replay_and_the_event(engine, model) -> None:
    middleware = ReContextMiddleware(engine=engine, min_history_tokens=200)
    agent = create_agent(model, tools=[read_file], middleware=[middleware])
    events = [
        event
        async for event in agent.astream_events({"messages": session()}, version="v2")
        if event["event"] in ("on_custom_event", "on_chat_model_start")
    ]
    custom = [e for e in events if e["event"] == "on_custom_event" and e["name"] == REPLAY_EVENT]
    assert len(custom) == 1 and custom[0]["data"]["status"] == "replayed"
    sent = [e for e in events if e["event"] == "on_chat_model_start"][0]["data"]["input"]["messages"][0]
    assert GOLD in flat(sent[-1].content)


def test_below_the_history_size_it_stands_down(engine, model) -> None:
    middleware = ReContextMiddleware(engine=engine, min_history_tokens=100_000)
    state, inputs = run(create_agent(model, tools=[read_file], middleware=[middleware]), session())
    assert inputs.calls[0][-1].content == QUESTION
    assert state["messages"][-1].response_metadata[METADATA_KEY]["status"] == "short_history"


def test_a_full_agent_window_gets_no_replay(engine, model) -> None:
    middleware = ReContextMiddleware(engine=engine, min_history_tokens=200, max_input_tokens=500)
    _, inputs = run(create_agent(model, tools=[read_file], middleware=[middleware]), session())
    assert inputs.calls[0][-1].content == QUESTION


def test_a_selection_error_leaves_the_call_unchanged_and_is_logged_once(
    engine, model, monkeypatch, caplog
) -> None:
    middleware = ReContextMiddleware(engine=engine, min_history_tokens=200)
    agent = create_agent(model, tools=[read_file], middleware=[middleware])

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the reader failed")

    monkeypatch.setattr(middleware.replayer, "replay", broken)
    with caplog.at_level(logging.WARNING, logger="recontext_integrations"):
        for _ in range(2):
            state, inputs = run(agent, session())
            assert inputs.calls[0][-1].content == QUESTION
            assert isinstance(state["messages"][-1], AIMessage)
    warnings = [r for r in caplog.records if "ReContextMiddleware" in r.getMessage()]
    assert len(warnings) == 1 and "the reader failed" in (warnings[0].exc_text or "")


def test_unknown_settings_are_refused() -> None:
    with pytest.raises(TypeError):
        ReContextMiddleware(min_history=10)  # type: ignore[call-arg]
    with pytest.raises(ValueError):
        ReContextMiddleware(replay_options={"roundz": 2})
    with pytest.raises(ValueError):
        ReContextMiddleware(max_replay_tokens=0)
    with pytest.raises(ValueError, match="max_result_tokens"):
        ReContextMiddleware(max_result_tokens=-1)
    assert ReContextMiddleware(max_result_tokens=0).history_config.max_result_tokens == 0


def test_history_is_read_in_one_round_unless_asked(engine) -> None:
    default = ReContextMiddleware(engine=engine).replayer.replay_config
    assert default.rounds == 1
    assert default.top_k == engine.default_config.top_k  # the engine's other defaults stand
    assert ReContextMiddleware(engine=engine, rounds=2).replayer.replay_config.rounds == 2
    chosen = ReContextMiddleware(engine=engine, top_k=2, replay_options={"selector": "bm25"}).replayer
    assert chosen.replay_config.top_k == 2 and isinstance(chosen.replay_config.selector, BM25Signal)


def test_langgraph_pre_model_hook(engine, model) -> None:
    from langgraph.prebuilt import create_react_agent

    middleware = ReContextMiddleware(engine=engine, min_history_tokens=200)
    agent = create_react_agent(model, tools=[read_file], pre_model_hook=middleware.pre_model_hook)
    state, inputs = run(agent, session())
    assert GOLD in flat(inputs.calls[0][-1].content)
    assert state["messages"][len(session()) - 1].content == QUESTION
