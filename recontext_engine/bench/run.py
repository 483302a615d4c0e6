"""The benchmark run loop: ``recontext bench [--quick] [--out DIR]`` and ``python -m recontext_engine.bench``.

Modes:

- ``--quick``: the four default tasks at 1K tokens and all five depths, text and documents
  layouts alternating, the methods of :data:`~.methods.QUICK_METHODS`: 20 cases x 4 methods,
  about 5 s per call (8 minutes) on 2 idle CPU cores.
- full (default): lengths 1K, 2K, 4K and 8K (8K is clamped to the window minus room for the
  evidence, question and answer), all five depths, the methods of :data:`~.methods.FULL_METHODS`:
  80 cases; hours on a CPU, minutes on a GPU. ``--max-cases`` keeps an even spread of the grid.
- ``--helmet FILE.jsonl``: HELMET rows instead of generated cases (see :mod:`.helmet`).

For every case, vanilla runs first and then each other method, back to back, so that time and
memory ratios compare calls on the same case under the same machine load.

What is measured per call:

- ``time_s``: wall-clock seconds of the whole call, retrieval included (BM25 indexing, embedding
  the sentences, ReContext's read passes), model loading excluded. ``time_ratio`` divides it by
  the vanilla call's on the same case; tables report the median.
- ``memory_bytes``: peak working memory of the call. On CPU: the peak of the process's resident
  set (``VmRSS`` in ``/proc/self/status``, sampled every 5 ms by a background thread) minus its
  value just before the call, after ``gc.collect()`` and glibc ``malloc_trim(0)`` so that freed
  memory of earlier calls is not counted as headroom. Except in quick mode (where it would cost
  about a quarter more time) or with ``--steady-memory``, blocks of 1 MiB and more are mmapped
  (:func:`steady_allocator`), so that a freed tensor leaves the resident set at once. It covers
  the KV cache, activations, attention readouts and retrieval structures; the weights are in the
  baseline. On CUDA:
  ``torch.cuda.max_memory_allocated`` above the allocation before the call. ``memory_ratio``
  divides it by vanilla's (None when vanilla's peak is under 1 MiB, too small to divide by).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import json
import math
import os
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .methods import FULL_METHODS, METHODS, QUICK_METHODS, MethodContext, get_method
from .metrics import evidence_precision, evidence_recall, exact_match, overlaps, substring_match
from .tasks import DEFAULT_TASKS, DEPTHS, TASKS, BenchCase, generate_cases

QUICK_LENGTHS = (1024,)
FULL_LENGTHS = (1024, 2048, 4096, 8192)
_MIN_MEMORY = 1 << 20
_MAX_ANSWER_TOKENS = 64


# -- measurement --------------------------------------------------------------------------------


def _rss_bytes() -> int:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def _trim_heap() -> None:
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def steady_allocator() -> None:
    """Make glibc mmap every block of 1 MiB or more, so a freed tensor leaves the resident set at once.

    Resident memory then follows live memory instead of glibc's adaptive threshold (which made the
    same 8K cases measure 0.82x to 1.13x across runs); allocations get slower (page faults).
    """
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").mallopt(-3, 1 << 20)  # M_MMAP_THRESHOLD


class PeakMemory:
    """Peak memory growth during a ``with`` block (see the module docstring for what is measured)."""

    def __init__(self, device: str = "cpu", interval: float = 0.005) -> None:
        self.device = device
        self.interval = interval
        self.peak = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _sample(self) -> None:
        while not self._stop.wait(self.interval):
            self._max = max(self._max, _rss_bytes())

    def __enter__(self) -> PeakMemory:
        _trim_heap()
        if self.device.startswith("cuda"):
            import torch

            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self._base = torch.cuda.memory_allocated()
            return self
        self._base = self._max = _rss_bytes()
        self._stop.clear()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.device.startswith("cuda"):
            import torch

            torch.cuda.synchronize()
            self.peak = max(0, torch.cuda.max_memory_allocated() - self._base)
            return
        self._stop.set()
        assert self._thread is not None
        self._thread.join()
        self._max = max(self._max, _rss_bytes())
        self.peak = max(0, self._max - self._base)


def _engine_device(engine: Any) -> str:
    model = getattr(getattr(engine, "backend", None), "model", None)
    try:
        return str(next(model.parameters()).device)
    except (AttributeError, StopIteration, TypeError):
        return "cpu"


# -- settings -----------------------------------------------------------------------------------


@dataclass
class BenchSettings:
    """One benchmark run's settings (the command-line flags)."""

    out: Path
    quick: bool = False
    tasks: tuple[str, ...] = DEFAULT_TASKS
    lengths: tuple[int, ...] = FULL_LENGTHS
    depths: tuple[float, ...] = DEPTHS
    layouts: tuple[str, ...] = ("text", "docs")
    methods: tuple[str, ...] = FULL_METHODS
    budget: int = 8
    max_new_tokens: int = 24
    seed: int = 0
    max_cases: int | None = None
    per_cell: int = 1
    unit: str | None = None
    top_k: int | None = None
    null_calibration: bool | None = None
    helmet: tuple[str, ...] = ()
    model: str | None = None
    device: str = "cpu"
    backend: str = "transformers"
    threads: int | None = None
    steady_memory: bool = False  # the command line turns it on outside quick mode
    progress: bool = True

    def validate(self) -> None:
        """Reject bad settings before any model loads (ValueError with one clear message)."""
        for name in self.methods:
            get_method(name)
        unknown = [t for t in self.tasks if t not in TASKS]
        if unknown:
            raise ValueError(f"unknown task(s) {', '.join(unknown)}; choose from {', '.join(TASKS)}")
        if any(layout not in ("text", "docs") for layout in self.layouts) or not self.layouts:
            raise ValueError("layouts must be 'text' and/or 'docs'")
        if any(not 0.0 <= d <= 1.0 for d in self.depths):
            raise ValueError("depths must lie in [0, 1]")
        if any(n < 64 for n in self.lengths):
            raise ValueError("lengths must be at least 64 tokens")
        optional = (n for n in (self.max_cases, self.threads) if n is not None)  # None = no limit / default
        counts = (self.budget, self.max_new_tokens, self.per_cell, *optional)
        if min(counts) < 1:
            raise ValueError(
                "--budget, --max-new-tokens, --max-cases, --threads and --per-cell must be at least 1"
            )
        for path in self.helmet:
            if not Path(path).is_file():
                raise ValueError(f"HELMET file not found: {path}")

    def recontext_options(self) -> dict[str, Any]:
        options: dict[str, Any] = {}
        if self.unit is not None:
            options["unit"] = self.unit
        if self.top_k is not None:
            options["top_k"] = self.top_k
        if self.null_calibration is not None:
            options["null_calibration"] = self.null_calibration
        return options

    def to_dict(self) -> dict[str, Any]:
        data = dict(self.__dict__)
        data["out"] = str(self.out)
        return data


def _ints(text: str) -> tuple[int, ...]:
    values = []
    for part in text.split(","):
        part = part.strip().lower()
        if part:
            values.append(int(float(part[:-1]) * 1024) if part.endswith("k") else int(part))
    return tuple(values)


def _floats(text: str) -> tuple[float, ...]:
    return tuple(float(p) for p in text.split(",") if p.strip())


def _names(text: str) -> tuple[str, ...]:
    return tuple(p.strip() for p in text.split(",") if p.strip())


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the ``bench`` flags to ``parser`` (used by ``recontext bench`` and ``python -m``)."""
    parser.add_argument("--quick", action="store_true", help="a small run (~10 min on 2 CPU cores)")
    parser.add_argument("--out", default="bench-results", help="output folder (default: bench-results)")
    parser.add_argument("--tasks", type=_names, help=f"comma list of tasks: {', '.join(TASKS)}")
    parser.add_argument("--lengths", type=_ints, help="comma list of context lengths in tokens (e.g. 1k,2k)")
    parser.add_argument("--depths", type=_floats, help="comma list of gold depths in [0, 1]")
    parser.add_argument("--layouts", type=_names, help="comma list of context layouts: text, docs")
    parser.add_argument("--methods", type=_names, help=f"comma list of methods: {', '.join(METHODS)}")
    parser.add_argument(
        "--budget", type=int, default=8, help="evidence sentences per replay method (default 8)"
    )
    parser.add_argument("--max-new-tokens", type=int, help="tokens to generate (default: 16 quick, 24 full)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the generated cases")
    parser.add_argument("--max-cases", type=int, help="keep at most this many cases (spread over the grid)")
    parser.add_argument("--per-cell", type=int, default=1, help="cases per task x length x depth cell")
    parser.add_argument("--unit", choices=("token", "sentence"), help="ReContext selection unit")
    parser.add_argument("--top-k", type=int, help="ReContext top-K per round")
    parser.add_argument(
        "--no-null-calibration", action="store_true", help="ReContext without null-question calibration"
    )
    parser.add_argument(
        "--helmet", action="append", metavar="FILE.jsonl", help="run on HELMET-format JSONL rows instead"
    )
    parser.add_argument("--model", help="model id or folder (default: the embedded SmolLM2-135M-Instruct)")
    parser.add_argument("--device", default="cpu", help="torch device (default cpu)")
    parser.add_argument("--backend", default="transformers", help="transformers (default) or vllm")
    parser.add_argument(
        "--threads", type=int, help="torch CPU threads (fewer than the cores helps on a shared machine)"
    )
    parser.add_argument(
        "--steady-memory",
        action="store_true",
        help="mmap blocks of 1 MiB and more in quick mode too (steadier memory figures, slower calls)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    return parser


def settings_from_args(args: argparse.Namespace) -> BenchSettings:
    quick = bool(args.quick)
    return BenchSettings(
        out=Path(args.out),
        quick=quick,
        tasks=args.tasks or DEFAULT_TASKS,
        lengths=args.lengths or (QUICK_LENGTHS if quick else FULL_LENGTHS),
        depths=args.depths or DEPTHS,
        layouts=args.layouts or ("text", "docs"),
        methods=args.methods or (QUICK_METHODS if quick else FULL_METHODS),
        budget=args.budget,
        max_new_tokens=args.max_new_tokens or (16 if quick else 24),
        seed=args.seed,
        max_cases=args.max_cases,
        per_cell=args.per_cell,
        unit=args.unit,
        top_k=args.top_k,
        null_calibration=False if args.no_null_calibration else None,
        helmet=tuple(args.helmet or ()),
        model=args.model,
        device=args.device,
        backend=args.backend,
        threads=args.threads,
        steady_memory=bool(args.steady_memory) or not quick,
        progress=not args.no_progress,
    )


# -- the run ------------------------------------------------------------------------------------


def _spread(cases: list[BenchCase], limit: int | None) -> list[BenchCase]:
    """At most ``limit`` cases, picked evenly along the grid so that every part stays represented."""
    if limit is None or len(cases) <= limit:
        return cases
    step = len(cases) / limit
    return [cases[math.floor(i * step)] for i in range(limit)]


def build_cases(settings: BenchSettings, engine: Any) -> list[BenchCase]:
    """The generated grid (or the HELMET rows), clamped to the model window, capped at ``max_cases``."""
    if settings.helmet:
        from .helmet import load_helmet

        cases: list[BenchCase] = []
        for path in settings.helmet:
            cases += load_helmet(path, count_tokens=engine.count_tokens)
        return _spread(cases, settings.max_cases)
    # Leave room for the template, the question, the replayed evidence and the answer.
    reserve = 96 + 48 * settings.budget + max(settings.max_new_tokens, _MAX_ANSWER_TOKENS)
    cases = []
    for task in settings.tasks:
        cases += generate_cases(
            [task],
            settings.lengths,
            settings.depths,
            count_tokens=engine.count_tokens,
            layouts=settings.layouts,  # type: ignore[arg-type]
            seed=settings.seed,
            max_tokens=engine.context_window - reserve,
            per_cell=settings.per_cell,
        )
    return _spread(cases, settings.max_cases)


def _evidence_dicts(evidence: Sequence[Any]) -> list[dict[str, Any]]:
    return [
        {
            "doc_index": e.doc_index,
            "char_start": e.char_start,
            "char_end": e.char_end,
            "round": e.round,
            "score": round(float(e.score), 6),
        }
        for e in evidence
    ]


def run_case(ctx: MethodContext, case: BenchCase, method_name: str, device: str) -> dict[str, Any]:
    """Run one method on one case; one record with the answer, its scores and its cost."""
    method = get_method(method_name)
    record: dict[str, Any] = {
        "case_id": case.case_id,
        "task": case.task,
        "length": case.length,
        "target_tokens": case.target_tokens,
        "context_tokens": case.context_tokens,
        "depth": case.depth,
        "hops": case.hops,
        "layout": case.layout,
        "method": method_name,
        "kind": method.kind,
        "answers": list(case.answers),
    }
    probe = PeakMemory(device)
    started = time.perf_counter()
    try:
        with probe:
            # The probe's own set-up (garbage collection, heap trim) stays outside the timing.
            started = time.perf_counter()
            result = method.run(ctx, case)
            elapsed = time.perf_counter() - started
    except Exception as exc:  # one failing call must not end the run
        record.update(
            prediction="",
            correct=False,
            exact=False,
            recall=None,
            precision=None,
            evidence=[],
            evidence_count=0,
            evidence_tokens=0,
            time_s=time.perf_counter() - started,
            memory_bytes=probe.peak,
            error=f"{type(exc).__name__}: {exc}",
        )
        return record
    replays = method.kind != "vanilla"
    record.update(
        prediction=result.text,
        correct=substring_match(result.text, case.answers),
        exact=exact_match(result.text, case.answers),
        recall=evidence_recall(result.evidence, case.gold) if replays else None,
        gold_hits=[any(overlaps(e, g) for e in result.evidence) for g in case.gold] if replays else None,
        precision=evidence_precision(result.evidence, case.gold) if replays else None,
        evidence=_evidence_dicts(result.evidence),
        evidence_count=len(result.evidence),
        evidence_tokens=result.usage.evidence_tokens,
        input_tokens=result.usage.input_tokens,
        output_tokens=result.usage.output_tokens,
        finish_reason=result.finish_reason,
        timings={k: round(v, 4) for k, v in result.timings.items()},
        time_s=elapsed,
        memory_bytes=probe.peak,
        error=None,
    )
    return record


def _with_ratios(records: list[dict[str, Any]]) -> None:
    base = next((r for r in records if r["method"] == "vanilla"), None)
    for record in records:
        record["time_ratio"] = record["memory_ratio"] = None
        if base is None or base.get("error") or record.get("error"):
            continue
        if base["time_s"] > 0:
            record["time_ratio"] = record["time_s"] / base["time_s"]
        if base["memory_bytes"] >= _MIN_MEMORY:
            record["memory_ratio"] = record["memory_bytes"] / base["memory_bytes"]


def _warm_up(ctx: MethodContext, methods: Sequence[str]) -> None:
    """One untimed call (lazy initialisation), and the embedder loaded before timing."""
    text = "Ansel spent a quiet afternoon near the harbour. The special magic number for warm-up is: 1234567."
    ctx.engine.answer(
        text, "What is the special magic number for warm-up?", ctx.config, rounds=0, max_new_tokens=2
    )
    if "embedding" in methods:
        ctx.embedder.encode(["warm-up"])


def _answer_budget(settings: BenchSettings, case: BenchCase, engine: Any) -> int:
    """Room for the answer even when the model first restates the question (small models do)."""
    answer = int(case.meta.get("answer_tokens") or max(engine.count_tokens(" " + a) for a in case.answers))
    echo = engine.count_tokens(case.question)
    return max(settings.max_new_tokens, min(_MAX_ANSWER_TOKENS, answer + echo + 4))


def _machine() -> dict[str, Any]:
    import torch

    load = os.getloadavg() if hasattr(os, "getloadavg") else (0.0, 0.0, 0.0)
    return {
        "cpus": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "load_avg_1m": round(load[0], 2),
    }


def run_bench(settings: BenchSettings, engine: Any | None = None) -> dict[str, Any]:
    """Run the benchmark and write ``report.md``, ``cases.json`` and the plots under ``settings.out``."""
    from tqdm.auto import tqdm

    from .report import write_report

    started = time.perf_counter()
    settings.validate()
    if settings.threads:
        import torch

        torch.set_num_threads(settings.threads)
    if settings.steady_memory:
        steady_allocator()
    methods = ["vanilla"] + [m for m in settings.methods if m != "vanilla"]
    if engine is None:
        from .. import ReContextEngine

        engine = ReContextEngine.from_pretrained(
            settings.model, device=settings.device, backend=settings.backend
        )
    device = _engine_device(engine)
    base = engine.default_config.with_options(max_new_tokens=settings.max_new_tokens)
    ctx = MethodContext(engine, base, settings.budget, settings.recontext_options())
    cases = build_cases(settings, engine)
    _warm_up(ctx, methods)
    machine_before = _machine()
    records: list[dict[str, Any]] = []
    done: list[BenchCase] = []
    interrupted = False
    bar = tqdm(total=len(cases) * len(methods), desc="bench", unit="call", disable=not settings.progress)
    try:
        for case in cases:
            ctx.config = base.with_options(max_new_tokens=_answer_budget(settings, case, engine))
            case_records = []
            for name in methods:
                bar.set_postfix_str(f"{case.task} {case.length} {name}", refresh=False)
                case_records.append(run_case(ctx, case, name, device))
                bar.update(1)
            _with_ratios(case_records)
            records += case_records
            done.append(case)
    except KeyboardInterrupt:
        # Ctrl-C ends the run early; the finished cases are still reported.
        interrupted = True
    finally:
        bar.close()
    meta = {
        "model": engine.model_name,
        "device": device,
        "context_window": engine.context_window,
        "heads": len(getattr(getattr(engine, "heads", None), "heads", ()) or ()),
        "settings": settings.to_dict(),
        "methods": methods,
        "recontext_config": {
            name: _method_config(ctx, name) for name in methods if get_method(name).kind == "recontext"
        },
        "wall_s": time.perf_counter() - started,
        "created": time.strftime("%Y-%m-%d %H:%M:%S"),
        "interrupted": interrupted,
        "machine": {**machine_before, "load_avg_1m_after": _machine()["load_avg_1m"]},
        "planned_cases": len(cases),
    }
    return write_report(settings.out, done, records, meta)


def _method_config(ctx: MethodContext, name: str) -> dict[str, Any]:
    from .methods import recontext_config, variant_of

    method = get_method(name)
    cfg = recontext_config(ctx, method.rounds, variant_of(name))
    keys = (
        "rounds",
        "top_k",
        "unit",
        "null_calibration",
        "lexical_weight",
        "max_evidence",
        "cue_window",
        "decay",
        "candidates",
    )
    return {k: getattr(cfg, k) for k in keys}


def main(args: argparse.Namespace) -> int:
    """Entry point for ``recontext bench``: run, print where the report is, return an exit code."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        settings = settings_from_args(args)
        summary = run_bench(settings)  # validates the settings before any model loads
    except (ValueError, ImportError, OSError) as exc:
        print(f"recontext bench: {exc}", file=sys.stderr)
        return 2
    print(summary["overall_table"])
    print(f"\nwall time {summary['wall_s']:.0f} s; report: {settings.out / 'report.md'}")
    return 0


def cli(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="recontext bench", description="ReContext benchmark (offline, seeded)"
    )
    add_arguments(parser)
    return main(parser.parse_args(argv))


def dump_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False, default=str))
