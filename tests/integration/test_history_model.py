"""HistoryReplayer on the embedded model: the sentences of a long session that answer the latest request.

Sessions are built from real text (the benchmark's Debian licence and Python reference files, read
by a tool) and the long-chat recipe's planted facts; each test asserts that the answering sentence
is replayed, sliced exactly out of its message.
"""

from __future__ import annotations

import json

import pytest

from recontext_engine import HistoryReplayConfig, HistoryReplayer
from recontext_engine.bench.documents import read_document
from recontext_engine.history import NO_REQUEST, NO_ROOM, REPLAYED, SHORT_HISTORY, _Piece, _pieces, _Read
from recontext_engine.results import Evidence

APACHE = read_document("licence/Apache-2.0.txt")
TRY = read_document("pydoc/try.txt")
PATENT_QUESTION = (
    "Under the Apache License, when do your patent licenses end "
    "if you sue claiming the Work infringes a patent?"
)
PATENT_GOLD = "shall terminate as of the date such litigation is filed"


def flat(text: str) -> str:
    return " ".join(text.split())


def agent_session() -> list[dict[str, str]]:
    """A coding agent's session: the user's spec, tool calls reading real files, chit-chat, the request."""
    return [
        {"role": "user", "content": "We ship under Apache-2.0. Read the licence and the try statement docs."},
        {"role": "assistant", "content": 'read_file({"path": "LICENSE"})'},
        {"role": "tool", "content": APACHE},
        {"role": "assistant", "content": 'read_file({"path": "docs/try.txt"})'},
        {"role": "tool", "content": TRY[:3000]},
        {"role": "assistant", "content": "I read both files. What next?"},
        {"role": "user", "content": "List the build folder."},
        {"role": "tool", "content": json.dumps({"files": ["setup.py", "README.md", "dist/app-1.2.whl"]})},
        {"role": "assistant", "content": "The build folder holds setup.py, README.md and a wheel."},
        {"role": "user", "content": PATENT_QUESTION},
    ]


@pytest.fixture(scope="module")
def replayer(engine) -> HistoryReplayer:
    return HistoryReplayer(engine, HistoryReplayConfig(min_history_tokens=200))


def test_the_answering_sentence_of_a_tool_output_is_replayed_exactly(replayer) -> None:
    messages = agent_session()
    replay = replayer.replay(messages)
    assert replay.status == REPLAYED
    assert replay.in_request and replay.insert_at == len(messages) - 1
    assert replay.request == PATENT_QUESTION
    for item in replay.evidence:
        text = messages[item.message_index]["content"]
        assert text[item.char_start : item.char_end] == item.text
        assert item.role == messages[item.message_index]["role"]
    answering = [e for e in replay.evidence if PATENT_GOLD in flat(e.text)]
    assert answering and answering[0].message_index == 2
    assert PATENT_GOLD in flat(replay.text)
    assert "[message 3, tool]" in replay.text
    assert replay.replay_tokens <= replayer.config.max_replay_tokens


def test_the_next_step_reads_the_history_from_the_context_cache(replayer) -> None:
    messages = agent_session()
    first = replayer.replay(messages)
    grown = [
        *messages,
        {"role": "assistant", "content": "Let me check."},
        {"role": "user", "content": PATENT_QUESTION},
    ]
    second = replayer.replay(grown)
    assert second.status == REPLAYED
    # The history read of the first call is the start of the second's: only the new messages prefill.
    assert second.cached_tokens >= first.history_tokens
    assert any(PATENT_GOLD in flat(e.text) for e in second.evidence)
    # the question asked before (message 10) would be its own best match: it is not searched
    assert all(e.message_index != len(messages) - 1 for e in second.evidence)


def test_after_tool_results_the_block_follows_them(replayer) -> None:
    messages = [*agent_session(), {"role": "assistant", "content": 'search({"q": "patent"})'}]
    messages.append({"role": "tool", "content": "No results."})
    replay = replayer.replay(messages)
    assert replay.status == REPLAYED and not replay.in_request
    assert replay.insert_at == len(messages)
    # the trailing tool result sits right after the block: it is not searched
    assert all(e.message_index != len(messages) - 1 for e in replay.evidence)


def test_a_message_longer_than_a_read_is_read_in_pieces(engine) -> None:
    small = HistoryReplayer(engine, HistoryReplayConfig(min_history_tokens=200, window_share=0.1))
    replay = small.replay(agent_session())
    assert replay.status == REPLAYED
    messages = agent_session()
    for item in replay.evidence:
        assert messages[item.message_index]["content"][item.char_start : item.char_end] == item.text
    assert any(PATENT_GOLD in flat(e.text) for e in replay.evidence)


def test_it_stands_down_without_a_request_below_the_size_and_without_room(replayer) -> None:
    messages = agent_session()
    assert replayer.replay([{"role": "assistant", "content": "Hello."}]).status == NO_REQUEST
    short = [
        {"role": "user", "content": "Hi."},
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "Bye?"},
    ]
    replay = replayer.replay(short)
    assert replay.status == SHORT_HISTORY and not replay.text and replay.history_tokens < 200
    assert replayer.replay(messages, room_tokens=10).status == NO_ROOM
    whole = replayer.replay(messages)
    assert len(whole.evidence) > 1
    # room for the header and the shortest line only: the block is cut to that line
    shortest = min(replayer.engine.count_tokens(line) + 1 for line in whole.text.splitlines()[1:])
    room = replayer.engine.count_tokens(replayer.config.header) + 4 + shortest
    fitted = replayer.replay(messages, room_tokens=room)
    assert fitted.status == REPLAYED and len(fitted.evidence) == 1 and fitted.replay_tokens == shortest


@pytest.mark.parametrize(
    "settings",
    [
        {"min_history_tokens": -1},
        {"max_replay_tokens": 0},
        {"window_share": 0.95},
        {"roles": ("user", "bot")},
    ],
)
def test_bad_settings_are_refused(settings) -> None:
    with pytest.raises(ValueError):
        HistoryReplayConfig(**settings)


def test_pieces_and_reads_map_offsets_back_exactly() -> None:
    text = "alpha beta gamma. " * 200
    pieces = _pieces(text, 4, tokens=1200, limit=100)
    assert len(pieces) > 10
    assert "".join(p.text for p in pieces) == text
    for piece in pieces:
        assert text[piece.offset : piece.offset + len(piece.text)] == piece.text
    read = _Read([_Piece("First one. Second one.", 0, 0, 6), _Piece("Third.", 1, 5, 2)], ["user", "tool"])
    document, starts = read.document, read.starts
    assert document == "user: First one. Second one.\n\ntool: Third."
    second = document.index("Second")
    hit = read.locate(Evidence("Second one.", 0, second, second + 11, 1.0, 1), starts)
    assert hit is not None and (hit.message_index, hit.char_start, hit.text) == (0, 11, "Second one.")
    labelled = read.locate(Evidence("tool: Third.", 0, document.index("tool"), len(document), 1.0, 1), starts)
    assert labelled is not None and (labelled.message_index, labelled.char_start, labelled.text) == (
        1,
        5,
        "Third.",
    )
    assert read.locate(Evidence("user: ", 0, 0, 6, 1.0, 1), starts) is None


def config_reads(*services: str) -> list[dict[str, str]]:
    """A tool call reading each service's config file, and its JSON."""
    messages = []
    for number, service in enumerate(services):
        config = {
            "service": service,
            "port": 24840 + 1111 * number,
            "replicas": 3 + number,
            "log_level": "info",
        }
        messages += [
            {"role": "user", "content": f"Open config/{service}.json for me."},
            {"role": "assistant", "content": f'read_file({{"path": "config/{service}.json"}})'},
            {"role": "tool", "content": json.dumps(config, indent=1)},
            {"role": "assistant", "content": "That file is short and clear."},
        ]
    return messages


def test_a_picked_tool_call_brings_its_result_whole(replayer) -> None:
    # The port line ('"port": 27062,') names no service; the call that read the file does.
    messages = [
        *agent_session()[:-1],
        *config_reads("ledger", "search", "reports", "shipping"),
        {
            "role": "user",
            "content": "Which port does the reports service listen on, according to its config file?",
        },
    ]
    replay = replayer.replay(messages)
    assert replay.status == REPLAYED
    result = next(i for i, m in enumerate(messages) if '"service": "reports"' in m["content"])
    whole = [e for e in replay.evidence if e.message_index == result]
    assert whole and whole[0].text == messages[result]["content"]
    assert '"port": 27062' in replay.text


def test_a_correction_is_replayed_with_the_statement_it_corrects(replayer) -> None:
    messages = agent_session()[:-1]
    messages.insert(1, {"role": "user", "content": "We deploy the new cluster to ap-south-1."})
    messages += [
        {"role": "user", "content": "Change of plan, the cluster goes to eu-west-1 instead of ap-south-1."},
        {"role": "assistant", "content": "Noted."},
        {"role": "user", "content": "Which region should the new cluster be deployed to?"},
    ]
    replay = replayer.replay(messages)
    assert replay.status == REPLAYED
    # The old statement matches the question best; the correction shares its rare words ("ap-south-1"):
    # one lexical hop brings it (a history is read in one round).
    assert {1, len(messages) - 3} <= {e.message_index for e in replay.evidence}
    assert "eu-west-1 instead of ap-south-1" in replay.text
