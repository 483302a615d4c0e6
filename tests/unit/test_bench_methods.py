"""Retrieval arms of the benchmark: BM25 and recursive BM25 as the engine's selector (a tiny model)."""

from __future__ import annotations

import pytest

from recontext_engine import ReplayConfig
from recontext_engine.bench.methods import METHODS, MethodContext, bm25_config
from recontext_engine.bench.tasks import generate_case
from recontext_engine.lexical import recursive_bm25_scores

from .test_bench_tasks import count_stub
from .test_engine_hooks import tiny_engine


@pytest.fixture(scope="module")
def engine():
    return tiny_engine()


def bm25_evidence(ctx, case):
    return ctx.engine.select_evidence(case.context, case.question, bm25_config(ctx))


def bm25_recursive_evidence(ctx, case, rounds):
    return ctx.engine.select_evidence(case.context, case.question, bm25_config(ctx, rounds, recursive=True))


def _gold_found(case, evidence) -> float:
    found = {(e.doc_index, e.char_start, e.char_end) for e in evidence}
    return sum((g.doc_index, g.char_start, g.char_end) in found for g in case.gold) / len(case.gold)


def test_recursive_query_adds_only_pooled_sentences_that_share_a_word_with_the_question():
    sentences = ["Ada Lind works at Corvex.", "Corvex is based in Oslo.", "Bread is baked daily."]
    question = "Which city does Ada Lind work in?"
    first = recursive_bm25_scores(question, sentences, [])
    assert float(first[1]) == 0.0  # the second hop shares no word with the question
    second = recursive_bm25_scores(question, sentences, [0, 2])  # sentence 2 is unrelated: not in the query
    assert float(second[1]) > 0.0 and float(second[2]) == 0.0


def test_recursion_finds_the_second_hop_that_one_round_of_bm25_misses(engine):
    ctx = MethodContext(engine=engine, config=ReplayConfig(), budget=4)
    cases = [
        generate_case("multi_hop", length=400, depth=d, count_tokens=count_stub, seed=s)
        for s in range(4)
        for d in (0.25, 0.75)
    ]
    one_round = sum(_gold_found(c, bm25_evidence(ctx, c)) for c in cases) / len(cases)
    recursive = sum(_gold_found(c, bm25_recursive_evidence(ctx, c, rounds=2)) for c in cases) / len(cases)
    assert recursive == 1.0 and one_round < 0.75
    for case in cases:
        evidence = bm25_recursive_evidence(ctx, case, rounds=2)
        assert len(evidence) <= ctx.budget and {e.round for e in evidence} <= {1, 2}


def test_paraphrased_questions_give_bm25_nothing_to_find(engine):
    ctx = MethodContext(engine=engine, config=ReplayConfig(), budget=8)
    cases = [
        generate_case("paraphrase", length=400, depth=0.5, count_tokens=count_stub, seed=s) for s in range(6)
    ]
    assert all(c.answers[0] in c.gold_texts()[0] for c in cases)
    assert sum(_gold_found(c, bm25_recursive_evidence(ctx, c, rounds=2)) for c in cases) == 0


@pytest.mark.parametrize("name", ["bm25-recursive-r2", "bm25-recursive-r3"])
def test_recursive_arms_are_registered_with_their_rounds(name):
    method = METHODS[name]
    assert method.kind == "retrieval" and method.rounds == int(name[-1])
