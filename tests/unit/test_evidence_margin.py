"""The adaptive evidence budget (picks below a fraction of a round's best are left out) and the order."""

from __future__ import annotations

import pytest

from recontext_engine import Evidence, ReplayConfig
from recontext_engine.errors import ReContextError
from recontext_engine.selection.pool import EvidencePool, within_margin


def test_picks_below_the_margin_of_the_best_are_dropped() -> None:
    picks = [(4, 0.20), (1, 0.15), (7, 0.09), (2, 0.05)]
    assert within_margin(picks, 0.5) == [(4, 0.20), (1, 0.15)]
    assert within_margin(picks, 0.0) == picks


def test_without_a_positive_best_every_pick_stays() -> None:
    picks = [(3, -0.1), (5, -0.4)]
    assert within_margin(picks, 0.9) == picks
    assert within_margin([], 0.5) == []


def test_the_margin_is_validated() -> None:
    assert ReplayConfig(evidence_margin=0.4).evidence_margin == 0.4
    for bad in (-0.1, 1.0):
        with pytest.raises(ReContextError, match="evidence_margin"):
            ReplayConfig(evidence_margin=bad)


def test_the_pool_reads_in_document_order_round_order_best_first_or_best_last() -> None:
    pool = EvidencePool(limit=4)
    for sentence_id, score, round_index in [(5, 0.9, 1), (2, 0.4, 1), (1, 0.8, 2), (9, 0.3, 2)]:
        pool.add(
            sentence_id, Evidence(f"s{sentence_id}", 0, sentence_id, sentence_id + 1, score, round_index)
        )
    assert [e.text for e in pool.ordered()] == ["s1", "s2", "s5", "s9"]
    assert [e.text for e in pool.by_score()] == ["s5", "s2", "s1", "s9"]
    assert pool.arranged("document") == pool.ordered() and pool.arranged("score") == pool.by_score()
    assert [e.text for e in pool.arranged("score_last")] == ["s9", "s1", "s2", "s5"]
    assert [e.text for e in pool.arranged("round")] == ["s2", "s5", "s1", "s9"]
    assert ReplayConfig(evidence_order="score_last").evidence_order == "score_last"


def test_headings_come_on_top_of_the_limit_and_just_before_their_sentence() -> None:
    pool = EvidencePool(limit=2)

    def item(sentence_id: int, score: float, round_index: int, heading: bool = False) -> Evidence:
        return Evidence(f"s{sentence_id}", 0, sentence_id, sentence_id + 1, score, round_index, heading)

    assert pool.add(7, item(7, 0.9, 1)) and pool.add(3, item(3, 0.9, 1, heading=True))
    assert not pool.add(3, item(3, 0.9, 1))  # already there
    assert pool.add(12, item(12, 0.5, 2)) and len(pool) == 2
    assert not pool.add(14, item(14, 0.4, 2))  # full
    assert pool.add(10, item(10, 0.5, 2, heading=True))  # a heading still joins
    assert [e.text for e in pool.ordered()] == ["s3", "s7", "s10", "s12"]
    assert [e.text for e in pool.by_score()] == ["s3", "s7", "s10", "s12"]
    assert [e.text for e in pool.arranged("score_last")] == ["s10", "s12", "s3", "s7"]
