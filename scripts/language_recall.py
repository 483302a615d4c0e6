"""Evidence recall of ReContext (default config, R=2) on the multilingual benchmark tasks.

Usage: ``python scripts/language_recall.py [--length 1024] [--depths 0.25 0.75]``. Selection only
(``select_evidence``, no generation); the layout alternates between one text and documents.
"""

from __future__ import annotations

import argparse
import statistics
import time

from recontext_engine import ReContextEngine, ReplayConfig
from recontext_engine.bench.metrics import evidence_recall
from recontext_engine.bench.tasks import MULTILINGUAL_TASKS, generate_case


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tasks", nargs="+", default=list(MULTILINGUAL_TASKS))
    parser.add_argument("--length", type=int, default=1024)
    parser.add_argument("--depths", type=float, nargs="+", default=[0.25, 0.75])
    args = parser.parse_args()
    engine = ReContextEngine.from_pretrained()
    config = ReplayConfig()
    print("| task | cases | tokens | recall | evidence sentences | seconds per case |")
    print("|---|---:|---:|---:|---:|---:|")
    for task in args.tasks:
        recalls, sizes, tokens, seconds = [], [], [], []
        for i, depth in enumerate(args.depths):
            case = generate_case(
                task,
                length=args.length,
                depth=depth,
                count_tokens=engine.count_tokens,
                layout="text" if i % 2 == 0 else "docs",
            )
            started = time.perf_counter()
            evidence = engine.select_evidence(case.context, case.question, config)
            seconds.append(time.perf_counter() - started)
            recalls.append(evidence_recall(evidence, case.gold))
            sizes.append(len(evidence))
            tokens.append(case.context_tokens)
        print(
            f"| {task} | {len(recalls)} | {statistics.mean(tokens):.0f} | {statistics.mean(recalls):.2f} | "
            f"{statistics.mean(sizes):.1f} | {statistics.mean(seconds):.0f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
