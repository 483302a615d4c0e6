"""Scorers (every registered one, and the recurrence against the paper), selection and the pool."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from recontext_engine import ReContextEngine, ReContextError, ReplayConfig
from recontext_engine.heads.headset import HeadSet
from recontext_engine.readout.transformers import TransformersBackend
from recontext_engine.results import Evidence
from recontext_engine.scoring import (
    DEFAULT_SCORER,
    SCORERS,
    CueRecurrenceScorer,
    MeanAttentionScorer,
    Scorer,
    get_scorer,
    register_scorer,
)
from recontext_engine.selection import AttentionSignal, EvidencePool, RankFusion, SelectionRound
from tests.planted import PLANTED, planted_model, word_tokenizer
from tests.selection_fakes import select

# Every registered scorer, built as a config naming it builds it: the matrix the shared tests run.
ALL_SCORERS = sorted(SCORERS)
EXAMPLES = settings(max_examples=25, deadline=None)


def _scorer(name: str) -> Scorer:
    return AttentionSignal(scorer=name).make_scorer()


@pytest.fixture(scope="module", params=ALL_SCORERS)
def scorer(request: pytest.FixtureRequest) -> Scorer:
    return _scorer(request.param)


def _rows(heads: int, w: int, n: int, seed: int) -> torch.Tensor:
    """Softmax-like cue rows: positive, each summing to at most 1 over the n candidates."""
    logits = torch.randn(heads, w, n + 3, generator=torch.Generator().manual_seed(seed)) * 2
    return torch.softmax(logits, dim=-1)[..., :n]


# -- every registered scorer ---------------------------------------------------------------------


@pytest.mark.parametrize("name", ALL_SCORERS)
def test_registry_names_match_and_a_config_builds_each(name: str) -> None:
    scorer = _scorer(name)
    assert isinstance(scorer, SCORERS[name]) and scorer.name == name == get_scorer(name).name


@given(st.integers(1, 4), st.integers(1, 6), st.integers(2, 12), st.integers(0, 10_000))
@EXAMPLES
def test_scores_are_one_finite_float_per_candidate_in_candidate_order(scorer, heads, w, n, seed) -> None:
    rows = _rows(heads, w, n, seed)
    got = scorer.score(rows)
    assert got.shape == (n,) and got.dtype == torch.float32 and torch.isfinite(got).all()
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    torch.testing.assert_close(scorer.score(rows[..., perm]), got[perm])  # candidates are not mixed
    torch.testing.assert_close(scorer.score(rows.flip(0)), got)  # the head set is averaged
    torch.testing.assert_close(scorer.score(rows.double()), got)  # any dtype in, float32 out


@given(st.integers(1, 5), st.integers(3, 20), st.integers(1, 6), st.integers(0, 10_000))
@EXAMPLES
def test_reducing_bucket_sums_equals_summing_token_scores(scorer, w, n, buckets, seed) -> None:
    """What head detection relies on: it reduces attention already summed per sentence."""
    attention = _rows(3, w, n, seed)  # (3, w, n): batched over a leading axis too
    bucket = torch.randint(0, buckets, (n,), generator=torch.Generator().manual_seed(seed + 1))
    summed = torch.zeros(3, w, buckets).index_add_(2, bucket, attention)
    token_scores = scorer.reduce_cue(attention)  # (3, n)
    expected = torch.zeros(3, buckets).index_add_(1, bucket, token_scores)
    torch.testing.assert_close(scorer.reduce_cue(summed), expected, atol=1e-6, rtol=1e-5)


@pytest.fixture(scope="module")
def planted_engine() -> ReContextEngine:
    tokenizer = word_tokenizer()
    return ReContextEngine(TransformersBackend(planted_model(len(tokenizer))), tokenizer, HeadSet((PLANTED,)))


@pytest.mark.parametrize("name", ALL_SCORERS)
def test_the_engine_scores_with_the_scorer_the_selector_names(planted_engine, name: str) -> None:
    context = "Maria lives in Lisbon. Tom keeps a pet cat at home. Ansel plays the violin in a local band."
    question = "Which city does Maria live in?"
    attention = AttentionSignal(scorer=name)
    config = ReplayConfig(rounds=1, top_k=2, selector=attention, standout=0.0)  # attention's picks alone
    by_name = planted_engine.select_evidence(context, question, config)
    request = planted_engine._start(context, question, config)
    read = attention.read(SelectionRound(1, request, [], planted_engine.reader, 2))
    positions, token_sentence = attention.position_scores(request, read)
    mass = torch.zeros(request.num_sentences).index_add_(
        0, token_sentence[token_sentence >= 0], positions[token_sentence >= 0]
    )
    best = torch.argsort(mass, descending=True, stable=True)[:2].tolist()
    assert [(e.char_start, e.score) for e in by_name] == sorted(
        (request.prefix.sentences[i].start, float(mass[i])) for i in best
    )
    # The flat shortcut sets the selector's attention signal.
    other = next(n for n in ("cue_recurrence", "mean") if n != name)
    assert config.with_options(scorer=other).selector == AttentionSignal(scorer=other)


# -- the registry ----------------------------------------------------------------------------------


def test_default_scorer_is_the_papers_recurrence() -> None:
    assert ReplayConfig().attention.scorer == DEFAULT_SCORER == "cue_recurrence"
    assert AttentionSignal(decay=0.5).make_scorer() == CueRecurrenceScorer(0.5)
    assert AttentionSignal(scorer="mean").make_scorer() == MeanAttentionScorer()


def test_unknown_scorer_names_are_one_clear_error() -> None:
    with pytest.raises(ReContextError, match="unknown scorer 'max'; choose from cue_recurrence, mean"):
        AttentionSignal(scorer="max")
    with pytest.raises(ReContextError, match="unknown scorer"):
        ReplayConfig().with_options(scorer="max")


def test_a_registered_scorer_is_usable_by_name_and_in_the_cli_choices() -> None:
    from recontext_engine.cli import build_parser

    @register_scorer("last_token")
    @dataclass
    class LastTokenScorer(Scorer):
        def reduce_cue(self, attention: torch.Tensor) -> torch.Tensor:
            return attention[..., -1, :]

    try:
        rows = torch.tensor([[[0.9, 0.1], [0.2, 0.8]]])
        assert AttentionSignal(scorer="last_token").make_scorer().score(rows).tolist() == pytest.approx(
            [0.2, 0.8]
        )
        args = build_parser().parse_args(["heads", "detect", "--scorer", "last_token"])
        assert args.scorer == "last_token"
        with pytest.raises(ReContextError, match="already registered"):
            register_scorer("last_token")(MeanAttentionScorer)
    finally:
        del SCORERS["last_token"]
    with pytest.raises(SystemExit):
        build_parser().parse_args(["heads", "detect", "--scorer", "last_token"])


def test_only_scorer_classes_can_register() -> None:
    with pytest.raises(ReContextError, match="not a Scorer subclass"):
        register_scorer("not_a_scorer")(dict)  # type: ignore[arg-type]
    assert "not_a_scorer" not in SCORERS


# -- the paper's recurrence ------------------------------------------------------------------------


def slow_recurrence(rows: torch.Tensor, decay: float) -> list[float]:
    """Paper formula, one cue token and one position at a time, in plain Python."""
    heads, w, n = rows.shape
    r = [0.0] * n
    for t in range(w):
        a = [sum(float(rows[h, t, i]) for h in range(heads)) / heads for i in range(n)]
        un = [a[i] + decay * r[i] for i in range(n)]
        total = sum(un)
        r = [x / total for x in un]
    return r


@given(st.integers(1, 4), st.integers(1, 6), st.integers(2, 12), st.floats(0.0, 1.0), st.integers(0, 10_000))
@settings(max_examples=60, deadline=None)
def test_recurrence_equals_slow_reference(heads: int, w: int, n: int, decay: float, seed: int) -> None:
    rows = torch.rand(heads, w, n, generator=torch.Generator().manual_seed(seed)) + 1e-3
    got = CueRecurrenceScorer(decay).score(rows)
    torch.testing.assert_close(got, torch.tensor(slow_recurrence(rows, decay)), atol=1e-6, rtol=1e-5)
    assert abs(float(got.sum()) - 1.0) < 1e-5


def test_decay_zero_keeps_only_the_last_cue_token() -> None:
    rows = torch.tensor([[[0.9, 0.1], [0.2, 0.8]]])
    torch.testing.assert_close(CueRecurrenceScorer(0.0).score(rows), torch.tensor([0.2, 0.8]))


def test_token_unit_maps_top_positions_to_sentences_without_duplicates() -> None:
    scores = torch.tensor([0.1, 0.9, 0.8, 0.05, 0.7, 0.3])
    token_sentence = torch.tensor([0, 1, 1, -1, 2, 2])
    picked = select(scores, token_sentence, 3, "token")
    assert [s for s, _ in picked] == [1, 2]  # positions 1, 2 -> sentence 1; position 4 -> sentence 2
    assert picked[0][1] == scores[1].item()


def test_sentence_unit_ranks_by_summed_mass_and_skips_unmapped_positions() -> None:
    scores = torch.tensor([0.5, 0.2, 0.2, 9.0, 0.3])
    token_sentence = torch.tensor([0, 1, 1, -1, 2])
    picked = select(scores, token_sentence, 2)
    assert [s for s, _ in picked] == [0, 1]
    assert select(scores, torch.full((5,), -1), 2) == []


def _evidence(sentence_id: int, round_index: int = 1) -> Evidence:
    return Evidence(f"s{sentence_id}", 0, sentence_id * 10, sentence_id * 10 + 2, 1.0, round_index)


@given(
    st.integers(1, 12),
    st.lists(st.lists(st.integers(0, 30), max_size=8), min_size=1, max_size=5),
)
@settings(max_examples=100, deadline=None)
def test_pool_never_shrinks_has_no_duplicates_and_reads_in_document_order(
    limit: int, rounds: list[list[int]]
) -> None:
    pool = EvidencePool(limit)
    previous: list[int] = []
    for round_index, picks in enumerate(rounds, start=1):
        for sentence_id in picks:
            pool.add(sentence_id, _evidence(sentence_id, round_index))
        ids = pool.sentence_ids()
        assert set(previous) <= set(ids)
        assert len(ids) == len(set(ids)) <= limit
        assert [e.char_start for e in pool.ordered()] == sorted(e.char_start for e in pool.ordered())
        previous = ids
    assert all(e.round >= 1 for e in pool.ordered())


@given(st.lists(st.floats(-1, 1, allow_nan=False), min_size=1, max_size=40), st.integers(1, 10), st.data())
@settings(max_examples=80, deadline=None)
def test_selection_returns_known_sentences_only(values: list[float], k: int, data) -> None:
    n = len(values)
    token_sentence = torch.tensor(data.draw(st.lists(st.integers(-1, 5), min_size=n, max_size=n)))
    for unit in ("token", "sentence"):
        picked = select(torch.tensor(values), token_sentence, k, unit)
        ids = [s for s, _ in picked]
        assert len(ids) == len(set(ids)) <= k
        assert set(ids) <= set(token_sentence[token_sentence >= 0].tolist())


def test_hybrid_fuses_attention_and_lexical_ranks() -> None:
    scores = torch.tensor([0.9, 0.1, 0.5, 0.0, 0.3])
    token_sentence = torch.tensor([0, 1, 2, 3, 4])
    lexical = torch.tensor([0.0, 0.0, 0.0, 5.0, 4.0])
    attention_only = select(scores, token_sentence, 2)
    fused = select(scores, token_sentence, 2, lexical=lexical)
    assert [s for s, _ in attention_only] == [0, 2]
    # Good in both lists beats best in one: 4 (3rd by attention, 2nd by BM25), then 3 (last, 1st).
    assert [s for s, _ in fused] == [4, 3]
    # Sentences with no query word earn no lexical credit, so BM25 zeros leave attention's order.
    no_words = select(scores, token_sentence, 5, lexical=torch.zeros(5))
    assert [s for s, _ in no_words] == [0, 2, 4, 1, 3]
    # The token rule picks positions, not sentences: it selects alone, never in a fusion.
    with pytest.raises(ReContextError, match="token unit"):
        RankFusion(((AttentionSignal(unit="token"), 1.0), (AttentionSignal(), 1.0)))


def test_excluded_sentences_are_not_picked_again() -> None:
    scores = torch.tensor([0.9, 0.1, 0.5, 0.0, 0.3])
    token_sentence = torch.tensor([0, 1, 2, 3, 4])
    lexical = torch.tensor([0.0, 0.0, 0.0, 5.0, 4.0])
    picked = select(scores, token_sentence, 2, lexical=lexical, exclude=[0, 4])
    assert [s for s, _ in picked] == [3, 2]
    assert select(scores, token_sentence, 9, exclude=range(5)) == []


def test_a_repeated_text_is_picked_once_and_not_at_all_when_the_pool_holds_a_copy() -> None:
    scores = torch.tensor([0.9, 0.8, 0.7, 0.2, 0.1])
    token_sentence = torch.tensor([0, 1, 2, 3, 4])
    first_copy = torch.tensor([0, 0, 2, 0, 4])  # sentences 0, 1 and 3 read the same
    picked = select(scores, token_sentence, 3, first_copy=first_copy)
    assert [s for s, _ in picked] == [0, 2, 4]  # the best copy, then the next distinct texts
    later = select(scores, token_sentence, 3, exclude=[3], first_copy=first_copy)
    assert [s for s, _ in later] == [2, 4]


def test_bm25_scores_rank_the_sentence_sharing_the_question_words() -> None:
    from recontext_engine.lexical import bm25_scores

    got = bm25_scores("Which city does Maria live in?", ["Tom likes trains.", "Maria lives in Lisbon.", "x"])
    assert int(torch.argmax(got)) == 1 and got[0] == 0
    assert bm25_scores("N/A", ["Tom likes trains."]).tolist() == [0.0]


def test_evidence_cue_scores_each_sentence_by_its_strongest_evidence_token() -> None:
    from recontext_engine.scoring.evidence_cue import evidence_cue_scores

    token_sentence = torch.tensor([-1, 0, 0, 1, 1, -1])  # a sink first, template tokens last
    rows = torch.zeros(2, 3, 8)  # two heads, three evidence tokens, 6 context + 2 suffix columns
    rows[:, :, 0] = 0.9  # every evidence token dumps mass on the sink
    rows[:, 0, 3] = 0.1  # one token points at sentence 1
    rows[:, 1, 1] = rows[:, 2, 2] = 0.05  # two weak pointers at sentence 0
    scores = evidence_cue_scores(rows, token_sentence)
    assert scores.shape == (6,) and float(scores.sum()) == pytest.approx(1.0)
    assert float(scores[0]) == float(scores[5]) == 0.0  # the sink and the template are no candidates
    assert float(scores[3]) == pytest.approx(float(scores[1]))  # per row normalised, then the max
    assert float(evidence_cue_scores(torch.zeros(2, 0, 8), token_sentence).sum()) == 0.0
