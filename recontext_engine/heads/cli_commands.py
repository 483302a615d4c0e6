"""``recontext heads detect`` and ``recontext heads eval``: argument sets and entry points.

The main CLI wires these in; ``python -m recontext_engine.heads.detect`` and
``python -m recontext_engine.heads.evaluate`` run them on their own.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ReContextError
from .calibration import DEFAULT_LENGTHS, FAMILIES
from .headset import HeadSet

if TYPE_CHECKING:
    from .evaluate import EvaluationReport


def _int_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return values


def _family_list(text: str) -> list[str]:
    names = [v.strip() for v in text.split(",") if v.strip()]
    unknown = sorted(set(names) - set(FAMILIES))
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown families {unknown}; choose from {', '.join(FAMILIES)}")
    return names


def _add_model_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("model")
    group.add_argument("--model", default=None, help="hub id, local folder or .gguf file (default: embedded)")
    group.add_argument("--gguf-file", default=None, help="GGUF file inside the --model folder")
    group.add_argument("--revision", default=None, help="hub revision (branch, tag or commit)")
    group.add_argument("--device", default="cpu", help="torch device (default: cpu)")
    group.add_argument("--dtype", default=None, help="torch dtype name (default: float32 on CPU)")


def _add_case_arguments(parser: argparse.ArgumentParser, cases: int) -> None:
    group = parser.add_argument_group("calibration cases")
    group.add_argument("--cases", type=int, default=cases, help=f"number of cases (default: {cases})")
    group.add_argument("--seed", type=int, default=0, help="generator seed (default: 0)")
    group.add_argument(
        "--lengths",
        type=_int_list,
        default=list(DEFAULT_LENGTHS),
        help="context lengths in tokens, comma-separated (default: %(default)s)",
    )
    group.add_argument("--no-progress", action="store_true", help="no progress bar")


def add_detect_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``recontext heads detect``."""
    _add_model_arguments(parser)
    _add_case_arguments(parser, 36)
    parser.add_argument(
        "--families",
        type=_family_list,
        default=list(FAMILIES),
        help="task families, comma-separated (default: all: %(default)s)",
    )
    parser.add_argument(
        "--out", default=None, help="output JSON (default: the user cache, where heads='auto' finds it)"
    )
    parser.add_argument("--num-heads", type=int, default=16, help="heads to keep (default: 16)")
    parser.add_argument("--cue-window", type=int, default=8, help="cue tokens w (default: 8)")
    parser.add_argument("--decay", type=float, default=0.75, help="cue recurrence lambda (default: 0.75)")
    parser.add_argument(
        "--scorer", choices=("cue_recurrence", "mean"), default="cue_recurrence", help="cue scoring per head"
    )
    parser.add_argument(
        "--objective",
        choices=("zscore", "mass", "mrr", "recall"),
        default="zscore",
        help="per-head ranking: standardized calibrated gold score (default), calibrated gold mass "
        "(QRHead), gold MRR or gold recall",
    )
    parser.add_argument(
        "--selection",
        choices=("greedy", "top"),
        default="greedy",
        help="grow the set whose head average ranks the gold best (default) or keep the top heads",
    )
    parser.add_argument("--eval", action="store_true", help="also evaluate the set on held-out cases")


def add_eval_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``recontext heads eval``."""
    _add_model_arguments(parser)
    _add_case_arguments(parser, 36)
    parser.add_argument(
        "--heads", default="auto", help="head set JSON to evaluate (default: the bundled or cached set)"
    )
    parser.add_argument("--draws", type=int, default=20, help="random head sets averaged (default: 20)")
    parser.add_argument("--json", dest="json_out", default=None, help="also write the report as JSON here")


def top_heads(score_matrix: list[list[float]], count: int) -> HeadSet:
    """The ``count`` best heads of a ``[layer][head]`` score matrix."""
    ranked = sorted(
        ((score, layer, head) for layer, row in enumerate(score_matrix) for head, score in enumerate(row)),
        key=lambda item: -item[0],
    )
    return HeadSet(tuple((layer, head) for _, layer, head in ranked[:count]))


def _load(args: argparse.Namespace) -> Any:
    from ..backends import create_backend

    print("recontext: loading model ...", file=sys.stderr)
    return create_backend(
        "transformers",
        args.model,
        device=args.device,
        dtype=args.dtype,
        gguf_file=args.gguf_file,
        revision=args.revision,
    )


def _evaluate(runtime: Any, head_set: HeadSet, args: argparse.Namespace) -> EvaluationReport:
    from ..config import ReplayConfig
    from .evaluate import evaluate_heads
    from .headset import model_fingerprint
    from .registry import bundled_head_sets

    fingerprint = model_fingerprint(runtime.config)
    others = {
        f"bundled: {hs.model}": hs
        for hs in bundled_head_sets()
        if hs.fingerprint == fingerprint and hs.heads != head_set.heads
    }
    matrix = head_set.provenance.get("score_matrix")
    if matrix and head_set.provenance.get("selection") == "greedy":
        # The same detection without the greedy step: the best heads by their own score.
        top = top_heads(matrix, len(head_set.heads))
        if top.heads != head_set.heads:
            others[f"top {len(top.heads)} by per-head score (no greedy)"] = top
    config = ReplayConfig(cue_window=getattr(args, "cue_window", 8), decay=getattr(args, "decay", 0.75))
    report = evaluate_heads(
        runtime.readout,
        runtime.tokenizer,
        head_set,
        others=others,
        num_cases=args.cases,
        seed=args.seed,
        lengths=args.lengths,
        draws=getattr(args, "draws", 20),
        config=config,
        progress=not args.no_progress,
    )
    print(report.summary())
    print(report.markdown())
    print(f"evaluation took {report.timings['total']:.0f} s", file=sys.stderr)
    if getattr(args, "json_out", None):
        Path(args.json_out).write_text(json.dumps(report.to_dict(), indent=1) + "\n", encoding="utf-8")
    return report


def detect_main(args: argparse.Namespace) -> int:
    """Run ``recontext heads detect``; 0 on success, 2 with one line on stderr on bad input."""
    from ..config import ReplayConfig
    from .detect import detect
    from .registry import cache_path

    try:
        config = ReplayConfig(cue_window=args.cue_window, decay=args.decay)
        runtime = _load(args)
        report = detect(
            runtime.readout,
            runtime.tokenizer,
            model_name=runtime.name,
            model_source=runtime.source,
            num_heads=args.num_heads,
            num_cases=args.cases,
            seed=args.seed,
            lengths=args.lengths,
            families=args.families,
            config=config,
            scorer=args.scorer,
            objective=args.objective,
            selection=args.selection,
            progress=not args.no_progress,
        )
        out = Path(args.out) if args.out else cache_path(runtime.config)
        out.parent.mkdir(parents=True, exist_ok=True)
        report.head_set.save(out)
        heads = " ".join(f"({layer},{head})" for layer, head in report.head_set.heads)
        recall = report.head_set.provenance["calibration_recall"]
        print(f"heads: {heads}")
        print(
            "calibration recall: "
            + ", ".join(f"{k} {v:.2f}" for k, v in recall.items())
            + f"; {report.timings['total']:.0f} s; written to {out}"
        )
        if args.eval:
            evaluation = _evaluate(runtime, report.head_set, args)
            rows = {
                "detected": evaluation.rows[0],
                "all_heads": next(r for r in evaluation.rows if r.name.startswith("all heads")),
                "random_heads": next(r for r in evaluation.rows if r.name.startswith("random")),
            }
            report.head_set.provenance["heldout"] = {
                "cases": evaluation.cases,
                "seed": evaluation.seed,
                "split": "eval",
                **{
                    name: {f"recall@{k}": round(v, 4) for k, v in row.recall.items()}
                    for name, row in rows.items()
                },
            }
            report.head_set.save(out)
        return 0
    except (ReContextError, OSError) as exc:
        print(f"recontext heads detect: {exc}", file=sys.stderr)
        return 2


def eval_main(args: argparse.Namespace) -> int:
    """Run ``recontext heads eval``; prints the comparison table in Markdown."""
    from .registry import resolve_heads

    try:
        runtime = _load(args)
        head_set = resolve_heads(args.heads, runtime.config)
        _evaluate(runtime, head_set, args)
        return 0
    except (ReContextError, OSError) as exc:
        print(f"recontext heads eval: {exc}", file=sys.stderr)
        return 2
