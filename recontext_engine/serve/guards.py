"""What a browser may send: the ``Host`` and ``Origin`` a request carries, and a JSON content type.

A page on any site can make the visitor's browser send requests to ``http://127.0.0.1:8000``.
Three checks keep it out, as Ollama's and Jupyter's servers do:

- ``Host``: with DNS rebinding, ``evil.example`` resolves to 127.0.0.1, so the page's requests
  are same-origin for the browser, but they carry ``Host: evil.example``. Bound to loopback,
  only loopback names are accepted (any port); ``allowed_hosts`` widens that.
- ``Origin``: every cross-site request a browser sends carries it; only loopback origins are
  accepted unless ``allowed_origins`` names more. Clients other than browsers send none.
- ``Content-Type``: a JSON body needs ``application/json``, which a cross-site page can only send
  after a CORS preflight; ``text/plain`` and form posts ("simple requests") are refused.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from urllib.parse import urlsplit

from fastapi import Request
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from .errors import APIError

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "[::1]"})
ANY = "*"


def is_loopback(address: str) -> bool:
    """Whether binding ``address`` serves this machine only (``127.0.0.0/8``, ``::1``, ``localhost``)."""
    if address.strip("[]").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(address.strip("[]")).is_loopback
    except ValueError:
        return False


def split_list(value: str | None) -> tuple[str, ...]:
    """``"a, b"`` (a flag or an environment variable) as ``("a", "b")``."""
    return tuple(item.strip() for item in (value or "").split(",") if item.strip())


def host_name(host: str) -> str:
    """The name in a ``Host`` header, without its port: ``[::1]:8000`` -> ``[::1]``."""
    host = host.strip().lower()
    if host.startswith("["):
        return host.partition("]")[0] + "]"
    return host.partition(":")[0]


def _origin(origin: str) -> str:
    return origin.strip().rstrip("/").lower()


class BrowserGuard:
    """ASGI middleware: 403 (an OpenAI error object) for a ``Host`` or an ``Origin`` not allowed."""

    def __init__(self, app: ASGIApp, allowed_hosts: Iterable[str] = (), allowed_origins: Iterable[str] = ()):
        self.app = app
        self.hosts = {host_name(h) for h in allowed_hosts} | LOOPBACK_NAMES
        self.origins = {_origin(o) for o in allowed_origins}

    def host_allowed(self, host: str | None) -> bool:
        return ANY in self.hosts or (host is not None and host_name(host) in self.hosts)

    def origin_allowed(self, origin: str) -> bool:
        if ANY in self.origins or _origin(origin) in self.origins:
            return True
        try:
            parts = urlsplit(origin.strip())
        except ValueError:  # "http://[::1" and the like
            return False
        host = host_name(parts.netloc)
        # "null" (a sandboxed frame, a file:// page) has no host: refused unless "*".
        return parts.scheme in ("http", "https") and host in LOOPBACK_NAMES

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        host, origin = headers.get("host"), headers.get("origin")
        error = None
        if not self.host_allowed(host):
            message = f"Host {host!r} is not allowed; allow it with --allowed-hosts"
            error = APIError(403, message, code="host_not_allowed")
        elif origin is not None and not self.origin_allowed(origin):
            message = f"Origin {origin!r} is not allowed; allow it with --allowed-origins"
            error = APIError(403, message, code="origin_not_allowed")
        if error is not None:
            await error.response()(scope, receive, send)
            return
        await self.app(scope, receive, send)


def require_json(request: Request) -> None:
    """A dependency of the POST routes: 415 unless the body is declared ``application/json``."""
    declared = request.headers.get("content-type", "")
    if declared.partition(";")[0].strip().lower() != "application/json":
        raise APIError(
            415,
            f"Content-Type must be application/json, got {declared or 'none'!r}",
            code="unsupported_media_type",
        )
