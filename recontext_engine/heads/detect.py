"""Retrieval-head detection for any model: score every (layer, head) on seeded calibration cases.

Every head is read on each case (:mod:`.readouts`). A head's sentence scores are its cue
attention with the question minus that with the null question, reduced by the config's scorer;
its score is how many standard deviations above the case's sentences the gold sentences sit
(``zscore``, averaged over cases; ``mass``, the QRHead-style calibrated gold mass, and rank
objectives are options; :mod:`.metrics`). The set is grown greedily from the best head: each
step adds, among the 4N best heads, the one whose *average* with the set (as the engine
averages) ranks the gold sentences best (:mod:`.selection`). On held-out cases this beat the
plain top N (see ``recontext heads eval``).

Run it: ``recontext heads detect --model ID``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from ..config import ReplayConfig
from ..errors import HeadSetError
from ..prompt import NULL_QUESTION
from .calibration import DEFAULT_LENGTHS, FAMILIES, CalibrationCase
from .choice import SELECTIONS, Selection, select_heads
from .headset import HeadSet, model_fingerprint, model_shape
from .metrics import OBJECTIVES, Objective, mean_metrics, objective_value
from .provenance import environment, model_identity, recontext_version
from .readouts import calibration_cases, model_config, read_cases

METHOD = (
    "recontext heads detect: per head, sentence scores = cue attention with the question minus "
    "with a null question (QRHead/ICR-style calibration); heads ranked by the objective over "
    "seeded synthetic cases; 'greedy' grows the set whose head average ranks the gold best"
)


@dataclass(frozen=True)
class DetectSettings:
    """How retrieval heads are detected; the prompt layout, ``cue_window``, ``decay`` and ``scorer``
    come from the :class:`~recontext_engine.ReplayConfig` passed next to it."""

    num_heads: int = field(
        default=16, metadata={"help": "Heads to keep (at most the model's layers * heads)."}
    )
    num_cases: int = field(default=36, metadata={"help": "Seeded calibration cases to generate."})
    seed: int = field(default=0, metadata={"help": "Seed of the calibration cases."})
    lengths: tuple[int, ...] = field(
        default=DEFAULT_LENGTHS,
        metadata={"help": "Context lengths in tokens, cycled over the cases (clamped to the window)."},
    )
    families: tuple[str, ...] = field(
        default=FAMILIES, metadata={"help": "Calibration task families (heads.calibration.FAMILIES)."}
    )
    objective: Objective = field(
        default="zscore",
        metadata={
            "help": "Per-head ranking: 'zscore' (standardized calibrated gold score), 'mass' (calibrated "
            "gold mass, QRHead), 'mrr' or 'recall' (rank of the gold sentences)."
        },
    )
    selection: Selection = field(
        default="greedy",
        metadata={
            "help": "'greedy': grow the set whose head average ranks the gold best; 'top': best heads."
        },
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "lengths", tuple(int(n) for n in self.lengths))
        object.__setattr__(self, "families", tuple(self.families))
        unknown = sorted(set(self.families) - set(FAMILIES))
        checks: list[tuple[bool, str]] = [
            (self.num_heads >= 1, f"num_heads must be at least 1, got {self.num_heads}"),
            (self.num_cases >= 1, f"num_cases must be at least 1, got {self.num_cases}"),
            (bool(self.lengths) and min(self.lengths) >= 1, f"lengths must be positive, got {self.lengths}"),
            (
                bool(self.families) and not unknown,
                f"unknown families {unknown}; choose from {', '.join(FAMILIES)}",
            ),
            (self.objective in OBJECTIVES, f"unknown objective {self.objective!r}; choose from {OBJECTIVES}"),
            (self.selection in SELECTIONS, f"unknown selection {self.selection!r}; choose from {SELECTIONS}"),
        ]
        for ok, message in checks:
            if not ok:
                raise HeadSetError(message)


@dataclass
class DetectionReport:
    """What a detection run found: the head set, every head's scores and the timings."""

    head_set: HeadSet
    head_scores: dict[str, torch.Tensor]  # metric -> (num_layers * num_heads,)
    objective_scores: torch.Tensor  # (num_layers * num_heads,)
    timings: dict[str, float] = field(default_factory=dict)


def detect(
    readout: Any,
    tokenizer: Any,
    settings: DetectSettings | None = None,
    *,
    config: ReplayConfig | None = None,
    model_name: str = "",
    model_source: str = "",
    cases: Sequence[CalibrationCase] | None = None,
    progress: bool = True,
) -> DetectionReport:
    """Detect ``settings.num_heads`` retrieval heads of the model behind ``readout``.

    Generates ``settings.num_cases`` seeded calibration cases (or uses ``cases``), reads every
    head's cue attention with the question and with a null question, ranks heads by
    ``settings.objective`` and selects the set (``settings.selection``). ``config`` supplies the
    prompt layout, ``cue_window``, ``decay`` and ``scorer``. The head set carries its provenance
    (model identity, w, lambda, seed, cases, scores); the report also holds every head's scores.
    """
    started = time.perf_counter()
    settings = settings or DetectSettings()
    config = config or ReplayConfig()
    scorer = config.attention.make_scorer()
    model_cfg = model_config(readout)
    num_layers, heads_per_layer = model_shape(model_cfg)
    total_heads = num_layers * heads_per_layer
    if not 1 <= settings.num_heads <= total_heads:
        raise HeadSetError(
            f"num_heads must be between 1 and {total_heads} for this model, got {settings.num_heads}"
        )
    if cases is None:
        cases = calibration_cases(
            readout,
            tokenizer,
            settings.num_cases,
            seed=settings.seed,
            split="detect",
            lengths=settings.lengths,
            families=settings.families,
        )
    generated = time.perf_counter()
    readouts = read_cases(readout, tokenizer, cases, config, progress=progress, desc="detect heads")
    read = time.perf_counter()
    metrics = mean_metrics(readouts, scorer=scorer)
    ranking = objective_value(metrics, settings.objective)
    order = torch.argsort(ranking, descending=True, stable=True)
    chosen = select_heads(readouts, order, settings.num_heads, settings.selection, scorer)
    selected = time.perf_counter()
    timings = {
        "generate_cases": generated - started,
        "read_passes": read - generated,
        "select": selected - read,
        "total": selected - started,
    }
    rank_of = {int(h): r for r, h in enumerate(order.tolist())}
    scores = [
        {
            "head": [i // heads_per_layer, i % heads_per_layer],
            "rank": rank_of[i] + 1,
            "score": round(float(ranking[i]), 5),
            **{name: round(float(value[i]), 4) for name, value in metrics.items()},
        }
        for i in chosen
    ]
    set_metrics = mean_metrics(readouts, torch.tensor(chosen), scorer=scorer)
    tokens = [r.num_tokens for r in readouts]
    provenance = {
        "method": METHOD,
        "model": model_identity(model_name, model_source, model_cfg),
        "fingerprint": model_fingerprint(model_cfg),
        "cue_window": config.attention.cue_window,
        "decay": config.attention.decay,
        "scorer": config.attention.scorer,
        "null_question": NULL_QUESTION,
        "question_template": config.question_template,
        "objective": settings.objective,
        "selection": settings.selection,
        "calibration": {
            "cases": len(readouts),
            "seed": settings.seed,
            "split": "detect",
            "families": sorted({r.family for r in readouts}),
            "lengths": sorted({c.target_tokens for c in cases}),
            "prompt_tokens": [min(tokens), max(tokens)],
        },
        "calibration_recall": {
            k: round(float(v), 4) for k, v in set_metrics.items() if k.startswith("recall")
        },
        "head_scores": scores,
        "score_matrix_objective": settings.objective,
        "score_matrix": [
            [round(float(v), 5) for v in ranking[layer * heads_per_layer : (layer + 1) * heads_per_layer]]
            for layer in range(num_layers)
        ],
        "timings_s": {k: round(v, 1) for k, v in timings.items()},
        "environment": environment(),
        "recontext_version": recontext_version(),
        "created": time.strftime("%Y-%m-%d", time.gmtime()),
    }
    head_set = HeadSet(
        heads=tuple((i // heads_per_layer, i % heads_per_layer) for i in chosen),
        model=model_name,
        fingerprint=model_fingerprint(model_cfg),
        provenance=provenance,
    )
    return DetectionReport(head_set, metrics, ranking, timings)


def detect_heads(
    readout: Any, tokenizer: Any, settings: DetectSettings | None = None, **inputs: Any
) -> HeadSet:
    """The head set of :func:`detect` (same arguments: ``config``, ``model_name``, ``model_source``,
    ``cases``, ``progress``)."""
    return detect(readout, tokenizer, settings, **inputs).head_set
