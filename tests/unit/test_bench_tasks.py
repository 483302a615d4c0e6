"""Task generators: gold at the stated depth, lengths on target, spans exact, seeded, both layouts."""

from __future__ import annotations

import re
from collections import Counter

import pytest

from recontext_engine.bench.tasks import (
    DEPTHS,
    LENGTH_TOLERANCE,
    PROMPT_TOKENS,
    SENTENCE_TOKENS,
    TASKS,
    BenchCase,
    filler_sentence,
    generate_case,
    generate_cases,
    longest_context,
)
from recontext_engine.spans import document_sentences, split_sentences

_TOKEN = re.compile(r"\w+|[^\w\s]")


def count_stub(text: str) -> int:
    """Words and punctuation marks: a tokenizer-free stand-in for the length logic."""
    return len(_TOKEN.findall(text))


def _measured_depth(case: BenchCase) -> float:
    return case.meta["gold_depths"][0]


@pytest.mark.parametrize("task", list(TASKS))
@pytest.mark.parametrize("depth", DEPTHS)
def test_gold_sits_at_the_stated_depth(task: str, depth: float) -> None:
    case = generate_case(task, length=1024, depth=depth, count_tokens=count_stub, seed=3)
    assert case.gold, "every generated case has gold sentences"
    assert abs(_measured_depth(case) - depth) <= 0.05
    units = [
        doc[s:e]
        for doc in case.documents
        for s, e in split_sentences(doc)
        if doc[s:e] not in ("{", "}")  # JSON braces are not content
    ]
    if depth == 0.0:
        assert units[0] == case.gold_texts()[0]
    if depth == 1.0:
        assert units[-1] == case.gold_texts()[0]


@pytest.mark.parametrize("task", list(TASKS))
@pytest.mark.parametrize("length", [1024, 4096])
@pytest.mark.parametrize("layout", ["text", "docs"])
def test_length_within_tolerance(task: str, length: int, layout: str) -> None:
    case = generate_case(task, length=length, depth=0.5, layout=layout, count_tokens=count_stub)
    measured = sum(count_stub(d) for d in case.documents)
    assert case.context_tokens == measured
    assert abs(measured - length) <= LENGTH_TOLERANCE * length


def test_length_is_clamped_to_max_tokens() -> None:
    case = generate_case("needle", length=8192, depth=0.5, count_tokens=count_stub, max_tokens=3000)
    assert case.length == 8192 and case.target_tokens == 3000
    assert abs(case.context_tokens - 3000) <= LENGTH_TOLERANCE * 3000


@pytest.mark.parametrize("task", list(TASKS))
@pytest.mark.parametrize("layout", ["text", "docs"])
def test_gold_spans_slice_exact_engine_sentences(task: str, layout: str) -> None:
    case = generate_case(task, length=1500, depth=0.25, layout=layout, count_tokens=count_stub, seed=11)
    documents = case.documents
    sentences = {(i, s, e) for i, doc in enumerate(documents) for s, e in split_sentences(doc)}
    assert len(case.gold) == case.hops
    for span, text in zip(case.gold, case.gold_texts(), strict=True):
        assert (span.doc_index, span.char_start, span.char_end) in sentences
        assert text == text.strip() and len(text.encode("utf-8")) > 10
        assert documents[span.doc_index].count(text) == 1


def test_answers_follow_from_the_gold() -> None:
    needle = generate_case("needle", length=1024, depth=0.5, count_tokens=count_stub, index=0)
    assert needle.meta["value_kind"] == "number"
    assert needle.gold_texts()[0].endswith(f"is: {needle.answers[0]}.")
    assert needle.meta["key"] in needle.question
    word = generate_case("needle", length=1024, depth=0.5, count_tokens=count_stub, index=1)
    assert word.meta["value_kind"] == "word" and word.answers[0].isalpha()

    hop = generate_case("multi_hop", length=1024, depth=0.75, count_tokens=count_stub)
    first, second = hop.gold_texts()
    assert first == f"{hop.meta['person']} works at {hop.meta['company']}."
    assert second == f"{hop.meta['company']} is based in {hop.answers[0]}."
    assert hop.meta["person"] in hop.question and hop.answers[0] not in hop.question
    # The second hop is only reachable through the company: the question does not name it.
    assert hop.meta["company"] not in hop.question

    three = generate_case("multi_hop3", length=1024, depth=0.5, count_tokens=count_stub)
    assert three.hops == 3 and three.gold_texts()[-1].endswith(f"is based in {three.answers[0]}.")

    conflict = generate_case("conflict", length=1024, depth=0.5, count_tokens=count_stub)
    (current,) = conflict.gold_texts()
    assert "replaces v1" in current and f" {conflict.answers[0]} " in current
    old = f"{conflict.meta['policy']} policy v1 ("
    assert conflict.context.count(old) == 1
    old_at, new_at = conflict.context.index(old), conflict.context.index(current)
    assert (old_at < new_at) == conflict.meta["old_first"]

    kv = generate_case("json_kv", length=1024, depth=0.5, count_tokens=count_stub)
    assert kv.gold_texts()[0].startswith(f'"{kv.meta["key"]}": "{kv.answers[0]}"')
    assert kv.context.startswith("{\n") and kv.context.endswith("}")


def test_distractors_share_the_format_but_not_the_answer() -> None:
    case = generate_case("needle", length=2048, depth=0.5, count_tokens=count_stub)
    assert case.context.count("The special magic number for ") == 4
    assert case.context.count(case.answers[0]) == 1
    hop = generate_case("multi_hop", length=2048, depth=0.5, count_tokens=count_stub)
    assert hop.context.count(" works at ") == 4 and hop.context.count(" is based in ") == 4


def test_generation_is_deterministic_by_seed() -> None:
    a = generate_case("multi_hop", length=1024, depth=0.5, count_tokens=count_stub, seed=7)
    b = generate_case("multi_hop", length=1024, depth=0.5, count_tokens=count_stub, seed=7)
    c = generate_case("multi_hop", length=1024, depth=0.5, count_tokens=count_stub, seed=8)
    assert a.to_dict() == b.to_dict()
    assert a.context != c.context


def test_docs_layout_gives_several_documents() -> None:
    for task in TASKS:
        case = generate_case(task, length=2048, depth=0.5, layout="docs", count_tokens=count_stub)
        assert isinstance(case.context, list) and len(case.context) >= 4
        assert all(doc.strip() for doc in case.context)
        assert case.layout == "docs"
    kv = generate_case("json_kv", length=2048, depth=0.5, layout="docs", count_tokens=count_stub)
    assert all(doc.startswith("{\n") and doc.endswith("}") for doc in kv.context)


def test_case_round_trips_through_a_dict() -> None:
    case = generate_case("conflict", length=1024, depth=0.25, layout="docs", count_tokens=count_stub)
    assert BenchCase.from_dict(case.to_dict()) == case


def test_grid_covers_every_cell_and_alternates_layouts() -> None:
    cases = generate_cases(["needle", "json_kv"], [1024], DEPTHS, count_tokens=count_stub)
    assert len(cases) == 10
    assert {(c.task, c.depth) for c in cases} == {(t, d) for t in ("needle", "json_kv") for d in DEPTHS}
    assert {c.layout for c in cases} == {"text", "docs"}
    assert len({c.case_id for c in cases}) == 10


def test_filler_is_varied_without_digits_or_fact_words() -> None:
    import random

    rng = random.Random(0)
    sentences = [filler_sentence(rng) for _ in range(400)]
    assert len(set(sentences)) > 380
    text = " ".join(sentences)
    assert not re.search(r"\d", text)
    for word in ("magic", "works at", "based in", "policy", "replaces"):
        assert word not in text
    words = Counter(w.lower() for w in re.findall(r"[A-Za-z']+", text))
    assert words["the"] / sum(words.values()) < 0.03
    assert len(words) > 250


def test_bad_arguments_are_rejected() -> None:
    with pytest.raises(ValueError, match="unknown task"):
        generate_case("nope", length=1024, depth=0.5, count_tokens=count_stub)
    with pytest.raises(ValueError, match="depth"):
        generate_case("needle", length=1024, depth=1.5, count_tokens=count_stub)
    with pytest.raises(ValueError, match="layout"):
        generate_case("needle", length=1024, depth=0.5, count_tokens=count_stub, layout="pdf")  # type: ignore[arg-type]


@pytest.mark.model
def test_lengths_with_the_engine_tokenizer() -> None:
    from transformers import AutoTokenizer

    from recontext_engine.loading import convert_gguf, embedded_gguf

    tokenizer = AutoTokenizer.from_pretrained(convert_gguf(embedded_gguf()))

    def count(text: str) -> int:
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    for task in TASKS:
        for length in (1024, 4096):
            case = generate_case(task, length=length, depth=0.75, layout="docs", count_tokens=count)
            assert abs(sum(count(d) for d in case.documents) - length) <= LENGTH_TOLERANCE * length
            # Depth is measured in characters; Arabic facts and filler differ in characters per token.
            assert abs(_measured_depth(case) - 0.75) <= (0.08 if "language" in case.meta else 0.05)
    # No single token dominates the filler (the " the" sink seen in the design probes).
    case = generate_case("needle", length=2048, depth=0.5, count_tokens=count)
    ids = tokenizer(case.context, add_special_tokens=False)["input_ids"]
    top_word = Counter(tokenizer.convert_ids_to_tokens(ids)).most_common(3)
    assert all(n / len(ids) < 0.08 for _, n in top_word)


def test_generation_does_not_depend_on_the_hash_seed() -> None:
    """Same cases in processes with different PYTHONHASHSEED (set order must never leak in)."""
    import os
    import subprocess
    import sys

    script = (
        "import hashlib, re\n"
        "from recontext_engine.bench.tasks import TASKS, generate_case\n"
        "tok = re.compile(r'\\w+|[^\\w\\s]')\n"
        "h = hashlib.sha256()\n"
        "for task in TASKS:\n"
        "    for layout in ('text', 'docs'):\n"
        "        case = generate_case(task, length=600, depth=0.25, layout=layout,\n"
        "                             count_tokens=lambda t: len(tok.findall(t)))\n"
        "        h.update(repr(case.to_dict()).encode())\n"
        "print(h.hexdigest())\n"
    )
    digests = {
        subprocess.run(
            [sys.executable, "-c", script],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        for seed in ("1", "2")
    }
    assert len(digests) == 1


@pytest.mark.parametrize("task", sorted(TASKS))
def test_cases_at_the_longest_context_leave_room_for_the_evidence_and_the_answer(task: str) -> None:
    window, budget, answer = 2048, 8, 128
    target = longest_context(window, budget, answer)
    for layout in ("text", "docs"):
        case = generate_case(
            task, length=4096, depth=0.5, count_tokens=count_stub, layout=layout, max_tokens=target
        )
        documents = [case.context] if isinstance(case.context, str) else case.context
        longest = max(
            count_stub(documents[s.doc_index][s.start : s.end]) for s in document_sentences(documents)
        )
        assert longest <= SENTENCE_TOKENS
        context = sum(count_stub(d) for d in documents)
        assert context + PROMPT_TOKENS + budget * longest + answer <= window
