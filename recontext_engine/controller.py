"""The evidence pool and the per-round selection of sentences from position scores."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from .lexical import reciprocal_ranks
from .results import Evidence


def select_sentences(
    scores: torch.Tensor,
    token_sentence: torch.Tensor,
    top_k: int,
    unit: str,
    lexical: torch.Tensor | None = None,
    lexical_weight: float = 0.0,
    exclude: Sequence[int] = (),
    semantic: torch.Tensor | None = None,
    semantic_weight: float = 0.0,
    first_copy: torch.Tensor | None = None,
) -> list[tuple[int, float]]:
    """Pick sentences from per-position scores.

    Args:
        scores: (n,) scores of candidate positions.
        token_sentence: (n,) sentence id of each position, -1 where none.
        unit: ``"token"``: the top-K positions, mapped to their sentences (the paper);
            ``"sentence"``: the top-K sentences by summed score.
        lexical: (num_sentences,) lexical scores; with ``unit="sentence"`` and a positive
            ``lexical_weight`` the sentences are ranked by reciprocal-rank fusion of both.
        semantic: (num_sentences,) embedding similarities to the query; with ``unit="sentence"``
            and a positive ``semantic_weight`` their ranks join the fusion.
        exclude: sentence ids not to pick again (``unit="sentence"``: a later round brings new
            evidence instead of re-picking the pool; the paper's token rule only deduplicates).
        first_copy: (num_sentences,) with ``unit="sentence"``, the id of the first sentence with
            the same text as each (a log's repeated lines): of a text only the best-scored copy is
            picked, and none when a copy is excluded, since a repeated line adds nothing.

    Returns:
        ``(sentence_id, score)`` pairs, best first, without duplicates.
    """
    valid = token_sentence >= 0
    if not bool(valid.any()):
        return []
    if unit == "token":
        positions = torch.nonzero(valid).squeeze(-1)
        best = positions[torch.argsort(scores[positions], descending=True, stable=True)[:top_k]]
        picked: dict[int, float] = {}
        for position in best.tolist():
            picked.setdefault(int(token_sentence[position]), float(scores[position]))
        return list(picked.items())
    num_sentences = int(token_sentence.max()) + 1
    mass = torch.zeros(num_sentences).index_add_(0, token_sentence[valid], scores[valid].float())
    present = torch.zeros(num_sentences, dtype=torch.bool)
    present[token_sentence[valid]] = True
    fused: list[torch.Tensor] = []
    if lexical is not None and lexical_weight > 0:
        lexical = lexical[:num_sentences]
        # A sentence that shares no word with the query earns no lexical credit, whatever its rank.
        fused.append(lexical_weight * torch.where(lexical > 0, reciprocal_ranks(lexical), 0.0))
    if semantic is not None and semantic_weight > 0:
        fused.append(semantic_weight * reciprocal_ranks(semantic[:num_sentences]))
    if fused:
        mass = reciprocal_ranks(mass) + sum(fused)
    present[list(exclude)] = False
    mass[~present] = float("-inf")
    order = torch.argsort(mass, descending=True, stable=True)[: int(present.sum())].tolist()
    copy_of = first_copy.tolist() if first_copy is not None else list(range(num_sentences))
    taken = {copy_of[s] for s in exclude}
    picks: list[tuple[int, float]] = []
    for s in order:
        if len(picks) == top_k:
            break
        if copy_of[s] not in taken:
            taken.add(copy_of[s])
            picks.append((s, float(mass[s])))
    return picks


def within_margin(picks: list[tuple[int, float]], margin: float) -> list[tuple[int, float]]:
    """The best-first ``picks`` scoring at least ``margin`` times the best one (all if it is not positive)."""
    if margin <= 0 or not picks or picks[0][1] <= 0:
        return picks
    floor = margin * picks[0][1]
    return [(s, score) for s, score in picks if score >= floor]


@dataclass
class EvidencePool:
    """Evidence gathered over rounds: it never shrinks, holds no duplicates and reads in document order."""

    limit: int
    _items: dict[int, Evidence] = field(default_factory=dict)

    def add(self, sentence_id: int, evidence: Evidence) -> bool:
        """Add one sentence; False if it is already there or the pool is full."""
        if sentence_id in self._items or len(self._items) >= self.limit:
            return False
        self._items[sentence_id] = evidence
        return True

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, sentence_id: int) -> bool:
        return sentence_id in self._items

    def ordered(self) -> list[Evidence]:
        """Evidence in document order (sentence ids follow the documents)."""
        return [self._items[s] for s in sorted(self._items)]

    def by_score(self) -> list[Evidence]:
        """Evidence best-scored first: earlier rounds before later ones, by score within a round."""
        return sorted(self._items.values(), key=lambda e: (e.round, -e.score))

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
        return self.by_score() if order == "score" else self.by_score()[::-1]

    def sentence_ids(self) -> list[int]:
        return sorted(self._items)
