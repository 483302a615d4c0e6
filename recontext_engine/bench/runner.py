"""The benchmark run loop: cases, one record per (case, method) call, the report.

For every case, vanilla runs first and then each other method, back to back, so that time and
memory ratios compare calls on the same case under the same machine load.

What is measured per call:

- ``time_s``: wall-clock seconds of the whole call, retrieval included (BM25 indexing, embedding
  the sentences, ReContext's read passes), model loading excluded. ``time_ratio`` divides it by
  the vanilla call's on the same case; tables report the median.
- ``memory_bytes``: peak working memory of the call (see :mod:`.measure`). ``memory_ratio``
  divides it by vanilla's (None when vanilla's peak is under 1 MiB, too small to divide by).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

from .measure import PeakMemory, engine_device, machine_state, steady_allocator
from .methods import MethodContext, get_method, recontext_config, variant_of
from .metrics import answer_correct, evidence_precision, evidence_recall, exact_match, overlaps
from .settings import REAL_TASKS, BenchSettings
from .tasks import BenchCase, generate_cases, longest_context

_MIN_MEMORY = 1 << 20
_MAX_ANSWER_TOKENS = 64


def _spread(cases: list[BenchCase], limit: int | None) -> list[BenchCase]:
    """At most ``limit`` cases, picked evenly along the grid so that every part stays represented."""
    if limit is None or len(cases) <= limit:
        return cases
    step = len(cases) / limit
    return [cases[math.floor(i * step)] for i in range(limit)]


def build_cases(settings: BenchSettings, engine: Any) -> list[BenchCase]:
    """The cases of the run: the generated grid and the real-document tasks (or the HELMET rows),
    clamped to the model window, capped at ``max_cases``."""
    if settings.helmet:
        from .helmet import load_helmet

        cases: list[BenchCase] = []
        for path in settings.helmet:
            cases += load_helmet(path, count_tokens=engine.count_tokens)
        return _spread(cases, settings.max_cases)
    answer_tokens = max(settings.max_new_tokens, _MAX_ANSWER_TOKENS)
    longest = longest_context(engine.context_window, settings.budget, answer_tokens)
    per_task = []
    for task in settings.tasks:
        if task in REAL_TASKS:
            per_task.append(real_cases(task, settings, engine, longest))
            continue
        per_task.append(
            generate_cases(
                [task],
                settings.lengths,
                settings.depths,
                count_tokens=engine.count_tokens,
                layouts=settings.layouts,  # type: ignore[arg-type]
                seed=settings.seed,
                max_tokens=longest,
                per_cell=settings.per_cell,
            )
        )
    return _shares(per_task, settings.max_cases)


def _shares(per_task: list[list[BenchCase]], limit: int | None) -> list[BenchCase]:
    """At most ``limit`` cases, an equal share of each task's (86 real-document questions must not
    crowd out 6 NIAH needles), each share spread along its task's grid."""
    if limit is None:
        return [case for cases in per_task for case in cases]
    share, extra = divmod(limit, len(per_task))
    picked = []
    for index, cases in enumerate(per_task):
        count = share + (1 if index < extra else 0)
        picked += _spread(cases, count) if count else []
    return picked


def real_cases(task: str, settings: BenchSettings, engine: Any, longest: int) -> list[BenchCase]:
    """Cases over text nobody on the team wrote: question sets over real documents, or NIAH."""
    if task == "documents":
        from .documents import document_cases

        lengths = sorted({min(n, longest) for n in settings.lengths})
        return [c for n in lengths for c in document_cases(engine.count_tokens, max_tokens=n)]
    from .niah import BUFFER, niah_cases

    tokenizer = engine.tokenizer
    return niah_cases(
        lambda text: list(tokenizer(text, add_special_tokens=False)["input_ids"]),
        tokenizer.decode,
        # the harness's length is the whole prompt's: its 200-token buffer holds the rest
        sorted({min(n, longest + BUFFER) for n in settings.lengths}),
        [round(d * 100) for d in settings.depths],
    )


def _evidence_dicts(evidence: Sequence[Any]) -> list[dict[str, Any]]:
    return [
        {
            "doc_index": e.doc_index,
            "char_start": e.char_start,
            "char_end": e.char_end,
            "round": e.round,
            "heading": e.heading,
            "score": round(float(e.score), 6),
        }
        for e in evidence
    ]


def _case_labels(case: BenchCase) -> dict[str, Any]:
    """The labels the report groups real-document cases by: family, question kind, needle."""
    meta = case.meta
    labels = {
        "family": meta.get("family"),
        "question_kind": meta.get("kind"),
        "needle": meta.get("needle"),
        # no content word shared by the question and its evidence: only attention can find it
        "paraphrase": bool(meta.get("paraphrase")) or meta.get("kind") == "paraphrase" or None,
    }
    return {key: value for key, value in labels.items() if value is not None}


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
        **_case_labels(case),
    }
    if getattr(ctx.engine, "context_cache", None) is not None:
        # every call pays its own prefill, as one question per context would (costs stay comparable)
        ctx.engine.context_cache.clear()
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
        correct=answer_correct(result.text, case.answers, case.meta.get("match", "any")),
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
    if "embedding" in methods or any(variant_of(m) == "recontext-semantic" for m in methods):
        ctx.embedder.encode(["warm-up"])


def _answer_budget(settings: BenchSettings, case: BenchCase, engine: Any) -> int:
    """Room for the answer even when the model first restates the question (small models do)."""
    answer = int(case.meta.get("answer_tokens") or max(engine.count_tokens(" " + a) for a in case.answers))
    echo = engine.count_tokens(case.question)
    return max(settings.max_new_tokens, min(_MAX_ANSWER_TOKENS, answer + echo + 4))


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
    device = engine_device(engine)
    base = engine.default_config.with_options(max_new_tokens=settings.max_new_tokens)
    ctx = MethodContext(engine, base, settings.budget, settings.recontext_options())
    cases = build_cases(settings, engine)
    _warm_up(ctx, methods)
    machine_before = machine_state()
    records: list[dict[str, Any]] = []
    done: list[BenchCase] = []
    interrupted = False
    bar = tqdm(total=len(cases) * len(methods), desc="bench", unit="call", disable=not settings.progress)
    try:
        for case in cases:
            ctx.config = base.with_options(
                max_new_tokens=_answer_budget(settings, case, engine),
                # NIAH asks in the harness's shape: its system message, then the context and question
                system_prompt=case.meta.get("system_prompt", base.system_prompt),
            )
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
        "machine": {**machine_before, "load_avg_1m_after": machine_state()["load_avg_1m"]},
        "planned_cases": len(cases),
    }
    return write_report(settings.out, done, records, meta)


def _method_config(ctx: MethodContext, name: str) -> dict[str, Any]:
    method = get_method(name)
    cfg = recontext_config(ctx, method.rounds, variant_of(name))
    return {
        "rounds": cfg.rounds,
        "top_k": cfg.top_k,
        "max_evidence": cfg.max_evidence,
        "evidence_order": cfg.evidence_order,
        "selector": cfg.selector.describe(),
    }
