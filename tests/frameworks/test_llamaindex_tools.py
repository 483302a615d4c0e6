"""ReContextLLM as a LlamaIndex FunctionCallingLLM: tools, agents and structured output.

The plumbing (tool dicts, tool_choice, calls in and out of messages, streaming) runs on a scripted
engine; the embedded model runs structured output, ``predict_and_call`` and a ``FunctionAgent``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("llama_index.core")

from llama_index.core.agent.workflow import FunctionAgent, ToolCall, ToolCallResult  # noqa: E402
from llama_index.core.base.llms.types import (  # noqa: E402
    ChatMessage,
    ChatResponse,
    MessageRole,
    TextBlock,
    ToolCallBlock,
)
from llama_index.core.llms.function_calling import FunctionCallingLLM  # noqa: E402
from llama_index.core.prompts import PromptTemplate  # noqa: E402
from llama_index.core.tools import FunctionTool  # noqa: E402
from llama_index.core.types import PydanticProgramMode  # noqa: E402
from pydantic import BaseModel  # noqa: E402

import recontext_engine  # noqa: E402
from recontext_engine import (  # noqa: E402
    Evidence,
    ReplayConfig,
    ReplayResult,
    ReplayStream,
    ToolSpec,
    Usage,
    format_tool_call,
)
from recontext_integrations.llama_index import ReContextEvidenceEvent, ReContextLLM  # noqa: E402


def lookup_captain(ship: str) -> str:
    """Look up who captained a ship."""
    return f"The {ship} was captained by Mary Doyle."


def list_ships() -> str:
    """List the ships in the harbour."""
    return "Halcyon, Kestrel"


LOOKUP = FunctionTool.from_defaults(lookup_captain)
SHIPS = FunctionTool.from_defaults(list_ships)


class Ship(BaseModel):
    """A ship and its captain."""

    ship: str
    captain: str


class ScriptedEngine:
    """Stands in for ReContextEngine: answers with the given pieces, calls and parsed JSON, and
    records what each call read (the chat messages, or the replayed documents and question)."""

    model_name = "scripted"
    context_window = 4096

    def __init__(self, pieces: tuple[str, ...] = ("Hi",), calls: tuple[tuple[str, dict], ...] = ()) -> None:
        self.default_config = ReplayConfig()
        self.pieces, self.calls, self.parsed = pieces, calls, None
        self.log: list[dict[str, Any]] = []

    def _stream(self, config: ReplayConfig, evidence: list[Evidence]) -> ReplayStream:
        def run() -> Iterator[str]:
            yield from self.pieces
            calls = [recontext_engine.ToolCall(name, args) for name, args in self.calls]
            stream.result = ReplayResult(
                text="".join(self.pieces),
                evidence=evidence,
                usage=Usage(3, len(self.pieces)),
                model=self.model_name,
                finish_reason="tool_calls" if calls else "stop",
                tool_calls=calls,
                parsed=self.parsed,
            )

        stream = ReplayStream(run())
        return stream

    def stream_chat(self, messages: list[dict[str, str]], config: ReplayConfig) -> ReplayStream:
        self.log.append({"messages": list(messages), "config": config})
        return self._stream(config, [])

    def stream(
        self, documents: list[str], question: str, config: ReplayConfig, on_evidence: Any = None
    ) -> ReplayStream:
        self.log.append({"documents": list(documents), "question": question, "config": config})
        last = documents[-1]
        evidence = [Evidence(last[:12], len(documents) - 1, 0, 12, 1.0, 1)]
        if on_evidence is not None:
            on_evidence(evidence)
        return self._stream(config, evidence)


def _llm(engine: Any, **settings: Any) -> ReContextLLM:
    return ReContextLLM(engine=engine, **settings)


# -- the function-calling plumbing (scripted engine) --------------------------------------------


def test_is_a_function_calling_llm():
    llm = _llm(ScriptedEngine())
    assert isinstance(llm, FunctionCallingLLM) and llm.metadata.is_function_calling_model


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({}, "auto"),
        ({"tool_required": True}, "required"),
        ({"tool_choice": "none"}, "none"),
        ({"tool_required": True, "tool_choice": "list_ships"}, "list_ships"),
    ],
)
def test_prepare_chat_with_tools_offers_the_tools(options, expected):
    llm = _llm(ScriptedEngine())
    history = [ChatMessage(role="system", content="Be brief.")]
    prepared = llm._prepare_chat_with_tools([LOOKUP, SHIPS], "Who?", chat_history=history, **options)
    assert [m.content for m in prepared["messages"]] == ["Be brief.", "Who?"] and len(history) == 1
    assert prepared["tools"] == [LOOKUP.metadata.to_openai_tool(), SHIPS.metadata.to_openai_tool()]
    assert prepared["tool_choice"] == expected
    assert "tools" not in llm._prepare_chat_with_tools([], "Who?")


def test_chat_with_tools_passes_tools_and_returns_tool_call_blocks():
    engine = ScriptedEngine(pieces=(), calls=(("lookup_captain", {"ship": "Halcyon"}), ("list_ships", {})))
    llm = _llm(engine)
    response = llm.chat_with_tools([LOOKUP, SHIPS], "Who captained the Halcyon?", tool_required=True)
    generation = engine.log[-1]["config"].generation
    assert generation.tools == (
        ToolSpec.from_dict(LOOKUP.metadata.to_openai_tool()),
        ToolSpec.from_dict(SHIPS.metadata.to_openai_tool()),
    )
    assert generation.tool_choice == "required"
    # allow_parallel_tool_calls=False (the default): only the first call is kept
    (selection,) = llm.get_tool_calls_from_response(response)
    assert (selection.tool_name, selection.tool_kwargs) == ("lookup_captain", {"ship": "Halcyon"})
    assert selection.tool_id.startswith("call_")
    assert response.message.content == "" and response.raw["finish_reason"] == "tool_calls"
    both = llm.chat_with_tools([LOOKUP, SHIPS], "Who?", allow_parallel_tool_calls=True)
    assert [s.tool_name for s in llm.get_tool_calls_from_response(both)] == ["lookup_captain", "list_ships"]
    assert [c["name"] for c in both.additional_kwargs["tool_calls"]] == ["lookup_captain", "list_ships"]


def test_no_tool_call_is_an_error_only_when_asked():
    llm = _llm(ScriptedEngine(pieces=("No call.",)))
    response = llm.chat_with_tools([LOOKUP], "Who?")
    assert llm.get_tool_calls_from_response(response, error_on_no_tool_call=False) == []
    with pytest.raises(ValueError, match="tool call"):
        llm.get_tool_calls_from_response(response)
    cut = ChatResponse(message=response.message, raw={"finish_reason": "length"})
    with pytest.raises(ValueError, match="raise max_tokens"):
        llm.get_tool_calls_from_response(cut)


def test_calls_in_openai_form_are_read_too():
    message = ChatMessage(
        role="assistant",
        content="",
        additional_kwargs={
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "lookup_captain", "arguments": '{"ship": "Eider"}'},
                }
            ]
        },
    )
    llm = _llm(ScriptedEngine())
    (selection,) = llm.get_tool_calls_from_response(ChatResponse(message=message))
    assert (selection.tool_id, selection.tool_name, selection.tool_kwargs) == (
        "c1",
        "lookup_captain",
        {"ship": "Eider"},
    )


def test_stream_chat_with_tools_carries_the_calls_on_the_last_delta():
    engine = ScriptedEngine(pieces=("Let ", "me look."), calls=(("list_ships", {}),))
    llm = _llm(engine)
    chunks = list(llm.stream_chat_with_tools([SHIPS], "Which ships?"))
    assert [llm.get_tool_calls_from_response(c, error_on_no_tool_call=False) != [] for c in chunks] == [
        False,
        True,
    ]
    assert "".join(c.delta for c in chunks) == chunks[-1].message.content == "Let me look."

    async def collect() -> list[Any]:
        stream = await llm.astream_chat_with_tools([SHIPS], "Which ships?")
        return [c async for c in stream]

    last = asyncio.run(collect())[-1]
    assert [s.tool_name for s in llm.get_tool_calls_from_response(last)] == ["list_ships"]


def test_calls_and_tool_results_going_in():
    """An assistant turn's calls are written out for the chat template; a tool result is a "tool"
    turn; the replay split reads the results as context, not the call markup."""
    block_call = ChatMessage(
        role="assistant",
        blocks=[
            TextBlock(text="Checking."),
            ToolCallBlock(tool_call_id="c1", tool_name="list_ships", tool_kwargs={}),
        ],
    )
    openai_call = ChatMessage(
        role="assistant",
        content=None,
        additional_kwargs={
            "tool_calls": [
                {"id": "c2", "function": {"name": "lookup_captain", "arguments": '{"ship": "Halcyon"}'}}
            ]
        },
    )
    result = ChatMessage(role=MessageRole.TOOL, content="The Halcyon was captained by Mary Doyle.")
    engine = ScriptedEngine()
    llm = _llm(engine, history_as_context=False)
    llm.chat(
        [ChatMessage(role="user", content="Who captained the Halcyon?"), block_call, result, openai_call]
    )
    sent = engine.log[-1]["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "tool", "assistant"]
    assert sent[1]["content"] == "Checking.\n" + format_tool_call("list_ships", {})
    assert sent[2]["content"] == result.content
    assert sent[3]["content"] == format_tool_call("lookup_captain", {"ship": "Halcyon"})
    # with history as context (the default) the tool result is replayed, the call markup is not
    replaying = _llm(engine)
    response = replaying.chat(
        [ChatMessage(role="user", content="Who captained the Halcyon?"), block_call, result]
    )
    assert engine.log[-1]["documents"] == ["Checking.", result.content]
    assert engine.log[-1]["question"] == "Who captained the Halcyon?"
    assert response.additional_kwargs["evidence"][0]["message_index"] == 2


def test_structured_predict_constrains_to_the_schema():
    engine = ScriptedEngine(pieces=('{"ship": "Halcyon", "captain": "Mary Doyle"}',))
    engine.parsed = {"ship": "Halcyon", "captain": "Mary Doyle"}
    llm = _llm(engine)
    prompt = PromptTemplate("Context: {text}\nQuestion: Which ship and captain?")
    ship = llm.structured_predict(Ship, prompt, llm_kwargs={"tool_choice": "auto"}, text="Mary Doyle ...")
    assert ship == Ship(ship="Halcyon", captain="Mary Doyle")
    generation = engine.log[-1]["config"].generation
    assert generation.json_schema == Ship.model_json_schema() and generation.tools == ()
    engine.parsed = None  # the token limit cut the JSON off
    with pytest.raises(ValueError, match="cut off"):
        llm.structured_predict(Ship, prompt, text="Mary Doyle ...")


# -- on the embedded model ------------------------------------------------------------------------


FILLER = " ".join(f"Berth {i} held a coal barge from Wales on day {i}." for i in range(30))
FACT = "The schooner Halcyon was captained by Mary Doyle."


def read_harbour_log() -> str:
    """Read the full harbour log."""
    return f"{FILLER} {FACT} {FILLER}"


@pytest.fixture(scope="module")
def llm(engine):
    return ReContextLLM(engine=engine, max_tokens=24, replay_options={"rounds": 1, "top_k": 3})


SHIP_PROMPT = PromptTemplate("Context: {text}\nQuestion: Which ship, and who captained it?")
SHIP_TEXT = "The Halcyon sailed from Cork in 1851. Mary Doyle captained the Halcyon."


@pytest.mark.model
def test_structured_output_on_the_model(llm):
    ship = llm.structured_predict(Ship, SHIP_PROMPT, text=SHIP_TEXT)
    assert isinstance(ship, Ship) and ship.ship and ship.captain
    partials = list(llm.stream_structured_predict(Ship, SHIP_PROMPT, text=SHIP_TEXT))
    assert len(partials) > 1 and partials[-1] == ship  # greedy: the same JSON, streamed
    assert asyncio.run(llm.astructured_predict(Ship, SHIP_PROMPT, text=SHIP_TEXT)) == ship

    async def last_partial() -> Any:
        return [p async for p in await llm.astream_structured_predict(Ship, SHIP_PROMPT, text=SHIP_TEXT)][-1]

    assert asyncio.run(last_partial()) == ship
    structured = llm.as_structured_llm(Ship)
    reply = structured.chat([ChatMessage(role="user", content=SHIP_PROMPT.format(text=SHIP_TEXT))])
    assert Ship.model_validate_json(reply.message.content) == reply.raw == ship


@pytest.mark.model
def test_other_program_modes_are_llama_index_own(llm):
    function_mode = llm.model_copy(update={"pydantic_program_mode": PydanticProgramMode.FUNCTION})
    # FunctionCallingProgram: a required call of the class's tool, constrained to its schema
    ship = function_mode.structured_predict(Ship, SHIP_PROMPT, llm_kwargs={"max_tokens": 48}, text=SHIP_TEXT)
    assert isinstance(ship, Ship)


@pytest.mark.model
def test_predict_and_call_returns_the_tool_output(llm):
    response = llm.predict_and_call([LOOKUP], "Who captained the Halcyon?", max_tokens=32)
    (source,) = response.sources
    assert source.tool_name == "lookup_captain" and not source.is_error
    assert response.response == source.content and source.content.endswith("captained by Mary Doyle.")


@pytest.mark.model
def test_function_agent_calls_the_tool_then_answers_from_its_output(llm, recorder):
    tool = FunctionTool.from_defaults(read_harbour_log)
    agent = FunctionAgent(tools=[tool], llm=llm, initial_tool_choice="read_harbour_log", streaming=False)

    async def run() -> tuple[list[Any], Any]:
        run_handler = agent.run("Who captained the Halcyon?", max_iterations=4)
        events = [e async for e in run_handler.stream_events() if isinstance(e, ToolCall | ToolCallResult)]
        return events, await run_handler

    events, output = asyncio.run(run())
    calls = [e for e in events if type(e) is ToolCall]
    results = [e for e in events if isinstance(e, ToolCallResult)]
    assert [c.tool_name for c in calls] == ["read_harbour_log"]
    assert results[0].tool_output.content == read_harbour_log()
    assert output.response.role == MessageRole.ASSISTANT and output.response.content.strip()
    evidence = output.raw["evidence"]
    assert output.raw["replayed"] and evidence
    assert {e["message_index"] for e in evidence} == {2}  # [question, the call, the tool's output]
    assert all(e["text"] in read_harbour_log() for e in evidence)
    assert FACT in [e["text"] for e in evidence]
    replayed = [e for e in recorder.events if isinstance(e, ReContextEvidenceEvent)]
    assert replayed and replayed[-1].evidence == evidence
    json.dumps(output.raw)  # the raw payload stays plain JSON
