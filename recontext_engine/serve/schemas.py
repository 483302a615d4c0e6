"""Request bodies of the OpenAI-compatible routes, and their parsing from the raw request bytes.

Types are strict (``"0.5"`` is not a number, ``1`` is not a bool) and every value the OpenAI API
bounds is checked to OpenAI's range, under OpenAI's field name. A field OpenAI defines that this
server does not honour is accepted only with its no-op value (``frequency_penalty: 0``,
``logprobs: false``, ...) and refused otherwise (:func:`unsupported`); a field OpenAI does not
define is refused, as OpenAI refuses it ("Unrecognized request argument"), nested ones too (in
``response_format``, ``tools``, ``tool_choice`` and a message's ``tool_calls``).
Parsing is done here, not by FastAPI, so every failure becomes one OpenAI error object naming the field.

Structured answers: ``response_format`` (``text``, ``json_object``, ``json_schema``) and function
``tools`` with ``tool_choice`` are parsed here; the engine checks what only it can (that a schema
can be enforced, that ``tool_choice`` names a given tool) when :mod:`.calls` builds the config.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeVar, cast

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ..structured import TOOL_CHOICES, format_tool_call
from .errors import APIError

Role = Literal["system", "developer", "user", "assistant", "tool", "function"]
INT64 = 2**63


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")


class FunctionCall(_Strict):
    name: str
    arguments: str  # JSON, as the model wrote it (OpenAI's form: a string, not an object)


class MessageToolCall(_Strict):
    """A call an earlier assistant message made, as a chat completion returned it."""

    id: str
    type: Literal["function"]
    function: FunctionCall


class ChatMessage(_Strict):
    role: Role
    content: str = ""
    name: str | None = None  # the participant's name: OpenAI's models may read it, ours do not need it
    tool_call_id: str | None = None  # a tool message: the call it answers
    tool_calls: list[MessageToolCall] | None = None  # an assistant message: the calls it made
    refusal: str | None = None

    @model_validator(mode="after")
    def _tool_fields(self) -> ChatMessage:
        if self.tool_calls is not None and self.role != "assistant":
            raise ValueError(f"only assistant messages have tool_calls, not {self.role} messages")
        if self.role == "tool" and self.tool_call_id is None:
            raise ValueError("a tool message needs the tool_call_id of the call it answers")
        return self

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
        """``{"role", "content"}`` as the engine and the messages rule take it (developer = system);
        an assistant's tool calls join its text in the form the model was told to call tools in."""
        role = {"developer": "system", "function": "tool"}.get(self.role, self.role)
        calls = [format_tool_call(c.function.name, c.function.arguments) for c in self.tool_calls or ()]
        return {"role": role, "content": "\n".join(part for part in [self.content, *calls] if part)}


class ResponseFormatText(_Strict):
    type: Literal["text"]


class ResponseFormatJSONObject(_Strict):
    type: Literal["json_object"]


class JSONSchemaFormat(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")
    description: str | None = None
    schema_: dict[str, Any] | None = Field(None, alias="schema")  # None: any JSON object
    strict: bool | None = None  # constrained decoding enforces the schema either way


class ResponseFormatJSONSchema(_Strict):
    type: Literal["json_schema"]
    json_schema: JSONSchemaFormat


ResponseFormat = ResponseFormatText | ResponseFormatJSONObject | ResponseFormatJSONSchema
_RESPONSE_FORMATS: dict[str, type[_Strict]] = {
    "text": ResponseFormatText,
    "json_object": ResponseFormatJSONObject,
    "json_schema": ResponseFormatJSONSchema,
}


class FunctionDefinition(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")  # recontext_engine.ToolSpec's rule
    description: str | None = None
    parameters: dict[str, Any] | None = None  # a JSON Schema of type object; None: no arguments
    strict: bool | None = None  # constrained decoding enforces the parameters where a call is forced


class FunctionTool(_Strict):
    type: Literal["function"]
    function: FunctionDefinition


class ToolChoiceFunction(_Strict):
    name: str


class NamedToolChoice(_Strict):
    type: Literal["function"]
    function: ToolChoiceFunction


ToolChoice = Literal["auto", "none", "required"] | NamedToolChoice
Nested = TypeVar("Nested", bound=BaseModel)


def _nested(value: Any, model: type[Nested]) -> Nested:
    """``value`` as ``model``; its first error as a ValueError naming the nested field."""
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        where = ".".join(str(part) for part in error["loc"])
        if error["type"] == "extra_forbidden":
            raise ValueError(f"unrecognized field '{where}'") from None
        message = "this field is required" if error["type"] == "missing" else error["msg"]
        raise ValueError(f"{where}: {message}" if where else message) from None


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
    response_format: ResponseFormat | None = None
    tools: list[FunctionTool] | None = None
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None  # False: at most one call in the answer
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

    @field_validator("response_format", mode="plain", json_schema_input_type=ResponseFormat | None)
    @classmethod
    def _response_format(cls, value: Any) -> ResponseFormat | None:
        if value is None:
            return None
        kind = value.get("type") if isinstance(value, dict) else None
        if not isinstance(kind, str) or kind not in _RESPONSE_FORMATS:
            known = ", ".join(repr(k) for k in _RESPONSE_FORMATS)
            if not isinstance(value, dict):
                raise ValueError(f"response_format must be an object with a 'type' ({known})")
            raise ValueError(f"unsupported response_format type {kind!r}; the supported types are {known}")
        return cast(ResponseFormat, _nested(value, _RESPONSE_FORMATS[kind]))

    @field_validator("tool_choice", mode="plain", json_schema_input_type=ToolChoice | None)
    @classmethod
    def _tool_choice(cls, value: Any) -> ToolChoice | None:
        if value is None or (isinstance(value, str) and value in TOOL_CHOICES):
            return cast(ToolChoice | None, value)
        if isinstance(value, dict):
            return _nested(value, NamedToolChoice)
        raise ValueError(
            "tool_choice must be 'auto', 'none', 'required' or "
            '{"type": "function", "function": {"name": <a tool\'s name>}}'
        )

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)

    def answer_form(self) -> dict[str, Any]:
        """The engine options ``json_schema``, ``tools`` and ``tool_choice`` this request sets."""
        options: dict[str, Any] = {}
        form = self.response_format
        if isinstance(form, ResponseFormatJSONObject):
            options["json_schema"] = {"type": "object"}
        elif isinstance(form, ResponseFormatJSONSchema):
            schema = form.json_schema.schema_
            options["json_schema"] = schema if schema is not None else {"type": "object"}
        if self.tools:
            options["tools"] = [tool.model_dump(exclude_none=True) for tool in self.tools]
        if isinstance(self.tool_choice, NamedToolChoice):
            options["tool_choice"] = self.tool_choice.function.name
        elif self.tool_choice is not None:
            options["tool_choice"] = self.tool_choice
        return options


# Each field OpenAI defines that this server does not honour, and the values that change nothing.
_NO_OP_VALUES: dict[str, tuple[Any, ...]] = {
    "n": (1,),
    "frequency_penalty": (0, 0.0),
    "presence_penalty": (0, 0.0),
    "logprobs": (False,),
    "top_logprobs": (0,),
    "logit_bias": ({},),
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
