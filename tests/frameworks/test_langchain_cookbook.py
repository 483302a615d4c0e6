"""The LangChain cookbook recipes run end to end (offline, embedded model, shared engine)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

pytest.importorskip("langchain_core")

from langchain_core.callbacks import BaseCallbackHandler  # noqa: E402
from langchain_core.language_models import FakeListChatModel  # noqa: E402
from langchain_core.messages import AIMessage, ToolMessage  # noqa: E402

COOKBOOK = Path(__file__).resolve().parents[2] / "cookbook"


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, COOKBOOK / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class PromptRecorder(BaseCallbackHandler):
    def __init__(self) -> None:
        self.prompts: list[str] = []

    def on_chat_model_start(self, serialized: Any, messages: Any, **kwargs: Any) -> None:
        self.prompts.extend(str(m.content) for batch in messages for m in batch)


def test_long_document_plants_one_fact() -> None:
    recipe = load("langchain_lcel_chain")
    document = recipe.long_document(40, depth=0.5)
    assert document.count(recipe.FACT) == 1
    assert document.index(recipe.FACT) == pytest.approx(len(document) / 2, rel=0.2)


@pytest.mark.model
def test_lcel_chain(engine: Any) -> None:
    recipe = load("langchain_lcel_chain")
    result = recipe.main(engine=engine, n_sentences=24, max_tokens=16)
    assert recipe.FACT in result["evidence"]
    assert recipe.ANSWER in result["answer"]


@pytest.mark.model
def test_rag_chain(engine: Any) -> None:
    recipe = load("langchain_rag_chain")
    result = recipe.main(engine=engine, k=3, max_tokens=16)
    assert result["sources"][0] == "note-3"  # MiniLM ranks the server-room note first
    assert "This month the server room code is 5580." in result["evidence"]
    assert recipe.ANSWER in result["answer"]


@pytest.mark.model
def test_replayer_feeds_any_chat_model(engine: Any) -> None:
    recipe = load("langchain_replayer_hosted")
    recorder = PromptRecorder()
    fake = FakeListChatModel(responses=["Oslo."])
    out = recipe.main(fake, engine=engine, callbacks=[recorder])
    evidence = out["documents"][-1]
    assert out["answer"] == "Oslo."
    assert recorder.prompts == [out["prompt"]]
    assert evidence.page_content in recorder.prompts[0]
    assert "<evidence>" in recorder.prompts[0] and recipe.QUESTION in recorder.prompts[0]
    spans = evidence.metadata["spans"]
    assert spans
    for span in spans:
        sentence = recipe.DOCUMENTS[span["doc_index"]].page_content[span["char_start"] : span["char_end"]]
        assert sentence in recorder.prompts[0]
    assert {s["id"] for s in evidence.metadata["source_documents"]} <= {"ada", "bruno", "chloe"}


@pytest.mark.model
def test_replayer_default_stand_in(engine: Any) -> None:
    out = load("langchain_replayer_hosted").main(engine=engine)
    assert out["answer"].strip()


@pytest.mark.model
def test_agent_answers_from_a_long_tool_output(engine: Any, tmp_path: Path) -> None:
    recipe = load("langchain_agent")
    # 20 of the log's 62 lines (4.6 KB, the answer on line 33) keep the test quick; the recipe reads all.
    log = "\n".join(recipe.LOG.read_text(encoding="utf-8").splitlines()[20:40])
    recipe.LOG = tmp_path / "log.txt"
    recipe.LOG.write_text(log, encoding="utf-8")
    out = recipe.main(engine=engine, max_tokens=24)  # the tool call's JSON alone takes 18 tokens
    messages = out["messages"]
    assert [m.type for m in messages] == ["human", "ai", "tool", "ai"]
    call, result, answer = messages[1:]
    assert [c["name"] for c in call.tool_calls] == ["read_shipping_log"]
    assert isinstance(result, ToolMessage) and result.content == log
    assert result.tool_call_id == call.tool_calls[0]["id"]
    assert isinstance(answer, AIMessage) and not answer.tool_calls and out["answer"].strip()
    assert answer.response_metadata["replayed"]
    evidence = out["evidence"]
    assert evidence and all(e["message_index"] == 2 and e["text"] in log for e in evidence)
    assert any("padlock code 5816" in e["text"] for e in evidence)


def test_long_session_recipe_replays_the_early_licence_sentence(engine, capsys) -> None:
    recipe = load("langchain_long_session")
    out = recipe.main(engine=engine, max_chars=6000)
    report = out["replay"]
    assert report["status"] == "replayed"
    messages = out["messages"]
    answering = [e for e in report["evidence"] if recipe.ANSWER in " ".join(e["text"].split())]
    assert answering and answering[0]["role"] == "tool"
    source = messages[answering[0]["message_index"]]
    assert isinstance(source, ToolMessage) and source.name == "read_file"
    assert source.content[answering[0]["char_start"] : answering[0]["char_end"]] == answering[0]["text"]
    assert messages[-2].content == recipe.QUESTION  # the state keeps the request as it was
    assert "Replayed (replayed" in capsys.readouterr().out
