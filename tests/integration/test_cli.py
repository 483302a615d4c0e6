"""`recontext ask`: JSON output on the embedded model, and one clear line with exit code 2 for bad input."""

from __future__ import annotations

import json

import pytest

from recontext_engine.cli import main
from tests.documents import planted_document


@pytest.fixture
def document(tmp_path):
    path = tmp_path / "report.txt"
    path.write_text(planted_document("The vault code is 4172.", sentences=25, seed=11), encoding="utf-8")
    return path


@pytest.mark.model
def test_ask_json_prints_one_object_with_evidence_that_slices_back(document, capsys) -> None:
    code = main(["ask", "--context", str(document), "--question", "What is the vault code?", "--json",
                 "--top-k", "4", "--max-new-tokens", "12"])  # fmt: skip
    assert code == 0
    payload = json.loads(capsys.readouterr().out)
    assert set(payload) >= {"answer", "evidence", "usage", "timings", "model", "heads"}
    text = document.read_text(encoding="utf-8")
    assert any("4172" in e["text"] for e in payload["evidence"])
    for item in payload["evidence"]:
        assert text[item["char_start"] : item["char_end"]] == item["text"]
    assert payload["model"] == "SmolLM2-135M-Instruct"


def _expect_bad_input(argv: list[str], capsys, message: str) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("recontext: error:")]
    # Model loading may draw a progress bar first; the error itself is one line, with no traceback.
    assert len(errors) == 1 and message in errors[0] and "Traceback" not in err, err


def test_missing_file_is_exit_2(tmp_path, capsys) -> None:
    _expect_bad_input(
        ["ask", "--context", str(tmp_path / "nope.txt"), "--question", "Why?"], capsys, "not found"
    )


def test_non_utf8_file_is_exit_2(tmp_path, capsys) -> None:
    path = tmp_path / "latin1.txt"
    path.write_bytes("Caf\xe9 cr\xe8me".encode("latin-1"))
    _expect_bad_input(["ask", "--context", str(path), "--question", "Why?"], capsys, "not UTF-8")


def test_empty_context_and_question_are_exit_2(document, tmp_path, capsys) -> None:
    empty = tmp_path / "empty.txt"
    empty.write_text("  \n", encoding="utf-8")
    _expect_bad_input(["ask", "--context", str(empty), "--question", "Why?"], capsys, "is empty")
    _expect_bad_input(["ask", "--context", str(document), "--question", " "], capsys, "question is empty")


def test_out_of_range_k_and_r_are_exit_2(document, capsys) -> None:
    _expect_bad_input(
        ["ask", "--context", str(document), "--question", "Why?", "--top-k", "0"], capsys, "top_k"
    )
    _expect_bad_input(
        ["ask", "--context", str(document), "--question", "Why?", "--rounds", "99"], capsys, "rounds"
    )


@pytest.mark.model
def test_prompt_over_the_window_is_exit_2(tmp_path, capsys) -> None:
    path = tmp_path / "long.txt"
    path.write_text(planted_document("x", sentences=900, seed=1), encoding="utf-8")
    _expect_bad_input(["ask", "--context", str(path), "--question", "Why?"], capsys, "over the model window")


@pytest.mark.model
def test_head_file_that_does_not_fit_is_exit_2(document, tmp_path, capsys) -> None:
    heads = tmp_path / "heads.json"
    heads.write_text(json.dumps({"heads": [[99, 0]]}), encoding="utf-8")
    argv = ["ask", "--context", str(document), "--question", "Why?", "--heads", str(heads)]
    _expect_bad_input(argv, capsys, "out of range")
