"""The engine facade: ``answer``, ``select_evidence`` and ``stream`` over a model and a head set."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import torch

from .config import EXTENDING_ORDERS, ReplayConfig
from .context_cache import ContextCache
from .controller import EvidencePool, select_sentences, within_margin
from .decoding import TextAssembler
from .errors import InputError, PromptTooLongError
from .heads.headset import HeadSet
from .heads.registry import HeadsArg, resolve_heads
from .language import documents_language
from .lexical import bm25_scores, connected_sentences
from .prompt import NULL_QUESTION, Prefix, PromptBuilder, Suffix
from .reads import RowCache, common_start, read_rows
from .results import Evidence, ReplayResult, Usage
from .scoring import Scorer, scorer_for
from .scoring.evidence_cue import evidence_cue_scores
from .semantic import EmbeddingIndex
from .spans import check_text, document_sentences, normalize_documents


@dataclass
class _Request:
    """One call's state: its prefix, its own KV cache and its timings."""

    prefix: Prefix
    question: str
    config: ReplayConfig
    cache: Any
    timings: dict[str, float] = field(default_factory=dict)
    kept: list[int] = field(default_factory=list)  # suffix ids a read pass left in the cache
    embedding_index: EmbeddingIndex | None = None  # the context side of the semantic scores, once built
    cached_tokens: int = 0  # prefix tokens whose KV came from the context cache

    @cached_property
    def sentence_texts(self) -> list[str]:
        documents = self.prefix.documents
        return [documents[s.doc_index][s.start : s.end] for s in self.prefix.sentences]

    @cached_property
    def sentence_key(self) -> dict[tuple[int, int, int], int]:
        """Sentence id by ``(doc_index, start, end)``."""
        return {(s.doc_index, s.start, s.end): i for i, s in enumerate(self.prefix.sentences)}

    @cached_property
    def language(self) -> str:
        return documents_language(self.prefix.documents, self.config.language)

    @cached_property
    def question_scores(self) -> torch.Tensor:
        return bm25_scores(self.question, self.sentence_texts, self.language)

    @cached_property
    def first_copy(self) -> torch.Tensor:
        """Per sentence, the id of the first sentence with the same text (whitespace aside)."""
        first: dict[str, int] = {}
        texts = (" ".join(text.split()) for text in self.sentence_texts)
        return torch.tensor([first.setdefault(text, i) for i, text in enumerate(texts)], dtype=torch.long)

    def pooled(self, evidence: Sequence[Evidence]) -> list[int]:
        return [self.sentence_key[(e.doc_index, e.char_start, e.char_end)] for e in evidence]

    def query(self, evidence: Sequence[Evidence] = ()) -> str:
        """A round's query: the question plus the pooled sentences connected to it (see
        :func:`~recontext_engine.lexical.connected_sentences`; later rounds find the next hop)."""
        related = connected_sentences(self.question_scores, self.pooled(evidence))
        return " ".join([self.question, *(self.sentence_texts[i] for i in related)])

    @property
    def hybrid(self) -> bool:
        """Whether the selection fuses the lexical side (BM25, the semantic signal) with attention."""
        return self.config.unit == "sentence" and self.config.lexical_weight > 0

    def lexical(self, query: str) -> torch.Tensor | None:
        """BM25 scores of the sentences against a round's ``query``, when the hybrid selection asks."""
        if not self.hybrid:
            return None
        if query == self.question:
            return self.question_scores
        return bm25_scores(query, self.sentence_texts, self.language)


EvidenceCallback = Callable[[list[Evidence]], None]
"""``on_evidence`` hook of :meth:`ReContextEngine.answer`/:meth:`~ReContextEngine.stream`."""


class ReplayStream:
    """An iterator of text pieces; ``result`` holds the full :class:`ReplayResult` once it is exhausted."""

    def __init__(self, pieces: Iterator[str]) -> None:
        self._pieces = pieces
        self.result: ReplayResult | None = None

    def __iter__(self) -> ReplayStream:
        return self

    def __next__(self) -> str:
        return next(self._pieces)

    def close(self) -> None:
        self._pieces.close()  # type: ignore[attr-defined]


class ReContextEngine:
    """A local LLM that replays the evidence its own retrieval heads point at.

    Build one with :meth:`from_pretrained`; one engine is safe to share between threads.
    """

    def __init__(
        self,
        backend: Any,
        tokenizer: Any,
        heads: HeadSet,
        *,
        model_name: str = "",
        scorer: Scorer | None = None,
        default_config: ReplayConfig | None = None,
    ) -> None:
        self.backend = backend
        self.tokenizer = tokenizer
        self.heads = heads
        self.model_name = model_name
        self.scorer = scorer
        self.default_config = default_config or ReplayConfig()
        self.prompts = PromptBuilder(tokenizer)
        # Round 1's null-question rows depend on the context only: later questions reuse them.
        self.row_cache: RowCache | None = RowCache()
        # The last context's KV, for the next call on it (backends that crop; vLLM has its own prefix cache).
        self.context_cache: ContextCache | None = (
            ContextCache(backend.crop) if hasattr(backend, "crop") else None
        )
        eos = (
            getattr(backend.model.generation_config, "eos_token_id", None)
            if hasattr(backend, "model")
            else None
        )
        eos = eos if eos is not None else tokenizer.eos_token_id
        self.eos_ids = set(eos if isinstance(eos, list) else [eos]) - {None}

    @classmethod
    def from_pretrained(
        cls,
        model: str | None = None,
        *,
        heads: HeadsArg = "auto",
        backend: str = "transformers",
        device: str | None = None,
        dtype: str | None = None,
        gguf_file: str | None = None,
        revision: str | None = None,
        default_config: ReplayConfig | None = None,
        progress: bool = False,
        **backend_options: Any,
    ) -> ReContextEngine:
        """Load a model (None: the embedded SmolLM2-135M-Instruct, CPU, offline) and its head set.

        ``heads``: ``"auto"`` (registry, else detect once and cache), a JSON path, a list of
        ``(layer, head)`` pairs or a :class:`HeadSet`. ``backend``: ``"transformers"`` (``device``
        defaults to ``"cpu"``) or ``"vllm"`` (places itself on its GPUs; other keywords such as
        ``tensor_parallel_size`` go to ``vllm.LLM``). ``progress``: a progress bar on stderr for
        long prefills (transformers backend; ``engine.backend.progress`` toggles it later).
        """
        from .backends import create_backend

        runtime = create_backend(
            backend,
            model,
            device=device,
            dtype=dtype,
            gguf_file=gguf_file,
            revision=revision,
            progress=progress,
            **backend_options,
        )

        def detect() -> HeadSet:
            from .heads.detect import detect_heads

            return detect_heads(
                runtime.readout, runtime.tokenizer, model_name=runtime.name, model_source=runtime.source
            )

        head_set = resolve_heads(heads, runtime.config, detect=detect)
        return cls(
            runtime.backend,
            runtime.tokenizer,
            head_set,
            model_name=runtime.name,
            default_config=default_config,
        )

    # -- public API -------------------------------------------------------------------------

    @property
    def context_window(self) -> int:
        return int(self.backend.window)

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def select_evidence(
        self, context: str | Sequence[str], question: str, config: ReplayConfig | None = None, **options: Any
    ) -> list[Evidence]:
        """The evidence ReContext would replay (no generation); with ``rounds=0``, none."""
        request = self._start(context, question, self._config(config, options))
        evidence = self._select(request)
        self._finish(request)
        return evidence

    def answer(
        self,
        context: str | Sequence[str],
        question: str,
        config: ReplayConfig | None = None,
        *,
        evidence: Sequence[Evidence] | None = None,
        on_evidence: EvidenceCallback | None = None,
        **options: Any,
    ) -> ReplayResult:
        """Answer ``question`` over ``context`` (one text or a list of documents).

        ``evidence`` replays the given sentences instead of selecting them (text-only replay).
        ``on_evidence(evidence)`` is called once with the evidence to replay (empty for vanilla),
        after selection and before generation starts, so a UI can show it while the answer streams.
        Keyword options override fields of ``config`` (e.g. ``rounds=0`` for vanilla).
        """
        stream = self.stream(context, question, config, evidence=evidence, on_evidence=on_evidence, **options)
        for _ in stream:
            pass
        assert stream.result is not None
        return stream.result

    def stream(
        self,
        context: str | Sequence[str],
        question: str,
        config: ReplayConfig | None = None,
        *,
        evidence: Sequence[Evidence] | None = None,
        on_evidence: EvidenceCallback | None = None,
        **options: Any,
    ) -> ReplayStream:
        """Like :meth:`answer`, yielding text pieces as they are generated.

        The prefill runs here; selection runs at the first ``next()``, which calls ``on_evidence``
        before the first token is generated.
        """
        cfg = self._config(config, options)
        request = self._start(context, question, cfg)
        stream = ReplayStream(iter(()))
        stream._pieces = self._run(request, evidence, stream, on_evidence)
        return stream

    def answer_batch(
        self,
        pairs: Sequence[tuple[str | Sequence[str], str]],
        config: ReplayConfig | None = None,
        **options: Any,
    ) -> list[ReplayResult]:
        """Answer many ``(context, question)`` pairs.

        Evidence is selected pair by pair; generation runs as one batch where the backend batches
        (vLLM's ``generate_batch``), else one pair after another.
        """
        cfg = self._config(config, options)
        if not hasattr(self.backend, "generate_batch"):
            return [self.answer(context, question, cfg) for context, question in pairs]
        prepared = []
        for context, question in pairs:
            request = self._start(context, question, cfg)
            chosen = self._select(request)
            suffix = self.prompts.suffix(request.prefix, request.question, chosen, cfg)
            prepared.append((request, chosen, suffix))
        prompts = [request.prefix.ids + suffix.ids for request, _, suffix in prepared]
        outputs = self.backend.generate_batch(prompts, cfg, self.eos_ids)
        results = []
        for (request, chosen, suffix), tokens in zip(prepared, outputs):
            stream = ReplayStream(iter(()))
            for _ in self._generate(
                request, chosen, suffix.ids, suffix.evidence_tokens, stream, iter(tokens)
            ):
                pass
            assert stream.result is not None
            results.append(stream.result)
        return results

    def document_scores(
        self, context: str | Sequence[str], question: str, config: ReplayConfig | None = None, **options: Any
    ) -> list[float]:
        """Relevance of each document to the question, for reranking (higher first): each document is
        read in its own prompt, so a score does not depend on the other documents or their order.
        The attention mass the question's cue puts on it, minus the null question's, rank-fused with
        BM25 and the input-embedding similarity (``lexical_weight=0``: that calibrated mass); see
        :mod:`recontext_engine.rerank`."""
        from .rerank import document_scores

        return document_scores(self, context, question, self._config(config, options))

    def chat(
        self, messages: Sequence[dict[str, str]], config: ReplayConfig | None = None, **options: Any
    ) -> ReplayResult:
        """Plain generation over chat messages (``{"role", "content"}``) with the chat template; no replay."""
        stream = self.stream_chat(messages, config, **options)
        for _ in stream:
            pass
        assert stream.result is not None
        return stream.result

    def stream_chat(
        self, messages: Sequence[dict[str, str]], config: ReplayConfig | None = None, **options: Any
    ) -> ReplayStream:
        """Like :meth:`chat`, yielding text pieces."""
        cfg = self._config(config, options)
        if not messages:
            raise InputError("messages are empty")
        for i, message in enumerate(messages):
            check_text(message.get("content", ""), f"message {i}")
        self._check_size([m.get("content", "") for m in messages], "the messages")
        if self.prompts.has_chat_template:
            text = self.tokenizer.apply_chat_template(
                list(messages), add_generation_prompt=True, tokenize=False
            )
        else:
            text = "\n".join(f"{m['role']}: {m['content']}" for m in messages) + "\nassistant:"
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        if len(ids) + 1 > self.context_window:
            raise PromptTooLongError(
                f"messages take {len(ids)} tokens, over the model window of {self.context_window}"
            )
        request = _Request(
            Prefix([], torch.zeros(0, dtype=torch.long), [], []), "", cfg, self.backend.new_cache()
        )
        stream = ReplayStream(iter(()))
        stream._pieces = self._generate(request, [], ids, 0, stream)
        return stream

    # -- internals --------------------------------------------------------------------------

    def _config(self, config: ReplayConfig | None, options: dict[str, Any]) -> ReplayConfig:
        config = config or self.default_config
        return config.with_options(**options) if options else config

    @cached_property
    def max_token_chars(self) -> int:
        """The most characters one token stands for: the longest vocabulary entry (a byte-level entry
        is at least as long as the text it decodes to)."""
        return max((len(token) for token in self.tokenizer.get_vocab()), default=1)

    def _check_size(self, texts: Sequence[str], what: str) -> None:
        """Refuse text that cannot fit the window before any costly work on it (sentence splitting,
        the full tokenization): first by its length in characters, then by a quick token count."""
        chars = sum(len(t) for t in texts)
        # Twice the longest token, for tokenizers whose normalizer drops characters.
        if chars > 2 * self.max_token_chars * self.context_window:
            raise PromptTooLongError(
                f"{what} take {chars:,} characters, more than a {self.context_window}-token window holds; "
                "shorten it or use a model with a longer window"
            )
        counts = self.tokenizer(list(texts), add_special_tokens=False)["input_ids"]
        # Tokenized apart, texts can take a token or two more than joined: never refuse on that.
        tokens = sum(len(ids) for ids in counts) - 2 * len(texts)
        if tokens > self.context_window:
            raise PromptTooLongError(
                f"{what} takes at least {tokens} tokens, over the model window of {self.context_window}; "
                "shorten it or use a model with a longer window"
            )

    def _start(self, context: str | Sequence[str], question: str, config: ReplayConfig) -> _Request:
        started = time.perf_counter()
        documents = normalize_documents(context)
        question = check_text(question, "question")
        self._check_size([*documents, question], "the context and question")
        sentences = document_sentences(documents, config.max_sentence_chars, config.language)
        prefix = self.prompts.prefix(documents, sentences, config)
        question_ids = self.prompts.suffix(prefix, question, [], config).ids
        needed = len(prefix.ids) + len(question_ids) + 1
        if needed > self.context_window:
            raise PromptTooLongError(
                f"context and question take {needed - 1} tokens, over the model window of "
                f"{self.context_window}; shorten the context or use a model with a longer window"
            )
        timings = {"tokenize": time.perf_counter() - started}
        started = time.perf_counter()
        taken = self.context_cache.take(prefix.ids) if self.context_cache is not None else None
        if taken is None:
            cache, cached = self.backend.prefill(prefix.ids), 0
        else:
            cache, cached = self.backend.prefill(prefix.ids[taken.shared :], taken.cache), taken.shared
        timings["prefill"] = time.perf_counter() - started
        return _Request(prefix, question, config, cache, timings, cached_tokens=cached)

    def _finish(self, request: _Request) -> None:
        """The request is done with its cache: it goes to the context cache for the next call."""
        if self.context_cache is not None and request.cache is not None:
            self.context_cache.put(request.prefix.ids, request.cache)
        request.cache = None

    def _scores(self, request: _Request, suffix: Suffix, rows: torch.Tensor) -> tuple:
        """Scores of candidate positions from one read pass's rows, and the sentence id of each candidate."""
        config, prefix = request.config, request.prefix
        n = len(prefix.ids)
        if config.candidates == "context":
            rows, token_sentence = rows[..., :n], prefix.token_sentence
        else:
            token_sentence = torch.cat([prefix.token_sentence, suffix.token_sentence])
        scorer = self.scorer or scorer_for(config)  # a scorer given to the engine overrides config.scorer
        return scorer.score(rows), token_sentence

    def _round_scores(self, request: _Request, evidence: list[Evidence]) -> tuple:
        """One round's candidate scores (the question's, minus the null question's with
        ``null_calibration``, plus the evidence cue), and the sentence id of each candidate."""
        config = request.config
        suffixes, rows, evidence_rows = self._round_rows(request, evidence)
        scores, token_sentence = self._scores(request, suffixes[0], rows[0])
        if config.null_calibration:
            scores = scores - self._scores(request, suffixes[1], rows[1])[0]
        if evidence_rows is not None:
            cue = evidence_cue_scores(evidence_rows, request.prefix.token_sentence)
            scores = scores.clone()
            scores[: len(cue)] += config.evidence_cue * cue
        return scores, token_sentence

    def _round_rows(
        self, request: _Request, evidence: list[Evidence]
    ) -> tuple[list[Suffix], list[torch.Tensor], torch.Tensor | None]:
        """The suffixes and rows of one round's question pass and (with null calibration)
        null-question pass, and (with ``evidence_cue``) the question pass's rows of the replayed
        evidence tokens.

        Both passes share the prefix cache and the evidence block, which is read once for both;
        without evidence the null pass depends on the context only and comes from :attr:`row_cache`.
        The evidence rows come from the same pass, read with a cue window that reaches back to them.
        """
        config, prefix = request.config, request.prefix
        questions = [request.question, NULL_QUESTION] if config.null_calibration else [request.question]
        suffixes = [self.prompts.suffix(prefix, q, evidence, config, request.sentence_key) for q in questions]
        window = config.cue_window
        own = len(suffixes[0].ids)
        at = torch.nonzero(suffixes[0].token_sentence >= 0).squeeze(-1)
        if config.evidence_cue > 0 and len(at):
            # one window for all passes, so no longer than the shortest suffix
            window = max(window, min(own - int(at[0]), *(len(s.ids) for s in suffixes)))
        ids = [s.ids for s in suffixes]
        # With evidence, the question pass is kept in the cache: the next pass or the generation goes
        # on from the part of it that they share (the earlier rounds' evidence, in EXTENDING_ORDERS).
        keep = bool(evidence) and hasattr(self.backend, "crop")
        rows = read_rows(
            self.backend,
            request.cache,
            prefix.ids,
            ids,
            self.heads,
            window,
            self.row_cache,
            cacheable=[False, not evidence],
            cached=self._reuse(request, ids, before=window),
            keep=keep,
        )
        if keep:
            request.kept = list(ids[0])
        if window == config.cue_window:
            return suffixes, rows, None
        at = at[at >= own - window] - (own - window)
        return suffixes, [r[:, -config.cue_window :] for r in rows], rows[0][:, at]

    def _reuse(self, request: _Request, suffixes: Sequence[list[int]], before: int = 1) -> int:
        """How many leading tokens of every one of ``suffixes`` the cache already holds after the
        prefix (from a kept read pass), leaving at least the last ``before`` of each to compute;
        the cache is cropped to them."""
        if not hasattr(self.backend, "crop"):
            return 0
        cached = common_start([request.kept, *suffixes]) if request.kept else 0
        cached = max(0, min(cached, *(len(s) - before for s in suffixes)))
        self.backend.crop(request.cache, len(request.prefix.ids) + cached)
        request.kept = request.kept[:cached]
        return cached

    @cached_property
    def input_embeddings(self) -> torch.Tensor | None:
        """The model's (vocab, dim) input embeddings, where the backend gives them (``semantic_weight``)."""
        get = getattr(self.backend, "input_embeddings", None)
        return get() if get is not None else None

    def _semantic(self, request: _Request, query: str) -> torch.Tensor | None:
        """Embedding similarities of the sentences to a round's ``query``, when the hybrid asks."""
        config, prefix = request.config, request.prefix
        if not request.hybrid or config.semantic_weight <= 0 or self.input_embeddings is None:
            return None
        if request.embedding_index is None:
            request.embedding_index = EmbeddingIndex(
                prefix.ids, prefix.token_sentence, len(prefix.sentences), self.input_embeddings
            )
        query_ids = self.tokenizer(" " + query, add_special_tokens=False)["input_ids"]
        return request.embedding_index.scores(query_ids)

    def _select(self, request: _Request) -> list[Evidence]:
        config, prefix = request.config, request.prefix
        pool = EvidencePool(config.pool_limit)
        started = time.perf_counter()
        # Reads see the pool in the replay order where that order grows round by round, so that each
        # read (and the generation) goes on from the evidence block of the one before; else in
        # document order.
        read_order = config.evidence_order if config.evidence_order in EXTENDING_ORDERS else "document"
        for round_index in range(1, config.rounds + 1):
            current = pool.arranged(read_order)
            scores, token_sentence = self._round_scores(request, current)
            # attention-only selection needs no query (nor the question's BM25 scores behind it)
            query = request.query(current) if request.hybrid else request.question
            picks = select_sentences(
                scores,
                token_sentence,
                config.top_k,
                config.unit,
                request.lexical(query),
                config.lexical_weight,
                exclude=pool.sentence_ids(),
                semantic=self._semantic(request, query),
                semantic_weight=config.semantic_fusion_weight,
                first_copy=request.first_copy,
            )
            for sentence_id, score in within_margin(picks, config.evidence_margin):
                s = prefix.sentences[sentence_id]
                text = prefix.documents[s.doc_index][s.start : s.end]
                pool.add(sentence_id, Evidence(text, s.doc_index, s.start, s.end, score, round_index))
            if len(pool) >= pool.limit:
                break
        request.timings["select"] = time.perf_counter() - started
        return pool.arranged(config.evidence_order)

    def _run(
        self,
        request: _Request,
        evidence: Sequence[Evidence] | None,
        stream: ReplayStream,
        on_evidence: EvidenceCallback | None = None,
    ) -> Iterator[str]:
        config, prefix = request.config, request.prefix
        if evidence is None:
            chosen = self._select(request)
        else:
            chosen = [e for e in evidence if e.text.strip()]
            request.timings["select"] = 0.0
        suffix = self.prompts.suffix(prefix, request.question, chosen, config)
        if len(prefix.ids) + len(suffix.ids) + 1 > self.context_window:
            raise PromptTooLongError(
                f"context, evidence and question take {len(prefix.ids) + len(suffix.ids)} tokens, over the "
                f"model window of {self.context_window}; lower top_k or max_evidence"
            )
        if on_evidence is not None:
            on_evidence(list(chosen))
        yield from self._generate(request, chosen, suffix.ids, suffix.evidence_tokens, stream)

    def _generate(
        self,
        request: _Request,
        chosen: list[Evidence],
        suffix_ids: list[int],
        evidence_tokens: int,
        stream: ReplayStream,
        tokens: Iterator[int] | None = None,
    ) -> Iterator[str]:
        """Decode generated tokens into text pieces; ``tokens`` defaults to the backend generating now."""
        config = request.config
        started = time.perf_counter()
        assembler = TextAssembler(self.tokenizer, config.stop)
        produced = 0
        if tokens is None:
            cached = self._reuse(request, [suffix_ids])
            tokens = self.backend.generate(request.cache, suffix_ids[cached:], config, self.eos_ids)
        for token in tokens:
            produced += 1
            piece = assembler.add(token)
            if piece:
                yield piece
            if assembler.stopped:
                break
        tail = assembler.finish()
        if tail:
            yield tail
        request.timings["generate"] = time.perf_counter() - started
        request.timings["total"] = sum(request.timings.values())
        # The backends stop at max_new_tokens or where the window ends, whichever comes first.
        limit = min(config.max_new_tokens, self.context_window - len(request.prefix.ids) - len(suffix_ids))
        finish = "stop" if assembler.stopped or produced < limit else "length"
        stream.result = ReplayResult(
            text=assembler.text,
            evidence=chosen,
            usage=Usage(
                len(request.prefix.ids) + len(suffix_ids), produced, evidence_tokens, request.cached_tokens
            ),
            timings=request.timings,
            model=self.model_name,
            finish_reason=finish,
            documents=request.prefix.documents or None,
            question=request.question or None,
        )
        self._finish(request)
