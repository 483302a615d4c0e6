"""``cookbook/openai_server.py`` runs end to end: its own server process, a LangChain chain and a
LlamaIndex query engine through their OpenAI-compatible classes."""

from __future__ import annotations

import importlib.util

import pytest

from .conftest import ROOT

pytest.importorskip("langchain_openai")
pytest.importorskip("llama_index.llms.openai_like")


@pytest.mark.model
def test_openai_server_recipe() -> None:
    spec = importlib.util.spec_from_file_location(
        "cookbook_openai_server", ROOT / "cookbook" / "openai_server.py"
    )
    assert spec is not None and spec.loader is not None
    recipe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(recipe)
    results = recipe.main()
    langchain, llama_index = results["langchain"], results["llama_index"]
    assert "Ines Marlow" in langchain["answer"]
    assert (
        "The last keeper, Ines Marlow, retired in 1988 when the light became automatic."
        in langchain["evidence"]
    )
    assert "1931" in llama_index["answer"]
    assert "It opened in 1931 and was paid for by the salt merchants' guild." in llama_index["evidence"]
    assert not any(text.startswith("file_path:") for text in llama_index["evidence"])
