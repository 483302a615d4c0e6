"""Time and peak-memory cost of ReContext (R=2) against vanilla (R=0) on the same inputs.

Usage: ``python scripts/overhead.py [--lengths 2048 6144] [--repeats 1]``. Each length gets one
seeded document with a planted fact; R=0 and R=2 run back to back on it, and the ratios are printed.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from recontext_engine import ReContextEngine, ReplayConfig
from recontext_engine.bench.measure import PeakMemory, steady_allocator

WORDS = ("harbour", "ferry", "lantern", "orchard", "quarry", "violin", "meadow", "archive", "signal", "canal")


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--lengths", type=int, nargs="+", default=[2048, 6144])
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    engine = ReContextEngine.from_pretrained()
    steady_allocator()
    engine.answer("Warm-up text.", "Warm up?", max_new_tokens=2)
    print("| tokens | R=0 s | R=2 s | time R=2/R=0 | memory R=2/R=0 | R=2 answer |")
    print("|---:|---:|---:|---:|---:|---|")
    for length in args.lengths:
        text = document(length, engine.count_tokens)
        times: dict[int, list[float]] = {0: [], 2: []}
        peaks: dict[int, list[int]] = {0: [], 2: []}
        answer = ""
        for _ in range(args.repeats):
            for rounds in (0, 2):
                config = ReplayConfig(rounds=rounds, max_new_tokens=16)
                with PeakMemory() as memory:
                    started = time.perf_counter()
                    result = engine.answer(text, "What code opens the vault of the old archive?", config)
                    times[rounds].append(time.perf_counter() - started)
                peaks[rounds].append(memory.peak)
                answer = result.text if rounds else answer
        t0, t2 = statistics.median(times[0]), statistics.median(times[2])
        m0, m2 = statistics.median(peaks[0]), statistics.median(peaks[2])
        ratios = f"{t2 / t0:.2f}x | {m2 / max(m0, 1):.2f}x"
        print(f"| {engine.count_tokens(text)} | {t0:.1f} | {t2:.1f} | {ratios} | {answer!r} |")


if __name__ == "__main__":
    main()
