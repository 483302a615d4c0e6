"""The answer's shape without a model: tool specs, call parsing, the streamed text, schemas, settings."""

from __future__ import annotations

import json

import pytest

from recontext_engine import GenerationConfig, InputError, ReContextError, ReplayConfig, ToolSpec
from recontext_engine.config import DEFAULT_EVIDENCE_TEMPLATE
from recontext_engine.prompt import render_evidence_block, system_text, with_tools
from recontext_engine.results import Evidence, ReplayResult, Usage
from recontext_engine.structured import (
    TOOL_CALL_OPEN,
    AnswerText,
    ToolCallText,
    answer_schema,
    backend_generation,
    format_tool_call,
    parse_tool_calls,
    tool_call_schema,
)

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
SEARCH = {"name": "search_docs", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}
TOOLS = [ToolSpec.from_dict(WEATHER), ToolSpec.from_dict(SEARCH)]


def test_tools_come_from_openai_dicts_and_flat_dicts():
    weather, search = TOOLS
    assert weather.name == "get_weather" and weather.description == "Current weather in a city"
    assert weather.parameters["required"] == ["city"]
    assert search.parameters["properties"] == {"q": {"type": "string"}}
    assert ToolSpec.from_dict(weather) is weather
    assert ToolSpec.from_dict({"name": "noop"}).parameters == {"type": "object", "properties": {}}


@pytest.mark.parametrize(
    ("tool", "message"),
    [
        ({"name": "has space"}, "tool name"),
        ({"type": "retrieval", "name": "x"}, "only function tools"),
        ({"name": "x", "parameters": {"type": "array"}}, "type 'object'"),
        ({"name": "x", "parameters": {"type": "object", "properties": {"a": {"type": "bogus"}}}}, "bogus"),
        ({"name": "x", "colour": "red"}, "unknown tool field"),
        ("get_weather", "must be a dict"),
    ],
)
def test_a_bad_tool_is_one_clear_error(tool, message):
    with pytest.raises(InputError, match=message):
        ToolSpec.from_dict(tool)


def test_generation_settings_validate_the_answer_form():
    assert GenerationConfig(tools=[WEATHER], tool_choice="get_weather").forces_tool_call
    assert GenerationConfig(tools=[WEATHER], tool_choice="required").forces_tool_call
    assert not GenerationConfig(tools=[WEATHER]).forces_tool_call
    assert not GenerationConfig(tools=[WEATHER], tool_choice="none").offers_tools
    named = GenerationConfig(
        tools=[WEATHER], tool_choice={"type": "function", "function": {"name": "get_weather"}}
    )
    assert named.tool_choice == "get_weather"
    with pytest.raises(ReContextError, match="tool_choice must be one of"):
        GenerationConfig(tools=[WEATHER], tool_choice="send_email")
    with pytest.raises(ReContextError, match="needs tools"):
        GenerationConfig(tool_choice="required")
    with pytest.raises(ReContextError, match="unique"):
        GenerationConfig(tools=[WEATHER, WEATHER])
    with pytest.raises(ReContextError, match="pass one of them"):
        GenerationConfig(json_schema={"type": "object"}, cite_evidence=True)
    with pytest.raises(InputError, match="cannot be enforced"):
        GenerationConfig(json_schema={"type": "object", "properties": {"a": {"type": "bogus"}}})
    with pytest.raises(InputError, match="must be a JSON Schema object"):
        GenerationConfig(json_schema=["not", "a", "schema"])  # type: ignore[arg-type]


def test_tools_and_schema_survive_the_config_round_trip():
    config = ReplayConfig().with_options(
        tools=[WEATHER, SEARCH], tool_choice="search_docs", max_new_tokens=40
    )
    data = json.loads(json.dumps(config.to_dict()))
    assert ReplayConfig.from_dict(data) == config
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    assert (
        ReplayConfig.from_dict(
            ReplayConfig().with_options(json_schema=schema).to_dict()
        ).generation.json_schema
        == schema
    )


def test_the_backend_enforces_one_schema_per_answer_form():
    assert answer_schema(GenerationConfig(), 3) is None
    assert answer_schema(GenerationConfig(tools=TOOLS), 3) is None  # "auto": free text
    forced = answer_schema(GenerationConfig(tools=TOOLS, tool_choice="required"), 0)
    assert forced == tool_call_schema(TOOLS) and len(forced["anyOf"]) == 2
    named = answer_schema(GenerationConfig(tools=TOOLS, tool_choice="search_docs"), 0)
    assert named["properties"]["name"] == {"const": "search_docs"}
    cite = answer_schema(GenerationConfig(cite_evidence=True), 3)
    assert cite["properties"]["evidence_ids"]["items"]["enum"] == [1, 2, 3]
    plain = backend_generation(GenerationConfig(tools=TOOLS, tool_choice="required"), 0)
    assert plain.tools == () and plain.tool_choice == "auto" and plain.json_schema == forced


def test_tool_calls_parse_out_of_hermes_blocks():
    text = 'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Cork"}}\n</tool_call>'
    content, calls = parse_tool_calls(text, TOOLS)
    assert content == "Let me check."
    assert [(c.name, c.arguments) for c in calls] == [("get_weather", {"city": "Cork"})]
    assert calls[0].id.startswith("call_") and json.loads(calls[0].arguments_json) == {"city": "Cork"}
    two = text + '\n<tool_call>{"name": "search_docs", "arguments": "{\\"q\\": \\"x\\"}"}'  # cut-off end tag
    assert [c.name for c in parse_tool_calls(two, TOOLS)[1]] == ["get_weather", "search_docs"]
    assert parse_tool_calls("no calls here", TOOLS) == ("no calls here", [])
    unknown = '<tool_call>{"name": "send_email", "arguments": {}}</tool_call>'
    assert parse_tool_calls(unknown, TOOLS) == (unknown, [])  # an unknown tool stays text
    assert parse_tool_calls('{"name": "get_weather", "arguments": {"city": "Oslo"}}', TOOLS, forced=True)[1]


def test_an_earlier_call_renders_as_the_parser_reads_it():
    rendered = format_tool_call("get_weather", '{"city": "Cork"}')
    assert rendered.startswith(TOOL_CALL_OPEN)
    assert parse_tool_calls(rendered, TOOLS)[1][0].arguments == {"city": "Cork"}


def test_streamed_text_stops_before_a_tool_call_and_never_shows_part_of_the_tag():
    watch = ToolCallText()
    pieces = [watch.add(p) for p in ["The answer", " is <", "tool", "_call>", '{"name"', "}"]]
    assert "".join(pieces) == "The answer is "
    assert all("<" not in p for p in pieces)
    plain = ToolCallText()
    shown = "".join(plain.add(p) for p in ["a < b", " and <to", "day"]) + plain.rest()
    assert shown == "a < b and <today"


def test_the_answer_text_follows_the_form():
    forced = AnswerText(GenerationConfig(tools=TOOLS, tool_choice="required"))
    assert forced.add('{"name": "get_weather"') == ""
    content, calls, parsed, rest = forced.final('{"name": "get_weather", "arguments": {"city": "Cork"}}')
    assert content == "" and calls[0].arguments == {"city": "Cork"} and rest == ""
    structured = AnswerText(GenerationConfig(json_schema={"type": "object"}))
    assert structured.final('{"a": 1}')[2] == {"a": 1}
    assert structured.final('{"a": ')[2] is None  # cut off by the token limit


def test_tools_are_stated_in_the_system_message():
    config = ReplayConfig(system_prompt="Be brief.").with_options(tools=TOOLS)
    system = system_text(config)
    assert system.startswith("Be brief.") and '"name":"get_weather"' in system and TOOL_CALL_OPEN in system
    assert system_text(config.with_options(tool_choice="none")) == "Be brief."
    messages = with_tools([{"role": "user", "content": "hi"}], config)
    assert messages[0]["role"] == "system" and "get_weather" in messages[0]["content"]
    merged = with_tools([{"role": "system", "content": "S"}, {"role": "user", "content": "hi"}], config)
    assert len(merged) == 2 and merged[0]["content"].startswith("S\n\n")


def test_numbered_evidence_and_citations():
    block = render_evidence_block(["First.", "Second."], ReplayConfig(), numbered=True)
    assert "[1] First.\n[2] Second." in block
    assert render_evidence_block(["First."], ReplayConfig()) == DEFAULT_EVIDENCE_TEMPLATE.replace(
        "{evidence}", "First."
    )
    evidence = [Evidence(t, 0, 0, len(t), 1.0, 1) for t in ("a.", "b.", "c.")]
    result = ReplayResult("{}", evidence, Usage(1, 1), parsed={"answer": "x", "evidence_ids": [3, 1, 3, 9]})
    assert [e.text for e in result.citations] == ["c.", "a."]
    assert result.to_dict()["parsed"]["evidence_ids"] == [3, 1, 3, 9]


def test_schemas_that_would_stall_the_grammar_build_are_refused():
    with pytest.raises(InputError, match="repeats 9999 times"):
        GenerationConfig(
            json_schema={"type": "object", "properties": {"a": {"type": "string", "pattern": "a{9999}"}}}
        )
    with pytest.raises(InputError, match="characters"):
        GenerationConfig(json_schema={"type": "object", "description": "x" * 200_000})
    GenerationConfig(json_schema={"type": "string", "pattern": "^[a-z]{2,30}$"})


def test_a_tool_cannot_take_the_name_of_a_tool_choice_mode():
    with pytest.raises(InputError, match="cannot be named 'required'"):
        ToolSpec(name="required")


def test_a_forced_call_cut_off_is_shown_as_the_text_it_is():
    forced = AnswerText(GenerationConfig(tools=TOOLS, tool_choice="required"))
    partial = '{"name": "get_weather", "arguments": {"cit'
    assert forced.add(partial) == ""
    content, calls, _, rest = forced.final(partial)
    assert calls == [] and content == partial == rest  # streamed and whole answers agree
