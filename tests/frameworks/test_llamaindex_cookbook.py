"""The LlamaIndex cookbook recipes run end to end, offline, on the embedded model."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("llama_index.core")

from recontext_integrations.llama_index.postprocessor import EVIDENCE_KEY  # noqa: E402

COOKBOOK = Path(__file__).resolve().parents[2] / "cookbook"


def _recipe(name: str):
    spec = importlib.util.spec_from_file_location(f"cookbook_{name}", COOKBOOK / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _check_provenance(source_nodes) -> dict:
    """The evidence node is last, and each of its spans slices back into a node that came before it."""
    evidence = source_nodes[-1].node
    assert evidence.metadata[EVIDENCE_KEY] is True and evidence.metadata["spans"]
    earlier = {n.node.node_id: n.node for n in source_nodes[:-1]}
    for span in evidence.metadata["spans"]:
        quoted = earlier[span["node_id"]].get_content()[span["char_start"] : span["char_end"]]
        assert quoted.strip() and quoted in evidence.get_content()
    return earlier


@pytest.mark.model
def test_query_engine_recipe(engine, capsys):
    recipe = _recipe("llamaindex_query_engine")
    response = recipe.main(engine)
    assert str(response).strip()
    earlier = _check_provenance(response.source_nodes)
    assert len(earlier) == 2  # similarity_top_k chunks, all kept
    # MiniLM retrieval finds the observatory file for the observatory question.
    assert any(n.metadata["file_name"] == "observatory.txt" for n in earlier.values())
    assert "evidence from" in capsys.readouterr().out


@pytest.mark.model
def test_hosted_llm_recipe_sends_the_evidence_in_the_prompt(engine):
    recipe = _recipe("llamaindex_postprocessor_hosted")
    response = recipe.main(engine)  # MockLLM echoes the prompt it received
    prompt = str(response)
    evidence = response.source_nodes[-1].node
    _check_provenance(response.source_nodes)
    assert evidence.get_content() in prompt
    assert prompt.rindex("<evidence>") > max(
        prompt.index(t[:40]) for t in recipe.POLICY
    )  # next to the question
    assert prompt.index("</evidence>") < prompt.index(recipe.QUESTION)
    assert "spans" not in prompt and "source_node_ids" not in prompt  # provenance stays out of the prompt


@pytest.mark.model
def test_rerank_recipe_orders_by_attention_mass(engine):
    recipe = _recipe("llamaindex_rerank")
    ranked = recipe.main(engine, top_n=3)
    assert len(ranked) == 3
    scores = [n.score for n in ranked]
    assert scores == sorted(scores, reverse=True)
    mass = engine.document_scores(recipe.CANDIDATES, recipe.QUESTION)
    best = sorted(range(len(mass)), key=lambda i: -mass[i])[:3]
    assert [n.node.node_id for n in ranked] == [f"c{i}" for i in best]
    # the sentence that answers the question comes first, wherever the retriever put it
    assert ranked[0].node.node_id == "c3"
    order = [3, 0, 4, 1, 2]
    moved = engine.document_scores([recipe.CANDIDATES[i] for i in order], recipe.QUESTION)
    assert moved == pytest.approx([mass[i] for i in order], abs=1e-5)


@pytest.mark.model
def test_agent_recipe_calls_the_tool_and_replays_its_output(engine, capsys):
    recipe = _recipe("llamaindex_agent")
    result = recipe.main(engine)
    assert [(c.tool_name, c.tool_kwargs) for c in result["calls"]] == [("read_shipping_log", {})]
    answer = result["output"].response
    assert answer.role.value == "assistant" and answer.content.strip()
    log = recipe.read_shipping_log()
    evidence = result["evidence"]
    assert evidence and {e["message_index"] for e in evidence} == {2}  # question, call, the tool's output
    assert all(log[e["char_start"] : e["char_end"]] == e["text"] for e in evidence)
    assert any(f"padlock code {recipe.ANSWER}" in e["text"] for e in evidence)
    voyage = result["voyage"]
    assert isinstance(voyage, recipe.Voyage) and isinstance(voyage.crew, int) and voyage.ship
    assert "Evidence (from message [2] )" in capsys.readouterr().out


@pytest.mark.model
def test_long_session_recipe_replays_the_flushed_licence_sentence(engine, capsys):
    import asyncio

    recipe = _recipe("llamaindex_long_session")
    result = asyncio.run(recipe.ask(engine, max_chars=6000))
    licence = recipe.read_file("LICENSE")
    assert any(licence[:100] in (m.content or "") for m in result["archive"])  # flushed, kept by the block
    answering = [e for e in result["evidence"] if recipe.ANSWER in " ".join(e["text"].split())]
    assert answering and answering[0]["role"] == "tool"
    start, end = answering[0]["char_start"], answering[0]["char_end"]
    assert licence[start:end] == answering[0]["text"]
    assert result["answer"].strip() and "Replayed before the answer:" in capsys.readouterr().out
