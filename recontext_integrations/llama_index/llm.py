"""``ReContextLLM``: a LlamaIndex LLM that replays evidence for RAG prompts and chats plainly otherwise.

Which part of a prompt is context and which is the question is decided by the shared rules of
:mod:`recontext_engine.messages`: LlamaIndex's text-QA, tree-summarize and refine templates
(completion and chat forms, ``split_patterns``), dashed context blocks (``CitationQueryEngine``),
``Question:``/``Query:`` markers, context in the system prompt (``ContextChatEngine``,
``CondensePlusContextChatEngine``) and earlier turns of the chat. A prompt where none finds context
is answered by plain chat-template generation, without replay (logged once, ``replayed: False``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable, Iterator, Sequence
from typing import Any, ClassVar, TypeVar

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
)
from llama_index.core.bridge.pydantic import Field, PrivateAttr, field_validator
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.llms.callbacks import llm_chat_callback, llm_completion_callback
from llama_index.core.llms.custom import CustomLLM

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

T = TypeVar("T")
_CONFIG_FIELDS = ReplayConfig.option_names()
_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
_ROLES |= {"model": "assistant", "chatbot": "assistant", "tool": "tool", "function": "tool"}
# The engine's question marker ("Question:") and LlamaIndex's own ("Query:").
QUESTION_MARKERS = ("Question:", "Query:")
# Generation settings that are ReContextLLM fields: the field and the ReplayConfig option it sets.
_GENERATION = {"max_tokens": "max_new_tokens", "temperature": "temperature"}
dispatcher = get_dispatcher(__name__)


def _messages(messages: Sequence[ChatMessage]) -> list[dict[str, str]]:
    return [{"role": _ROLES.get(m.role.value, "user"), "content": m.content or ""} for m in messages]


async def _in_thread(make: Callable[[], Iterator[T]]) -> AsyncGenerator[T, None]:
    """Iterate a blocking iterator in a worker thread (see ``iterate_in_thread``)."""
    async for item in iterate_in_thread(lambda emit: make()):
        yield item


class ReContextLLM(LocalEngine, CustomLLM):
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
    (``rounds=0``, ``top_k=4``...) override the settings for that call; other keyword arguments
    are ignored. ``context_window`` caps
    the window reported in ``metadata`` (LlamaIndex packs prompts to fit it); the model's own is the
    limit when it is smaller. ``additional_kwargs`` and ``raw`` hold ``replayed``, ``split_rule``,
    the evidence (each item with the ``message_index`` it came from), usage and timings.
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
        return engine.default_config.with_options(**options)

    def split(self, messages: Sequence[dict[str, str]]) -> MessageSplit:
        """This LLM's context/question split of ``{"role", "content"}`` messages."""
        return split_messages(
            messages,
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
            return engine.stream_chat(chat_messages(messages), config), split
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
        # The last piece is held back one step so that it can carry the evidence and usage.
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
        return ChatResponse(
            message=ChatMessage(role=MessageRole.ASSISTANT, content=response.text),
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
