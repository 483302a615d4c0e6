"""ReContext evidence in front of any LLM, a hosted API included.

The paper notes that closed APIs cannot run ReContext: they return no attention. Here only the
selection runs locally: ``ReContextEvidencePostprocessor`` reads the embedded model's retrieval
heads over the retrieved nodes and appends an evidence node next to the question; the answer comes
from whatever LLM the query engine uses. Offline, that LLM is LlamaIndex's ``MockLLM``, which echoes
its prompt, so the response shows exactly what a hosted model would receive. Swap in any LlamaIndex
LLM (e.g. ``OpenAI(model=...)``) with ``main(llm=...)``.

Needs: ``pip install -e ".[cookbook]"``.
Run: ``python cookbook/llamaindex_postprocessor_hosted.py``
"""

from __future__ import annotations

from llama_index.core import Document, SummaryIndex
from llama_index.core.base.response.schema import Response
from llama_index.core.llms import LLM, MockLLM
from llama_index.core.node_parser import SentenceSplitter

from recontext_engine import ReContextEngine
from recontext_integrations.llama_index import ReContextEvidencePostprocessor
from recontext_integrations.llama_index.postprocessor import EVIDENCE_KEY

POLICY = [
    "Travel policy, version 3. Economy class is required for flights under six hours. "
    "Hotel stays are reimbursed up to 140 euros per night in most cities.",
    "Travel policy, version 4, replaces version 3 from March. Business class is allowed for "
    "flights longer than five hours. The hotel limit rises to 180 euros per night in capital cities.",
    "Expense reports are due within 30 days of returning. Receipts must be attached as PDF files. "
    "Meals are covered up to 45 euros per day.",
]
QUESTION = "Under the current policy, from how many hours of flight is business class allowed?"


def main(engine: ReContextEngine | None = None, llm: LLM | None = None, question: str = QUESTION) -> Response:
    """Query the policy documents; ``llm`` None uses ``MockLLM``, which answers with its own prompt."""
    documents = [Document(text=text, metadata={"source": f"policy-{i}"}) for i, text in enumerate(POLICY)]
    nodes = SentenceSplitter(chunk_size=64, chunk_overlap=0).get_nodes_from_documents(documents)
    evidence = ReContextEvidencePostprocessor(engine=engine, replay_options={"rounds": 1, "top_k": 2})
    query_engine = SummaryIndex(nodes).as_query_engine(llm=llm or MockLLM(), node_postprocessors=[evidence])
    response = query_engine.query(question)
    node = response.source_nodes[-1].node
    if node.metadata.get(EVIDENCE_KEY):
        print("Evidence replayed to the LLM:\n" + node.get_content())
    print(f"\nWhat the LLM returned:\n{response}")
    return response


if __name__ == "__main__":
    main()
