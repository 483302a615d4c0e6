"""Glue shared by the LangChain and LlamaIndex adapters (no framework imports here).

The engine cache (one loaded model per settings, whichever adapter asks), the check of constructor
arguments, the thread bridge that runs the synchronous engine under an event loop, the evidence
payload of responses and events, and the plain-chat notice. The evidence block is rendered by the
engine's own ``recontext_engine.render_evidence_block``. The adapters import only the names
``recontext_engine`` exports (its ``__all__``).
"""

from __future__ import annotations

import asyncio
import contextvars
import difflib
import logging
import threading
from collections.abc import AsyncGenerator, Callable, Collection, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from recontext_engine import Evidence, MessageSplit, ReContextEngine

T = TypeVar("T")
logger = logging.getLogger("recontext_integrations")
# Name of the evidence event on both sides (LangChain custom event, LlamaIndex event class name).
EVIDENCE_EVENT = "recontext_evidence"

# Arguments that hosted-model clients take and a local model has no use for, and why.
NOT_APPLICABLE = {
    "timeout": "a local model sends no request, so there is no request timeout",
    "max_retries": "a local model sends no request, so there is nothing to retry",
    "api_key": "a local model needs no API key",
    "base_url": "the model runs in this process; pass model= (a hub id, folder or .gguf path)",
    "model_kwargs": "pass ReplayConfig options as replay_options={...}",
    "additional_kwargs": "pass ReplayConfig options as replay_options={...}",
}

_ENGINES: dict[tuple, Any] = {}
_LOCKS: dict[tuple, threading.Lock] = {}
_REGISTRY_LOCK = threading.Lock()


def load_engine(model: str | None = None, *, heads: Any = "auto", device: str = "cpu") -> ReContextEngine:
    """The engine for these settings, loaded once per process (thread-safe) and then shared.

    A ``ChatReContext``, a ``ReContextLLM`` and a ``ReContextEvidencePostprocessor`` with the same
    ``model``/``heads``/``device`` all get the same engine.
    """
    frozen_heads = heads if isinstance(heads, str) else tuple(tuple(pair) for pair in heads)
    key = (model, frozen_heads, device)
    with _REGISTRY_LOCK:
        lock = _LOCKS.setdefault(key, threading.Lock())
    with lock:
        if key not in _ENGINES:
            from recontext_engine import ReContextEngine

            _ENGINES[key] = ReContextEngine.from_pretrained(model, heads=heads, device=device)
        return _ENGINES[key]


def renamed(options: Mapping[str, Any], aliases: Mapping[str, str]) -> dict[str, Any]:
    """``options`` with each alias (``{"max_tokens": "max_new_tokens"}``) renamed to its setting."""
    options = dict(options)
    for alias, name in aliases.items():
        if alias in options:
            if name in options:
                raise ValueError(f"{alias}= and {name}= are the same setting: pass one of them")
            options[name] = options.pop(alias)
    return options


def checked_settings(
    data: Any,
    fields: Collection[str],
    aliases: Mapping[str, str],
    replaced: Mapping[str, str] | None = None,
) -> Any:
    """Constructor arguments with the aliases renamed; a ValueError names every unknown one.

    Used as a pydantic ``mode="before"`` model validator, so a misspelled setting fails loudly
    (with the closest field name) instead of being ignored. ``replaced`` maps a setting that an
    earlier version took to what to write instead (said in the error).
    """
    if not isinstance(data, dict):
        return data
    data = renamed(data, aliases)
    unknown = [name for name in data if name not in fields]
    if unknown:
        known = [*fields, *aliases]
        raise ValueError("; ".join(_unknown_setting(name, known, replaced or {}) for name in unknown))
    return data


def _unknown_setting(name: str, known: Collection[str], replaced: Mapping[str, str]) -> str:
    from recontext_engine import ReplayConfig  # here: importing the engine loads torch

    if name in replaced:
        return f"{name}= was replaced: {replaced[name]}"
    if name in NOT_APPLICABLE:
        return f"{name}= is not supported: {NOT_APPLICABLE[name]}"
    if name in ReplayConfig.option_names() and "replay_options" in known:
        return f"{name} is a ReplayConfig option: pass replay_options={{{name!r}: ...}}"
    closest = difflib.get_close_matches(name, list(known), n=1)
    return f"unknown argument {name!r}" + (f"; did you mean {closest[0]!r}?" if closest else "")


def evidence_span(item: Evidence) -> dict[str, Any]:
    """An evidence item's provenance inside its source, without the text or which source it is
    (each integration names that its own way): offsets, score, round and whether it is a heading."""
    return {
        "char_start": item.char_start,
        "char_end": item.char_end,
        "score": item.score,
        "round": item.round,
        "heading": item.heading,
    }


def evidence_payload(evidence: Sequence[Evidence], sources: Sequence[int] = ()) -> list[dict[str, Any]]:
    """Evidence as dicts; with ``sources`` (``MessageSplit.sources``) each names its ``message_index``."""
    items = []
    for item in evidence:
        data = item.to_dict()
        if sources:
            data["message_index"] = sources[item.doc_index]
        items.append(data)
    return items


class PlainChatNotice:
    """Logs once per owner (a chat model) that a call found no context and chatted without replay."""

    def __init__(self) -> None:
        self._warned = False
        self._lock = threading.Lock()

    # A lock cannot be copied or pickled: a copy gets a fresh one (and keeps whether it warned).
    def __getstate__(self) -> dict[str, Any]:
        return {"warned": self._warned}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._warned = state["warned"]
        self._lock = threading.Lock()

    def __call__(self, owner: str, split: MessageSplit) -> None:
        with self._lock:
            if self._warned:
                return
            self._warned = True
        logger.warning(
            "%s found no context in the messages (split rule %r) and answered by plain chat, without "
            "replay. Pass documents=..., put the context before a 'Question:' line, or in the system "
            "message. Responses say replayed=False. (Logged once per model.)",
            owner,
            split.rule,
        )


async def iterate_in_thread(
    make: Callable[[Callable[[Any], None]], Iterator[T]],
) -> AsyncGenerator[T, None]:
    """Run a blocking iterator in a worker thread and hand its items to the event loop in order.

    ``make(emit)`` builds the iterator in the worker; ``emit(item)`` puts a side item (an evidence
    event) in the same queue, so the consumer sees it before the items yielded after it. Closing
    the async iterator early stops the worker after at most one more item and waits for it.
    """
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[bool, Any]] = asyncio.Queue()
    cancelled = threading.Event()

    def put(item: tuple[bool, Any]) -> None:
        try:
            loop.call_soon_threadsafe(queue.put_nowait, item)
        except RuntimeError:  # the loop closed while the worker was still generating
            cancelled.set()

    def work() -> None:
        iterator: Iterator[T] | None = None
        try:
            iterator = make(lambda item: put((False, item)))
            for item in iterator:
                if cancelled.is_set():
                    break
                put((False, item))
        except BaseException as error:  # handed to the consumer, raised there
            put((True, error))
            return
        finally:
            close = getattr(iterator, "close", None) if iterator is not None else None
            if close is not None:
                close()
        put((True, None))

    worker = loop.run_in_executor(None, contextvars.copy_context().run, work)
    try:
        while True:
            done, value = await queue.get()
            if done:
                if value is not None:
                    raise value
                break
            yield value
    finally:
        cancelled.set()
        await worker


def shared_engine_memo(engine: Any, memo: dict[int, Any] | None) -> dict[int, Any]:
    """A ``deepcopy`` memo under which a loaded ``engine`` is shared by the copy, never duplicated."""
    memo = {} if memo is None else memo
    if engine is not None:
        memo[id(engine)] = engine
    return memo


def refuse_pickling_an_engine(owner: object, engine: Any) -> None:
    """A component built with ``engine=`` holds a loaded model, which does not pickle: say what to do."""
    if engine is not None:
        raise TypeError(
            f"a {type(owner).__name__} built with engine= cannot be pickled (the engine is a loaded "
            "model); build it with model=... instead, which loads the model on first use"
        )
