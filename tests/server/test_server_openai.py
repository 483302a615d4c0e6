"""The server as a real process, used through the ``openai`` SDK and raw HTTP: documents, the
messages rule, streaming, ``/v1/evidence``, concurrency and cancellation on disconnect."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from .cases import case, evidence_slices_back
from .conftest import MODEL, running_server

openai = pytest.importorskip("openai")

pytestmark = pytest.mark.model
CASE = case(0)
MAX_TOKENS = 16


@pytest.fixture(scope="module")
def server(backend):
    with running_server("--max-tokens", str(MAX_TOKENS), backend=backend) as process:
        yield process


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0, timeout=300)


def ask(client, **overrides: Any):
    request = {
        "model": MODEL,
        "messages": [{"role": "user", "content": CASE.question}],
        "temperature": 0,
        "extra_body": {"documents": CASE.documents},
        **overrides,
    }
    return client.chat.completions.create(**request)


@pytest.fixture(scope="module")
def answered(client):
    """One chat completion over the case's documents (shared: generation is the slow part)."""
    return ask(client)


def test_models_lists_the_served_model(client) -> None:
    assert [m.id for m in client.models.list().data] == [MODEL]


def test_documents_give_the_answer_and_its_evidence(answered) -> None:
    assert answered.object == "chat.completion" and answered.model == MODEL
    assert CASE.answer in answered.choices[0].message.content
    extra = answered.model_extra
    assert extra["replayed"] is True
    assert CASE.fact in [e["text"] for e in extra["evidence"]]
    assert evidence_slices_back(extra["evidence"], CASE.documents)
    assert {e["round"] for e in extra["evidence"]} <= {1, 2}
    usage = answered.usage
    assert (
        usage.completion_tokens <= MAX_TOKENS
        and usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    )


def test_stream_with_usage_matches_the_full_answer(client, answered) -> None:
    chunks = list(ask(client, stream=True, stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == answered.choices[0].message.content
    assert {c.id for c in chunks} == {chunks[0].id} and chunks[0].choices[0].delta.role == "assistant"
    finish = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finish) == 1 and finish[0].choices[0].finish_reason == answered.choices[0].finish_reason
    last = chunks[-1]
    assert last.choices == [] and last.usage.completion_tokens == answered.usage.completion_tokens
    assert last.model_extra["evidence"] == answered.model_extra["evidence"]
    assert last.model_extra["replayed"] is True


def test_a_repeated_context_reports_its_prompt_as_cached(client) -> None:
    first = ask(client)
    again = ask(client)
    assert again.choices[0].message.content == first.choices[0].message.content
    cached = again.usage.prompt_tokens_details.cached_tokens
    assert again.usage.prompt_tokens / 2 < cached < again.usage.prompt_tokens  # the context, not the question


def test_raw_stream_puts_evidence_in_the_last_chunk_before_done(server, answered) -> None:
    body = {"model": MODEL, "messages": [{"role": "user", "content": CASE.question}], "temperature": 0,
            "documents": CASE.documents, "stream": True}  # fmt: skip
    with httpx.stream("POST", f"{server.base_url}/chat/completions", json=body, timeout=300) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events = [line.removeprefix("data: ") for line in response.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert all("evidence" not in c for c in chunks[:-1])
    assert chunks[-1]["choices"][0]["finish_reason"] is not None
    assert chunks[-1]["evidence"] == answered.model_extra["evidence"]


def test_context_in_the_message_follows_the_question_marker_rule(client) -> None:
    prompt = f"Context:\n{CASE.documents[0]}\n\nQuestion: {CASE.question}"
    response = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": prompt}],
        temperature=0,
    )
    assert response.model_extra["replayed"] is True
    assert CASE.fact in [e["text"] for e in response.model_extra["evidence"]]
    assert evidence_slices_back(response.model_extra["evidence"], [CASE.documents[0]])
    assert CASE.answer in response.choices[0].message.content


def test_plain_chat_does_not_replay(client) -> None:
    response = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Say hello."}], max_tokens=4
    )
    assert response.model_extra["replayed"] is False and response.model_extra["evidence"] == []
    assert response.choices[0].message.content and response.usage.completion_tokens <= 4


def test_rounds_zero_is_vanilla_over_the_same_documents(client) -> None:
    response = ask(client, max_tokens=4, extra_body={"documents": CASE.documents, "recontext": {"rounds": 0}})
    assert response.model_extra["replayed"] is False and response.model_extra["evidence"] == []


def test_stop_sequence_and_max_completion_tokens(client, answered) -> None:
    full = answered.choices[0].message.content
    assert "archive" in full  # the model restates the question first
    response = ask(client, stop=["archive"], max_completion_tokens=MAX_TOKENS)
    assert response.choices[0].message.content == full[: full.index("archive")]
    assert response.choices[0].finish_reason == "stop"
    short = ask(client, max_completion_tokens=2, max_tokens=40)  # the newer field wins
    assert short.usage.completion_tokens == 2 and short.choices[0].finish_reason == "length"


def test_sampling_with_a_seed_is_reproducible(client) -> None:
    def sample(seed: int) -> str:
        response = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "Name a colour."}], max_tokens=6,
            temperature=1.0, top_p=0.9, seed=seed,
        )  # fmt: skip
        return response.choices[0].message.content

    assert sample(7) == sample(7)


def test_evidence_endpoint_selects_without_generating(server) -> None:
    body = {"documents": CASE.documents, "question": CASE.question, "recontext": {"rounds": 1, "top_k": 2}}
    response = httpx.post(f"{server.base_url}/evidence", json=body, timeout=300)
    assert response.status_code == 200
    payload = response.json()
    assert payload["object"] == "evidence" and payload["model"] == MODEL
    evidence = payload["evidence"]
    assert CASE.fact in [e["text"] for e in evidence] and len(evidence) <= 2
    assert {e["round"] for e in evidence} == {1} and evidence_slices_back(evidence, CASE.documents)


def test_16_concurrent_requests_equal_the_same_requests_one_by_one(server, client) -> None:
    cases = [case(i, sentences=8) for i in range(16)]  # short, one round: 32 requests on 2 shared cores

    def request(i: int) -> tuple[str, list[dict]]:
        c = cases[i]
        kwargs = {
            "model": MODEL,
            "messages": [{"role": "user", "content": c.question}],
            "max_tokens": 6,
            "temperature": 0,
            "extra_body": {"documents": c.documents, "recontext": {"rounds": 1}},
        }
        if i % 2:  # half of them streamed: the evidence arrives in the last chunk
            chunks = list(client.chat.completions.create(stream=True, **kwargs))
            text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
            return text, chunks[-1].model_extra["evidence"]
        response = client.chat.completions.create(**kwargs)
        return response.choices[0].message.content, response.model_extra["evidence"]

    sequential = [request(i) for i in range(16)]
    before = server.health()["requests"]
    with ThreadPoolExecutor(16) as pool:
        concurrent = list(pool.map(request, range(16)))
    assert server.health()["requests"]["completed"] - before["completed"] == 16
    assert [text for text, _ in concurrent] == [text for text, _ in sequential]
    assert [ev for _, ev in concurrent] == [ev for _, ev in sequential]
    for c, (_, evidence) in zip(cases, concurrent):
        assert c.fact in [e["text"] for e in evidence]


def test_disconnect_mid_stream_cancels_the_generation(server) -> None:
    before = server.health()["requests"]
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Tell me a long story about a cat."}],
            "max_tokens": 400, "stream": True}  # fmt: skip
    with httpx.stream("POST", f"{server.base_url}/chat/completions", json=body, timeout=300) as response:
        received = 0
        for line in response.iter_lines():
            received += line.startswith("data: ")
            if received == 3:
                break  # leaving the block closes the connection mid-stream
    deadline = time.monotonic() + 60
    while (now := server.health()["requests"])["active"] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert now["active"] == 0 and now["cancelled"] == before["cancelled"] + 1
    assert now["completed"] == before["completed"]
    assert now["generated_pieces"] - before["generated_pieces"] < 100  # far from the 400 asked for


def test_a_client_that_gives_up_waiting_cancels_its_request(server) -> None:
    before = server.health()["requests"]
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Tell me a long story about a dog."}],
            "max_tokens": 400}  # fmt: skip
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{server.base_url}/chat/completions", json=body, timeout=3)
    deadline = time.monotonic() + 60
    while (now := server.health()["requests"])["active"] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert now["active"] == 0 and now["cancelled"] == before["cancelled"] + 1
    assert now["generated_pieces"] - before["generated_pieces"] < 200
