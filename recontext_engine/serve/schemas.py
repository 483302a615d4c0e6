"""Request bodies of the OpenAI-compatible routes, and their parsing from the raw request bytes.

Types are strict (``"0.5"`` is not a number, ``1`` is not a bool); unknown top-level fields that
OpenAI clients send (``frequency_penalty``, ``user``, ...) are ignored. Parsing is done here, not by
FastAPI, so every failure becomes one OpenAI error object naming the field.
"""

from __future__ import annotations

from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .errors import APIError

Role = Literal["system", "developer", "user", "assistant", "tool", "function"]


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")


class ChatMessage(_Strict):
    role: Role
    content: str = ""

    @field_validator("content", mode="plain")
    @classmethod
    def _text(cls, value: Any) -> str:
        """A string, a list of ``{"type": "text", "text": ...}`` parts (joined by newlines) or null."""
        if value is None:
            return ""
        if isinstance(value, str):
            return value
        if isinstance(value, list):
            texts = []
            for part in value:
                if not (isinstance(part, dict) and part.get("type") == "text"):
                    raise ValueError("only text content parts are supported")
                if not isinstance(part.get("text"), str):
                    raise ValueError("a text content part needs a string 'text'")
                texts.append(part["text"])
            return "\n".join(texts)
        raise ValueError("content must be a string or a list of text parts")

    def plain(self) -> dict[str, str]:
        """``{"role", "content"}`` as the engine and the messages rule take it (developer = system)."""
        role = {"developer": "system", "function": "tool"}.get(self.role, self.role)
        return {"role": role, "content": self.content}


class ReContextOptions(BaseModel):
    """The ``recontext`` extension field; ranges are checked by :class:`~recontext_engine.ReplayConfig`."""

    model_config = ConfigDict(strict=True, extra="forbid")

    rounds: int | None = None
    top_k: int | None = None


class StreamOptions(_Strict):
    include_usage: bool = False


class ChatCompletionRequest(_Strict):
    messages: list[ChatMessage] = Field(min_length=1)
    model: str | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    stop: str | list[str] | None = None
    seed: int | None = None
    n: int | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    tools: list[Any] | None = None
    documents: list[str] | None = None
    recontext: ReContextOptions | None = None

    @field_validator("stop", mode="plain")
    @classmethod
    def _stop(cls, value: Any) -> str | list[str] | None:
        if value is None or isinstance(value, str):
            return value
        if isinstance(value, list) and all(isinstance(s, str) for s in value):
            return value
        raise ValueError("stop must be a string or a list of strings")

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


class EvidenceRequest(_Strict):
    documents: list[str] = Field(min_length=1)
    question: str
    model: str | None = None
    recontext: ReContextOptions | None = None


Body = TypeVar("Body", bound=BaseModel)


def parse_body(raw: bytes, schema: type[Body]) -> Body:
    """The request body as ``schema``, or an :class:`APIError` (400) that names the bad field."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise APIError(
            400, f"The request body is not valid UTF-8 (byte {exc.start}: {exc.reason})", code="invalid_utf8"
        ) from None
    if not text.strip():
        raise APIError(400, "The request body is empty; send a JSON object", code="invalid_json")
    try:
        return schema.model_validate_json(text)
    except ValidationError as exc:
        raise _as_api_error(exc) from None


def _as_api_error(exc: ValidationError) -> APIError:
    error = exc.errors(include_url=False)[0]
    if error["type"] == "json_invalid":
        detail = error.get("ctx", {}).get("error", error["msg"])
        return APIError(400, f"The request body is not valid JSON: {detail}", code="invalid_json")
    if error["type"] == "model_type" and not error["loc"]:
        return APIError(400, "The request body must be a JSON object", code="invalid_json")
    param = ".".join(str(part) for part in error["loc"]) or None
    message = error["msg"].removeprefix("Value error, ")
    if error["type"] == "missing":
        message = "This field is required"
    return APIError(400, f"Invalid value for '{param}': {message}", param=param, code="invalid_value")
