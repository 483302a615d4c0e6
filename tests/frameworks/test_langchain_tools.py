"""ChatReContext tool calling and structured output: LangChain's forms in, tool calls and objects out."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

pytest.importorskip("langchain_core")

from langchain_core.messages import AIMessage, AIMessageChunk, HumanMessage, ToolMessage  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langchain_core.utils.function_calling import convert_to_json_schema  # noqa: E402
from pydantic import BaseModel, Field  # noqa: E402
from typing_extensions import TypedDict  # noqa: E402

from recontext_engine import ReplayConfig, ReplayResult, ReplayStream, ToolCall, Usage, format_tool_call  # noqa: E402
from recontext_integrations.langchain import ChatReContext  # noqa: E402
from recontext_integrations.langchain.chat_models import as_dicts  # noqa: E402
from recontext_integrations.langchain.tools import tool_choice_option  # noqa: E402

FACT = "Mary Doyle captained the Halcyon."


@tool
def lookup(query: str) -> str:
    """Look a name up in the ship registry."""
    return FACT


def weather(city: str) -> str:
    """Get the weather in a city."""
    return "sunny"


class Captain(BaseModel):
    """A ship and who captained it."""

    name: str = Field(description="the captain's name")
    ship: str = Field(description="the ship's name")


class CaptainDict(TypedDict):
    """A ship and who captained it."""

    name: str
    ship: str


class ScriptedEngine:
    """Answers every call with fixed pieces and tool calls, no model; records the options it got
    and checks them as the engine does (``ReplayConfig.with_options``)."""

    model_name = "scripted"

    def __init__(self, pieces: Sequence[str] = (), calls: Sequence[ToolCall] = (), text: str | None = None):
        self.pieces, self.calls = list(pieces), list(calls)
        self.text = "".join(pieces) if text is None else text
        self.options: list[dict[str, Any]] = []
        self.messages: list[Any] = []

    def _stream(self, messages: Any, options: dict[str, Any]) -> ReplayStream:
        ReplayConfig().with_options(**options)  # an option the engine would refuse fails here too
        self.options.append(options)
        self.messages.append(messages)
        holder: list[ReplayStream] = []

        def pieces() -> Iterator[str]:
            yield from self.pieces
            finish = "tool_calls" if self.calls else "stop"
            holder[0].result = ReplayResult(
                self.text,
                [],
                Usage(3, 2),
                model="scripted",
                finish_reason=finish,
                tool_calls=list(self.calls),
            )

        holder.append(ReplayStream(pieces()))
        return holder[0]

    def stream_chat(self, messages: Any, **options: Any) -> ReplayStream:
        return self._stream(messages, options)

    def stream(self, documents: Any, question: str, on_evidence: Any = None, **options: Any) -> ReplayStream:
        return self._stream((documents, question), options)


def two_calls() -> list[ToolCall]:
    return [
        ToolCall("lookup", {"query": "Halcyon"}, "call_1"),
        ToolCall("weather", {"city": "Cork"}, "call_2"),
    ]


# -- binding (no model) ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        (None, "auto"),
        ("auto", "auto"),
        (False, "auto"),
        ("any", "required"),
        ("required", "required"),
        (True, "required"),
        ("none", "none"),
        ("weather", "weather"),
        ({"type": "function", "function": {"name": "lookup"}}, "lookup"),
    ],
)
def test_tool_choice_is_normalised(choice: Any, expected: str) -> None:
    assert tool_choice_option(choice, ["lookup", "weather"]) == expected


def test_unknown_tool_choice_names_the_tools() -> None:
    with pytest.raises(ValueError, match=r"'lookup', 'weather'"):
        ChatReContext().bind_tools([lookup, weather], tool_choice="search")


def test_bind_tools_converts_every_kind_of_tool() -> None:
    schema = {"title": "Ping", "description": "Ping a host.", "type": "object", "properties": {}}
    bound = ChatReContext().bind_tools([lookup, weather, Captain, schema], tool_choice="any", strict=True)
    tools = bound.kwargs["tools"]  # type: ignore[attr-defined]
    assert [t["function"]["name"] for t in tools] == ["lookup", "weather", "Captain", "Ping"]
    assert all(t["type"] == "function" and t["function"]["strict"] is True for t in tools)
    assert tools[0]["function"]["parameters"]["properties"] == {"query": {"type": "string"}}
    assert bound.kwargs["tool_choice"] == "required"  # type: ignore[attr-defined]


def test_a_tool_the_engine_cannot_take_fails_at_bind_time() -> None:
    bad = {"type": "function", "function": {"name": "has spaces", "parameters": {"type": "object"}}}
    with pytest.raises(ValueError, match="tool name"):
        ChatReContext().bind_tools([bad])


def test_structured_output_binds_the_schema() -> None:
    llm = ChatReContext()
    bound = llm.with_structured_output(Captain).first  # type: ignore[attr-defined]
    assert bound.kwargs["json_schema"] == convert_to_json_schema(Captain)
    strict = llm.with_structured_output(CaptainDict, strict=True).first  # type: ignore[attr-defined]
    assert strict.kwargs["json_schema"]["additionalProperties"] is False
    mode = llm.with_structured_output(Captain, method="json_mode").first  # type: ignore[attr-defined]
    assert mode.kwargs["json_schema"] == {"type": "object"}
    calling = llm.with_structured_output(Captain, method="function_calling").first  # type: ignore[attr-defined]
    assert calling.kwargs["tool_choice"] == "Captain" and calling.kwargs["parallel_tool_calls"] is False
    with pytest.raises(ValueError, match="strict"):
        llm.with_structured_output(Captain, method="json_mode", strict=True)
    with pytest.raises(ValueError, match="unknown method"):
        llm.with_structured_output(Captain, method="xml")  # type: ignore[arg-type]


def test_earlier_tool_calls_and_results_reach_the_model_as_text() -> None:
    call = {"name": "lookup", "args": {"query": "Halcyon"}, "id": "call_1", "type": "tool_call"}
    messages = [
        HumanMessage("Who captained the Halcyon?"),
        AIMessage(
            [{"type": "text", "text": "Let me look."}, {"type": "tool_use", "id": "call_1"}],
            tool_calls=[call],
        ),
        AIMessage("", tool_calls=[call, {**call, "id": "call_2"}]),
        ToolMessage([{"type": "text", "text": FACT}], tool_call_id="call_1"),
    ]
    rendered = format_tool_call("lookup", {"query": "Halcyon"})
    assert as_dicts(messages)[1:] == [
        {"role": "assistant", "content": f"Let me look.\n{rendered}"},
        {"role": "assistant", "content": f"{rendered}\n{rendered}"},
        {"role": "tool", "content": FACT},
    ]


# -- the adapter's side of a call (scripted engine, no model) --------------------------------------


def test_calls_come_back_as_tool_calls_invoked_and_streamed() -> None:
    engine = ScriptedEngine(pieces=["Checking."], calls=two_calls())
    bound = ChatReContext(engine=engine).bind_tools([lookup, weather])
    message = bound.invoke("Who captained the Halcyon?")
    assert message.content == "Checking."
    assert [(c["name"], c["args"], c["id"], c["type"]) for c in message.tool_calls] == [
        ("lookup", {"query": "Halcyon"}, "call_1", "tool_call"),
        ("weather", {"city": "Cork"}, "call_2", "tool_call"),
    ]
    assert message.response_metadata["finish_reason"] == "tool_calls"
    assert engine.options[0]["tool_choice"] == "auto"
    assert [t["function"]["name"] for t in engine.options[0]["tools"]] == ["lookup", "weather"]
    chunks = list(bound.stream("Who captained the Halcyon?"))
    assert all(isinstance(c, AIMessageChunk) for c in chunks)
    assert not any(c.tool_call_chunks for c in chunks[:-1]) and chunks[-1].chunk_position == "last"
    assert [(t["index"], t["id"]) for t in chunks[-1].tool_call_chunks] == [(0, "call_1"), (1, "call_2")]
    full = chunks[0]
    for chunk in chunks[1:]:
        full = full + chunk
    assert full.tool_calls == message.tool_calls


async def test_async_calls_come_back_too() -> None:
    bound = ChatReContext(engine=ScriptedEngine(calls=two_calls()[:1])).bind_tools(
        [lookup], tool_choice="any"
    )
    message = await bound.ainvoke("Who captained the Halcyon?")
    assert message.tool_calls[0]["args"] == {"query": "Halcyon"}
    full = None
    async for chunk in bound.astream("Who captained the Halcyon?"):
        full = chunk if full is None else full + chunk
    assert isinstance(full, AIMessageChunk) and full.tool_calls == message.tool_calls


def test_parallel_tool_calls_false_keeps_the_first_call() -> None:
    engine = ScriptedEngine(calls=two_calls())
    message = (
        ChatReContext(engine=engine).bind_tools([lookup, weather], parallel_tool_calls=False).invoke("Hi")
    )
    assert [c["name"] for c in message.tool_calls] == ["lookup"]
    assert "parallel_tool_calls" not in engine.options[0]  # the adapter's option, not the engine's


def test_a_forced_call_cut_off_shows_its_text() -> None:
    cut = '{"name": "lookup", "arguments": {"query": "Hal'
    engine = ScriptedEngine(text=cut)  # the engine streams nothing of a forced call
    message = ChatReContext(engine=engine).bind_tools([lookup], tool_choice="lookup").invoke("Hi")
    assert message.content == cut and message.tool_calls == []


def test_include_raw_returns_the_parsing_error() -> None:
    engine = ScriptedEngine(pieces=['{"name": "Mary', ' Doyle"'])  # cut off before "ship"
    out = ChatReContext(engine=engine).with_structured_output(Captain, include_raw=True).invoke("Who?")
    assert isinstance(out["raw"], AIMessage) and out["raw"].content == '{"name": "Mary Doyle"'
    assert out["parsed"] is None and out["parsing_error"] is not None
    assert engine.options[0]["json_schema"] == convert_to_json_schema(Captain)


def test_function_calling_method_parses_the_call() -> None:
    args = {"name": "Mary Doyle", "ship": "Halcyon"}
    engine = ScriptedEngine(calls=[ToolCall("Captain", args)])
    chat = ChatReContext(engine=engine).with_structured_output(Captain, method="function_calling")
    assert chat.invoke("Who?") == Captain(**args)
    assert engine.options[0]["tool_choice"] == "Captain"
    llm = ChatReContext(engine=ScriptedEngine(calls=[ToolCall("CaptainDict", args)]))
    out = llm.with_structured_output(CaptainDict, method="function_calling", include_raw=True).invoke("Who?")
    assert out["parsed"] == args and out["parsing_error"] is None


# -- the embedded model ----------------------------------------------------------------------------

CONTEXT_QUESTION = f"Context: The Kestrel left Gdansk. {FACT} The Eider carried wool.\nQuestion: "


@pytest.mark.model
def test_forced_call_over_context_is_a_valid_call(engine: Any) -> None:
    bound = ChatReContext(engine=engine, max_tokens=32).bind_tools([lookup, weather], tool_choice="lookup")
    question = CONTEXT_QUESTION + "Who captained the Halcyon?"
    message = bound.invoke(question)
    assert (
        message.response_metadata["replayed"] and message.response_metadata["finish_reason"] == "tool_calls"
    )
    [call] = message.tool_calls
    assert (
        call["name"] == "lookup" and set(call["args"]) == {"query"} and isinstance(call["args"]["query"], str)
    )
    assert call["id"].startswith("call_") and call["type"] == "tool_call"
    full = None
    for chunk in bound.stream(question):
        full = chunk if full is None else full + chunk
    assert isinstance(full, AIMessageChunk)
    assert [(c["name"], c["args"]) for c in full.tool_calls] == [(call["name"], call["args"])]


@pytest.mark.model
def test_tool_result_round_trip_answers_from_the_tool_output(engine: Any) -> None:
    llm = ChatReContext(engine=engine, max_tokens=12).bind_tools([lookup], tool_choice="none")
    call = {"name": "lookup", "args": {"query": "Halcyon"}, "id": "call_1", "type": "tool_call"}
    for content in (FACT, [{"type": "text", "text": FACT}]):
        messages = [
            HumanMessage("Who captained the Halcyon?"),
            AIMessage("", tool_calls=[call]),
            ToolMessage(content, tool_call_id="call_1", name="lookup"),
        ]
        answer = llm.invoke(messages)
        assert isinstance(answer, AIMessage) and not answer.tool_calls
        assert answer.response_metadata["replayed"]
        evidence = answer.response_metadata["evidence"]
        assert evidence and {e["message_index"] for e in evidence} <= {1, 2}
        assert FACT in [e["text"] for e in evidence if e["message_index"] == 2]


@pytest.mark.model
@pytest.mark.parametrize(
    "schema", [Captain, CaptainDict, Captain.model_json_schema()], ids=["pydantic", "typeddict", "json"]
)
def test_structured_output_is_a_schema_valid_object(engine: Any, schema: Any) -> None:
    llm = ChatReContext(engine=engine, max_tokens=32)
    out = llm.with_structured_output(schema, include_raw=True).invoke(
        CONTEXT_QUESTION + "Who captained which ship?"
    )
    assert out["parsing_error"] is None
    parsed = out["parsed"]
    data = parsed.model_dump() if isinstance(parsed, BaseModel) else parsed
    Captain.model_validate(data)  # both fields, strings, nothing else
    assert set(data) == {"name", "ship"}
    assert json.loads(out["raw"].content) == data


@pytest.mark.model
def test_structured_output_streams_growing_objects(engine: Any) -> None:
    llm = ChatReContext(engine=engine, max_tokens=32)
    chunks = list(
        llm.with_structured_output(CaptainDict).stream(CONTEXT_QUESTION + "Who captained which ship?")
    )
    assert len(chunks) > 1 and all(isinstance(c, dict) for c in chunks)
    assert set(chunks[-1]) == {"name", "ship"}
