"""A bounded load run of ``recontext serve``: requests/s and p50/p95 latency by concurrency and R.

Usage: ``python scripts/load_test.py [--requests 16] [--concurrency 1 4 16] [--rounds 2 0]
[--length 512] [--max-tokens 16] [--base-url http://127.0.0.1:PORT/v1] [--out FILE.json]``.

Loopback only. It starts a server on a free port (unless ``--base-url`` names a running one on
127.0.0.1), sends one warm-up request, then for each R and each concurrency level exactly
``--requests`` chat completions (seeded needle and two-hop cases from the benchmark generator,
``documents`` in the body, temperature 0), and stops. Each cell reuses the same requests, so
cells differ only in R and concurrency. Needs the ``serve`` and ``serve-clients`` extras.
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from urllib.parse import urlparse

import httpx

from recontext_engine.bench.tasks import generate_case
from recontext_engine.serve.process import ServerProcess

LOOPBACK = {"127.0.0.1", "localhost", "::1"}


def approx_tokens(text: str) -> int:
    """Words x 1.4: close enough to size the cases, and the client loads no tokenizer."""
    return round(len(text.split()) * 1.4)


def request_bodies(count: int, length: int, max_tokens: int) -> list[dict]:
    bodies = []
    for i in range(count):
        task = ("needle", "multi_hop")[i % 2]
        case = generate_case(
            task, length=length, depth=(i % 5 + 0.5) / 5, count_tokens=approx_tokens, layout="docs", index=i
        )
        bodies.append(
            {
                "messages": [{"role": "user", "content": case.question}],
                "documents": case.documents,
                "max_tokens": max_tokens,
                "temperature": 0,
            }
        )
    return bodies


def percentile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    ordered = sorted(values)
    position = (len(ordered) - 1) * q
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def run_cell(client: httpx.Client, bodies: list[dict], rounds: int, concurrency: int) -> dict:
    def send(body: dict) -> tuple[float, int]:
        started = time.perf_counter()
        response = client.post("/chat/completions", json={**body, "recontext": {"rounds": rounds}})
        return time.perf_counter() - started, response.status_code

    started = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        outcomes = list(pool.map(send, bodies))
    wall = time.perf_counter() - started
    latencies = [seconds for seconds, status in outcomes if status == 200]
    return {
        "rounds": rounds,
        "concurrency": concurrency,
        "requests": len(bodies),
        "errors": sum(status != 200 for _, status in outcomes),
        "wall_s": round(wall, 2),
        "requests_per_s": round(len(bodies) / wall, 3),
        "p50_s": round(statistics.median(latencies), 2) if latencies else None,
        "p95_s": round(percentile(latencies, 0.95), 2) if latencies else None,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=16, help="requests per cell (R x concurrency)")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--rounds", type=int, nargs="+", default=[2, 0])
    parser.add_argument("--length", type=int, default=512, help="context tokens per request (approx.)")
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--base-url", default=None, help="a running server on loopback (default: start one)")
    parser.add_argument("--out", default=None, help="also write the cells as JSON")
    args = parser.parse_args()
    if args.base_url is not None and urlparse(args.base_url).hostname not in LOOPBACK:
        print("load_test: error: --base-url must be a loopback address", file=sys.stderr)
        return 2
    if args.requests < 1 or min(args.concurrency) < 1:
        print("load_test: error: --requests and --concurrency must be >= 1", file=sys.stderr)
        return 2
    bodies = request_bodies(args.requests, args.length, args.max_tokens)
    server = ServerProcess(["--log-level", "warning"]) if args.base_url is None else None

    def terminate(*_: object) -> None:  # `timeout` or `kill`: stop the server child first, then leave
        if server is not None:
            server.stop()
        sys.exit(143)

    signal.signal(signal.SIGTERM, terminate)
    cells = []
    with server or nullcontext():
        base_url = args.base_url or server.base_url
        limits = httpx.Limits(max_connections=max(args.concurrency))
        with httpx.Client(base_url=base_url, timeout=600, limits=limits) as client:
            model = client.get("/models").json()["data"][0]["id"]
            client.post("/chat/completions", json={**bodies[0], "max_tokens": 2})  # warm-up
            started = time.perf_counter()
            for rounds in args.rounds:
                for concurrency in args.concurrency:
                    cells.append(run_cell(client, bodies, rounds, concurrency))
                    print(json.dumps(cells[-1]), file=sys.stderr, flush=True)
            total = time.perf_counter() - started
    setup = f"~{args.length}-token contexts, max_tokens {args.max_tokens}"
    print(f"{model}, {args.requests} requests per cell, {setup}, {total:.0f} s in all\n")
    print("| R | concurrent clients | requests/s | p50 latency (s) | p95 latency (s) | errors |")
    print("|---:|---:|---:|---:|---:|---:|")
    for cell in cells:
        values = [cell[k] for k in ("rounds", "concurrency", "requests_per_s", "p50_s", "p95_s", "errors")]
        print("| " + " | ".join(str(v) for v in values) + " |")
    if args.out:
        with open(args.out, "w", encoding="utf-8") as handle:
            json.dump(
                {"model": model, "cells": cells, "total_s": round(total, 1), "args": vars(args)},
                handle,
                indent=1,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
