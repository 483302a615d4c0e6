"""Document reranking by the retrieval heads' attention, fused with BM25 and the semantic signal.

Behind :meth:`ReContextEngine.document_scores <recontext_engine.ReContextEngine.document_scores>`
and the framework rerankers. Each document is read in its own short prompt (the document, then the
question), so neither the other documents nor their order change its attention (in one prompt that
holds them all it would depend on where a document stands and how long it is). Its attention score
is the mass the question's cue puts on it minus the mass the null question's cue puts on it
(:data:`~recontext_engine.prompt.NULL_QUESTION`). As the hybrid sentence selection does, the
documents' ranks by it are fused by reciprocal rank with their BM25 ranks and their ranks by their
best sentence's similarity to the question in the model's input-embedding space
(:mod:`~recontext_engine.semantic`), with the weights the selector's rank fusion gives its BM25 and
embedding parts (a selector of attention alone: the calibrated mass alone). Tied values share
a rank and the attention breaks ties of the fused score, so no score depends on the order.

:func:`joint_mass` is the former score (the question's mass, all documents in one prompt), kept for
``scripts/rerank_eval.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import torch

from .language import documents_language
from .lexical import bm25_scores
from .selection import AttentionSignal, BM25Signal, EmbeddingSignal, RankFusion, SelectionRound, Signal
from .selection import attention_signal as find_attention
from .semantic import EmbeddingIndex
from .spans import check_text, normalize_documents

if TYPE_CHECKING:
    from .config import ReplayConfig
    from .engine import ReContextEngine
    from .prompt import Prefix


@dataclass
class DocumentRead:
    """One document read in its own prompt."""

    attention: float  # the question cue's mass on the document minus the null question cue's
    ids: list[int]  # the prompt prefix's token ids
    token_sentence: torch.Tensor  # (len(ids),) the sentence of each, -1 for the template's


def _cue_scores(
    engine: ReContextEngine, documents: Sequence[str], question: str, config: ReplayConfig
) -> tuple[torch.Tensor, torch.Tensor, Prefix]:
    """One prompt holding ``documents``: the question's and the null question's per-token cue scores."""
    attention = replace(find_attention(config.selector) or AttentionSignal(), candidates="context")
    attention = replace(attention, null_calibration=True, evidence_cue=0.0)
    request = engine._start(list(documents), question, config)
    try:
        read = attention.read(SelectionRound(1, request, [], engine.reader, config.top_k))
        question_scores = attention.cue_scores(request, read.suffixes[0], read.rows[0])[0]
        null_scores = attention.cue_scores(request, read.suffixes[1], read.rows[1])[0]
    finally:
        engine._finish(request)
    return question_scores, null_scores, request.prefix


def read_document(
    engine: ReContextEngine, document: str, question: str, config: ReplayConfig
) -> DocumentRead:
    """``document`` alone in a prompt: its calibrated attention mass and its tokens."""
    question_scores, null_scores, prefix = _cue_scores(engine, [document], question, config)
    inside = prefix.token_sentence >= 0
    attention = float((question_scores[inside] - null_scores[inside]).sum())
    return DocumentRead(attention, list(prefix.ids), prefix.token_sentence)


def joint_mass(
    engine: ReContextEngine, documents: Sequence[str], question: str, config: ReplayConfig
) -> list[float]:
    """The former scores: the question cue's mass on each document, all of them in one prompt."""
    question_scores, _, prefix = _cue_scores(engine, documents, question, config)
    doc_of_sentence = torch.tensor([s.doc_index for s in prefix.sentences] + [-1])
    doc_of_token = doc_of_sentence[prefix.token_sentence]  # -1 maps to the trailing -1
    inside = doc_of_token >= 0
    mass = torch.zeros(len(prefix.documents))
    return mass.index_add_(0, doc_of_token[inside], question_scores[inside].float()).tolist()


def semantic_scores(
    engine: ReContextEngine, reads: Sequence[DocumentRead], question: str
) -> torch.Tensor | None:
    """(len(reads),) each document's best sentence similarity to ``question`` (the selection's
    :class:`~recontext_engine.semantic.EmbeddingIndex`, idf over all the documents' sentences);
    None where the backend gives no input embeddings."""
    embeddings = engine.input_embeddings
    if embeddings is None or not reads:
        return None
    ids: list[int] = []
    sentences: list[torch.Tensor] = []
    doc_of_sentence: list[int] = []
    for d, read in enumerate(reads):
        count = int(read.token_sentence.max()) + 1 if len(read.token_sentence) else 0
        offset = len(doc_of_sentence)
        ids += read.ids
        sentences.append(torch.where(read.token_sentence >= 0, read.token_sentence + offset, -1))
        doc_of_sentence += [d] * count
    index = EmbeddingIndex(ids, torch.cat(sentences), len(doc_of_sentence), embeddings)
    query = engine.tokenizer(" " + question, add_special_tokens=False)["input_ids"]
    per_sentence = index.scores(query)
    best = torch.full((len(reads),), -1.0)
    return best.scatter_reduce(0, torch.tensor(doc_of_sentence, dtype=torch.long), per_sentence, "amax")


def reciprocal_ranks(values: torch.Tensor, offset: float = 10.0) -> torch.Tensor:
    """``1 / (offset + rank)``, rank 0 the largest; equal values share the better rank, so that
    the result does not depend on their order."""
    values = values.float()
    return 1.0 / (offset + (values[None, :] > values[:, None]).sum(dim=1).float())


def fuse(
    attention: Sequence[float],
    lexical: torch.Tensor | None = None,
    lexical_weight: float = 0.0,
    semantic: torch.Tensor | None = None,
    semantic_weight: float = 0.0,
) -> list[float]:
    """Reciprocal-rank fusion of the documents' ``attention`` with their BM25 scores (``lexical``;
    documents sharing no term with the question get no share) and their ``semantic`` similarities;
    the attention breaks ties. The attention itself when there is nothing to fuse."""
    scores = torch.tensor(list(attention), dtype=torch.float)
    parts = []
    if lexical is not None and lexical_weight > 0:
        parts.append(lexical_weight * torch.where(lexical > 0, reciprocal_ranks(lexical), 0.0))
    if semantic is not None and semantic_weight > 0:
        parts.append(semantic_weight * reciprocal_ranks(semantic))
    if not parts or not len(scores):
        return scores.tolist()
    ranks = reciprocal_ranks(scores)
    return (ranks + sum(parts) + 1e-4 * ranks).tolist()


def fusion_weights(selector: Signal) -> tuple[float, float]:
    """The weights of the BM25 and embedding parts of a rank-fusion ``selector`` (0 where absent)."""
    if not isinstance(selector, RankFusion):
        return 0.0, 0.0
    weights = {type(signal): weight for signal, weight in selector.parts}
    return weights.get(BM25Signal, 0.0), weights.get(EmbeddingSignal, 0.0)


def document_scores(
    engine: ReContextEngine, context: str | Sequence[str], question: str, config: ReplayConfig
) -> list[float]:
    """Relevance of each document to ``question``, higher first, the same in any document order:
    each document's calibrated attention (its own prompt), rank-fused with BM25 and with the
    semantic similarity by the selector's weights (see :func:`fusion_weights`; none: the calibrated
    attention mass itself)."""
    documents = normalize_documents(context)
    question = check_text(question, "question")
    reads = [read_document(engine, document, question, config) for document in documents]
    attention = [read.attention for read in reads]
    lexical_weight, semantic_weight = fusion_weights(config.selector)
    if lexical_weight <= 0:
        return attention
    language = documents_language(documents, config.language)
    lexical = bm25_scores(question, documents, language)
    semantic = semantic_scores(engine, reads, question) if semantic_weight > 0 else None
    return fuse(attention, lexical, lexical_weight, semantic, semantic_weight)
