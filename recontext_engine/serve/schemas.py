"""Request bodies of the OpenAI-compatible routes, and their parsing from the raw request bytes.

Types are strict (``"0.5"`` is not a number, ``1`` is not a bool) and every value the OpenAI API
bounds is checked to OpenAI's range, under OpenAI's field name. A field OpenAI defines that this
server does not honour is accepted only with its no-op value (``frequency_penalty: 0``,
``logprobs: false``, ``tool_choice: "none"``, ...) and refused otherwise (:func:`unsupported`); a
field OpenAI does not define is refused, as OpenAI refuses it ("Unrecognized request argument").
Parsing is done here, not by FastAPI, so every failure becomes one OpenAI error object naming the field.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .errors import APIError

Role = Literal["system", "developer", "user", "assistant", "tool", "function"]
INT64 = 2**63


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")


class ChatMessage(_Strict):
    role: Role
    content: str = ""
    name: str | None = None  # the participant's name: OpenAI's models may read it, ours do not need it
    tool_call_id: str | None = None
    tool_calls: list[Any] | None = None
    refusal: str | None = None

    @field_validator("content", mode="plain", json_schema_input_type=str | list[dict[str, str]] | None)
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

    rounds: int | None = Field(None, ge=0, le=8)
    top_k: int | None = Field(None, ge=1, le=512)


class StreamOptions(_Strict):
    include_usage: bool = False


Penalty = Annotated[float | None, Field(ge=-2.0, le=2.0)]


class ChatCompletionRequest(_Strict):
    messages: list[ChatMessage] = Field(min_length=1)
    model: str | None = None
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, ge=0.0, le=1.0)
    stop: str | list[str] | None = None
    seed: int | None = Field(None, ge=-INT64, lt=INT64)
    n: int | None = Field(None, ge=1, le=128)
    stream: bool = False
    stream_options: StreamOptions | None = None
    documents: list[str] | None = None
    recontext: ReContextOptions | None = None
    # OpenAI's fields this server accepts only with their no-op value (see ``unsupported``).
    frequency_penalty: Penalty = None
    presence_penalty: Penalty = None
    logprobs: bool | None = None
    top_logprobs: int | None = Field(None, ge=0, le=20)
    logit_bias: dict[str, int] | None = None
    response_format: dict[str, Any] | None = None
    tools: list[Any] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    functions: list[Any] | None = None
    function_call: str | dict[str, Any] | None = None
    modalities: list[str] | None = None
    store: bool | None = None
    service_tier: str | None = None
    reasoning_effort: str | None = None
    # Accepted and without effect here: identifiers for the caller's own bookkeeping.
    user: str | None = None
    metadata: dict[str, str] | None = None
    prompt_cache_key: str | None = None
    safety_identifier: str | None = None

    @field_validator("stop", mode="plain", json_schema_input_type=str | list[str] | None)
    @classmethod
    def _stop(cls, value: Any) -> str | list[str] | None:
        if value is None or isinstance(value, str):
            return value
        if isinstance(value, list) and len(value) <= 4 and all(isinstance(s, str) for s in value):
            return value
        raise ValueError("stop must be a string or a list of at most 4 strings")

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


# Each field OpenAI defines that this server does not honour, and the values that change nothing.
_NO_OP_VALUES: dict[str, tuple[Any, ...]] = {
    "n": (1,),
    "frequency_penalty": (0, 0.0),
    "presence_penalty": (0, 0.0),
    "logprobs": (False,),
    "top_logprobs": (0,),
    "logit_bias": ({},),
    "response_format": ({"type": "text"},),
    "tools": ([],),
    "tool_choice": ("none",),
    "parallel_tool_calls": (True, False),  # only means something with tools, which are refused
    "functions": ([],),
    "function_call": ("none",),
    "modalities": (["text"],),
    "store": (False,),
    "service_tier": ("auto", "default"),
}


def unsupported(body: ChatCompletionRequest) -> APIError | None:
    """The error for the first field this server does not honour set to a value that would matter."""
    for name, no_ops in _NO_OP_VALUES.items():
        value = getattr(body, name)
        if value is not None and value not in no_ops:
            allowed = " or ".join(repr(v) for v in no_ops)
            return APIError(
                400,
                f"'{name}' is not supported by this server; leave it out or set it to {allowed}",
                param=name,
                code="unsupported_parameter",
            )
    for i, message in enumerate(body.messages):
        if message.tool_calls:
            return APIError(
                400,
                "Tool calls in messages are not supported by this server",
                param=f"messages.{i}.tool_calls",
                code="unsupported_parameter",
            )
    return None


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
    if error["type"] == "extra_forbidden":
        return APIError(
            400, f"Unrecognized request argument supplied: {param}", param=param, code="unknown_parameter"
        )
    message = error["msg"].removeprefix("Value error, ")
    if error["type"] == "missing":
        message = "This field is required"
    return APIError(400, f"Invalid value for '{param}': {message}", param=param, code="invalid_value")
