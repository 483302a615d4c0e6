"""The semantic signal: similarity to the query in the model's input-embedding space."""

from __future__ import annotations

import warnings

import pytest
import torch

from recontext_engine.errors import ReContextError
from recontext_engine.selection import AttentionSignal, EmbeddingSignal, RankFusion
from recontext_engine.semantic import EmbeddingIndex, embedding_scores
from tests.selection_fakes import select

# Token 1 and 2 are near synonyms, 3 and 4 are unrelated, 5 is everywhere (a common word).
EMBEDDINGS = torch.tensor(
    [[0.0, 0.0, 1.0], [1.0, 0.0, 0.0], [0.9, 0.1, 0.0], [0.0, 1.0, 0.0], [0.1, 0.9, 0.1], [0.5, 0.5, 0.7]]
)


def test_a_sentence_with_a_synonym_of_the_query_scores_above_unrelated_ones() -> None:
    context = [5, 3, 9, 5, 2, 5, 4]  # token 9 is outside every sentence (template)
    token_sentence = torch.tensor([0, 0, -1, 1, 1, 2, 2])
    embeddings = torch.cat([EMBEDDINGS, torch.eye(3)[:1].repeat(4, 1)])  # ids up to 9
    scores = embedding_scores([1, 5], context, token_sentence, 3, embeddings)
    assert int(scores.argmax()) == 1
    # the query token every sentence holds weighs almost nothing next to the rare one
    alone = embedding_scores([1], context, token_sentence, 3, embeddings)
    assert torch.allclose(scores, alone, atol=0.05)


def test_an_empty_query_or_context_scores_zero() -> None:
    token_sentence = torch.tensor([0, 1])
    assert embedding_scores([], [1, 2], token_sentence, 2, EMBEDDINGS).tolist() == [0.0, 0.0]
    assert embedding_scores([1], [1, 2], torch.tensor([-1, -1]), 2, EMBEDDINGS).tolist() == [0.0, 0.0]


def test_one_index_scores_each_round_query_against_the_same_context() -> None:
    index = EmbeddingIndex([5, 3, 5, 2, 4], torch.tensor([0, 0, 1, 1, 2]), 3, EMBEDDINGS)
    best = [int(index.scores(query).argmax()) for query in ([3], [1], [4], [3])]
    assert best == [0, 1, 2, 0]  # token 1's synonym 2 is in sentence 1; a query leaves nothing behind


def test_the_semantic_ranks_join_the_fusion_only_with_a_weight() -> None:
    token_sentence = torch.tensor([0, 1, 2])
    attention = torch.tensor([0.5, 0.3, 0.2])
    semantic = torch.tensor([0.1, 0.2, 0.9])
    alone = select(attention, token_sentence, 1, semantic=semantic)
    weighted = select(attention, token_sentence, 1, semantic=semantic, weights=(1.0, 2.0))
    assert alone[0][0] == 0
    assert weighted[0][0] == 2


def test_a_fusion_refuses_a_negative_weight() -> None:
    with pytest.raises(ReContextError, match="weights must be >= 0"):
        RankFusion(((AttentionSignal(), 1.0), (EmbeddingSignal(), -1.0)))


def _tiny_checkpoint(folder, shard: bool):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=True,
    )  # fmt: skip
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    model.save_pretrained(folder, max_shard_size="8KB" if shard else "1GB")
    return model


@pytest.mark.parametrize("shard", [False, True])
def test_the_vllm_backend_reads_the_input_embeddings_from_the_checkpoint(tmp_path, shard: bool) -> None:
    from recontext_engine.readout.vllm.embeddings import load_input_embeddings

    model = _tiny_checkpoint(tmp_path, shard)
    assert (tmp_path / "model.safetensors.index.json").is_file() == shard
    loaded = load_input_embeddings(str(tmp_path), model.config)
    assert loaded is not None
    assert torch.equal(loaded, model.get_input_embeddings().weight.detach())


def test_a_checkpoint_without_the_embeddings_warns_and_gives_none(tmp_path) -> None:
    from safetensors.torch import save_file

    from recontext_engine.readout.vllm.embeddings import load_input_embeddings

    model = _tiny_checkpoint(tmp_path, shard=False)
    (tmp_path / "model.safetensors").unlink()
    save_file({"other.weight": torch.zeros(2)}, str(tmp_path / "model.safetensors"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert load_input_embeddings(str(tmp_path), model.config) is None
    assert any("semantic signal" in str(w.message) for w in caught)
