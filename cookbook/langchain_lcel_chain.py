"""LCEL: ``prompt | ChatReContext | StrOutputParser`` over a long document with one planted fact.

The prompt puts the document before a ``Question:`` line; ChatReContext's rule takes the text
before that marker as the context, replays the sentences its retrieval heads point at, and
answers. Needs: ``pip install -e ".[cookbook]"``.
Run: ``python cookbook/langchain_lcel_chain.py`` (offline, embedded model, CPU).
"""

from __future__ import annotations

import random
from typing import Any

from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnableLambda

from recontext_integrations.langchain import ChatReContext

FACT = "The vault code of the Meridian Library is 7312."
QUESTION = "What is the vault code of the Meridian Library?"
ANSWER = "7312"

_SUBJECTS = ["The harbor", "The old mill", "The market square", "The river path", "The clock tower"]
_VERBS = ["was repainted", "was busy", "stayed quiet", "was cleaned", "opened early", "hosted a fair"]
_TIMES = ["on Monday", "in spring", "after the storm", "during the festival", "last winter", "at dusk"]


def long_document(n_sentences: int = 60, depth: float = 0.6, seed: int = 7) -> str:
    """Seeded filler sentences about a town with :data:`FACT` planted at ``depth`` (0..1)."""
    rng = random.Random(seed)
    sentences = [
        f"{rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} {rng.choice(_TIMES)}." for _ in range(n_sentences)
    ]
    sentences.insert(round(depth * n_sentences), FACT)
    return " ".join(sentences)


PROMPT = ChatPromptTemplate.from_messages(
    [
        ("system", "You answer questions about a document. Answer briefly."),
        ("human", "Context:\n{context}\n\nQuestion: {question}"),
    ]
)


def main(engine: Any = None, n_sentences: int = 60, max_tokens: int = 24) -> dict[str, Any]:
    """Run the chain; returns the answer and the replayed evidence sentences."""
    llm = ChatReContext(engine=engine, max_tokens=max_tokens)
    # The answer chain is plain `prompt | llm | StrOutputParser()`; the dict beside the parser
    # also keeps the evidence from the same call (LCEL turns a dict into RunnableParallel).
    chain = (
        PROMPT
        | llm
        | {
            "answer": StrOutputParser(),
            "evidence": RunnableLambda(lambda m: [e["text"] for e in m.response_metadata["evidence"]]),
        }
    )
    result = chain.invoke({"context": long_document(n_sentences), "question": QUESTION})
    print("Answer:", result["answer"])
    print("Evidence:", *result["evidence"], sep="\n  ")
    return result


if __name__ == "__main__":
    main()
