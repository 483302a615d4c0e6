"""``ChatReContext``: a LangChain chat model that answers with ReContext evidence replay."""

from __future__ import annotations

import asyncio
import contextvars
import re
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.documents import Document
from langchain_core.language_models import BaseChatModel, LangSmithParams
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, ChatMessage
from langchain_core.messages.ai import UsageMetadata
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables.config import run_in_executor
from pydantic import Field

if TYPE_CHECKING:
    from recontext_engine import ReContextEngine, ReplayResult, ReplayStream

# Same as recontext_engine.loading.EMBEDDED_NAME; repeated so tracing needs no torch import.
EMBEDDED_MODEL_NAME = "SmolLM2-135M-Instruct"
DEFAULT_QUESTION_MARKER = "Question:"
_CONTEXT_LABEL = "Context:"
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

_ENGINES: dict[tuple, Any] = {}
_LOCKS: dict[tuple, threading.Lock] = {}
_REGISTRY_LOCK = threading.Lock()


def load_engine(model: str | None = None, *, heads: Any = "auto", device: str = "cpu") -> ReContextEngine:
    """The engine for these settings, loaded once per process (thread-safe) and then shared."""
    frozen_heads = heads if isinstance(heads, str) else tuple(tuple(pair) for pair in heads)
    key = (model, frozen_heads, device)
    with _REGISTRY_LOCK:
        lock = _LOCKS.setdefault(key, threading.Lock())
    with lock:
        if key not in _ENGINES:
            from recontext_engine import ReContextEngine

            _ENGINES[key] = ReContextEngine.from_pretrained(model, heads=heads, device=device)
        return _ENGINES[key]


@dataclass(frozen=True)
class MessageSplit:
    """Chat messages mapped onto ReContext's ``[C; q]``; no ``documents`` means plain chat (no replay)."""

    documents: list[str]
    question: str
    system: str | None = None


def message_text(message: BaseMessage) -> str:
    """The text of a message: its string content, or its text blocks joined by newlines."""
    if isinstance(message.content, str):
        return message.content
    return "\n".join(
        block if isinstance(block, str) else str(block.get("text", ""))
        for block in message.content
        if isinstance(block, str) or (block.get("type") == "text" and isinstance(block.get("text"), str))
    )


def _split_at_marker(text: str, marker: str) -> tuple[str, str]:
    """``(before, question)`` split at the last line that starts with ``marker``; ``("", text)`` if none."""
    matches = list(re.finditer(rf"^[ \t]*{re.escape(marker)}", text, flags=re.MULTILINE))
    if not matches:
        return "", text
    question = text[matches[-1].end() :].strip()
    if not question:
        return "", text
    before = text[: matches[-1].start()].strip()
    if before.startswith(_CONTEXT_LABEL):
        before = before[len(_CONTEXT_LABEL) :].strip()
    return before, question


def split_messages(
    messages: Sequence[BaseMessage],
    *,
    question_marker: str | None = DEFAULT_QUESTION_MARKER,
    history_as_context: bool = True,
    documents: Sequence[str | Document] | None = None,
) -> MessageSplit:
    """The default context/question rule of :class:`ChatReContext` (see its docstring)."""
    system = "\n\n".join(t for m in messages if m.type == "system" and (t := message_text(m).strip()))
    last = next((i for i in range(len(messages) - 1, -1, -1) if messages[i].type == "human"), None)
    if last is None:
        return MessageSplit([], "", system or None)
    question = message_text(messages[last]).strip()
    if documents is not None:
        texts = [d.page_content if isinstance(d, Document) else d for d in documents]
        return MessageSplit(texts, question, system or None)
    before = ""
    if question_marker:
        before, question = _split_at_marker(question, question_marker)
    docs = []
    if history_as_context:
        docs = [
            text
            for i, m in enumerate(messages)
            if i != last and m.type != "system" and (text := message_text(m).strip())
        ]
    if before:
        docs.append(before)
    return MessageSplit(docs, question, system or None)


def chat_messages(messages: Sequence[BaseMessage]) -> list[dict[str, str]]:
    """``{"role", "content"}`` dicts for plain chat; system messages merged into one at the front."""
    system = "\n\n".join(t for m in messages if m.type == "system" and (t := message_text(m).strip()))
    result = [{"role": "system", "content": system}] if system else []
    for m in messages:
        text = message_text(m).strip()
        if m.type != "system" and text:
            role = m.role if isinstance(m, ChatMessage) else _ROLES.get(m.type, "user")
            result.append({"role": role, "content": text})
    return result


def _usage(result: ReplayResult) -> UsageMetadata:
    return UsageMetadata(
        input_tokens=result.usage.input_tokens,
        output_tokens=result.usage.output_tokens,
        total_tokens=result.usage.total_tokens,
    )


def _response_metadata(result: ReplayResult) -> dict[str, Any]:
    return {
        "model_name": result.model,
        "model_provider": "recontext",
        "finish_reason": result.finish_reason,
        "evidence": [e.to_dict() for e in result.evidence],
        "evidence_tokens": result.usage.evidence_tokens,
        "timings": dict(result.timings),
    }


class ChatReContext(BaseChatModel):
    """A local LLM that replays the evidence its own retrieval heads point at (ReContext).

    Context/question rule (default; ``question_marker`` and ``history_as_context`` tune it,
    ``message_splitter`` replaces it with any ``(messages, documents) -> MessageSplit`` function):

    - The question is the last human message. If it has a line starting with ``"Question:"``,
      the text after the last such marker is the question and the text before it (less a leading
      ``"Context:"`` label) is context.
    - Every other non-system message (human, AI, tool; earlier turns), in order, is one context
      document; the text before the marker is the last one. System messages are never context: they become
      the system prompt.
    - ``invoke(..., documents=[...])`` (strings or ``Document``) gives the context explicitly;
      then the whole last human message is the question and earlier messages are not used.
    - No context (e.g. a lone ``"Hello"``): plain chat generation over all messages, no replay.

    Evidence ``doc_index`` values index those context documents (``split_messages`` reproduces
    them). Replay settings (``rounds``, ``top_k``, ``max_tokens``, ``temperature``, ``stop``,
    ``replay_options`` for any other ``ReplayConfig`` field) can be overridden per call as keyword
    arguments or with ``.bind(...)``. Pass a loaded ``engine`` to share it; otherwise the model
    (``model=None``: the embedded SmolLM2-135M-Instruct) loads on first use, once per process.
    Tool calling and structured output are not supported.
    """

    engine: Any = Field(default=None, exclude=True)
    """A loaded ``ReContextEngine``; when set, ``model``, ``heads`` and ``device`` are unused."""
    model: str | None = None
    """Hub id, local folder or GGUF path; None: the embedded default model."""
    heads: str | list[tuple[int, int]] = "auto"
    """Retrieval heads: ``"auto"``, a JSON path or ``(layer, head)`` pairs."""
    device: str = "cpu"
    rounds: int | None = None
    """Replay rounds (0: vanilla); None: the engine default."""
    top_k: int | None = None
    max_tokens: int | None = 256
    temperature: float = 0.0
    top_p: float | None = None
    seed: int | None = None
    stop: list[str] | None = None
    replay_options: dict[str, Any] = Field(default_factory=dict)
    """Other ``ReplayConfig`` fields, e.g. ``{"cue_window": 16, "unit": "token"}``."""
    question_marker: str | None = DEFAULT_QUESTION_MARKER
    history_as_context: bool = True
    message_splitter: Callable[..., MessageSplit] | None = Field(default=None, exclude=True)
    streaming: bool = False
    """Make ``invoke`` stream internally (callbacks then get tokens)."""

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

    def get_engine(self) -> ReContextEngine:
        """The injected engine, or the one for ``model``/``heads``/``device`` (loaded on first use)."""
        if self.engine is not None:
            return self.engine
        return load_engine(self.model, heads=self.heads, device=self.device)

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
        self, messages: list[BaseMessage], stop: list[str] | None, kwargs: dict[str, Any]
    ) -> ReplayStream:
        """Start generation: replay over the context if the rule finds one, else plain chat."""
        kwargs = dict(kwargs)
        kwargs.pop("stream", None)  # LangChain's own routing flag
        documents = kwargs.pop("documents", None)
        engine = self.get_engine()
        model = kwargs.pop("model", None)
        if model is not None and model not in (self.model_name, engine.model_name):
            raise ValueError(
                f"ChatReContext serves one local model ({engine.model_name}); "
                f"create another ChatReContext(model={model!r}) to use {model!r}"
            )
        options = dict(self.replay_options)
        for name, config_name in _FORWARDED.items():
            value = kwargs.pop(name, getattr(self, name))
            if value is not None:
                options[config_name] = value
        stops = stop if stop is not None else self.stop
        if stops is not None:
            options["stop"] = tuple(stops)
        options.update(kwargs)  # other ReplayConfig fields; the engine rejects unknown names
        split = self.split(messages, documents)
        if split.documents:
            if split.system:
                options["system_prompt"] = split.system
            return engine.stream(split.documents, split.question, **options)
        return engine.stream_chat(chat_messages(messages), **options)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        stream = self._open(messages, stop, kwargs)
        for _ in stream:
            pass
        result = stream.result
        assert result is not None  # set by the engine once the stream is exhausted
        message = AIMessage(
            content=result.text, usage_metadata=_usage(result), response_metadata=_response_metadata(result)
        )
        generation = ChatGeneration(message=message, generation_info={"finish_reason": result.finish_reason})
        return ChatResult(generations=[generation], llm_output={"model_name": result.model})

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        stream = self._open(messages, stop, kwargs)
        try:
            for piece in stream:
                chunk = ChatGenerationChunk(message=AIMessageChunk(content=piece))
                if run_manager:
                    run_manager.on_llm_new_token(piece, chunk=chunk)
                yield chunk
        finally:
            stream.close()
        result = stream.result
        assert result is not None
        yield ChatGenerationChunk(
            message=AIMessageChunk(
                content="",
                chunk_position="last",
                usage_metadata=_usage(result),
                response_metadata=_response_metadata(result),
            ),
            generation_info={"finish_reason": result.finish_reason},
        )

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        # The engine is synchronous: run it in a worker thread so the event loop stays free.
        return await run_in_executor(None, self._generate, messages, stop, None, **kwargs)

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Any] = asyncio.Queue()
        cancelled = threading.Event()
        done = object()

        def produce() -> None:
            chunks = self._stream(messages, stop, None, **kwargs)
            try:
                for chunk in chunks:
                    if cancelled.is_set():
                        break
                    loop.call_soon_threadsafe(queue.put_nowait, chunk)
            except BaseException as error:  # handed to the consumer, re-raised there
                loop.call_soon_threadsafe(queue.put_nowait, error)
            finally:
                chunks.close()
                loop.call_soon_threadsafe(queue.put_nowait, done)

        worker = loop.run_in_executor(None, contextvars.copy_context().run, produce)
        try:
            while (item := await queue.get()) is not done:
                if isinstance(item, BaseException):
                    raise item
                if run_manager and item.text:
                    await run_manager.on_llm_new_token(item.text, chunk=item)
                yield item
        finally:
            cancelled.set()  # the worker stops after at most one more token
            await worker
