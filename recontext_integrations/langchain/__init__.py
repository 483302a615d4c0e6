"""LangChain integration (``pip install recontext[langchain]``).

``ChatReContext`` is a chat model that answers with evidence replay; ``ReContextReplayer`` puts
the evidence the local model's retrieval heads pick in front of any chat model, hosted ones too.
"""

try:
    import langchain_core  # noqa: F401
except ImportError as error:  # pragma: no cover - depends on the environment
    raise ImportError(
        "recontext_integrations.langchain needs langchain-core: pip install 'recontext[langchain]'"
    ) from error

from .chat_models import ChatReContext, MessageSplit, chat_messages, load_engine, split_messages
from .replayer import EVIDENCE_KIND, ReContextReplayer, format_replay_prompt, is_evidence

__all__ = [
    "EVIDENCE_KIND",
    "ChatReContext",
    "MessageSplit",
    "ReContextReplayer",
    "chat_messages",
    "format_replay_prompt",
    "is_evidence",
    "load_engine",
    "split_messages",
]
