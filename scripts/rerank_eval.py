"""Measure the attention reranker against BM25 and MiniLM on real retrieval output.

Corpus: the paragraphs (80-200 words, tables and code left out, duplicates dropped) of Python's
own reference documentation as ``pydoc_data.topics`` ships it, text nobody on this project wrote.
Each of the questions below names its gold paragraph by a quote from it. A first stage retrieves
candidates over the whole corpus (BM25 top 3 and MiniLM top 3; the gold paragraph is added if both
missed it), random paragraphs fill the set up to ``--candidates``, and the set is shuffled with a
fixed seed. Each reranker then orders the shuffled set; the table gives MRR and recall@1 of the
gold paragraph, and for the attention variants the order invariance: the set is shuffled again
with another seed and rescored, and the table gives the mean Spearman correlation of each
document's two scores and the share of questions whose top document changed.

Rows: BM25 and MiniLM alone; ``old``, the former ``document_scores`` (the question cue's mass, all
documents in one prompt); ``current``, each document's calibrated attention in its own prompt
rank-fused with BM25; the same fused also with a semantic similarity (the engine's input-embedding
signal, per document: its best sentence, which ``document_scores`` ships, its sentences' mean, or
the document as one unit), at the configured and other weights; ``new``, ``document_scores``
itself. ``--sweep`` adds the attention reductions tried before (joint and separate reads).

Run: ``OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 python scripts/rerank_eval.py --out FILE`` (SmolLM2-135M
on CPU, some minutes; ``--questions 0:13`` and ``13:`` run it in halves), then
``python scripts/rerank_eval.py --table FILE``.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import time
from collections.abc import Sequence

import torch

QUESTIONS: list[tuple[str, str]] = [
    (
        "What is __debug__ set to when Python runs with optimization (-O)?",
        "These equivalences assume that",
    ),
    (
        "In an assignment with a starred target, what is the starred name bound to?",
        "called a “starred” target",
    ),
    (
        "When assigning to a subscript of a list, what happens to a negative index?",
        "If the primary is a mutable sequence object (such as a list), the subscript must yield an integer",
    ),
    (
        "How are names that start with two underscores inside a class rewritten?",
        "**Private name mangling:**",
    ),
    (
        "What error does the modulo operator raise when the right argument is zero?",
        'The "%" (modulo) operator',
    ),
    (
        "What value do the boolean operators and/or return?",
        'Note that neither "and" nor "or" restrict',
    ),
    (
        "When are default parameter values evaluated?",
        "**Default parameter values are evaluated",
    ),
    (
        "How is the return annotation of a function written?",
        "Parameters may have an *annotation*",
    ),
    (
        "Are lambda expressions more powerful than def statements?",
        "It is also possible to create anonymous",
    ),
    (
        "Which names does from module import * bind when __all__ is defined?",
        "The *public names* defined by a module",
    ),
    (
        "How does a relative import with leading dots find the module?",
        "you do not have to specify the absolute name",
    ),
    (
        "Why do str and bytes hash values differ between Python processes?",
        "values of str and bytes objects are “salted”",
    ),
    (
        "How do I put several pdb commands on one line?",
        "Multiple commands may be entered on a single line",
    ),
    (
        "Which pieces of program text count as code blocks?",
        "A Python program is constructed from code blocks",
    ),
    (
        "What error happens when a local variable is used before it is assigned?",
        "If a name binding operation occurs anywhere within a code block",
    ),
    (
        "What does it mean for an object to be immutable?",
        "The *value* of some objects can change",
    ),
    (
        "How does CPython free objects that are no longer reachable?",
        "CPython currently uses a reference- counting",
    ),
    (
        "How does raise ... from chain exceptions?",
        'The "from" clause is used for exception chaining',
    ),
    (
        "What does a finally clause do with an exception that was not handled?",
        'If "finally" is present',
    ),
    (
        "How does except* match the exceptions inside an exception group?",
        'The "except*" clause(s) are used',
    ),
    (
        "What happens to the variable named after as in an except clause when the handler ends?",
        'When a matching "except" clause is found',
    ),
    (
        "How does expandtabs decide how many spaces replace a tab?",
        "where all tab characters are replaced",
    ),
    (
        "What kind of table does str.translate take?",
        "mapped through the given translation table",
    ),
    (
        "What does calling a generator function return?",
        'A function or method which uses the "yield" statement',
    ),
    (
        "What is the difference between a code object and a function object?",
        "Code objects represent *byte-compiled*",
    ),
    (
        "How does staticmethod stop a function from becoming a bound method?",
        "Static method objects provide a way",
    ),
]


def corpus() -> list[str]:
    """The paragraphs of ``pydoc_data.topics``, 80-200 words, without tables and code, deduplicated."""
    from pydoc_data.topics import topics

    seen: set[str] = set()
    out = []
    for key in sorted(topics):
        for block in re.split(r"\n\s*\n", topics[key]):
            text = " ".join(block.split())
            if not 80 <= len(text.split()) <= 200 or block.strip().startswith((">>>", "+", "   ")):
                continue
            if text not in seen:
                seen.add(text)
                out.append(text)
    return out


def mrr_and_recall(rankings: Sequence[Sequence[float]], golds: Sequence[int]) -> tuple[float, float]:
    """MRR and recall@1 of the gold index under each score list (ties keep the given order)."""
    rr = []
    for scores, gold in zip(rankings, golds, strict=True):
        order = sorted(range(len(scores)), key=lambda i: -scores[i])
        rr.append(1.0 / (order.index(gold) + 1))
    return sum(rr) / len(rr), sum(r == 1.0 for r in rr) / len(rr)


def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    def ranks(x: Sequence[float]) -> torch.Tensor:
        r = torch.empty(len(x))
        r[torch.argsort(torch.tensor(list(x)), stable=True)] = torch.arange(len(x), dtype=torch.float)
        return r

    ra, rb = ranks(a), ranks(b)
    ra, rb = ra - ra.mean(), rb - rb.mean()
    return float((ra * rb).sum() / ((ra.norm() * rb.norm()).clamp_min(1e-12)))


def first_stage(
    paragraphs: list[str], questions: Sequence[tuple[str, str]], size: int, seed: int
) -> list[dict]:
    """Per question: its gold paragraph and two shuffles of its candidate set (paragraph ids)."""
    from recontext_engine.lexical import bm25_scores
    from recontext_engine.sentence_embedder import load_embedder

    embedder = load_embedder()[0]
    vectors = embedder.encode(paragraphs, batch_size=32, normalize_embeddings=True)
    rng = random.Random(seed)
    cases = []
    for question, quote in questions:
        golds = [i for i, p in enumerate(paragraphs) if quote in p]
        assert len(golds) == 1, (quote, golds)
        gold = golds[0]
        lexical = bm25_scores(question, paragraphs).tolist()
        dense = (vectors @ embedder.encode([question], normalize_embeddings=True)[0]).tolist()
        top_lex = sorted(range(len(paragraphs)), key=lambda i: -lexical[i])[:3]
        top_dense = sorted(range(len(paragraphs)), key=lambda i: -dense[i])[:3]
        chosen = list(dict.fromkeys(top_lex + top_dense))
        retrieved = gold in chosen
        if not retrieved:
            chosen.append(gold)
        others = [i for i in range(len(paragraphs)) if i not in chosen]
        chosen += rng.sample(others, max(0, size - len(chosen)))
        first, second = chosen[:], chosen[:]
        rng.shuffle(first)
        rng.shuffle(second)
        cases.append({"question": question, "gold": gold, "retrieved": retrieved, "orders": [first, second]})
    return cases, embedder


REDUCTIONS = ("sum", "mean", "calibrated", "log_ratio", "top_tokens")
TOP_TOKENS = 8  # ``top_tokens``: the calibrated scores of this many best tokens are averaged


def read_tokens(engine, documents: list[str], question: str, config) -> tuple:
    """One prompt holding ``documents``: the question's and null question's cue score and the
    document (-1: none) of each context token."""
    from recontext_engine.rerank import _cue_scores

    q, null, prefix = _cue_scores(engine, documents, question, config)
    doc_of_sentence = torch.tensor([s.doc_index for s in prefix.sentences] + [-1])
    return q, null, doc_of_sentence[prefix.token_sentence]


def reduce(tokens: tuple, n: int, how: str) -> list[float]:
    """(n,) per-document scores from :func:`read_tokens`' output; ``how``: one of REDUCTIONS."""
    q, null, doc_of_token = tokens
    valid = doc_of_token >= 0
    docs, q, null = doc_of_token[valid], q[valid].float(), null[valid].float()
    if how == "top_tokens":
        gain = q - null
        return [
            float(gain[docs == d].topk(min(TOP_TOKENS, int((docs == d).sum()))).values.mean())
            if bool((docs == d).any())
            else 0.0
            for d in range(n)
        ]
    q_mass = torch.zeros(n).index_add_(0, docs, q)
    null_mass = torch.zeros(n).index_add_(0, docs, null)
    if how == "sum":
        return q_mass.tolist()
    if how == "mean":
        return (q_mass / torch.bincount(docs, minlength=n).clamp_min(1)).tolist()
    if how == "calibrated":
        return (q_mass - null_mass).tolist()
    return (torch.log(q_mass + 1e-6) - torch.log(null_mass + 1e-6)).tolist()


def semantic_variants(engine, reads: list, question: str) -> dict[str, torch.Tensor]:
    """Per-document semantic similarities other than the shipped best sentence: the mean over a
    document's sentences, and the document as one unit (idf over the documents)."""
    from recontext_engine.semantic import EmbeddingIndex

    query = engine.tokenizer(" " + question, add_special_tokens=False)["input_ids"]
    ids, sentence, whole, doc_of_sentence = [], [], [], []
    for d, read in enumerate(reads):
        inside = read.token_sentence >= 0
        count = int(read.token_sentence.max()) + 1
        ids += read.ids
        sentence.append(torch.where(inside, read.token_sentence + len(doc_of_sentence), -1))
        whole.append(torch.where(inside, d, -1))
        doc_of_sentence += [d] * count
    embeddings = engine.input_embeddings
    per_sentence = EmbeddingIndex(ids, torch.cat(sentence), len(doc_of_sentence), embeddings).scores(query)
    docs = torch.tensor(doc_of_sentence)
    mean = (
        torch.zeros(len(reads)).index_add_(0, docs, per_sentence)
        / torch.bincount(docs, minlength=len(reads)).clamp_min(1).float()
    )
    document = EmbeddingIndex(ids, torch.cat(whole), len(reads), embeddings).scores(query)
    return {"mean sentence": mean, "document": document}


def score_case(engine, embedder, paragraphs: list[str], case: dict, sweep: bool) -> dict:
    """Scores of every method for both shuffles of one case: method -> [scores in order 1, in order 2]."""
    from recontext_engine.lexical import bm25_scores
    from recontext_engine.rerank import fuse, fusion_weights, joint_mass, read_document, semantic_scores

    question, config = case["question"], engine.default_config
    lw, sw = fusion_weights(config.selector)
    out: dict[str, list[list[float]]] = {}
    reads: dict[int, object] = {}  # a document alone reads the same in any order: read it once
    tokens: dict[int, tuple] = {}
    for ids in case["orders"]:
        texts = [paragraphs[i] for i in ids]
        got: dict[str, list[float]] = {}
        lexical = bm25_scores(question, texts)
        got["bm25"] = lexical.tolist()
        vectors = embedder.encode(texts, normalize_embeddings=True)
        got["minilm"] = (vectors @ embedder.encode([question], normalize_embeddings=True)[0]).tolist()
        got["old: joint sum (former document_scores)"] = joint_mass(engine, texts, question, config)
        for i in ids:
            if i not in reads:
                reads[i] = read_document(engine, paragraphs[i], question, config)
        mine = [reads[i] for i in ids]
        attention = [r.attention for r in mine]
        semantic = semantic_scores(engine, mine, question)
        got[f"current: separate calibrated +bm25 w={lw}"] = fuse(attention, lexical, lw)
        got["semantic (best sentence) alone"] = semantic.tolist()
        got[f"+bm25 +semantic best sentence w={sw}"] = fuse(attention, lexical, lw, semantic, sw)
        for name, values in semantic_variants(engine, mine, question).items():
            got[f"semantic ({name}) alone"] = values.tolist()
            got[f"+bm25 +semantic {name} w={sw}"] = fuse(attention, lexical, lw, values, sw)
        for weight in (0.5, 2.0):
            got[f"+bm25 +semantic best sentence w={weight}"] = fuse(attention, lexical, lw, semantic, weight)
        got["new: engine.document_scores"] = engine.document_scores(texts, question)
        if sweep:
            joint = read_tokens(engine, texts, question, config)
            for how in REDUCTIONS:
                got[f"joint {how}"] = reduce(joint, len(texts), how)
            if ids is case["orders"][0]:  # both orders' average, on the first shuffle only (cost)
                back = read_tokens(engine, texts[::-1], question, config)
                for how in REDUCTIONS:
                    two = zip(reduce(joint, len(texts), how), reduce(back, len(texts), how)[::-1])
                    got[f"joint {how} +reversed"] = [a + b for a, b in two]
            for i in ids:
                if i not in tokens:
                    tokens[i] = read_tokens(engine, [paragraphs[i]], question, config)
            for how in REDUCTIONS:
                scores = [reduce(tokens[i], 1, how)[0] for i in ids]
                got[f"separate {how}"] = scores
                for weight in (0.5, 1.0):
                    got[f"separate {how} +bm25 rrf w={weight}"] = fuse(scores, lexical, weight)
        for method, scores in got.items():
            out.setdefault(method, []).append(scores)
    return out


def table(records: list[dict]) -> None:
    """MRR and recall@1 on the first shuffle (and MRR on the second), Spearman of each document's
    scores between the shuffles, and the share of questions whose top document changed."""
    methods = list(dict.fromkeys(m for r in records for m in r["scores"]))
    missed = sum(not r["retrieved"] for r in records)
    print(f"\n{len(records)} questions; first stage missed the gold for {missed} (added)")
    print(f"{'method':48s} {'MRR':>6s} {'R@1':>6s} {'MRR(2)':>7s} {'spearman':>8s} {'top1 moved':>10s}")
    for method in methods:
        firsts, seconds, golds1, golds2, rho, moved = [], [], [], [], [], []
        for r in records:
            scores = r["scores"][method]
            one, two = r["orders"]
            firsts.append(scores[0])
            golds1.append(one.index(r["gold"]))
            if len(scores) > 1:
                seconds.append(scores[1])
                golds2.append(two.index(r["gold"]))
                a = [scores[0][one.index(i)] for i in sorted(one)]
                b = [scores[1][two.index(i)] for i in sorted(two)]
                rho.append(spearman(a, b))
                moved.append(max(range(len(a)), key=a.__getitem__) != max(range(len(b)), key=b.__getitem__))
        mrr, r1 = mrr_and_recall(firsts, golds1)
        if seconds:
            mrr2 = f"{mrr_and_recall(seconds, golds2)[0]:7.3f}"
            inv = f"{sum(rho) / len(rho):8.3f} {sum(moved) / len(moved):10.2f}"
        else:
            mrr2, inv = f"{'-':>7s}", f"{'-':>8s} {'-':>10s}"
        print(f"{method:48s} {mrr:6.3f} {r1:6.3f} {mrr2} {inv}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidates", type=int, default=6)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--questions", default=":", help="a slice of the questions, e.g. 0:13")
    parser.add_argument("--sweep", action="store_true", help="also the attention reductions (slower)")
    parser.add_argument("--out", help="append the per-question scores to this JSON-lines file")
    parser.add_argument("--table", nargs="+", help="print the table of these JSON-lines files, run nothing")
    parser.add_argument("--model", default=None, help="engine model (default: the embedded SmolLM2)")
    args = parser.parse_args(argv)
    if args.table:
        records = []
        for path in args.table:
            with open(path, encoding="utf-8") as f:
                records += [json.loads(line) for line in f]
        table(records)
        return
    torch.set_num_threads(1)
    from recontext_engine import ReContextEngine

    paragraphs = corpus()
    start, _, stop = args.questions.partition(":")
    questions = QUESTIONS[int(start) if start else None : int(stop) if stop else None]
    cases, embedder = first_stage(paragraphs, questions, args.candidates, args.seed)
    engine = ReContextEngine.from_pretrained(args.model)
    records, started = [], time.perf_counter()
    for n, case in enumerate(cases):
        case["scores"] = score_case(engine, embedder, paragraphs, case, args.sweep)
        records.append(case)
        if args.out:
            with open(args.out, "a", encoding="utf-8") as f:
                f.write(json.dumps(case) + "\n")
        print(f"  {n + 1}/{len(cases)} {time.perf_counter() - started:.0f}s", file=sys.stderr, flush=True)
    table(records)


if __name__ == "__main__":
    main()
