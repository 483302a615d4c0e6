"""Selection signals: each scores the context sentences for a round of ReContext's loop.

``ReplayConfig(selector=...)`` takes one signal. The default fuses the model's attention with BM25,
the input-embedding similarity and, where ``recontext[embeddings]`` is installed, a sentence
embedder, by rank (:func:`default_selector`); each alone is a selector too, and
so is :class:`OracleSignal` (known gold spans, for the benchmark). A new signal is one module: a
frozen dataclass subclassing :class:`Signal` with one ``score(round)`` method, registered with
:func:`register_signal` (the tests run over :data:`SIGNALS`).
"""

from dataclasses import fields, replace
from typing import Any

from ..errors import ReContextError
from ..sentence_embedder import default_embedder_installed
from .attention import AttentionSignal
from .base import (
    SIGNALS,
    SelectionRound,
    Signal,
    get_signal,
    pick_sentences,
    register_signal,
    signal_from_dict,
)
from .bm25 import BM25Signal
from .embedding import EmbeddingSignal
from .fusion import RankFusion
from .oracle import OracleSignal
from .pool import EvidencePool
from .sentence_embedding import SentenceEmbeddingSignal


def hybrid_selector() -> RankFusion:
    """Attention, BM25 and the input-embedding similarity fused by rank, each with weight 1: the
    default where no sentence embedder is installed (it needs nothing beyond the model)."""
    return RankFusion(((AttentionSignal(), 1.0), (BM25Signal(), 1.0), (EmbeddingSignal(), 1.0)))


SENTENCE_EMBEDDING_WEIGHT = 3.0
"""The sentence embedder's weight in :func:`semantic_selector`: over the real-document questions,
the top 8 of one round held the gold of 0.82 of the paraphrase questions at 3 (0.73 at 2, 0.68 at 1)."""


def semantic_selector(model: str = "") -> RankFusion:
    """The hybrid selector plus a sentence embedder (:class:`SentenceEmbeddingSignal`, ``model``:
    MiniLM from its wheel by default) with weight :data:`SENTENCE_EMBEDDING_WEIGHT`: it finds an
    answer that shares no word with the question. Needs ``recontext[embeddings]``."""
    return RankFusion(
        (*hybrid_selector().parts, (SentenceEmbeddingSignal(model=model), SENTENCE_EMBEDDING_WEIGHT))
    )


def default_selector() -> RankFusion:
    """:func:`semantic_selector` where ``recontext[embeddings]`` is installed, else :func:`hybrid_selector`.

    With the sentence embedder, evidence recall over the 86 real-document questions rose from 0.73 to
    0.895 (paraphrases 0.36 -> 0.82) and every Needle In A Haystack needle, paraphrased ones included,
    was replayed in every cell (docs/benchmarks.md). Pin either one by name for the same evidence
    on every machine.
    """
    return semantic_selector() if default_embedder_installed() else hybrid_selector()


def attention_settings() -> set[str]:
    """The names of :class:`AttentionSignal`'s settings (``ReplayConfig.with_options`` shortcuts)."""
    return {f.name for f in fields(AttentionSignal)}


def attention_signal(selector: Signal) -> AttentionSignal | None:
    """The first attention signal in ``selector`` (itself or a part), if any."""
    return next((s for s in selector.signals() if isinstance(s, AttentionSignal)), None)


def with_attention(selector: Signal, **changes: Any) -> Signal:
    """``selector`` with its attention signal's settings changed (wherever it sits in a fusion)."""
    if isinstance(selector, AttentionSignal):
        return replace(selector, **changes)
    if isinstance(selector, RankFusion) and attention_signal(selector) is not None:
        parts = tuple(
            (with_attention(s, **changes) if attention_signal(s) is not None else s, w)
            for s, w in selector.parts
        )
        return replace(selector, parts=parts)
    raise ReContextError(
        f"the {selector.name!r} selector has no attention signal to set {', '.join(sorted(changes))} on"
    )


__all__ = [
    "SENTENCE_EMBEDDING_WEIGHT",
    "SIGNALS",
    "AttentionSignal",
    "BM25Signal",
    "EmbeddingSignal",
    "EvidencePool",
    "OracleSignal",
    "RankFusion",
    "SelectionRound",
    "SentenceEmbeddingSignal",
    "Signal",
    "attention_settings",
    "attention_signal",
    "default_selector",
    "get_signal",
    "hybrid_selector",
    "pick_sentences",
    "semantic_selector",
    "register_signal",
    "signal_from_dict",
    "with_attention",
]
