"""What engine call each request becomes.

``/v1/chat/completions`` with ``documents``: the documents are the context and the last user
message is the question. Without them, :func:`recontext_engine.messages.split_messages` applies
the same context/question rules as the LangChain and LlamaIndex chat models; no context found
means plain chat (no replay). Per-request sampling fields and ``recontext`` override the
server's default :class:`~recontext_engine.ReplayConfig`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..config import ReplayConfig
from ..engine import ReContextEngine, ReplayStream
from ..errors import ReContextError
from ..messages import chat_messages, clean_text, split_messages
from .errors import APIError
from .schemas import ChatCompletionRequest, EvidenceRequest, ReContextOptions

StartStream = Callable[[], ReplayStream]


def _config(defaults: ReplayConfig, options: dict[str, Any], param: str | None) -> ReplayConfig:
    try:
        return defaults.with_options(**{k: v for k, v in options.items() if v is not None})
    except ReContextError as exc:
        raise APIError.from_engine(exc, param) from None


def _recontext_options(options: ReContextOptions | None) -> dict[str, Any]:
    return options.model_dump() if options is not None else {}


def chat_config(defaults: ReplayConfig, body: ChatCompletionRequest) -> ReplayConfig:
    """The request's ReplayConfig: sampling fields, then ``recontext`` (rounds, top_k)."""
    if body.n not in (None, 1):
        raise APIError(400, "Only n=1 is supported", param="n", code="invalid_value")
    if body.tools:
        raise APIError(400, "Tool calling is not supported by this server", param="tools")
    stop = [body.stop] if isinstance(body.stop, str) else body.stop
    sampling = {
        "max_new_tokens": body.max_completion_tokens or body.max_tokens,
        "temperature": body.temperature,
        "top_p": body.top_p,
        "stop": tuple(stop) if stop is not None else None,
        "seed": body.seed,
    }
    config = _config(defaults, sampling, None)
    return _config(config, _recontext_options(body.recontext), "recontext")


def chat_call(engine: ReContextEngine, defaults: ReplayConfig, body: ChatCompletionRequest) -> StartStream:
    """A function that starts the engine's stream (tokenize, prefill, select): run it in a worker thread."""
    config = chat_config(defaults, body)
    messages = [m.plain() for m in body.messages]
    split = split_messages(messages, documents=body.documents)
    if body.documents is not None and not split.question:
        raise APIError(
            400,
            "With documents, the question is the last user message, and it is missing or empty",
            param="messages",
        )
    if split.replays:
        if split.system:
            config = config.with_options(system_prompt=split.system)
        return lambda: engine.stream(split.documents, split.question, config)
    plain = chat_messages(messages)
    return lambda: engine.stream_chat(plain, config)


def evidence_call(
    engine: ReContextEngine, defaults: ReplayConfig, body: EvidenceRequest
) -> Callable[[], list[Any]]:
    """A function that selects evidence (no generation): run it in a worker thread."""
    config = _config(defaults, _recontext_options(body.recontext), "recontext")
    documents = [clean_text(d) for d in body.documents]
    return lambda: engine.select_evidence(documents, body.question, config)
