"""Scorers turn the cue's attention rows into one score per candidate position.

Each scorer is a small dataclass behind one method, ``score(rows) -> scores``; the replay
controller knows only this interface.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import torch


class Scorer(ABC):
    @abstractmethod
    def score(self, rows: torch.Tensor) -> torch.Tensor:
        """Score candidates.

        Args:
            rows: (num_heads, w, n) attention of the w cue tokens over n candidate positions.

        Returns:
            (n,) float32 scores.
        """


@dataclass
class CueRecurrenceScorer(Scorer):
    """The paper's recurrence over cue tokens: ``r(t) = normalize(a(t) + decay * r(t-1))``.

    ``a(t)`` is the head-averaged attention of cue token t; normalize is the L1 norm over the
    candidates, so ``r`` stays a distribution over them.
    """

    decay: float = 0.75

    def score(self, rows: torch.Tensor) -> torch.Tensor:
        attention = rows.float().mean(dim=0)  # (w, n)
        r = torch.zeros(attention.shape[-1])
        for a in attention:
            r = a + self.decay * r
            r = r / r.sum().clamp_min(1e-12)
        return r


@dataclass
class MeanAttentionScorer(Scorer):
    """Attention averaged over heads and cue tokens alike (a simpler baseline)."""

    def score(self, rows: torch.Tensor) -> torch.Tensor:
        return rows.float().mean(dim=(0, 1))


SCORERS: dict[str, type[Scorer]] = {"cue_recurrence": CueRecurrenceScorer, "mean": MeanAttentionScorer}
