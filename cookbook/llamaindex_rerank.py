"""ReContext as an attention reranker in a LlamaIndex pipeline.

A first-stage retriever returns candidate nodes (here a ``SummaryIndex`` retriever: every node);
``ReContextEvidencePostprocessor(mode="rerank", top_n=...)`` orders them by
``ReContextEngine.document_scores``: the local model reads each node in its own short prompt with
the question, so a node's score does not depend on where the retriever put it; the attention mass
its retrieval heads put on the node (minus what a content-free question puts there) is rank-fused
with BM25 and the input-embedding similarity, and written to ``NodeWithScore.score``. It is a
pure reranker (LangChain's ``ReContextCompressor(mode="rerank")`` is the same); to also append the
evidence node, put a second ``ReContextEvidencePostprocessor()`` after it.

Needs: ``pip install -e ".[cookbook]"``.
Run: ``python cookbook/llamaindex_rerank.py``
"""

from __future__ import annotations

from llama_index.core import SummaryIndex
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from recontext_engine import ReContextEngine
from recontext_integrations.llama_index import ReContextEvidencePostprocessor

CANDIDATES = [
    "The orchard grows eleven kinds of apples and two kinds of pears.",
    "The bakery on Mill Street sells rye bread on Tuesdays.",
    "The river festival takes place on the second Saturday of June.",
    "Maren Holt keeps the key to the bell tower in a blue tin.",
    "The bus to the coast stops at the town hall every hour.",
]
QUESTION = "Who keeps the key to the bell tower?"


def main(
    engine: ReContextEngine | None = None, question: str = QUESTION, top_n: int = 3
) -> list[NodeWithScore]:
    """Retrieve every candidate, rerank them by attention mass, keep ``top_n``; print before and after."""
    nodes = [TextNode(text=text, id_=f"c{i}") for i, text in enumerate(CANDIDATES)]
    candidates = SummaryIndex(nodes).as_retriever().retrieve(question)
    reranker = ReContextEvidencePostprocessor(engine=engine, mode="rerank", top_n=top_n)
    ranked = reranker.postprocess_nodes(candidates, QueryBundle(question))
    print(f"Q: {question}\nbefore: {[n.node.node_id for n in candidates]}")
    for item in ranked:
        print(f"  {item.score:+.4f}  {item.node.node_id}  {item.node.get_content()}")
    return ranked


if __name__ == "__main__":
    main()
