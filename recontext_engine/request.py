"""One call's state: its prompt prefix, its KV cache, its timings and what selection derives from them."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

import torch

from .language import documents_language
from .lexical import bm25_term_scores, lexical_tokens, recursive_query
from .prompt import Prefix
from .results import Evidence
from .semantic import EmbeddingIndex

if TYPE_CHECKING:
    from .config import ReplayConfig
    from .protocol import Backend


@dataclass
class Request:
    """One call's state: its prefix, its own KV cache and its timings."""

    prefix: Prefix
    question: str
    config: ReplayConfig
    cache: Any
    timings: dict[str, float] = field(default_factory=dict)
    kept: list[int] = field(default_factory=list)  # suffix ids a read pass left in the cache
    # The prefix's last ids the cache lacks: the first read pass computes them with its own tokens
    # (one forward instead of a prefill and a read); :meth:`settle` prefills them where none reads.
    pending: list[int] = field(default_factory=list)
    cached_tokens: int = 0  # prefix tokens whose KV came from the context cache
    _embedding_index: EmbeddingIndex | None = None

    def settle(self, backend: Backend) -> None:
        """Prefill the :attr:`pending` ids, so the cache holds the whole prefix."""
        if self.pending:
            backend.prefill(self.pending, self.cache)
            self.pending = []

    @cached_property
    def sentence_texts(self) -> list[str]:
        documents = self.prefix.documents
        return [documents[s.doc_index][s.start : s.end] for s in self.prefix.sentences]

    @cached_property
    def sentence_key(self) -> dict[tuple[int, int, int], int]:
        """Sentence id by ``(doc_index, start, end)``."""
        return {(s.doc_index, s.start, s.end): i for i, s in enumerate(self.prefix.sentences)}

    @cached_property
    def num_sentences(self) -> int:
        """Sentences a signal scores: up to the last one that holds a context token."""
        token_sentence = self.prefix.token_sentence
        return int(token_sentence.max()) + 1 if bool((token_sentence >= 0).any()) else 0

    @cached_property
    def present(self) -> torch.Tensor:
        """(num_sentences,) whether each sentence holds a context token (only those can be picked)."""
        present = torch.zeros(self.num_sentences, dtype=torch.bool)
        token_sentence = self.prefix.token_sentence
        present[token_sentence[token_sentence >= 0]] = True
        return present

    @cached_property
    def language(self) -> str:
        return documents_language(self.prefix.documents, self.config.language)

    @cached_property
    def sentence_terms(self) -> list[list[str]]:
        """Each sentence's BM25 terms (:func:`~recontext_engine.lexical.lexical_tokens`)."""
        return [lexical_tokens(text, self.language) for text in self.sentence_texts]

    @cached_property
    def term_sentences(self) -> Counter[str]:
        """How many sentences that can be picked hold each term (lone evidence's rare terms)."""
        terms = self.sentence_terms
        return Counter(t for i in torch.nonzero(self.present).flatten().tolist() for t in set(terms[i]))

    @cached_property
    def question_terms(self) -> list[str]:
        return lexical_tokens(self.question, self.language)

    @cached_property
    def question_scores(self) -> torch.Tensor:
        """BM25 scores of every sentence against the question alone."""
        return bm25_term_scores(self.question_terms, self.sentence_terms)

    @cached_property
    def first_copy(self) -> torch.Tensor:
        """Per sentence, the id of the first sentence with the same text (whitespace aside)."""
        first: dict[str, int] = {}
        texts = (" ".join(text.split()) for text in self.sentence_texts)
        return torch.tensor([first.setdefault(text, i) for i, text in enumerate(texts)], dtype=torch.long)

    def pooled(self, evidence: Sequence[Evidence]) -> list[int]:
        """Sentence ids of ``evidence`` (pooled sentences of this request)."""
        return [self.sentence_key[(e.doc_index, e.char_start, e.char_end)] for e in evidence]

    def query(self, evidence: Sequence[Evidence] = ()) -> str:
        """A round's query: the question plus the pooled sentences connected to it (see
        :func:`~recontext_engine.lexical.connected_sentences`; later rounds find the next hop)."""
        return recursive_query(
            self.question, self.sentence_texts, self.pooled(evidence), self.question_scores
        )

    def embedding_index(self, embeddings: torch.Tensor | None) -> EmbeddingIndex | None:
        """The context side of the embedding similarity, built on first use; None without embeddings."""
        if embeddings is None:
            return None
        if self._embedding_index is None:
            prefix = self.prefix
            self._embedding_index = EmbeddingIndex(
                prefix.ids, prefix.token_sentence, len(prefix.sentences), embeddings
            )
        return self._embedding_index
