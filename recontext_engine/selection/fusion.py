"""Reciprocal-rank fusion of several signals: the default selector."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ..lexical import reciprocal_ranks
from ..settings import check, setting
from .base import SelectionRound, Signal, register_signal, signal_from_dict


@register_signal("rank_fusion")
@dataclass(frozen=True)
class RankFusion(Signal):
    """``sum(weight * 1 / (10 + rank))`` over the parts' scores: scale-free, so attention mass, BM25
    and cosine similarities add up fairly. A part whose zero means "no match" (BM25) gives such
    sentences no credit; a part that cannot score (None) or has weight 0 is left out; a single part
    left is used as it is."""

    parts: tuple[tuple[Signal, float], ...] = setting(
        "(signal, weight) pairs; weights >= 0; the default selector is attention, BM25 and the "
        "embedding similarity with weight 1 each.",
        (),
    )

    def __post_init__(self) -> None:
        parts = tuple(
            (signal_from_dict(signal) if isinstance(signal, dict | str) else signal, float(weight))
            for signal, weight in self.parts
        )
        object.__setattr__(self, "parts", parts)
        check([(bool(parts), "a rank fusion needs at least one part")])
        for signal, weight in parts:
            check(
                [
                    (isinstance(signal, Signal), f"a fusion part must be a Signal, got {signal!r}"),
                    (weight >= 0.0, f"fusion weights must be >= 0, got {weight}"),
                    (
                        getattr(signal, "unit", "sentence") == "sentence",
                        "the token unit picks positions, not sentences: use AttentionSignal(unit='token') "
                        "as the selector alone",
                    ),
                ]
            )

    def signals(self) -> tuple[Signal, ...]:
        return (self, *(s for signal, _ in self.parts for s in signal.signals()))

    def score(self, round: SelectionRound) -> torch.Tensor | None:
        scored = []
        for signal, weight in self.parts:
            if weight > 0:
                scores = signal.score(round)
                if scores is not None:
                    scored.append((signal, weight, scores))
        if len(scored) <= 1:
            return scored[0][2] if scored else None
        (_, first_weight, first), *rest = scored
        fused = [weight * _ranks(signal, scores) for signal, weight, scores in rest]
        return first_weight * _ranks(scored[0][0], first) + sum(fused)

    def describe(self) -> str:
        return f"{self.name}({', '.join(f'{signal.describe()}*{weight:g}' for signal, weight in self.parts)})"

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "parts": [[signal.to_dict(), weight] for signal, weight in self.parts]}


def _ranks(signal: Signal, scores: torch.Tensor) -> torch.Tensor:
    ranks = reciprocal_ranks(scores)
    return torch.where(scores > 0, ranks, 0.0) if signal.zero_is_no_match else ranks
