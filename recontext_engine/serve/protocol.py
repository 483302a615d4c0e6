"""The HTTP/1.1 connection: deadlines where the server waits on the client, and bad HTTP as an error object.

uvicorn closes idle keep-alive connections, but has no deadline on a request head: a client that
opens a connection and sends nothing, or half a head, a byte now and then (slowloris), holds it
forever. Nor on the rest of a body the server already answered (a 413, a 401): uvicorn drops it
as it comes, so an endless chunked body holds the connection too. :class:`TimedH11Protocol` gives
each wait ``timeout`` seconds: a head gets them from its first byte (the first head: from the
connection's opening), then a 408 and the connection closes (silently if nothing came); the
rest of an answered body gets them from the answer, then the connection closes.

Reading that rest instead of closing at once is deliberate: closing a socket with unread data
sends a reset, which can destroy the 413 before the client, still sending, reads it.

The body's own deadline, while the app reads it, is :class:`.limits.BodyLimits`'.
It is uvicorn's h11 protocol (pure Python, always installed), used even where httptools is.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from .errors import APIError

HEAD, REST = "head", "rest of an answered body"


def _raw_response(status: int, reason: str, error: APIError) -> bytes:
    """A whole response that closes the connection, written where h11 has seen no request."""
    body = json.dumps(error.body(), separators=(",", ":")).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


class TimedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with deadlines on the client; make one with :func:`timed_protocol`."""

    timeout: float = 30.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._timer: asyncio.TimerHandle | None = None
        self._waiting_for: str | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._wait(HEAD)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state is h11.IDLE:  # a head begun, not finished
            self._wait(HEAD)
        elif self.conn.our_state is h11.DONE and self.conn.their_state is h11.SEND_BODY:
            self._wait(REST)
        else:  # the app has the request: its body has BodyLimits' deadline
            self._wait(None)

    def connection_lost(self, exc: Exception | None) -> None:
        self._wait(None)
        super().connection_lost(exc)

    def send_400_response(self, msg: str) -> None:
        """Malformed HTTP (or a head over h11's 16 KiB): an error object, not uvicorn's plain text."""
        error = APIError(400, msg, code="invalid_http")
        self.transport.write(_raw_response(400, "Bad Request", error))
        self.transport.close()

    def _wait(self, what: str | None) -> None:
        """Start the deadline on ``what`` (a deadline, not an idle timer: more bytes do not extend it)."""
        if what == self._waiting_for:
            return
        if self._timer is not None:
            self._timer.cancel()
        self._waiting_for = what
        self._timer = None if what is None else self.loop.call_later(self.timeout, self._expired, what)

    def _expired(self, what: str) -> None:
        self._timer, self._waiting_for = None, None
        if self.transport.is_closing():
            return
        if what == HEAD and self.conn.trailing_data[0]:  # part of a head came: say why it ends
            message = f"The request head did not arrive within {self.timeout:g} s"
            error = APIError(408, message, code="request_timeout")
            self.transport.write(_raw_response(408, "Request Timeout", error))
        self.transport.close()


def timed_protocol(timeout: float) -> type[TimedH11Protocol]:
    """The protocol class to pass as ``uvicorn.Config(http=...)``."""
    return type("TimedH11Protocol", (TimedH11Protocol,), {"timeout": timeout})
