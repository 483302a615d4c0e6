"""``ReContextLLM``: a LlamaIndex function-calling LLM that replays evidence for RAG prompts and agents.

Which part of a prompt is context and which is the question is decided by the shared rules of
:mod:`recontext_engine.messages`: LlamaIndex's text-QA, tree-summarize and refine templates
(completion and chat forms, ``split_patterns``), dashed context blocks (``CitationQueryEngine``),
``Question:``/``Query:`` markers, context in the system prompt (``ContextChatEngine``,
``CondensePlusContextChatEngine``) and earlier turns of the chat, tool results included (an agent's
tool output is replayed as evidence). A prompt where none finds context is answered by plain
chat-template generation, without replay (logged once, ``replayed: False``).

Tools (``chat_with_tools``, ``predict_and_call``, ``FunctionAgent``) and structured output
(``structured_predict``, ``as_structured_llm``) use the engine's ``tools``/``tool_choice`` and
``json_schema`` options: a required call and a pydantic schema are enforced by grammar-constrained
decoding (see :mod:`.tools`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable, Generator, Iterator, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    ChatResponseAsyncGen,
    ChatResponseGen,
    CompletionResponse,
    CompletionResponseAsyncGen,
    CompletionResponseGen,
    LLMMetadata,
    MessageRole,
    TextBlock,
    ToolCallBlock,
)
from llama_index.core.bridge.pydantic import BaseModel, Field, PrivateAttr, field_validator
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.events.llm import (
    LLMStructuredPredictEndEvent,
    LLMStructuredPredictInProgressEvent,
    LLMStructuredPredictStartEvent,
)
from llama_index.core.llms.callbacks import llm_chat_callback, llm_completion_callback
from llama_index.core.llms.function_calling import FunctionCallingLLM
from llama_index.core.llms.llm import ToolSelection
from llama_index.core.program.utils import FlexibleModel, process_streaming_objects
from llama_index.core.prompts import PromptTemplate
from llama_index.core.tools.types import BaseTool
from llama_index.core.types import Model, PydanticProgramMode

from recontext_engine import (
    DEFAULT_SPLIT_PATTERNS,
    Evidence,
    MessageSplit,
    ReContextEngine,
    ReplayConfig,
    ReplayResult,
    ReplayStream,
    SplitPattern,
    chat_messages,
    split_messages,
)

from ..common import PlainChatNotice, evidence_payload, iterate_in_thread, renamed
from .base import LocalEngine
from .events import ReContextEvidenceEvent
from .tools import (
    CALLS_KEY,
    call_blocks,
    engine_tool_choice,
    engine_tools,
    to_message_dicts,
    tool_dict,
    tool_selections,
    with_calls,
    without_calls,
)

if TYPE_CHECKING:
    from llama_index.core.chat_engine.types import AgentChatResponse

T = TypeVar("T")
_CONFIG_FIELDS = ReplayConfig.option_names()
# The engine's question marker ("Question:") and LlamaIndex's own ("Query:").
QUESTION_MARKERS = ("Question:", "Query:")
# Generation settings that are ReContextLLM fields: the field and the ReplayConfig option it sets.
_GENERATION = {"max_tokens": "max_new_tokens", "temperature": "temperature"}
# Options that fix the answer's form: structured_predict sets json_schema and drops the others.
_FORM_OPTIONS = ("tools", "tool_choice", "tool_required", "cite_evidence", "json_schema")
dispatcher = get_dispatcher(__name__)


def _messages(messages: Sequence[ChatMessage]) -> list[dict[str, str]]:
    return to_message_dicts(messages)


async def _in_thread(make: Callable[[], Iterator[T]]) -> AsyncGenerator[T, None]:
    """Iterate a blocking iterator in a worker thread (see ``iterate_in_thread``)."""
    async for item in iterate_in_thread(lambda emit: make()):
        yield item


class ReContextLLM(LocalEngine, FunctionCallingLLM):
    """A local LLM that replays the evidence its own retrieval heads point at (arXiv 2607.02509).

    Pass a ready ``engine=``, or set ``model`` (None: the embedded SmolLM2-135M-Instruct), ``heads``
    and ``device``: the model then loads on first use (a generation call or ``metadata``), never in
    ``__init__``; a ``ReContextEvidencePostprocessor`` with the same settings shares the loaded model.
    Every prompt goes through the model's chat template. Messages in which the shared rules
    (:mod:`recontext_engine.messages`) find context are answered with evidence replay, and the
    evidence is dispatched as a :class:`ReContextEvidenceEvent` before the first token; anything
    else by plain generation (a warning the first time). ``max_tokens`` caps the answer's length
    (LlamaIndex OpenAI's and LangChain's name; ``max_new_tokens=``, the engine's, is accepted for
    it, in the constructor and in a call). Keyword arguments of a call that name these fields
    (``max_tokens=32``, ``temperature=``) or :class:`~recontext_engine.ReplayConfig` fields
    (``rounds=0``, ``top_k=4``, ``json_schema=``, ``tools=``, ``tool_choice=``...) override the
    settings for that call; other keyword arguments are ignored. ``context_window`` caps
    the window reported in ``metadata`` (LlamaIndex packs prompts to fit it); the model's own is the
    limit when it is smaller. ``additional_kwargs`` and ``raw`` hold ``replayed``, ``split_rule``,
    the evidence (each item with the ``message_index`` it came from), usage and timings, and the
    ``tool_calls`` and ``parsed`` JSON where there are some.

    It is a ``FunctionCallingLLM`` (``metadata.is_function_calling_model``): ``chat_with_tools``,
    ``predict_and_call`` and ``FunctionAgent`` offer their tools to the engine (stated in the
    system prompt; ``tool_required``, ``tool_choice="required"`` or a tool's name constrain the
    answer to one call), and the calls come back as ``ToolCallBlock``s of the response message
    (the last delta when streaming; the streamed text never holds call markup). An agent's tool
    results are earlier turns of the chat, so the answer after a call replays evidence from them.
    ``predict_and_call`` requires a call unless ``error_on_no_tool_call=False``.
    ``structured_predict`` (and its async and streaming forms, and ``as_structured_llm``) decode
    under the output class's JSON Schema (``json_schema=``) instead of calling a function; set
    ``pydantic_program_mode`` to another mode for LlamaIndex's own programs.
    """

    setting_aliases: ClassVar[dict[str, str]] = {"max_new_tokens": "max_tokens"}  # the engine's name

    max_tokens: int = Field(default=256, ge=1, description="Tokens to generate at most (num_output).")
    temperature: float = Field(default=0.0, ge=0.0, description="0 = greedy (deterministic).")
    context_window: int | None = Field(
        default=None, ge=1, description="Cap on metadata.context_window; None: the model's window."
    )
    replay_options: dict[str, Any] = Field(
        default_factory=dict, description="Other ReplayConfig fields, e.g. {'rounds': 2, 'top_k': 4}."
    )
    split_patterns: list[SplitPattern] = Field(
        default_factory=lambda: list(DEFAULT_SPLIT_PATTERNS),
        description="Known templates, tried in order before the generic rules.",
    )
    history_as_context: bool = Field(default=True, description="Earlier chat turns are context documents.")

    _notice: PlainChatNotice = PrivateAttr(default_factory=PlainChatNotice)

    @field_validator("replay_options")
    @classmethod
    def _check_options(cls, value: dict[str, Any]) -> dict[str, Any]:
        own = sorted(name for name, option in _GENERATION.items() if {name, option} & set(value))
        if own:
            raise ValueError(f"set {', '.join(own)} as ReContextLLM fields, not in replay_options")
        ReplayConfig().with_options(**value)  # raises ReContextError (a ValueError) on bad options
        return value

    @classmethod
    def class_name(cls) -> str:
        return "ReContextLLM"

    @property
    def metadata(self) -> LLMMetadata:
        """The model's own window and name; reading it loads the model if it is not loaded yet."""
        engine = self.engine
        return LLMMetadata(
            context_window=min(engine.context_window, self.context_window or engine.context_window),
            num_output=self.max_tokens,
            is_chat_model=True,
            is_function_calling_model=True,
            model_name=engine.model_name or str(self.model or ""),
            system_role=MessageRole.SYSTEM,
        )

    # -- the engine call ------------------------------------------------------------------

    def _config(self, engine: ReContextEngine, kwargs: dict[str, Any]) -> ReplayConfig:
        kwargs = renamed(kwargs, self.setting_aliases)
        options = dict(self.replay_options)
        for name, option in _GENERATION.items():
            options[option] = kwargs.pop(name, getattr(self, name))
        options.update({k: v for k, v in kwargs.items() if k in _CONFIG_FIELDS})
        for name in ("tools", "tool_choice"):  # OpenAI's "no tools" is None; the engine's default
            if options.get(name, "") is None:
                del options[name]
        if options.get("tools"):
            options["tools"] = engine_tools(options["tools"])
        return engine.default_config.with_options(**options)

    def split(self, messages: Sequence[dict[str, str]]) -> MessageSplit:
        """This LLM's context/question split of ``{"role", "content"}`` messages (an assistant
        turn's tool-call markup is left out: the calls are not evidence, their results are)."""
        return split_messages(
            without_calls(messages),
            question_marker=QUESTION_MARKERS,
            history_as_context=self.history_as_context,
            patterns=self.split_patterns,
        )

    def _start(
        self, messages: list[dict[str, str]], kwargs: dict[str, Any]
    ) -> tuple[ReplayStream, MessageSplit]:
        """Start generation: replay if the split finds context, else plain chat."""
        engine = self.engine
        config = self._config(engine, kwargs)
        split = self.split(messages)
        if not split.replays:
            self._notice("ReContextLLM", split)
            return engine.stream_chat(chat_messages(with_calls(messages)), config), split
        if split.system:
            config = config.with_options(system_prompt=split.system)

        def on_evidence(evidence: list[Evidence]) -> None:
            dispatcher.event(
                ReContextEvidenceEvent(
                    evidence=evidence_payload(evidence, split.sources),
                    question=split.question,
                    split_rule=split.rule,
                    model_name=engine.model_name,
                )
            )

        return engine.stream(split.documents, split.question, config, on_evidence=on_evidence), split

    def _prompt_messages(self, prompt: str, formatted: bool) -> list[dict[str, str]]:
        messages = (
            []
            if formatted or not self.system_prompt
            else [ChatMessage.from_str(self.system_prompt, "system")]
        )
        return _messages([*messages, ChatMessage.from_str(prompt, "user")])

    @staticmethod
    def _extras(result: ReplayResult | None, split: MessageSplit) -> tuple[dict[str, Any], dict[str, Any]]:
        """(raw, additional_kwargs) of a finished call; ``replayed`` False means plain chat."""
        raw = result.to_dict() if result else {}
        raw["evidence"] = evidence_payload(result.evidence, split.sources) if result else []
        raw["replayed"] = bool(raw["evidence"])
        raw["split_rule"] = split.rule
        raw["split_pattern"] = split.rule if split.replays else None  # earlier name, kept for callers
        keys = (
            "evidence",
            "usage",
            "timings",
            "model",
            "finish_reason",
            "replayed",
            "split_rule",
            "split_pattern",
            "tool_calls",
            "parsed",
        )
        return raw, {k: raw[k] for k in keys if k in raw}

    def _complete_messages(
        self, messages: list[dict[str, str]], kwargs: dict[str, Any]
    ) -> CompletionResponse:
        stream, split = self._start(messages, kwargs)
        for _ in stream:
            pass
        raw, extras = self._extras(stream.result, split)
        return CompletionResponse(
            text=stream.result.text if stream.result else "", raw=raw, additional_kwargs=extras
        )

    def _stream_messages(
        self, messages: list[dict[str, str]], kwargs: dict[str, Any]
    ) -> CompletionResponseGen:
        # The last piece is held back one step so that it can carry the evidence, usage and calls.
        stream, split = self._start(messages, kwargs)
        text, held = "", None
        try:
            for piece in stream:
                if held is not None:
                    yield CompletionResponse(text=text, delta=held)
                held, text = piece, text + piece
        finally:
            stream.close()
        raw, extras = self._extras(stream.result, split)
        yield CompletionResponse(text=text, delta=held or "", raw=raw, additional_kwargs=extras)

    @staticmethod
    def _as_chat(response: CompletionResponse) -> ChatResponse:
        """A chat response; the calls (``additional_kwargs["tool_calls"]``) as ``ToolCallBlock``s."""
        blocks: list[Any] = [TextBlock(text=response.text)]
        blocks += call_blocks(response.additional_kwargs.get(CALLS_KEY) or [])
        return ChatResponse(
            message=ChatMessage(role=MessageRole.ASSISTANT, blocks=blocks),
            delta=response.delta,
            raw=response.raw,
            additional_kwargs=response.additional_kwargs,
        )

    def _stream_chat_messages(
        self, messages: Sequence[ChatMessage], kwargs: dict[str, Any]
    ) -> ChatResponseGen:
        for response in self._stream_messages(_messages(messages), kwargs):
            yield self._as_chat(response)

    # -- LlamaIndex API -------------------------------------------------------------------

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        return self._complete_messages(self._prompt_messages(prompt, formatted), kwargs)

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
        return self._stream_messages(self._prompt_messages(prompt, formatted), kwargs)

    @llm_chat_callback()
    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        return self._as_chat(self._complete_messages(_messages(messages), kwargs))

    @llm_chat_callback()
    def stream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseGen:
        return self._stream_chat_messages(messages, kwargs)

    @llm_completion_callback()
    async def acomplete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        messages = self._prompt_messages(prompt, formatted)
        return await asyncio.to_thread(self._complete_messages, messages, kwargs)

    @llm_completion_callback()
    async def astream_complete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponseAsyncGen:
        messages = self._prompt_messages(prompt, formatted)
        return _in_thread(lambda: self._stream_messages(messages, kwargs))

    @llm_chat_callback()
    async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        response = await asyncio.to_thread(self._complete_messages, _messages(messages), kwargs)
        return self._as_chat(response)

    @llm_chat_callback()
    async def astream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseAsyncGen:
        return _in_thread(lambda: self._stream_chat_messages(messages, kwargs))

    # -- function calling -----------------------------------------------------------------

    def _prepare_chat_with_tools(
        self,
        tools: Sequence[BaseTool],
        user_msg: str | ChatMessage | None = None,
        chat_history: list[ChatMessage] | None = None,
        verbose: bool = False,
        allow_parallel_tool_calls: bool = False,
        tool_required: bool = False,
        tool_choice: str | dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        """``chat`` arguments: the messages, the tools as OpenAI tool dicts and the ``tool_choice``
        ("required" where ``tool_required``, unless a choice is given)."""
        messages = list(chat_history or [])
        if user_msg is not None:
            messages.append(ChatMessage.from_str(user_msg) if isinstance(user_msg, str) else user_msg)
        specs = [tool_dict(tool) for tool in tools]
        options: dict[str, Any] = {"messages": messages, **kwargs}
        if specs:
            options["tools"] = specs
            options["tool_choice"] = engine_tool_choice(tool_choice, tool_required)
        return options

    def _validate_chat_with_tools_response(
        self,
        response: ChatResponse,
        tools: Sequence[BaseTool],
        allow_parallel_tool_calls: bool = False,
        **kwargs: Any,
    ) -> ChatResponse:
        """Without ``allow_parallel_tool_calls``, only the first call is kept."""
        if not allow_parallel_tool_calls:
            calls = [b for b in response.message.blocks if isinstance(b, ToolCallBlock)]
            for extra in calls[1:]:
                response.message.blocks.remove(extra)
        return response

    def get_tool_calls_from_response(
        self, response: ChatResponse, error_on_no_tool_call: bool = True, **kwargs: Any
    ) -> list[ToolSelection]:
        """The calls of ``response.message`` (its ``ToolCallBlock``s, or OpenAI-style
        ``additional_kwargs["tool_calls"]``); none is a ``ValueError`` if ``error_on_no_tool_call``."""
        selections = tool_selections(response.message)
        if not selections and error_on_no_tool_call:
            reason = response.raw.get("finish_reason") if isinstance(response.raw, dict) else None
            cut = " (the token limit cut the answer off: raise max_tokens)" if reason == "length" else ""
            raise ValueError(f"Expected at least one tool call, but the model answered without one{cut}.")
        return selections

    def predict_and_call(
        self,
        tools: Sequence[BaseTool],
        user_msg: str | ChatMessage | None = None,
        chat_history: list[ChatMessage] | None = None,
        verbose: bool = False,
        allow_parallel_tool_calls: bool = False,
        error_on_no_tool_call: bool = True,
        error_on_tool_error: bool = False,
        **kwargs: Any,
    ) -> AgentChatResponse:
        """Like ``FunctionCallingLLM.predict_and_call``; where no call would be an error
        (``error_on_no_tool_call``), the call is required (constrained decoding), unless
        ``tool_required``/``tool_choice`` say otherwise."""
        kwargs.setdefault("tool_required", error_on_no_tool_call)
        return super().predict_and_call(
            list(tools),
            user_msg=user_msg,
            chat_history=chat_history,
            verbose=verbose,
            allow_parallel_tool_calls=allow_parallel_tool_calls,
            error_on_no_tool_call=error_on_no_tool_call,
            error_on_tool_error=error_on_tool_error,
            **kwargs,
        )

    async def apredict_and_call(
        self,
        tools: Sequence[BaseTool],
        user_msg: str | ChatMessage | None = None,
        chat_history: list[ChatMessage] | None = None,
        verbose: bool = False,
        allow_parallel_tool_calls: bool = False,
        error_on_no_tool_call: bool = True,
        error_on_tool_error: bool = False,
        **kwargs: Any,
    ) -> AgentChatResponse:
        """Async :meth:`predict_and_call`."""
        kwargs.setdefault("tool_required", error_on_no_tool_call)
        return await super().apredict_and_call(
            list(tools),
            user_msg=user_msg,
            chat_history=chat_history,
            verbose=verbose,
            allow_parallel_tool_calls=allow_parallel_tool_calls,
            error_on_no_tool_call=error_on_no_tool_call,
            error_on_tool_error=error_on_tool_error,
            **kwargs,
        )

    # -- structured output ----------------------------------------------------------------

    def _schema_call(
        self,
        output_cls: type[BaseModel],
        prompt: PromptTemplate,
        llm_kwargs: dict[str, Any] | None,
        prompt_args: dict[str, Any],
    ) -> tuple[list[ChatMessage], dict[str, Any]]:
        """The messages and chat options of a structured call: the class's JSON Schema constrains
        the answer (other answer forms in ``llm_kwargs`` are dropped)."""
        dispatcher.event(
            LLMStructuredPredictStartEvent(output_cls=output_cls, template=prompt, template_args=prompt_args)
        )
        messages = self._extend_messages(prompt.format_messages(llm=self, **prompt_args))
        options = {k: v for k, v in (llm_kwargs or {}).items() if k not in _FORM_OPTIONS}
        options["json_schema"] = output_cls.model_json_schema()
        return messages, options

    @staticmethod
    def _parsed(output_cls: type[Model], response: ChatResponse) -> Model:
        """The response's JSON as ``output_cls``; a ``ValueError`` if the token limit cut it off."""
        raw = response.raw if isinstance(response.raw, dict) else {}
        if "parsed" not in raw:
            raise ValueError(
                f"the {output_cls.__name__} JSON was cut off at the token limit "
                f"(finish_reason={raw.get('finish_reason')!r}): raise max_tokens"
            )
        output = output_cls.model_validate(raw["parsed"])
        dispatcher.event(LLMStructuredPredictEndEvent(output=output))
        return output

    def _uses_schema(self) -> bool:
        return self.pydantic_program_mode == PydanticProgramMode.DEFAULT

    @dispatcher.span
    def structured_predict(
        self,
        output_cls: type[Model],
        prompt: PromptTemplate,
        llm_kwargs: dict[str, Any] | None = None,
        **prompt_args: Any,
    ) -> Model:
        """An ``output_cls`` object, the answer decoded under its JSON Schema."""
        if not self._uses_schema():
            return super().structured_predict(output_cls, prompt, llm_kwargs, **prompt_args)
        messages, options = self._schema_call(output_cls, prompt, llm_kwargs, prompt_args)
        return self._parsed(output_cls, self.chat(messages, **options))

    @dispatcher.span
    async def astructured_predict(
        self,
        output_cls: type[Model],
        prompt: PromptTemplate,
        llm_kwargs: dict[str, Any] | None = None,
        **prompt_args: Any,
    ) -> Model:
        """Async :meth:`structured_predict`."""
        if not self._uses_schema():
            return await super().astructured_predict(output_cls, prompt, llm_kwargs, **prompt_args)
        messages, options = self._schema_call(output_cls, prompt, llm_kwargs, prompt_args)
        return self._parsed(output_cls, await self.achat(messages, **options))

    def _partial(
        self, output_cls: type[Model], response: ChatResponse, current: list[Any] | None
    ) -> Model | FlexibleModel:
        """The object so far: the final one validated, a partial one (optional fields) before it."""
        if isinstance(response.raw, dict) and "finish_reason" in response.raw:
            return self._parsed(output_cls, response)
        partial = process_streaming_objects(response, output_cls, cur_objects=current, flexible_mode=True)
        assert not isinstance(partial, list)
        dispatcher.event(LLMStructuredPredictInProgressEvent(output=partial))
        return partial

    @dispatcher.span
    def stream_structured_predict(
        self,
        output_cls: type[Model],
        prompt: PromptTemplate,
        llm_kwargs: dict[str, Any] | None = None,
        **prompt_args: Any,
    ) -> Generator[Model | FlexibleModel, None, None]:
        """Partial ``output_cls`` objects as the JSON streams, the validated object last."""
        if not self._uses_schema():
            yield from super().stream_structured_predict(output_cls, prompt, llm_kwargs, **prompt_args)
            return
        messages, options = self._schema_call(output_cls, prompt, llm_kwargs, prompt_args)
        current: list[Any] | None = None
        for response in self.stream_chat(messages, **options):
            partial = self._partial(output_cls, response, current)
            current = [partial]
            yield partial

    @dispatcher.span
    async def astream_structured_predict(
        self,
        output_cls: type[Model],
        prompt: PromptTemplate,
        llm_kwargs: dict[str, Any] | None = None,
        **prompt_args: Any,
    ) -> AsyncGenerator[Model | FlexibleModel, None]:
        """Async :meth:`stream_structured_predict`."""
        if not self._uses_schema():
            return await super().astream_structured_predict(output_cls, prompt, llm_kwargs, **prompt_args)
        messages, options = self._schema_call(output_cls, prompt, llm_kwargs, prompt_args)

        async def partials() -> AsyncGenerator[Model | FlexibleModel, None]:
            current: list[Any] | None = None
            async for response in await self.astream_chat(messages, **options):
                partial = self._partial(output_cls, response, current)
                current = [partial]
                yield partial

        return partials()
