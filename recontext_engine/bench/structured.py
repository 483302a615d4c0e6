"""Structured output and tool calls: valid objects, right tools, and what the constraint costs.

``python -m recontext_engine.bench.structured --out DIR`` (about 15 minutes on 2 CPU cores):

- **Valid objects**: ``--prompts`` (50) questions over the real documents of :mod:`.documents`, each
  asked for a JSON object under one of ten schemas (strings, enums, integers, numbers, booleans,
  arrays, a nested object). Two arms, same prompt (the question names the fields): constrained
  (``json_schema``, grammar-constrained decoding) and unconstrained. Valid = the text parses and
  validates under the schema (``jsonschema``).
- **Tool calls**: 20 requests, each meant for one of four tools, by plain chat with the tools offered.
  ``tool_choice="required"`` (constrained) and ``"auto"`` (free text, calls parsed): call rate,
  valid arguments, right tool.
- **Cost**: decoding milliseconds per generated token, constrained vs unconstrained, over the same
  prompts (both arms cold: the context cache is emptied before each arm).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from ..engine import ReContextEngine
from ..results import ReplayResult

_TEXT = {"type": "string", "maxLength": 200}
_SCHEMAS: list[dict[str, Any]] = [
    {"answer": _TEXT},
    {"answer": _TEXT, "confident": {"type": "boolean"}},
    {"answer": _TEXT, "quote": _TEXT},
    {"kind": {"enum": ["name", "number", "date", "rule", "other"]}, "answer": _TEXT},
    {
        "answer": _TEXT,
        "keywords": {"type": "array", "items": {"type": "string", "maxLength": 40}, "maxItems": 5},
    },
    {"yes_no": {"enum": ["yes", "no", "unknown"]}, "reason": _TEXT},
    {"answer": _TEXT, "count": {"type": "integer"}},
    {"answer": _TEXT, "confidence": {"type": "number"}},
    {
        "answer": {
            "type": "object",
            "properties": {"text": _TEXT, "source": _TEXT},
            "required": ["text", "source"],
        }
    },
    {"topic": {"type": "string", "maxLength": 60}, "answer": _TEXT, "sure": {"type": "boolean"}},
]
SCHEMAS = [
    {"type": "object", "properties": props, "required": list(props), "additionalProperties": False}
    for props in _SCHEMAS
]

TOOLS: list[dict[str, Any]] = [
    {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 60}},
            "required": ["city"],
        },
    },
    {
        "name": "convert_currency",
        "description": "Convert an amount of money from one currency to another",
        "parameters": {
            "type": "object",
            "properties": {
                "amount": {"type": "number"},
                "from_currency": {"type": "string", "maxLength": 3},
                "to_currency": {"type": "string", "maxLength": 3},
            },
            "required": ["amount", "from_currency", "to_currency"],
        },
    },
    {
        "name": "search_documents",
        "description": "Search the company's documents for a query",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string", "maxLength": 80}},
            "required": ["query"],
        },
    },
    {
        "name": "send_email",
        "description": "Send an e-mail to a person",
        "parameters": {
            "type": "object",
            "properties": {
                "to": {"type": "string", "maxLength": 60},
                "subject": {"type": "string", "maxLength": 80},
                "body": {"type": "string", "maxLength": 200},
            },
            "required": ["to", "subject", "body"],
        },
    },
]
TOOL_REQUESTS: list[tuple[str, str]] = [
    ("What's the weather like in Oslo right now?", "get_weather"),
    ("Is it raining in Dublin today?", "get_weather"),
    ("How hot is it in Madrid at the moment?", "get_weather"),
    ("Tell me the current weather in Tokyo.", "get_weather"),
    ("Do I need a coat in Chicago today?", "get_weather"),
    ("Convert 250 US dollars to euros.", "convert_currency"),
    ("How many yen is 40 pounds?", "convert_currency"),
    ("What is 1000 euros in Swiss francs?", "convert_currency"),
    ("Change 75 Canadian dollars into US dollars.", "convert_currency"),
    ("How much is 12 euros in Danish kroner?", "convert_currency"),
    ("Find our internal documents about the travel expense policy.", "search_documents"),
    ("Search the docs for the onboarding checklist.", "search_documents"),
    ("Look up what our documents say about data retention.", "search_documents"),
    ("Where is the security incident runbook? Search for it.", "search_documents"),
    ("Find the meeting notes that mention the Q3 budget.", "search_documents"),
    ("Email Anna to say the report is ready.", "send_email"),
    ("Send Bob an e-mail cancelling tomorrow's meeting.", "send_email"),
    ("Write an email to the team saying the office is closed on Friday.", "send_email"),
    ("Let Carla know by email that her invoice was paid.", "send_email"),
    ("Send an e-mail to support asking for a password reset.", "send_email"),
]


@dataclass
class Outcome:
    """One call of one arm."""

    arm: str
    prompt: int
    valid: bool
    finish_reason: str
    output_tokens: int
    generate_s: float
    called: str | None = None
    expected: str | None = None


def _valid(value: Any, schema: dict[str, Any]) -> bool:
    import jsonschema  # type: ignore[import-untyped]

    try:
        jsonschema.validate(value, schema)
    except jsonschema.ValidationError:
        return False
    return True


def _parsed(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def _fields_question(question: str, schema: dict[str, Any]) -> str:
    fields = ", ".join(f'"{name}"' for name in schema["properties"])
    return f"{question}\nReply with a JSON object with the fields {fields}."


def _object_prompts(engine: ReContextEngine, count: int) -> list[tuple[list[str], str, dict[str, Any]]]:
    from .documents import document_cases

    cases = document_cases(engine.count_tokens, max_tokens=1024)
    # round robin over the families, so each kind of document is asked
    by_family: dict[str, list[Any]] = {}
    for case in cases:
        by_family.setdefault(case.meta["family"], []).append(case)
    ordered = [c for group in zip(*by_family.values()) for c in group]
    return [
        (
            case.documents,
            _fields_question(case.question, SCHEMAS[i % len(SCHEMAS)]),
            SCHEMAS[i % len(SCHEMAS)],
        )
        for i, case in enumerate(ordered[:count])
    ]


def _run_arm(
    engine: ReContextEngine,
    name: str,
    items: Sequence[Any],
    call: Callable[[Any], ReplayResult],
    judge: Callable[[int, ReplayResult], Outcome],
) -> list[Outcome]:
    if engine.context_cache is not None:
        engine.context_cache.clear()  # every arm starts cold
    outcomes = []
    for i, item in enumerate(tqdm(items, desc=name, unit="call")):
        outcomes.append(judge(i, call(item)))
    return outcomes


def run(
    engine: ReContextEngine,
    prompts: int = 50,
    max_new_tokens: int = 128,
    tool_requests: int = len(TOOL_REQUESTS),
) -> list[Outcome]:
    """Every arm of the benchmark, one after another."""
    objects = _object_prompts(engine, prompts)
    requests = TOOL_REQUESTS[:: max(1, len(TOOL_REQUESTS) // max(1, tool_requests))][:tool_requests]
    outcomes: list[Outcome] = []
    for arm, constrained in (("objects-constrained", True), ("objects-unconstrained", False)):

        def call(item: Any, constrained: bool = constrained) -> ReplayResult:
            documents, question, schema = item
            options = {"json_schema": schema} if constrained else {}
            return engine.answer(documents, question, max_new_tokens=max_new_tokens, **options)

        def judge(i: int, result: ReplayResult, arm: str = arm) -> Outcome:
            value = _parsed(result.text)
            ok = value is not None and _valid(value, objects[i][2])
            return Outcome(
                arm, i, ok, result.finish_reason, result.usage.output_tokens, result.timings["generate"]
            )

        outcomes += _run_arm(engine, arm, objects, call, judge)
    tools = {tool["name"]: tool for tool in TOOLS}
    for arm, choice in (("tools-required", "required"), ("tools-auto", "auto")):

        def call_tool(item: Any, choice: str = choice) -> ReplayResult:
            request, _ = item
            messages = [{"role": "user", "content": request}]
            return engine.chat(messages, tools=TOOLS, tool_choice=choice, max_new_tokens=max_new_tokens)

        def judge_tool(i: int, result: ReplayResult, arm: str = arm) -> Outcome:
            expected = requests[i][1]
            call = result.tool_calls[0] if result.tool_calls else None
            ok = call is not None and _valid(call.arguments, tools[call.name]["parameters"])
            return Outcome(
                arm,
                i,
                ok,
                result.finish_reason,
                result.usage.output_tokens,
                result.timings["generate"],
                called=call.name if call else None,
                expected=expected,
            )

        outcomes += _run_arm(engine, arm, requests, call_tool, judge_tool)
    return outcomes


@dataclass
class ArmSummary:
    arm: str
    calls: int
    valid_rate: float
    cut_off: int  # answers the token limit ended
    right_tool_rate: float | None
    call_rate: float | None
    ms_per_token: float


def summarize(outcomes: Sequence[Outcome]) -> list[ArmSummary]:
    summaries = []
    for arm in dict.fromkeys(o.arm for o in outcomes):
        rows = [o for o in outcomes if o.arm == arm]
        tools = rows[0].expected is not None
        tokens = sum(o.output_tokens for o in rows)
        summaries.append(
            ArmSummary(
                arm,
                len(rows),
                sum(o.valid for o in rows) / len(rows),
                sum(o.finish_reason == "length" for o in rows),
                sum(o.called == o.expected for o in rows) / len(rows) if tools else None,
                sum(o.called is not None for o in rows) / len(rows) if tools else None,
                1000 * sum(o.generate_s for o in rows) / max(1, tokens),
            )
        )
    return summaries


def report(summaries: Sequence[ArmSummary], model: str, seconds: float) -> str:
    def pct(value: float | None) -> str:
        return "-" if value is None else f"{100 * value:.0f}%"

    lines = [
        "# Structured output and tool calls",
        "",
        f"Model {model}; `python -m recontext_engine.bench.structured`, {seconds / 60:.1f} min.",
        "",
        "| arm | calls | valid | cut off by the token limit | tool called | right tool | decode ms/token |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {s.arm} | {s.calls} | {pct(s.valid_rate)} | {s.cut_off} | {pct(s.call_rate)} | "
        f"{pct(s.right_tool_rate)} | {s.ms_per_token:.1f} |"
        for s in summaries
    ]
    by_arm = {s.arm: s for s in summaries}
    constrained, free = by_arm.get("objects-constrained"), by_arm.get("objects-unconstrained")
    if constrained and free:
        ratio = constrained.ms_per_token / max(free.ms_per_token, 1e-9)
        lines += ["", f"Constrained decoding costs x{ratio:.2f} per token of the unconstrained decoding."]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m recontext_engine.bench.structured", description=__doc__)
    parser.add_argument("--out", default="bench-structured", help="output folder")
    parser.add_argument("--prompts", type=int, default=50, help="structured prompts (default 50)")
    parser.add_argument("--model", default=None, help="model (default: the embedded SmolLM2-135M-Instruct)")
    parser.add_argument(
        "--tool-requests", type=int, default=len(TOOL_REQUESTS), help="tool requests (default 20)"
    )
    parser.add_argument("--max-tokens", type=int, default=128)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    engine = ReContextEngine.from_pretrained(args.model)
    outcomes = run(engine, args.prompts, args.max_tokens, args.tool_requests)
    summaries = summarize(outcomes)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "outcomes.json").write_text(json.dumps([asdict(o) for o in outcomes], indent=1))
    text = report(summaries, engine.model_name, time.perf_counter() - started)
    (out / "report.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
