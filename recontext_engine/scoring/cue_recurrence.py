"""The paper's cue recurrence (Zhao et al. 2026, arXiv 2607.02509)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from .base import Scorer, register_scorer

if TYPE_CHECKING:
    from ..selection import AttentionSignal


@register_scorer("cue_recurrence")
@dataclass
class CueRecurrenceScorer(Scorer):
    """``r(t) = normalize(a(t) + decay * r(t-1))`` over the cue tokens t.

    ``a(t)`` is the head-averaged attention of cue token t; normalize is the L1 norm over the
    candidates, so ``r`` stays a distribution over them.
    """

    decay: float = 0.75

    @classmethod
    def from_signal(cls, signal: AttentionSignal) -> CueRecurrenceScorer:
        return cls(signal.decay)

    def reduce_cue(self, attention: torch.Tensor) -> torch.Tensor:
        r = torch.zeros(attention.shape[:-2] + attention.shape[-1:])  # (..., n)
        for t in range(attention.shape[-2]):
            r = attention[..., t, :] + self.decay * r
            r = r / r.sum(dim=-1, keepdim=True).clamp_min(1e-12)
        return r
