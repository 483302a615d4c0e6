"""Fast checks without the model: lazy imports, the CLI's early errors, the worker bridge, request
mapping and where the evidence goes in a stream."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from recontext_engine import InputError, ReplayConfig, ReplayStream
from recontext_engine.cli import main
from recontext_engine.results import Evidence, ReplayResult, Usage
from recontext_engine.serve.calls import chat_config
from recontext_engine.serve.errors import APIError
from recontext_engine.serve.responses import Completion
from recontext_engine.serve.schemas import ChatCompletionRequest, ReContextOptions, parse_body
from recontext_engine.serve.worker import Cancelled, RequestTracker, ThreadedStream

from .conftest import ROOT

RESULT = ReplayResult("ok", [Evidence("A fact.", 0, 0, 7, 0.5, 1)], Usage(10, 2))


def test_importing_the_engine_and_the_cli_loads_no_server_stack() -> None:
    code = (
        "import sys, recontext_engine, recontext_engine.cli, recontext_engine.serve.cli;"
        "recontext_engine.cli.build_parser();"
        "print(sorted(m for m in ('fastapi', 'uvicorn', 'starlette') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_busy_port_and_bad_defaults_fail_before_the_model_loads(capsys) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert main(["serve", "--port", str(port)]) == 2
    assert f"cannot listen on 127.0.0.1:{port}" in capsys.readouterr().err
    assert main(["serve", "--rounds", "9"]) == 2
    assert "rounds must be between 0 and 8" in capsys.readouterr().err


def replay_stream(pieces: list[str], closed: threading.Event, fail: Exception | None = None) -> ReplayStream:
    def generate() -> Iterator[str]:
        try:
            yield from pieces
            if fail is not None:
                raise fail
        finally:
            closed.set()

    stream = ReplayStream(generate())
    stream.result = RESULT
    return stream


def collect(start, stop_after: int | None = None) -> tuple[list[str], RequestTracker]:
    stats = RequestTracker()

    async def consume() -> list[str]:
        work = ThreadedStream(start, executor, stats)
        got = []
        async for piece in work.pieces():
            got.append(piece)
            if len(got) == stop_after:
                break
        return got

    with ThreadPoolExecutor(2) as executor:
        got = asyncio.run(consume())
    return got, stats


def test_worker_hands_over_every_piece_in_order() -> None:
    closed = threading.Event()
    pieces = [f"{i} " for i in range(2000)]
    got, stats = collect(lambda: replay_stream(pieces, closed))
    assert got == pieces and closed.is_set()
    snapshot = stats.snapshot()
    assert (snapshot["active"], snapshot["completed"], snapshot["generated_pieces"]) == (0, 1, 2000)


def slow_stream(closed: threading.Event) -> ReplayStream:
    def generate() -> Iterator[str]:
        try:
            for i in range(10_000):
                time.sleep(0.01)
                yield str(i)
        finally:
            closed.set()

    return ReplayStream(generate())


def test_leaving_early_closes_the_engine_stream() -> None:
    closed = threading.Event()
    got, stats = collect(lambda: slow_stream(closed), stop_after=3)
    assert got == ["0", "1", "2"] and closed.wait(5)
    assert stats.snapshot()["cancelled"] == 1 and stats.snapshot()["generated_pieces"] < 10_000


def test_shutdown_cancels_running_requests_and_their_waiting_consumers() -> None:
    closed, tracker = threading.Event(), RequestTracker()

    async def consume() -> int:
        work = ThreadedStream(lambda: slow_stream(closed), executor, tracker)
        got = 0
        with pytest.raises(Cancelled):
            async for _ in work.pieces():
                got += 1
                if got == 2:
                    tracker.cancel_all()
        return got

    with ThreadPoolExecutor(1) as executor:
        assert asyncio.run(consume()) < 100
    assert closed.is_set() and tracker.snapshot()["cancelled"] == 1


def test_engine_errors_reach_the_event_loop() -> None:
    closed = threading.Event()
    with pytest.raises(InputError, match="bad text"):
        collect(lambda: replay_stream(["a"], closed, InputError("bad text")))
    assert closed.is_set()


def body(**fields) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate({"messages": [{"role": "user", "content": "Hi"}], **fields})


def test_request_fields_map_onto_the_replay_config() -> None:
    config = chat_config(
        ReplayConfig(rounds=2, top_k=4).with_options(max_new_tokens=50),
        body(max_tokens=40, max_completion_tokens=8, stop="END", temperature=0.5, seed=3,
             recontext={"rounds": 1}),
    )  # fmt: skip
    generation = config.generation
    assert (generation.max_new_tokens, generation.stop, generation.temperature, generation.seed) == (
        8,
        ("END",),
        0.5,
        3,
    )
    assert (config.rounds, config.top_k) == (1, 4)
    assert chat_config(ReplayConfig().with_options(max_new_tokens=50), body()).generation.max_new_tokens == 50
    with pytest.raises(APIError) as raised:
        # the schema refuses it first; ReplayConfig's own check still names the field
        chat_config(
            ReplayConfig(), body().model_copy(update={"recontext": ReContextOptions.model_construct(top_k=0)})
        )
    assert raised.value.status == 400 and raised.value.param == "recontext.top_k"
    assert raised.value.code == "invalid_value"


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"temperature": 3}, "temperature"),
        ({"temperature": -0.1}, "temperature"),
        ({"top_p": 1.5}, "top_p"),
        ({"max_completion_tokens": 0}, "max_completion_tokens"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"seed": 2**63}, "seed"),
        ({"n": 0}, "n"),
        ({"frequency_penalty": 2.5}, "frequency_penalty"),
        ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
        ({"messages": [{"role": "user", "content": "Hi", "colour": "red"}]}, "messages.0.colour"),
        ({"temprature": 0.5}, "temprature"),
    ],
)
def test_values_outside_openais_ranges_and_unknown_fields_are_400s_naming_the_field(
    fields: dict, param: str
) -> None:
    import json

    raw = json.dumps({"messages": [{"role": "user", "content": "Hi"}], **fields}).encode()
    with pytest.raises(APIError) as raised:
        parse_body(raw, ChatCompletionRequest)
    assert (raised.value.status, raised.value.param) == (400, param)
    assert raised.value.code in ("invalid_value", "unknown_parameter")


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"n": 2}, "n"),
        ({"frequency_penalty": 0.5}, "frequency_penalty"),
        ({"logprobs": True}, "logprobs"),
        ({"functions": [{"name": "f"}]}, "functions"),
        ({"function_call": "auto"}, "function_call"),
        ({"store": True}, "store"),
    ],
)  # fmt: skip
def test_fields_the_server_does_not_honour_are_refused_unless_they_change_nothing(
    fields: dict, param: str
) -> None:
    with pytest.raises(APIError) as raised:
        chat_config(ReplayConfig(), body(**fields))
    assert (raised.value.status, raised.value.param, raised.value.code) == (
        400,
        param,
        "unsupported_parameter",
    )
    no_ops = {
        "n": 1,
        "frequency_penalty": 0,
        "logprobs": False,
        "response_format": {"type": "text"},
        "tools": [],
        "tool_choice": "none",
        "store": False,
        "user": "u-1",
        "parallel_tool_calls": True,
    }
    chat_config(ReplayConfig(), body(**no_ops))  # fmt: skip


def test_edge_values_map_to_what_the_engine_can_sample() -> None:
    greedy = chat_config(ReplayConfig(), body(top_p=0.0, temperature=1.0)).generation
    assert (greedy.temperature, greedy.top_p) == (0.0, 1.0)
    edge = chat_config(ReplayConfig(), body(temperature=1e-40, seed=2**63 - 1, top_p=1e-30)).generation
    assert (edge.temperature, edge.seed, edge.top_p) == (1e-40, 2**63 - 1, 1e-30)


def test_content_parts_and_developer_role() -> None:
    parsed = parse_body(
        b'{"messages": [{"role": "developer", "content": "Be brief."},'
        b' {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]}',
        ChatCompletionRequest,
    )
    assert [m.plain() for m in parsed.messages] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "a\nb"},
    ]


@pytest.mark.parametrize("include_usage", [False, True])
def test_the_evidence_rides_on_the_last_chunk(include_usage: bool) -> None:
    chunks = Completion("m").closing_chunks(RESULT, include_usage)
    assert [("evidence" in c) for c in chunks] == [False] * (len(chunks) - 1) + [True]
    assert chunks[0]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["replayed"] is True and chunks[-1]["evidence"][0]["text"] == "A fact."
    if include_usage:
        assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] == 12


def test_a_stopped_server_leaves_no_process_of_its_group_behind() -> None:
    """vLLM's engine core and workers are the server's children: a server killed before it could
    stop them would leave them running (as it once did after every vLLM server test)."""
    import os

    from recontext_engine.serve.process import end_process_group

    # a parent that leaves a child running when it is killed, as a killed server leaves vLLM's
    parent = subprocess.Popen(["bash", "-c", "sleep 60 & wait"], start_new_session=True)
    time.sleep(0.3)
    parent.kill()
    parent.wait()
    os.killpg(parent.pid, 0)  # the orphaned child is still there
    end_process_group(parent.pid, grace=2.0)
    with pytest.raises(ProcessLookupError):
        os.killpg(parent.pid, 0)
