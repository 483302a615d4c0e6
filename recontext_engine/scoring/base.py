"""The scorer interface and the name -> class registry that configs, the CLI and tests share."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING

import torch

from ..registry import Registry

if TYPE_CHECKING:
    from ..selection import AttentionSignal


class Scorer(ABC):
    """Turns the cue's attention rows into one score per candidate position.

    A subclass writes only :meth:`reduce_cue`. The engine calls :meth:`score` on the rows of its
    head set; head detection calls :meth:`reduce_cue` on per-head rows and on head averages that
    it has already summed per sentence, so ``reduce_cue`` must commute with summing candidates
    (linear up to a normalisation over all candidates, as both built-in rules are).
    """

    name: str = ""  # set by :func:`register_scorer`

    @classmethod
    def from_signal(cls, signal: AttentionSignal) -> Scorer:
        """The scorer an :class:`~recontext_engine.selection.AttentionSignal` asks for (override to
        read its settings, such as ``decay``)."""
        return cls()

    @abstractmethod
    def reduce_cue(self, attention: torch.Tensor) -> torch.Tensor:
        """Collapse the cue axis.

        Args:
            attention: (..., w, n) float32 attention of the w cue tokens over n candidates.

        Returns:
            (..., n) float32 scores.
        """

    def score(self, rows: torch.Tensor) -> torch.Tensor:
        """Score candidates.

        Args:
            rows: (num_heads, w, n) attention of the w cue tokens over n candidate positions.

        Returns:
            (n,) float32 scores.
        """
        return self.reduce_cue(rows.float().mean(dim=0))  # (w, n) averaged over the head set


SCORERS: Registry[Scorer] = Registry("scorer", Scorer)
"""Registered scorers by name (see :func:`register_scorer`)."""

register_scorer = SCORERS.register
"""Class decorator: register a :class:`Scorer` under a name (a name is taken only once)."""

get_scorer = SCORERS.lookup
"""The scorer class registered under a name; an unknown name is one clear error."""
