"""The long-session generator of the session benchmark: seeded, sized, one place for the fact (no model)."""

from __future__ import annotations

import json

import pytest

from recontext_engine.bench.sessions import (
    KINDS,
    TOOL_NAMES,
    SessionConfig,
    estimate_tokens,
    make_session,
    make_sessions,
    mentions,
    message_text,
)


@pytest.fixture(scope="module")
def sessions():
    return make_sessions(24, seed=11)


def test_the_same_seed_gives_the_same_sessions_and_another_seed_others():
    first, again = make_sessions(6, seed=7), make_sessions(6, seed=7)
    assert first == again
    assert [s.messages for s in first] == [s.messages for s in again]
    assert make_session(3, 7) == first[3]  # a session does not depend on those before it
    other = make_sessions(6, seed=8)
    assert [s.messages for s in other] != [s.messages for s in first]


def test_sizes_are_in_range(sessions):
    config = SessionConfig()
    for s in sessions:
        assert config.min_messages <= len(s.messages) <= config.max_messages
        recount = sum(estimate_tokens(message_text(m)) + config.per_message_tokens for m in s.messages)
        assert s.tokens == recount
        assert 0.95 * config.min_tokens <= s.tokens <= 1.12 * config.max_tokens
    # more messages, more tokens
    by_size = sorted(sessions, key=lambda s: len(s.messages))
    assert by_size[0].tokens < by_size[-1].tokens


def test_scale_and_explicit_sizes():
    small = make_sessions(8, seed=1, scale=0.25)
    assert all(12 <= len(s.messages) <= 75 for s in small)
    assert all(s.tokens <= 1.2 * 1500 for s in small)
    fixed = make_sessions(4, seed=1, min_messages=50, max_messages=50)
    assert {len(s.messages) for s in fixed} == {50}


def test_counting_with_another_tokenizer_sizes_by_it():
    words = make_sessions(2, seed=3, count_tokens=lambda text: len(text.split()))
    assert all(s.tokens == sum(len(message_text(m).split()) + 10 for m in s.messages) for s in words)


def test_kinds_come_in_turn(sessions):
    assert [s.kind for s in sessions[:8]] == [*KINDS, *KINDS]
    only = make_sessions(3, seed=2, kinds=("superseded",))
    assert {s.kind for s in only} == {"superseded"}


def test_the_fact_message_states_the_answer_and_no_other_message_does(sessions):
    roles = {"spec": "user", "superseded": "user", "path": "tool", "tool_value": "tool"}
    for s in sessions:
        texts = [message_text(m) for m in s.messages]
        assert mentions(texts[s.fact_message], s.answer), (s.kind, s.topic)
        assert [i for i, t in enumerate(texts) if mentions(t, s.answer)] == [s.fact_message]
        assert s.messages[s.fact_message]["role"] == roles[s.kind]
        assert not mentions(s.question, s.answer)
        if s.kind != "superseded":
            assert s.superseded_answer is None and s.superseded_message is None
            assert s.fact_message < 0.4 * len(s.messages) + 2  # stated early


def test_a_superseded_fact_holds_the_old_value_before_and_the_new_one_at_the_fact(sessions):
    superseded = [s for s in sessions if s.kind == "superseded"]
    assert len(superseded) == 6
    for s in superseded:
        old, at = s.superseded_answer, s.superseded_message
        assert old is not None and at is not None and old.lower() != s.answer.lower()
        assert at < s.fact_message
        assert mentions(s.messages[at]["content"], old) and not mentions(s.messages[at]["content"], s.answer)
        assert mentions(s.messages[s.fact_message]["content"], s.answer)
        holding_old = [i for i, m in enumerate(s.messages) if mentions(message_text(m), old)]
        assert set(holding_old) <= {at, s.fact_message} and at in holding_old


def test_tool_results_follow_their_calls(sessions):
    for s in sessions:
        messages = s.messages
        assert messages[0]["role"] == "user" and messages[-1]["role"] == "assistant"
        for i, m in enumerate(messages):
            assert m["role"] in ("user", "assistant", "tool")
            assert isinstance(m["content"], str)
            for call in m.get("tool_calls", []):
                assert m["role"] == "assistant" and call["type"] == "function"
                assert call["function"]["name"] in TOOL_NAMES
                assert isinstance(json.loads(call["function"]["arguments"]), dict)
                result = messages[i + 1]
                assert result["role"] == "tool" and result["tool_call_id"] == call["id"]
            if m["role"] == "tool":
                calls = messages[i - 1].get("tool_calls", [])
                assert [c["id"] for c in calls] == [m["tool_call_id"]]
                assert m["content"].strip()
        ids = [c["id"] for m in messages for c in m.get("tool_calls", [])]
        assert len(ids) == len(set(ids))


def test_the_question_is_not_in_the_history(sessions):
    for s in sessions:
        assert s.question not in [m["content"] for m in s.messages]
        prompt = s.prompt_messages()
        assert prompt[:-1] == s.messages and prompt[-1] == {"role": "user", "content": s.question}
        prompt[0]["content"] = "changed"
        assert s.messages[0]["content"] != "changed"  # copies


def test_langchain_reads_every_session(sessions):
    messages_module = pytest.importorskip("langchain_core.messages")
    for s in sessions:
        converted = messages_module.convert_to_messages(s.prompt_messages())
        assert len(converted) == len(s.messages) + 1 and converted[-1].type == "human"
        for original, message in zip(s.messages, converted):
            if original.get("tool_calls"):
                call = original["tool_calls"][0]
                assert message.type == "ai" and message.tool_calls[0]["id"] == call["id"]
                assert message.tool_calls[0]["args"] == json.loads(call["function"]["arguments"])
            elif original["role"] == "tool":
                assert message.type == "tool" and message.tool_call_id == original["tool_call_id"]


def test_the_benchmark_tools_take_the_generated_calls_arguments(sessions):
    pytest.importorskip("langchain")
    from recontext_integrations.langchain.session_bench import TOOLS

    assert tuple(t.name for t in TOOLS) == TOOL_NAMES
    schemas = {t.name: t for t in TOOLS}
    for s in sessions:
        for m in s.messages:
            for call in m.get("tool_calls", []):
                arguments = json.loads(call["function"]["arguments"])
                assert set(arguments) == set(schemas[call["function"]["name"]].args)


def test_mentions_matches_whole_values_only():
    assert mentions("Retention is now 45 days.", "45")
    assert not mentions("took 1450ms", "45")
    assert mentions("ERROR worker-17 killed", "WORKER-17")
    assert not mentions("worker-171 killed", "worker-17")
    assert mentions("s3://kestrel-prod-1234.", "kestrel-prod-1234")
    assert not mentions("anything", "")


@pytest.mark.parametrize(
    "settings",
    [
        {"kinds": ("nope",)},
        {"kinds": ()},
        {"scale": 0},
        {"min_messages": 4},
        {"min_tokens": 9, "max_tokens": 5},
    ],
)
def test_bad_sizes_are_refused(settings):
    with pytest.raises(ValueError):
        SessionConfig(**settings)
