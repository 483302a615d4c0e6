"""LlamaIndex adapters over the ReContext engine (needs `pip install recontext[llama-index]`)."""

try:
    import llama_index.core  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "recontext_integrations.llama_index needs llama-index-core: pip install 'recontext[llama-index]'"
    ) from exc

from .llm import DEFAULT_SPLIT_PATTERNS, PromptSplit, ReContextLLM, SplitPattern, split_prompt
from .postprocessor import EVIDENCE_KEY, ReContextEvidencePostprocessor, evidence_node

__all__ = [
    "DEFAULT_SPLIT_PATTERNS",
    "EVIDENCE_KEY",
    "PromptSplit",
    "ReContextEvidencePostprocessor",
    "ReContextLLM",
    "SplitPattern",
    "evidence_node",
    "split_prompt",
]
