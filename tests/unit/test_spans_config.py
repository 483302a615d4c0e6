"""Sentence offsets on any Unicode text, input checks and config validation."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from recontext_engine import ReContextError, ReplayConfig
from recontext_engine.cli import read_context_file
from recontext_engine.errors import InputError
from recontext_engine.messages import clean_text
from recontext_engine.prompt import _map_tokens, context_block
from recontext_engine.spans import (
    REFUSED_CONTROL,
    check_text,
    document_sentences,
    normalize_documents,
    split_sentences,
)


def test_offsets_are_exact_on_accents_cjk_and_emoji() -> None:
    text = "Zoë moved to Zürich in 2021. 東京に住んでいます。次の文です。 Then 🎉 she left! Ça va?"
    spans = split_sentences(text)
    pieces = [text[a:b] for a, b in spans]
    assert pieces == [
        "Zoë moved to Zürich in 2021.",
        "東京に住んでいます。",
        "次の文です。",
        "Then 🎉 she left!",
        "Ça va?",
    ]


def test_lines_are_units_and_long_sentences_are_capped_at_whitespace() -> None:
    text = "key-1: 40\nkey-2: 55\n" + "word " * 100
    spans = split_sentences(text, max_chars=60)
    assert [text[a:b] for a, b in spans[:2]] == ["key-1: 40", "key-2: 55"]
    assert all(b - a <= 60 for a, b in spans)
    assert " ".join(text[a:b] for a, b in spans[2:]) == ("word " * 100).strip()


@given(st.text(min_size=1, max_size=300), st.integers(20, 120))
@settings(max_examples=150, deadline=None)
def test_spans_on_arbitrary_unicode_are_ordered_trimmed_and_cover_all_words(
    text: str, max_chars: int
) -> None:
    spans = split_sentences(text, max_chars=max_chars)
    last_end = 0
    for start, end in spans:
        assert last_end <= start < end <= len(text)
        assert end - start <= max_chars
        assert not text[start].isspace() and not text[end - 1].isspace()
        last_end = end
    covered = "".join(text[a:b] for a, b in spans)
    assert "".join(text.split()) == "".join(covered.split())


@given(st.lists(st.tuples(st.integers(0, 50), st.integers(0, 8)), max_size=30))
@settings(max_examples=100, deadline=None)
def test_token_mapping_points_into_an_overlapping_span(tokens) -> None:
    offsets = [(a, a + n) for a, n in tokens]
    spans = [(0, 10), (12, 20), (25, 40)]
    mapped = _map_tokens(offsets, spans)
    for (a, b), index in zip(offsets, mapped.tolist()):
        if index >= 0:
            start, end = spans[index]
            assert a < end and b > start and start <= b - 1
            assert not any(start < s <= b - 1 for s, _ in spans)  # no later span starts inside the token
        else:
            assert b <= a or not any(a < e and b > s for s, e in spans)


def test_multi_document_block_offsets_slice_back() -> None:
    docs = ["First doc.", "Second — ünïcode doc.", "Third."]
    block, offsets = context_block(docs)
    for doc, offset in zip(docs, offsets):
        assert block[offset : offset + len(doc)] == doc
    sentences = document_sentences(docs)
    assert [docs[s.doc_index][s.start : s.end] for s in sentences] == docs


@pytest.mark.parametrize(
    ("value", "message"),
    [("", "empty"), ("   \n\t", "empty"), ("a\x00b", "control character"), (b"bytes", "must be a string")],
)
def test_bad_text_gets_one_clear_error(value, message: str) -> None:
    with pytest.raises(InputError, match=message):
        check_text(value, "context")


@pytest.mark.parametrize("char", ["\x0c", "\x0b", "\x85", "\u2028", "\u2029", "\t", "\r"])
def test_whitespace_controls_are_accepted(char: str) -> None:
    """Form feed (a page break), vertical tab, NEL and the Unicode line/paragraph separators are
    whitespace: accepted as they are, and line or paragraph breaks for the segmentation."""
    text = f"Page one ends here.{char}Page two starts here."
    assert check_text(text, "context") == text
    assert [text[a:b] for a, b in split_sentences(text)] == ["Page one ends here.", "Page two starts here."]


@pytest.mark.parametrize("char", ["\x00", "\x08", "\x1b", "\x1c", "\x1f", "\x7f", "\x84", "\x86", "\x9f"])
def test_other_controls_are_refused_with_their_offset(char: str) -> None:
    with pytest.raises(InputError, match=r"context contains a control character \(.+\) at offset 4"):
        check_text(f"abcd{char}efg", "context")


@given(st.text(max_size=200))
@settings(max_examples=150, deadline=None)
def test_clean_text_follows_the_check_text_rule(text: str) -> None:
    """One rule everywhere: clean_text (integrations, server) blanks exactly what check_text
    (engine, CLI) refuses, so cleaned text always passes and offsets do not move."""
    cleaned = clean_text(text)
    assert len(cleaned) == len(text)
    for before, after in zip(text, cleaned):
        assert after == before or (REFUSED_CONTROL.match(before) and after == " ")
    if cleaned.strip():
        assert check_text(cleaned, "context") == cleaned


def test_cli_reads_a_licence_with_form_feeds(tmp_path: Path) -> None:
    """``recontext ask --context /usr/share/common-licenses/LGPL-2.1`` was refused (U+000C)."""
    path = Path("/usr/share/common-licenses/LGPL-2.1")
    if not path.is_file():
        pytest.skip(f"{path} is not on this machine")
    text = read_context_file(str(path))
    assert "\x0c" in text and normalize_documents(text) == [text]
    bad = tmp_path / "escape.txt"
    bad.write_text("fine\x1b[31m red", encoding="utf-8")
    with pytest.raises(InputError, match=r"escape.txt contains a control character \(U\+001B\) at offset 4"):
        read_context_file(str(bad))


def test_documents_must_be_present_and_non_empty() -> None:
    with pytest.raises(InputError, match="no documents"):
        normalize_documents([])
    with pytest.raises(InputError, match="document 1 is empty"):
        normalize_documents(["ok", " "])


@pytest.mark.parametrize(
    "options",
    [
        {"rounds": -1},
        {"rounds": 9},
        {"top_k": 0},
        {"evidence_template": "no slot"},
        {"temperature": -1.0},
        {"top_p": 0.0},
        {"max_evidence": 0},
        {"evidence_order": "random"},
        {"temperature": float("inf")},
        {"top_p": float("nan")},
        {"max_evidence": -1},
        {"seed": 2**64},
        {"seed": -(2**63) - 1},
    ],
)
def test_config_rejects_out_of_range_values(options) -> None:
    with pytest.raises(ReContextError):
        ReplayConfig().with_options(**options)


def test_config_round_trips_and_refuses_unknown_options() -> None:
    config = ReplayConfig(rounds=3, top_k=4).with_options(stop=["\n"], null_calibration=True)
    assert ReplayConfig.from_dict(config.to_dict()) == config
    assert config.generation.stop == ("\n",)
    assert config.pool_limit == 12
    with pytest.raises(ReContextError, match="unknown ReplayConfig option"):
        config.with_options(roundz=1)
