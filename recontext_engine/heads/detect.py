"""Retrieval-head detection for any model: score every (layer, head) on seeded calibration cases.

For each case the context is prefilled once; two read passes (the question, then a null
question, as QRHead and ICR calibrate) collect the cue rows of *all* heads. The rows are summed
per sentence right away (plus one bucket for tokens outside any sentence, so the cue
recurrence's normalisation stays exact): a case costs O(heads * w * sentences) memory.

A head's sentence scores are its cue-recurrence attention with the question minus that with
the null question; its score is how many standard deviations above the case's sentences the
gold sentences sit (``zscore``, averaged over cases; ``mass``, the QRHead-style calibrated gold
mass, is an option). The set is grown greedily from the best head: each step adds, among the
4N best heads, the one whose *average* with the set (as the engine averages) ranks the gold
sentences best. On held-out cases this beat the plain top N (see ``recontext heads eval``).

Run it: ``recontext heads detect --model ID`` or ``python -m recontext_engine.heads.detect``.
"""

from __future__ import annotations

import hashlib
import platform
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch

from ..config import ReplayConfig
from ..errors import HeadSetError
from ..prompt import NULL_QUESTION, PromptBuilder
from ..spans import document_sentences
from .calibration import DEFAULT_LENGTHS, FAMILIES, CalibrationCase, make_cases
from .headset import HeadSet, model_fingerprint, model_shape

POOL_SIZES = (1, 4, 8)
Objective = Literal["zscore", "mass", "mrr", "recall"]
Selection = Literal["top", "greedy"]
ScorerName = Literal["cue_recurrence", "mean"]


@dataclass
class CaseReadout:
    """One case's cue attention of every head, summed per sentence.

    ``question`` and ``null``: (num_heads, w, S + 1) attention mass of each cue token on each of
    the S context sentences; the last column holds the prefix tokens outside every sentence.
    """

    family: str
    gold: torch.Tensor  # (g,) sentence ids of the gold facts
    question: torch.Tensor
    null: torch.Tensor
    num_tokens: int

    @property
    def num_sentences(self) -> int:
        return self.question.shape[-1] - 1


def all_heads(config: Any) -> HeadSet:
    """Every (layer, head) pair of a model: read them all in one pass."""
    num_layers, num_heads = model_shape(config)
    return HeadSet(tuple((layer, head) for layer in range(num_layers) for head in range(num_heads)))


def model_config(readout: Any) -> Any:
    model = getattr(readout, "model", None)
    config = getattr(model, "config", None) or getattr(readout, "config", None)
    if config is None:
        raise HeadSetError("head detection needs a readout backend with a transformers model config")
    return config


def gold_sentence_ids(case: CalibrationCase, sentences: Sequence[Any]) -> list[int]:
    """Ids of the sentences that overlap the case's gold spans, in gold order, without repeats."""
    ids: list[int] = []
    for doc_index, start, end in case.gold:
        for i, s in enumerate(sentences):
            if s.doc_index == doc_index and s.start < end and s.end > start and i not in ids:
                ids.append(i)
    return ids


def read_case(
    readout: Any,
    builder: PromptBuilder,
    case: CalibrationCase,
    heads: HeadSet,
    config: ReplayConfig,
) -> CaseReadout:
    """One prefill and two read passes (question, null question) over ``heads``."""
    documents = list(case.documents)
    sentences = document_sentences(documents, config.max_sentence_chars)
    gold = gold_sentence_ids(case, sentences)
    if not gold:
        raise HeadSetError(f"calibration case has no gold sentence: {case.question!r}")
    prefix = builder.prefix(documents, sentences, config)
    n = len(prefix.ids)
    bucket = prefix.token_sentence.clone()
    bucket[bucket < 0] = len(sentences)
    cache = readout.prefill(prefix.ids)
    sums = []
    for question in (case.question, NULL_QUESTION):
        suffix = builder.suffix(prefix, question, [], config)
        rows = readout.read(cache, n, suffix.ids, heads, config.cue_window)[..., :n]  # (h, w, n)
        summed = torch.zeros(*rows.shape[:2], len(sentences) + 1)
        sums.append(summed.index_add_(2, bucket, rows.float()))  # (h, w, S + 1)
    return CaseReadout(case.family, torch.tensor(gold), sums[0], sums[1], n)


def read_cases(
    readout: Any,
    tokenizer: Any,
    cases: Sequence[CalibrationCase],
    config: ReplayConfig,
    *,
    heads: HeadSet | None = None,
    progress: bool = True,
    desc: str = "reading calibration cases",
) -> list[CaseReadout]:
    """Read every case over ``heads`` (default: all heads of the model)."""
    from tqdm.auto import tqdm

    heads = heads or all_heads(model_config(readout))
    builder = PromptBuilder(tokenizer)
    return [
        read_case(readout, builder, case, heads, config)
        for case in tqdm(cases, desc=desc, unit="case", disable=not progress, leave=False)
    ]


def cue_scores(
    buckets: torch.Tensor, scorer: ScorerName = "cue_recurrence", decay: float = 0.75
) -> torch.Tensor:
    """Collapse the cue axis like the engine's scorers do.

    Args:
        buckets: (..., w, B) attention mass per bucket for each cue token.

    Returns:
        (..., B): ``"cue_recurrence"``: ``r(t) = normalize(a(t) + decay * r(t-1))`` (the paper's rule,
        exact on sentence sums because the normalisation runs over all buckets); ``"mean"``: the mean.
    """
    if scorer == "mean":
        return buckets.mean(dim=-2)
    r = torch.zeros(buckets.shape[:-2] + buckets.shape[-1:])
    for t in range(buckets.shape[-2]):
        r = buckets[..., t, :] + decay * r
        r = r / r.sum(dim=-1, keepdim=True).clamp_min(1e-12)
    return r


def sentence_scores(
    case: CaseReadout,
    heads: torch.Tensor | None = None,
    *,
    scorer: ScorerName = "cue_recurrence",
    decay: float = 0.75,
    calibrate: bool = True,
) -> torch.Tensor:
    """Per-sentence scores as the engine computes them (``unit="sentence"``).

    ``heads``: indices into the readout's head axis to *average* (one set), or None for every
    head on its own. Returns (S,) for a set, (num_heads, S) per head.
    """
    question, null = case.question, case.null
    if heads is not None:
        question, null = question[heads].mean(0), null[heads].mean(0)
    scores = cue_scores(question, scorer, decay)
    if calibrate:
        scores = scores - cue_scores(null, scorer, decay)
    return scores[..., :-1]


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
    scorer: ScorerName = "cue_recurrence",
    decay: float = 0.75,
    calibrate: bool = True,
    pool_sizes: Sequence[int] = POOL_SIZES,
) -> dict[str, torch.Tensor]:
    """:func:`gold_metrics` averaged over cases, for one averaged set (``heads``) or every head alone."""
    total: dict[str, torch.Tensor] = {}
    for case in readouts:
        scores = sentence_scores(case, heads, scorer=scorer, decay=decay, calibrate=calibrate)
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


def greedy_select(
    readouts: Sequence[CaseReadout],
    num_heads: int,
    *,
    first: int,
    objective: Objective = "recall",
    scorer: ScorerName = "cue_recurrence",
    decay: float = 0.75,
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
            scores = (cue_scores(q, scorer, decay) - cue_scores(nl, scorer, decay))[..., :-1]
            total += objective_value(gold_metrics(scores, case.gold), objective) / len(readouts)
        total[torch.isin(pool, torch.tensor(chosen))] = float("-inf")
        chosen.append(int(pool[int(torch.argmax(total))]))
    return chosen


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def model_identity(model_name: str, model_source: str, config: Any) -> dict[str, Any]:
    """Name plus what pins the weights: a file's sha256, a hub revision or a folder's weight digest."""
    identity: dict[str, Any] = {"name": model_name, "source": model_source}
    path: Path | None = None
    if model_source.startswith("embedded:"):
        from ..loading import embedded_gguf

        path = embedded_gguf()
    elif model_source:
        path = Path(model_source)
    if path is not None and path.is_file():
        identity["file_sha256"] = file_sha256(path)
    elif path is not None and path.is_dir():
        from ..loading import _file_digest

        weights = sorted(p for p in path.iterdir() if p.suffix in (".safetensors", ".bin", ".gguf"))
        identity["weights_digest"] = hashlib.sha256(
            "".join(f"{p.name}:{_file_digest(p)};" for p in weights).encode()
        ).hexdigest()[:16]
    revision = getattr(config, "_commit_hash", None)
    if revision:
        identity["revision"] = revision
    return identity


def _version() -> str:
    from .. import __version__

    return __version__


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
    *,
    model_name: str = "",
    model_source: str = "",
    num_heads: int = 16,
    num_cases: int = 36,
    seed: int = 0,
    lengths: Sequence[int] = DEFAULT_LENGTHS,
    families: Sequence[str] = FAMILIES,
    config: ReplayConfig | None = None,
    scorer: ScorerName = "cue_recurrence",
    objective: Objective = "zscore",
    selection: Selection = "greedy",
    cases: Sequence[CalibrationCase] | None = None,
    progress: bool = True,
) -> DetectionReport:
    """Detect retrieval heads; see :func:`detect_heads` (this also returns every head's scores)."""
    started = time.perf_counter()
    config = config or ReplayConfig()
    model_cfg = model_config(readout)
    num_layers, heads_per_layer = model_shape(model_cfg)
    total_heads = num_layers * heads_per_layer
    if not 1 <= num_heads <= total_heads:
        raise HeadSetError(f"num_heads must be between 1 and {total_heads} for this model, got {num_heads}")
    window = int(getattr(readout, "window", 1 << 30))
    if cases is None:
        fitted = sorted({min(int(n), max(64, window - 192)) for n in lengths})
        cases = make_cases(
            num_cases,
            seed=seed,
            split="detect",
            lengths=fitted,
            families=families,
            count_tokens=lambda text: len(tokenizer(text, add_special_tokens=False)["input_ids"]),
        )
    generated = time.perf_counter()
    readouts = read_cases(readout, tokenizer, cases, config, progress=progress, desc="detect heads")
    read = time.perf_counter()
    metrics = mean_metrics(readouts, scorer=scorer, decay=config.decay)
    ranking = objective_value(metrics, objective)
    order = torch.argsort(ranking, descending=True, stable=True)
    if selection == "greedy":
        # Greedy over the strongest candidates only: bounded time, and weak heads never help an average.
        candidates = order[: max(4 * num_heads, 48)]
        chosen = greedy_select(
            readouts, num_heads, first=int(order[0]), scorer=scorer, decay=config.decay, candidates=candidates
        )
    else:
        chosen = [int(i) for i in order[:num_heads]]
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
    set_metrics = mean_metrics(readouts, torch.tensor(chosen), scorer="cue_recurrence", decay=config.decay)
    tokens = [r.num_tokens for r in readouts]
    provenance = {
        "method": (
            "recontext heads detect: per head, sentence scores = cue attention with the question minus "
            "with a null question (QRHead/ICR-style calibration); heads ranked by the objective over "
            "seeded synthetic cases; 'greedy' grows the set whose head average ranks the gold best"
        ),
        "model": model_identity(model_name, model_source, model_cfg),
        "fingerprint": model_fingerprint(model_cfg),
        "cue_window": config.cue_window,
        "decay": config.decay,
        "scorer": scorer,
        "null_question": NULL_QUESTION,
        "question_template": config.question_template,
        "objective": objective,
        "selection": selection,
        "calibration": {
            "cases": len(readouts),
            "seed": seed,
            "split": "detect",
            "families": sorted({r.family for r in readouts}),
            "lengths": sorted({c.target_tokens for c in cases}),
            "prompt_tokens": [min(tokens), max(tokens)],
        },
        "calibration_recall": {
            k: round(float(v), 4) for k, v in set_metrics.items() if k.startswith("recall")
        },
        "head_scores": scores,
        "score_matrix_objective": objective,
        "score_matrix": [
            [round(float(v), 5) for v in ranking[layer * heads_per_layer : (layer + 1) * heads_per_layer]]
            for layer in range(num_layers)
        ],
        "timings_s": {k: round(v, 1) for k, v in timings.items()},
        "environment": {
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
            "python": platform.python_version(),
        },
        "recontext_version": _version(),
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
    readout: Any,
    tokenizer: Any,
    *,
    model_name: str = "",
    model_source: str = "",
    num_heads: int = 16,
    num_cases: int = 36,
    seed: int = 0,
    lengths: Sequence[int] = DEFAULT_LENGTHS,
    families: Sequence[str] = FAMILIES,
    config: ReplayConfig | None = None,
    scorer: ScorerName = "cue_recurrence",
    objective: Objective = "zscore",
    selection: Selection = "greedy",
    cases: Sequence[CalibrationCase] | None = None,
    progress: bool = True,
) -> HeadSet:
    """Detect ``num_heads`` retrieval heads of the model behind ``readout``.

    Generates ``num_cases`` seeded calibration cases (or uses ``cases``), reads every head's cue
    attention with the question and with a null question, and ranks heads by ``objective``
    (``"zscore"``: standardized calibrated score of the gold sentences; ``"mass"``: calibrated
    attention mass on them, as QRHead; ``"mrr"``/``"recall"``: rank of the gold sentences).
    ``selection="greedy"`` grows the set whose head average ranks the gold best; ``"top"`` keeps
    the best-ranked heads. ``config`` supplies the prompt layout, ``cue_window`` and ``decay``.
    The returned set carries its provenance (model identity, w, lambda, seed, cases, scores).
    """
    return detect(
        readout,
        tokenizer,
        model_name=model_name,
        model_source=model_source,
        num_heads=num_heads,
        num_cases=num_cases,
        seed=seed,
        lengths=lengths,
        families=families,
        config=config,
        scorer=scorer,
        objective=objective,
        selection=selection,
        cases=cases,
        progress=progress,
    ).head_set


if __name__ == "__main__":  # pragma: no cover - a thin entry point over cli_commands
    import argparse
    import sys

    from .cli_commands import add_detect_arguments, detect_main

    parser = argparse.ArgumentParser(
        prog="python -m recontext_engine.heads.detect", description=__doc__.splitlines()[0]
    )
    add_detect_arguments(parser)
    sys.exit(detect_main(parser.parse_args()))
