"""Time and peak-memory cost of ReContext (R=2) against vanilla (R=0) on the same inputs.

Usage: ``python scripts/overhead.py [--lengths 1024 2048 4096 8192] [--repeats 3] [--separate]``.
Each length gets one seeded document with a planted fact. Per repeat the arms run back to back on
it (their order alternating between repeats), with ``answer``'s default ``max_new_tokens`` unless
``--max-new-tokens`` says otherwise; the table gives medians over repeats of the per-repeat ratios,
in wall-clock and in process CPU time (steadier on a shared machine). The null-question row cache is
cleared before every call, so each R=2 call pays its full cost (one question per context).
``--separate`` adds an arm with every read pass as its own forward (no shared evidence tokens), as
before the shared reads.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from recontext_engine import ReContextEngine, ReplayConfig
from recontext_engine.bench.measure import PeakMemory, steady_allocator
from recontext_engine.reads import SeparateReads

WORDS = ("harbour", "ferry", "lantern", "orchard", "quarry", "violin", "meadow", "archive", "signal", "canal")
QUESTION = "What code opens the vault of the old archive?"


def document(tokens: int, count_tokens, seed: int = 0) -> str:
    rng = random.Random(seed)
    sentences = []
    while count_tokens(" ".join(sentences)) < tokens:
        sentences.extend(
            f"The {rng.choice(WORDS)} by the {rng.choice(WORDS)} was checked on day {rng.randint(1, 300)}."
            for _ in range(40)
        )
    sentences.insert(len(sentences) // 2, "The vault of the old archive opens with code 5816.")
    return " ".join(sentences)


def measure(engine: ReContextEngine, text: str, config: ReplayConfig) -> tuple[float, float, int, str]:
    if engine.row_cache is not None:
        engine.row_cache.clear()
    with PeakMemory() as memory:
        wall, cpu = time.perf_counter(), time.process_time()
        result = engine.answer(text, QUESTION, config)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return wall, cpu, memory.peak, result.text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 2048, 4096, 8192])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=ReplayConfig().max_new_tokens)
    parser.add_argument("--separate", action="store_true", help="also time R=2 with separate read passes")
    args = parser.parse_args()
    engine = ReContextEngine.from_pretrained()
    arms = {"R=0": (engine, 0), "R=2": (engine, 2)}
    if args.separate:
        separate = ReContextEngine(SeparateReads(engine.backend), engine.tokenizer, engine.heads)
        separate.row_cache = None
        arms["R=2 separate"] = (separate, 2)
    steady_allocator()
    engine.answer("Warm-up text.", "Warm up?", max_new_tokens=2)
    others = [name for name in arms if name != "R=0"]
    print(
        "| tokens | arm | R=0 s | arm s | time / R=0 (wall) | time / R=0 (CPU) | memory / R=0 | answer |\n"
        "|---:|---|---:|---:|---:|---:|---:|---|"
    )
    for length in args.lengths:
        text = document(length, engine.count_tokens)
        runs: dict[str, list[tuple[float, float, int, str]]] = {name: [] for name in arms}
        for repeat in range(args.repeats):
            order = list(arms) if repeat % 2 == 0 else list(reversed(arms))
            for name in order:
                arm_engine, rounds = arms[name]
                config = ReplayConfig(rounds=rounds, max_new_tokens=args.max_new_tokens)
                runs[name].append(measure(arm_engine, text, config))
        base = runs["R=0"]
        for name in others:
            ratios = [(w / b[0], c / b[1], m / max(b[2], 1)) for (w, c, m, _), b in zip(runs[name], base)]
            wall, cpu, mem = (statistics.median(r[i] for r in ratios) for i in range(3))
            t0 = statistics.median(b[0] for b in base)
            t = statistics.median(r[0] for r in runs[name])
            print(
                f"| {engine.count_tokens(text)} | {name} | {t0:.1f} | {t:.1f} | {wall:.2f}x | {cpu:.2f}x | "
                f"{mem:.2f}x | {runs[name][-1][3][:40]!r} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
