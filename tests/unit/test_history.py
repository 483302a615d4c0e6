"""HistoryReplayer's own rules, without a model's picks: how a read lays out a tool's output, and which
tool results a picked call brings."""

from __future__ import annotations

import pytest

from recontext_engine import HistoryReplayConfig, HistoryReplayer
from recontext_engine.history import HistoryEvidence, _Piece, _Read
from recontext_engine.results import Evidence
from recontext_engine.segment import segment
from tests.unit.test_engine_hooks import tiny_engine

# `ls -s`-like output: sizes right-aligned, so every row but the longest is indented
LISTING = " 22642  db/migrations/0268_add_refund_index.sql\n  7937  db/migrations/0634_tasks_reports.sql"


def test_an_indented_tool_output_keeps_its_layout_after_the_label() -> None:
    read = _Read([_Piece("Show me db/migrations.", 0, 0, 6), _Piece(LISTING, 1, 0, 30)], ["user", "tool"])
    document = read.document
    assert document == f"user: Show me db/migrations.\n\ntool:\n{LISTING}"
    units = segment(document)
    rows = [u for u in units if "db/migrations/0" in document[u.start : u.end]]
    # Each row is a unit of its own, and no row heads another (after "tool: " on the same line, the
    # first row sat at column 0 and read as an outline head over the second).
    assert [document[u.start : u.end].split()[-1] for u in rows] == [
        "db/migrations/0268_add_refund_index.sql",
        "db/migrations/0634_tasks_reports.sql",
    ]
    assert all(not set(u.headings) & {units.index(r) for r in rows} for u in rows)
    # offsets still map back into the message exactly
    second = document.index("7937")
    hit = read.locate(Evidence("7937", 0, second, second + 4, 1.0, 1), read.starts)
    assert hit is not None and (hit.message_index, hit.char_start) == (1, LISTING.index("7937"))


SESSION = [
    {"role": "user", "content": "We are cleaning up the ledger service today."},
    {"role": "user", "content": "Open config/reports.json for me."},
    {"role": "assistant", "content": 'read_file({"path": "config/reports.json"})'},
    {"role": "tool", "content": '{\n "service": "reports",\n "port": 24840,\n "replicas": 10\n}'},
    {"role": "assistant", "content": 'run_tests({"target": "tests/ledger"})'},
    {"role": "tool", "content": "tests/test_api.py::test_creates_invoice PASSED\n== 1 passed in 2.1s =="},
    {"role": "assistant", "content": 'read_file({"path": "docs/big.md"})'},
    {"role": "tool", "content": "The ports are listed in the config files. " * 60},
    {"role": "assistant", "content": "Done."},
]
QUESTION = "Which port does the reports service listen on, according to its config file?"


def picked(index: int, text: str | None = None) -> HistoryEvidence:
    message = SESSION[index]
    text = message["content"] if text is None else text
    start = message["content"].index(text)
    return HistoryEvidence(text, index, message["role"], start, start + len(text), 0.2, 1)


def brought(found: list[HistoryEvidence], max_result_tokens: int = 160) -> list[int]:
    replayer = HistoryReplayer(tiny_engine(), HistoryReplayConfig(max_result_tokens=max_result_tokens))
    texts = [m["content"] for m in SESSION]
    counts = {i: replayer.engine.count_tokens(t) for i, t in enumerate(texts)}
    results = replayer._results_of(found, QUESTION, [m["role"] for m in SESSION], texts, counts)
    for item in results:  # whole, sliced exactly, scored as the pick
        assert (
            texts[item.message_index][item.char_start : item.char_end]
            == item.text
            == texts[item.message_index].strip()
        )
        assert (item.role, item.score, item.round) == ("tool", 0.2, 1)
    return [r.message_index for r in results]


def test_a_picked_call_brings_its_short_result_when_it_holds_a_word_of_the_request_the_call_lacks() -> None:
    # the call names the file; its result holds "port" and "service", which the call lacks
    assert brought([picked(2)]) == [3]
    # the request that asked for the call brings it too
    assert brought([picked(1)]) == [3]
    # a result already replayed in part brings nothing more; a result's line brings nothing
    assert brought([picked(2), picked(3, '"port": 24840')]) == []
    # a routine result (no word of the request the call lacks) is not brought
    assert brought([picked(4)]) == []
    # a long result is not brought whole
    assert brought([picked(6)]) == []
    assert brought([picked(6)], max_result_tokens=10_000) == [7]
    # off
    assert brought([picked(2)], max_result_tokens=0) == []
    # a message that is no call (a reply, a user's remark) brings nothing
    assert brought([picked(0), picked(8)]) == []


def test_a_negative_result_size_is_refused() -> None:
    with pytest.raises(ValueError, match="max_result_tokens"):
        HistoryReplayConfig(max_result_tokens=-1)
