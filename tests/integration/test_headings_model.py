"""Section headings replayed with the evidence (``ReplayConfig.replay_headings``), on a real
document: apt's NEWS.Debian, whose entries answer "in which version" only in their first line."""

from __future__ import annotations

import pytest

from recontext_engine import ReplayConfig
from recontext_engine.bench.documents import read_document

pytestmark = pytest.mark.model

# The documents benchmark's apt-source-upgrade-version: two hops, the change and its entry's line.
QUESTION = (
    "In which apt version does installing a package start upgrading other binaries "
    "from the same source package?"
)
CHANGE = "Installing or upgrading a binary package now upgrades"
ENTRY = "apt (2.5.2) unstable; urgency=medium"


def test_the_entry_line_of_a_picked_change_is_replayed_with_it(engine) -> None:
    text = read_document("changelog/apt.NEWS.Debian.txt")
    document = text[: text.index("\n\n", 6000)]  # the newest entries, about 1.5K tokens
    config = ReplayConfig(rounds=2, top_k=4)
    evidence = engine.select_evidence(document, QUESTION, config)
    picked = [e for e in evidence if not e.heading]
    headings = [e for e in evidence if e.heading]
    assert any(CHANGE in e.text for e in picked), [e.text for e in evidence]
    assert ENTRY in [e.text for e in headings]
    assert len(picked) == config.pool_limit and len({e.text for e in evidence}) == len(evidence)
    for item in evidence:
        assert document[item.char_start : item.char_end] == item.text
    # Each heading is the line of an entry whose change was picked, in the same round.
    for heading in headings:
        entry_end = document.find("\n -- ", heading.char_end) % (len(document) + 1)  # -1: the cut entry
        assert any(
            heading.char_end < e.char_start < entry_end and e.round == heading.round for e in picked
        ), heading.text
    without = engine.select_evidence(document, QUESTION, config.with_options(replay_headings=False))
    assert not any(e.heading for e in without)
    # Round 1 reads no evidence yet, so it picks the same; later rounds read the headings too.
    assert [e.text for e in without if e.round == 1] == [e.text for e in picked if e.round == 1]


def test_a_picked_entry_line_brings_its_first_change(engine) -> None:
    """The documents benchmark's gzip-1-10-bug: the selector picks entry lines for "version 1.10";
    the bug number is in the first change under the 1.10-1 line, replayed with it."""
    from recontext_engine.bench.documents import document_cases

    (case,) = [
        c
        for c in document_cases(engine.count_tokens, families=["changelog"])
        if c.meta["question_id"] == "gzip-1-10-bug"
    ]
    evidence = engine.select_evidence(case.context, case.question)
    texts = [e.text for e in evidence]
    entry = texts.index("gzip (1.10-1) unstable; urgency=medium")
    assert texts[entry + 1] == "* new upstream version, closes: #925554"
    assert not evidence[entry].heading and not evidence[entry + 1].heading
    assert evidence[entry + 1].round == evidence[entry].round
    without = engine.select_evidence(case.context, case.question, replay_headings=False)
    assert "gzip (1.10-1) unstable; urgency=medium" in [e.text for e in without]
    assert "* new upstream version, closes: #925554" not in [e.text for e in without]
