"""LangChain integration (``pip install recontext[langchain]``).

``ChatReContext`` is a chat model that answers with evidence replay; ``ReContextReplayer`` puts
the evidence the local model's retrieval heads pick in front of any chat model, hosted ones too;
``ReContextCompressor`` is a document compressor (append, extract or rerank) for retrievers;
``ReContextMiddleware`` is agent middleware that replays a long session's evidence before each
model call (``create_agent``; ``pre_model_hook`` for LangGraph's ``create_react_agent``).

Helpers and constants stay in their modules: ``chat_models`` (``split_messages``, ``as_dicts``,
``chat_messages``), ``tools`` (``tool_choice_option``, ``openai_tools``: what ``bind_tools`` binds),
``replayer`` (``format_replay_prompt``), ``selection`` (``is_evidence``, ``EVIDENCE_KIND``),
``compressor`` (``SENTENCE_KIND``); ``recontext_integrations.common``
(``EVIDENCE_EVENT``, ``load_engine``).
"""

try:
    import langchain_core  # noqa: F401
except ImportError as error:  # pragma: no cover - depends on the environment
    raise ImportError(
        "recontext_integrations.langchain needs langchain-core: pip install 'recontext[langchain]'"
    ) from error

from .chat_models import ChatReContext
from .compressor import ReContextCompressor
from .middleware import ReContextMiddleware
from .replayer import ReContextReplayer

__all__ = ["ChatReContext", "ReContextCompressor", "ReContextMiddleware", "ReContextReplayer"]
