"""Similarity of sentences to the query in the model's own input-embedding space.

The soft half of the hybrid selection's lexical side: BM25 credits only shared words, so a question
about "the car" never finds "The automobile was mended ..."; the model's input embeddings put such
tokens close (cosine 0.47 for " car" / " automobile" on SmolLM2-135M, against at most 0.27 for
unrelated words). Each query token is matched to its closest token in a sentence, ColBERT-style,
and weighted by how rare it is in the context, so that words every sentence has count little.
"""

from __future__ import annotations

import torch


def embedding_scores(
    query_ids: list[int],
    context_ids: list[int],
    token_sentence: torch.Tensor,
    num_sentences: int,
    embeddings: torch.Tensor,
) -> torch.Tensor:
    """(num_sentences,) idf-weighted mean, over the query's tokens, of each token's best cosine
    similarity to a token of the sentence; zeros when the query is empty.

    Args:
        query_ids: the query's token ids.
        context_ids: the context's token ids; ``token_sentence`` (same length) gives each one's
            sentence id, -1 where none.
        embeddings: the model's (vocab, dim) input embeddings (any dtype and device).
    """
    scores = torch.zeros(num_sentences)
    ids = torch.as_tensor(context_ids, dtype=torch.long)
    sentence = token_sentence[: len(ids)]
    inside = sentence >= 0
    if not query_ids or not bool(inside.any()):
        return scores
    ids, sentence = ids[inside], sentence[inside]
    query = torch.as_tensor(query_ids, dtype=torch.long)
    vocab, position_word = torch.unique(ids, return_inverse=True)  # gather each distinct token once
    rows = torch.cat([query, vocab]).to(embeddings.device)
    vectors = torch.nn.functional.normalize(embeddings[rows].float(), dim=-1)
    # (query tokens, distinct tokens), computed where the embeddings are
    similarity = (vectors[: len(query)] @ vectors[len(query) :].T).cpu()
    per_position = similarity[:, position_word]  # (query tokens, context tokens)
    index = sentence.expand(len(query), -1)
    best = torch.full((len(query), num_sentences), -1.0).scatter_reduce(
        1, index, per_position, reduce="amax", include_self=True
    )
    # document frequency of each query token over the sentences (exact id matches)
    present = torch.zeros(len(query), num_sentences).scatter_reduce(
        1, index, (ids[None, :] == query[:, None]).float(), reduce="amax", include_self=True
    )
    idf = torch.log((num_sentences + 1) / (present.sum(dim=1) + 0.5)).clamp(min=0.0)
    if float(idf.sum()) <= 0:
        return scores
    return (idf[:, None] * best).sum(dim=0) / idf.sum()
