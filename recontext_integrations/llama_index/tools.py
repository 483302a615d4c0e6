"""Tool calls of ``ReContextLLM`` in LlamaIndex's forms, and the engine's options they become.

LlamaIndex tools (``BaseTool``) go to the engine as OpenAI tool dicts (``tool.metadata.to_openai_tool``)
with ``tool_choice``; the engine states them in the system prompt and parses the calls. A call
comes back as a ``ToolCallBlock`` in ``ChatResponse.message.blocks`` (the form
llama-index-llms-openai writes and ``get_tool_calls_from_response`` reads); an assistant message
that carries calls (those blocks, or OpenAI-style ``additional_kwargs["tool_calls"]``) goes back
to the model with its calls written out by :func:`recontext_engine.format_tool_call`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from llama_index.core.base.llms.types import ChatMessage, ToolCallBlock
from llama_index.core.llms.llm import ToolSelection
from llama_index.core.llms.utils import parse_partial_json

from recontext_engine import ToolSpec, format_tool_call

_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
_ROLES |= {"model": "assistant", "chatbot": "assistant", "tool": "tool", "function": "tool"}
# Keys of ``to_message_dicts`` items besides role and content: the rendered calls of the message.
CALLS_KEY = "tool_calls"


def tool_dict(tool: Any) -> Any:
    """A LlamaIndex ``BaseTool`` as an OpenAI tool dict; a dict or ``ToolSpec`` as it is."""
    metadata = getattr(tool, "metadata", None)
    if metadata is not None and hasattr(metadata, "to_openai_tool"):
        return metadata.to_openai_tool(skip_length_check=True)
    return tool


def engine_tool_choice(choice: str | dict[str, Any] | None, required: bool) -> str | dict[str, Any]:
    """LlamaIndex's ``tool_choice``/``tool_required`` as the engine's ``tool_choice``.

    An explicit choice wins ("auto", "none", "required", a tool's name or OpenAI's
    ``{"type": "function", "function": {"name": ...}}``); else "required" or "auto".
    """
    if choice is not None:
        return choice
    return "required" if required else "auto"


def _call_parts(call: Any) -> tuple[str, str, Any]:
    """(id, name, arguments) of an OpenAI-style tool call: a dict (OpenAI's nested form or the
    engine's flat one) or an object with ``.id`` and ``.function.name/.arguments`` (the openai SDK)."""
    if isinstance(call, Mapping):
        function = call.get("function") or call
        return str(call.get("id") or ""), str(function.get("name", "")), function.get("arguments", {})
    function = getattr(call, "function", call)
    return str(getattr(call, "id", "") or ""), str(getattr(function, "name", "")), function.arguments


def message_calls(message: ChatMessage) -> list[tuple[str, str, Any]]:
    """(id, name, arguments) of each call an assistant message carries: its ``ToolCallBlock``s, or
    else its ``additional_kwargs["tool_calls"]``."""
    blocks = [b for b in message.blocks if isinstance(b, ToolCallBlock)]
    if blocks:
        return [(b.tool_call_id or "", b.tool_name, b.tool_kwargs) for b in blocks]
    return [_call_parts(call) for call in message.additional_kwargs.get("tool_calls") or []]


def to_message_dicts(messages: Sequence[ChatMessage]) -> list[dict[str, str]]:
    """``{"role", "content"}`` dicts; an assistant message's calls, written out, under ``tool_calls``
    (:func:`with_calls` joins them to the content for the chat template)."""
    result = []
    for message in messages:
        item = {"role": _ROLES.get(message.role.value, "user"), "content": message.content or ""}
        calls = message_calls(message)
        if calls:
            item[CALLS_KEY] = "\n".join(format_tool_call(name, arguments) for _, name, arguments in calls)
        result.append(item)
    return result


def with_calls(messages: Sequence[Mapping[str, str]]) -> list[dict[str, str]]:
    """The messages as the model reads them in a chat: each assistant turn's calls after its text."""
    return [
        {
            "role": m["role"],
            "content": "\n".join(p for p in (m.get("content", ""), m.get(CALLS_KEY, "")) if p),
        }
        for m in messages
    ]


def without_calls(messages: Sequence[Mapping[str, str]]) -> list[dict[str, str]]:
    """The messages with only their text: what the context/question split reads (call markup is
    not evidence; the tool results are)."""
    return [{"role": m["role"], "content": m.get("content", "")} for m in messages]


def call_blocks(calls: Sequence[Mapping[str, Any]]) -> list[ToolCallBlock]:
    """The engine's calls (``ToolCall.to_dict()``: id, name, arguments) as ``ToolCallBlock``s."""
    return [
        ToolCallBlock(tool_call_id=call["id"], tool_name=call["name"], tool_kwargs=dict(call["arguments"]))
        for call in calls
    ]


def _arguments(arguments: Any) -> dict[str, Any]:
    if isinstance(arguments, str):
        try:
            arguments = parse_partial_json(arguments) if arguments.strip() else {}
        except (ValueError, TypeError, json.JSONDecodeError):
            return {}
    return dict(arguments) if isinstance(arguments, Mapping) else {}


def tool_selections(message: ChatMessage) -> list[ToolSelection]:
    """The calls of an assistant message as LlamaIndex ``ToolSelection``s."""
    return [
        ToolSelection(tool_id=call_id, tool_name=name, tool_kwargs=_arguments(arguments))
        for call_id, name, arguments in message_calls(message)
    ]


def engine_tools(tools: Any) -> list[Any]:
    """``tools=`` of a call as the engine takes it (BaseTools converted, dicts and ToolSpecs kept)."""
    return [tool if isinstance(tool, ToolSpec) else tool_dict(tool) for tool in tools]
