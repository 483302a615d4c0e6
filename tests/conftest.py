"""Shared fixtures: offline always; the embedded model loaded once per session."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def engine():
    """The embedded SmolLM2-135M-Instruct engine (converted once, then loaded from the user cache)."""
    from recontext_engine import ReContextEngine

    return ReContextEngine.from_pretrained()


@pytest.fixture
def prefill_counts(engine, monkeypatch) -> list[int]:
    """The number of ids each ``engine.backend.prefill`` call computes during the test (the context
    cache's work shows here: a hit prefills only what the cached prefix lacks)."""
    counts: list[int] = []
    prefill = engine.backend.prefill

    def counting(ids, cache=None):
        counts.append(len(ids))
        return prefill(ids, cache)

    monkeypatch.setattr(engine.backend, "prefill", counting)
    return counts
