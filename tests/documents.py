"""Seeded long documents with one planted fact, for tests on the embedded model."""

from __future__ import annotations

import random

SUBJECTS = [
    "The committee",
    "A local baker",
    "The orchestra",
    "Our neighbour",
    "The ferry company",
    "A young painter",
]
VERBS = ["discussed", "painted", "repaired", "described", "ordered", "photographed"]
OBJECTS = [
    "an old bridge",
    "seven wooden chairs",
    "a quiet harbour",
    "the spring festival",
    "a blue tram",
    "two maps",
]
TAILS = [
    "before noon.",
    "after a long winter.",
    "with great care.",
    "near the station.",
    "for the museum.",
    "in March.",
]


def filler(rng: random.Random, count: int) -> list[str]:
    return [
        f"{rng.choice(SUBJECTS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)} {rng.choice(TAILS)}"
        for _ in range(count)
    ]


def planted_document(fact: str, sentences: int = 60, depth: float = 0.5, seed: int = 0) -> str:
    """``sentences`` filler sentences with ``fact`` inserted at relative ``depth``."""
    rng = random.Random(seed)
    body = filler(rng, sentences)
    body.insert(round(depth * len(body)), fact)
    return " ".join(body)
