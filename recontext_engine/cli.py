"""The ``recontext`` command line: ``ask``, ``heads detect``/``heads eval``, ``bench`` and ``serve``."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from .backend_flags import add_model_arguments, model_options
from .errors import ReContextError

if TYPE_CHECKING:
    from .results import ReplayResult

    Commands = argparse._SubParsersAction[argparse.ArgumentParser]  # what add_subparsers returns

EXIT_BAD_INPUT = 2


def _read_text(path: str) -> str:
    file = Path(path)
    if not file.is_file():
        raise ReContextError(f"context file not found: {path}")
    try:
        return file.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ReContextError(
            f"context file {path} is not UTF-8 text (byte {exc.start}: {exc.reason})"
        ) from None


def read_context_file(path: str) -> str:
    """A ``--context`` file's text, checked as the engine checks context (one clear error for a
    missing, non-UTF-8, empty file or one with a refused control character). Form feeds (page
    breaks, as in /usr/share/common-licenses/LGPL-2.1), vertical tabs, NEL and U+2028/U+2029 are
    whitespace and accepted."""
    from .spans import check_text

    return check_text(_read_text(path), f"context file {path}")


def _html_target(path: str) -> Path:
    """Check that the evidence view can be written to ``path`` before the model runs."""
    file = Path(path)
    folder = file.parent
    if file.is_dir():
        raise ReContextError(f"--html {path} is a folder; give a file name such as view.html")
    if not folder.is_dir():
        raise ReContextError(f"--html {path}: folder {folder} does not exist")
    if not os.access(folder, os.W_OK) or (file.exists() and not os.access(file, os.W_OK)):
        raise ReContextError(f"--html {path} is not writable")
    return file


def _write_html(file: Path, result: ReplayResult, documents: list[str], question: str) -> None:
    from .view import render_html

    try:
        file.write_text(render_html(result, documents, question), encoding="utf-8")
    except OSError as exc:
        raise ReContextError(f"could not write --html {file}: {exc.strerror or exc}") from None
    print(f"recontext: evidence view written to {file}", file=sys.stderr)


def _add_ask(commands: Commands) -> None:
    ask = commands.add_parser("ask", help="answer a question over one or more documents")
    ask.add_argument(
        "--context", action="append", required=True, metavar="FILE", help="a UTF-8 text file; repeat"
    )
    ask.add_argument("--question", required=True, help="the question")
    ask.add_argument("--rounds", type=int, default=None, help="replay rounds R (default 2)")
    ask.add_argument("--top-k", type=int, default=None, help="top-K new sentences per round (default 4)")
    ask.add_argument("--vanilla", action="store_true", help="no replay (R = 0), same prompt layout")
    ask.add_argument("--max-new-tokens", type=int, default=None)
    ask.add_argument("--json", action="store_true", help="print one JSON object")
    ask.add_argument("--html", metavar="FILE", default=None, help="also write the evidence view (HTML)")
    ask.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="progress bar for long prefills (default: on when stderr is a terminal)",
    )
    add_model_arguments(ask)
    ask.set_defaults(run=_run_ask)


def _run_ask(args: argparse.Namespace) -> int:
    from .config import ReplayConfig
    from .engine import ReContextEngine
    from .spans import check_text, replay_text

    documents = [read_context_file(path) for path in args.context]
    check_text(args.question, "question")
    html = _html_target(args.html) if args.html else None
    options = {
        "rounds": 0 if args.vanilla else args.rounds,
        "top_k": args.top_k,
        "max_new_tokens": args.max_new_tokens,
    }
    config = ReplayConfig().with_options(**{k: v for k, v in options.items() if v is not None})
    progress = sys.stderr.isatty() if args.progress is None else args.progress
    engine = ReContextEngine.from_pretrained(args.model, progress=progress, **model_options(args))
    context = documents[0] if len(documents) == 1 else documents
    if args.json:
        result = engine.answer(context, args.question, config)
        payload = result.to_dict()
        payload["heads"] = [list(h) for h in engine.heads.heads]
        print(json.dumps(payload, ensure_ascii=False, indent=1))
        if html:
            _write_html(html, result, documents, args.question)
        return 0
    stream = engine.stream(context, args.question, config)
    for piece in stream:
        print(piece, end="", flush=True)
    print()
    if stream.result is not None and stream.result.evidence:
        print("\nEvidence replayed:", file=sys.stderr)
        for item in stream.result.evidence:
            heading = ", heading" if item.heading else ""
            where = f"doc {item.doc_index} {item.char_start}:{item.char_end}{heading}"
            print(f"  [{where}] {replay_text(item.text)}", file=sys.stderr)
    if html and stream.result is not None:
        _write_html(html, stream.result, documents, args.question)
    return 0


def _add_heads(commands: Commands) -> None:
    from .heads import cli_commands

    heads = commands.add_parser("heads", help="retrieval-head sets")
    verbs = heads.add_subparsers(dest="verb", required=True)
    detect = verbs.add_parser("detect", help="detect retrieval heads for a model and write a head-set JSON")
    cli_commands.add_detect_arguments(detect)
    detect.set_defaults(run=cli_commands.detect_main)
    evaluate = verbs.add_parser("eval", help="recall of held-out gold sentences for several head sets")
    cli_commands.add_eval_arguments(evaluate)
    evaluate.set_defaults(run=cli_commands.eval_main)


def _add_bench(commands: Commands) -> None:
    from .bench import cli as bench_cli

    bench = commands.add_parser("bench", help="ReContext vs vanilla and text-only replay, side by side")
    bench_cli.add_arguments(bench)
    bench.set_defaults(run=bench_cli.main)


def _add_serve(commands: Commands) -> None:
    from .serve import cli as serve_cli

    serve = commands.add_parser("serve", help="an OpenAI-compatible HTTP server (extra 'serve')")
    serve_cli.add_arguments(serve)
    serve.set_defaults(run=serve_cli.main)


EXAMPLES = """examples:
  recontext ask --context report.txt --question "Who signed the lease?"
  recontext ask --context a.txt --context b.txt --question "..." --json --html view.html
  recontext bench --quick --out bench-out
  recontext serve --port 8000          # OpenAI-compatible: POST /v1/chat/completions

`recontext COMMAND --help` lists a command's options; docs/ has the user guide."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="recontext",
        description="ReContext: recursive evidence replay for long-context LLM calls (arXiv 2607.02509).",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True)
    _add_ask(commands)
    _add_heads(commands)
    _add_bench(commands)
    _add_serve(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.run(args) or 0)
    except ReContextError as exc:
        print(f"recontext: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
