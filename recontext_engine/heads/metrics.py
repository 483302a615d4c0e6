"""How well heads (alone or averaged into a set) rank the gold sentences of read cases.

Sentence scores are computed as the engine computes them with ``unit="sentence"``: the heads
averaged, the cue reduced by a registered :class:`~recontext_engine.scoring.Scorer`, minus the
same for the null question.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch

from ..scoring import CueRecurrenceScorer, Scorer
from .readouts import CaseReadout

POOL_SIZES = (1, 4, 8)
Objective = Literal["zscore", "mass", "mrr", "recall"]
OBJECTIVES: tuple[Objective, ...] = ("zscore", "mass", "mrr", "recall")


def calibrated_scores(
    question: torch.Tensor, null: torch.Tensor, scorer: Scorer | None = None, calibrate: bool = True
) -> torch.Tensor:
    """(..., w, S + 1) sentence sums with the question and the null question -> (..., S) scores."""
    scorer = scorer or CueRecurrenceScorer()
    scores = scorer.reduce_cue(question)
    if calibrate:
        scores = scores - scorer.reduce_cue(null)
    return scores[..., :-1]  # the bucket of tokens outside every sentence is no candidate


def sentence_scores(
    case: CaseReadout,
    heads: torch.Tensor | None = None,
    *,
    scorer: Scorer | None = None,
    calibrate: bool = True,
) -> torch.Tensor:
    """Per-sentence scores as the engine computes them (``unit="sentence"``).

    ``heads``: indices into the readout's head axis to *average* (one set), or None for every
    head on its own. ``scorer`` defaults to the cue recurrence. Returns (S,) for a set,
    (num_heads, S) per head.
    """
    question, null = case.question, case.null
    if heads is not None:
        question, null = question[heads].mean(0), null[heads].mean(0)
    return calibrated_scores(question, null, scorer, calibrate)


def gold_metrics(
    scores: torch.Tensor, gold: torch.Tensor, pool_sizes: Sequence[int] = POOL_SIZES
) -> dict[str, torch.Tensor]:
    """Recall of the gold sentences in the top-k pool, reciprocal rank and gold score mass.

    Args:
        scores: (..., S) sentence scores; gold: (g,) gold sentence ids.

    Returns:
        ``recall@k``: fraction of gold sentences ranked in the top k; ``mrr``: mean of 1/rank over
        the gold sentences; ``mass``: summed score of the gold sentences; ``zscore``: how many
        standard deviations of the case's sentence scores the gold sit above their mean.
        Each of shape (...).
    """
    gold_scores = scores[..., gold]  # (..., g)
    mean, std = scores.mean(-1, keepdim=True), scores.std(-1, keepdim=True).clamp_min(1e-12)
    # Rank = number of sentences scored strictly higher; ties resolve in the gold's favour.
    ranks = (scores.unsqueeze(-2) > gold_scores.unsqueeze(-1)).sum(-1)  # (..., g)
    metrics = {f"recall@{k}": (ranks < k).float().mean(-1) for k in pool_sizes}
    metrics["mrr"] = (1.0 / (ranks + 1).float()).mean(-1)
    metrics["mass"] = gold_scores.sum(-1)
    metrics["zscore"] = ((gold_scores - mean) / std).mean(-1)
    return metrics


def mean_metrics(
    readouts: Sequence[CaseReadout],
    heads: torch.Tensor | None = None,
    *,
    scorer: Scorer | None = None,
    calibrate: bool = True,
    pool_sizes: Sequence[int] = POOL_SIZES,
) -> dict[str, torch.Tensor]:
    """:func:`gold_metrics` averaged over cases, for one averaged set (``heads``) or every head alone."""
    total: dict[str, torch.Tensor] = {}
    for case in readouts:
        scores = sentence_scores(case, heads, scorer=scorer, calibrate=calibrate)
        for name, value in gold_metrics(scores, case.gold, pool_sizes).items():
            total[name] = total.get(name, 0) + value / len(readouts)
    return total


def objective_value(metrics: dict[str, torch.Tensor], objective: Objective) -> torch.Tensor:
    """The number a head (or set) is ranked by."""
    if objective in ("zscore", "mass", "mrr"):
        return metrics[objective]
    recalls = [v for k, v in metrics.items() if k.startswith("recall@")]
    # Mean recall over pool sizes; MRR breaks ties.
    return torch.stack(recalls).mean(0) + 0.01 * metrics["mrr"]
