"""The long-conversation recipe: earlier turns are the context, the answering message is replayed."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langchain_core")
pytest.importorskip("llama_index.core")

COOKBOOK = Path(__file__).resolve().parents[2] / "cookbook"


def _recipe() -> Any:
    spec = importlib.util.spec_from_file_location("long_chat_memory", COOKBOOK / "long_chat_memory.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_conversation_plants_the_fact_in_its_turn() -> None:
    recipe = _recipe()
    fact = recipe.FACTS[1]
    history = recipe.conversation(fact, turns=60, fact_turn=3, seed=4)
    assert len(history) == 120 and history[4]["content"] == fact.statement
    assert [m["role"] for m in history[:2]] == ["user", "assistant"]
    assert sum(fact.statement == m["content"] for m in history) == 1


@pytest.mark.model
def test_both_frameworks_replay_the_earlier_turn(engine: Any) -> None:
    recipe = _recipe()
    fact = recipe.FACTS[0]
    history = recipe.conversation(fact, turns=20)
    settings = {"rounds": 1, "top_k": 2}
    message = recipe.langchain_answer(history, fact.question, engine, max_tokens=4, **settings)
    evidence = message.response_metadata["evidence"]
    assert message.response_metadata["split_rule"] == "history"
    # message_index counts the system message first: history message 4 (turn 3) is prompt message 5
    assert any(e["text"] == fact.statement and e["message_index"] == 5 for e in evidence), evidence
    _, li_evidence = recipe.llama_index_answer(
        history, fact.question, engine, max_tokens=4, replay_options=settings
    )
    assert any(e["text"] == fact.statement and e["message_index"] == 5 for e in li_evidence), li_evidence


@pytest.mark.model
def test_a_chat_engine_prefills_only_what_each_turn_adds(engine: Any, prefill_counts: list[int]) -> None:
    # LlamaIndex's SimpleChatEngine over the recipe's history: the context cache keeps the history's KV,
    # so the second turn computes only the first turn's question and answer (and the new question), in
    # its first read pass: no prefill of its own.
    recipe = _recipe()
    prefilled = prefill_counts
    engine.context_cache.clear()
    history = recipe.conversation(recipe.FACTS[0], turns=20)
    recipe.llama_index_answer(history, "What did I do on Monday?", engine, max_tokens=4)
    history += [
        {"role": "user", "content": "What did I do on Monday?"},
        {"role": "assistant", "content": "You walked the dog."},
    ]
    _, evidence = recipe.llama_index_answer(history, recipe.FACTS[0].question, engine, max_tokens=4)
    assert prefilled[0] > 300 and prefilled[1:] == []
    assert any(e["text"] == recipe.FACTS[0].statement for e in evidence), evidence
