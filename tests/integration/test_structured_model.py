"""Constrained answers on the embedded SmolLM2-135M-Instruct: JSON under a schema, tool calls,
citations; the evidence is selected as without the constraint."""

from __future__ import annotations

import json

import pytest
from pydantic import BaseModel

from recontext_engine import InputError

pytestmark = pytest.mark.model

LOG = (
    "The Halcyon left Cork on 3 May 1851 carrying coffee sacks. Her captain was Mary Doyle. "
    "The crew numbered ten. A storm off Fastnet broke her mainmast. She reached Boston on 20 June."
)
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather in a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "ship_registry",
            "description": "A ship's registry record, by the ship's name",
            "parameters": {
                "type": "object",
                "properties": {"ship": {"type": "string"}, "year": {"type": "integer"}},
                "required": ["ship", "year"],
            },
        },
    },
]


class Voyage(BaseModel):
    captain: str
    crew: int
    arrived: bool


def test_the_answer_is_json_valid_under_the_schema(engine):
    result = engine.answer(
        LOG, "Who was the captain, how big was the crew?", json_schema=Voyage.model_json_schema()
    )
    voyage = Voyage.model_validate_json(result.text)
    assert result.parsed == voyage.model_dump()
    assert result.finish_reason == "stop"
    assert result.evidence  # replay ran as usual


def test_the_constraint_applies_to_the_answer_only(engine):
    plain = engine.select_evidence(LOG, "Who was the captain?")
    constrained = engine.select_evidence(LOG, "Who was the captain?", json_schema=Voyage.model_json_schema())
    assert constrained == plain


def test_any_json_object_and_the_streamed_pieces_make_the_text(engine):
    stream = engine.stream(
        LOG, "Where did the Halcyon arrive?", json_schema={"type": "object"}, max_new_tokens=40
    )
    pieces = list(stream)
    assert stream.result is not None
    assert "".join(pieces) == stream.result.text
    if stream.result.finish_reason == "stop":
        assert isinstance(json.loads(stream.result.text), dict)


@pytest.mark.parametrize("choice", ["required", "ship_registry"])
def test_a_required_call_is_one_valid_call(engine, choice):
    stream = engine.stream(LOG, "Find the registry record of the Halcyon.", tools=TOOLS, tool_choice=choice)
    assert list(stream) == []  # a call is not text
    result = stream.result
    assert result is not None and result.finish_reason == "tool_calls" and result.text == ""
    (call,) = result.tool_calls
    assert call.name in {"get_weather", "ship_registry"} and (choice == "required" or call.name == choice)
    required = next(t for t in TOOLS if t["function"]["name"] == call.name)["function"]["parameters"][
        "required"
    ]
    assert set(required) <= set(call.arguments)
    if call.name == "ship_registry":
        assert isinstance(call.arguments["year"], int)


def test_plain_chat_takes_tools_too(engine):
    result = engine.chat(
        [{"role": "user", "content": "What is the weather in Paris?"}], tools=TOOLS, tool_choice="get_weather"
    )
    assert [c.name for c in result.tool_calls] == ["get_weather"]
    assert isinstance(result.tool_calls[0].arguments["city"], str)


def test_auto_tool_choice_answers_in_text_or_calls(engine):
    stream = engine.stream(LOG, "Who was the captain?", tools=TOOLS, max_new_tokens=40)
    shown = "".join(stream)
    result = stream.result
    assert result is not None
    assert "<tool_call>" not in shown
    if result.tool_calls:
        assert result.finish_reason == "tool_calls"
    else:
        assert shown == result.text


def test_an_answer_cites_the_replayed_sentences_it_rests_on(engine):
    result = engine.answer(LOG, "Where did the Halcyon arrive?", cite_evidence=True, max_new_tokens=80)
    assert set(result.parsed) == {"answer", "evidence_ids"}
    assert all(1 <= i <= len(result.evidence) for i in result.parsed["evidence_ids"])
    assert all(e in result.evidence for e in result.citations)


def test_a_schema_that_cannot_be_enforced_is_refused_before_any_work(engine, prefill_counts):
    with pytest.raises(InputError, match="cannot be enforced"):
        engine.answer(LOG, "Who?", json_schema={"type": "object", "properties": {"a": {"type": "bogus"}}})
    assert prefill_counts == []
