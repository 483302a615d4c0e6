"""Structured answers through the server: ``response_format`` (JSON object, JSON Schema) and function
tools with ``tool_choice``, from the ``openai`` SDK and LangChain's ``ChatOpenAI`` against a real
process; the request mapping and the response objects first, without the model."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from pydantic import BaseModel, Field

from recontext_engine import ReplayConfig, ToolCall
from recontext_engine.results import Evidence, ReplayResult, Usage
from recontext_engine.serve.calls import chat_call, chat_config, shaped_config
from recontext_engine.serve.errors import APIError
from recontext_engine.serve.responses import Completion
from recontext_engine.serve.schemas import ChatCompletionRequest, parse_body

from .cases import case, evidence_slices_back
from .conftest import MODEL, running_server

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 24}},
            "required": ["city"],
        },
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "The current time in a time zone",
        "parameters": {
            "type": "object",
            "properties": {"zone": {"type": "string", "maxLength": 24}},
            "required": ["zone"],
        },
        "strict": True,
    },
}
ASK_WEATHER = [{"role": "user", "content": "What is the weather in Paris?"}]
BOGUS = {"type": "object", "properties": {"a": {"type": "bogus"}}}
BOGUS_FORMAT = {"type": "json_schema", "json_schema": {"name": "bad", "schema": BOGUS}}
NAMED_TIME = {"type": "function", "function": {"name": "get_time"}}
CALL = ToolCall("get_weather", {"city": "Paris"}, id="call_1")
EVIDENCE = [Evidence("A fact.", 0, 0, 7, 0.5, 1)]


class City(BaseModel):
    name: str = Field(max_length=16)
    sunny: bool


# -- without the model -------------------------------------------------------------------------------


def parse(**fields: Any) -> ChatCompletionRequest:
    raw = json.dumps({"messages": [{"role": "user", "content": "Hi"}], **fields}).encode()
    return parse_body(raw, ChatCompletionRequest)


def config(**fields: Any) -> ReplayConfig:
    body = parse(**fields)
    return shaped_config(chat_config(ReplayConfig(), body), body)


def refused(**fields: Any) -> APIError:
    with pytest.raises(APIError) as raised:
        config(**fields)
    assert raised.value.status == 400
    return raised.value


def test_response_formats_map_onto_the_json_schema_option() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    json_schema = {"name": "A", "schema": schema, "strict": True, "description": "An a."}

    def option(response_format: dict[str, Any]) -> Any:
        return config(response_format=response_format).generation.json_schema

    assert option({"type": "text"}) is None
    assert option({"type": "json_object"}) == {"type": "object"}
    assert option({"type": "json_schema", "json_schema": json_schema}) == schema


def test_tools_and_tool_choice_map_onto_the_engine_options() -> None:
    generation = config(tools=[WEATHER, TIME], tool_choice=NAMED_TIME, parallel_tool_calls=False).generation
    assert [t.name for t in generation.tools] == ["get_weather", "get_time"]
    assert generation.tool_choice == "get_time"
    assert generation.tools[0].parameters == WEATHER["function"]["parameters"]
    assert config(tools=[WEATHER], tool_choice="required").generation.forces_tool_call


@pytest.mark.parametrize(
    ("fields", "param", "says"),
    [
        ({"response_format": {"type": "xml"}}, "response_format", "unsupported response_format type 'xml'"),
        ({"response_format": {"type": "json_schema"}}, "response_format", "is required"),
        ({"response_format": {"type": "json_object", "schema": {}}}, "response_format", "unrecognized field"),
        ({"response_format": BOGUS_FORMAT}, "response_format", "cannot be enforced"),
        ({"tools": [WEATHER], "tool_choice": "any"}, "tool_choice", "must be 'auto', 'none', 'required'"),
        ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}},
         "tool_choice", "got 'nope'"),
        ({"tool_choice": "required"}, "tool_choice", "needs tools"),
        ({"tools": [{"type": "custom", "custom": {"name": "x"}}]}, "tools.0.type", "'function'"),
        ({"tools": [{"type": "function", "function": {"name": "a b"}}]}, "tools.0.function.name", "pattern"),
        ({"tools": [{"type": "function", "function": {"name": "f", "colour": "red"}}]},
         "tools.0.function.colour", "Unrecognized"),
        ({"tools": [WEATHER], "tool_choice": "required", "response_format": {"type": "json_object"}},
         "tool_choice", "pass one of them"),
        ({"messages": [{"role": "user", "content": "Q"}, {"role": "tool", "content": "42"}]},
         "messages.1", "tool_call_id"),
        ({"messages": [{"role": "user", "content": "Q", "tool_calls": []}]}, "messages.0", "only assistant"),
        ({"messages": [{"role": "assistant", "tool_calls": [{"id": "1", "type": "function"}]}]},
         "messages.0.tool_calls.0.function", "required"),
    ],
)  # fmt: skip
def test_bad_answer_forms_are_400s_naming_the_field(fields: dict, param: str, says: str) -> None:
    error = refused(**fields)
    assert error.param == param and says in error.message


def round_trip(arguments: str, content: str | None = None) -> list[dict[str, Any]]:
    """The question, the assistant's call of get_weather, and the tool's result."""
    call = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": arguments}}
    return [
        *ASK_WEATHER,
        {"role": "assistant", "content": content, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "Sunny, 24 C"},
    ]


def test_earlier_tool_calls_and_results_become_message_text() -> None:
    body = parse(messages=round_trip(json.dumps({"city": "Paris"})))
    plain = [m.plain() for m in body.messages]
    assert plain[1] == {
        "role": "assistant",
        "content": '<tool_call>\n{"name":"get_weather","arguments":{"city":"Paris"}}\n</tool_call>',
    }
    assert plain[2] == {"role": "tool", "content": "Sunny, 24 C"}


def test_with_documents_the_tool_results_after_the_question_join_them(engine_stub) -> None:
    body = parse(documents=["Doc one."], messages=round_trip("{}", "Let me look."))
    chat_call(engine_stub, ReplayConfig(), body)()
    documents, question = engine_stub.calls[0]
    assert documents[0] == "Doc one." and documents[-1] == "Sunny, 24 C" and len(documents) == 3
    assert question == ASK_WEATHER[0]["content"]


def test_schemas_are_compiled_in_the_worker_not_on_the_event_loop(engine_stub) -> None:
    start = chat_call(engine_stub, ReplayConfig(), parse(response_format=BOGUS_FORMAT))  # no compile yet
    with pytest.raises(APIError, match="cannot be enforced"):
        start()
    assert engine_stub.calls == []


@pytest.fixture
def engine_stub():
    class Stub:
        def __init__(self) -> None:
            self.calls: list[tuple[list[str], str]] = []

        def stream(self, documents: list[str], question: str, config: ReplayConfig) -> None:
            self.calls.append((documents, question))

    return Stub()


def test_a_tool_call_answer_is_tool_calls_with_null_content() -> None:
    result = ReplayResult("", EVIDENCE, Usage(10, 5), finish_reason="tool_calls", tool_calls=[CALL, CALL])
    choice = Completion("m").full(result)["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] is None
    assert choice["message"]["tool_calls"][0] == {
        "id": "call_1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
    }
    assert len(choice["message"]["tool_calls"]) == 2
    single = Completion("m", parallel_tool_calls=False).full(result)["choices"][0]["message"]
    assert len(single["tool_calls"]) == 1
    text = Completion("m").full(ReplayResult("Hello", [], Usage(1, 1)))["choices"][0]["message"]
    assert text == {"role": "assistant", "content": "Hello"}


@pytest.mark.parametrize("include_usage", [False, True])
def test_a_stream_sends_each_call_whole_before_the_finish_chunk(include_usage: bool) -> None:
    result = ReplayResult("", EVIDENCE, Usage(10, 5), finish_reason="tool_calls", tool_calls=[CALL])
    chunks = Completion("m").closing_chunks(result, include_usage)
    delta = chunks[0]["choices"][0]["delta"]
    function = {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    assert delta == {"tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": function}]}
    assert chunks[1]["choices"][0]["finish_reason"] == "tool_calls"
    assert [("evidence" in c) for c in chunks] == [False] * (len(chunks) - 1) + [True]


# -- a real server, the openai SDK and LangChain ---------------------------------------------------------

openai = pytest.importorskip("openai")
CASE = case(3)


@pytest.fixture(scope="module")
def server(backend):
    with running_server("--max-tokens", "8", backend=backend) as process:
        yield process


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0, timeout=300)


@pytest.mark.model
def test_parse_returns_the_pydantic_object(client) -> None:
    completion = client.chat.completions.parse(
        model=MODEL,
        messages=[{"role": "user", "content": "Paris is sunny today. Describe Paris as JSON."}],
        response_format=City,
        max_tokens=40,
        temperature=0,
    )
    choice = completion.choices[0]
    assert choice.finish_reason == "stop" and isinstance(choice.message.parsed, City)
    assert json.loads(choice.message.content) == choice.message.parsed.model_dump()
    assert completion.model_extra["replayed"] is False


@pytest.mark.model
def test_json_object_answers_with_a_json_object(client) -> None:
    completion = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Give a person's name and age as JSON."}],
        response_format={"type": "json_object"},
        max_tokens=40,
        temperature=0,
    )
    assert completion.choices[0].finish_reason == "stop"
    assert isinstance(json.loads(completion.choices[0].message.content), dict)


@pytest.mark.model
def test_a_tool_round_trip(client) -> None:
    messages: list[Any] = list(ASK_WEATHER)
    first = client.chat.completions.create(
        model=MODEL, messages=messages, tools=[WEATHER], tool_choice="required", max_tokens=30, temperature=0
    )
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_")
    assert call.function.name == "get_weather"
    assert isinstance(json.loads(call.function.arguments)["city"], str)
    # The SDK's own message object goes back as it came, then the tool's result.
    messages += [choice.message, {"role": "tool", "tool_call_id": call.id, "content": "Sunny, 24 C"}]
    second = client.chat.completions.create(
        model=MODEL, messages=messages, tools=[WEATHER], max_tokens=12, temperature=0
    )
    answer = second.choices[0]
    assert answer.finish_reason in ("stop", "length") and answer.message.content
    assert not answer.message.tool_calls
    extra = second.model_extra
    assert extra["replayed"] is True and "Sunny, 24 C" in [e["text"] for e in extra["evidence"]]


@pytest.mark.model
def test_streamed_tool_calls_assemble_and_carry_the_evidence(client) -> None:
    chunks = list(
        client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": CASE.question}],
            tools=[WEATHER, TIME],
            tool_choice={"type": "function", "function": {"name": "get_weather"}},
            parallel_tool_calls=False,
            max_tokens=64,  # over a replayed context, the 135M model spells the call out in small tokens
            temperature=0,
            stream=True,
            extra_body={"documents": CASE.documents},
        )
    )
    calls: dict[int, dict[str, str]] = {}
    for chunk in chunks:
        for delta in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            call = calls.setdefault(delta.index, {"id": "", "name": "", "arguments": ""})
            call["id"] += delta.id or ""
            call["name"] += delta.function.name or ""
            call["arguments"] += delta.function.arguments or ""
    assert list(calls) == [0] and calls[0]["name"] == "get_weather" and calls[0]["id"].startswith("call_")
    assert isinstance(json.loads(calls[0]["arguments"]), dict)
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finish == ["tool_calls"]
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == ""
    last = chunks[-1].model_extra
    assert last["replayed"] is True and evidence_slices_back(last["evidence"], CASE.documents)


@pytest.mark.model
def test_tool_choice_by_name_calls_that_tool(client) -> None:
    completion = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "What time is it in Tokyo?"}],
        tools=[WEATHER, TIME],
        tool_choice=NAMED_TIME,
        max_tokens=30,
        temperature=0,
    )
    (call,) = completion.choices[0].message.tool_calls
    assert call.function.name == "get_time" and set(json.loads(call.function.arguments)) == {"zone"}


@pytest.mark.model
@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"response_format": {"type": "xml"}}, "unsupported response_format type 'xml'"),
        ({"tools": [WEATHER], "tool_choice": NAMED_TIME}, "got 'get_time'"),
        ({"response_format": BOGUS_FORMAT}, "cannot be enforced"),
        ({"response_format": BOGUS_FORMAT, "stream": True}, "cannot be enforced"),
    ],
)
def test_bad_answer_forms_are_400s_and_the_server_still_serves(
    server, client, fields: dict, says: str
) -> None:
    def create(**more: Any) -> Any:
        return client.chat.completions.create(model=MODEL, messages=ASK_WEATHER, max_tokens=2, **more)

    with pytest.raises(openai.BadRequestError) as raised:
        create(**fields)
    error = raised.value.body
    assert raised.value.status_code == 400 and says in error["message"]
    assert error["type"] == "invalid_request_error" and error["param"] in ("response_format", "tool_choice")
    assert create().choices[0].message.content
    assert server.health()["requests"]["active"] == 0


@pytest.mark.model
def test_raw_tool_call_response_is_openais_shape(server) -> None:
    body = {"model": MODEL, "messages": ASK_WEATHER, "tools": [WEATHER], "tool_choice": "required",
            "max_tokens": 30, "temperature": 0}  # fmt: skip
    payload = httpx.post(f"{server.base_url}/chat/completions", json=body, timeout=300).json()
    message = payload["choices"][0]["message"]
    assert set(message) == {"role", "content", "tool_calls"} and message["content"] is None
    assert isinstance(message["tool_calls"][0]["function"]["arguments"], str)
    assert payload["choices"][0]["finish_reason"] == "tool_calls" and payload["replayed"] is False


def chat_openai(server, **kwargs: Any) -> Any:
    langchain_openai = pytest.importorskip("langchain_openai")
    return langchain_openai.ChatOpenAI(
        base_url=server.base_url, api_key="x", model=MODEL, temperature=0, max_retries=0, timeout=300,
        **kwargs,
    )  # fmt: skip


@pytest.mark.model
def test_langchain_with_structured_output(server) -> None:
    llm = chat_openai(server, max_tokens=40)
    city = llm.with_structured_output(City).invoke("Paris is sunny today. Describe Paris as JSON.")
    assert isinstance(city, City)


@pytest.mark.model
def test_langchain_bind_tools(server) -> None:
    def get_weather(city: str) -> str:
        """The current weather in a city."""
        return "Sunny"

    llm = chat_openai(server, max_tokens=30)
    message = llm.bind_tools([get_weather], tool_choice="get_weather").invoke("What is the weather in Paris?")
    (call,) = message.tool_calls
    assert call["name"] == "get_weather" and isinstance(call["args"]["city"], str)
    chunks = list(llm.bind_tools([get_weather], tool_choice="required").stream("Weather in Rome?"))
    streamed = sum(chunks[1:], chunks[0])
    assert [c["name"] for c in streamed.tool_calls] == ["get_weather"]
    assert isinstance(streamed.tool_calls[0]["args"]["city"], str)
