"""BM25 scores of sentences against the question: the lexical half of the hybrid selection."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def bm25_scores(question: str, sentences: Sequence[str]) -> torch.Tensor:
    """(len(sentences),) BM25 scores (``bm25s``, English stop words removed); zeros if nothing matches."""
    import bm25s

    scores = torch.zeros(len(sentences))
    corpus = bm25s.tokenize(list(sentences), stopwords="en", show_progress=False)
    query = bm25s.tokenize([question], stopwords="en", show_progress=False)
    if not sentences or not corpus.vocab or not query.vocab:
        return scores
    retriever = bm25s.BM25()
    retriever.index(corpus, show_progress=False)
    try:
        ids, values = retriever.retrieve(query, k=len(sentences), show_progress=False)
    except ValueError:  # no query word is in the corpus vocabulary
        return scores
    scores[torch.as_tensor(ids[0], dtype=torch.long)] = torch.as_tensor(values[0], dtype=torch.float)
    return scores


def reciprocal_ranks(values: torch.Tensor, offset: float = 10.0) -> torch.Tensor:
    """``1 / (offset + rank)`` for each value (rank 0 = largest): scale-free, for rank fusion."""
    order = torch.argsort(values, descending=True, stable=True)
    ranks = torch.empty_like(values, dtype=torch.float)
    ranks[order] = torch.arange(len(values), dtype=torch.float)
    return 1.0 / (offset + ranks)
