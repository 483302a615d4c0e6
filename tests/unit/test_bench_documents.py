"""The real-document question sets: data, gold snippets, slices and their depths (no model)."""

from __future__ import annotations

import gzip
import importlib.metadata
import re
import sys
from collections import Counter
from pathlib import Path

import pytest

from recontext_engine.bench.documents import (
    FAMILIES,
    SOURCES,
    document_cases,
    find_gold,
    load_questions,
    read_document,
)
from recontext_engine.bench.metrics import substring_match
from recontext_engine.bench.tasks import BenchCase

_STOPWORDS_TEXT = """a about above after again against all also am an and any are as at be because been before
    being below between both but by can could did do does doing down during each few for from
    further had has have having he her here hers him his how i if in into is it its itself just
    me might more most must my no nor not now of off on once only or other our out over own same
    shall she should so some such than that the their them then there these they this those
    through to too under until up very was we were what when where which while who whom why will
    with within without would you your yours one two s t"""
_STOPWORDS = set(_STOPWORDS_TEXT.split())


def count_words(text: str) -> int:
    """A tokenizer-free stand-in: about two tokens a word."""
    return len(text.split()) * 2


@pytest.fixture(scope="module")
def questions() -> list[dict]:
    return load_questions()


@pytest.fixture(scope="module")
def cases() -> list[BenchCase]:
    return document_cases(count_words, max_tokens=2048)


def _squash(text: str) -> str:
    return " ".join(text.split())


def _content_words(text: str) -> set[str]:
    """Lowercase alphanumeric words minus stopwords, crudely stemmed (plural, past, -ing)."""
    words = re.findall(r"[a-z0-9]+", text.lower())
    return {re.sub(r"(ing|ed|es|s)$", "", w) if len(w) > 4 else w for w in words if w not in _STOPWORDS}


def test_every_question_validates_and_families_filter(questions: list[dict]) -> None:
    assert {q["family"] for q in questions} == set(FAMILIES)
    assert [q["id"] for q in load_questions(["pydoc"])] == [
        q["id"] for q in questions if q["family"] == "pydoc"
    ]
    with pytest.raises(ValueError, match="books"):
        load_questions(["books"])


def test_counts_per_family_and_kind_meet_the_minima(questions: list[dict]) -> None:
    assert len(questions) >= 64
    families = Counter(q["family"] for q in questions)
    assert len(families) >= 4 and min(families.values()) >= 14
    kinds = Counter(q["kind"] for q in questions)
    assert kinds["two-hop"] >= 12 and kinds["paraphrase"] >= 16
    paraphrases = Counter(q["family"] for q in questions if q["kind"] == "paraphrase")
    assert all(paraphrases[f] >= 3 for f in FAMILIES)


def test_each_gold_occurs_exactly_once_in_its_document(questions: list[dict]) -> None:
    for q in questions:
        text = read_document(q["document"])
        for snippet in q["gold"]:
            start, end = find_gold(text, snippet, q["id"])
            assert _squash(text[start:end]) == _squash(snippet)


def test_a_gold_found_twice_or_never_is_named() -> None:
    with pytest.raises(ValueError, match="q7"):
        find_gold("the cat and the cat", "the cat", "q7")
    with pytest.raises(ValueError, match="q8"):
        find_gold("the cat", "a dog", "q8")
    assert find_gold("one\n  two\fthree", "one two three", "q9") == (0, 15)


def test_paraphrase_questions_share_no_content_word_with_their_golds(questions: list[dict]) -> None:
    for q in questions:
        if q["kind"] == "paraphrase":
            shared = _content_words(q["question"]) & _content_words(" ".join(q["gold"]))
            assert not shared, (q["id"], shared)


def test_lookup_answers_occur_in_their_gold_text(questions: list[dict]) -> None:
    for q in questions:
        if q["kind"] == "lookup":
            assert substring_match(" ".join(q["gold"]), q["answers"]), q["id"]


def test_gold_spans_lie_inside_contexts_that_fit(questions: list[dict], cases: list[BenchCase]) -> None:
    by_id = {q["id"]: q for q in questions}
    for case in cases:
        q = by_id[case.meta["question_id"]]
        assert case.case_id == f"{q['id']}-2048"
        assert case.task == f"doc-{q['family']}" and case.layout == "text" and case.hops == q["hops"]
        assert case.context_tokens == count_words(case.context) <= 2048
        assert case.meta == {
            "question_id": q["id"],
            "family": q["family"],
            "kind": q["kind"],
            "document": q["document"],
            "source": SOURCES[q["document"]],
        }
        for snippet, text in zip(q["gold"], case.gold_texts()):
            assert _squash(text) == _squash(snippet)
        # the slice is the original text, unchanged
        assert case.context in read_document(q["document"])


def test_slices_fit_a_small_budget_too() -> None:
    for case in document_cases(count_words, max_tokens=1024):
        assert case.context_tokens <= 1024
        assert all(0 <= g.char_start < g.char_end <= len(case.context) for g in case.gold)


def test_depths_are_spread(cases: list[BenchCase]) -> None:
    depths = [c.depth for c in cases]
    assert all(d is not None and 0.0 <= d < 1.0 for d in depths)
    assert sum(d < 0.3 for d in depths) >= 10 and sum(d > 0.7 for d in depths) >= 10


def test_cases_are_deterministic() -> None:
    first = document_cases(count_words, max_tokens=1024, families=["licence"])
    again = document_cases(count_words, max_tokens=1024, families=["licence"])
    assert [c.to_dict() for c in first] == [c.to_dict() for c in again]


def test_lgpl_keeps_its_form_feeds() -> None:
    assert "\f" in read_document("licence/LGPL-2.1.txt")


def _source_text(origin: str) -> str | None:
    """The recorded origin's text on this machine, or None where it is absent or another version."""
    kind, _, where = origin.partition(":")
    if kind in ("file", "gzip"):
        path = Path(where)
        if not path.is_file():
            return None
        data = path.read_bytes()
        return (gzip.decompress(data) if kind == "gzip" else data).decode("utf-8")
    if kind == "pydoc":
        topic, _, version = where.partition("@")
        if ".".join(map(str, sys.version_info[:3])) != version:
            return None
        from pydoc_data.topics import topics

        return topics[topic]
    if kind == "metadata":
        name, _, version = where.partition("==")
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            return None
        if dist.version != version:
            return None
        return (dist.read_text("METADATA") or "").split("\n\n", 1)[1]
    raise AssertionError(f"unknown origin {origin}")


@pytest.mark.parametrize("document", sorted(SOURCES))
def test_documents_are_byte_identical_to_their_source(document: str) -> None:
    source = _source_text(SOURCES[document])
    if source is None:
        pytest.skip(f"{SOURCES[document]} is not on this machine")
    assert read_document(document) == source


def test_contexts_fit_the_embedded_tokenizer() -> None:
    """With the embedded model's tokenizer (its tokenizer.json alone, where a run converted it)."""
    from recontext_engine.loading import cache_root

    found = sorted((cache_root() / "models").glob("SmolLM2-135M-Instruct*/tokenizer.json"))
    if not found:
        pytest.skip("the embedded model has not been converted on this machine")
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(found[0]))

    def count(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False).ids)

    for case in document_cases(count, max_tokens=2048):
        assert case.context_tokens == count(case.context) <= 2048
