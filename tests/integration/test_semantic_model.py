"""The semantic signal on the embedded model: its input embeddings find what BM25 cannot."""

from __future__ import annotations

import random

import pytest
import torch

from recontext_engine.lexical import bm25_scores
from recontext_engine.semantic import embedding_scores
from tests.documents import filler

pytestmark = pytest.mark.model

PARAPHRASE = "The automobile was mended for 40 dollars."
QUESTION = "How much did it cost to fix the car?"
DISTRACTORS = [
    "The pupils read 45 novels during the holidays.",
    "The blaze destroyed 21 barns on the estate.",
    "The chef purchased 13 kilograms of fish at dawn.",
]
AT = 25


def _sentences() -> list[str]:
    sentences = filler(random.Random(3), 40) + DISTRACTORS
    random.Random(4).shuffle(sentences)
    sentences.insert(AT, PARAPHRASE)
    return sentences


def test_the_model_embeddings_rank_a_paraphrase_first_where_bm25_scores_it_zero(engine) -> None:
    sentences = _sentences()
    ids: list[int] = []
    token_sentence: list[int] = []
    for i, sentence in enumerate(sentences):
        tokens = engine.tokenizer(" " + sentence, add_special_tokens=False)["input_ids"]
        ids += tokens
        token_sentence += [i] * len(tokens)
    query = engine.tokenizer(" " + QUESTION, add_special_tokens=False)["input_ids"]
    embeddings = engine.input_embeddings
    scores = embedding_scores(query, ids, torch.tensor(token_sentence), len(sentences), embeddings)
    assert int(scores.argmax()) == AT
    assert float(bm25_scores(QUESTION, sentences)[AT]) == 0.0


def test_selection_with_the_semantic_signal_replays_the_paraphrase(engine) -> None:
    document = " ".join(_sentences())
    evidence = engine.select_evidence(document, QUESTION, top_k=2)  # the default fuses it
    assert PARAPHRASE in [e.text for e in evidence]
