"""The structured-output benchmark's prompts, scoring and report, without a model."""

from __future__ import annotations

from recontext_engine.bench.structured import (
    SCHEMAS,
    TOOL_REQUESTS,
    TOOLS,
    Outcome,
    _fields_question,
    _valid,
    report,
    summarize,
)
from recontext_engine.config import GenerationConfig


def test_every_schema_and_tool_can_be_enforced_and_every_request_names_a_tool():
    for schema in SCHEMAS:
        GenerationConfig(json_schema=schema)  # raises if the grammar cannot be built
    GenerationConfig(tools=TOOLS, tool_choice="required")
    names = {tool["name"] for tool in TOOLS}
    assert {expected for _, expected in TOOL_REQUESTS} == names
    assert len(TOOL_REQUESTS) == 20


def test_validity_is_the_schema_s():
    schema = SCHEMAS[1]  # answer + confident
    assert _valid({"answer": "x", "confident": True}, schema)
    assert not _valid({"answer": "x"}, schema)
    assert not _valid({"answer": "x", "confident": "yes"}, schema)
    assert '"answer", "confident"' in _fields_question("Who?", schema)


def test_summary_rates_and_the_cost_ratio():
    outcomes = [
        Outcome("objects-constrained", 0, True, "stop", 10, 0.2),
        Outcome("objects-constrained", 1, True, "stop", 10, 0.2),
        Outcome("objects-unconstrained", 0, False, "length", 20, 0.2),
        Outcome("objects-unconstrained", 1, True, "stop", 20, 0.2),
        Outcome(
            "tools-required", 0, True, "tool_calls", 8, 0.1, called="get_weather", expected="get_weather"
        ),
        Outcome("tools-required", 1, True, "tool_calls", 8, 0.1, called="send_email", expected="get_weather"),
    ]
    by_arm = {s.arm: s for s in summarize(outcomes)}
    assert (
        by_arm["objects-constrained"].valid_rate == 1.0 and by_arm["objects-constrained"].ms_per_token == 20.0
    )
    assert by_arm["objects-unconstrained"].valid_rate == 0.5 and by_arm["objects-unconstrained"].cut_off == 1
    assert by_arm["tools-required"].right_tool_rate == 0.5 and by_arm["tools-required"].call_rate == 1.0
    assert by_arm["objects-constrained"].right_tool_rate is None
    text = report(list(by_arm.values()), "m", 60)
    assert "| objects-constrained | 2 | 100% | 0 | - | - | 20.0 |" in text
    assert "x2.00 per token" in text
