"""Held-out evaluation of head sets: recall of the gold sentences at several pool sizes.

Cases come from the ``"eval"`` split of the calibration generator, which never shares a case
with the ``"detect"`` split. Every head is read once per case; any set is then scored exactly
as the engine scores it (heads averaged, cue recurrence, null calibration, sentence unit), so
the comparison rows cost no extra model passes.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from ..config import ReplayConfig
from ..scoring import Scorer
from .calibration import DEFAULT_LENGTHS, FAMILIES
from .headset import HeadSet, model_shape
from .metrics import POOL_SIZES, mean_metrics
from .readouts import CaseReadout, calibration_cases, model_config, read_cases

# Relative depth of the paper's published sets: Qwen3-4B/8B use layers 17-24 of 36, Llama3-8B
# layers 13-19 of 32. "Paper-style" for a model without a published set = the heads in that band.
PAPER_DEPTH = (0.42, 0.68)


@dataclass
class EvalRow:
    """One head set's mean recall@k (fraction of gold sentences in the top-k pool) and MRR."""

    name: str
    num_heads: int
    recall: dict[int, float]
    mrr: float


@dataclass
class EvaluationReport:
    """Rows of the comparison, per-family recall of the evaluated set, and how the cases were made."""

    rows: list[EvalRow]
    families: dict[str, dict[str, float]]
    cases: int
    seed: int
    pool_sizes: tuple[int, ...]
    prompt_tokens: tuple[int, int]
    timings: dict[str, float] = field(default_factory=dict)

    def markdown(self) -> str:
        """The comparison table (and the per-family table) in Markdown."""
        ks = self.pool_sizes
        lines = [
            "| head set | heads | " + " | ".join(f"recall@{k}" for k in ks) + " | MRR |",
            "|---|---:|" + "---:|" * (len(ks) + 1),
        ]
        for row in self.rows:
            cells = " | ".join(f"{row.recall[k]:.2f}" for k in ks)
            lines.append(f"| {row.name} | {row.num_heads} | {cells} | {row.mrr:.2f} |")
        if self.families:
            names = list(next(iter(self.families.values())))
            lines += ["", "| family | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
            for family, values in self.families.items():
                family_cells = [f"{values[n]:.0f}" if n == "cases" else f"{values[n]:.2f}" for n in names]
                lines.append(f"| {family} | " + " | ".join(family_cells) + " |")
        return "\n".join(lines)

    def summary(self) -> str:
        low, high = self.prompt_tokens
        return (
            f"{self.cases} held-out cases (split 'eval', seed {self.seed}, {low}-{high} prompt tokens); "
            f"recall@k = fraction of gold sentences among the k best-scored sentences"
        )

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["rows"] = [{**asdict(r), "recall": {str(k): v for k, v in r.recall.items()}} for r in self.rows]
        return data


def _row(
    name: str, readouts: Sequence[CaseReadout], heads: torch.Tensor, ks: Sequence[int], **options: Any
) -> EvalRow:
    metrics = mean_metrics(readouts, heads, pool_sizes=ks, **options)
    return EvalRow(name, len(heads), {k: float(metrics[f"recall@{k}"]) for k in ks}, float(metrics["mrr"]))


def random_row(
    readouts: Sequence[CaseReadout],
    count: int,
    total: int,
    *,
    draws: int = 20,
    seed: int = 0,
    pool_sizes: Sequence[int] = POOL_SIZES,
    scorer: Scorer | None = None,
) -> EvalRow:
    """Mean over ``draws`` random sets of ``count`` heads (out of ``total``)."""
    rng = random.Random(seed)
    rows = [
        _row("", readouts, torch.tensor(rng.sample(range(total), count)), pool_sizes, scorer=scorer)
        for _ in range(draws)
    ]
    recall = {k: sum(r.recall[k] for r in rows) / draws for k in pool_sizes}
    return EvalRow(
        f"random {count} heads (mean of {draws} draws)", count, recall, sum(r.mrr for r in rows) / draws
    )


def lexical_row(readouts: Sequence[CaseReadout], pool_sizes: Sequence[int]) -> EvalRow | None:
    """BM25 over the same sentences, no heads: what the lexical arm of the hybrid finds alone.

    A gold sentence that shares no word with the question (score 0) is never counted as found.
    """
    if not readouts or any(r.lexical is None for r in readouts):
        return None
    recall, mrr = dict.fromkeys(pool_sizes, 0.0), 0.0
    for case in readouts:
        assert case.lexical is not None
        gold_scores = case.lexical[case.gold]
        ranks = (case.lexical[None, :] > gold_scores[:, None]).sum(-1)
        credited = gold_scores > 0
        for k in pool_sizes:
            recall[k] += float(((ranks < k) & credited).float().mean()) / len(readouts)
        mrr += float(torch.where(credited, 1.0 / (ranks + 1), 0.0).mean()) / len(readouts)
    return EvalRow("BM25 alone (lexical arm, no heads)", 0, recall, mrr)


def compare_head_sets(
    readouts: Sequence[CaseReadout],
    head_set: HeadSet,
    config: Any,
    *,
    others: dict[str, HeadSet] | None = None,
    draws: int = 20,
    seed: int = 0,
    pool_sizes: Sequence[int] = POOL_SIZES,
    scorer: Scorer | None = None,
) -> tuple[list[EvalRow], dict[str, dict[str, float]]]:
    """Rows for ``head_set`` and the baselines, over readouts of *all* heads; and per-family recall.

    ``scorer`` reduces the cue (default: the cue recurrence with lambda 0.75).
    """
    num_layers, num_heads = model_shape(config)
    total = num_layers * num_heads

    def index(hs: HeadSet) -> torch.Tensor:
        hs.validate_for(config, check_fingerprint=False)
        return torch.tensor([layer * num_heads + head for layer, head in hs.heads])

    ks = tuple(pool_sizes)
    detected = index(head_set)
    name = head_set.model or "given"
    rows = [
        _row(f"detected ({name})", readouts, detected, ks, scorer=scorer),
        _row("detected, no null calibration", readouts, detected, ks, scorer=scorer, calibrate=False),
    ]
    for other_name, other in (others or {}).items():
        rows.append(_row(other_name, readouts, index(other), ks, scorer=scorer))
    low = round(PAPER_DEPTH[0] * num_layers)
    high = max(low, round(PAPER_DEPTH[1] * num_layers) - 1)
    band = torch.arange(low * num_heads, (high + 1) * num_heads)
    rows.append(_row(f"paper depth band (layers {low}-{high}, averaged)", readouts, band, ks, scorer=scorer))
    rows.append(_row("all heads averaged", readouts, torch.arange(total), ks, scorer=scorer))
    rows.append(
        random_row(readouts, len(detected), total, draws=draws, seed=seed, pool_sizes=ks, scorer=scorer)
    )
    lexical = lexical_row(readouts, ks)
    if lexical is not None:
        rows.append(lexical)
    families: dict[str, dict[str, float]] = {}
    everything = torch.arange(total)
    for family in FAMILIES:
        subset = [r for r in readouts if r.family == family]
        if not subset:
            continue
        mine = mean_metrics(subset, detected, pool_sizes=ks, scorer=scorer)
        base = mean_metrics(subset, everything, pool_sizes=ks, scorer=scorer)
        families[family] = {
            "cases": float(len(subset)),
            **{f"detected R@{k}": float(mine[f"recall@{k}"]) for k in ks},
            f"all heads R@{ks[-1]}": float(base[f"recall@{ks[-1]}"]),
        }
        lexical_family = lexical_row(subset, ks)
        if lexical_family is not None:
            families[family][f"BM25 R@{ks[-1]}"] = lexical_family.recall[ks[-1]]
    return rows, families


def evaluate_heads(
    readout: Any,
    tokenizer: Any,
    head_set: HeadSet,
    *,
    others: dict[str, HeadSet] | None = None,
    num_cases: int = 36,
    seed: int = 0,
    lengths: Sequence[int] = DEFAULT_LENGTHS,
    draws: int = 20,
    pool_sizes: Sequence[int] = POOL_SIZES,
    config: ReplayConfig | None = None,
    progress: bool = True,
) -> EvaluationReport:
    """Read ``num_cases`` held-out cases once and compare ``head_set`` with the baselines.

    Baselines: the same heads without null calibration, ``others`` (e.g. bundled sets for this
    model), every head in the paper's depth band, all heads, and random sets of the same size.
    """
    started = time.perf_counter()
    config = config or ReplayConfig()
    cases = calibration_cases(readout, tokenizer, num_cases, seed=seed, split="eval", lengths=lengths)
    readouts = read_cases(readout, tokenizer, cases, config, progress=progress, desc="evaluate heads")
    read = time.perf_counter()
    rows, families = compare_head_sets(
        readouts,
        head_set,
        model_config(readout),
        others=others,
        draws=draws,
        seed=seed,
        pool_sizes=pool_sizes,
        scorer=config.attention.make_scorer(),
    )
    tokens = [r.num_tokens for r in readouts]
    return EvaluationReport(
        rows,
        families,
        len(readouts),
        seed,
        tuple(pool_sizes),
        (min(tokens), max(tokens)),
        {"read_passes": read - started, "total": time.perf_counter() - started},
    )
