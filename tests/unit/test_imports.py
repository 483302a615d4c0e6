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
        Usage UnsupportedModelError
        """
    ),
    "recontext_engine.scoring": _names(
        """
        DEFAULT_SCORER SCORERS CueRecurrenceScorer MeanAttentionScorer Scorer get_scorer
        register_scorer scorer_for
        """
    ),
    "recontext_integrations.langchain": _names(
        """
        EVIDENCE_EVENT EVIDENCE_KIND SENTENCE_KIND ChatReContext MessageSplit ReContextCompressor
        ReContextReplayer as_dicts chat_messages format_replay_prompt is_evidence load_engine
        split_messages
        """
    ),
    "recontext_integrations.llama_index": _names(
        """
        DEFAULT_SPLIT_PATTERNS EVIDENCE_KEY SENTENCE_KEY PromptSplit ReContextEvidenceEvent
        ReContextEvidencePostprocessor ReContextLLM SplitPattern clean_text evidence_node
        sentence_node split_prompt
        """
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
