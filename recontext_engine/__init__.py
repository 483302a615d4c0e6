"""ReContext: recursive evidence replay for long-context LLM calls (arXiv 2607.02509).

``import recontext_engine`` needs only torch and transformers; models load on request.
"""

from .config import GenerationConfig, ReplayConfig
from .engine import ReContextEngine, ReplayStream
from .errors import (
    BackendUnavailableError,
    HeadSetError,
    InputError,
    ModelLoadError,
    PromptTooLongError,
    ReContextError,
    UnsupportedModelError,
)
from .heads.headset import HeadSet
from .history import HistoryEvidence, HistoryReplay, HistoryReplayConfig, HistoryReplayer
from .messages import (
    DEFAULT_SPLIT_PATTERNS,
    MessageSplit,
    SplitPattern,
    chat_messages,
    clean_text,
    content_text,
    split_messages,
)
from .prompt import context_block, render_evidence_block
from .results import Evidence, ReplayResult, Usage
from .selection import (
    AttentionSignal,
    BM25Signal,
    EmbeddingSignal,
    OracleSignal,
    RankFusion,
    SentenceEmbeddingSignal,
    Signal,
    hybrid_selector,
    semantic_selector,
)
from .structured import ToolCall, ToolSpec, format_tool_call, parse_tool_calls

__all__ = [
    "DEFAULT_SPLIT_PATTERNS",
    "AttentionSignal",
    "BM25Signal",
    "BackendUnavailableError",
    "Evidence",
    "GenerationConfig",
    "EmbeddingSignal",
    "HeadSet",
    "HeadSetError",
    "HistoryEvidence",
    "HistoryReplay",
    "HistoryReplayConfig",
    "HistoryReplayer",
    "InputError",
    "MessageSplit",
    "ModelLoadError",
    "OracleSignal",
    "PromptTooLongError",
    "RankFusion",
    "ReContextEngine",
    "ReContextError",
    "ReplayConfig",
    "ReplayResult",
    "ReplayStream",
    "SentenceEmbeddingSignal",
    "Signal",
    "SplitPattern",
    "ToolCall",
    "ToolSpec",
    "Usage",
    "UnsupportedModelError",
    "chat_messages",
    "clean_text",
    "content_text",
    "context_block",
    "format_tool_call",
    "hybrid_selector",
    "parse_tool_calls",
    "render_evidence_block",
    "semantic_selector",
    "split_messages",
]
__version__ = "0.1.0"
