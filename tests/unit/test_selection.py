"""Selection signals: the registry matrix, each signal's rule, the config's selector field and shortcuts."""

from __future__ import annotations

import pytest
import torch

from recontext_engine import ReContextError, ReplayConfig
from recontext_engine.selection import (
    SIGNALS,
    AttentionSignal,
    BM25Signal,
    EmbeddingSignal,
    OracleSignal,
    RankFusion,
    SentenceEmbeddingSignal,
    Signal,
    default_selector,
    hybrid_selector,
    semantic_selector,
    signal_from_dict,
)
from recontext_engine.selection.standout import stands_out
from tests.selection_fakes import fake_round
from tests.unit.test_engine_hooks import QUESTION, tiny_documents, tiny_engine

# One instance of every registered signal: a new signal adds its row here (the next test fails until then).
EXAMPLES: dict[str, Signal] = {
    "attention": AttentionSignal(scorer="mean"),
    "bm25": BM25Signal(),
    "embedding": EmbeddingSignal(),
    "oracle": OracleSignal(spans=((0, 10, 19),)),
    "rank_fusion": hybrid_selector(),
    "sentence_embedding": SentenceEmbeddingSignal(),
}


def test_every_registered_signal_has_a_row_in_the_matrix() -> None:
    assert sorted(EXAMPLES) == sorted(SIGNALS)


@pytest.mark.parametrize("name", sorted(SIGNALS))
def test_a_signal_scores_every_sentence_or_abstains_and_round_trips(name: str) -> None:
    signal = EXAMPLES[name]
    assert signal.name == name and isinstance(signal, SIGNALS[name])
    round = fake_round(torch.tensor([0.1, 0.5, 0.2, 0.05, 0.15]), torch.tensor([0, 1, 1, -1, 2]))
    scores = signal.score(round)
    if scores is not None:  # the embedding signal abstains without input embeddings
        assert scores.shape == (round.num_sentences,) and scores.dtype == torch.float32
    assert signal_from_dict(signal.to_dict()) == signal
    assert ReplayConfig.from_dict(ReplayConfig(selector=signal).to_dict()).selector == signal


def test_attention_alone_ranks_sentences_by_their_mass_and_the_token_rule_by_positions() -> None:
    round = fake_round(torch.tensor([0.1, 0.5, 0.2, 0.05, 0.6]), torch.tensor([0, 1, 1, -1, 2]))
    assert AttentionSignal(scorer="mean").score(round).tolist() == pytest.approx([0.1, 0.7, 0.6])
    token = AttentionSignal(scorer="mean", unit="token").score(fake_round(
        torch.tensor([0.1, 0.5, 0.2, 0.05, 0.6]), torch.tensor([0, 1, 1, -1, 2]), top_k=2
    ))  # fmt: skip
    assert token.tolist() == [float("-inf"), pytest.approx(0.5), pytest.approx(0.6)]


def test_bm25_alone_never_picks_a_sentence_sharing_no_word() -> None:
    document = "Maria lives here. Tom likes trains. A cat sleeps. Maria sings."
    picked = tiny_engine().select_evidence(
        document, "Where does Maria live?", rounds=2, top_k=4, selector=BM25Signal()
    )
    assert [e.text for e in picked] == ["Maria lives here.", "Maria sings."]


def test_the_oracle_picks_exactly_the_sentences_overlapping_its_spans() -> None:
    engine, documents = tiny_engine(), tiny_documents()
    sentence = engine._start(documents, QUESTION, ReplayConfig()).prefix.sentences[3]
    config = ReplayConfig(
        rounds=1,
        top_k=8,
        selector=OracleSignal(spans=((sentence.doc_index, sentence.start + 1, sentence.start + 2),)),
    )
    evidence = engine.select_evidence(documents, QUESTION, config)
    assert [(e.doc_index, e.char_start, e.char_end) for e in evidence] == [
        (sentence.doc_index, sentence.start, sentence.end)
    ]


def test_a_selector_by_name_on_the_engine_and_flat_shortcuts_on_the_config() -> None:
    engine, documents = tiny_engine(), tiny_documents()
    by_name = engine.select_evidence(documents, QUESTION, selector="bm25", rounds=1)
    assert by_name == engine.select_evidence(documents, QUESTION, selector=BM25Signal(), rounds=1)
    config = ReplayConfig().with_options(null_calibration=True, cue_window=16, max_new_tokens=7)
    assert config.attention == AttentionSignal(null_calibration=True, cue_window=16)
    assert isinstance(config.selector, RankFusion) and config.generation.max_new_tokens == 7
    with pytest.raises(ReContextError, match="no attention signal to set null_calibration"):
        ReplayConfig(selector=BM25Signal()).with_options(null_calibration=True)
    with pytest.raises(ReContextError, match="unknown ReplayConfig option"):
        ReplayConfig().with_options(lexical_weight=0.0)
    with pytest.raises(ReContextError, match="unknown signal 'bm52'"):
        ReplayConfig().with_options(selector="bm52")
    with pytest.raises(ReContextError, match="unknown setting"):
        signal_from_dict({"name": "bm25", "recursiv": False})
    with pytest.raises(ReContextError, match="selector must be a Signal"):
        ReplayConfig(selector="bm25")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "settings",
    [{"cue_window": 0}, {"decay": 1.5}, {"candidates": "all"}, {"unit": "word"}, {"evidence_cue": -1.0}],
)
def test_attention_settings_out_of_range_are_refused(settings) -> None:
    with pytest.raises(ReContextError):
        AttentionSignal(**settings)


def test_the_semantic_selector_is_the_hybrid_plus_the_sentence_embedder() -> None:
    selector = semantic_selector(model="/models/e5")
    assert selector.parts[:-1] == hybrid_selector().parts
    assert selector.parts[-1] == (SentenceEmbeddingSignal(model="/models/e5"), 3.0)
    assert ReplayConfig.from_dict(ReplayConfig(selector=selector).to_dict()).selector == selector


def test_the_default_selector_adds_the_sentence_embedder_only_where_it_is_installed(monkeypatch) -> None:
    import recontext_engine.selection as selection

    monkeypatch.setattr(selection, "default_embedder_installed", lambda: True)
    assert default_selector() == semantic_selector()
    assert ReplayConfig().selector == semantic_selector()
    monkeypatch.setattr(selection, "default_embedder_installed", lambda: False)
    assert default_selector() == hybrid_selector()
    assert ReplayConfig().selector == hybrid_selector()


def test_a_pick_brings_its_headings_and_a_picked_heading_the_first_sentence_under_it() -> None:
    engine = tiny_engine()
    document = (
        "# Setup\n\nThe old bridge is north of the town.\n\nThe river is wide.\n\n"
        "# Repairs\n\nMaria repaired the old bridge.\n\nThe town paid for it."
    )

    def picking(text: str) -> ReplayConfig:
        start = document.index(text)
        return ReplayConfig(rounds=1, top_k=1, selector=OracleSignal(spans=((0, start, start + 1),)))

    def replayed(config: ReplayConfig) -> list[tuple[str, bool]]:
        return [(e.text, e.heading) for e in engine.select_evidence(document, QUESTION, config)]

    # A title alone answers nothing: its first sentence comes with it, not counted against top_k=1.
    assert replayed(picking("# Repairs")) == [("# Repairs", False), ("Maria repaired the old bridge.", False)]
    # A sentence brings the heading over it, not its neighbours.
    assert replayed(picking("Maria")) == [("# Repairs", True), ("Maria repaired the old bridge.", False)]
    assert replayed(picking("The river")) == [("# Setup", True), ("The river is wide.", False)]
    assert replayed(picking("# Repairs").with_options(replay_headings=False)) == [("# Repairs", False)]


def test_history_replay_reads_with_the_hybrid_unless_the_engine_names_its_own_selector() -> None:
    from recontext_engine import HistoryReplayer

    engine = tiny_engine()
    assert HistoryReplayer(engine).replay_config.selector == hybrid_selector()
    engine.default_config = ReplayConfig(selector=BM25Signal(), top_k=3)
    replayer = HistoryReplayer(engine)
    assert replayer.replay_config.selector == BM25Signal()
    assert (replayer.replay_config.rounds, replayer.replay_config.top_k) == (1, 3)  # the rest still pinned
    assert HistoryReplayer(engine, selector="embedding").replay_config.selector == EmbeddingSignal()


CHAIN = (
    "Tomas Sato works at Norley Analytics. Norley Analytics is based in Helsinki. "
    "Lucia Haddad works at Norora Analytics. Norora Analytics is based in Valparaiso. "
    "Keiko Mbeki works at Lumley Holdings. Lumley Holdings is based in Tallinn."
)


def test_a_sentence_the_question_singles_out_is_replayed_alone_and_later_rounds_follow_its_chain() -> None:
    engine = tiny_engine()

    def replayed(question: str, **options) -> list[tuple[int, str]]:
        config = ReplayConfig(rounds=2, top_k=2, selector=BM25Signal())  # a pool of 4 of 6 sentences
        evidence = engine.select_evidence(CHAIN, question, config, **options)
        return [(e.round, e.text) for e in evidence]

    # "Tomas Sato" singles out the first sentence; the rare word it brings ("Norley": "Analytics" is in
    # four sentences) leads round 2 to the next hop, and to nothing else.
    chain = [(1, "Tomas Sato works at Norley Analytics."), (2, "Norley Analytics is based in Helsinki.")]
    assert replayed("Which city does Tomas Sato work in?") == chain
    # Off, every round picks up to top_k: the other "works at" sentences come too.
    off = replayed("Which city does Tomas Sato work in?", standout=0.0)
    assert (1, "Tomas Sato works at Norley Analytics.") in off and len(off) == 4
    # Nothing stands out ("Analytics" is in four sentences alike): the usual picks.
    assert len(replayed("Which analytics companies are there?")) == 4
    # A context the pool holds whole has nothing to cut: with top_k=4 (a pool of 8) every sentence
    # sharing a word with the question is replayed.
    whole = engine.select_evidence(
        CHAIN, "Which city does Tomas Sato work in?", rounds=2, top_k=4, selector="bm25"
    )
    assert "Lucia Haddad works at Norora Analytics." in [e.text for e in whole] and len(whole) == 5


def test_hops_bound_a_lone_picks_chain_apart_from_the_rounds() -> None:
    engine = tiny_engine()
    question = "Which city does Tomas Sato work in?"

    def replayed(**options) -> list[tuple[int, str]]:
        config = ReplayConfig(top_k=2, selector=BM25Signal(), **options)
        return [(e.round, e.text) for e in engine.select_evidence(CHAIN, question, config)]

    first, hop = (1, "Tomas Sato works at Norley Analytics."), (2, "Norley Analytics is based in Helsinki.")
    # One read round, one hop (a session's history: the correction that repeats an old value's rare
    # words), and no second read pass; by default one round has no hop.
    assert replayed(rounds=1, hops=1, max_evidence=4) == [first, hop]
    assert replayed(rounds=1, max_evidence=4) == [first]
    assert replayed(rounds=2, hops=0) == [first]
    # more hops than the chain has: it stops where none stands out
    assert replayed(rounds=2, hops=5) == [first, hop]
    assert ReplayConfig(rounds=3).chain_hops == 2 and ReplayConfig(rounds=3, hops=0).chain_hops == 0
    for bad in (-1, 9):
        with pytest.raises(ReContextError, match="hops must be 0 to 8"):
            ReplayConfig(hops=bad)


def test_a_repeated_line_is_no_rival_of_itself_and_a_lone_pick_needs_the_ratio() -> None:
    engine = tiny_engine()
    log = "The pump failed at dawn. The tide was low. The pump failed at dawn. Maria fixed the pump at noon."
    question = "When did the pump fail at dawn?"
    config = ReplayConfig(rounds=2, top_k=1, selector=BM25Signal())  # a pool of 2 of 4 sentences
    request = engine._start(log, question, config)
    first = 0  # its copy (sentence 2) is the same line, not a rival
    assert stands_out(request, first, 3.0) and stands_out(request, 2, 3.0) and not stands_out(request, 3, 3.0)
    assert not stands_out(request, first, 50.0)
    assert [e.text for e in engine.select_evidence(log, question, config)] == ["The pump failed at dawn."]
    with pytest.raises(ReContextError, match="standout must be 0"):
        ReplayConfig(standout=0.5)
