"""Shared read passes and cached null rows leave the evidence unchanged, on the embedded model."""

from __future__ import annotations

import random

import pytest

from recontext_engine import ReContextEngine, ReplayConfig
from recontext_engine.reads import BackendView, SeparateReads
from recontext_engine.selection.pool import EXTENDING_ORDERS
from tests.documents import filler, planted_document

pytestmark = pytest.mark.model

# Null calibration on: these tests are about its second pass being shared and cached.
CONFIG = ReplayConfig(rounds=2, top_k=4).with_options(max_new_tokens=8, null_calibration=True)


class _CountingReads(SeparateReads):
    def __init__(self, backend) -> None:
        super().__init__(backend)
        self.reads = 0

    def read(self, *args, **kwargs):
        self.reads += 1
        return self._backend.read(*args, **kwargs)


@pytest.fixture(scope="module")
def baseline(engine) -> ReContextEngine:
    plain = ReContextEngine(SeparateReads(engine.backend), engine.tokenizer, engine.heads)
    plain.row_cache = None
    return plain


def _two_hop() -> str:
    body = filler(random.Random(11), 24)
    body[6:6] = ["Ann Vale works at Korvex Labs.", "Bo Lund works at Delmar Group."]
    body[18:18] = ["Korvex Labs is based in Lisbon.", "Delmar Group is based in Oslo."]
    return " ".join(body)


CASES = [
    (
        planted_document("The secret code for the vault is 4172.", sentences=30, seed=5),
        "What is the secret code?",
    ),
    (_two_hop(), "Which city does Ann Vale work in?"),
]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_evidence_and_scores_equal_those_of_separate_read_passes(engine, baseline, case: int) -> None:
    context, question = CASES[case]
    engine.row_cache.clear()
    shared = engine.select_evidence(context, question, CONFIG)
    separate = baseline.select_evidence(context, question, CONFIG)
    assert [e.text for e in shared] == [e.text for e in separate]
    assert [(e.char_start, e.round) for e in shared] == [(e.char_start, e.round) for e in separate]
    assert [e.score for e in shared] == pytest.approx([e.score for e in separate], rel=1e-4, abs=1e-6)


def test_a_second_question_on_the_same_context_reuses_the_null_rows(engine, baseline) -> None:
    context, _ = CASES[1]
    counting = ReContextEngine(_CountingReads(engine.backend), engine.tokenizer, engine.heads)
    first = counting.select_evidence(
        context, "Which city does Ann Vale work in?", CONFIG.with_options(rounds=1)
    )
    assert counting.backend.reads == 2 and len(counting.row_cache) == 1
    second = counting.select_evidence(context, "Where does Bo Lund work?", CONFIG.with_options(rounds=1))
    assert counting.backend.reads == 3  # the question pass only
    assert "Ann Vale works at Korvex Labs." in [e.text for e in first]
    assert "Bo Lund works at Delmar Group." in [e.text for e in second]
    cold = baseline.select_evidence(context, "Where does Bo Lund work?", CONFIG.with_options(rounds=1))
    assert [e.text for e in second] == [e.text for e in cold]
    assert [e.score for e in second] == pytest.approx([e.score for e in cold], rel=1e-4, abs=1e-6)


class _Generations(BackendView):
    """A view of a backend that records how many suffix tokens each generation computes; with
    ``crop=False`` it cannot crop, so nothing a read pass computed is kept."""

    def __init__(self, backend, crop: bool) -> None:
        super().__init__(backend)
        self.can_crop = crop
        self.fed: list[int] = []

    def generate(self, cache, suffix_ids, config, eos_ids):
        self.fed.append(len(suffix_ids))
        return self._backend.generate(cache, suffix_ids, config, eos_ids)


@pytest.mark.parametrize(
    ("case", "options"),
    [
        (0, {"evidence_order": "round"}),
        (1, {"evidence_order": "round"}),
        (1, {"evidence_order": "score", "null_calibration": True, "rounds": 3}),
        (1, {"evidence_order": "document"}),
    ],
    ids=["round-lookup", "round-two-hop", "score-null-r3", "document"],
)
def test_the_generation_goes_on_from_the_kept_evidence_with_the_same_answer(engine, case, options) -> None:
    """A read pass with evidence stays in the cache; the generation computes only what differs from
    it. In an order that grows round by round that is all but the earlier rounds' evidence, and the
    answer is the same."""
    context, question = CASES[case]
    kept = _Generations(engine.backend, crop=True)
    recomputed = _Generations(engine.backend, crop=False)
    # every round reads (lone evidence off): the facts here stand out, and a lexical hop reads nothing
    config = ReplayConfig(rounds=2, top_k=4, standout=0.0).with_options(max_new_tokens=12, **options)
    ours = ReContextEngine(kept, engine.tokenizer, engine.heads).answer(context, question, config)
    plain = ReContextEngine(recomputed, engine.tokenizer, engine.heads).answer(context, question, config)
    assert [(e.text, e.round) for e in ours.evidence] == [(e.text, e.round) for e in plain.evidence]
    assert ours.text == plain.text and ours.usage == plain.usage
    assert any(e.round == config.rounds for e in ours.evidence)
    earlier = [e.text for e in ours.evidence if e.round < config.rounds]
    saved = recomputed.fed[-1] - kept.fed[-1]
    if options["evidence_order"] in EXTENDING_ORDERS:
        assert earlier and saved >= sum(engine.count_tokens(t) - 1 for t in earlier)
    else:
        assert 0 <= saved < recomputed.fed[-1]
