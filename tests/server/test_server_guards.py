"""No request can stall the server and every bad one is a 4xx OpenAI error object: body limits (413),
JSON only (415), Host and Origin checks (403), timeouts on half-sent requests (408), docs off, 405
with ``Allow``, and /v1/evidence tracked and cancelled like chat. Against real server processes."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from recontext_engine.serve.guards import BrowserGuard, host_name
from recontext_engine.serve.process import ServerProcess
from recontext_engine.serve.worker import Cancelled, RequestTracker, run_tracked
from tests.documents import planted_document

from .conftest import ROOT, running_server

KEY = "guard-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
JSON = {**AUTH, "Content-Type": "application/json"}
MAX_BODY = 64 * 1024
TIMEOUT = 2.0  # --request-timeout of the server under test
EVIDENCE = {"documents": ["Ada is a pilot. Bob is a cook."], "question": "Who cooks?"}
model = pytest.mark.model


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    args = ["--api-key", KEY, "--max-tokens", "2", "--max-concurrency", "1"]
    with running_server(
        *args, "--max-body-bytes", str(MAX_BODY), "--request-timeout", str(TIMEOUT)
    ) as process:
        yield process


@pytest.fixture(scope="module")
def http(server: ServerProcess) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.root_url, headers=AUTH, timeout=120) as client:
        yield client


def error_of(response: httpx.Response, status: int) -> dict[str, Any]:
    """The response is ``status`` with exactly an OpenAI error object."""
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    return body["error"]


def raw_exchange(server: ServerProcess, data: bytes, wait: float = 30.0) -> tuple[bytes, float]:
    """Send ``data`` on a fresh connection, then read until the server closes it: (all read, seconds)."""
    with socket.create_connection((server.host, server.port)) as sock:
        sock.sendall(data)
        sock.settimeout(wait)
        started, got = time.monotonic(), b""
        while chunk := sock.recv(65536):
            got += chunk
        return got, time.monotonic() - started


def read_response(sock: socket.socket) -> tuple[int, dict[str, str], httpx.Response]:
    """One response read from ``sock`` (its body by ``content-length``), the connection left open."""
    sock.settimeout(30)
    got = b""
    while b"\r\n\r\n" not in got:
        got += sock.recv(65536)
    status, headers, _ = parse_raw(got)
    while len(got.partition(b"\r\n\r\n")[2]) < int(headers["content-length"]):
        got += sock.recv(65536)
    return parse_raw(got)


def parse_raw(response: bytes) -> tuple[int, dict[str, str], httpx.Response]:
    head, _, body = response.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = dict(line.lower().split(": ", 1) for line in lines[1:])
    return status, headers, httpx.Response(status, content=body)


def post_head(path: str, *headers: str) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", f"Authorization: Bearer {KEY}", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


# -- body limits --------------------------------------------------------------------------------


@model
def test_an_oversized_content_length_is_413_before_any_body_is_read(server, http) -> None:
    with socket.create_connection((server.host, server.port)) as sock:
        # No body sent: the answer does not wait for it.
        sock.sendall(post_head("/v1/evidence", "Content-Type: application/json", "Content-Length: 50000000"))
        status, headers, response = read_response(sock)
        assert error_of(response, 413)["code"] == "request_too_large"
        # What comes of the body is dropped, for at most the request timeout; then the connection closes.
        sock.sendall(b"x" * 100_000)
        started = time.monotonic()
        sock.settimeout(30)
        assert sock.recv(1024) == b"" and TIMEOUT * 0.75 < time.monotonic() - started < TIMEOUT + 3
    big = http.post("/v1/chat/completions", content=b" " * 50_000_000, headers=JSON)  # 50 MB, all sent
    assert "65,536 bytes" in error_of(big, 413)["message"]


@model
def test_an_oversized_chunked_body_is_413_while_it_is_read(server) -> None:
    chunk = b"x" * 16384
    body = b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(MAX_BODY // len(chunk) + 1))
    head = post_head("/v1/evidence", "Content-Type: application/json", "Transfer-Encoding: chunked")
    with socket.create_connection((server.host, server.port)) as sock:
        sock.sendall(head + body)  # no last chunk: the server answers before the body ends
        assert error_of(read_response(sock)[2], 413)["code"] == "request_too_large"
        sock.sendall(body + b"0\r\n\r\nGET /health HTTP/1.1\r\nHost: localhost\r\n\r\n")
        status, _, health = read_response(sock)  # the rest was dropped; the connection serves on
        assert status == 200 and health.json()["status"] == "ok"


@model
def test_only_json_bodies_are_accepted(http) -> None:
    for kind in ("text/plain", "application/x-www-form-urlencoded", None):
        headers = {"Content-Type": kind} if kind else {}
        response = http.post(
            "/v1/evidence", content=b'{"documents": ["A."], "question": "Q?"}', headers=headers
        )
        assert error_of(response, 415)["code"] == "unsupported_media_type"
    charset = {"Content-Type": "application/json; charset=utf-8"}
    assert http.post("/v1/evidence", json=EVIDENCE, headers=charset).status_code == 200


# -- Host and Origin ----------------------------------------------------------------------------


@model
def test_foreign_hosts_and_origins_are_403_loopback_ones_pass_and_no_cors_by_default(http) -> None:
    assert error_of(http.get("/health", headers={"Host": "evil.example"}), 403)["code"] == "host_not_allowed"
    rebound = http.post("/v1/evidence", json=EVIDENCE, headers={"Host": "evil.example:8000"})
    assert error_of(rebound, 403)["code"] == "host_not_allowed"
    for host in ("localhost", "localhost:1234", "127.0.0.1:80", "[::1]:8000"):
        assert http.get("/health", headers={"Host": host}).status_code == 200, host
    for origin in ("https://evil.example", "null", "http://localhost.evil.example"):
        response = http.post("/v1/evidence", json=EVIDENCE, headers={"Origin": origin})
        assert error_of(response, 403)["code"] == "origin_not_allowed", origin
    local = http.get("/health", headers={"Origin": "http://localhost:3000"})
    assert local.status_code == 200 and "access-control-allow-origin" not in local.headers
    preflight = http.options(
        "/v1/chat/completions",
        headers={"Origin": "http://localhost:3000", "Access-Control-Request-Method": "POST"},
    )
    assert "access-control-allow-origin" not in preflight.headers and preflight.status_code == 405


@model
def test_allowed_origins_and_hosts_widen_the_defaults_and_turn_cors_on() -> None:
    env = {"RECONTEXT_ALLOWED_ORIGINS": "https://app.example", "RECONTEXT_ALLOWED_HOSTS": "api.example"}
    with ServerProcess(["--log-level", "warning"], cwd=ROOT, env=env) as server:
        url = server.root_url
        preflight = httpx.options(
            f"{url}/v1/chat/completions",
            headers={
                "Origin": "https://app.example",
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization, content-type, x-stainless-os",
            },
        )
        assert preflight.status_code == 200
        assert preflight.headers["access-control-allow-origin"] == "https://app.example"
        allowed = httpx.get(
            f"{url}/health", headers={"Origin": "https://app.example", "Host": "api.example:443"}
        )
        assert allowed.headers["access-control-allow-origin"] == "https://app.example"
        evil = httpx.get(f"{url}/health", headers={"Origin": "https://evil.example"})
        assert error_of(evil, 403)["code"] == "origin_not_allowed"
        # The default body limit is sized from the window (8192 tokens: 1.5 MiB).
        over = httpx.post(
            f"{url}/v1/evidence", content=b" " * (2 << 20), headers={"Content-Type": "application/json"}
        )
        assert error_of(over, 413)["code"] == "request_too_large"
        document = planted_document("The vault code is 4172.", sentences=12_000, seed=5)  # ~600 KB, passes
        under = httpx.post(
            f"{url}/v1/evidence", json={"documents": [document], "question": "Why?"}, timeout=60
        )
        assert error_of(under, 400)["code"] == "context_length_exceeded"


def test_host_and_origin_rules() -> None:
    guard = BrowserGuard(None, allowed_hosts=["API.example"], allowed_origins=["https://app.example/"])
    assert [host_name(h) for h in ("LocalHost:80", "[::1]:8000", "127.0.0.1")] == [
        "localhost",
        "[::1]",
        "127.0.0.1",
    ]
    assert guard.host_allowed("api.example:8443") and not guard.host_allowed("evil.example")
    assert not guard.host_allowed(None)
    assert guard.origin_allowed("https://APP.example") and guard.origin_allowed("http://[::1]:5173")
    for origin in ("null", "https://app.example:444", "file://", "http://[::1", "ftp://localhost"):
        assert not guard.origin_allowed(origin), origin
    anything = BrowserGuard(None, allowed_hosts=["*"], allowed_origins=["*"])
    assert anything.host_allowed("evil.example") and anything.origin_allowed("null")


# -- timeouts -----------------------------------------------------------------------------------


@model
def test_half_sent_requests_are_closed_within_the_timeout_while_health_answers(server, http) -> None:
    results: dict[str, tuple[bytes, float]] = {}
    half_head = b"POST /v1/evidence HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: appl"
    half_body = post_head("/v1/evidence", "Content-Type: application/json", "Content-Length: 100") + b'{"docu'
    probes = {"head": half_head, "body": half_body, "nothing": b""}
    threads = [
        threading.Thread(target=lambda k=k, d=d: results.__setitem__(k, raw_exchange(server, d)))
        for k, d in probes.items()
    ]
    for thread in threads:
        thread.start()
    started = time.monotonic()
    assert http.get("/health").status_code == 200 and time.monotonic() - started < TIMEOUT / 2
    for thread in threads:
        thread.join(30)
    for name, (got, seconds) in results.items():
        assert TIMEOUT * 0.75 < seconds < TIMEOUT + 3, (name, seconds)
        if name == "nothing":
            assert got == b""  # an idle connection is closed without a word
        else:
            status, headers, response = parse_raw(got)
            assert error_of(response, 408)["code"] == "request_timeout" and headers["connection"] == "close"
    assert server.health()["status"] == "ok"


@model
def test_malformed_http_is_a_400_error_object(server) -> None:
    got, _ = raw_exchange(server, b"NOT HTTP AT ALL\r\n\r\n")
    assert error_of(parse_raw(got)[2], 400)["code"] == "invalid_http"


# -- documents, errors --------------------------------------------------------------------------


@model
def test_docs_are_off_and_the_openapi_document_needs_the_key(server, http) -> None:
    for page in ("/docs", "/redoc", "/docs/oauth2-redirect"):
        assert error_of(http.get(page), 404)["code"] == "not_found"
    assert error_of(httpx.get(f"{server.root_url}/openapi.json"), 401)["code"] == "invalid_api_key"
    document = http.get("/openapi.json").json()
    schemas = document["components"]["schemas"]
    for path, model_name in (
        ("/v1/chat/completions", "ChatCompletionRequest"),
        ("/v1/evidence", "EvidenceRequest"),
    ):
        body = document["paths"][path]["post"]["requestBody"]
        assert body["required"] and body["content"]["application/json"]["schema"]["$ref"].endswith(model_name)
        assert (
            "messages" in schemas[model_name]["properties"]
            or "documents" in schemas[model_name]["properties"]
        )
    refs = set(_refs(document))
    assert refs and all(ref.removeprefix("#/components/schemas/") in schemas for ref in refs)
    assert "$defs" not in str(document)
    assert "ErrorResponse" in schemas and "422" not in str(document["paths"])


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref":
                yield value
            else:
                yield from _refs(value)
    elif isinstance(node, list):
        for item in node:
            yield from _refs(item)


@model
def test_405_names_the_allowed_methods(http) -> None:
    for method, path, allowed in (
        ("POST", "/v1/models", "GET"),
        ("GET", "/v1/chat/completions", "POST"),
        ("DELETE", "/health", "GET"),
    ):
        response = http.request(method, path)
        assert (
            error_of(response, 405)["code"] == "method_not_allowed" and response.headers["allow"] == allowed
        )


# -- /v1/evidence in /health --------------------------------------------------------------------


def counts(server: ServerProcess) -> dict[str, int]:
    return server.health()["requests"]


def wait_idle(server: ServerProcess, seconds: float = 120) -> dict[str, int]:
    deadline = time.monotonic() + seconds
    while (now := counts(server))["active"] and time.monotonic() < deadline:
        time.sleep(0.2)
    return now


@model
def test_evidence_requests_are_counted_and_cancelled_when_their_client_leaves(server, http) -> None:
    before = wait_idle(server)
    assert http.post("/v1/evidence", json=EVIDENCE).status_code == 200
    error_of(http.post("/v1/evidence", json={"documents": ["A."]}), 400)  # refused before any work
    after = wait_idle(server)
    assert (after["completed"], after["failed"]) == (before["completed"] + 1, before["failed"])
    # One worker (--max-concurrency 1): the long call runs, the short one waits; both clients leave.
    long = {"documents": [planted_document("The code is 4172.", sentences=120, seed=3)], "question": "Code?"}
    clients = []
    for started, body in enumerate((long, EVIDENCE), start=1):
        clients.append(socket.create_connection((server.host, server.port)))
        payload = json.dumps(body).encode()
        head = post_head("/v1/evidence", "Content-Type: application/json", f"Content-Length: {len(payload)}")
        clients[-1].sendall(head + payload)
        wait_for(lambda n=started: counts(server)["active"] == n)
    for client in clients:
        client.close()
    final = wait_idle(server)
    assert final["active"] == 0 and final["completed"] == after["completed"]
    assert final["cancelled"] == after["cancelled"] + 2


def wait_for(condition: Callable[[], bool], seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


# -- run_tracked, without the model -------------------------------------------------------------


def test_a_tracked_call_whose_client_left_is_skipped_if_queued_and_dropped_if_running() -> None:
    tracker, gate, ran = RequestTracker(), threading.Event(), []

    def blocked() -> str:
        gate.wait(10)
        ran.append("blocked")
        return "late"

    async def scenario() -> None:
        async def gone() -> bool:
            return True

        with ThreadPoolExecutor(1) as executor:
            running = asyncio.ensure_future(run_tracked(blocked, executor, tracker, gone))
            queued = asyncio.ensure_future(run_tracked(lambda: ran.append("queued"), executor, tracker, gone))
            for call in (running, queued):
                with pytest.raises(Cancelled):
                    await call
            gate.set()
        with ThreadPoolExecutor(1) as executor:
            assert await run_tracked(lambda: 42, executor, tracker) == 42

    asyncio.run(scenario())
    assert ran == ["blocked"]  # the queued call never ran; the running one finished, its result dropped
    snapshot = tracker.snapshot()
    assert (snapshot["active"], snapshot["cancelled"], snapshot["completed"]) == (0, 2, 1)


# -- an unexpected error, without the model ----------------------------------------------------


class BrokenEngine:
    """Just enough of an engine for ``create_app``; selecting evidence hits a bug."""

    model_name = "broken"
    context_window = 8192

    def select_evidence(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError("a bug")


def test_an_unexpected_error_is_one_500_error_object_logged_once(caplog) -> None:
    from fastapi.testclient import TestClient

    from recontext_engine.serve.app import ServerSettings, create_app

    app = create_app(BrokenEngine(), ServerSettings(model_id="broken"))  # type: ignore[arg-type]
    # raise_server_exceptions: had the error reached Starlette's ServerErrorMiddleware, it would raise here
    with caplog.at_level("ERROR"), TestClient(app, base_url="http://localhost") as client:
        response = client.post("/v1/evidence", json=EVIDENCE)
    error = error_of(response, 500)
    assert error["type"] == "server_error" and "a bug" not in response.text
    # only the server's own records: asyncio may log an earlier test's client, collected meanwhile
    ours = [r.getMessage() for r in caplog.records if r.name.startswith("recontext")]
    assert ours == ["unexpected error on POST /v1/evidence"]
    assert app.state.tracker.snapshot()["failed"] == 1
