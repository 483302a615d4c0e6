"""The sentence embedder (MiniLM from its wheel) in selection: it finds the answer a paraphrase hides,
on a real document (apt's NEWS.Debian, as the documents benchmark keeps it)."""

from __future__ import annotations

import sys

import pytest

from recontext_engine import ReContextError
from recontext_engine.bench.documents import read_document
from recontext_engine.lexical import bm25_scores
from recontext_engine.selection import semantic_selector
from recontext_engine.sentence_embedder import (
    _context_embeddings,
    default_embedder_installed,
    load_embedder,
    sentence_similarities,
)
from recontext_engine.spans import split_sentences

# The question shares no content word with its answer, "apt(8) now waits for the lock indefinitely
# if connected to a tty, or for 120 seconds if not." (the documents benchmark's apt-lock-wait).
QUESTION = "Without a terminal, how long will the package tool hold off before giving up on exclusive access?"
ANSWER = "120 seconds"


def test_minilm_ranks_the_paraphrased_answer_high_where_bm25_shares_no_word() -> None:
    text = read_document("changelog/apt.NEWS.Debian.txt")
    sentences = [text[a:b] for a, b in split_sentences(text)]
    gold = next(i for i, s in enumerate(sentences) if ANSWER in s)
    similarities = sentence_similarities(QUESTION, sentences)
    assert similarities.shape == (len(sentences),)
    assert sorted(similarities.tolist(), reverse=True).index(float(similarities[gold])) < 4
    assert float(bm25_scores(QUESTION, sentences)[gold]) == 0.0


def test_a_context_asked_again_is_not_embedded_again() -> None:
    sentences = ["The ferry left at noon.", "The museum opens on Mondays."]
    sentence_similarities("When did the ferry leave?", sentences)
    hits = _context_embeddings.cache_info().hits
    sentence_similarities("When does the museum open?", sentences)
    assert _context_embeddings.cache_info().hits == hits + 1


@pytest.mark.model
def test_the_semantic_selector_replays_the_paraphrased_answer(engine) -> None:
    text = read_document("changelog/apt.NEWS.Debian.txt")
    document = text[: text.index("\n\n", 6000)]  # the newest entries, about 1.5K tokens
    evidence = engine.select_evidence(document, QUESTION, selector=semantic_selector(), rounds=1)
    assert any(ANSWER in e.text for e in evidence), [e.text for e in evidence]


@pytest.mark.model
def test_with_the_embedder_installed_the_default_replays_the_paraphrased_answer(engine) -> None:
    # The test environment installs recontext[embeddings], as a user's does; without it the default
    # is the hybrid selector (tests/unit/test_selection.py).
    assert default_embedder_installed()
    text = read_document("changelog/apt.NEWS.Debian.txt")
    document = text[: text.index("\n\n", 6000)]
    evidence = engine.select_evidence(document, QUESTION)
    assert any(ANSWER in e.text for e in evidence), [e.text for e in evidence]


def test_a_missing_sentence_transformers_is_one_clear_error(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)  # import fails
    with pytest.raises(ReContextError, match=r"recontext\[embeddings\]"):
        load_embedder("a-model-not-loaded-before")


def test_an_embedder_that_cannot_be_loaded_is_one_clear_error(tmp_path) -> None:
    with pytest.raises(ReContextError, match="cannot load the sentence embedder"):
        load_embedder(str(tmp_path / "no-such-model"))
