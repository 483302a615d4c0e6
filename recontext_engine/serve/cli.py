"""The ``recontext serve`` subcommand: load the engine once, then serve it with uvicorn.

FastAPI and uvicorn (the ``serve`` extra) are imported when the command runs, not when the
parser is built, so the other subcommands work without them.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys

from ..backend_flags import add_model_arguments, model_options
from ..errors import BackendUnavailableError, ReContextError

API_KEY_ENV = "RECONTEXT_API_KEY"
HOSTS_ENV = "RECONTEXT_ALLOWED_HOSTS"
ORIGINS_ENV = "RECONTEXT_ALLOWED_ORIGINS"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_arguments(parser)
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to bind (default 127.0.0.1, loopback only)"
    )
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument(
        "--api-key",
        default=None,
        help=f"require 'Authorization: Bearer KEY' (default: ${API_KEY_ENV}, else none)",
    )
    parser.add_argument("--rounds", type=int, default=None, help="default replay rounds R (default 2)")
    parser.add_argument(
        "--top-k", type=int, default=None, help="default top-K sentences per round (default 4)"
    )
    parser.add_argument(
        "--max-tokens", type=int, default=None, help="default max_tokens per request (default 128)"
    )
    parser.add_argument(
        "--served-model-name", default=None, help="model id to report (default: the model's name)"
    )
    parser.add_argument(
        "--max-concurrency", type=int, default=64, help="requests run at once (worker threads)"
    )
    parser.add_argument(
        "--max-body-bytes",
        type=int,
        default=None,
        help="largest request body, else 413 (default: 64 bytes a token of the model's window + 1 MiB)",
    )
    parser.add_argument(
        "--request-timeout",
        type=float,
        default=30.0,
        help="seconds a request's head, then its body, may take to arrive, else 408 (default 30)",
    )
    parser.add_argument(
        "--allowed-hosts",
        default=None,
        help=f"comma-separated Host names accepted besides loopback's, '*' for any (default: ${HOSTS_ENV}; "
        "else none when bound to loopback, any otherwise)",
    )
    parser.add_argument(
        "--allowed-origins",
        default=None,
        help="comma-separated browser origins (https://app.example) accepted besides loopback's, and "
        f"answered with CORS headers; '*' for any (default: ${ORIGINS_ENV}, else none)",
    )
    parser.add_argument(
        "--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"]
    )


def _flag_or_env(flag: str | None, env: str) -> str | None:
    return flag if flag is not None else os.environ.get(env)


def _listen(host: str, port: int) -> socket.socket:
    """Bind before loading the model, so a busy port is one clear error, not a late uvicorn exit."""
    if not 0 <= port <= 65535:
        raise ReContextError(f"--port must be between 0 and 65535, got {port}")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ReContextError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.set_inheritable(True)
    return sock


def main(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from .app import ServerSettings, create_app
        from .guards import ANY, is_loopback, split_list
        from .protocol import timed_protocol
    except ImportError as exc:
        raise BackendUnavailableError(
            f"recontext serve needs the 'serve' extra ({exc.name} is missing): pip install 'recontext[serve]'"
        ) from None
    from ..config import ReplayConfig
    from ..engine import ReContextEngine

    options = {"rounds": args.rounds, "top_k": args.top_k, "max_new_tokens": args.max_tokens}
    defaults = ReplayConfig().with_options(**{k: v for k, v in options.items() if v is not None})
    if args.max_concurrency < 1:
        raise ReContextError(f"--max-concurrency must be >= 1, got {args.max_concurrency}")
    if args.max_body_bytes is not None and args.max_body_bytes < 1024:
        raise ReContextError(f"--max-body-bytes must be >= 1024, got {args.max_body_bytes}")
    if not args.request_timeout > 0:
        raise ReContextError(f"--request-timeout must be > 0, got {args.request_timeout}")
    hosts = split_list(_flag_or_env(args.allowed_hosts, HOSTS_ENV))
    if not hosts and not is_loopback(args.host):
        hosts = (ANY,)  # bound to a public address: DNS rebinding targets loopback servers only
    origins = split_list(_flag_or_env(args.allowed_origins, ORIGINS_ENV))
    api_key = args.api_key if args.api_key is not None else os.environ.get(API_KEY_ENV) or None
    options = model_options(args)  # refused before the port is taken and the model loaded
    if args.backend == "vllm":
        options["serving"] = True  # vLLM's scheduler limits for a server, as `vllm serve` has them
    sock = _listen(args.host, args.port)
    engine = ReContextEngine.from_pretrained(args.model, default_config=defaults, **options)
    settings = ServerSettings(
        model_id=args.served_model_name or engine.model_name or "recontext",
        api_key=api_key,
        defaults=defaults,
        max_concurrency=args.max_concurrency,
        max_body_bytes=args.max_body_bytes,
        request_timeout=args.request_timeout,
        allowed_hosts=hosts,
        allowed_origins=origins,
    )
    if api_key is None and not is_loopback(args.host):
        print(f"recontext serve: warning: listening on {args.host} with no --api-key", file=sys.stderr)
    host, port = sock.getsockname()[:2]
    print(f"recontext serve: {settings.model_id} on http://{host}:{port}/v1", file=sys.stderr, flush=True)
    config = uvicorn.Config(
        create_app(engine, settings),
        http=timed_protocol(args.request_timeout),
        log_level=args.log_level,
        timeout_graceful_shutdown=5,
    )
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        engine.backend.close()  # vLLM's engine core and workers are processes of their own: stopped with us
    return 0
