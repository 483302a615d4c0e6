"""An oracle for the benchmark: the sentences that overlap known gold spans."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..settings import setting
from .base import SelectionRound, Signal, register_signal


@register_signal("oracle")
@dataclass(frozen=True)
class OracleSignal(Signal):
    """1 for every sentence overlapping one of ``spans``, 0 (never picked) for the others."""

    zero_is_no_match = True
    spans: tuple[tuple[int, int, int], ...] = setting(
        "(doc_index, char_start, char_end) of the gold text in the documents.", ()
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "spans", tuple(tuple(int(x) for x in span) for span in self.spans))

    def score(self, round: SelectionRound) -> torch.Tensor:
        scores = torch.zeros(round.num_sentences)
        sentences = round.request.prefix.sentences[: round.num_sentences]
        for i, s in enumerate(sentences):
            if any(doc == s.doc_index and start < s.end and s.start < end for doc, start, end in self.spans):
                scores[i] = 1.0
        return scores
