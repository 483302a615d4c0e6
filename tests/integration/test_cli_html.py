"""`recontext ask --html FILE` and the prefill progress bar of the command line."""

from __future__ import annotations

import json
import sys

import pytest

from recontext_engine import ReContextEngine, ReContextError
from recontext_engine.cli import main
from tests.documents import planted_document

FACT = "The vault code is 4172."


@pytest.fixture
def document(tmp_path):
    path = tmp_path / "report.txt"
    path.write_text(planted_document(FACT, sentences=140, seed=11), encoding="utf-8")
    return path


def _expect_bad_input(argv: list[str], capsys, message: str) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("recontext: error:")]
    assert len(errors) == 1 and message in errors[0] and "Traceback" not in err, err


def test_bad_html_paths_are_exit_2_before_the_model_loads(document, tmp_path, capsys, monkeypatch) -> None:
    def no_model(*args, **kwargs):
        raise AssertionError("the model must not load for a bad --html path")

    monkeypatch.setattr(ReContextEngine, "from_pretrained", no_model)
    ask = ["ask", "--context", str(document), "--question", "What is the vault code?", "--html"]
    _expect_bad_input([*ask, str(tmp_path / "missing" / "view.html")], capsys, "does not exist")
    _expect_bad_input([*ask, str(tmp_path)], capsys, "is a folder")


@pytest.mark.parametrize(
    ("tty", "flag", "expected"),
    [(True, [], True), (False, [], False), (True, ["--no-progress"], False), (False, ["--progress"], True)],
)
def test_progress_defaults_to_whether_stderr_is_a_terminal(
    document, monkeypatch, tty, flag, expected
) -> None:
    seen = {}

    def record(*args, progress=False, **kwargs):
        seen["progress"] = progress
        raise ReContextError("stop here")

    monkeypatch.setattr(ReContextEngine, "from_pretrained", record)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: tty, raising=False)
    assert main(["ask", "--context", str(document), "--question", "Why?", *flag]) == 2
    assert seen == {"progress": expected}


@pytest.mark.model
def test_ask_writes_the_view_keeps_the_json_contract_and_draws_the_bar(document, tmp_path, capsys) -> None:
    view = tmp_path / "view.html"
    code = main(["ask", "--context", str(document), "--question", "What is the vault code?", "--json",
                 "--top-k", "4", "--max-new-tokens", "12", "--html", str(view), "--progress"])  # fmt: skip
    assert code == 0
    captured = capsys.readouterr()
    payload = json.loads(captured.out)
    assert set(payload) == {"answer", "evidence", "usage", "timings", "model", "heads", "finish_reason"}
    assert FACT in [e["text"] for e in payload["evidence"]]
    assert "recontext: prefill" in captured.err and f"evidence view written to {view}" in captured.err
    html = view.read_text(encoding="utf-8")
    assert html.count('<mark class="rcx-ev') == len(payload["evidence"])
    text = document.read_text(encoding="utf-8")
    for item in payload["evidence"]:
        assert f'data-start="{item["char_start"]}" data-end="{item["char_end"]}"' in html
        assert text[item["char_start"] : item["char_end"]] == item["text"]
    assert "What is the vault code?" in html and "rcx-fold" in html
