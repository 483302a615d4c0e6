"""Similarity of sentences to the query in the model's own input-embedding space.

The soft half of the hybrid selection's lexical side: BM25 credits only shared words, so a question
about "the car" never finds "The automobile was mended ..."; the model's input embeddings put such
tokens close (cosine 0.47 for " car" / " automobile" on SmolLM2-135M, against at most 0.27 for
unrelated words). Each query token is matched to its closest token in a sentence, ColBERT-style,
and weighted by how rare it is in the context, so that words every sentence has count little.
"""

from __future__ import annotations

import torch


class EmbeddingIndex:
    """The context side of :func:`embedding_scores`, built once per request and scored per round's query.

    Args:
        context_ids: the context's token ids; ``token_sentence`` (same length) gives each one's
            sentence id, -1 where none.
        embeddings: the model's (vocab, dim) input embeddings (any dtype and device).
    """

    def __init__(
        self,
        context_ids: list[int],
        token_sentence: torch.Tensor,
        num_sentences: int,
        embeddings: torch.Tensor,
    ) -> None:
        self.num_sentences = num_sentences
        self.embeddings = embeddings
        ids = torch.as_tensor(context_ids, dtype=torch.long)
        sentence = token_sentence[: len(ids)]
        inside = sentence >= 0
        self.ids, self.sentence = ids[inside], sentence[inside]
        # each distinct token is embedded once; ``position_word`` maps positions to them
        self.vocab, self.position_word = torch.unique(self.ids, return_inverse=True)
        self.vectors = _unit(embeddings, self.vocab)

    def scores(self, query_ids: list[int]) -> torch.Tensor:
        """(num_sentences,) idf-weighted mean, over the query's tokens, of each token's best cosine
        similarity to a token of the sentence; zeros when the query or the context is empty."""
        scores = torch.zeros(self.num_sentences)
        if not query_ids or not len(self.ids):
            return scores
        query = torch.as_tensor(query_ids, dtype=torch.long)
        # (query tokens, distinct tokens), computed where the embeddings are
        similarity = (_unit(self.embeddings, query) @ self.vectors.T).cpu()
        per_position = similarity[:, self.position_word]  # (query tokens, context tokens)
        index = self.sentence.expand(len(query), -1)
        best = torch.full((len(query), self.num_sentences), -1.0).scatter_reduce(
            1, index, per_position, reduce="amax", include_self=True
        )
        # document frequency of each query token over the sentences (exact id matches)
        present = torch.zeros(len(query), self.num_sentences).scatter_reduce(
            1, index, (self.ids[None, :] == query[:, None]).float(), reduce="amax", include_self=True
        )
        idf = torch.log((self.num_sentences + 1) / (present.sum(dim=1) + 0.5)).clamp(min=0.0)
        if float(idf.sum()) <= 0:
            return scores
        return (idf[:, None] * best).sum(dim=0) / idf.sum()


def embedding_scores(
    query_ids: list[int],
    context_ids: list[int],
    token_sentence: torch.Tensor,
    num_sentences: int,
    embeddings: torch.Tensor,
) -> torch.Tensor:
    """One query's :meth:`EmbeddingIndex.scores` over one context."""
    return EmbeddingIndex(context_ids, token_sentence, num_sentences, embeddings).scores(query_ids)


def _unit(embeddings: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Unit-length float32 embeddings of ``ids``, on the embeddings' device."""
    return torch.nn.functional.normalize(embeddings[ids.to(embeddings.device)].float(), dim=-1)
