"""The reranker behind ``ReContextEngine.document_scores``: order invariance on a tiny random Llama,
the per-document reads, the semantic signal and the rank fusion."""

from __future__ import annotations

import random

import pytest
import torch

from recontext_engine.rerank import (
    fuse,
    fusion_weights,
    joint_mass,
    read_document,
    reciprocal_ranks,
    semantic_scores,
)
from recontext_engine.selection import AttentionSignal, BM25Signal, EmbeddingSignal, RankFusion
from tests.documents import filler
from tests.unit.test_engine_hooks import QUESTION, tiny_engine


@pytest.fixture(scope="module")
def engine():
    return tiny_engine()


def _documents() -> list[str]:
    rng = random.Random(11)
    return [" ".join(filler(rng, n)) for n in (3, 6, 2, 4)]


@pytest.mark.parametrize(("lexical_weight", "semantic_weight"), [(0.0, 1.0), (1.0, 0.0), (1.0, 1.0)])
def test_scores_do_not_depend_on_the_order(engine, lexical_weight, semantic_weight):
    documents = _documents()
    parts = ((AttentionSignal(), 1.0), (BM25Signal(), lexical_weight), (EmbeddingSignal(), semantic_weight))
    config = engine.default_config.with_options(selector=RankFusion(parts))
    assert fusion_weights(config.selector) == (lexical_weight, semantic_weight)
    given = engine.document_scores(documents, QUESTION, config)
    order = [2, 0, 3, 1]
    shuffled = engine.document_scores([documents[i] for i in order], QUESTION, config)
    assert shuffled == pytest.approx([given[i] for i in order], abs=1e-6)


def test_attention_only_is_the_calibrated_mass_of_each_document_alone(engine):
    documents = _documents()
    config = engine.default_config.with_options(selector=AttentionSignal())
    alone = [read_document(engine, d, QUESTION, config).attention for d in documents]
    assert engine.document_scores(documents, QUESTION, config) == pytest.approx(alone, abs=1e-6)
    # the joint read (the former scores) sees every document in one prompt, in the order given
    assert len(joint_mass(engine, documents, QUESTION, config)) == len(documents)


def test_semantic_scores_are_each_documents_best_sentence(engine):
    documents = _documents()
    config = engine.default_config
    reads = [read_document(engine, d, QUESTION, config) for d in documents]
    both = semantic_scores(engine, reads, QUESTION)
    assert both is not None and both.shape == (len(documents),)
    assert bool((both >= -1.0).all()) and bool((both <= 1.0 + 1e-5).all())
    order = [3, 1, 0, 2]
    back = semantic_scores(engine, [reads[i] for i in order], QUESTION)
    assert back.tolist() == pytest.approx([float(both[i]) for i in order], abs=1e-6)


def test_reciprocal_ranks_share_ties():
    ranks = reciprocal_ranks(torch.tensor([0.2, 0.5, 0.2, 0.1]))
    assert ranks.tolist() == pytest.approx([1 / 11, 1 / 10, 1 / 11, 1 / 13])


def test_fusion_ties_go_to_attention_in_any_order():
    lexical = torch.tensor([1.0, 2.0, 0.5])
    semantic = torch.tensor([0.3, 0.1, 0.2])
    # attention and semantic prefer the first, BM25 the second
    fused = fuse([0.9, 0.1, 0.5], lexical, 1.0, semantic, 1.0)
    assert max(range(3), key=fused.__getitem__) == 0
    order = [2, 0, 1]
    back = fuse([[0.9, 0.1, 0.5][i] for i in order], lexical[order], 1.0, semantic[order], 1.0)
    assert back == pytest.approx([fused[i] for i in order])
    # equal fused ranks: the attention breaks the tie
    two = fuse([0.9, 0.1], torch.tensor([1.0, 2.0]), 1.0)
    assert two[0] > two[1]
    # a document sharing no term with the question gets no lexical share: only its attention rank
    unmatched = fuse([0.1, 0.9], torch.tensor([1.0, 0.0]), 1.0)
    assert unmatched == pytest.approx([(1 / 11 + 1 / 10) + 1e-4 / 11, 1 / 10 + 1e-4 / 10])
    assert fuse([0.9, 0.1], torch.tensor([1.0, 2.0]), 0.0) == pytest.approx([0.9, 0.1])
