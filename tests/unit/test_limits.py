"""Input that cannot fit, and sampling values at the edge of their range, on a tiny random Llama:
refused or answered at once, never a crash or a stall."""

from __future__ import annotations

import pytest
import torch

from recontext_engine import GenerationConfig, ReContextEngine
from recontext_engine import engine as engine_module
from recontext_engine.decoding import next_token
from recontext_engine.errors import PromptTooLongError
from tests.unit.test_engine_hooks import CONFIG, QUESTION, tiny_documents, tiny_engine


@pytest.fixture(scope="module")
def tiny() -> ReContextEngine:
    return tiny_engine()


@pytest.fixture
def documents() -> list[str]:
    return tiny_documents()


def test_text_that_cannot_fit_is_refused_before_sentence_splitting(
    tiny: ReContextEngine, monkeypatch
) -> None:
    def never(*args, **kwargs):
        raise AssertionError("sentences were split for a context that cannot fit")

    monkeypatch.setattr(engine_module, "document_sentences", never)
    huge = "Question " * (tiny.max_token_chars * tiny.context_window)
    with pytest.raises(PromptTooLongError, match="characters"):
        tiny.answer(huge, QUESTION, CONFIG)
    # Under the character bound, but over the window in tokens (one word, one token here).
    long = "Question " * (tiny.context_window + 10)
    with pytest.raises(PromptTooLongError, match="at least"):
        tiny.select_evidence(long, QUESTION, CONFIG)
    with pytest.raises(PromptTooLongError):
        tiny.chat([{"role": "user", "content": long}], CONFIG)


def test_a_generation_cut_by_the_window_finishes_with_length(
    tiny: ReContextEngine, documents: list[str]
) -> None:
    used = tiny.answer(documents, QUESTION, CONFIG, rounds=0, max_new_tokens=1).usage.input_tokens
    room = tiny.context_window - used
    config = CONFIG.with_options(rounds=0, max_new_tokens=room + 50)
    eos = tiny.eos_ids
    tiny.eos_ids = set()  # the random model must not end by itself before the window does
    try:
        result = tiny.answer(documents, QUESTION, config)
    finally:
        tiny.eos_ids = eos
    assert result.usage.output_tokens == room
    assert result.finish_reason == "length"


@pytest.mark.parametrize(
    ("temperature", "top_p"), [(1e-40, 1.0), (1e-300, 1.0), (1e-6, 1e-50), (0.7, 1e-50), (2.0, 1e-9)]
)
def test_tiny_temperature_or_top_p_samples_the_likeliest_token(temperature: float, top_p: float) -> None:
    logits = torch.tensor([1.0, 3.5, -2.0, 3.4])
    config = GenerationConfig(temperature=temperature, top_p=top_p, seed=2**64 - 1)
    generator = torch.Generator().manual_seed(config.seed)
    assert next_token(logits, config, generator) == 1
