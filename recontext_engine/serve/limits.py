"""What a request body may cost before a route sees it: its size (413) and the time it takes to arrive (408).

The size is checked on ``Content-Length`` before any byte is read, and on the bytes received
while reading (a chunked body has no length), so an oversized body is never buffered or parsed.
After a 413 the connection stays open while the rest of the body is dropped as it comes (closing
at once could reset the connection before the client, still sending, read the 413), for at most
the request timeout (:class:`.protocol.TimedH11Protocol`); after a 408 it closes.
"""

from __future__ import annotations

import asyncio

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .errors import APIError

# No request the model can answer holds more text than its window: the engine refuses the rest
# (context_length_exceeded), but only after the server has read and parsed it. Text runs ~4
# characters a token in English, and JSON may spell a character in 6 bytes ("\u00e9"); 64 bytes a
# token covers both with room to spare, and 1 MiB more covers the JSON around the text (field names,
# message wrappers, a long chat history). 8192 tokens: 1.5 MiB; 128K tokens: 9 MiB.
BYTES_PER_TOKEN = 64
JSON_OVERHEAD = 1 << 20


def default_body_limit(context_window: int) -> int:
    """The largest body a request to a model with ``context_window`` tokens can need."""
    return BYTES_PER_TOKEN * context_window + JSON_OVERHEAD


def too_large(limit: int) -> APIError:
    message = f"The request body is over this server's limit of {limit:,} bytes"
    return APIError(413, message, code="request_too_large")


class BodyLimits:
    """ASGI middleware: a body over ``max_bytes`` is a 413, one not all received in ``timeout`` s a 408."""

    def __init__(self, app: ASGIApp, max_bytes: int, timeout: float) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.timeout = timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = Headers(scope=scope).get("content-length")
        if length is not None and length.isdigit() and int(length) > self.max_bytes:
            await too_large(self.max_bytes).response()(scope, receive, send)
            return
        await self.app(scope, self._limited(receive), send)

    def _limited(self, receive: Receive) -> Receive:
        """``receive``, raising :class:`APIError` once the body is too large or late; as is once it is in."""
        deadline = asyncio.get_running_loop().time() + self.timeout
        received = 0
        complete = False

        async def limited() -> Message:
            nonlocal received, complete
            if complete:  # the body is in: what comes now is http.disconnect, awaited without limit
                return await receive()
            remaining = deadline - asyncio.get_running_loop().time()
            try:
                message = await asyncio.wait_for(receive(), max(remaining, 0))
            except asyncio.TimeoutError:
                reason = f"The request body did not arrive within {self.timeout:g} s"
                raise APIError(408, reason, code="request_timeout", headers={"Connection": "close"}) from None
            if message["type"] != "http.request":
                complete = True
                return message
            received += len(message.get("body", b""))
            if received > self.max_bytes:
                raise too_large(self.max_bytes)
            complete = not message.get("more_body", False)
            return message

        return limited
