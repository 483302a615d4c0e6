"""``recontext bench [--quick] [--out DIR]`` (and ``python -m recontext_engine.bench``): flags to a run.

Modes:

- ``--quick``: the four default tasks at 1K tokens and all five depths, text and documents
  layouts alternating, the methods of :data:`~.methods.QUICK_METHODS`: 20 cases x 4 methods,
  about 5 s per call (8 minutes) on 2 idle CPU cores.
- full (default): lengths 1K, 2K, 4K and 8K (8K is clamped to the window minus room for the
  evidence, question and answer), all five depths, the methods of :data:`~.methods.FULL_METHODS`:
  80 cases; hours on a CPU, minutes on a GPU. ``--max-cases`` keeps an even spread of the grid.
- ``--tasks documents,niah``: text nobody on the team wrote: question sets over real documents
  (:mod:`.documents`) and Needle In A Haystack the public harness's way (:mod:`.niah`), with
  their own targets and the NIAH heatmap in the report.
- ``--helmet FILE.jsonl``: HELMET rows instead of generated cases (see :mod:`.helmet`).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from .methods import FULL_METHODS, METHODS, QUICK_METHODS
from .runner import run_bench
from .settings import FULL_LENGTHS, QUICK_LENGTHS, REAL_TASKS, BenchSettings
from .tasks import DEFAULT_TASKS, DEPTHS, TASKS


def _ints(text: str) -> tuple[int, ...]:
    values = []
    for part in text.split(","):
        part = part.strip().lower()
        if part:
            values.append(int(float(part[:-1]) * 1024) if part.endswith("k") else int(part))
    return tuple(values)


def _floats(text: str) -> tuple[float, ...]:
    return tuple(float(p) for p in text.split(",") if p.strip())


def _names(text: str) -> tuple[str, ...]:
    return tuple(p.strip() for p in text.split(",") if p.strip())


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the ``bench`` flags to ``parser`` (used by ``recontext bench`` and ``python -m``)."""
    parser.add_argument("--quick", action="store_true", help="a small run (~10 min on 2 CPU cores)")
    parser.add_argument("--out", default="bench-results", help="output folder (default: bench-results)")
    parser.add_argument(
        "--tasks", type=_names, help=f"comma list of tasks: {', '.join([*TASKS, *REAL_TASKS])}"
    )
    parser.add_argument("--lengths", type=_ints, help="comma list of context lengths in tokens (e.g. 1k,2k)")
    parser.add_argument("--depths", type=_floats, help="comma list of gold depths in [0, 1]")
    parser.add_argument("--layouts", type=_names, help="comma list of context layouts: text, docs")
    parser.add_argument("--methods", type=_names, help=f"comma list of methods: {', '.join(METHODS)}")
    parser.add_argument(
        "--budget", type=int, default=8, help="evidence sentences per replay method (default 8)"
    )
    parser.add_argument("--max-new-tokens", type=int, help="tokens to generate (default: 16 quick, 24 full)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the generated cases")
    parser.add_argument(
        "--max-cases",
        type=int,
        help="keep at most this many cases (an equal share per task, spread over its grid)",
    )
    parser.add_argument("--per-cell", type=int, default=1, help="cases per task x length x depth cell")
    parser.add_argument(
        "--unit",
        choices=("token", "sentence"),
        help="the attention signal's unit ('token' only with the attention-only recontext-attn, -paper)",
    )
    parser.add_argument("--top-k", type=int, help="ReContext top-K per round")
    parser.add_argument(
        "--null-calibration", action="store_true", help="ReContext with null-question calibration"
    )
    parser.add_argument(
        "--helmet", action="append", metavar="FILE.jsonl", help="run on HELMET-format JSONL rows instead"
    )
    parser.add_argument("--model", help="model id or folder (default: the embedded SmolLM2-135M-Instruct)")
    parser.add_argument("--device", default="cpu", help="torch device (default cpu)")
    parser.add_argument("--backend", default="transformers", help="transformers (default) or vllm")
    parser.add_argument(
        "--threads", type=int, help="torch CPU threads (fewer than the cores helps on a shared machine)"
    )
    parser.add_argument(
        "--steady-memory",
        action="store_true",
        help="mmap blocks of 1 MiB and more in quick mode too (steadier memory figures, slower calls)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    return parser


def settings_from_args(args: argparse.Namespace) -> BenchSettings:
    quick = bool(args.quick)
    return BenchSettings(
        out=Path(args.out),
        quick=quick,
        tasks=args.tasks or DEFAULT_TASKS,
        lengths=args.lengths or (QUICK_LENGTHS if quick else FULL_LENGTHS),
        depths=args.depths or DEPTHS,
        layouts=args.layouts or ("text", "docs"),
        methods=args.methods or (QUICK_METHODS if quick else FULL_METHODS),
        budget=args.budget,
        max_new_tokens=args.max_new_tokens or (16 if quick else 24),
        seed=args.seed,
        max_cases=args.max_cases,
        per_cell=args.per_cell,
        unit=args.unit,
        top_k=args.top_k,
        null_calibration=True if args.null_calibration else None,
        helmet=tuple(args.helmet or ()),
        model=args.model,
        device=args.device,
        backend=args.backend,
        threads=args.threads,
        steady_memory=bool(args.steady_memory) or not quick,
        progress=not args.no_progress,
    )


def main(args: argparse.Namespace) -> int:
    """Entry point for ``recontext bench``: run, print where the report is, return an exit code."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        settings = settings_from_args(args)
        summary = run_bench(settings)  # validates the settings before any model loads
    except (ValueError, ImportError, OSError) as exc:
        print(f"recontext bench: {exc}", file=sys.stderr)
        return 2
    print(summary["overall_table"])
    print(f"\nwall time {summary['wall_s']:.0f} s; report: {settings.out / 'report.md'}")
    return 0


def cli(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="recontext bench", description="ReContext benchmark (offline, seeded)"
    )
    add_arguments(parser)
    return main(parser.parse_args(argv))
