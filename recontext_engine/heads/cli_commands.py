"""``recontext heads detect`` and ``recontext heads eval``: argument sets and entry points.

The main CLI (:mod:`recontext_engine.cli`) wires these in. Defaults and help texts come from
:class:`~.detect.DetectSettings` and :class:`~recontext_engine.ReplayConfig`; the ``--scorer``
choices from the scorer registry.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import fields
from pathlib import Path
from typing import Any

from ..config import ReplayConfig
from ..errors import ReContextError
from ..scoring import SCORERS
from ..selection import AttentionSignal
from .calibration import FAMILIES
from .choice import SELECTIONS
from .detect import DetectSettings, detect
from .evaluate import EvaluationReport, evaluate_heads
from .headset import HeadSet, model_fingerprint
from .metrics import OBJECTIVES
from .registry import bundled_head_sets, cache_path, resolve_heads


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


def _help(settings: Any, name: str) -> str:
    """A settings field's help text, with its default."""
    spec = next(f for f in fields(settings) if f.name == name)
    default = getattr(settings, name)
    shown = ",".join(map(str, default)) if isinstance(default, tuple) else default
    return f"{spec.metadata['help'].rstrip('.')} (default: {shown})"


def _add_model_and_case_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments both commands take: which model, and which calibration cases."""
    defaults = DetectSettings()
    group = parser.add_argument_group("model")
    group.add_argument("--model", default=None, help="hub id, local folder or .gguf file (default: embedded)")
    group.add_argument("--gguf-file", default=None, help="GGUF file inside the --model folder")
    group.add_argument("--revision", default=None, help="hub revision (branch, tag or commit)")
    group.add_argument("--device", default="cpu", help="torch device (default: cpu)")
    group.add_argument("--dtype", default=None, help="torch dtype name (default: float32 on CPU)")
    group = parser.add_argument_group("calibration cases")
    group.add_argument("--cases", type=int, default=defaults.num_cases, help=_help(defaults, "num_cases"))
    group.add_argument("--seed", type=int, default=defaults.seed, help=_help(defaults, "seed"))
    group.add_argument(
        "--lengths", type=_int_list, default=list(defaults.lengths), help=_help(defaults, "lengths")
    )
    group.add_argument("--no-progress", action="store_true", help="no progress bar")


def add_detect_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``recontext heads detect``."""
    defaults, attention = DetectSettings(), AttentionSignal()
    _add_model_and_case_arguments(parser)
    parser.add_argument(
        "--families", type=_family_list, default=list(defaults.families), help=_help(defaults, "families")
    )
    parser.add_argument(
        "--out", default=None, help="output JSON (default: the user cache, where heads='auto' finds it)"
    )
    parser.add_argument(
        "--num-heads", type=int, default=defaults.num_heads, help=_help(defaults, "num_heads")
    )
    parser.add_argument(
        "--cue-window", type=int, default=attention.cue_window, help=_help(attention, "cue_window")
    )
    parser.add_argument("--decay", type=float, default=attention.decay, help=_help(attention, "decay"))
    parser.add_argument(
        "--scorer", choices=tuple(SCORERS), default=attention.scorer, help=_help(attention, "scorer")
    )
    parser.add_argument(
        "--objective", choices=OBJECTIVES, default=defaults.objective, help=_help(defaults, "objective")
    )
    parser.add_argument(
        "--selection", choices=SELECTIONS, default=defaults.selection, help=_help(defaults, "selection")
    )
    parser.add_argument("--eval", action="store_true", help="also evaluate the set on held-out cases")


def add_eval_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``recontext heads eval``."""
    _add_model_and_case_arguments(parser)
    parser.add_argument(
        "--heads", default="auto", help="head set JSON to evaluate (default: the bundled or cached set)"
    )
    parser.add_argument("--draws", type=int, default=20, help="random head sets averaged (default: 20)")
    parser.add_argument("--json", dest="json_out", default=None, help="also write the report as JSON here")


def _detect_settings(args: argparse.Namespace) -> DetectSettings:
    """The detection settings the flags give (flags are named after fields; ``--cases`` is ``num_cases``)."""
    return DetectSettings(
        **{
            f.name: getattr(args, "cases" if f.name == "num_cases" else f.name)
            for f in fields(DetectSettings)
        }
    )


def _replay_config(args: argparse.Namespace) -> ReplayConfig:
    """The engine settings the command line gives (``heads eval`` gives none: the defaults)."""
    names = ("cue_window", "decay", "scorer")
    return ReplayConfig().with_options(**{name: getattr(args, name) for name in names if hasattr(args, name)})


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
    report = evaluate_heads(
        runtime.readout,
        runtime.tokenizer,
        head_set,
        others=others,
        num_cases=args.cases,
        seed=args.seed,
        lengths=args.lengths,
        draws=getattr(args, "draws", 20),
        config=_replay_config(args),
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
    try:
        settings, config = _detect_settings(args), _replay_config(args)  # bad values fail before loading
        runtime = _load(args)
        report = detect(
            runtime.readout,
            runtime.tokenizer,
            settings=settings,
            config=config,
            model_name=runtime.name,
            model_source=runtime.source,
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
    try:
        runtime = _load(args)
        head_set = resolve_heads(args.heads, runtime.config)
        _evaluate(runtime, head_set, args)
        return 0
    except (ReContextError, OSError) as exc:
        print(f"recontext heads eval: {exc}", file=sys.stderr)
        return 2
