"""Lone evidence: when the question's words single out one sentence, it is replayed alone.

A small model copies whatever the evidence block holds: given the padlock sentence beside three log
lines, SmolLM2-135M answers with the last log line; given the padlock sentence alone, it answers with
the code. So where one sentence stands out, the first round keeps it alone, and a later round adds a
sentence only where it stands out the same way on the rare words the evidence brought and the
question lacks (a chain's next hop: "Tomas Sato works at Norley Analytics." brings "Norley", which
one other sentence shares). Both tests are lexical, so a later round needs no read pass.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..lexical import bm25_term_scores
from ..request import Request

RARE_TERM_SENTENCES = 3
"""A term the evidence brings leads to a next hop if at most this many context sentences hold it
(the evidence's own included): a name shared by two sentences links them, "team" or "day" does not."""


def stands_out(request: Request, sentence_id: int, ratio: float) -> bool:
    """Whether ``sentence_id`` (or a copy of its text) is the question's best BM25 match by at least
    ``ratio`` times every other candidate sentence (copies of its text aside)."""
    best = _lone_best(request, request.question_scores, [], ratio)
    copies = request.first_copy
    return best is not None and int(copies[best]) == int(copies[sentence_id])


def next_hop(request: Request, pooled: Sequence[int], ratio: float) -> tuple[int, float] | None:
    """The sentence that stands out by ``ratio`` on the rare terms of the ``pooled`` evidence that the
    question lacks, with its BM25 score on those terms; None where none does."""
    terms, counts = request.sentence_terms, request.term_sentences
    asked = set(request.question_terms)
    bridge = sorted(
        {t for i in pooled for t in terms[i] if t not in asked and counts[t] <= RARE_TERM_SENTENCES}
    )
    if not bridge:
        return None
    scores = bm25_term_scores(bridge, terms)
    best = _lone_best(request, scores, pooled, ratio)
    return None if best is None else (best, float(scores[best]))


def _lone_best(request: Request, scores: torch.Tensor, pooled: Sequence[int], ratio: float) -> int | None:
    """The candidate scoring above 0 and at least ``ratio`` times every other candidate whose text
    differs from it (a log's repeated line is one sentence); None where none does."""
    candidates = request.present.clone()
    candidates[list(pooled)] = False
    copies = request.first_copy[: len(candidates)]
    pooled_copies = copies[list(pooled)] if pooled else copies[:0]
    candidates &= ~torch.isin(copies, pooled_copies)
    scores = torch.where(candidates, scores[: len(candidates)].float(), float("-inf"))
    best = int(torch.argmax(scores))
    if not bool(candidates.any()) or float(scores[best]) <= 0:
        return None
    runner_up = float(torch.where(copies == copies[best], float("-inf"), scores).max())
    return best if float(scores[best]) >= ratio * max(runner_up, 0.0) else None
