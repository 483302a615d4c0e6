"""``ReContextLLM``: a LlamaIndex LLM that replays evidence for RAG prompts and chats plainly otherwise.

Which part of a prompt is context and which is the question is decided by :func:`split_prompt`:
an ordered list of :class:`SplitPattern` regexes, each with a ``context`` and a ``question`` group.
The defaults cover LlamaIndex's text-QA, tree-summarize and refine templates (completion and chat
forms) and a generic ``Question:``/``Query:`` marker. A prompt that no pattern splits is answered by
plain chat-template generation, without replay.
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, fields
from functools import lru_cache
from typing import Any, TypeVar

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
from llama_index.core.llms.callbacks import llm_chat_callback, llm_completion_callback
from llama_index.core.llms.custom import CustomLLM

from recontext_engine import ReContextEngine, ReplayConfig, ReplayResult, ReplayStream

T = TypeVar("T")
_CONFIG_FIELDS = frozenset(f.name for f in fields(ReplayConfig))
# C0/C1 controls other than tab/newline/CR: the engine rejects them, PDF text often has them (form feeds).
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
_ROLES |= {"model": "assistant", "chatbot": "assistant"}


@dataclass(frozen=True)
class SplitPattern:
    """One way to find context and question in a prompt.

    ``regex`` is matched against the whole prompt (``re.DOTALL``) and must define the groups
    ``context`` and ``question``; any other named groups may be used in ``question_format``, the
    text handed to the engine as the question (e.g. the refine template's existing answer).
    """

    name: str
    regex: str
    question_format: str = "{question}"

    @classmethod
    def from_markers(cls, name: str, context_marker: str, question_marker: str) -> SplitPattern:
        """Context runs from the first ``context_marker`` to the last ``question_marker``; the question is
        the rest. Both markers are regexes (use ``re.escape`` for literal text)."""
        return cls(name, rf"^.*?{context_marker}(?P<context>.*){question_marker}(?P<question>.*)$")


@dataclass(frozen=True)
class PromptSplit:
    """What :func:`split_prompt` found: the context, the question and the pattern's name."""

    context: str
    question: str
    pattern: str


_DASHES = r"[ \t]*-{3,}[ \t]*\n"
_ANSWER = r"\s*\n(?:Answer|Response):\s*$"
_REFINE_TAIL = (
    r"Query:[ \t]*(?P<question>.*?)\nOriginal Answer:[ \t]*(?P<existing_answer>.*?)\nNew Answer:\s*$"
)
_REFINE_QUESTION = "{question}\nAn earlier answer, to improve only if the context helps: {existing_answer}"
DEFAULT_SPLIT_PATTERNS: tuple[SplitPattern, ...] = (
    # text_qa / tree_summarize (default_prompts and chat_prompts, plain and rich forms)
    SplitPattern(
        "llama_index_text_qa",
        rf"^\s*Context information(?: from multiple sources)? is below\.\s*\n{_DASHES}(?P<context>.*)"
        rf"\n{_DASHES}(?:[^\n]*\n)??\s*(?:Query|Question):[ \t]*(?P<question>.*?){_ANSWER}",
    ),
    # refine (default_prompts): the question comes before the context
    SplitPattern(
        "llama_index_refine",
        r"^\s*The original query is as follows:[ \t]*(?P<question>.*?)\n"
        r"We have provided an existing answer:[ \t]*(?P<existing_answer>.*?)\n"
        rf"We have the opportunity to refine[^\n]*\n{_DASHES}(?P<context>.*)\n{_DASHES}.*$",
        _REFINE_QUESTION,
    ),
    # refine (chat_prompts): rich form with dashed lines first, then the plain form
    SplitPattern(
        "llama_index_chat_refine",
        rf"^.*?New Context:\s*\n{_DASHES}(?P<context>.*)\n{_DASHES}\s*{_REFINE_TAIL}",
        _REFINE_QUESTION,
    ),
    SplitPattern(
        "llama_index_chat_refine",
        rf"^.*?New Context:[ \t]*(?P<context>.*)\n{_REFINE_TAIL}",
        _REFINE_QUESTION,
    ),
    # generic: everything before the last line starting with "Question:" or "Query:" is context
    SplitPattern(
        "question_marker",
        r"^(?:\s*Context:[ \t]*\n)?(?P<context>.*\S)\s*\n[ \t]*(?:Question|Query):[ \t]*(?P<question>.*?)"
        r"(?:\s*\n(?:Answer|Response):)?\s*$",
    ),
)


@lru_cache(maxsize=64)
def _compiled(regex: str) -> re.Pattern[str]:
    return re.compile(regex, re.DOTALL)


def split_prompt(text: str, patterns: Sequence[SplitPattern] = DEFAULT_SPLIT_PATTERNS) -> PromptSplit | None:
    """Split ``text`` by the first pattern that matches it.

    None when no pattern matches, or when the matching one finds an empty context or question
    (e.g. a text-QA prompt with nothing retrieved): such prompts are answered without replay.
    """
    for pattern in patterns:
        match = _compiled(pattern.regex).match(text)
        if match is None:
            continue
        groups = {k: (v or "").strip() for k, v in match.groupdict().items()}
        if not (groups.get("context") and groups.get("question")):
            return None
        return PromptSplit(groups["context"], pattern.question_format.format(**groups).strip(), pattern.name)
    return None


def clean_text(text: str) -> str:
    """Replace control characters the engine rejects by spaces (same length, so offsets still hold)."""
    return _CONTROL.sub(" ", text)


def load_engine(owner: Any) -> ReContextEngine:
    """The owner's engine, loaded once on first use from its ``model``/``heads``/``device`` fields."""
    if owner._engine is None:
        with owner._lock:
            if owner._engine is None:
                owner._engine = ReContextEngine.from_pretrained(
                    owner.model, heads=owner.heads, device=owner.device
                )
    return owner._engine


def _messages(messages: Sequence[ChatMessage]) -> list[dict[str, str]]:
    out = []
    for message in messages:
        content = clean_text(message.content or "")
        if content.strip():
            out.append({"role": _ROLES.get(message.role.value, "user"), "content": content})
    return out


async def _in_thread(make: Callable[[], Iterator[T]]) -> AsyncIterator[T]:
    """Iterate a blocking iterator in a worker thread, handing items to the event loop through a queue."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[bool, Any]] = asyncio.Queue()
    cancelled = threading.Event()

    def put(item: tuple[bool, Any]) -> None:
        try:
            loop.call_soon_threadsafe(queue.put_nowait, item)
        except RuntimeError:  # the loop closed while we were still generating
            cancelled.set()

    def work() -> None:
        iterator = make()
        try:
            for item in iterator:
                if cancelled.is_set():
                    break
                put((False, item))
        except BaseException as exc:  # handed to the consumer, raised there
            put((True, exc))
            return
        finally:
            close = getattr(iterator, "close", None)
            if close is not None:
                close()
        put((True, None))

    worker = asyncio.ensure_future(asyncio.to_thread(work))
    try:
        while True:
            done, value = await queue.get()
            if done:
                if value is not None:
                    raise value
                break
            yield value
        await worker
    finally:
        cancelled.set()


class ReContextLLM(CustomLLM):
    """A local LLM that replays the evidence its own retrieval heads point at (arXiv 2607.02509).

    Pass a ready ``engine=``, or set ``model`` (None: the embedded SmolLM2-135M-Instruct), ``heads``
    and ``device``: the model then loads on first use (a generation call or ``metadata``), never in
    ``__init__``. Every prompt goes through the model's chat template. A prompt (or the last user
    message of a conversation that has no earlier user or assistant turns) that ``split_patterns``
    splits into context and question is answered with evidence replay; anything else by plain
    generation. Keyword arguments of a call that name :class:`~recontext_engine.ReplayConfig` fields
    (``rounds=0``, ``top_k=4``, ``max_new_tokens=32``...) override the settings for that call; other
    keyword arguments are ignored. Evidence, usage and timings are in ``additional_kwargs`` and ``raw``.
    """

    model: str | None = Field(default=None, description="Hub id, local folder or .gguf; None = embedded.")
    heads: str | list[tuple[int, int]] = Field(
        default="auto", description="Head set: 'auto', a JSON path or pairs."
    )
    device: str = Field(default="cpu", description="Torch device for a lazily loaded model.")
    max_new_tokens: int = Field(default=256, ge=1, description="Tokens to generate at most (num_output).")
    temperature: float = Field(default=0.0, ge=0.0, description="0 = greedy (deterministic).")
    replay_options: dict[str, Any] = Field(
        default_factory=dict, description="Other ReplayConfig fields, e.g. {'rounds': 2, 'top_k': 4}."
    )
    split_patterns: list[SplitPattern] = Field(
        default_factory=lambda: list(DEFAULT_SPLIT_PATTERNS),
        description="Tried in order to split a prompt into context and question.",
    )

    _engine: ReContextEngine | None = PrivateAttr(default=None)
    _lock: Any = PrivateAttr(default_factory=threading.Lock)

    def __init__(self, engine: ReContextEngine | None = None, **data: Any) -> None:
        super().__init__(**data)
        self._engine = engine

    @field_validator("replay_options")
    @classmethod
    def _check_options(cls, value: dict[str, Any]) -> dict[str, Any]:
        own = sorted({"max_new_tokens", "temperature"} & set(value))
        if own:
            raise ValueError(f"set {', '.join(own)} as ReContextLLM fields, not in replay_options")
        ReplayConfig().with_options(**value)  # raises ReContextError (a ValueError) on bad options
        return value

    @classmethod
    def class_name(cls) -> str:
        return "ReContextLLM"

    @property
    def engine(self) -> ReContextEngine:
        """The engine (loaded now if it is not yet)."""
        return load_engine(self)

    @property
    def metadata(self) -> LLMMetadata:
        """The model's own window and name; reading it loads the model if it is not loaded yet."""
        engine = self.engine
        return LLMMetadata(
            context_window=engine.context_window,
            num_output=self.max_new_tokens,
            is_chat_model=True,
            model_name=engine.model_name or str(self.model or ""),
            system_role=MessageRole.SYSTEM,
        )

    # -- the engine call ------------------------------------------------------------------

    def _config(self, engine: ReContextEngine, kwargs: dict[str, Any]) -> ReplayConfig:
        options = {
            **self.replay_options,
            "max_new_tokens": self.max_new_tokens,
            "temperature": self.temperature,
        }
        options.update({k: v for k, v in kwargs.items() if k in _CONFIG_FIELDS})
        return engine.default_config.with_options(**options)

    def _start(
        self, messages: list[dict[str, str]], kwargs: dict[str, Any]
    ) -> tuple[ReplayStream, str | None]:
        """Start generation; returns the stream and the split pattern's name (None: no replay)."""
        engine = self.engine
        config = self._config(engine, kwargs)
        *earlier, last = messages or [{"role": "user", "content": ""}]
        split = None
        if last["role"] == "user" and all(m["role"] == "system" for m in earlier):
            split = split_prompt(last["content"], self.split_patterns)
        if split is None:
            return engine.stream_chat(messages, config), None
        if earlier:
            config = config.with_options(system_prompt="\n\n".join(m["content"] for m in earlier))
        return engine.stream(split.context, split.question, config), split.pattern

    def _prompt_messages(self, prompt: str, formatted: bool) -> list[dict[str, str]]:
        messages = (
            []
            if formatted or not self.system_prompt
            else [ChatMessage.from_str(self.system_prompt, "system")]
        )
        return _messages([*messages, ChatMessage.from_str(prompt, "user")])

    @staticmethod
    def _extras(result: ReplayResult | None, pattern: str | None) -> tuple[dict[str, Any], dict[str, Any]]:
        """(raw, additional_kwargs) of a finished call; ``split_pattern`` None means plain chat."""
        raw = {**(result.to_dict() if result else {}), "split_pattern": pattern}
        keys = ("evidence", "usage", "timings", "model", "finish_reason", "split_pattern")
        return raw, {k: raw[k] for k in keys if k in raw}

    def _complete_messages(
        self, messages: list[dict[str, str]], kwargs: dict[str, Any]
    ) -> CompletionResponse:
        stream, pattern = self._start(messages, kwargs)
        for _ in stream:
            pass
        raw, extras = self._extras(stream.result, pattern)
        return CompletionResponse(
            text=stream.result.text if stream.result else "", raw=raw, additional_kwargs=extras
        )

    def _stream_messages(
        self, messages: list[dict[str, str]], kwargs: dict[str, Any]
    ) -> CompletionResponseGen:
        # The last piece is held back one step so that it can carry the evidence and usage.
        stream, pattern = self._start(messages, kwargs)
        text, held = "", None
        try:
            for piece in stream:
                if held is not None:
                    yield CompletionResponse(text=text, delta=held)
                held, text = piece, text + piece
        finally:
            stream.close()
        raw, extras = self._extras(stream.result, pattern)
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
