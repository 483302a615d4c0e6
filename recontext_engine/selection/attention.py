"""The model's own attention: what the retrieval heads' cue tokens look at (the paper's signal)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import torch

from ..prompt import NULL_QUESTION
from ..scoring import DEFAULT_SCORER, Scorer, get_scorer
from ..scoring.evidence_cue import evidence_cue_scores
from ..settings import check, setting
from .base import SelectionRound, Signal, register_signal

if TYPE_CHECKING:
    from ..prompt import Suffix
    from ..reads import AttentionRead
    from ..request import Request


@register_signal("attention")
@dataclass(frozen=True)
class AttentionSignal(Signal):
    """Attention of the last ``cue_window`` prompt tokens, read from the head set, per sentence."""

    scorer: str = setting(
        "Registered scoring rule that reduces the cue's attention rows (recontext_engine.scoring.SCORERS).",
        DEFAULT_SCORER,
    )
    decay: float = setting("lambda of the cue recurrence r(t) = normalize(a(t) + lambda r(t-1)).", 0.75)
    cue_window: int = setting("Number w of last prompt tokens read as the cue.", 8)
    candidates: Literal["context", "full_prompt"] = setting(
        "Score the context positions only (the paper) or the whole prompt.", "context"
    )
    unit: Literal["token", "sentence"] = setting(
        "'sentence': a sentence's summed position scores; 'token': the paper's rule, the top-K positions "
        "mapped to their sentences (attention then selects alone).",
        "sentence",
    )
    null_calibration: bool = setting(
        "Subtract the attention of a null question over the same context (QRHead/ICR); off by default: "
        "in the fusion it cost paraphrase recall and a read pass; attention alone finds chains better "
        "with it.",
        False,
    )
    evidence_cue: float = setting(
        "Rounds >= 2: weight of the replayed evidence's own attention (each context position's strongest "
        "attention from an evidence token), which points at the next hop of a chain; 0 = off.",
        0.0,
    )

    def __post_init__(self) -> None:
        check(
            [
                (0.0 <= self.decay <= 1.0, f"decay must be in [0, 1], got {self.decay}"),
                (1 <= self.cue_window <= 256, f"cue_window must be between 1 and 256, got {self.cue_window}"),
                (self.candidates in ("context", "full_prompt"), f"unknown candidates {self.candidates!r}"),
                (self.unit in ("token", "sentence"), f"unknown unit {self.unit!r}"),
                (self.evidence_cue >= 0.0, f"evidence_cue must be >= 0, got {self.evidence_cue}"),
            ]
        )
        get_scorer(self.scorer)  # an unknown name is a ReContextError listing the registered ones

    def make_scorer(self) -> Scorer:
        """The scorer ``self.scorer`` names, with this signal's settings."""
        return get_scorer(self.scorer).from_signal(self)

    def score(self, round: SelectionRound) -> torch.Tensor:
        scores, token_sentence = self.position_scores(round.request, self.read(round))
        valid = token_sentence >= 0
        if self.unit == "sentence":
            mass = torch.zeros(round.num_sentences)
            return mass.index_add_(0, token_sentence[valid], scores[valid].float())
        # the paper's rule: the top-K positions, each sentence scored by its best one among them
        positions = torch.nonzero(valid).squeeze(-1)
        best = positions[torch.argsort(scores[positions], descending=True, stable=True)[: round.top_k]]
        picked = torch.full((round.num_sentences,), float("-inf"))
        for position in reversed(best.tolist()):  # the best position of a sentence is written last
            picked[int(token_sentence[position])] = float(scores[position])
        return picked

    def read(self, round: SelectionRound) -> AttentionRead:
        """The round's read passes: the question's, and the null question's with ``null_calibration``."""
        questions = [round.question, NULL_QUESTION] if self.null_calibration else [round.question]
        return round.reader.read(
            round.request, round.evidence, questions, self.cue_window, self.evidence_cue > 0
        )

    def position_scores(self, request: Request, read: AttentionRead) -> tuple[torch.Tensor, torch.Tensor]:
        """Scores of the candidate positions (the question's, minus the null question's with
        ``null_calibration``, plus the evidence cue), and the sentence id of each (-1: none)."""
        scores, token_sentence = self.cue_scores(request, read.suffixes[0], read.rows[0])
        if self.null_calibration:
            scores = scores - self.cue_scores(request, read.suffixes[1], read.rows[1])[0]
        if read.evidence_rows is not None:
            cue = evidence_cue_scores(read.evidence_rows, request.prefix.token_sentence)
            scores = scores.clone()
            scores[: len(cue)] += self.evidence_cue * cue
        return scores, token_sentence

    def cue_scores(
        self, request: Request, suffix: Suffix, rows: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One read pass's scores of the candidate positions, and the sentence id of each."""
        prefix = request.prefix
        if self.candidates == "context":
            rows, token_sentence = rows[..., : len(prefix.ids)], prefix.token_sentence
        else:
            token_sentence = torch.cat([prefix.token_sentence, suffix.token_sentence])
        return self.make_scorer().score(rows), token_sentence
