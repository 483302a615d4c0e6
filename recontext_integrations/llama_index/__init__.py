"""LlamaIndex adapters over the ReContext engine (needs `pip install recontext[llama-index]`)."""

try:
    import llama_index.core  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "recontext_integrations.llama_index needs llama-index-core: pip install 'recontext[llama-index]'"
    ) from exc

from recontext_engine.messages import (
    DEFAULT_SPLIT_PATTERNS,
    PromptSplit,
    SplitPattern,
    clean_text,
    split_prompt,
)

from .events import ReContextEvidenceEvent
from .llm import ReContextLLM
from .postprocessor import (
    EVIDENCE_KEY,
    SENTENCE_KEY,
    ReContextEvidencePostprocessor,
    evidence_node,
    sentence_node,
)

__all__ = [
    "DEFAULT_SPLIT_PATTERNS",
    "EVIDENCE_KEY",
    "SENTENCE_KEY",
    "PromptSplit",
    "ReContextEvidenceEvent",
    "ReContextEvidencePostprocessor",
    "ReContextLLM",
    "SplitPattern",
    "clean_text",
    "evidence_node",
    "sentence_node",
    "split_prompt",
]
