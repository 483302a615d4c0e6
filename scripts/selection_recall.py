"""Evidence recall of selection variants on generated benchmark cases (selection only, no generation).

Usage: ``python scripts/selection_recall.py [--tasks ...] [--length 1024] [--depths 0.25 0.75]
[--seeds 2] [--variants hybrid attention bm25-recursive ...] [--set name=key:value,...]``.

Every variant selects with R rounds and the engine's evidence budget on the same cases (the layout
alternates between one text and documents); ``bm25-recursive`` is the benchmark's lexical-only arm
(:func:`recontext_engine.bench.methods.bm25_recursive_evidence`). ``--set`` adds a variant made of
:class:`~recontext_engine.ReplayConfig` options, e.g. ``--set attn-w16=lexical_weight:0,cue_window:16``.
The context is prefilled once per case and shared by the variants (options that change the prompt,
such as ``max_sentence_chars``, are not for ``--set``). The table gives, per variant and task, the
mean fraction of gold sentences in the evidence.
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import replace

from recontext_engine import ReContextEngine
from recontext_engine.bench.methods import MethodContext, bm25_recursive_evidence
from recontext_engine.bench.metrics import evidence_recall
from recontext_engine.bench.tasks import MULTILINGUAL_TASKS, generate_case

VARIANTS: dict[str, dict[str, object]] = {
    "hybrid": {},
    "attention": {"lexical_weight": 0.0},
    "paper": {"unit": "token", "null_calibration": False, "lexical_weight": 0.0},
    "bm25-recursive": {},
}
LEXICAL_ONLY = "bm25-recursive"


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


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tasks", nargs="+", default=list(MULTILINGUAL_TASKS))
    parser.add_argument("--length", type=int, default=1024)
    parser.add_argument("--depths", type=float, nargs="+", default=[0.25, 0.75])
    parser.add_argument("--seeds", type=int, default=1, help="cases per task and depth")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--variants", nargs="+", default=["hybrid"], choices=list(VARIANTS))
    parser.add_argument(
        "--set", dest="extra", action="append", default=[], type=_variant, metavar="NAME=K:V,..."
    )
    args = parser.parse_args()
    variants = {name: VARIANTS[name] for name in args.variants} | dict(args.extra)
    engine = ReContextEngine.from_pretrained()
    base = engine.default_config.with_options(rounds=args.rounds)
    budget = base.pool_limit
    recall: dict[tuple[str, str], list[float]] = {}
    sizes: dict[str, list[int]] = {name: [] for name in variants}
    seconds: dict[str, float] = dict.fromkeys(variants, 0.0)
    for task in args.tasks:
        for seed in range(args.seeds):
            for i, depth in enumerate(args.depths):
                layout = "text" if (i + seed) % 2 == 0 else "docs"
                case = generate_case(
                    task,
                    length=args.length,
                    depth=depth,
                    count_tokens=engine.count_tokens,
                    layout=layout,
                    seed=seed,
                )
                # One prefill per case, shared by the variants (they change selection only).
                request = engine._start(case.context, case.question, base)
                for name, options in variants.items():
                    started = time.perf_counter()
                    if name == LEXICAL_ONLY:
                        ctx = MethodContext(engine, base, budget=budget)
                        evidence = bm25_recursive_evidence(ctx, case, args.rounds)
                    else:
                        evidence = engine._select(replace(request, config=base.with_options(**options)))
                    seconds[name] += time.perf_counter() - started
                    recall.setdefault((name, task), []).append(evidence_recall(evidence, case.gold) or 0.0)
                    sizes[name].append(len(evidence))
        print(f"# {task} done", flush=True)
    print(f"\n{len(args.depths) * args.seeds} cases per task, about {args.length} tokens, R={args.rounds}\n")
    print("| variant | " + " | ".join(args.tasks) + " | mean | sentences | seconds |")
    print("|---|" + "---:|" * (len(args.tasks) + 3))
    for name in variants:
        cells = [statistics.mean(recall[(name, task)]) for task in args.tasks]
        print(
            f"| {name} | " + " | ".join(f"{c:.2f}" for c in cells) + f" | {statistics.mean(cells):.2f} | "
            f"{statistics.mean(sizes[name]):.1f} | {seconds[name]:.0f} |"
        )


if __name__ == "__main__":
    main()
