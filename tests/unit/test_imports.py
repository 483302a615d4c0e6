"""Each package's public names, pinned (as langchain-ollama's tests/unit_tests/test_imports.py does).

A name added to or dropped from an ``__all__`` must be added here too: the public surface changes
only on purpose. Every listed name must also be importable from its package.
"""

from __future__ import annotations

import importlib

import pytest


def _names(text: str) -> list[str]:
    """Names written as words, a few to a line (one to a line would repeat every ``__all__`` here)."""
    return text.split()


EXPECTED_ALL = {
    "recontext_engine": _names(
        """
        BackendUnavailableError Evidence HeadSet HeadSetError InputError ModelLoadError
        PromptTooLongError ReContextEngine ReContextError ReplayConfig ReplayResult ReplayStream
        Usage UnsupportedModelError GenerationConfig
        AttentionSignal BM25Signal EmbeddingSignal OracleSignal RankFusion SentenceEmbeddingSignal
        Signal hybrid_selector semantic_selector
        DEFAULT_SPLIT_PATTERNS MessageSplit SplitPattern chat_messages clean_text content_text
        context_block render_evidence_block split_messages
        ToolCall ToolSpec format_tool_call parse_tool_calls
        HistoryEvidence HistoryReplay HistoryReplayConfig HistoryReplayer
        """
    ),
    "recontext_engine.scoring": _names(
        """
        DEFAULT_SCORER SCORERS CueRecurrenceScorer MeanAttentionScorer Scorer get_scorer
        register_scorer
        """
    ),
    "recontext_engine.selection": _names(
        """
        SIGNALS AttentionSignal BM25Signal EmbeddingSignal EvidencePool OracleSignal RankFusion
        SENTENCE_EMBEDDING_WEIGHT SelectionRound SentenceEmbeddingSignal Signal attention_settings
        attention_signal default_selector get_signal hybrid_selector pick_sentences register_signal
        semantic_selector
        signal_from_dict with_attention
        """
    ),
    # The integrations export their classes only; helpers and constants stay in their modules.
    "recontext_integrations.langchain": _names(
        "ChatReContext ReContextCompressor ReContextMiddleware ReContextReplayer"
    ),
    "recontext_integrations.llama_index": _names(
        "ReContextEvidenceEvent ReContextEvidencePostprocessor ReContextLLM ReContextMemoryBlock"
    ),
}


@pytest.mark.parametrize("package", sorted(EXPECTED_ALL))
def test_all_is_pinned(package: str) -> None:
    module = importlib.import_module(package)
    assert sorted(module.__all__) == sorted(EXPECTED_ALL[package])
    assert len(set(module.__all__)) == len(module.__all__)


@pytest.mark.parametrize("package", sorted(EXPECTED_ALL))
def test_every_public_name_imports(package: str) -> None:
    namespace: dict[str, object] = {}
    exec(f"from {package} import *", namespace)  # what a user's star import gets
    assert set(EXPECTED_ALL[package]) <= set(namespace)
