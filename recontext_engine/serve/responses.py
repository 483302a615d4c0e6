"""OpenAI response objects: ``chat.completion``, ``chat.completion.chunk`` (SSE) and usage.

ReContext adds two top-level fields: ``evidence`` (the replayed sentences with their provenance,
the fields of :class:`~recontext_engine.Evidence`) and ``replayed`` (whether any was replayed).
A stream sends them in its last chunk before ``data: [DONE]``: the usage chunk when
``stream_options.include_usage`` is set, else the chunk that carries ``finish_reason``.

Tool calls are ``message.tool_calls`` (``content`` null when the model said nothing besides,
``finish_reason`` "tool_calls"); a stream sends each call whole, in one chunk after the text,
which OpenAI's clients assemble as they assemble calls sent in pieces.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from ..results import Evidence, ReplayResult
from ..structured import ToolCall

DONE = "data: [DONE]\n\n"


def evidence_list(evidence: list[Evidence]) -> list[dict[str, Any]]:
    return [e.to_dict() for e in evidence]


def usage_object(result: ReplayResult) -> dict[str, Any]:
    usage = result.usage
    return {
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.total_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cached_tokens},
    }


def replay_fields(result: ReplayResult) -> dict[str, Any]:
    return {"evidence": evidence_list(result.evidence), "replayed": bool(result.evidence)}


def tool_call_object(call: ToolCall) -> dict[str, Any]:
    function = {"name": call.name, "arguments": call.arguments_json}
    return {"id": call.id, "type": "function", "function": function}


def sse(payload: dict[str, Any]) -> str:
    return f"data: {json.dumps(payload, ensure_ascii=False, separators=(',', ':'))}\n\n"


@dataclass
class Completion:
    """The identity shared by a response and all its chunks."""

    model: str
    id: str = field(default_factory=lambda: f"chatcmpl-{uuid.uuid4().hex}")
    created: int = field(default_factory=lambda: int(time.time()))
    parallel_tool_calls: bool = True  # False: only the first call is sent

    def tool_calls(self, result: ReplayResult) -> list[ToolCall]:
        return result.tool_calls if self.parallel_tool_calls else result.tool_calls[:1]

    def _head(self, kind: str) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": kind,
            "created": self.created,
            "model": self.model,
            "system_fingerprint": None,
        }

    def full(self, result: ReplayResult) -> dict[str, Any]:
        calls = self.tool_calls(result)
        message: dict[str, Any] = {"role": "assistant", "content": result.text or (None if calls else "")}
        if calls:
            message["tool_calls"] = [tool_call_object(call) for call in calls]
        choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": result.finish_reason}
        return {
            **self._head("chat.completion"),
            "choices": [choice],
            "usage": usage_object(result),
            **replay_fields(result),
        }

    def chunk(
        self, delta: dict[str, Any], finish_reason: str | None = None, include_usage: bool = False
    ) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        payload = {**self._head("chat.completion.chunk"), "choices": [choice]}
        if include_usage:
            payload["usage"] = None  # as OpenAI does: null in every chunk but the usage chunk
        return payload

    def closing_chunks(self, result: ReplayResult, include_usage: bool) -> list[dict[str, Any]]:
        """A chunk per tool call, the finish chunk, then the usage chunk if asked; the last one
        carries the evidence."""
        calls = [
            self.chunk({"tool_calls": [{"index": i, **tool_call_object(call)}]}, include_usage=include_usage)
            for i, call in enumerate(self.tool_calls(result))
        ]
        finish = self.chunk({}, result.finish_reason, include_usage)
        if not include_usage:
            return [*calls, {**finish, **replay_fields(result)}]
        usage = {
            **self._head("chat.completion.chunk"),
            "choices": [],
            "usage": usage_object(result),
            **replay_fields(result),
        }
        return [*calls, finish, usage]
