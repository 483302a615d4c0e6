"""The HELMET JSONL loader on a few rows in HELMET's formats, written here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from recontext_engine.bench.helmet import load_helmet, row_to_case


def count_words(text: str) -> int:
    return len(text.split())


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    return path


RAG_ROW = {
    "id": "nq-17",
    "question": "who wrote the novel moby dick",
    "answers": ["Herman Melville", "Melville"],
    "ctxs": [
        {
            "title": "Whaling",
            "text": "Whaling was a large industry. Ships left from Nantucket.",
            "has_answer": False,
        },
        {
            "title": "Moby-Dick",
            "text": "Moby-Dick is an 1851 novel. It was written by Herman Melville. Melville was a sailor.",
            "has_answer": True,
        },
        {"title": "Other", "text": "Melville is also a town in Saskatchewan.", "has_answer": False},
    ],
}
KV_ROW = {
    "context": json.dumps({"a1b2c3d4-0000": "11112222-aaaa", "e5f6a7b8-1111": "33334444-bbbb"}, indent=1),
    "question": "e5f6a7b8-1111",
    "answer": "33334444-bbbb",
    "num_kvs": 2,
    "demos": [],
}
RULER_ROW = {
    "index": 3,
    "context": "Grass is green. One of the special magic numbers for quiet-lake is: 7654321. Sky is blue.",
    "query": "quiet-lake",
    "type_needle_v": "number",
    "outputs": ["7654321"],
    "length": 4096,
}


def test_rag_rows_become_documents_with_answer_bearing_gold(tmp_path: Path) -> None:
    (case,) = load_helmet(_write(tmp_path / "kilt_nq.jsonl", [RAG_ROW]), count_tokens=count_words)
    assert case.task == "kilt_nq" and case.case_id == "kilt_nq-nq-17"
    assert case.layout == "docs" and len(case.context) == 3
    assert case.context[1].startswith("Title: Moby-Dick\n")
    assert case.question == "who wrote the novel moby dick"
    assert case.answers == ["Herman Melville", "Melville"]
    # Only the flagged passage is searched, and in it the sentences naming an answer.
    assert case.gold_texts() == ["It was written by Herman Melville.", "Melville was a sailor."]
    assert all(g.doc_index == 1 for g in case.gold)
    assert case.context_tokens == sum(count_words(d) for d in case.context)
    assert case.length == 1024 and 0.0 < case.depth < 1.0


def test_unflagged_rows_search_every_passage() -> None:
    row = {**RAG_ROW, "ctxs": [{k: v for k, v in c.items() if k != "has_answer"} for c in RAG_ROW["ctxs"]]}
    case = row_to_case(row, task="nq", index=0)
    assert {g.doc_index for g in case.gold} == {1, 2}


def test_json_kv_rows(tmp_path: Path) -> None:
    (case,) = load_helmet(_write(tmp_path / "json_kv.jsonl", [KV_ROW]))
    assert case.layout == "text" and isinstance(case.context, str)
    assert case.question.startswith("Extract the value corresponding to the specified key")
    assert case.question.endswith("e5f6a7b8-1111")
    assert case.answers == ["33334444-bbbb"]
    (gold,) = case.gold_texts()
    assert "e5f6a7b8-1111" in gold and "a1b2c3d4" not in gold
    assert case.depth is not None and case.depth > 0.4


def test_ruler_rows_and_alternative_fields(tmp_path: Path) -> None:
    (case,) = load_helmet(_write(tmp_path / "ruler_niah_mk_2.jsonl", [RULER_ROW]))
    assert case.question == "What is the special magic number for quiet-lake mentioned in the provided text?"
    assert case.answers == ["7654321"] and case.length == 4096
    assert case.gold_texts() == ["One of the special magic numbers for quiet-lake is: 7654321."]
    infbench = {
        "context": ["Doc one says hi.", "Doc two: the code is 42."],
        "input": "What is the code?",
        "answer": [[42]],
    }
    case = row_to_case(infbench, task="x", index=5)
    assert case.answers == ["42"] and case.case_id == "x-5"
    assert case.gold_texts() == ["Doc two: the code is 42."] and case.gold[0].doc_index == 1
    missing = row_to_case(
        {"context": "Nothing relevant.", "question": "q?", "answers": ["zebra"]}, task="t", index=0
    )
    assert missing.gold == [] and missing.depth is None


def test_limit_and_errors(tmp_path: Path) -> None:
    path = _write(tmp_path / "rows.jsonl", [RAG_ROW, RAG_ROW, RAG_ROW])
    assert len(load_helmet(path, limit=2)) == 2
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "q", "answers": ["a"]}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:1: row has no context"):
        load_helmet(bad)
    bad.write_text("{not json\n")
    with pytest.raises(ValueError, match=r"bad.jsonl:1: not JSON"):
        load_helmet(bad)
    bad.write_text('{"context": "text", "question": "q"}\n')
    with pytest.raises(ValueError, match="no answers"):
        load_helmet(bad)
