"""A selection round without a model: fixed attention rows, a fixed context, for the signal tests."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from recontext_engine import ReplayConfig
from recontext_engine.prompt import Prefix, Suffix
from recontext_engine.reads import AttentionRead
from recontext_engine.request import Request
from recontext_engine.selection import (
    AttentionSignal,
    RankFusion,
    SelectionRound,
    Signal,
    pick_sentences,
)
from recontext_engine.spans import Sentence


@dataclass(frozen=True)
class FixedSignal(Signal):
    """Given scores, every round (not registered: a test double for a fusion's parts)."""

    values: tuple[float, ...] = ()
    no_match_at_zero: bool = False

    @property
    def zero_is_no_match(self) -> bool:  # type: ignore[override]
        return self.no_match_at_zero

    def score(self, round: SelectionRound) -> torch.Tensor:
        return torch.tensor(self.values, dtype=torch.float)[: round.num_sentences]


class FixedReader:
    """Reads return ``rows`` (one head, one cue token) whatever the suffix; no embeddings."""

    input_embeddings = None

    def __init__(self, rows: torch.Tensor) -> None:
        self.rows = rows

    def read(self, request, evidence, questions, cue_window, evidence_rows=False) -> AttentionRead:
        suffix = Suffix([0], torch.tensor([-1]), 0)
        return AttentionRead([suffix] * len(questions), [self.rows] * len(questions))

    def tokenize(self, text: str) -> list[int]:
        return [len(word) for word in text.split()]


def fake_round(position_scores: torch.Tensor, token_sentence: torch.Tensor, top_k: int = 4) -> SelectionRound:
    """A round over a context whose position ``i`` belongs to sentence ``token_sentence[i]`` and gets
    attention ``position_scores[i]`` (read with the ``mean`` scorer, one head, one cue token)."""
    count = int(token_sentence.max()) + 1 if bool((token_sentence >= 0).any()) else 0
    sentences = [Sentence(0, 10 * i, 10 * i + 9) for i in range(count)]
    document = "".join(f"sentence{i}." for i in range(count))
    prefix = Prefix(list(range(len(token_sentence))), token_sentence, [document], sentences)
    request = Request(prefix, "question?", ReplayConfig(), cache=None)
    reader = FixedReader(position_scores.float()[None, None, :])
    return SelectionRound(1, request, [], reader, top_k)  # type: ignore[arg-type]


def select(
    scores: torch.Tensor,
    token_sentence: torch.Tensor,
    top_k: int,
    unit: str = "sentence",
    lexical: torch.Tensor | None = None,
    semantic: torch.Tensor | None = None,
    exclude: list[int] | range = (),  # type: ignore[assignment]
    first_copy: torch.Tensor | None = None,
    weights: tuple[float, float] = (1.0, 1.0),
) -> list[tuple[int, float]]:
    """One round's picks: attention from ``scores`` (fused by rank with ``lexical``, a BM25-like
    part, and ``semantic`` where given), as the engine's round loop picks them."""
    attention: Signal = AttentionSignal(scorer="mean", unit=unit)  # type: ignore[arg-type]
    parts: list[tuple[Signal, float]] = [(attention, 1.0)]
    if lexical is not None:
        parts.append((FixedSignal(tuple(lexical.tolist()), no_match_at_zero=True), weights[0]))
    if semantic is not None:
        parts.append((FixedSignal(tuple(semantic.tolist())), weights[1]))
    selector = RankFusion(tuple(parts)) if len(parts) > 1 else attention
    round = fake_round(scores, token_sentence, top_k)
    fused = selector.score(round)
    assert fused is not None
    return pick_sentences(fused, round.request.present, top_k, list(exclude), first_copy)
