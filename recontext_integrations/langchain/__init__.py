"""LangChain integration (``pip install recontext[langchain]``).

``ChatReContext`` is a chat model that answers with evidence replay; ``ReContextReplayer`` puts
the evidence the local model's retrieval heads pick in front of any chat model, hosted ones too;
``ReContextCompressor`` is a document compressor (append, extract or rerank) for retrievers.
"""

try:
    import langchain_core  # noqa: F401
except ImportError as error:  # pragma: no cover - depends on the environment
    raise ImportError(
        "recontext_integrations.langchain needs langchain-core: pip install 'recontext[langchain]'"
    ) from error

from recontext_engine.messages import MessageSplit

from ..common import EVIDENCE_EVENT, load_engine
from .chat_models import ChatReContext, as_dicts, chat_messages, split_messages
from .compressor import SENTENCE_KIND, ReContextCompressor
from .replayer import ReContextReplayer, format_replay_prompt
from .selection import EVIDENCE_KIND, is_evidence

__all__ = [
    "EVIDENCE_EVENT",
    "EVIDENCE_KIND",
    "SENTENCE_KIND",
    "ChatReContext",
    "MessageSplit",
    "ReContextCompressor",
    "ReContextReplayer",
    "as_dicts",
    "chat_messages",
    "format_replay_prompt",
    "is_evidence",
    "load_engine",
    "split_messages",
]
