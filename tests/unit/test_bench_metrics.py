"""Metrics and report pieces on hand-made cases and records."""

from __future__ import annotations

from pathlib import Path

import pytest

from recontext_engine import Evidence
from recontext_engine.bench.measure import PeakMemory
from recontext_engine.bench.metrics import (
    evidence_precision,
    evidence_recall,
    exact_match,
    group_by,
    normalize_answer,
    substring_match,
    summarize,
)
from recontext_engine.bench.report import evaluate_targets, overall_table, pivot_table, write_report
from recontext_engine.bench.runner import _spread, _with_ratios
from recontext_engine.bench.tasks import BenchCase, GoldSpan


def ev(doc: int, start: int, end: int) -> Evidence:
    return Evidence("x" * (end - start), doc, start, end, 1.0, 1)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The Answer is: Lisbon!", "answer is lisbon"),
        ("  an  apple,   a pear  ", "apple pear"),
        ("4,755,360.", "4 755 360"),
        ("Theatre", "theatre"),
    ],
)
def test_normalize_answer(text: str, expected: str) -> None:
    assert normalize_answer(text) == expected


def test_substring_match_and_exact_match() -> None:
    assert substring_match("The city is Lisbon.", ["Lisbon"])
    assert substring_match("It is in lisbon, Portugal", ["Porto", "Lisbon"])
    assert not substring_match("The limit is 155 euros", ["55"])  # whole words only
    assert substring_match("The limit is 55 euros", ["55"])
    assert substring_match('Corresponding value: "af29789b-c442-5d5f"', ["af29789b-c442-5d5f"])
    assert not substring_match("af29789b-c442", ["af29789b-c442-5d5f"])
    assert not substring_match("anything", [""])
    assert exact_match("Lisbon.", ["lisbon"])
    assert exact_match("The Lisbon", ["Lisbon"])
    assert not exact_match("Lisbon, Portugal", ["Lisbon"])


def test_evidence_recall_counts_overlaps_per_gold_span() -> None:
    gold = [GoldSpan(0, 10, 20), GoldSpan(1, 0, 5)]
    assert evidence_recall([], gold) == 0.0
    assert evidence_recall([ev(0, 15, 30)], gold) == 0.5  # partial overlap counts
    assert evidence_recall([ev(0, 20, 30)], gold) == 0.0  # touching is not overlapping
    assert evidence_recall([ev(1, 10, 20)], gold) == 0.0  # other position
    assert evidence_recall([ev(0, 10, 20), ev(1, 4, 9)], gold) == 1.0
    assert evidence_recall([ev(1, 0, 5)], [GoldSpan(0, 0, 5)]) == 0.0  # other document
    assert evidence_recall([ev(0, 0, 5)], []) is None
    assert evidence_precision([ev(0, 10, 20), ev(0, 50, 60)], gold) == 0.5
    assert evidence_precision([], gold) is None


def _record(method: str, case_id: str, correct: bool, **extra) -> dict:
    base = {
        "case_id": case_id,
        "task": extra.pop("task", "needle"),
        "length": extra.pop("length", 1024),
        "depth": extra.pop("depth", 0.5),
        "hops": extra.pop("hops", 1),
        "layout": "text",
        "method": method,
        "kind": "vanilla" if method == "vanilla" else "recontext",
        "correct": correct,
        "exact": correct,
        "recall": None if method == "vanilla" else extra.pop("recall", 1.0),
        "time_s": extra.pop("time_s", 1.0),
        "memory_bytes": extra.pop("memory_bytes", 100 << 20),
        "evidence_tokens": 0 if method == "vanilla" else 40,
        "error": None,
    }
    base.update(extra)
    return base


def test_ratios_are_per_case_against_vanilla() -> None:
    records = [
        _record("vanilla", "a", True, time_s=2.0, memory_bytes=100 << 20),
        _record("recontext-r2", "a", True, time_s=3.0, memory_bytes=110 << 20),
    ]
    _with_ratios(records)
    assert records[0]["time_ratio"] == 1.0
    assert records[1]["time_ratio"] == pytest.approx(1.5)
    assert records[1]["memory_ratio"] == pytest.approx(1.1)
    tiny = [_record("vanilla", "b", True, memory_bytes=1000), _record("bm25", "b", True)]
    _with_ratios(tiny)
    assert tiny[1]["memory_ratio"] is None  # vanilla's peak too small to divide by


def test_summarize_and_group() -> None:
    records = [
        _record("vanilla", "a", True, time_ratio=1.0),
        _record("vanilla", "b", False, time_ratio=1.0),
        _record("recontext-r2", "a", True, recall=1.0, time_ratio=1.2),
        _record("recontext-r2", "b", True, recall=0.5, time_ratio=1.6),
        _record("recontext-r2", "c", False, recall=None, time_ratio=None, error="PromptTooLongError: x"),
    ]
    s = summarize([r for r in records if r["method"] == "recontext-r2"])
    assert s["n"] == 3 and s["accuracy"] == pytest.approx(2 / 3)
    assert s["recall"] == pytest.approx(0.75)  # None is left out, not counted as zero
    assert s["time_ratio"] == pytest.approx(1.4)
    assert s["errors"] == 1
    assert summarize([r for r in records if r["method"] == "vanilla"])["recall"] is None
    groups = group_by(records, "method", lambda r: r["case_id"] == "a")
    assert len(groups[("recontext-r2", False)]) == 2
    table = overall_table(records)
    assert "| recontext-r2 | 3 | 0.67 |" in table and "| vanilla | 2 | 0.50 |" in table
    pivot = pivot_table(records, "task", lambda recs: str(len(recs)))
    assert pivot.splitlines()[0] == "| method | needle |"


def test_targets_pass_miss_and_not_measured() -> None:
    records = []
    for i in range(4):
        records += [
            _record("vanilla", f"s{i}", i == 0, length=4096, time_s=10.0, memory_bytes=100 << 20),
            _record("bm25", f"s{i}", i < 2, recall=1.0, length=4096),
            _record(
                "recontext-r2", f"s{i}", i < 3, recall=1.0, length=4096, time_s=20.0, memory_bytes=105 << 20
            ),
            _record("oracle", f"s{i}", True, recall=1.0, length=4096),
        ]
        records += [
            _record("vanilla", f"h{i}", False, hops=2, task="multi_hop", length=4096),
            _record("bm25", f"h{i}", False, hops=2, task="multi_hop", recall=0.5, gold_hits=[True, False]),
            _record(
                "recontext-r2", f"h{i}", False, hops=2, task="multi_hop", recall=0.5, gold_hits=[True, False]
            ),
        ]
    for group in group_by(records, "case_id").values():
        _with_ratios(group)
    targets = {t.name: t for t in evaluate_targets(records)}
    assert targets["R=2 evidence recall, single-hop"].status == "PASS"
    two = targets["R=2 evidence recall, two-hop"]
    assert two.status == "MISS" and "hop 1 4/4, hop 2 0/4" in two.why
    assert targets["R=2 recall above BM25, two-hop"].status == "MISS"
    gain = targets["R=2 accuracy gain over vanilla"]
    assert gain.status == "PASS" and "+0.25" in gain.measured
    time = targets["R=2 time at 4K"]
    assert time.status == "MISS" and "2.00×" in time.measured and time.why
    assert targets["R=2 peak memory at 4K"].status == "PASS"
    assert targets["R=2 peak memory at 8K"].status == "N/A"
    assert evaluate_targets([_record("vanilla", "a", True)])[0].status == "N/A"


def test_attention_targets_compare_the_hybrid_with_recursive_bm25_per_task() -> None:
    records = []
    for i in range(2):
        records += [
            _record("recontext-r2", f"n{i}", True, task="needle", recall=1.0),
            _record("bm25-recursive-r2", f"n{i}", True, task="needle", recall=1.0),
            _record("recontext-r2", f"p{i}", True, task="paraphrase", recall=0.5),
            _record("bm25-recursive-r2", f"p{i}", False, task="paraphrase", recall=0.0),
            _record("recontext-attn-r2", f"h{i}", False, hops=2, task="multi_hop", recall=0.5,
                    gold_hits=[True, False]),
        ]  # fmt: skip
    targets = {t.name: t for t in evaluate_targets(records)}
    versus = targets["R=2 recall vs recursive BM25, per task"]
    assert (
        versus.status == "PASS"
        and "paraphrase +0.50" in versus.measured
        and "needle +0.00" in versus.measured
    )
    records.append(_record("bm25-recursive-r2", "n9", True, task="needle", recall=1.0))
    records.append(_record("recontext-r2", "n9", True, task="needle", recall=0.0))
    assert {t.name: t for t in evaluate_targets(records)}[versus.name].status == "MISS"
    attention = targets["attention-only R=2 two-hop recall"]
    assert attention.status == "MISS" and "hop 2 0/2" in attention.why


def test_write_report_outputs(tmp_path: Path) -> None:
    case = BenchCase(
        case_id="needle-1024-d0.5-text-0",
        task="needle",
        context="Filler here. The special magic number for a-b is: 1234567. More filler.",
        question="What is the special magic number for a-b?",
        answers=["1234567"],
        gold=[GoldSpan(0, 13, 58)],
        depth=0.5,
        length=1024,
        target_tokens=1024,
        context_tokens=20,
        hops=1,
    )
    records = [
        _record("vanilla", case.case_id, False, depth=0.0),
        _record("recontext-r2", case.case_id, True, depth=0.0),
        _record("vanilla", "x", True, depth=1.0),
        _record("recontext-r2", "x", True, depth=1.0),
    ]
    for group in group_by(records, "case_id").values():
        _with_ratios(group)
    meta = {
        "model": "m",
        "device": "cpu",
        "methods": ["vanilla", "recontext-r2"],
        "wall_s": 1.0,
        "settings": {},
    }
    summary = write_report(tmp_path, [case], records, meta)
    report = (tmp_path / "report.md").read_text()
    assert "## Targets" in report and "| recontext-r2 | 2 | 1.00 |" in report
    assert (tmp_path / "accuracy_by_depth.png").stat().st_size > 1000
    assert (tmp_path / "recall_by_depth.png").stat().st_size > 1000
    import json

    saved = json.loads((tmp_path / "cases.json").read_text())
    assert len(saved["records"]) == 4 and saved["cases"][0]["gold"][0]["char_start"] == 13
    assert BenchCase.from_dict(saved["cases"][0]) == case
    assert summary["overall"]["recontext-r2"]["accuracy"] == 1.0


def test_spread_keeps_the_grid_represented() -> None:
    items = [f"c{i}" for i in range(20)]
    picked = _spread(items, 5)  # type: ignore[arg-type]
    assert picked == ["c0", "c4", "c8", "c12", "c16"]
    assert _spread(items, None) == items  # type: ignore[arg-type]


def test_peak_memory_sees_an_allocation() -> None:
    with PeakMemory(interval=0.001) as probe:
        block = bytearray(64 << 20)
        block[::4096] = b"x" * len(block[::4096])  # touch every page so it is resident
        import time

        time.sleep(0.05)
        del block
    assert probe.peak >= 48 << 20
