"""Evidence recall (and with ``--answer``, accuracy) of selection variants on generated benchmark cases.

Usage: ``python scripts/selection_recall.py [--tasks ...] [--lengths 1024 4096] [--depths 0.25 0.75]
[--seeds 2] [--variants default hybrid attention bm25-recursive ...] [--set name=key:value,...] [--answer]``;
``--documents`` takes the real-document questions (``recontext bench --tasks documents``, all 86, one
column per kind, or ``--by family``) instead of generated tasks: ``--documents --lengths 2048 --variants
hybrid semantic``.

Every variant selects with R rounds and the engine's evidence budget on the same cases (the layout
alternates between one text and documents); ``default`` is the engine's default selector (with the
sentence embedder where ``recontext[embeddings]`` is installed), ``hybrid`` the one without it,
``bm25-recursive`` the lexical-only selector (``BM25Signal()``). ``--set`` adds a variant made of
:class:`~recontext_engine.ReplayConfig` options (a selector by name, attention settings), e.g.
``--set cal-w16=null_calibration:true,cue_window:16``. The context is prefilled once per case and
shared by the variants (options that change the prompt, such as ``max_sentence_chars``, are not for
``--set``). The table gives, per variant and task, the mean fraction of gold sentences in the evidence.

``--answer`` also generates an answer per variant from the same prefill (the cache is cropped back
to the context after each) and adds each variant's accuracy (HELMET substring match), with two
reference rows on the same cases: ``vanilla`` (no evidence) and ``gold`` (the gold sentences only).
It is how evidence budgets and orders are compared cheaply before a full benchmark run.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Iterator
from dataclasses import replace

from recontext_engine import (
    AttentionSignal,
    BM25Signal,
    ReContextEngine,
    ReplayConfig,
    hybrid_selector,
    semantic_selector,
)
from recontext_engine.bench.documents import FAMILIES, KINDS, document_cases
from recontext_engine.bench.methods import oracle_evidence
from recontext_engine.bench.metrics import evidence_recall, substring_match
from recontext_engine.bench.tasks import MULTILINGUAL_TASKS, BenchCase, generate_case, longest_context
from recontext_engine.engine import StreamOutcome
from recontext_engine.request import Request
from recontext_engine.results import Evidence

VARIANTS: dict[str, dict[str, object]] = {
    "default": {},
    "hybrid": {"selector": hybrid_selector()},
    # attention alone: lone evidence reads BM25, so it is off in these two
    "attention": {"selector": AttentionSignal(null_calibration=True), "standout": 0.0},
    "paper": {"selector": AttentionSignal(unit="token"), "standout": 0.0},
    "bm25-recursive": {"selector": BM25Signal()},
    "semantic": {"selector": semantic_selector()},
}


def _value(text: str) -> object:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return {"true": True, "false": False, "none": None}.get(text.lower(), text)


def _variant(spec: str) -> tuple[str, dict[str, object]]:
    name, _, options = spec.partition("=")
    pairs = [item.split(":", 1) for item in options.split(",") if item]
    return name, {key: _value(value) for key, value in pairs}


def _answered(
    engine: ReContextEngine,
    request: Request,
    config: ReplayConfig,
    evidence: list[Evidence],
    case: BenchCase,
) -> bool:
    """Whether replaying ``evidence`` after the prefilled context answers ``case``; the cache is kept."""
    outcome = StreamOutcome()
    for _ in engine._run(replace(request, config=config, timings={}), evidence, outcome):
        pass
    engine.backend.crop(request.cache, len(request.prefix.ids))
    assert outcome.result is not None
    return substring_match(outcome.result.text, case.answers)


def _row(name: str, cells: list[float], extra: str) -> str:
    return (
        f"| {name} | "
        + " | ".join(f"{c:.2f}" for c in cells)
        + f" | {statistics.mean(cells):.2f} | {extra} |"
    )


def _evaluate(
    engine: ReContextEngine, base: ReplayConfig, variants: dict[str, dict[str, object]], length: int, args
) -> tuple[dict, dict, dict, dict]:
    """Recall, accuracy, pool sizes and selection seconds of every variant on one length's cases."""
    recall: dict[tuple[str, str], list[float]] = {}
    correct: dict[tuple[str, str], list[float]] = {}
    sizes: dict[str, list[int]] = {name: [] for name in variants}
    seconds: dict[str, float] = dict.fromkeys(variants, 0.0)
    for task, case in _cases(engine, length, args):
        # One prefill per case, shared by the variants (they change selection only).
        request = engine._start(case.context, case.question, base)
        if args.answer:
            for name, evidence in (("vanilla", []), ("gold", oracle_evidence(case))):
                ok = _answered(engine, request, base, evidence, case)
                correct.setdefault((name, task), []).append(float(ok))
        for name, options in variants.items():
            started = time.perf_counter()
            config = base.with_options(**options)
            evidence = engine._select(replace(request, config=config))
            seconds[name] += time.perf_counter() - started
            recall.setdefault((name, task), []).append(evidence_recall(evidence, case.gold) or 0.0)
            sizes[name].append(len(evidence))
            if args.answer:
                ok = _answered(engine, request, config, evidence, case)
                correct.setdefault((name, task), []).append(float(ok))
    return recall, correct, sizes, seconds


def _cases(engine: ReContextEngine, length: int, args) -> Iterator[tuple[str, BenchCase]]:
    """``(column, case)``: generated cases by task, or with ``--documents`` every real-document
    question by its kind (lookup, two-hop, paraphrase) or ``--by family``, its context cut to
    ``length`` tokens."""
    if args.documents:
        for case in document_cases(engine.count_tokens, max_tokens=length):
            yield case.meta[args.by], case
        return
    for task in args.tasks:
        for seed in range(args.seeds):
            for i, depth in enumerate(args.depths):
                layout = "text" if (i + seed) % 2 == 0 else "docs"
                yield (
                    task,
                    generate_case(
                        task,
                        length=length,
                        depth=depth,
                        count_tokens=engine.count_tokens,
                        layout=layout,
                        seed=seed,
                    ),
                )
        print(f"# {length} tokens: {task} done", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tasks", nargs="+", default=list(MULTILINGUAL_TASKS))
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024], help="target context tokens")
    parser.add_argument("--depths", type=float, nargs="+", default=[0.25, 0.75])
    parser.add_argument("--seeds", type=int, default=1, help="cases per task and depth")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--variants", nargs="+", default=["default"], choices=list(VARIANTS))
    parser.add_argument(
        "--set", dest="extra", action="append", default=[], type=_variant, metavar="NAME=K:V,..."
    )
    parser.add_argument("--answer", action="store_true", help="also generate and report accuracy")
    parser.add_argument(
        "--documents", action="store_true", help="the real-document questions instead of --tasks"
    )
    parser.add_argument(
        "--by", choices=["kind", "family"], default="kind", help="--documents: one column per kind or family"
    )
    args = parser.parse_args()
    if args.documents:
        args.tasks = list(KINDS if args.by == "kind" else FAMILIES)
    variants = {name: VARIANTS[name] for name in args.variants} | dict(args.extra)
    engine = ReContextEngine.from_pretrained()
    base = engine.default_config.with_options(rounds=args.rounds)
    by_length: dict[int, dict[str, float]] = {}
    longest = longest_context(engine.context_window, base.pool_limit, base.generation.max_new_tokens)
    for length in [min(n, longest) for n in args.lengths]:
        recall, correct, sizes, seconds = _evaluate(engine, base, variants, length, args)
        cases = (
            f"every question, by {args.by},"
            if args.documents
            else f"{len(args.depths) * args.seeds} cases per task,"
        )
        print(f"\n{cases} about {length} tokens, R={args.rounds}\n")
        print("| variant | " + " | ".join(args.tasks) + " | mean | sentences | seconds |")
        print("|---|" + "---:|" * (len(args.tasks) + 3))
        for name in variants:
            cells = [statistics.mean(recall[(name, task)]) for task in args.tasks]
            print(_row(name, cells, f"{statistics.mean(sizes[name]):.1f} | {seconds[name]:.0f}"))
        if not args.answer:
            continue
        print("\nAccuracy (answer contains an alias), same cases:\n")
        print("| variant | " + " | ".join(args.tasks) + " | mean | recall |")
        print("|---|" + "---:|" * (len(args.tasks) + 2))
        for name in ["vanilla", "gold", *variants]:
            cells = [statistics.mean(correct[(name, task)]) for task in args.tasks]
            hits = [statistics.mean(recall[(name, task)]) for task in args.tasks] if name in variants else []
            print(_row(name, cells, f"{statistics.mean(hits):.2f}" if hits else "-"))
            by_length.setdefault(length, {})[name] = statistics.mean(cells)
    if len(by_length) > 1:
        names = list(next(iter(by_length.values())))
        print("\nAccuracy by length (mean over tasks):\n")
        print("| variant | " + " | ".join(f"{n} tokens" for n in by_length) + " |")
        print("|---|" + "---:|" * len(by_length))
        for name in names:
            print(f"| {name} | " + " | ".join(f"{row[name]:.2f}" for row in by_length.values()) + " |")


if __name__ == "__main__":
    main()
