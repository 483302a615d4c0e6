"""Scorers: the cue's attention rows -> one score per candidate position.

Each scoring rule is a small dataclass in its own module, registered by name with
:func:`register_scorer`; :class:`~recontext_engine.selection.AttentionSignal`'s ``scorer`` setting, the
``recontext heads detect --scorer`` choices and the scorer tests all read :data:`SCORERS`.
Importing this package registers the built-in rules.
"""

from .base import SCORERS, Scorer, get_scorer, register_scorer
from .cue_recurrence import CueRecurrenceScorer
from .mean import MeanAttentionScorer

DEFAULT_SCORER = "cue_recurrence"

__all__ = [
    "DEFAULT_SCORER",
    "SCORERS",
    "CueRecurrenceScorer",
    "MeanAttentionScorer",
    "Scorer",
    "get_scorer",
    "register_scorer",
]
