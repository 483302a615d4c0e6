"""The test case every framework pattern answers: a ~3,000-character document, one sentence answers."""

from __future__ import annotations

import random

from tests.documents import filler

FACT = "The vault code of the Meridian Library is 7312."
QUESTION = "What is the vault code of the Meridian Library?"
# Fast settings for every pattern: one round, two sentences, a few tokens.
FAST = {"rounds": 1, "top_k": 2}
MAX_TOKENS = 4


def sentences(count: int = 60, depth: float = 0.4, seed: int = 3) -> list[str]:
    body = filler(random.Random(seed), count)
    body.insert(round(depth * count), FACT)
    return body


DOCUMENT = " ".join(sentences())
# The same text as five retrieval chunks (the fact sits in the third).
CHUNKS = [" ".join(sentences()[i : i + 13]) for i in range(0, 61, 13)]


def holds_fact(evidence: list[dict]) -> bool:
    """Whether the evidence (dicts with ``text``) holds the sentence that answers."""
    return any(item["text"] == FACT for item in evidence)
