"""A tiny end-to-end benchmark run on the embedded model, and the command-line settings."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from recontext_engine import AttentionSignal, ReplayConfig
from recontext_engine.bench.cli import add_arguments, settings_from_args
from recontext_engine.bench.methods import (
    FULL_METHODS,
    METHODS,
    QUICK_METHODS,
    MethodContext,
    recontext_config,
)
from recontext_engine.bench.runner import run_bench
from recontext_engine.bench.settings import BenchSettings
from recontext_engine.bench.tasks import BenchCase


def _parse(*argv: str) -> BenchSettings:
    return settings_from_args(add_arguments(argparse.ArgumentParser()).parse_args(list(argv)))


def test_command_line_settings() -> None:
    quick = _parse("--quick", "--out", "/tmp/x")
    assert quick.quick and quick.out == Path("/tmp/x")
    assert quick.methods == QUICK_METHODS
    assert quick.lengths == (1024,) and quick.depths == (0.0, 0.25, 0.5, 0.75, 1.0)
    assert quick.max_new_tokens == 16 and quick.recontext_options() == {} and not quick.steady_memory
    assert _parse("--quick", "--steady-memory").steady_memory
    full = _parse("--lengths", "1k,4096", "--methods", "vanilla,recontext-r3", "--unit", "token")
    assert full.lengths == (1024, 4096) and full.methods == ("vanilla", "recontext-r3")
    assert full.recontext_options() == {"unit": "token"} and full.steady_memory
    tuned = _parse("--null-calibration", "--top-k", "16", "--depths", "0,1", "--helmet", "a.jsonl")
    assert tuned.recontext_options() == {"top_k": 16, "null_calibration": True}
    assert tuned.depths == (0.0, 1.0) and tuned.helmet == ("a.jsonl",)
    assert set(FULL_METHODS) <= set(METHODS)


def test_each_round_gets_its_share_of_the_evidence_budget() -> None:
    ctx = MethodContext(engine=None, config=ReplayConfig(), budget=8)
    configs = [recontext_config(ctx, rounds) for rounds in (1, 2, 3)]
    assert [c.top_k for c in configs] == [8, 4, 3] and {c.max_evidence for c in configs} == {8}
    assert recontext_config(ctx, 2, "recontext-paper").selector == AttentionSignal(unit="token")
    tuned = MethodContext(engine=None, config=ReplayConfig(), budget=8, recontext_options={"top_k": 16})
    assert recontext_config(tuned, 2).top_k == 16


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--tasks", "needle,nope"], "unknown task"),
        (["--methods", "vanilla,magic"], "unknown method"),
        (["--depths", "0.5,2"], "depths"),
        (["--layouts", "pdf"], "layouts"),
        (["--threads", "0"], "at least 1"),
        (["--helmet", "/nonexistent.jsonl"], "not found"),
    ],
)
def test_bad_settings_fail_before_loading_a_model(argv: list[str], message: str, capsys) -> None:
    from recontext_engine.bench.cli import cli

    assert cli(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("recontext bench: ") and message in err and len(err.strip().splitlines()) == 1
    assert {"recontext-r2", "recontext-paper-r2"} <= set(FULL_METHODS)


@pytest.mark.model
def test_tiny_bench_run_writes_the_report(engine, tmp_path: Path) -> None:
    settings = BenchSettings(
        out=tmp_path,
        tasks=("needle", "multi_hop"),
        lengths=(300,),
        depths=(0.5,),
        layouts=("text", "docs"),
        methods=("vanilla", "bm25", "recontext-r2", "oracle"),
        max_new_tokens=8,
        progress=False,
    )
    summary = run_bench(settings, engine)

    report = (tmp_path / "report.md").read_text()
    for heading in ("## Overall", "## Targets", "## Per task", "## Per length", "## Per gold depth"):
        assert heading in report
    for method in settings.methods:
        assert f"| {method} |" in report
    plot = tmp_path / "accuracy_by_depth.png"
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and plot.stat().st_size > 5000

    saved = json.loads((tmp_path / "cases.json").read_text())
    cases = {c["case_id"]: BenchCase.from_dict(c) for c in saved["cases"]}
    records = saved["records"]
    assert len(cases) == 2 and len(records) == 8
    assert saved["meta"]["recontext_config"]["recontext-r2"]["max_evidence"] == settings.budget
    for record in records:
        assert record["error"] is None, record["error"]
        assert isinstance(record["prediction"], str) and record["time_s"] > 0
        documents = cases[record["case_id"]].documents
        for item in record["evidence"]:
            assert 0 <= item["char_start"] < item["char_end"] <= len(documents[item["doc_index"]])
        if record["method"] == "vanilla":
            assert record["time_ratio"] == 1.0 and record["recall"] is None and record["evidence"] == []
        else:
            assert record["recall"] is not None and 0 < record["evidence_count"] <= settings.budget
        if record["method"] == "oracle":
            assert record["recall"] == 1.0
    needle_bm25 = next(r for r in records if r["method"] == "bm25" and r["task"] == "needle")
    assert needle_bm25["recall"] == 1.0  # the question shares the needle's key
    assert summary["overall"]["oracle"]["recall"] == 1.0


@pytest.mark.model
def test_helmet_rows_run_through_the_same_harness(engine, tmp_path: Path) -> None:
    passages = [
        ("Mills", "Brackwater had three mills. They closed long ago.", False),
        ("Brackwater", "The Ellis River flows through Brackwater.", True),
    ]
    row = {
        "id": "q1",
        "question": "Which river flows through the town of Brackwater?",
        "answers": ["Ellis River", "Ellis"],
        "ctxs": [{"title": t, "text": text, "has_answer": gold} for t, text, gold in passages],
    }
    path = tmp_path / "kilt_tiny.jsonl"
    path.write_text(json.dumps(row) + "\n")
    settings = BenchSettings(
        out=tmp_path / "out",
        helmet=(str(path),),
        methods=("vanilla", "bm25"),
        max_new_tokens=8,
        progress=False,
    )
    summary = run_bench(settings, engine)
    saved = json.loads((tmp_path / "out" / "cases.json").read_text())
    assert [c["task"] for c in saved["cases"]] == ["kilt_tiny"]
    case = BenchCase.from_dict(saved["cases"][0])
    assert case.gold_texts() == ["The Ellis River flows through Brackwater."] and case.gold[0].doc_index == 1
    bm25 = next(r for r in saved["records"] if r["method"] == "bm25")
    assert bm25["error"] is None and bm25["recall"] == 1.0
    assert summary["overall"]["vanilla"]["n"] == 1


@pytest.mark.model
def test_real_document_tasks_run_and_report(engine, tmp_path: Path) -> None:
    """A question over a real document and a NIAH case, through the same harness as generated tasks."""
    from recontext_engine.bench import niah

    try:
        niah.essays_dir()
    except ImportError:
        pytest.skip(niah.INSTALL_HINT)
    settings = BenchSettings(
        out=tmp_path,
        tasks=("documents", "niah"),
        lengths=(512,),
        depths=(0.5,),
        methods=("vanilla", "recontext-r2"),
        max_new_tokens=16,
        max_cases=2,  # one of each, spread over the cases
        progress=False,
    )
    run_bench(settings, engine)
    saved = json.loads((tmp_path / "cases.json").read_text())
    tasks = [c["task"] for c in saved["cases"]]
    assert len(tasks) == 2 and tasks[0].startswith("doc-") and tasks[1].startswith("niah-")
    records = saved["records"]
    assert all(r["error"] is None for r in records)
    doc, needle = (
        next(r for r in records if r["method"] == "recontext-r2" and r["task"] == t) for t in tasks
    )
    assert doc["family"] in tasks[0] and needle["needle"] in tasks[1]
    assert needle["recall"] is not None and doc["recall"] is not None
    report = (tmp_path / "report.md").read_text()
    assert "## Real documents" in report and "### NIAH per needle" in report
    assert "Targets on generated tasks" not in report
    assert (tmp_path / "niah_heatmap.png").read_bytes()[:4] == b"\x89PNG"
