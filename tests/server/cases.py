"""Documents with one planted fact, and the question it answers, for the server tests."""

from __future__ import annotations

from dataclasses import dataclass

from tests.documents import planted_document

NAMES = ["Orion", "Vega", "Lyra", "Atlas", "Nova", "Draco", "Mira", "Rigel"]


@dataclass(frozen=True)
class Case:
    fact: str
    question: str
    answer: str
    documents: list[str]


def case(index: int = 0, sentences: int = 12) -> Case:
    """Case ``index``: the fact in the first of two short documents, at a depth that varies with ``index``."""
    name = NAMES[index % len(NAMES)]
    code = str(4172 + 1111 * index)[-4:]
    fact = f"The vault code of the {name} archive is {code}."
    depth = (index % 4 + 1) / 5
    documents = [
        planted_document(fact, sentences=sentences, depth=depth, seed=index),
        planted_document("The ferry leaves from pier three.", sentences=sentences // 2, seed=100 + index),
    ]
    return Case(fact, f"What is the vault code of the {name} archive?", code, documents)


def evidence_slices_back(evidence: list[dict], documents: list[str]) -> bool:
    return all(documents[e["doc_index"]][e["char_start"] : e["char_end"]] == e["text"] for e in evidence)
