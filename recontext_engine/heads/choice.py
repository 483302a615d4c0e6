"""Choosing a head set from per-head scores: the top N, or a greedy growth of the set's average."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch

from ..scoring import Scorer
from .metrics import Objective, calibrated_scores, gold_metrics, objective_value
from .readouts import CaseReadout

Selection = Literal["top", "greedy"]
SELECTIONS: tuple[Selection, ...] = ("greedy", "top")


def greedy_select(
    readouts: Sequence[CaseReadout],
    num_heads: int,
    *,
    first: int,
    objective: Objective = "recall",
    scorer: Scorer | None = None,
    candidates: torch.Tensor | None = None,
) -> list[int]:
    """Grow a set from ``first``, each step adding the head whose *average* with the set scores best."""
    chosen = [first]
    pool = candidates if candidates is not None else torch.arange(readouts[0].question.shape[0])
    while len(chosen) < num_heads:
        total = torch.zeros(len(pool))
        for case in readouts:
            k = len(chosen)
            q = (case.question[chosen].sum(0) + case.question[pool]) / (k + 1)  # (c, w, B)
            nl = (case.null[chosen].sum(0) + case.null[pool]) / (k + 1)
            scores = calibrated_scores(q, nl, scorer)
            total += objective_value(gold_metrics(scores, case.gold), objective) / len(readouts)
        total[torch.isin(pool, torch.tensor(chosen))] = float("-inf")
        chosen.append(int(pool[int(torch.argmax(total))]))
    return chosen


def select_heads(
    readouts: Sequence[CaseReadout],
    order: torch.Tensor,
    num_heads: int,
    selection: Selection,
    scorer: Scorer | None = None,
) -> list[int]:
    """Head indices of the set, from heads ``order``-ed best first by the detection objective.

    ``"top"`` keeps the first ``num_heads``; ``"greedy"`` grows the set from the best head, each
    step judged by how well the set's average ranks the gold (recall, MRR breaking ties).
    """
    if selection == "top":
        return [int(i) for i in order[:num_heads]]
    # Greedy over the strongest candidates only: bounded time, and weak heads never help an average.
    candidates = order[: max(4 * num_heads, 48)]
    return greedy_select(readouts, num_heads, first=int(order[0]), scorer=scorer, candidates=candidates)
