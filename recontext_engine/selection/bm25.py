"""BM25: the sentences that share the question's words (``bm25s``)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..lexical import bm25_term_scores, lexical_tokens
from ..settings import setting
from .base import SelectionRound, Signal, register_signal


@register_signal("bm25")
@dataclass(frozen=True)
class BM25Signal(Signal):
    """BM25 scores of the sentences against the question (stop words of the documents' language
    removed, words stemmed, snake_case names split too; character pairs in Chinese and Japanese).
    A sentence scoring 0 shares no word with
    the query: it is never picked by BM25 alone and earns no credit in a fusion."""

    zero_is_no_match = True
    recursive: bool = setting(
        "From round 2 the query is the question plus the pooled sentences connected to it, which "
        "finds the next hop of a chain; False: the question alone every round.",
        True,
    )

    def score(self, round: SelectionRound) -> torch.Tensor:
        request = round.request
        query = round.query if self.recursive else round.question
        if query == round.question:
            scores = request.question_scores
        else:  # the sentences' terms are tokenized once per request, not once per round
            scores = bm25_term_scores(lexical_tokens(query, round.language), request.sentence_terms)
        return scores[: round.num_sentences]
