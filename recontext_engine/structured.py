"""The shape of an answer: JSON under a schema, tool calls, or an answer citing its evidence.

Everything here is text and JSON Schema; the backends enforce the schema token by token
(grammar-constrained decoding: :mod:`recontext_engine.grammar` on transformers, vLLM's own
structured outputs on vLLM). Tools are rendered into the system prompt in the Hermes format that
Qwen, Hermes and SmolLM3 chat templates use, so any model can read them::

    <tool_call>
    {"name":"get_weather","arguments":{"city":"Cork"}}
    </tool_call>

``tool_choice="required"`` or a tool's name constrain the whole answer to one such call (the JSON
alone); ``"auto"`` lets the model answer in text or call tools, and the calls are parsed out.
"""

from __future__ import annotations

import contextlib
import json
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from .errors import InputError

if TYPE_CHECKING:
    from .config import GenerationConfig

TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"
TOOL_CHOICES = ("auto", "none", "required")
# OpenAI's rule for function names; it keeps names safe inside prompts and JSON alike.
_TOOL_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_TOOL_BLOCK = re.compile(re.escape(TOOL_CALL_OPEN) + r"(.*?)(?:" + re.escape(TOOL_CALL_CLOSE) + r"|\Z)", re.S)
_XGRAMMAR_LOG_PREFIX = re.compile(r"^\[[^\]]*\]\s*\S+:\d+:\s*")
EMPTY_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}
MAX_SCHEMA_CHARS = 100_000
MAX_PATTERN_REPEAT = 256
_QUANTIFIER = re.compile(r"\{(\d+)(?:,(\d*))?\}")  # {n}, {n,} and {n,m} in a regex


@dataclass(frozen=True)
class ToolSpec:
    """A tool the model may call: its name, what it does, and a JSON Schema of its arguments."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = field(default_factory=lambda: dict(EMPTY_PARAMETERS))

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _TOOL_NAME.fullmatch(self.name):
            raise InputError(f"tool name must be 1-64 letters, digits, '_', '.' or '-', got {self.name!r}")
        if self.name in TOOL_CHOICES:  # tool_choice names a tool by its name: it must not be a mode
            raise InputError(f"a tool cannot be named {self.name!r}: tool_choice uses that word")
        if not isinstance(self.parameters, Mapping) or self.parameters.get("type", "object") != "object":
            raise InputError(f"tool {self.name!r}: parameters must be a JSON Schema of type 'object'")
        check_json_schema(dict(self.parameters), f"tool {self.name!r} parameters")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | ToolSpec) -> ToolSpec:
        """From OpenAI's ``{"type": "function", "function": {...}}`` or a flat ``{"name", ...}``."""
        if isinstance(data, ToolSpec):
            return data
        if not isinstance(data, Mapping):
            raise InputError(f"a tool must be a dict with a name, got {type(data).__name__}")
        if data.get("type", "function") != "function":
            raise InputError(f"only function tools are supported, got type {data.get('type')!r}")
        function = data.get("function", data)
        unknown = set(function) - {"name", "description", "parameters", "strict", "type", "function"}
        if unknown:
            raise InputError(f"unknown tool field(s): {', '.join(sorted(unknown))}")
        return cls(
            name=function.get("name", ""),
            description=str(function.get("description") or ""),
            parameters=dict(function.get("parameters") or EMPTY_PARAMETERS),
        )

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "parameters": self.parameters}


@dataclass(frozen=True)
class ToolCall:
    """A call the model made: ``arguments`` is the parsed JSON object."""

    name: str
    arguments: dict[str, Any]
    id: str = field(default_factory=lambda: f"call_{uuid.uuid4().hex[:24]}")

    @property
    def arguments_json(self) -> str:
        return json.dumps(self.arguments, ensure_ascii=False)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "arguments": self.arguments}


def check_json_schema(schema: Any, what: str = "json_schema") -> None:
    """Refuse a schema the grammar compiler cannot enforce, with its reason (one InputError)."""
    if not isinstance(schema, Mapping):
        raise InputError(f"{what} must be a JSON Schema object (a dict), got {type(schema).__name__}")
    try:
        text = json.dumps(schema)
    except (TypeError, ValueError) as error:
        raise InputError(f"{what} is not JSON: {error}") from None
    if len(text) > MAX_SCHEMA_CHARS:
        raise InputError(f"{what} takes {len(text):,} characters; at most {MAX_SCHEMA_CHARS:,} are accepted")
    for pattern in _patterns(schema):
        # the grammar of a regex repetition grows with its count, its build time with the square
        counts = [int(n) for pair in _QUANTIFIER.findall(pattern) for n in pair if n]
        if max(counts, default=0) > MAX_PATTERN_REPEAT:
            raise InputError(
                f"{what}: pattern {pattern[:60]!r} repeats {max(counts)} times; at most "
                f"{MAX_PATTERN_REPEAT} are accepted"
            )
    reason = _schema_problem(text)
    if reason is not None:
        raise InputError(f"{what} cannot be enforced: {reason}")


def _patterns(node: Any) -> list[str]:
    """Every ``pattern`` string anywhere in a schema."""
    if isinstance(node, Mapping):
        own = [node["pattern"]] if isinstance(node.get("pattern"), str) else []
        return own + [p for value in node.values() for p in _patterns(value)]
    if isinstance(node, list):
        return [p for value in node for p in _patterns(value)]
    return []


@lru_cache(maxsize=256)
def _schema_problem(text: str) -> str | None:
    """Why xgrammar cannot build a grammar for the schema ``text``, or None; cached, since every
    copy of a config checks its schema again."""
    import xgrammar

    try:
        xgrammar.Grammar.from_json_schema(text, any_whitespace=False)
    except Exception as error:  # xgrammar raises RuntimeError with its C++ log line
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        return _XGRAMMAR_LOG_PREFIX.sub("", first)
    return None


def tool_call_schema(tools: Sequence[ToolSpec]) -> dict[str, Any]:
    """One call of one of ``tools``: ``{"name": <a tool>, "arguments": <its parameters>}``."""
    options = [
        {
            "type": "object",
            "properties": {"name": {"const": tool.name}, "arguments": tool.parameters},
            "required": ["name", "arguments"],
            "additionalProperties": False,
        }
        for tool in tools
    ]
    return options[0] if len(options) == 1 else {"anyOf": options}


def cite_schema(num_evidence: int) -> dict[str, Any]:
    """An answer and the numbers of the replayed sentences it rests on (1-based, as numbered)."""
    ids: dict[str, Any] = {"type": "integer", "enum": list(range(1, num_evidence + 1))}
    # maxItems: a small model may otherwise list ids until the token limit cuts the JSON off
    cited = (
        {"type": "array", "items": ids, "maxItems": num_evidence}
        if num_evidence
        else {"type": "array", "maxItems": 0}
    )
    return {
        "type": "object",
        "properties": {"answer": {"type": "string"}, "evidence_ids": cited},
        "required": ["answer", "evidence_ids"],
        "additionalProperties": False,
    }


def tools_instructions(tools: Sequence[ToolSpec]) -> str:
    """The tools as the system prompt states them (Hermes format)."""
    listed = "\n".join(compact_json(tool.to_dict()) for tool in tools)
    return (
        "You can call these tools:\n<tools>\n"
        f"{listed}\n</tools>\n"
        "To call a tool, answer with only:\n"
        f'{TOOL_CALL_OPEN}\n{{"name":"<tool name>","arguments":{{<the arguments>}}}}\n{TOOL_CALL_CLOSE}\n'
        "Otherwise, answer the user directly."
    )


def compact_json(value: Any) -> str:
    """JSON as the grammar makes the model write it (no spaces: ``recontext_engine.grammar``), so
    the examples and earlier calls in the prompt look like what the model is allowed to write."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def format_tool_call(name: str, arguments: Mapping[str, Any] | str) -> str:
    """How an earlier call appears in the conversation (an assistant turn), in the format above."""
    if isinstance(arguments, str):
        with contextlib.suppress(ValueError):  # not JSON: shown as the text it is
            arguments = json.loads(arguments) if arguments.strip() else {}
    body = compact_json({"name": name, "arguments": arguments})
    return f"{TOOL_CALL_OPEN}\n{body}\n{TOOL_CALL_CLOSE}"


def _call_from_json(text: str, tools: Mapping[str, ToolSpec]) -> ToolCall | None:
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict) or data.get("name") not in tools:
        return None
    arguments = data.get("arguments", data.get("parameters", {}))
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return None
    return ToolCall(data["name"], arguments) if isinstance(arguments, dict) else None


def parse_tool_calls(
    text: str, tools: Sequence[ToolSpec], forced: bool = False
) -> tuple[str, list[ToolCall]]:
    """(the text left for the user, the calls) of an answer.

    ``forced``: the answer is one call's JSON (constrained decoding made it so). Otherwise calls are
    ``<tool_call>`` blocks (the closing tag may be cut off); a block that does not parse to a known
    tool leaves the whole text as the answer, as vLLM's Hermes parser does.
    """
    by_name = {tool.name: tool for tool in tools}
    if forced:
        call = _call_from_json(text.strip(), by_name)
        return ("", [call]) if call is not None else (text, [])
    start = text.find(TOOL_CALL_OPEN)
    if start < 0:
        return text, []
    calls = [_call_from_json(block.strip(), by_name) for block in _TOOL_BLOCK.findall(text[start:])]
    if not calls or any(call is None for call in calls):
        return text, []
    return text[:start].strip(), [call for call in calls if call is not None]


class ToolCallText:
    """Streams the text of an ``"auto"`` answer and holds back what may open a ``<tool_call>``.

    ``add`` returns the text safe to show; after an opening tag nothing more is shown (the calls
    come with the result). ``rest`` is the held-back text, shown when no call parses after all.
    """

    def __init__(self) -> None:
        self.text = ""
        self.shown = 0
        self.calling = False

    def add(self, piece: str) -> str:
        self.text += piece
        if self.calling:
            return ""
        at = self.text.find(TOOL_CALL_OPEN)
        if at >= 0:
            self.calling = True
            return self._show(at)
        # the longest end of the text that could still grow into the opening tag
        hold = next(
            (
                n
                for n in range(min(len(TOOL_CALL_OPEN) - 1, len(self.text)), 0, -1)
                if TOOL_CALL_OPEN.startswith(self.text[-n:])
            ),
            0,
        )
        return self._show(len(self.text) - hold)

    def rest(self) -> str:
        return self._show(len(self.text))

    def _show(self, upto: int) -> str:
        piece = self.text[self.shown : upto]
        self.shown = max(self.shown, upto)
        return piece


def answer_schema(generation: GenerationConfig, num_evidence: int) -> dict[str, Any] | None:
    """The JSON Schema the backend enforces on this answer, or None for free text."""
    if generation.json_schema is not None:
        return generation.json_schema
    if generation.forces_tool_call:
        chosen = [t for t in generation.tools if generation.tool_choice in ("required", t.name)]
        return tool_call_schema(chosen)
    if generation.cite_evidence:
        return cite_schema(num_evidence)
    return None


def backend_generation(generation: GenerationConfig, num_evidence: int) -> GenerationConfig:
    """The settings a backend decodes with: the answer's schema as ``json_schema``; the tools are
    left out (the prompt states them, and the engine parses the calls)."""
    schema = answer_schema(generation, num_evidence)
    return replace(generation, json_schema=schema, tools=(), tool_choice="auto", cite_evidence=False)


class AnswerText:
    """What a caller sees of the generated text, for the answer's form.

    A forced tool call shows no text (it becomes a call); an ``"auto"`` answer shows text up to a
    ``<tool_call>``; anything else shows all. :meth:`final` parses the full text at the end.
    """

    def __init__(self, generation: GenerationConfig) -> None:
        self.tools = generation.tools
        self.forced = generation.forces_tool_call
        self.structured = generation.json_schema is not None or generation.cite_evidence
        self.watch = ToolCallText() if generation.offers_tools and not self.forced else None

    def add(self, piece: str) -> str:
        if self.forced:
            return ""
        return self.watch.add(piece) if self.watch is not None else piece

    def final(self, text: str) -> tuple[str, list[ToolCall], Any, str]:
        """(text for the user, tool calls, the parsed JSON or None, text still to show)."""
        if self.forced or self.watch is not None:
            content, calls = parse_tool_calls(text, self.tools, forced=self.forced)
            # no call after all (cut off, or not a known tool): the text held back is the answer
            unshown = self.watch.rest() if self.watch is not None else text
            return content, calls, None, "" if calls else unshown
        parsed = None
        if self.structured:
            try:
                parsed = json.loads(text)
            except ValueError:  # cut off by the token limit
                parsed = None
        return text, [], parsed, ""
