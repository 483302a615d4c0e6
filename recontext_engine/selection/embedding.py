"""Similarity to the query in the model's own input-embedding space (:mod:`~recontext_engine.semantic`)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..settings import setting
from .base import SelectionRound, Signal, register_signal


@register_signal("embedding")
@dataclass(frozen=True)
class EmbeddingSignal(Signal):
    """Each query token's closest token in a sentence, idf-weighted, in the model's input embeddings:
    it matches words BM25 cannot ("car" and "automobile"). None where the backend gives no input
    embeddings (a fusion then goes on without it)."""

    recursive: bool = setting(
        "The query grows with the connected pooled sentences from round 2, as BM25Signal's.", True
    )

    def score(self, round: SelectionRound) -> torch.Tensor | None:
        index = round.embedding_index()
        if index is None:
            return None
        query = round.query if self.recursive else round.question
        return index.scores(round.tokenize(" " + query))[: round.num_sentences]
