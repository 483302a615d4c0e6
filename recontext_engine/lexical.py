"""BM25 scores of sentences against the question: the lexical half of the hybrid selection.

Tokens work in any script: words of two or more letters (lower-cased, the language's stop words
removed, stemmed where Snowball has the language, so "migrations" matches "migration"), the parts of
identifiers besides the whole ("0268_add_refund_index" also gives "add", "refund", "index") and, in
scripts written without spaces (Chinese, Japanese), overlapping character pairs.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Sequence
from functools import lru_cache

import torch

CONNECTED_FRACTION = 0.5
"""A pooled sentence joins a later round's BM25 query if it matches the question at least this
fraction as well as the best pooled sentence."""

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_TOKEN = re.compile(rf"[{_CJK}]+|[^\W{_CJK}]{{2,}}")
_CJK_RUN = re.compile(rf"[{_CJK}]")
_IDENTIFIER_PART = re.compile(r"[^\W_]{2,}")
_STOPWORD_LISTS = {
    "en": "STOPWORDS_EN_PLUS",
    "de": "STOPWORDS_GERMAN",
    "fr": "STOPWORDS_FRENCH",
    "es": "STOPWORDS_SPANISH",
    "it": "STOPWORDS_ITALIAN",
    "pt": "STOPWORDS_PORTUGUESE",
    "nl": "STOPWORDS_DUTCH",
    "ru": "STOPWORDS_RUSSIAN",
    "sv": "STOPWORDS_SWEDISH",
    "da": "STOPWORDS_DANISH",
    "no": "STOPWORDS_NORWEGIAN",
    "tr": "STOPWORDS_TURKISH",
}


_SNOWBALL = {
    "en": "english",
    "de": "german",
    "fr": "french",
    "es": "spanish",
    "it": "italian",
    "pt": "portuguese",
    "nl": "dutch",
    "ru": "russian",
    "sv": "swedish",
    "da": "danish",
    "no": "norwegian",
    "tr": "turkish",
    "fi": "finnish",
    "hu": "hungarian",
    "ro": "romanian",
    "pl": "polish",
    "cs": "czech",
    "el": "greek",
    "ca": "catalan",
    "id": "indonesian",
    "ar": "arabic",
}
"""Snowball stemmers (PyStemmer) by language code; other languages are not stemmed."""


@lru_cache(maxsize=16)
def _stem(language: str) -> Callable[[str], str]:
    """The language's Snowball stemmer (memoised per word), or the identity."""
    import Stemmer

    algorithm = _SNOWBALL.get(language)
    if algorithm is None or algorithm not in Stemmer.algorithms():
        return str
    stemmer, lock = Stemmer.Stemmer(algorithm), threading.Lock()

    def stem(word: str) -> str:
        # a Stemmer keeps state between calls ("must not be called concurrently", its docs say), and
        # one engine serves concurrent requests: one call at a time, each word once
        with lock:
            return stemmer.stemWord(word)

    return lru_cache(maxsize=65536)(stem)


@lru_cache(maxsize=16)
def stopwords(language: str) -> frozenset[str]:
    """Lucene's English stop words plus those of ``language`` where ``bm25s`` has a list (for English,
    NLTK's fuller list: question words such as "what" and "does" match every question in a chat)."""
    import bm25s.stopwords as lists

    words = set(lists.STOPWORDS_EN)
    if language in _STOPWORD_LISTS:
        words |= set(getattr(lists, _STOPWORD_LISTS[language]))
    return frozenset(words)


def lexical_tokens(text: str, language: str = "en") -> list[str]:
    """BM25 terms of ``text``: stemmed words (stop words removed), identifier parts and CJK
    character pairs."""
    stop, stem = stopwords(language), _stem(language)
    tokens: list[str] = []
    for match in _TOKEN.finditer(text.lower()):
        run = match.group()
        if _CJK_RUN.match(run):
            tokens += [run] if len(run) == 1 else [run[i : i + 2] for i in range(len(run) - 1)]
        elif run not in stop:
            tokens.append(stem(run))
            if "_" in run:  # snake_case names and file names: their words match prose too
                tokens += [stem(part) for part in _IDENTIFIER_PART.findall(run) if part not in stop]
    return tokens


def bm25_scores(question: str, sentences: Sequence[str], language: str = "en") -> torch.Tensor:
    """(len(sentences),) BM25 scores (``bm25s`` over :func:`lexical_tokens`); zeros if nothing matches."""
    corpus = [lexical_tokens(s, language) for s in sentences]
    return bm25_term_scores(lexical_tokens(question, language), corpus)


def bm25_term_scores(query: Sequence[str], corpus: Sequence[Sequence[str]]) -> torch.Tensor:
    """(len(corpus),) BM25 scores of already tokenized sentences against query terms (both from
    :func:`lexical_tokens`); zeros if nothing matches."""
    import bm25s

    # bm25s sets its own logger to DEBUG on import, which overrides the application's log level.
    logging.getLogger("bm25s").setLevel(logging.WARNING)

    scores = torch.zeros(len(corpus))
    vocab = {t for tokens in corpus for t in tokens}
    terms = [t for t in query if t in vocab]
    if not terms:
        return scores
    retriever = bm25s.BM25()
    retriever.index([list(tokens) for tokens in corpus], show_progress=False)
    ids, values = retriever.retrieve([terms], k=len(corpus), show_progress=False)
    scores[torch.as_tensor(ids[0], dtype=torch.long)] = torch.as_tensor(values[0], dtype=torch.float)
    return scores


def connected_sentences(question_scores: torch.Tensor, pooled: Sequence[int]) -> list[int]:
    """The ``pooled`` sentences connected to the question: those matching it (``question_scores``,
    BM25) at least ``CONNECTED_FRACTION`` as well as the best pooled one.

    A later round's query is the question plus these: they let the round find what links to them
    (the second hop of a chain); pooled sentences that share nothing with the question would steer
    the query off topic, and so do those that share only a common word (in "周文华在星光科技工作。"
    the pair 工作 "work" matches every "... works at ..." sentence, and four companies in the query
    hide the one that answers).
    """
    best = max((float(question_scores[i]) for i in pooled), default=0.0)
    floor = CONNECTED_FRACTION * best
    return [i for i in pooled if question_scores[i] > 0 and question_scores[i] >= floor]


def recursive_query(
    question: str, sentences: Sequence[str], pooled: Sequence[int], question_scores: torch.Tensor
) -> str:
    """A round's text query: the question plus the :func:`connected_sentences` of the ``pooled``
    ones (indices into ``sentences``); the question alone when none is connected."""
    related = connected_sentences(question_scores, pooled)
    return " ".join([question, *(sentences[i] for i in related)])


def recursive_bm25_scores(
    question: str,
    sentences: Sequence[str],
    pooled: Sequence[int],
    language: str = "en",
    question_scores: torch.Tensor | None = None,
) -> torch.Tensor:
    """BM25 scores for a later round: the query is the question plus the :func:`connected_sentences`
    of the ``pooled`` ones (indices into ``sentences``). ``question_scores`` (the first round's
    scores) saves recomputing them."""
    if question_scores is None:
        question_scores = bm25_scores(question, sentences, language)
    query = recursive_query(question, sentences, pooled, question_scores)
    return question_scores if query == question else bm25_scores(query, sentences, language)


def reciprocal_ranks(values: torch.Tensor, offset: float = 10.0) -> torch.Tensor:
    """``1 / (offset + rank)`` for each value (rank 0 = largest): scale-free, for rank fusion."""
    order = torch.argsort(values, descending=True, stable=True)
    ranks = torch.empty_like(values, dtype=torch.float)
    ranks[order] = torch.arange(len(values), dtype=torch.float)
    return 1.0 / (offset + ranks)
