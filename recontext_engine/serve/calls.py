"""What engine call each request becomes.

``/v1/chat/completions`` with ``documents``: the documents are the context and the last user
message is the question. Without them, :func:`recontext_engine.messages.split_messages` applies
the same context/question rules as the LangChain and LlamaIndex chat models; no context found
means plain chat (no replay). Per-request sampling fields, the answer's form
(``response_format``, ``tools``, ``tool_choice``) and ``recontext`` override the server's
default :class:`~recontext_engine.ReplayConfig`.

Tool round trips: an assistant message's ``tool_calls`` become its text in the form the model was
told to call tools in, and ``tool`` messages carry the results; without ``documents`` both are
history, hence context, like every earlier turn. With ``documents``, whose rule reads no earlier
turn, the messages after the last user message, when they hold a tool result (the calls made for
the question and their results), are added after the documents: evidence from them has a
``doc_index`` past the documents sent.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..config import ReplayConfig
from ..engine import ReContextEngine, ReplayStream
from ..errors import ReContextError
from ..messages import chat_messages, clean_text, split_messages
from .errors import APIError
from .schemas import ChatCompletionRequest, EvidenceRequest, ReContextOptions, unsupported

StartStream = Callable[[], ReplayStream]
# OpenAI's names of the request fields that map onto ReplayConfig fields.
_OPENAI_NAMES = {
    "max_new_tokens": "max_completion_tokens",
    "temperature": "temperature",
    "top_p": "top_p",
    "json_schema": "response_format",
}


def _config(defaults: ReplayConfig, options: dict[str, Any], prefix: str = "") -> ReplayConfig:
    """``defaults`` with ``options``; a value ReplayConfig refuses is a 400 naming the request field."""
    config = defaults
    for name, value in options.items():
        if value is None:
            continue
        try:
            config = config.with_options(**{name: value})
        except ReContextError as exc:
            param = prefix + _OPENAI_NAMES.get(name, name)
            raise APIError(400, str(exc), param=param, code="invalid_value") from None
    return config


def _recontext_options(options: ReContextOptions | None) -> dict[str, Any]:
    return options.model_dump() if options is not None else {}


def chat_config(defaults: ReplayConfig, body: ChatCompletionRequest) -> ReplayConfig:
    """The request's ReplayConfig: sampling fields, then ``recontext`` (rounds, top_k)."""
    error = unsupported(body)
    if error is not None:
        raise error
    stop = [body.stop] if isinstance(body.stop, str) else body.stop
    max_tokens = body.max_completion_tokens if body.max_completion_tokens is not None else body.max_tokens
    temperature, top_p = body.temperature, body.top_p
    if top_p == 0.0:  # OpenAI allows it: only the likeliest token is left, i.e. greedy decoding
        temperature, top_p = 0.0, None
    sampling = {
        "max_new_tokens": max_tokens,
        "temperature": temperature,
        "top_p": top_p,
        "stop": tuple(stop) if stop is not None else None,
        "seed": body.seed,
    }
    config = _config(defaults, sampling)
    return _config(config, _recontext_options(body.recontext), "recontext.")


def shaped_config(config: ReplayConfig, body: ChatCompletionRequest) -> ReplayConfig:
    """``config`` with the request's answer form (``response_format``, ``tools``, ``tool_choice``).

    The engine compiles each JSON Schema to check that it can be enforced, which can take seconds
    for a crafted one (``{"pattern": "a{9999}"}``): call it in a worker thread, not the event loop.
    """
    return _config(config, body.answer_form())


def chat_call(engine: ReContextEngine, defaults: ReplayConfig, body: ChatCompletionRequest) -> StartStream:
    """A function that starts the engine's stream: run it in a worker thread.

    Only the cheap checks run here, on the caller's thread (the server's event loop); the answer
    form's schemas, finding the context in the messages, tokenizing, prefill and selection are
    checked and run when the function is called.
    """
    config = chat_config(defaults, body)
    messages = [m.plain() for m in body.messages]
    last_user = next((m["content"] for m in reversed(messages) if m["role"] == "user"), "")
    if body.documents is not None and not last_user.strip():
        raise APIError(
            400,
            "With documents, the question is the last user message, and it is missing or empty",
            param="messages",
        )
    documents = body.documents
    if documents is not None:
        last = max(i for i, m in enumerate(messages) if m["role"] == "user")
        if any(m["role"] == "tool" for m in messages[last + 1 :]):
            documents = [*documents, *(m["content"] for m in messages[last + 1 :] if m["content"].strip())]

    def start() -> ReplayStream:
        shaped = shaped_config(config, body)
        split = split_messages(messages, documents=documents)
        if not split.replays:
            return engine.stream_chat(chat_messages(messages), shaped)
        system = shaped.with_options(system_prompt=split.system) if split.system else shaped
        return engine.stream(split.documents, split.question, system)

    return start


def evidence_call(
    engine: ReContextEngine, defaults: ReplayConfig, body: EvidenceRequest
) -> Callable[[], list[Any]]:
    """A function that selects evidence (no generation): run it in a worker thread."""
    config = _config(defaults, _recontext_options(body.recontext), "recontext.")
    return lambda: engine.select_evidence([clean_text(d) for d in body.documents], body.question, config)
