"""Reading calibration cases: one prefill and two read passes per case, summed per sentence.

For each case the context is prefilled once; two read passes (the question, then a null
question, as QRHead and ICR calibrate) collect the cue rows of the heads read (by default all of
them). The rows are summed per sentence right away, plus one bucket for tokens outside any
sentence, so that a scorer's normalisation over candidates stays exact: a case costs
O(heads * w * sentences) memory.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ..config import ReplayConfig
from ..errors import HeadSetError
from ..language import documents_language
from ..lexical import bm25_scores
from ..prompt import NULL_QUESTION, PromptBuilder
from ..spans import document_sentences
from .calibration import FAMILIES, CalibrationCase, make_cases
from .headset import HeadSet, model_shape


@dataclass
class CaseReadout:
    """One case's cue attention of every head, summed per sentence.

    ``question`` and ``null``: (num_heads, w, S + 1) attention mass of each cue token on each of
    the S context sentences; the last column holds the prefix tokens outside every sentence.
    """

    family: str
    gold: torch.Tensor  # (g,) sentence ids of the gold facts
    question: torch.Tensor
    null: torch.Tensor
    num_tokens: int
    lexical: torch.Tensor | None = None  # (S,) BM25 scores against the question: the no-heads baseline

    @property
    def num_sentences(self) -> int:
        return self.question.shape[-1] - 1


def all_heads(config: Any) -> HeadSet:
    """Every (layer, head) pair of a model: read them all in one pass."""
    num_layers, num_heads = model_shape(config)
    return HeadSet(tuple((layer, head) for layer in range(num_layers) for head in range(num_heads)))


def model_config(readout: Any) -> Any:
    model = getattr(readout, "model", None)
    config = getattr(model, "config", None) or getattr(readout, "config", None)
    if config is None:
        raise HeadSetError("head detection needs a readout backend with a transformers model config")
    return config


def calibration_cases(
    readout: Any,
    tokenizer: Any,
    count: int,
    *,
    seed: int,
    split: str,
    lengths: Sequence[int],
    families: Sequence[str] = FAMILIES,
) -> list[CalibrationCase]:
    """Seeded cases sized in the model's tokens, each length clamped to fit the readout's window."""
    window = int(getattr(readout, "window", 1 << 30))
    # Leave room for the template, the question and the cue.
    fitted = sorted({min(int(n), max(64, window - 192)) for n in lengths})
    return make_cases(
        count,
        seed=seed,
        split=split,
        lengths=fitted,
        families=families,
        count_tokens=lambda text: len(tokenizer(text, add_special_tokens=False)["input_ids"]),
    )


def gold_sentence_ids(case: CalibrationCase, sentences: Sequence[Any]) -> list[int]:
    """Ids of the sentences that overlap the case's gold spans, in gold order, without repeats."""
    ids: list[int] = []
    for doc_index, start, end in case.gold:
        for i, s in enumerate(sentences):
            if s.doc_index == doc_index and s.start < end and s.end > start and i not in ids:
                ids.append(i)
    return ids


def read_case(
    readout: Any,
    builder: PromptBuilder,
    case: CalibrationCase,
    heads: HeadSet,
    config: ReplayConfig,
) -> CaseReadout:
    """One prefill and two read passes (question, null question) over ``heads``."""
    documents = list(case.documents)
    sentences = document_sentences(documents, config.max_sentence_chars)
    gold = gold_sentence_ids(case, sentences)
    if not gold:
        raise HeadSetError(f"calibration case has no gold sentence: {case.question!r}")
    prefix = builder.prefix(documents, sentences, config)
    n = len(prefix.ids)
    bucket = prefix.token_sentence.clone()
    bucket[bucket < 0] = len(sentences)
    cache = readout.prefill(prefix.ids)
    sums = []
    for question in (case.question, NULL_QUESTION):
        suffix = builder.suffix(prefix, question, [], config)
        rows = readout.read(cache, n, suffix.ids, heads, config.attention.cue_window)[..., :n]  # (h, w, n)
        summed = torch.zeros(*rows.shape[:2], len(sentences) + 1)
        sums.append(summed.index_add_(2, bucket, rows.float()))  # (h, w, S + 1)
    texts = [documents[s.doc_index][s.start : s.end] for s in sentences]
    lexical = bm25_scores(case.question, texts, documents_language(documents, config.language))
    return CaseReadout(case.family, torch.tensor(gold), sums[0], sums[1], n, lexical)


def read_cases(
    readout: Any,
    tokenizer: Any,
    cases: Sequence[CalibrationCase],
    config: ReplayConfig,
    *,
    heads: HeadSet | None = None,
    progress: bool = True,
    desc: str = "reading calibration cases",
) -> list[CaseReadout]:
    """Read every case over ``heads`` (default: all heads of the model)."""
    from tqdm.auto import tqdm

    heads = heads or all_heads(model_config(readout))
    builder = PromptBuilder(tokenizer)
    return [
        read_case(readout, builder, case, heads, config)
        for case in tqdm(cases, desc=desc, unit="case", disable=not progress, leave=False)
    ]
