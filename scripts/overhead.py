"""Time and peak-memory cost of ReContext (R=2) against vanilla (R=0) on the same inputs.

Usage: ``python scripts/overhead.py [--lengths 1024 2048 4096 8192] [--repeats 3] [--separate]
[--orders round] [--warm] [--conversation 4] [--backend vllm] [--profile]``. Each length gets one
seeded document with a planted fact. Per repeat the arms run back to back on it (their order
alternating between repeats), with ``answer``'s default ``max_new_tokens`` unless ``--max-new-tokens``
says otherwise; the table gives medians over repeats of the per-repeat ratios, in wall-clock and in
process CPU time (steadier on a shared machine). Every call's document starts with its own entry
number, so no call reuses another's prefix (vLLM's prefix cache), and the null-question row cache and
the context cache are cleared before each: every R=2 call pays its full cost (one question per
context). ``--separate`` adds an arm with every read pass as its own forward (no shared evidence
tokens), ``--orders round score`` an arm per evidence order (in ``round`` and ``score`` order the
generation reuses the last read's evidence). ``--warm`` adds R=0 and R=2 arms timed on a second
question, asked right after an untimed first one on the same context (the context cache, or vLLM's
prefix cache, holds it), against R=0's cold call. ``--conversation N`` instead asks N questions in a
row over a history that grows by each question and answer (one document per message, the first
``--lengths`` tokens long), with the context cache and without. ``--profile`` instead prints the
stages of one R=0 and one R=2 call per length (prefill, each read pass, selection, generation; R=2
once per ``--orders`` entry too). With ``--backend vllm`` (vLLM's CPU build: run it in the vLLM
virtualenv) memory is not compared: vLLM allocates its KV pool up front, in its engine process.
"""

from __future__ import annotations

import argparse
import itertools
import random
import statistics
import time

from recontext_engine import GenerationConfig, ReContextEngine, ReplayConfig
from recontext_engine.bench.measure import PeakMemory, steady_allocator
from recontext_engine.bench.tasks import longest_context
from recontext_engine.protocol import Backend
from recontext_engine.reads import BackendView, SeparateReads
from recontext_engine.selection.pool import EVIDENCE_ORDERS

WORDS = ("harbour", "ferry", "lantern", "orchard", "quarry", "violin", "meadow", "archive", "signal", "canal")
QUESTION = "What code opens the vault of the old archive?"
FIRST_QUESTION = "On which day was the canal checked?"  # asked before QUESTION in the --warm arms


def document(tokens: int, count_tokens, seed: int = 0) -> str:
    rng = random.Random(seed)
    sentences = []
    while count_tokens(" ".join(sentences)) < tokens:
        sentences.extend(
            f"The {rng.choice(WORDS)} by the {rng.choice(WORDS)} was checked on day {rng.randint(1, 300)}."
            for _ in range(40)
        )
    while len(sentences) > 1 and count_tokens(" ".join(sentences)) > tokens:
        sentences.pop()
    sentences.insert(len(sentences) // 2, "The vault of the old archive opens with code 5816.")
    return " ".join(sentences)


_calls = itertools.count()


def measure(
    engine: ReContextEngine, text: str, config: ReplayConfig, warm: bool = False
) -> tuple[float, float, int, str, int]:
    for cache in (engine.row_cache, engine.context_cache):
        if cache is not None:
            cache.clear()
    text = f"Entry {next(_calls)}. {text}"
    if warm:
        engine.answer(text, FIRST_QUESTION, config)
    with PeakMemory() as memory:
        wall, cpu = time.perf_counter(), time.process_time()
        result = engine.answer(text, QUESTION, config)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return wall, cpu, memory.peak, result.text, result.usage.output_tokens


class TimedReads(BackendView):
    """A view of a backend that records every read pass: (kind, tokens read, seconds)."""

    def __init__(self, backend: Backend) -> None:
        super().__init__(backend)
        self.passes: list[tuple[str, int, float]] = []

    def read(self, cache, prefix_len, suffix_ids, heads, cue_window, keep=False):
        timed = self._timed(self._backend.read, "read")
        return timed(cache, prefix_len, suffix_ids, heads, cue_window, keep)

    def read_branches(self, cache, prefix_len, shared_ids, branches, heads, cue_window, keep=False):
        if isinstance(self._backend, SeparateReads):  # one timed read per branch
            return Backend.read_branches(
                self, cache, prefix_len, shared_ids, branches, heads, cue_window, keep
            )
        timed = self._timed(self._backend.read_branches, "shared")
        return timed(cache, prefix_len, shared_ids, branches, heads, cue_window, keep)

    def _timed(self, method, kind: str):
        def run(cache, prefix_len, *ids_and_rest):
            started = time.perf_counter()
            rows = method(cache, prefix_len, *ids_and_rest)
            tokens = len(ids_and_rest[0]) + (sum(map(len, ids_and_rest[1])) if kind == "shared" else 0)
            self.passes.append((kind, tokens, time.perf_counter() - started))
            return rows

        return run


def profile(engine: ReContextEngine, lengths: list[int], separate: bool, orders: list[str]) -> None:
    """Per-stage wall seconds of one R=0 and one R=2 ``answer`` per length (and per order)."""
    timed = TimedReads(SeparateReads(engine.backend) if separate else engine.backend)
    probe = ReContextEngine(timed, engine.tokenizer, engine.heads)
    probe.row_cache = None
    default = ReplayConfig().evidence_order
    print("| tokens | R | order | prefill | read passes (kind, tokens, s) | select | generate | total |")
    print("|---:|---:|---|---:|---|---:|---:|---:|")
    for length in lengths:
        text = document(length, engine.count_tokens)
        for rounds, order in [(0, default), (2, default)] + [(2, order) for order in orders]:
            timed.passes.clear()
            result = probe.answer(
                f"Entry {next(_calls)}. {text}", QUESTION, rounds=rounds, evidence_order=order
            )
            t = result.timings
            passes = ", ".join(f"{kind} {n} {s:.2f}" for kind, n, s in timed.passes) or "-"
            print(
                f"| {engine.count_tokens(text)} | {rounds} | {order} | {t['prefill']:.2f} | {passes} | "
                f"{t['select']:.2f} | {t['generate']:.2f} | {t['total']:.2f} |",
                flush=True,
            )


def conversation(engine: ReContextEngine, length: int, questions: int) -> None:
    """Seconds and cached prompt tokens of follow-up questions over a growing history, cache on and off."""
    messages = [s.strip() + "." for s in document(length, engine.count_tokens).split(".") if s.strip()]
    kept = engine.context_cache
    print(
        "| context cache | per question: prompt tokens / cached / prefill s / call s | total s | answered |"
    )
    print("|---|---|---:|---:|")
    for cache in (kept, None):
        engine.context_cache = cache
        if cache is not None:
            cache.clear()
        history, turns, total, answered = list(messages), [], 0.0, 0
        for _ in range(questions):
            started = time.perf_counter()
            result = engine.answer(history, QUESTION)
            seconds = time.perf_counter() - started
            total += seconds
            answered += "5816" in result.text
            usage = result.usage
            prefill = result.timings["prefill"]
            turns.append(f"{usage.input_tokens} / {usage.cached_tokens} / {prefill:.1f} / {seconds:.1f}")
            history += [QUESTION, result.text]
        state = "on" if cache is not None else "off"
        print(f"| {state} | {'; '.join(turns)} | {total:.1f} | {answered} / {questions} |", flush=True)
    engine.context_cache = kept


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 2048, 4096, 8192])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=GenerationConfig().max_new_tokens)
    parser.add_argument("--separate", action="store_true", help="also time R=2 with separate read passes")
    parser.add_argument(
        "--orders", nargs="*", default=[], choices=EVIDENCE_ORDERS, help="also time R=2 in these orders"
    )
    parser.add_argument("--warm", action="store_true", help="also time a second question on the context")
    parser.add_argument(
        "--conversation", type=int, default=0, help="follow-up questions over a growing history"
    )
    parser.add_argument("--backend", choices=("transformers", "vllm"), default="transformers")
    parser.add_argument("--profile", action="store_true", help="per-stage seconds of one answer per length")
    args = parser.parse_args()
    if args.backend == "vllm":
        engine = ReContextEngine.from_pretrained(backend="vllm", dtype="float32", enforce_eager=True)
    else:
        engine = ReContextEngine.from_pretrained()
    config = ReplayConfig().with_options(max_new_tokens=args.max_new_tokens)
    vanilla = config.with_options(rounds=0)
    arms = {"R=0": (engine, vanilla, False), "R=2": (engine, config, False)}
    for order in args.orders:
        arms[f"R=2 {order} order"] = (engine, config.with_options(evidence_order=order), False)
    if args.separate:
        separate = ReContextEngine(SeparateReads(engine.backend), engine.tokenizer, engine.heads)
        separate.row_cache = None
        arms["R=2 separate"] = (separate, config, False)
    if args.warm:
        arms["R=0 second question"] = (engine, vanilla, True)
        arms["R=2 second question"] = (engine, config, True)
    steady_allocator()
    engine.answer("Warm-up text.", "Warm up?", max_new_tokens=2)
    longest = longest_context(engine.context_window, config.pool_limit, args.max_new_tokens)
    args.lengths = [min(length, longest) for length in args.lengths]
    if args.profile:
        profile(engine, args.lengths, args.separate, args.orders)
        return
    if args.conversation:
        conversation(engine, args.lengths[0], args.conversation)
        return
    others = [name for name in arms if name != "R=0"]
    print(
        "| tokens | arm | R=0 s | arm s | time / R=0 (wall) | time / R=0 (CPU) | memory / R=0 "
        "| answer tokens R=0 / arm | answer |\n|---:|---|---:|---:|---:|---:|---:|---:|---|"
    )
    for length in args.lengths:
        text = document(length, engine.count_tokens)
        runs: dict[str, list[tuple[float, float, int, str, int]]] = {name: [] for name in arms}
        for repeat in range(args.repeats):
            order = list(arms) if repeat % 2 == 0 else list(reversed(arms))
            for name in order:
                arm_engine, arm_config, warm = arms[name]
                runs[name].append(measure(arm_engine, text, arm_config, warm))
        base = runs["R=0"]
        for name in others:
            ratios = [(w / b[0], c / b[1], m / max(b[2], 1)) for (w, c, m, *_), b in zip(runs[name], base)]
            wall, cpu, mem = (statistics.median(r[i] for r in ratios) for i in range(3))
            t0 = statistics.median(b[0] for b in base)
            t = statistics.median(r[0] for r in runs[name])
            memory = f"{mem:.2f}x" if args.backend == "transformers" else "-"
            print(
                f"| {engine.count_tokens(text)} | {name} | {t0:.1f} | {t:.1f} | {wall:.2f}x | {cpu:.2f}x | "
                f"{memory} | {base[-1][4]} / {runs[name][-1][4]} | {runs[name][-1][3][:40]!r} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
