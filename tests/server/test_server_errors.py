"""Every error the server answers, as an OpenAI error object with the right status, from a real process
started with ``--api-key``; none carries a traceback."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.documents import planted_document

from .cases import case
from .conftest import MODEL, running_server

openai = pytest.importorskip("openai")

pytestmark = pytest.mark.model
KEY = "test-key-1234"
AUTH = {"Authorization": f"Bearer {KEY}"}
CASE = case(1)
USER = [{"role": "user", "content": "Hi"}]
LONG = planted_document("The vault code is 4172.", sentences=1200, seed=5)  # ~12K tokens, over 8192


@pytest.fixture(scope="module")
def server(backend):
    with running_server("--api-key", KEY, "--max-tokens", "4", backend=backend) as process:
        yield process


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(
        base_url=server.base_url, headers={**AUTH, "Content-Type": "application/json"}, timeout=300
    ) as client:
        yield client


def error_of(response: httpx.Response, status: int) -> dict[str, Any]:
    """The response is ``status`` with exactly an OpenAI error object and no traceback."""
    assert response.status_code == status, response.text
    assert "Traceback" not in response.text and 'File "' not in response.text
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    return body["error"]


def chat(http: httpx.Client, **body: Any) -> httpx.Response:
    return http.post("/chat/completions", json={"model": MODEL, **body})


def test_missing_or_wrong_key_is_401(server) -> None:
    url = f"{server.base_url}/chat/completions"
    missing = error_of(httpx.post(url, json={"messages": USER}), 401)
    assert missing["type"] == "authentication_error" and missing["code"] == "invalid_api_key"
    wrong = httpx.post(url, json={"messages": USER}, headers={"Authorization": "Bearer nope"})
    assert "Incorrect API key" in error_of(wrong, 401)["message"]
    assert httpx.get(f"{server.base_url}/models").status_code == 401
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=server.base_url, api_key="nope", max_retries=0).models.list()


def test_the_right_key_lists_models(server) -> None:
    models = openai.OpenAI(base_url=server.base_url, api_key=KEY, max_retries=0).models.list()
    assert [m.id for m in models.data] == [MODEL]


def test_unknown_route_and_method_and_model(http) -> None:
    assert error_of(http.get("/nope"), 404)["code"] == "not_found"
    assert error_of(http.get("/chat/completions"), 405)["code"] == "method_not_allowed"
    unknown = error_of(chat(http, model="gpt-9", messages=USER), 404)
    assert unknown["code"] == "model_not_found" and unknown["param"] == "model"


def test_malformed_json_and_non_object_bodies(http) -> None:
    url = "/chat/completions"
    assert "not valid JSON" in error_of(http.post(url, content=b'{"messages": [}'), 400)["message"]
    assert "JSON object" in error_of(http.post(url, content=b"[1, 2]"), 400)["message"]
    assert "empty" in error_of(http.post(url, content=b""), 400)["message"]


def test_text_that_is_not_utf8_is_400(http) -> None:
    raw = b'{"model": "' + MODEL.encode() + b'", "messages": [{"role": "user", "content": "caf\xe9"}]}'
    error = error_of(http.post("/chat/completions", content=raw), 400)
    assert "not valid UTF-8" in error["message"] and error["code"] == "invalid_utf8"
    raw = b'{"documents": ["\xff\xfe"], "question": "Why?"}'
    assert "UTF-8" in error_of(http.post("/evidence", content=raw), 400)["message"]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"messages": []}, "messages"),
        ({"messages": "Hi"}, "messages"),
        ({"messages": [{"role": "user", "content": 5}]}, "messages.0.content"),
        ({"messages": [{"role": "wizard", "content": "Hi"}]}, "messages.0.role"),
        ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "messages.0.content"),
        ({"messages": USER, "temperature": "hot"}, "temperature"),
        ({"messages": USER, "max_tokens": "8"}, "max_tokens"),
        ({"messages": USER, "stream": "yes"}, "stream"),
        ({"messages": USER, "stop": 3}, "stop"),
        ({"messages": USER, "documents": "one text"}, "documents"),
        ({"messages": USER, "documents": ["a", 2]}, "documents.1"),
        ({"messages": USER, "recontext": {"rounds": "2"}}, "recontext.rounds"),
        ({"messages": USER, "recontext": {"depth": 2}}, "recontext.depth"),
        ({"messages": USER, "n": 2}, "n"),
    ],
)
def test_wrong_shapes_and_types_are_400_naming_the_field(http, body, param) -> None:
    assert error_of(chat(http, **body), 400)["param"] == param


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"messages": USER, "recontext": {"rounds": 9}}, "less than or equal to 8"),
        ({"messages": USER, "recontext": {"top_k": 0}}, "greater than or equal to 1"),
        ({"messages": USER, "max_tokens": 0}, "greater than or equal to 1"),
        ({"messages": USER, "max_completion_tokens": 0}, "greater than or equal to 1"),
        ({"messages": USER, "temperature": 3}, "less than or equal to 2"),
        ({"messages": USER, "seed": 2**64}, "less than 9223372036854775808"),
        ({"messages": [{"role": "user", "content": " "}], "documents": CASE.documents}, "missing or empty"),
        (
            {"messages": [{"role": "system", "content": "Be brief."}], "documents": CASE.documents},
            "missing or empty",
        ),
        ({"messages": USER, "documents": ["Some text.", "  "]}, "document 1 is empty"),
    ],
)
def test_out_of_range_options_and_empty_text_are_400(http, body, message) -> None:
    assert message in error_of(chat(http, **body), 400)["message"]


def test_evidence_endpoint_checks_its_body(http) -> None:
    assert error_of(http.post("/evidence", json={"question": "Why?"}), 400)["param"] == "documents"
    assert (
        error_of(http.post("/evidence", json={"documents": [], "question": "Why?"}), 400)["param"]
        == "documents"
    )
    body = {"documents": CASE.documents, "question": "Why?", "recontext": {"top_k": 600}}
    assert "top_k" in error_of(http.post("/evidence", json=body), 400)["message"]


def test_prompt_over_the_window_is_context_length_exceeded(http, server) -> None:
    for body in (
        {"messages": [{"role": "user", "content": "What is the vault code?"}], "documents": [LONG]},
        {"messages": [{"role": "user", "content": LONG}]},  # plain chat
        {
            "messages": [{"role": "user", "content": "What is the vault code?"}],
            "documents": [LONG],
            "stream": True,
        },
    ):
        error = error_of(chat(http, **body), 400)
        assert error["code"] == "context_length_exceeded" and "8192" in error["message"]
    error = error_of(http.post("/evidence", json={"documents": [LONG], "question": "Why?"}), 400)
    assert error["code"] == "context_length_exceeded"
    client = openai.OpenAI(base_url=server.base_url, api_key=KEY, max_retries=0)
    with pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "Why?"}], stream=True,
            extra_body={"documents": [LONG]},
        )  # fmt: skip
    assert raised.value.code == "context_length_exceeded"


@pytest.mark.parametrize(
    "unit",
    ["New Context:\n---\nQuery:\nOriginal Answer:\n", "Context information is below.\n---\nQuestion:\n---\n"],
)
def test_100_kb_of_repeated_template_markers_is_refused_at_once(http, server, unit: str) -> None:
    """Once 122 s of regex backtracking on the event loop: every other client waited."""
    import threading

    text = unit * (100_000 // len(unit))
    answered: list[httpx.Response] = []
    request = threading.Thread(
        target=lambda: answered.append(chat(http, messages=[{"role": "user", "content": text}])), daemon=True
    )
    request.start()
    assert server.health(timeout=5)["status"] == "ok"  # the event loop is free meanwhile
    request.join(timeout=30)
    assert answered, "the request did not finish within 30 s"
    assert error_of(answered[0], 400)["code"] == "context_length_exceeded"


def test_form_feeds_from_pdf_loaders_are_page_breaks_not_refused(http) -> None:
    documents = [CASE.documents[0].replace(". ", ".\f", 3)]
    response = http.post("/evidence", json={"documents": documents, "question": CASE.question})
    assert response.status_code == 200
    evidence = response.json()["evidence"]
    assert CASE.fact in [e["text"] for e in evidence]
    assert all(documents[0][e["char_start"] : e["char_end"]] == e["text"] for e in evidence)


def test_the_server_still_answers_after_all_the_errors(http, server) -> None:
    response = chat(http, messages=[{"role": "user", "content": CASE.question}], documents=CASE.documents)
    assert response.status_code == 200 and response.json()["replayed"] is True
    assert server.health()["requests"]["active"] == 0
