"""ReContext's round loop: each round the selector scores the sentences, the best new ones join the pool."""

from __future__ import annotations

import time

import torch

from ..errors import ReContextError
from ..reads import RoundReader
from ..request import Request
from ..results import Evidence
from .base import SelectionRound, pick_sentences
from .pool import EXTENDING_ORDERS, EvidencePool, within_margin
from .standout import next_hop, stands_out


def select_evidence(request: Request, reader: RoundReader) -> list[Evidence]:
    """The evidence to replay for ``request``: ``rounds`` rounds of ``config.selector``, each adding
    up to ``top_k`` sentences not pooled yet, until the pool is full; in ``evidence_order``. Where
    round 1's pick stands out (``config.standout``), it is pooled alone and its chain is followed,
    lexically, for ``config.chain_hops`` hops (:mod:`.standout`)."""
    config = request.config
    selector = config.selector
    pool = EvidencePool(config.pool_limit)
    started = time.perf_counter()
    # Reads see the pool in the replay order where that order grows round by round, so that each
    # read (and the generation) goes on from the evidence block of the one before; else in
    # document order.
    read_order = config.evidence_order if config.evidence_order in EXTENDING_ORDERS else "document"
    present = request.present
    for index in range(1, config.rounds + 1):
        round = SelectionRound(index, request, pool.arranged(read_order), reader, config.top_k)
        scores = selector.score(round)
        if scores is None:
            raise ReContextError(f"the {selector.name!r} selector cannot score with this backend")
        if selector.zero_is_no_match:
            scores = torch.where(scores > 0, scores, float("-inf"))
        picks = pick_sentences(scores, present, config.top_k, pool.sentence_ids(), request.first_copy)
        if index == 1 and picks and _lone_evidence(request, picks[0][0], pool.limit):
            _add_pick(pool, request, *picks[0], index)
            _follow_chain(pool, request)
            break
        for sentence_id, score in within_margin(picks, config.evidence_margin):
            _add_pick(pool, request, sentence_id, score, index)
        if len(pool) >= pool.limit:
            break
    request.timings["select"] = time.perf_counter() - started
    return pool.arranged(config.evidence_order)


def _lone_evidence(request: Request, best: int, pool_limit: int) -> bool:
    """Whether round 1's ``best`` pick is replayed alone (``config.standout``). A context the pool could
    hold whole has nothing to cut (a chat's tool call, which the question matches, and the tool's
    result, which answers it): the rule is for long contexts."""
    ratio = request.config.standout
    return ratio > 0 and int(request.present.sum()) > pool_limit and stands_out(request, best, ratio)


def _follow_chain(pool: EvidencePool, request: Request) -> None:
    """After a lone pick, its chain: up to ``config.chain_hops`` next hops, each numbered as the round
    it stands in for, until none stands out or the pool is full."""
    config = request.config
    for index in range(2, config.chain_hops + 2):
        hop = None if len(pool) >= pool.limit else next_hop(request, pool.sentence_ids(), config.standout)
        if hop is None:
            break
        _add_pick(pool, request, *hop, index)


def _add_pick(pool: EvidencePool, request: Request, sentence_id: int, score: float, index: int) -> None:
    """Pool a picked sentence and, with ``replay_headings``, what it needs from its section."""
    added = pool.add(sentence_id, _evidence(request, sentence_id, score, index))
    if added and request.config.replay_headings:
        _add_section(pool, request, sentence_id, score, index)


def _add_section(pool: EvidencePool, request: Request, sentence_id: int, score: float, index: int) -> None:
    """What a pick needs from its section, replayed with it and not counted: the headings over it,
    which tell which part of the document it is from (a changelog's version line, a README's title),
    and where the pick is itself a heading, the first sentence under it (a title alone answers
    nothing: a changelog's version line picked without its first change, say)."""
    sentences, present = request.prefix.sentences, request.present
    for heading_id in sentences[sentence_id].headings:
        if present[heading_id]:
            pool.add(heading_id, _evidence(request, heading_id, score, index, heading=True))
    following = sentence_id + 1
    if following < len(present) and present[following] and sentence_id in sentences[following].headings:
        pool.add(following, _evidence(request, following, score, index), counted=False)


def _evidence(
    request: Request, sentence_id: int, score: float, index: int, heading: bool = False
) -> Evidence:
    s = request.prefix.sentences[sentence_id]
    text = request.prefix.documents[s.doc_index][s.start : s.end]
    return Evidence(text, s.doc_index, s.start, s.end, score, index, heading)
