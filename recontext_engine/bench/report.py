"""Benchmark outputs: ``report.md`` (tables and targets), ``cases.json`` and the depth plots."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .metrics import group_by, mean, median, summarize
from .tasks import BenchCase

R2 = "recontext-r2"
_MIB = 1 << 20


@dataclass
class Target:
    """A figure the issue asks for, measured on this run."""

    name: str
    goal: str
    measured: str
    status: str  # "PASS" | "MISS" | "N/A"
    why: str = ""


def _fmt(value: float | None, digits: int = 2) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def _ratio(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}×"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _methods(records: Sequence[dict[str, Any]]) -> list[str]:
    return list(dict.fromkeys(r["method"] for r in records))


def overall_table(records: Sequence[dict[str, Any]]) -> str:
    rows = []
    for method in _methods(records):
        s = summarize([r for r in records if r["method"] == method])
        rows.append(
            [
                method,
                str(s["n"]),
                _fmt(s["accuracy"]),
                _fmt(s["exact_match"]),
                _fmt(s["recall"]),
                _ratio(s["time_ratio"]),
                _ratio(s["memory_ratio"]),
                _fmt(s["evidence_tokens"], 0),
                _fmt(s["time_s"], 1),
                str(s["errors"]),
            ]
        )
    header = [
        "method",
        "n",
        "accuracy",
        "EM",
        "recall",
        "time ×",
        "memory ×",
        "evid. tokens",
        "time s",
        "errors",
    ]
    return _table(header, rows)


def pivot_table(
    records: Sequence[dict[str, Any]],
    column: str | Callable[[dict[str, Any]], Any],
    cell: Callable[[list[dict[str, Any]]], str],
    label: Callable[[Any], str] = str,
) -> str:
    """Methods as rows, values of ``column`` as columns, ``cell(records)`` in each cell."""
    groups = group_by(records, "method", column)
    columns = list(dict.fromkeys(key[1] for key in groups))
    with contextlib.suppress(TypeError):
        columns.sort()
    rows = [
        [method] + [cell(groups.get((method, c), [])) if groups.get((method, c)) else "—" for c in columns]
        for method in _methods(records)
    ]
    return _table(["method"] + [label(c) for c in columns], rows)


def _acc_recall(records: list[dict[str, Any]]) -> str:
    s = summarize(records)
    return f"{_fmt(s['accuracy'])} / {_fmt(s['recall'])}"


def _acc_recall_time(records: list[dict[str, Any]]) -> str:
    s = summarize(records)
    return f"{_fmt(s['accuracy'])} / {_fmt(s['recall'])} / {_ratio(s['time_ratio'])}"


def _depth_bin(record: dict[str, Any]) -> float | None:
    depth = record.get("depth")
    return None if depth is None else round(round(depth * 4) / 4, 2)


def _length_label(length: Any) -> str:
    return f"{length // 1024}K" if isinstance(length, int) and length % 1024 == 0 else str(length)


# -- targets ------------------------------------------------------------------------------------


def _by(records: Sequence[dict[str, Any]], method: str, **where: Any) -> list[dict[str, Any]]:
    return [r for r in records if r["method"] == method and all(r.get(k) == v for k, v in where.items())]


def _missed(records: list[dict[str, Any]]) -> str:
    missed = [r for r in records if r.get("recall") is not None and r["recall"] < 1.0]
    tasks: dict[str, int] = {}
    for r in missed:
        tasks[r["task"]] = tasks.get(r["task"], 0) + 1
    detail = ", ".join(f"{t} {n}" for t, n in tasks.items())
    return f"{len(missed)} of {len(records)} cases lacked gold evidence ({detail})" if missed else ""


def _hop_hits(records: Sequence[dict[str, Any]], method: str, hops: int = 2) -> str:
    """How often each hop of the chain (first = the one naming the question's entity) was replayed."""
    hits = [r["gold_hits"] for r in _by(records, method, hops=hops) if r.get("gold_hits")]
    if not hits:
        return "—"
    return ", ".join(f"hop {i + 1} {sum(h[i] for h in hits)}/{len(hits)}" for i in range(hops))


def evaluate_targets(records: Sequence[dict[str, Any]]) -> list[Target]:
    """The issue's targets for ReContext R=2 on the embedded model, PASS/MISS with a reason."""
    targets: list[Target] = []
    have = set(_methods(records))
    if R2 not in have:
        return [Target("all targets", "ReContext R=2 in the run", "not run", "N/A", f"add {R2} to --methods")]

    def recall_target(name: str, hops: int, goal: float) -> None:
        recs = [r for r in _by(records, R2, hops=hops) if r.get("recall") is not None]
        value = mean(r["recall"] for r in recs)
        if value is None:
            targets.append(
                Target(name, f"≥ {goal:.2f}", "—", "N/A", f"no {hops}-hop cases with gold in this run")
            )
            return
        bm25 = mean(r["recall"] for r in _by(records, "bm25", hops=hops))
        ok = value >= goal
        why = "" if ok else f"{_missed(recs)}; BM25 recall on the same cases: {_fmt(bm25)}."
        if not ok and hops > 1:
            why += f" Hops found: {_hop_hits(records, R2, hops)}."
        targets.append(
            Target(name, f"≥ {goal:.2f}", f"{value:.2f} (n={len(recs)})", "PASS" if ok else "MISS", why)
        )

    recall_target("R=2 evidence recall, single-hop", 1, 0.95)
    recall_target("R=2 evidence recall, two-hop", 2, 0.85)

    two = mean(r["recall"] for r in _by(records, R2, hops=2))
    bm25_two = mean(r["recall"] for r in _by(records, "bm25", hops=2))
    if two is None or bm25_two is None:
        targets.append(
            Target("R=2 recall above BM25, two-hop", "> BM25", "—", "N/A", "needs bm25 and two-hop cases")
        )
    else:
        ok = two > bm25_two
        why = (
            ""
            if ok
            else f"hops found, ReContext R=2: {_hop_hits(records, R2)}; BM25: {_hop_hits(records, 'bm25')}."
        )
        targets.append(
            Target(
                "R=2 recall above BM25, two-hop",
                "> BM25",
                f"{two:.2f} vs {bm25_two:.2f}",
                "PASS" if ok else "MISS",
                why,
            )
        )

    acc = mean(float(r["correct"]) for r in _by(records, R2))
    van = mean(float(r["correct"]) for r in _by(records, "vanilla"))
    oracle = mean(float(r["correct"]) for r in _by(records, "oracle"))
    if acc is not None and van is not None:
        ok = acc - van >= 0.10
        why = ""
        if not ok:
            parts = []
            if oracle is not None:
                parts.append(
                    f"oracle replay of the gold sentences reaches {oracle:.2f} ({oracle - van:+.2f})"
                )
                if oracle - van < 0.10:
                    parts.append("so the model's use of even perfect evidence limits the gain at this size")
            hurt = sum(
                1
                for r in _by(records, R2)
                if not r["correct"]
                and any(v["correct"] for v in _by(records, "vanilla", case_id=r["case_id"]))
            )
            parts.append(f"replay turned {hurt} correct vanilla answers wrong")
            recall = mean(r["recall"] for r in _by(records, R2))
            parts.append(f"R=2 recall is {_fmt(recall)}")
            why = "; ".join(parts) + "."
        targets.append(
            Target(
                "R=2 accuracy gain over vanilla",
                "≥ +0.10",
                f"{acc:.2f} vs {van:.2f} ({acc - van:+.2f})",
                "PASS" if ok else "MISS",
                why,
            )
        )

    at4k = [r for r in _by(records, R2, length=4096) if r.get("time_ratio") is not None]
    ratio = median(r["time_ratio"] for r in at4k)
    if ratio is None:
        targets.append(
            Target("R=2 time at 4K", "≤ 1.25×", "—", "N/A", "no 4K cases in this run (full mode has them)")
        )
    else:
        ok = ratio <= 1.25
        why = ""
        if not ok:
            select = median(r.get("timings", {}).get("select") for r in at4k)
            prefill = median(r.get("timings", {}).get("prefill") for r in at4k)
            generate = median(r.get("timings", {}).get("generate") for r in at4k)
            base = median(r.get("timings", {}).get("generate") for r in _by(records, "vanilla", length=4096))
            why = (
                f"selection (the read passes) took a median {_fmt(select, 1)} s and generation "
                f"{_fmt(generate, 1)} s (vanilla {_fmt(base, 1)} s) against a {_fmt(prefill, 1)} s prefill."
            )
        targets.append(
            Target(
                "R=2 time at 4K", "≤ 1.25×", f"{ratio:.2f}× (n={len(at4k)})", "PASS" if ok else "MISS", why
            )
        )

    targets += attention_targets(records)
    for length in (2048, 4096, 8192):
        recs = [r for r in _by(records, R2, length=length) if r.get("memory_ratio") is not None]
        ratio = median(r["memory_ratio"] for r in recs)
        name = f"R=2 peak memory at {_length_label(length)}"
        if ratio is None:
            targets.append(
                Target(name, "≤ 1.10×", "—", "N/A", f"no {_length_label(length)} cases with a memory figure")
            )
            continue
        ok = ratio <= 1.10
        why = ""
        if not ok:
            extra = median(r["memory_bytes"] for r in recs)
            base = median(r["memory_bytes"] for r in _by(records, "vanilla", length=length))
            why = (
                f"the call's peak grew by a median {_fmt((extra or 0) / _MIB, 0)} MiB against vanilla's "
                f"{_fmt((base or 0) / _MIB, 0)} MiB (read-pass activations, attention rows, longer prompt)."
            )
        targets.append(
            Target(name, "≤ 1.10×", f"{ratio:.2f}× (n={len(recs)})", "PASS" if ok else "MISS", why)
        )
    return targets


def attention_targets(records: Sequence[dict[str, Any]]) -> list[Target]:
    """What the heads add: the hybrid against recursive BM25 per task, and attention alone on two hops."""
    targets = []
    lexical, attention = "bm25-recursive-r2", "recontext-attn-r2"
    if lexical in _methods(records):
        gaps = {}
        for task in dict.fromkeys(r["task"] for r in records):
            mine = mean(r["recall"] for r in _by(records, R2, task=task) if r.get("recall") is not None)
            theirs = mean(
                r["recall"] for r in _by(records, lexical, task=task) if r.get("recall") is not None
            )
            if mine is not None and theirs is not None:
                gaps[task] = mine - theirs
        if gaps:
            worst = min(gaps, key=gaps.__getitem__)
            best = max(gaps, key=gaps.__getitem__)
            ok = gaps[worst] >= 0 and gaps[best] >= 0.05
            detail = ", ".join(f"{t} {g:+.2f}" for t, g in gaps.items())
            targets.append(
                Target("R=2 recall vs recursive BM25, per task", "≥ 0 everywhere, +0.05 somewhere", detail,
                       "PASS" if ok else "MISS")
            )  # fmt: skip
    two = mean(r["recall"] for r in _by(records, attention, hops=2) if r.get("recall") is not None)
    if two is not None:
        ok = two >= 0.80
        why = "" if ok else f"{_hop_hits(records, attention, 2)}."
        targets.append(
            Target("attention-only R=2 two-hop recall", "≥ 0.80", f"{two:.2f}", "PASS" if ok else "MISS", why)
        )
    return targets


def is_real(record: dict[str, Any]) -> bool:
    """A record of a real-document task (question sets over documents, or NIAH)."""
    return str(record.get("task", "")).startswith(("doc-", "niah-"))


def _family(record: dict[str, Any]) -> str:
    return str(
        record.get("family") or ("niah" if str(record["task"]).startswith("niah-") else record["task"])
    )


def _accuracy(records: Sequence[dict[str, Any]]) -> float | None:
    return mean(float(r["correct"]) for r in records)


def real_targets(records: Sequence[dict[str, Any]]) -> list[Target]:
    """The real-document targets for ReContext R=2: recall, accuracy against vanilla per family
    and overall, NIAH recall per cell and accuracy per needle, recall on paraphrases."""
    real = [r for r in records if is_real(r)]
    mine, base = _by(real, R2), _by(real, "vanilla")
    if not mine or not base:
        return []
    targets = []

    def add(name: str, goal: str, measured: str, ok: bool, why: str = "") -> None:
        targets.append(Target(name, goal, measured, "PASS" if ok else "MISS", "" if ok else why))

    recall = mean(r.get("recall") for r in mine)
    if recall is not None:
        add("real documents: R=2 evidence recall", "≥ 0.90", _fmt(recall), recall >= 0.90, _missed(mine))
    gaps = {}
    for family in dict.fromkeys(map(_family, mine)):
        ours = _accuracy([r for r in mine if _family(r) == family])
        theirs = _accuracy([r for r in base if _family(r) == family])
        if ours is not None and theirs is not None:
            gaps[family] = (ours, theirs)
    detail = ", ".join(f"{f} {a:.2f} vs {b:.2f}" for f, (a, b) in gaps.items())
    worse = [f for f, (a, b) in gaps.items() if a < b]
    add("real documents: R=2 accuracy ≥ vanilla per family", "every family", detail, not worse,
        f"below vanilla on {', '.join(worse)}")  # fmt: skip
    ours, theirs = _accuracy(mine), _accuracy(base)
    if ours is not None and theirs is not None:
        add("real documents: R=2 accuracy gain over vanilla", "≥ +0.10",
            f"{ours:.2f} vs {theirs:.2f} ({ours - theirs:+.2f})", ours - theirs >= 0.10)  # fmt: skip
    niah = [r for r in mine if r.get("needle")]
    cells = group_by([r for r in niah if r.get("recall") is not None], "length", "depth")
    if cells:
        worst_cell, worst = min(
            ((key, mean(r["recall"] for r in recs) or 0.0) for key, recs in cells.items()),
            key=lambda kv: kv[1],
        )
        add("NIAH: R=2 evidence recall in every cell", "≥ 0.95", f"lowest {worst:.2f} (n={len(cells)} cells)",
            worst >= 0.95, f"at {_length_label(worst_cell[0])}, depth {worst_cell[1]:g}")  # fmt: skip
        needles = {}
        for needle in dict.fromkeys(r["needle"] for r in niah):
            a = _accuracy([r for r in niah if r["needle"] == needle])
            b = _accuracy([r for r in base if r.get("needle") == needle])
            needles[needle] = (a or 0.0, b or 0.0)
        worse = [n for n, (a, b) in needles.items() if a < b]
        add("NIAH: R=2 accuracy ≥ vanilla per needle", "every needle",
            ", ".join(f"{n} {a:.2f} vs {b:.2f}" for n, (a, b) in needles.items()), not worse,
            f"below vanilla on {', '.join(worse)}")  # fmt: skip
    para = [r for r in mine if r.get("paraphrase") and r.get("recall") is not None]
    if para:
        value = mean(r["recall"] for r in para) or 0.0
        add("paraphrase: R=2 evidence recall", "≥ 0.80", f"{value:.2f} (n={len(para)})", value >= 0.80,
            _missed(para))  # fmt: skip
    return targets


def _targets_table(targets: Sequence[Target]) -> str:
    return _table(
        ["target", "goal", "measured", "status", "why (if missed)"],
        [[t.name, t.goal, t.measured, t.status, t.why] for t in targets],
    )


def _real_section(records: Sequence[dict[str, Any]]) -> list[str]:
    """The real-document part of the report: targets, per family and per question kind, NIAH."""
    real = [r for r in records if is_real(r)]
    if not real:
        return []
    targets = real_targets(records)
    lines = [
        "## Real documents (text nobody on the team wrote)",
        "",
        "Question sets over real documents kept as they are (`--tasks documents`) and Needle In A "
        "Haystack the public harness's way (`--tasks niah`), scored by substring.",
        "",
    ]
    if targets:
        lines += [_targets_table(targets), ""]
    lines += ["### Per family (accuracy / recall)", "", pivot_table(real, _family, _acc_recall), ""]
    kinds = [r for r in real if r.get("question_kind")]
    if kinds:
        lines += [
            "### Per question kind (accuracy / recall)",
            "",
            pivot_table(kinds, "question_kind", _acc_recall),
            "",
        ]
    niah = [r for r in real if r.get("needle")]
    if niah:
        lines += [
            "### NIAH per needle (accuracy / recall)",
            "",
            pivot_table(niah, "needle", _acc_recall),
            "",
            "![NIAH heatmap](niah_heatmap.png)",
            "",
        ]
    return lines


# -- plots --------------------------------------------------------------------------------------


_BASELINE_COLORS = {"vanilla": "#333333", "oracle": "#8c8c8c"}
_PALETTE = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
    "#e377c2", "#17becf", "#bcbd22", "#393b79", "#637939", "#843c39",
)  # fmt: skip


def _registry_index(method: str) -> int:
    from .methods import METHODS

    names = list(METHODS)
    return names.index(method) if method in names else len(names)


def _color(method: str) -> str:
    """The same colour for a method in every plot (baselines grey, the rest by registry order)."""
    from .methods import METHODS

    if method in _BASELINE_COLORS:
        return _BASELINE_COLORS[method]
    others = [m for m in METHODS if m not in _BASELINE_COLORS]
    return _PALETTE[others.index(method) % len(_PALETTE)] if method in others else "black"


def plot_by_depth(
    records: Sequence[dict[str, Any]], field: str, path: Path, title: str, ylabel: str = ""
) -> bool:
    """One line per method: mean ``field`` by gold depth (binned to quarters). False if nothing to plot.

    Methods are drawn slightly apart along x so that equal values stay visible.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(7, 4.2), dpi=110)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot(1, 1, 1)
    drawn = False
    methods = _methods(records)
    markers = "osD^v<>ph*"
    for index, method in enumerate(methods):
        groups = group_by([r for r in records if r["method"] == method], _depth_bin)
        means = sorted(
            (depth, mean(float(r[field]) if r.get(field) is not None else None for r in recs))
            for (depth,), recs in groups.items()
            if depth is not None
        )
        points = [(d, v) for d, v in means if v is not None]
        if not points:
            continue
        style = "--" if method in ("vanilla", "oracle") else "-"
        dodge = 0.012 * (index - (len(methods) - 1) / 2)
        xs = [d + dodge for d, _ in points]
        axes.plot(
            xs,
            [v for _, v in points],
            style,
            color=_color(method),
            marker=markers[_registry_index(method) % len(markers)],
            label=method,
        )
        drawn = True
    if not drawn:
        return False
    axes.set_xlabel("gold depth in the context (0 = start, 1 = end)")
    axes.set_ylabel(ylabel or field)
    axes.set_ylim(-0.03, 1.03)
    axes.set_xticks([0, 0.25, 0.5, 0.75, 1.0])
    axes.set_title(title)
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8, loc="best")
    figure.tight_layout()
    figure.savefig(path)
    return True


# -- the report ---------------------------------------------------------------------------------


def _timing_table(records: Sequence[dict[str, Any]]) -> str:
    rows = []
    for method in _methods(records):
        recs = [r for r in records if r["method"] == method and r.get("timings")]
        if not recs:
            continue
        row = [method]
        for stage in ("prefill", "select", "generate"):
            row.append(_fmt(median(r["timings"].get(stage) for r in recs), 2))
        row.append(_fmt(median(r["time_s"] for r in recs), 2))
        row.append(_fmt(median(r["memory_bytes"] / _MIB for r in recs), 0))
        rows.append(row)
    return _table(["method", "prefill s", "select s", "generate s", "call s", "peak MiB"], rows)


def _machine_line(machine: dict[str, Any]) -> str:
    if not machine:
        return ""
    return (
        f"Machine: {machine.get('cpus')} CPUs, {machine.get('torch_threads')} torch threads; 1-minute load "
        f"average {machine.get('load_avg_1m')} at the start, {machine.get('load_avg_1m_after')} at the end. "
        "Time ratios compare calls run back to back on the same case, but other work on the machine "
        "still adds noise to them."
    )


def render_report(cases: Sequence[BenchCase], records: Sequence[dict[str, Any]], meta: dict[str, Any]) -> str:
    settings = meta.get("settings", {})
    generated = [r for r in records if not is_real(r)]
    targets = evaluate_targets(generated) if generated else []
    lines = [
        "# ReContext benchmark",
        "",
        f"Model `{meta.get('model')}` on `{meta.get('device')}` (window {meta.get('context_window')} tokens, "
        f"{meta.get('heads')} retrieval heads). {len(cases)} cases × {len(meta.get('methods', []))} methods, "
        f"{'quick' if settings.get('quick') else 'full'} mode, seed {settings.get('seed')}, evidence budget "
        f"{settings.get('budget')} sentences, wall time {meta.get('wall_s', 0):.0f} s "
        f"({meta.get('created')}).",
        "",
        _machine_line(meta.get("machine") or {}),
        "",
        *(
            [f"**Interrupted**: {len(cases)} of {meta.get('planned_cases')} planned cases finished.", ""]
            if meta.get("interrupted")
            else []
        ),
        "How to read: **accuracy** = normalized answer contains an alias (HELMET substring match); **EM** = "
        "normalized exact match; **recall** = share of gold sentences overlapped by the replayed evidence; "
        "**time ×** and **memory ×** = median ratio to vanilla on the same case (end-to-end wall time; peak "
        "resident-memory growth during the call, i.e. KV cache, activations and retrieval structures, "
        "weights excluded); **evid. tokens** = mean replayed tokens; time s = median seconds per call.",
        "",
        "## Overall",
        "",
        overall_table(records),
        "",
        *(
            [
                "## Targets on generated tasks (ReContext R=2, embedded model)",
                "",
                _targets_table(targets),
                "",
            ]
            if targets
            else []
        ),
        *_real_section(records),
        "## Per task (accuracy / recall)",
        "",
        pivot_table(records, "task", _acc_recall),
        "",
        "## Per length (accuracy / recall / time ×)",
        "",
        pivot_table(records, "length", _acc_recall_time, _length_label),
        "",
        "## Per gold depth (accuracy / recall)",
        "",
        pivot_table(records, _depth_bin, _acc_recall, lambda d: "—" if d is None else f"{d:g}"),
        "",
        "![accuracy by depth](accuracy_by_depth.png)",
        "",
        "## Per layout (accuracy / recall)",
        "",
        pivot_table(records, "layout", _acc_recall),
        "",
        "## Time and memory per stage (medians)",
        "",
        _timing_table(records),
        "",
    ]
    configs = meta.get("recontext_config") or {}
    if configs:
        lines += ["## ReContext settings", ""]
        keys = list(next(iter(configs.values())).keys())
        lines += [
            _table(["method", *keys], [[m, *(str(c[k]) for k in keys)] for m, c in configs.items()]),
            "",
        ]
    errors = [r for r in records if r.get("error")]
    if errors:
        lines += (
            ["## Errors", ""]
            + [f"- `{r['case_id']}` {r['method']}: {r['error']}" for r in errors[:20]]
            + [""]
        )
    return "\n".join(lines)


def write_report(
    out: Path, cases: Sequence[BenchCase], records: Sequence[dict[str, Any]], meta: dict[str, Any]
) -> dict[str, Any]:
    """Write ``report.md``, ``cases.json``, ``accuracy_by_depth.png`` and ``recall_by_depth.png``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    n = len(cases)
    plot_by_depth(
        records,
        "correct",
        out / "accuracy_by_depth.png",
        f"Answer accuracy by gold depth ({n} cases)",
        "accuracy",
    )
    replays = [r for r in records if r["kind"] != "vanilla"]
    plot_by_depth(
        replays, "recall", out / "recall_by_depth.png", f"Evidence recall by gold depth ({n} cases)", "recall"
    )
    if any(r.get("needle") for r in records):
        from .niah import plot_heatmap

        plot_heatmap(records, out / "niah_heatmap.png", methods=["vanilla", R2])
    report = render_report(cases, records, meta)
    (out / "report.md").write_text(report)
    payload = {"meta": meta, "cases": [c.to_dict() for c in cases], "records": list(records)}
    (out / "cases.json").write_text(json.dumps(payload, indent=1, ensure_ascii=False, default=str))
    overall = {m: summarize([r for r in records if r["method"] == m]) for m in _methods(records)}
    return {
        "overall": overall,
        "overall_table": overall_table(records),
        "targets": [
            asdict(t)
            for t in evaluate_targets([r for r in records if not is_real(r)]) + real_targets(records)
        ],
        "wall_s": meta.get("wall_s", 0.0),
        "out": str(out),
    }
