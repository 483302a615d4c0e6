"""``ChatReContext``: a LangChain chat model that answers with ReContext evidence replay."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Generator, Iterator, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from langchain_core.callbacks import (
    AsyncCallbackManager,
    AsyncCallbackManagerForLLMRun,
    CallbackManager,
    CallbackManagerForLLMRun,
    adispatch_custom_event,
    dispatch_custom_event,
)
from langchain_core.documents import Document
from langchain_core.language_models import BaseChatModel, LangSmithParams
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, ChatMessage
from langchain_core.messages.ai import UsageMetadata
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.tools import BaseTool
from pydantic import BaseModel, Field, PrivateAttr

from recontext_engine import MessageSplit, content_text
from recontext_engine import chat_messages as plain_chat
from recontext_engine import split_messages as split_dicts

from ..common import EVIDENCE_EVENT, PlainChatNotice, evidence_payload, iterate_in_thread, renamed
from .selection import EngineSettings
from .tools import (
    StructuredMethod,
    assistant_text,
    openai_tools,
    structured_output,
    tool_call_chunks,
    tool_choice_option,
)

if TYPE_CHECKING:
    from langchain_core.language_models import LanguageModelInput
    from langchain_core.runnables import Runnable

    from recontext_engine import ReplayResult, ReplayStream

# Same as recontext_engine.loading.EMBEDDED_NAME; repeated so tracing needs no torch import.
EMBEDDED_MODEL_NAME = "SmolLM2-135M-Instruct"
# The engine's default question marker (``recontext_engine.split_messages``).
DEFAULT_QUESTION_MARKER = "Question:"
_ROLES = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool", "function": "tool"}
# ChatReContext fields forwarded to ReplayConfig, and the ReplayConfig name of each.
_FORWARDED = {
    "rounds": "rounds",
    "top_k": "top_k",
    "max_tokens": "max_new_tokens",
    "temperature": "temperature",
    "top_p": "top_p",
    "seed": "seed",
}


def message_text(message: BaseMessage) -> str:
    """The text of a message: its string content, or its text blocks joined by newlines; an AI
    message's tool calls follow it, each as ``recontext_engine.format_tool_call`` writes it."""
    return assistant_text(message, content_text(message.content))


def as_dicts(messages: Sequence[BaseMessage]) -> list[dict[str, str]]:
    """LangChain messages as ``{"role", "content"}`` dicts (the form ``recontext_engine.messages`` reads);
    an AI message's tool calls are written into its content, a tool message has role ``"tool"``."""
    return [
        {
            "role": m.role if isinstance(m, ChatMessage) else _ROLES.get(m.type, "user"),
            "content": message_text(m),
        }
        for m in messages
    ]


def split_messages(
    messages: Sequence[BaseMessage],
    *,
    question_marker: str | Sequence[str] | None = DEFAULT_QUESTION_MARKER,
    history_as_context: bool = True,
    documents: Sequence[str | Document] | None = None,
) -> MessageSplit:
    """The context/question rule of :class:`ChatReContext` (``recontext_engine.messages``) on LangChain
    messages; ``documents`` may be strings or ``Document`` objects (their ``page_content``)."""
    texts = (
        None if documents is None else [d.page_content if isinstance(d, Document) else d for d in documents]
    )
    return split_dicts(
        as_dicts(messages),
        documents=texts,
        question_marker=question_marker,
        history_as_context=history_as_context,
    )


def chat_messages(messages: Sequence[BaseMessage]) -> list[dict[str, str]]:
    """``{"role", "content"}`` dicts for plain chat; system messages merged into one at the front."""
    return plain_chat(as_dicts(messages))


def _usage(result: ReplayResult) -> UsageMetadata:
    return UsageMetadata(
        input_tokens=result.usage.input_tokens,
        output_tokens=result.usage.output_tokens,
        total_tokens=result.usage.total_tokens,
        input_token_details={"cache_read": result.usage.cached_tokens},
    )


def _response_metadata(result: ReplayResult, split: MessageSplit) -> dict[str, Any]:
    return {
        "model_name": result.model,
        "model_provider": "recontext",
        "finish_reason": result.finish_reason,
        "replayed": bool(result.evidence),
        "split_rule": split.rule,
        "evidence": evidence_payload(result.evidence, split.sources),
        "evidence_tokens": result.usage.evidence_tokens,
        "timings": dict(result.timings),
    }


def _event_manager(run_manager: Any, manager_class: type) -> Any:
    """A callback manager whose events belong to this chat model's run (as ``dispatch_custom_event``'s)."""
    return manager_class(
        handlers=run_manager.handlers,
        inheritable_handlers=run_manager.inheritable_handlers,
        parent_run_id=run_manager.run_id,
        tags=run_manager.tags,
        inheritable_tags=run_manager.inheritable_tags,
        metadata=run_manager.metadata,
        inheritable_metadata=run_manager.inheritable_metadata,
    )


def dispatch_in_context(data: dict[str, Any], name: str = EVIDENCE_EVENT) -> None:
    """Dispatch the custom event ``name`` to the run in context, if any."""
    # LangChain's stream()/astream() hand _stream no run manager; inside a chain the enclosing
    # runnable's config is in context, and the event belongs to that run. Alone, there is no run.
    with contextlib.suppress(RuntimeError):
        dispatch_custom_event(name, data)


async def adispatch_in_context(data: dict[str, Any], name: str = EVIDENCE_EVENT) -> None:
    """The async :func:`dispatch_in_context`."""
    with contextlib.suppress(RuntimeError):
        await adispatch_custom_event(name, data)


def _is_token(chunk: ChatGenerationChunk) -> bool:
    """Whether callbacks hear of the chunk (``on_llm_new_token``): it has text or tool calls."""
    return bool(chunk.text or getattr(chunk.message, "tool_call_chunks", None))


class _EvidenceEvent:
    """The evidence, handed from the engine (worker thread) to the caller before the first token."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data


class ChatReContext(EngineSettings, BaseChatModel):
    """A local LLM that replays the evidence its own retrieval heads point at (ReContext).

    Context/question rule: :mod:`recontext_engine.messages` (``question_marker`` and
    ``history_as_context`` tune it, ``message_splitter`` replaces it with any
    ``(messages, documents) -> MessageSplit`` function). In short: the last human message is the
    question; context is found in it (LlamaIndex templates, dashed blocks, hub ``rlm/rag-prompt``'s
    question-before-context, text before a ``Question:`` line), in a system message that carries
    retrieved context (RAG tutorial, ``create_stuff_documents_chain``, agents' dynamic prompts;
    its instructions stay the system prompt), and in earlier turns (human, AI, tool), each one
    document. ``invoke(..., documents=[...])`` (strings or ``Document``) gives the context
    explicitly, without any text rule. Control characters such as PDF form feeds become spaces.

    No context (e.g. a lone ``"Hello"``): plain chat over all messages, no replay; the model logs
    a warning the first time, and ``response_metadata["replayed"]`` is False. Otherwise
    ``response_metadata`` holds ``replayed`` True, ``split_rule``, and ``evidence`` whose
    ``doc_index`` indexes the context documents (``split_messages`` reproduces them) and whose
    ``message_index`` names the message each came from (-1: explicit documents). Before the first
    token, the evidence is dispatched as the custom event ``"recontext_evidence"`` (visible in
    ``astream_events``). Replay settings (``rounds``, ``top_k``, ``max_tokens``, ``temperature``,
    ``stop``, ``replay_options`` for any other ``ReplayConfig`` field) can be overridden per call
    as keyword arguments or with ``.bind(...)``. Pass a loaded ``engine`` to share it; otherwise
    the model (``model=None``: the embedded SmolLM2-135M-Instruct) loads on first use, once per
    process.

    Tool calling: ``bind_tools(tools, tool_choice=...)`` states the tools in the system prompt
    (Hermes ``<tool_call>`` format); calls come back as ``AIMessage.tool_calls`` with
    ``finish_reason`` ``"tool_calls"``, and a forced call (``"any"``, a tool's name) is constrained
    to the tool's argument schema. Earlier calls are written into their AI message's text
    (``recontext_engine.format_tool_call``) and tool results are ``"tool"`` turns, so agent loops
    (``langchain.agents.create_agent``) work; a long tool result is context like any earlier turn,
    and the answer replays the evidence found in it. Structured output:
    ``with_structured_output(schema)`` (pydantic, TypedDict or JSON Schema) constrains the answer
    to the schema by grammar-constrained decoding (``method="json_schema"``, the default;
    ``"json_mode"`` and ``"function_calling"`` too, and ``include_raw``).

    Unknown constructor arguments are an error, and so are those of hosted clients that mean
    nothing for a local model (``timeout``, ``max_retries``). ``model_name=`` is ``model=``
    (ChatOpenAI's name), ``max_new_tokens=`` (the engine's name) is ``max_tokens=``, in the
    constructor and in a call, as in ``ReContextLLM``. ``model_kwargs`` is
    refused rather than forwarded: it would be a second name for ``replay_options``, with rules for
    which one wins.
    """

    setting_aliases: ClassVar[dict[str, str]] = {
        **EngineSettings.setting_aliases,
        "max_new_tokens": "max_tokens",  # the engine's name for it
    }
    option_fields: ClassVar[dict[str, str]] = {
        **{config_name: name for name, config_name in _FORWARDED.items()},
        "stop": "stop",
    }

    max_tokens: int | None = 256
    temperature: float = 0.0
    top_p: float | None = None
    seed: int | None = None
    stop: list[str] | None = None
    question_marker: str | None = DEFAULT_QUESTION_MARKER
    history_as_context: bool = True
    message_splitter: Callable[..., MessageSplit] | None = Field(default=None, exclude=True)
    streaming: bool = False
    """Make ``invoke`` stream internally (callbacks then get tokens)."""

    _notice: PlainChatNotice = PrivateAttr(default_factory=PlainChatNotice)

    @property
    def _llm_type(self) -> str:
        return "recontext"

    @property
    def model_name(self) -> str:
        """The served model's name (without loading it)."""
        if self.engine is not None:
            return str(self.engine.model_name)
        return self.model or EMBEDDED_MODEL_NAME

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {
            "model_name": self.model_name,
            "heads": self.heads,
            "rounds": self.rounds,
            "top_k": self.top_k,
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "replay_options": self.replay_options,
            "question_marker": self.question_marker,
            "history_as_context": self.history_as_context,
        }

    def _get_ls_params(self, stop: list[str] | None = None, **kwargs: Any) -> LangSmithParams:
        params = LangSmithParams(
            ls_provider="recontext",
            ls_model_name=kwargs.get("model") or self.model_name,
            ls_model_type="chat",
            ls_temperature=kwargs.get("temperature", self.temperature),
        )
        max_tokens = kwargs.get("max_tokens", self.max_tokens)
        if max_tokens is not None:
            params["ls_max_tokens"] = max_tokens
        stops = stop if stop is not None else self.stop
        if stops:
            params["ls_stop"] = list(stops)
        return params

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
        *,
        tool_choice: str | dict[str, Any] | bool | None = None,
        strict: bool | None = None,
        parallel_tool_calls: bool | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        """This model with ``tools`` offered (``BaseTool``, functions, pydantic classes, TypedDicts,
        OpenAI tool dicts; converted by ``convert_to_openai_tool``).

        ``tool_choice``: None/``"auto"`` the model decides; ``"any"``/``"required"``/True one call
        of some tool; a tool's name (or OpenAI's ``{"type": "function", ...}`` form) a call of that
        tool; ``"none"`` no tool. A forced call is constrained token by token to the tool's argument
        schema. ``parallel_tool_calls=False`` keeps only the first call. Calls come back as
        ``AIMessage.tool_calls`` (``finish_reason`` ``"tool_calls"``); streams end with one
        ``tool_call_chunks`` entry per call.
        """
        formatted = openai_tools(tools, strict=strict)
        names = [tool["function"]["name"] for tool in formatted]
        kwargs["tool_choice"] = tool_choice_option(tool_choice, names)
        if parallel_tool_calls is not None:
            kwargs["parallel_tool_calls"] = parallel_tool_calls
        return self.bind(tools=formatted, **kwargs)

    def with_structured_output(
        self,
        schema: dict[str, Any] | type | None = None,
        *,
        method: StructuredMethod = "json_schema",
        include_raw: bool = False,
        strict: bool | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, dict[str, Any] | BaseModel]:
        """A runnable answering with an object of ``schema`` (pydantic class: an instance of it;
        TypedDict or JSON Schema dict: a dict).

        ``method="json_schema"`` (default): the answer is constrained to the schema token by token
        (``strict=True``: every property required, no others, as OpenAI's strict mode);
        ``"json_mode"``: constrained to some JSON object, the schema only parses it (say the keys in
        the prompt); ``"function_calling"``: a forced call of the schema as a tool. With
        ``include_raw=True`` the output is ``{"raw": AIMessage, "parsed": ..., "parsing_error": ...}``
        and a parsing error (say an answer cut off by ``max_tokens``) is returned, not raised. Other
        keyword arguments are bound as call options (e.g. ``max_tokens=``).
        """
        return structured_output(
            self, schema, method=method, include_raw=include_raw, strict=strict, kwargs=kwargs
        )

    def get_token_ids(self, text: str) -> list[int]:
        """Token ids from the served model's own tokenizer (offline)."""
        return list(self.get_engine().tokenizer(text, add_special_tokens=False)["input_ids"])

    def split(self, messages: Sequence[BaseMessage], documents: Sequence[Any] | None = None) -> MessageSplit:
        """Apply this model's context/question rule."""
        if self.message_splitter is not None:
            return self.message_splitter(messages, documents)
        return split_messages(
            messages,
            question_marker=self.question_marker,
            history_as_context=self.history_as_context,
            documents=documents,
        )

    def _open(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None,
        kwargs: dict[str, Any],
        emit: Callable[[_EvidenceEvent], None],
    ) -> tuple[ReplayStream, MessageSplit]:
        """Start generation: replay over the context if the rule finds one, else plain chat."""
        kwargs = renamed(kwargs, self.setting_aliases)  # max_new_tokens= is max_tokens=, per call too
        kwargs.pop("stream", None)  # LangChain's own routing flag
        documents = kwargs.pop("documents", None)
        engine = self.get_engine()
        model = kwargs.pop("model", None)
        if model is not None and model not in (self.model_name, engine.model_name):
            raise ValueError(
                f"ChatReContext serves one local model ({engine.model_name}); "
                f"create another ChatReContext(model={model!r}) to use {model!r}"
            )
        options = {**self.replay_options, **kwargs.pop("replay_options", {})}
        for name, config_name in _FORWARDED.items():
            value = kwargs.pop(name, getattr(self, name))
            if value is not None:
                options[config_name] = value
        stops = stop if stop is not None else self.stop
        if stops is not None:
            options["stop"] = tuple(stops)
        options.update(kwargs)  # other ReplayConfig fields; the engine rejects unknown names
        split = self.split(messages, documents)
        if not split.replays:
            self._notice("ChatReContext", split)
            return engine.stream_chat(chat_messages(messages), **options), split
        if split.system:
            options["system_prompt"] = split.system

        def on_evidence(evidence: list[Any]) -> None:
            data = {
                "evidence": evidence_payload(evidence, split.sources),
                "question": split.question,
                "split_rule": split.rule,
                "model_name": engine.model_name,
            }
            emit(_EvidenceEvent(data))

        return engine.stream(split.documents, split.question, on_evidence=on_evidence, **options), split

    def _chunks(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None,
        kwargs: dict[str, Any],
        emit: Callable[[_EvidenceEvent], None],
    ) -> Generator[ChatGenerationChunk, None, None]:
        """The answer's chunks; the last one (``chunk_position="last"``) carries the tool calls,
        usage and metadata."""
        kwargs = dict(kwargs)
        parallel = kwargs.pop("parallel_tool_calls", None)  # the engine knows no such option
        stream, split = self._open(messages, stop, kwargs, emit)
        shown = False
        try:
            for piece in stream:
                shown = True
                yield ChatGenerationChunk(message=AIMessageChunk(content=piece))
        finally:
            stream.close()
        result = stream.result
        assert result is not None  # set by the engine once the stream is exhausted
        calls = result.tool_calls[:1] if parallel is False else result.tool_calls
        if not calls and not shown and result.text:
            # A forced call that did not parse (cut off by max_tokens): the engine streams nothing
            # of it; the message shows the text, as ReplayResult.text does.
            yield ChatGenerationChunk(message=AIMessageChunk(content=result.text))
        yield ChatGenerationChunk(
            message=AIMessageChunk(
                content="",
                chunk_position="last",
                tool_call_chunks=tool_call_chunks(calls),
                usage_metadata=_usage(result),
                response_metadata=_response_metadata(result, split),
            ),
            generation_info={"finish_reason": result.finish_reason},
        )

    @staticmethod
    def _result(chunks: list[ChatGenerationChunk]) -> ChatResult:
        last = chunks[-1]
        assert isinstance(last.message, AIMessageChunk)  # _chunks makes nothing else
        meta = last.message.response_metadata
        message = AIMessage(
            content="".join(c.text for c in chunks),
            tool_calls=last.message.tool_calls,
            invalid_tool_calls=last.message.invalid_tool_calls,
            usage_metadata=last.message.usage_metadata,
            response_metadata=meta,
        )
        generation = ChatGeneration(message=message, generation_info=last.generation_info)
        return ChatResult(generations=[generation], llm_output={"model_name": meta["model_name"]})

    def _dispatcher(self, run_manager: CallbackManagerForLLMRun | None) -> Callable[[_EvidenceEvent], None]:
        """How the evidence event leaves: through this run's callbacks when LangChain passes the run
        (``invoke``, ``batch``), else through the enclosing runnable's (``stream`` inside a chain)."""
        if run_manager is None:
            return lambda event: dispatch_in_context(event.data)
        manager = _event_manager(run_manager, CallbackManager)
        return lambda event: manager.on_custom_event(EVIDENCE_EVENT, event.data, run_id=run_manager.run_id)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return self._result(list(self._chunks(messages, stop, kwargs, self._dispatcher(run_manager))))

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        chunks = self._chunks(messages, stop, kwargs, self._dispatcher(run_manager))
        try:
            for chunk in chunks:
                if run_manager and _is_token(chunk):
                    run_manager.on_llm_new_token(chunk.text, chunk=chunk)
                yield chunk
        finally:
            chunks.close()

    async def _achunks(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None,
        run_manager: AsyncCallbackManagerForLLMRun | None,
        kwargs: dict[str, Any],
    ) -> AsyncGenerator[ChatGenerationChunk, None]:
        # The engine is synchronous: it runs in a worker thread so the event loop stays free.
        manager = _event_manager(run_manager, AsyncCallbackManager) if run_manager else None
        items = iterate_in_thread(lambda emit: self._chunks(messages, stop, kwargs, emit))
        try:
            async for item in items:
                if isinstance(item, _EvidenceEvent):
                    if manager is not None:
                        assert run_manager is not None  # the manager is made from it
                        await manager.on_custom_event(EVIDENCE_EVENT, item.data, run_id=run_manager.run_id)
                    else:
                        await adispatch_in_context(item.data)
                    continue
                yield item
        finally:
            await items.aclose()

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return self._result([chunk async for chunk in self._achunks(messages, stop, run_manager, kwargs)])

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        chunks = self._achunks(messages, stop, run_manager, kwargs)
        try:
            async for chunk in chunks:
                if run_manager and _is_token(chunk):
                    await run_manager.on_llm_new_token(chunk.text, chunk=chunk)
                yield chunk
        finally:
            await chunks.aclose()
