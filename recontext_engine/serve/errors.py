"""OpenAI error objects: ``{"error": {"message", "type", "param", "code"}}``, never a traceback."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import PromptTooLongError, ReContextError

log = logging.getLogger("recontext.serve")

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
}


class APIError(Exception):
    """An error the client caused (4xx) or the server hit (5xx), sent as an OpenAI error object."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.headers = dict(headers or {})

    @classmethod
    def from_engine(cls, exc: ReContextError, param: str | None = None) -> APIError:
        """Engine errors are bad input: 400, with ``context_length_exceeded`` for over-window prompts."""
        code = "context_length_exceeded" if isinstance(exc, PromptTooLongError) else None
        return cls(400, str(exc), param=param, code=code)

    def body(self) -> dict[str, Any]:
        kind = _TYPES.get(self.status, "invalid_request_error" if self.status < 500 else "server_error")
        return {"error": {"message": self.message, "type": kind, "param": self.param, "code": self.code}}

    def response(self) -> JSONResponse:
        headers = {"WWW-Authenticate": "Bearer"} if self.status == 401 else {}
        return JSONResponse(self.body(), status_code=self.status, headers={**headers, **self.headers})


def install_error_handlers(app: FastAPI) -> None:
    """Every error path answers with an OpenAI error object (unexpected ones: :class:`CatchUnexpected`)."""

    @app.exception_handler(APIError)
    async def _api_error(request: Request, exc: APIError) -> JSONResponse:
        return exc.response()

    @app.exception_handler(ReContextError)
    async def _engine_error(request: Request, exc: ReContextError) -> JSONResponse:
        return APIError.from_engine(exc).response()

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 404:
            message = f"Unknown route: {request.method} {request.url.path}"
        elif exc.status_code == 405:
            message = f"Method {request.method} is not allowed on {request.url.path}"
        else:
            message = str(exc.detail)
        # 405 carries ``Allow`` (RFC 9110 requires it), which the router put in the exception's headers.
        error = APIError(exc.status_code, message, code=_slug(exc.status_code), headers=exc.headers)
        return error.response()

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        return APIError(400, f"Invalid request: {exc.errors()[0].get('msg', 'bad input')}").response()


class CatchUnexpected:
    """ASGI middleware: an unexpected exception is logged once and answered with a 500 error object.

    It sits inside Starlette's ServerErrorMiddleware, which would log and re-raise an exception
    its handler answered (so uvicorn logged it a second time), and answer plain text otherwise.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def send_and_note(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, send_and_note)
        except ClientDisconnect:
            return  # the client left while its body was read: nobody to answer
        except Exception:
            log.exception("unexpected error on %s %s", scope["method"], scope["path"])
            if not started:  # else the status line is out; uvicorn closes the unfinished response
                error = APIError(500, "The server hit an internal error; see its log.")
                await error.response()(scope, receive, send)


def _slug(status: int) -> str | None:
    return {404: "not_found", 405: "method_not_allowed"}.get(status)
