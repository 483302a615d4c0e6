"""The scorer interface and the name -> class registry that configs, the CLI and tests share."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

import torch

from ..errors import ReContextError

if TYPE_CHECKING:
    from ..config import ReplayConfig


class Scorer(ABC):
    """Turns the cue's attention rows into one score per candidate position.

    A subclass writes only :meth:`reduce_cue`. The engine calls :meth:`score` on the rows of its
    head set; head detection calls :meth:`reduce_cue` on per-head rows and on head averages that
    it has already summed per sentence, so ``reduce_cue`` must commute with summing candidates
    (linear up to a normalisation over all candidates, as both built-in rules are).
    """

    name: str = ""  # set by :func:`register_scorer`

    @classmethod
    def from_config(cls, config: ReplayConfig) -> Scorer:
        """The scorer a :class:`~recontext_engine.ReplayConfig` asks for (override to read its fields)."""
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


SCORERS: dict[str, type[Scorer]] = {}
"""Registered scorers by name (see :func:`register_scorer`)."""

S = TypeVar("S", bound=type[Scorer])


def register_scorer(name: str) -> Callable[[S], S]:
    """Class decorator: register a :class:`Scorer` under ``name`` (a name is taken only once)."""

    def register(cls: S) -> S:
        if name in SCORERS:
            raise ReContextError(f"a scorer named {name!r} is already registered ({SCORERS[name].__name__})")
        if not (isinstance(cls, type) and issubclass(cls, Scorer)):
            raise ReContextError(f"{cls!r} is not a Scorer subclass")
        cls.name = name
        SCORERS[name] = cls
        return cls

    return register


def get_scorer(name: str) -> type[Scorer]:
    """The scorer class registered under ``name``; an unknown name is one clear error."""
    try:
        return SCORERS[name]
    except KeyError:
        raise ReContextError(f"unknown scorer {name!r}; choose from {', '.join(SCORERS)}") from None


def scorer_for(config: ReplayConfig) -> Scorer:
    """The scorer ``config.scorer`` names, built from ``config``."""
    return get_scorer(config.scorer).from_config(config)
