"""Load HELMET-format JSONL files (the RAG and recall tasks) as :class:`BenchCase` objects.

HELMET's own files are not shipped (no downloads here); this reads the ones a user already has,
so that ``recontext bench --helmet FILE.jsonl`` runs the paper's kind of data, e.g. on a GPU.
The loader is lenient; per row it reads:

- **context**: ``ctxs`` (KILT-style RAG rows: a list of ``{"title", "text"}``; each passage becomes
  one document ``"Title: {title}\\n{text}"``, or just ``text`` without a title), else ``context``
  (one text, or a list of texts), else ``documents`` / ``docs`` (lists of texts or of ctx objects).
- **question**: ``question``, else ``query``, else ``input``. JSON-KV rows (``num_kvs`` present or
  ``json_kv`` in the task name) get HELMET's instruction in front of the key; RULER needle rows
  with ``type_needle_v`` get RULER's question (``What is the special magic {type} for {query}
  mentioned in the provided text?``).
- **answers**: ``answers``, else ``answer``, else ``outputs``: a string or a (nested) list of
  strings; numbers are turned into strings.
- **task**: ``task`` / ``dataset`` fields, else the file name without its extension.
- **gold**: HELMET marks no gold sentences, so the gold is derived: the sentences containing an
  answer (normalized, whole words) inside passages flagged ``has_answer`` / ``isgold`` /
  ``is_gold`` / ``gold`` when some are flagged, else anywhere; for JSON-KV rows, the line with
  the key. Recall on HELMET data is therefore *answer-bearing sentence* recall. Rows with no gold
  found get ``gold=[]`` (recall is then left out, accuracy is still measured).
- **depth**: ``depth`` if given, else the position of the first gold sentence (fraction of the
  context's characters before it); None without gold.
- **length**: ``length`` if given, else the context's token count rounded up to a multiple of 1K.

Rows whose context exceeds the model window still load; the benchmark records their error.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from ..spans import split_sentences
from .metrics import normalize_answer
from .tasks import BenchCase, GoldSpan

JSON_KV_INSTRUCTION = "Extract the value corresponding to the specified key in the JSON object. Key: {key}"
RULER_NIAH_QUESTION = "What is the special magic {type} for {query} mentioned in the provided text?"
_GOLD_FLAGS = ("has_answer", "isgold", "is_gold", "gold")


def _flatten(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [s for item in value for s in _flatten(item)]
    return [str(value)]


def _first(row: dict[str, Any], *names: str) -> Any:
    for name in names:
        if row.get(name) not in (None, "", []):
            return row[name]
    return None


def _passage(ctx: Any) -> tuple[str, bool]:
    if isinstance(ctx, str):
        return ctx, False
    text = str(ctx.get("text") or ctx.get("contents") or ctx.get("content") or "")
    title = ctx.get("title")
    flagged = any(bool(ctx.get(flag)) for flag in _GOLD_FLAGS)
    return (f"Title: {title}\n{text}" if title else text), flagged


def _documents(row: dict[str, Any]) -> tuple[list[str], list[bool]]:
    source = _first(row, "ctxs", "context", "documents", "docs")
    if source is None:
        raise ValueError("row has no context (ctxs, context, documents or docs)")
    if isinstance(source, str):
        return [source], [False]
    passages = [_passage(item) for item in source]
    kept = [(text, flag) for text, flag in passages if text.strip()]
    if not kept:
        raise ValueError("row has an empty context")
    return [t for t, _ in kept], [f for _, f in kept]


def _contains(sentence: str, needles: Iterable[str]) -> bool:
    haystack = f" {normalize_answer(sentence)} "
    return any(n and f" {n} " in haystack for n in needles)


def find_gold(
    documents: list[str], needles: Iterable[str], flagged: list[bool] | None = None
) -> list[GoldSpan]:
    """Sentences containing a needle (normalized, whole words); inside flagged documents if any are."""
    norm = [normalize_answer(n) for n in needles if n.strip()]
    flagged = flagged or [False] * len(documents)
    scopes = [i for i, f in enumerate(flagged) if f] or list(range(len(documents)))
    gold = []
    for doc_index in scopes:
        doc = documents[doc_index]
        for start, end in split_sentences(doc):
            if _contains(doc[start:end], norm):
                gold.append(GoldSpan(doc_index, start, end))
    return gold


def _depth(documents: list[str], gold: list[GoldSpan]) -> float | None:
    if not gold:
        return None
    first = min(gold, key=lambda g: (g.doc_index, g.char_start))
    before = sum(len(d) for d in documents[: first.doc_index]) + first.char_start
    total = sum(len(d) for d in documents)
    return min(1.0, before / max(1, total - (first.char_end - first.char_start)))


def row_to_case(
    row: dict[str, Any],
    *,
    task: str,
    index: int,
    count_tokens: Callable[[str], int] | None = None,
) -> BenchCase:
    """One HELMET row as a :class:`BenchCase` (see the module docstring for the fields read)."""
    task = str(_first(row, "task", "dataset") or task)
    documents, flagged = _documents(row)
    raw_question = _first(row, "question", "query", "input")
    if raw_question is None:
        raise ValueError("row has no question (question, query or input)")
    raw_question = str(raw_question)
    answers = _flatten(_first(row, "answers", "answer", "outputs"))
    if not answers:
        raise ValueError("row has no answers (answers, answer or outputs)")
    is_kv = "num_kvs" in row or "json_kv" in task.lower()
    if is_kv:
        question = JSON_KV_INSTRUCTION.format(key=raw_question)
        gold = find_gold(documents, [raw_question.strip().strip('"')])
    else:
        needle_type = row.get("type_needle_v")
        query = row.get("query")
        if needle_type and query:
            question = RULER_NIAH_QUESTION.format(type=needle_type, query=query)
        else:
            question = raw_question
        gold = find_gold(documents, answers, flagged)
    tokens = sum(count_tokens(d) for d in documents) if count_tokens else 0
    length = row.get("length")
    if not isinstance(length, int):
        length = max(1, math.ceil(tokens / 1024)) * 1024 if tokens else 0
    depth = row.get("depth")
    depth = float(depth) if isinstance(depth, (int, float)) else _depth(documents, gold)
    row_id = _first(row, "id", "qid")
    return BenchCase(
        case_id=f"{task}-{row_id if row_id is not None else index}",
        task=task,
        context=documents[0] if len(documents) == 1 else documents,
        question=question,
        answers=answers,
        gold=gold,
        depth=depth,
        length=length,
        target_tokens=tokens,
        context_tokens=tokens,
        hops=int(row.get("hops", 1)),
        layout="text" if len(documents) == 1 else "docs",
        meta={
            "source": "helmet",
            "answer_tokens": max((count_tokens(" " + a) for a in answers), default=0) if count_tokens else 0,
        },
    )


def load_helmet(
    path: str | Path,
    *,
    count_tokens: Callable[[str], int] | None = None,
    limit: int | None = None,
    task: str | None = None,
) -> list[BenchCase]:
    """Cases from a HELMET-format JSONL file (one JSON object per line; blank lines skipped)."""
    path = Path(path)
    name = task or path.name.split(".")[0]
    cases: list[BenchCase] = []
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{number}: not JSON ({exc.msg})") from None
            if not isinstance(row, dict):
                raise ValueError(f"{path}:{number}: expected a JSON object")
            try:
                cases.append(row_to_case(row, task=name, index=len(cases), count_tokens=count_tokens))
            except ValueError as exc:
                raise ValueError(f"{path}:{number}: {exc}") from None
            if limit is not None and len(cases) >= limit:
                break
    return cases
