"""Attention averaged over the cue tokens: a simpler baseline than the recurrence."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .base import Scorer, register_scorer


@register_scorer("mean")
@dataclass
class MeanAttentionScorer(Scorer):
    """Attention averaged over heads and cue tokens alike."""

    def reduce_cue(self, attention: torch.Tensor) -> torch.Tensor:
        return attention.mean(dim=-2)
