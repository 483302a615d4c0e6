"""The evidence pool that rounds fill, and the adaptive budget's margin."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..results import Evidence

EVIDENCE_ORDERS = ("document", "round", "score", "score_last")
EXTENDING_ORDERS = ("round", "score")  # each round's evidence goes after the earlier rounds'


def within_margin(picks: list[tuple[int, float]], margin: float) -> list[tuple[int, float]]:
    """The best-first ``picks`` scoring at least ``margin`` times the best one (all if it is not positive)."""
    if margin <= 0 or not picks or picks[0][1] <= 0:
        return picks
    floor = margin * picks[0][1]
    return [(s, score) for s, score in picks if score >= floor]


@dataclass
class EvidencePool:
    """Evidence gathered over rounds: it never shrinks, holds no duplicates and reads in document
    order. ``limit`` counts the picked sentences; what is replayed with them (their headings, a
    picked heading's first sentence) comes on top."""

    limit: int
    _items: dict[int, Evidence] = field(default_factory=dict)
    _picked: int = 0

    def add(self, sentence_id: int, evidence: Evidence, counted: bool | None = None) -> bool:
        """Add one sentence; False if it is already there or the pool is full. What is replayed
        with a pick (``counted=False``; by default a heading, ``evidence.heading``) does not count
        against the limit."""
        counted = not evidence.heading if counted is None else counted
        if sentence_id in self._items or (counted and self._picked >= self.limit):
            return False
        self._items[sentence_id] = evidence
        self._picked += counted
        return True

    def __len__(self) -> int:
        """The picked sentences (what is replayed with them not counted)."""
        return self._picked

    def __contains__(self, sentence_id: int) -> bool:
        return sentence_id in self._items

    def ordered(self) -> list[Evidence]:
        """Evidence in document order (sentence ids follow the documents)."""
        return [self._items[s] for s in sorted(self._items)]

    def by_score(self) -> list[Evidence]:
        """Evidence best-scored first: earlier rounds before later ones, by score within a round (a
        heading, scored as the sentence it came with, just before it)."""
        return sorted(self._items.values(), key=lambda e: (e.round, -e.score, not e.heading))

    def by_score_last(self) -> list[Evidence]:
        """:meth:`by_score` reversed, each heading still just before its sentence."""
        return sorted(self._items.values(), key=lambda e: (-e.round, e.score, not e.heading))

    def by_round(self) -> list[Evidence]:
        """Evidence round after round, each round's in document order: every round extends the block."""
        return [e for _, e in sorted(self._items.items(), key=lambda item: (item[1].round, item[0]))]

    def arranged(self, order: str) -> list[Evidence]:
        """The evidence in ``ReplayConfig.evidence_order``: ``"document"``, ``"round"``, ``"score"``
        (best first) or ``"score_last"`` (best last, next to the question)."""
        if order == "document":
            return self.ordered()
        if order == "round":
            return self.by_round()
        return self.by_score() if order == "score" else self.by_score_last()

    def sentence_ids(self) -> list[int]:
        return sorted(self._items)
