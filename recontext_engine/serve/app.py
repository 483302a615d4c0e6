"""The FastAPI app: ``/v1/models``, ``/v1/chat/completions``, ``/v1/evidence`` and ``/health``."""

from __future__ import annotations

import hmac
import logging
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.middleware import Middleware
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, Response, StreamingResponse

from ..config import ReplayConfig
from ..engine import ReContextEngine
from ..errors import ReContextError
from .calls import chat_call, evidence_call
from .errors import APIError, CatchUnexpected, install_error_handlers
from .guards import BrowserGuard, require_json
from .limits import BodyLimits, default_body_limit
from .openapi import ERRORS, STREAMS, describe_models, json_body
from .responses import DONE, Completion, evidence_list, sse
from .schemas import ChatCompletionRequest, EvidenceRequest, parse_body
from .worker import Cancelled, RequestTracker, ThreadedStream, run_tracked

log = logging.getLogger("recontext.serve")
CLIENT_CLOSED = 499  # nginx's status for a request whose client went away; nobody reads it


@dataclass(frozen=True)
class ServerSettings:
    """How the server answers: the model id it reports, the key it asks for, the default replay config."""

    model_id: str
    api_key: str | None = None
    defaults: ReplayConfig = field(default_factory=ReplayConfig)
    max_concurrency: int = 64  # worker threads: requests in flight at once; more wait their turn
    max_body_bytes: int | None = None  # None: sized from the model's window (limits.default_body_limit)
    request_timeout: float = 30.0  # seconds a request body may take to arrive (and its head, in the CLI)
    allowed_hosts: tuple[str, ...] = ()  # Host names accepted besides loopback's; "*": any
    allowed_origins: tuple[str, ...] = ()  # Origins accepted besides loopback's; "*": any; CORS for these


def create_app(engine: ReContextEngine, settings: ServerSettings | None = None) -> FastAPI:
    """An ASGI app serving ``engine`` in the OpenAI format (run it with uvicorn)."""
    settings = settings or ServerSettings(model_id=engine.model_name or "recontext")
    executor = ThreadPoolExecutor(settings.max_concurrency, thread_name_prefix="recontext-serve")
    tracker = RequestTracker()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        tracker.cancel_all()
        executor.shutdown(wait=False, cancel_futures=True)

    # The docs pages load their scripts from a CDN; the OpenAPI document is served behind the key.
    app = FastAPI(
        title="recontext",
        lifespan=lifespan,
        middleware=_middleware(engine, settings),
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        responses=ERRORS,
    )
    app.state.tracker = tracker
    install_error_handlers(app)
    authorize = Depends(_authorizer(settings.api_key))
    api = APIRouter(prefix="/v1", dependencies=[authorize])
    openapi = describe_models(app, [ChatCompletionRequest, EvidenceRequest])
    takes_json = [Depends(require_json)]  # the dependencies of a route whose body is JSON

    def check_model(name: str | None) -> None:
        if name is not None and name != settings.model_id:
            raise APIError(
                404,
                f"The model '{name}' does not exist; this server serves '{settings.model_id}'",
                param="model",
                code="model_not_found",
            )

    @app.get("/openapi.json", include_in_schema=False, dependencies=[authorize])
    async def openapi_document() -> dict[str, Any]:
        return openapi()

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "model": settings.model_id, "requests": tracker.snapshot()}

    @api.get("/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [_model_card(settings.model_id)]}

    @api.get("/models/{name:path}")
    async def model(name: str) -> dict[str, Any]:
        check_model(name)
        return _model_card(name)

    @api.post(
        "/chat/completions",
        dependencies=takes_json,
        responses=STREAMS,
        openapi_extra=json_body(ChatCompletionRequest),
    )
    async def chat_completions(request: Request) -> Response:
        body = parse_body(await request.body(), ChatCompletionRequest)
        check_model(body.model)
        start = chat_call(engine, settings.defaults, body)
        completion = Completion(settings.model_id, parallel_tool_calls=body.parallel_tool_calls is not False)
        work = ThreadedStream(start, executor, tracker)
        if body.stream:
            return await _streamed(request, work, completion, body.include_usage)
        try:
            async for _ in work.pieces(request.is_disconnected):
                pass
        except Cancelled:
            return Response(status_code=CLIENT_CLOSED)
        assert work.result is not None
        return JSONResponse(completion.full(work.result))

    @api.post("/evidence", dependencies=takes_json, openapi_extra=json_body(EvidenceRequest))
    async def evidence(request: Request) -> Response:
        body = parse_body(await request.body(), EvidenceRequest)
        check_model(body.model)
        call = evidence_call(engine, settings.defaults, body)
        try:
            chosen = await run_tracked(call, executor, tracker, request.is_disconnected)
        except Cancelled:
            return Response(status_code=CLIENT_CLOSED)
        return JSONResponse(
            {"object": "evidence", "model": settings.model_id, "evidence": evidence_list(chosen)}
        )

    app.include_router(api)
    return app


async def _streamed(
    request: Request, work: ThreadedStream, completion: Completion, include_usage: bool
) -> Response:
    """An SSE response; errors before the first piece (over-window prompt, bad text) are plain 4xx."""
    pieces = work.pieces(request.is_disconnected)
    try:
        first: str | None = await anext(pieces)
    except StopAsyncIteration:
        first = None
    except Cancelled:
        return Response(status_code=CLIENT_CLOSED)

    async def events() -> AsyncIterator[str]:
        try:
            yield sse(completion.chunk({"role": "assistant", "content": ""}, include_usage=include_usage))
            if first is not None:
                yield sse(completion.chunk({"content": first}, include_usage=include_usage))
                async for piece in pieces:
                    yield sse(completion.chunk({"content": piece}, include_usage=include_usage))
        except Cancelled:
            return
        except Exception as exc:  # after the 200 status line: the error goes in the stream
            error = APIError.from_engine(exc) if isinstance(exc, ReContextError) else None
            if error is None:
                log.exception("unexpected error while streaming")
                error = APIError(500, "The server hit an internal error; see its log.")
            yield sse(error.body())
            yield DONE
            return
        finally:
            work.cancel()  # a no-op once the stream is exhausted; else the client left mid-stream
            await pieces.aclose()
        assert work.result is not None
        for chunk in completion.closing_chunks(work.result, include_usage):
            yield sse(chunk)
        yield DONE

    headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    return StreamingResponse(events(), media_type="text/event-stream", headers=headers)


def _middleware(engine: ReContextEngine, settings: ServerSettings) -> list[Middleware]:
    """Outermost first: unexpected errors, then Host/Origin, CORS if asked, then body limits."""
    hosts, origins = settings.allowed_hosts, settings.allowed_origins
    # allow_headers "*": the OpenAI JS client sends its own x-stainless-* headers.
    cors = Middleware(
        CORSMiddleware, allow_origins=list(origins), allow_methods=["GET", "POST"], allow_headers=["*"]
    )
    max_bytes = settings.max_body_bytes or default_body_limit(engine.context_window)
    return [
        Middleware(CatchUnexpected),
        Middleware(BrowserGuard, allowed_hosts=hosts, allowed_origins=origins),
        *([cors] if origins else []),
        Middleware(BodyLimits, max_bytes=max_bytes, timeout=settings.request_timeout),
    ]


def _model_card(name: str) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": 0, "owned_by": "recontext"}


def _authorizer(api_key: str | None) -> Callable[[Request], None]:
    """A dependency that asks for ``Authorization: Bearer <api_key>`` when a key is set."""

    def authorize(request: Request) -> None:
        if api_key is None:
            return
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not token:
            raise APIError(401, "Missing API key: send 'Authorization: Bearer <key>'", code="invalid_api_key")
        if not hmac.compare_digest(token.strip().encode(), api_key.encode()):
            raise APIError(401, "Incorrect API key provided", code="invalid_api_key")

    return authorize
