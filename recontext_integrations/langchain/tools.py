"""Tool calling and structured output of ``ChatReContext``: LangChain's forms, the engine's options.

``bind_tools`` binds ``tools`` (OpenAI tool dicts) and ``tool_choice`` (``"auto"``, ``"none"``,
``"required"`` or a tool's name), ``with_structured_output`` binds ``json_schema``: the engine
states the tools in the system prompt and enforces a required call or a schema token by token
(grammar-constrained decoding), so a forced call and a schema-bound answer are always valid JSON
of the right shape (unless ``max_tokens`` cuts them off).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from operator import itemgetter
from typing import TYPE_CHECKING, Any, Literal

from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.messages.tool import ToolCallChunk, tool_call_chunk
from langchain_core.output_parsers import JsonOutputParser, PydanticOutputParser
from langchain_core.output_parsers.openai_tools import JsonOutputKeyToolsParser, PydanticToolsParser
from langchain_core.runnables import Runnable, RunnableMap, RunnablePassthrough
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_json_schema, convert_to_openai_tool
from langchain_core.utils.pydantic import is_basemodel_subclass

from recontext_engine import ToolSpec, format_tool_call

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel

    from recontext_engine import ToolCall

ToolLike = Mapping[str, Any] | type | Callable[..., Any] | BaseTool
StructuredMethod = Literal["json_schema", "json_mode", "function_calling"]
# LangChain's and OpenAI's words for "some tool must be called".
_REQUIRED = ("any", "required")


def openai_tools(tools: Sequence[ToolLike], *, strict: bool | None = None) -> list[dict[str, Any]]:
    """Tools (``BaseTool``, functions, pydantic classes, TypedDicts, dicts) as OpenAI tool dicts,
    checked by the engine now rather than at the first call (a bad name or schema is a ValueError)."""
    formatted = [convert_to_openai_tool(tool, strict=strict) for tool in tools]
    for tool in formatted:
        ToolSpec.from_dict(tool)
    return formatted


def tool_choice_option(tool_choice: Any, names: Sequence[str]) -> str:
    """LangChain's ``tool_choice`` as the engine's: ``"auto"``, ``"none"``, ``"required"`` or a name.

    None, False and ``"auto"``: the model decides; ``"any"``, ``"required"`` and True: some tool
    must be called; a tool's name or OpenAI's ``{"type": "function", "function": {"name": ...}}``:
    that tool must be called; ``"none"``: no tool is offered.
    """
    if tool_choice is None or tool_choice is False:
        return "auto"
    if tool_choice is True:
        return "required"
    if isinstance(tool_choice, Mapping):
        function = tool_choice.get("function")
        name = function.get("name") if isinstance(function, Mapping) else tool_choice.get("name")
        choice = name if name is not None else tool_choice.get("type")
    else:
        choice = tool_choice
    if choice in _REQUIRED:
        return "required"
    if choice in ("auto", "none") or (isinstance(choice, str) and choice in names):
        return str(choice)
    listed = ", ".join(repr(n) for n in names) or "none bound"
    raise ValueError(
        f"tool_choice={tool_choice!r} names no bound tool (tools: {listed}); pass a tool's name, "
        "'auto', 'any'/'required' or 'none'"
    )


def tool_call_chunks(calls: Sequence[ToolCall]) -> list[ToolCallChunk]:
    """The engine's calls as stream chunks: each whole call in one chunk (its index, id and JSON)."""
    return [
        tool_call_chunk(name=call.name, args=call.arguments_json, id=call.id, index=i)
        for i, call in enumerate(calls)
    ]


def assistant_text(message: BaseMessage, text: str) -> str:
    """An assistant turn's text with its tool calls written after it, as the model itself writes
    them (``recontext_engine.format_tool_call``), so the model sees which calls it made."""
    if not isinstance(message, AIMessage) or not message.tool_calls:
        return text
    calls = [format_tool_call(call["name"], call["args"]) for call in message.tool_calls]
    return "\n".join([text, *calls] if text.strip() else calls)


def answer_schema(schema: Any, strict: bool | None) -> dict[str, Any]:
    """The JSON Schema that constrains a ``json_schema`` answer; ``strict`` as OpenAI's (every
    property required, no others), else the schema as ``convert_to_json_schema`` gives it."""
    if strict:
        return dict(convert_to_openai_tool(schema, strict=True)["function"]["parameters"])
    return convert_to_json_schema(schema)


def structured_output(
    model: BaseChatModel,
    schema: Any,
    *,
    method: StructuredMethod,
    include_raw: bool,
    strict: bool | None,
    kwargs: dict[str, Any],
) -> Runnable:
    """``with_structured_output`` of a model whose ``json_schema`` option constrains its answer."""
    is_pydantic = isinstance(schema, type) and is_basemodel_subclass(schema)
    if schema is None and method != "json_mode":
        raise ValueError(f"with_structured_output(method={method!r}) needs a schema")
    traced = {"kwargs": {"method": method, "strict": strict}, "schema": schema}
    llm: Runnable
    parser: Runnable
    if method == "function_calling":
        name = convert_to_openai_tool(schema)["function"]["name"]
        llm = model.bind_tools(
            [schema],
            tool_choice=name,
            parallel_tool_calls=False,
            strict=strict,
            ls_structured_output_format=traced,
            **kwargs,
        )
        parser = (
            PydanticToolsParser(tools=[schema], first_tool_only=True)
            if is_pydantic
            else JsonOutputKeyToolsParser(key_name=name, first_tool_only=True)
        )
    elif method in ("json_schema", "json_mode"):
        if method == "json_mode":
            if strict is not None:
                raise ValueError("strict= does not apply to method='json_mode' (any JSON object)")
            constraint: dict[str, Any] = {"type": "object"}
            traced = {"kwargs": {"method": method}, "schema": schema}
        else:
            constraint = answer_schema(schema, strict)
        bound = {"json_schema": constraint, **({"ls_structured_output_format": traced} if schema else {})}
        llm = model.bind(**bound, **kwargs)
        parser = PydanticOutputParser(pydantic_object=schema) if is_pydantic else JsonOutputParser()
    else:
        raise ValueError(
            f"unknown method {method!r}: pass 'json_schema' (the default), 'json_mode' or 'function_calling'"
        )
    if not include_raw:
        return llm | parser
    # As BaseChatModel does: the raw message always, the parsed value or the parsing error.
    parsed = RunnablePassthrough.assign(parsed=itemgetter("raw") | parser, parsing_error=lambda _: None)
    unparsed = RunnablePassthrough.assign(parsed=lambda _: None)
    return RunnableMap(raw=llm) | parsed.with_fallbacks([unparsed], exception_key="parsing_error")
