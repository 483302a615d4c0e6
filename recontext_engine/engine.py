"""The engine facade: ``answer``, ``select_evidence`` and ``stream`` over a model and a head set."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import torch

from .config import ReplayConfig
from .context_cache import ContextCache
from .decoding import TextAssembler
from .errors import InputError, PromptTooLongError
from .heads.headset import HeadSet
from .heads.registry import HeadsArg, resolve_heads
from .prompt import Prefix, PromptBuilder, with_tools
from .protocol import Backend
from .reads import RoundReader, RowCache
from .request import Request
from .results import Evidence, ReplayResult, Usage
from .selection.rounds import select_evidence
from .spans import check_text, document_sentences, normalize_documents
from .structured import AnswerText, backend_generation

EvidenceCallback = Callable[[list[Evidence]], None]
"""``on_evidence`` hook of :meth:`ReContextEngine.answer`/:meth:`~ReContextEngine.stream`."""

MERGED_PREFILL_TOKENS = 256
"""Up to this many prefix tokens past a context cache hit (a chat's new turn) are computed by the
first read pass with its own tokens instead of a prefill of their own: one forward fewer, and on CPU
a forward over a few tokens costs mostly its fixed part (the weights read once, 30 layers)."""


@dataclass
class StreamOutcome:
    """Where a call's generator leaves its :class:`ReplayResult`. The generator holds this, not its
    :class:`ReplayStream`: with no reference cycle, a stream dropped unfinished is freed at once, and
    its generator's ``finally`` (the backend's admission, the context cache) runs then, not at the
    next garbage collection."""

    result: ReplayResult | None = None


class ReplayStream:
    """An iterator of text pieces; ``result`` holds the full :class:`ReplayResult` once it is exhausted."""

    def __init__(self, pieces: Iterator[str], outcome: StreamOutcome | None = None) -> None:
        self._pieces = pieces
        self.outcome = outcome if outcome is not None else StreamOutcome()

    @property
    def result(self) -> ReplayResult | None:
        return self.outcome.result

    @result.setter
    def result(self, result: ReplayResult | None) -> None:
        self.outcome.result = result

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
        backend: Backend,
        tokenizer: Any,
        heads: HeadSet,
        *,
        model_name: str = "",
        default_config: ReplayConfig | None = None,
    ) -> None:
        self.backend = backend
        self.tokenizer = tokenizer
        self.heads = heads
        self.model_name = model_name
        self.default_config = default_config or ReplayConfig()
        self.prompts = PromptBuilder(tokenizer)
        # Round 1's null-question rows depend on the context only: later questions reuse them.
        self.reader = RoundReader(backend, tokenizer, self.prompts, heads, RowCache())
        # The last context's KV, for the next call on it (backends that crop; vLLM has its own prefix cache).
        self.context_cache: ContextCache | None = ContextCache(backend.crop) if backend.can_crop else None
        eos = backend.eos_ids or {tokenizer.eos_token_id}
        self.eos_ids: set[int] = {int(e) for e in eos if e is not None}

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
        evidence, _ = self.select_with_usage(context, question, self._config(config, options))
        return evidence

    def select_with_usage(
        self, context: str | Sequence[str], question: str, config: ReplayConfig
    ) -> tuple[list[Evidence], int]:
        """:meth:`select_evidence` under ``config``, with the number of context tokens whose KV the
        context cache held (not prefilled again)."""
        request = self._start(context, question, config)
        try:
            with self._admitted(request, reads=True):
                evidence = self._select(request)
            return evidence, self._cached_tokens(request)
        finally:
            self._finish(request)

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
        outcome = StreamOutcome()
        return ReplayStream(self._run(request, evidence, outcome, on_evidence), outcome)

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
        if not self.backend.batches:
            return [self.answer(context, question, cfg) for context, question in pairs]
        prepared = []
        for context, question in pairs:
            request = self._start(context, question, cfg)
            chosen = self._select(request)
            numbered = cfg.generation.cite_evidence
            suffix = self.prompts.suffix(request.prefix, request.question, chosen, cfg, numbered=numbered)
            prepared.append((request, chosen, suffix))
        prompts = [request.prefix.ids + suffix.ids for request, _, suffix in prepared]
        generations = [backend_generation(cfg.generation, len(chosen)) for _, chosen, _ in prepared]
        if all(g == generations[0] for g in generations):
            outputs = self.backend.generate_batch(prompts, generations[0], self.eos_ids)
        else:  # cite_evidence: each answer's schema names its own evidence
            outputs = [
                self.backend.generate_batch([p], g, self.eos_ids)[0] for p, g in zip(prompts, generations)
            ]
        results = []
        for (request, chosen, suffix), tokens in zip(prepared, outputs):
            outcome = StreamOutcome()
            for _ in self._generate(
                request, chosen, suffix.ids, suffix.evidence_tokens, outcome, iter(tokens)
            ):
                pass
            assert outcome.result is not None
            results.append(outcome.result)
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
        messages = with_tools(messages, cfg)
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
        request = Request(
            Prefix([], torch.zeros(0, dtype=torch.long), [], []), "", cfg, self.backend.new_cache()
        )
        outcome = StreamOutcome()
        return ReplayStream(self._generate(request, [], ids, 0, outcome), outcome)

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

    def _start(self, context: str | Sequence[str], question: str, config: ReplayConfig) -> Request:
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
        pending: list[int] = []
        if taken is None:
            cache, cached = self.backend.prefill(prefix.ids), 0
        elif config.rounds > 0 and 0 < len(prefix.ids) - taken.shared <= MERGED_PREFILL_TOKENS:
            # a few new tokens (the next turn of a chat): the first read pass computes them
            cache, cached, pending = taken.cache, taken.shared, list(prefix.ids[taken.shared :])
        else:
            cache, cached = self.backend.prefill(prefix.ids[taken.shared :], taken.cache), taken.shared
        timings["prefill"] = time.perf_counter() - started
        return Request(prefix, question, config, cache, timings, cached_tokens=cached, pending=pending)

    def _finish(self, request: Request) -> None:
        """The request is done with its cache: it goes to the context cache for the next call."""
        if self.context_cache is not None and request.cache is not None:
            held = len(request.prefix.ids) - len(request.pending)  # pending ids are not in the cache
            self.context_cache.put(request.prefix.ids[:held], request.cache)
        request.cache = None

    def _cached_tokens(self, request: Request) -> int:
        """Prompt tokens an earlier call had computed: the backend's prefix cache, else ours."""
        served = self.backend.cached_tokens(request.cache)
        return request.cached_tokens if served is None else served

    def _admitted(self, request: Request, reads: bool) -> AbstractContextManager[None]:
        """The backend's admission (:meth:`Backend.admit`) for a call that reads: its passes need its
        context's KV kept between them; a call that only generates is one pass, left to the backend."""
        if not reads or request.config.rounds == 0:
            return nullcontext()
        return self.backend.admit(len(request.prefix.ids) + request.config.generation.max_new_tokens)

    def _select(self, request: Request) -> list[Evidence]:
        return select_evidence(request, self.reader)

    @property
    def row_cache(self) -> RowCache | None:
        """Attention rows kept for the next question on the same context (None: none kept)."""
        return self.reader.row_cache

    @row_cache.setter
    def row_cache(self, cache: RowCache | None) -> None:
        self.reader.row_cache = cache

    @property
    def input_embeddings(self) -> torch.Tensor | None:
        """The model's (vocab, dim) input embeddings, where the backend gives them."""
        return self.reader.input_embeddings

    def _run(
        self,
        request: Request,
        evidence: Sequence[Evidence] | None,
        outcome: StreamOutcome,
        on_evidence: EvidenceCallback | None = None,
    ) -> Iterator[str]:
        config, prefix = request.config, request.prefix
        with self._admitted(request, reads=evidence is None):
            if evidence is None:
                chosen = self._select(request)
            else:
                chosen = [e for e in evidence if e.text.strip()]
                request.timings["select"] = 0.0
            suffix = self.prompts.suffix(
                prefix, request.question, chosen, config, numbered=config.generation.cite_evidence
            )
            if len(prefix.ids) + len(suffix.ids) + 1 > self.context_window:
                raise PromptTooLongError(
                    f"context, evidence and question take {len(prefix.ids) + len(suffix.ids)} tokens, over "
                    f"the model window of {self.context_window}; lower top_k or max_evidence, or set "
                    "replay_headings=False"
                )
            if on_evidence is not None:
                on_evidence(list(chosen))
            yield from self._generate(request, chosen, suffix.ids, suffix.evidence_tokens, outcome)

    def _generate(
        self,
        request: Request,
        chosen: list[Evidence],
        suffix_ids: list[int],
        evidence_tokens: int,
        outcome: StreamOutcome,
        tokens: Iterator[int] | None = None,
    ) -> Iterator[str]:
        """Decode generated tokens into text pieces; ``tokens`` defaults to the backend generating now."""
        generation = request.config.generation
        started = time.perf_counter()
        assembler = TextAssembler(self.tokenizer, generation.stop)
        shown = AnswerText(generation)
        produced = 0
        if tokens is None:
            request.settle(self.backend)
            cached = self.reader.reuse(request, [suffix_ids])
            tokens = self.backend.generate(
                request.cache, suffix_ids[cached:], backend_generation(generation, len(chosen)), self.eos_ids
            )
        for token in tokens:
            produced += 1
            piece = shown.add(assembler.add(token))
            if piece:
                yield piece
            if assembler.stopped:
                break
        tail = shown.add(assembler.finish())
        text, calls, parsed, rest = shown.final(assembler.text)
        if tail + rest:
            yield tail + rest
        request.timings["generate"] = time.perf_counter() - started
        request.timings["total"] = sum(request.timings.values())
        # The backends stop at max_new_tokens or where the window ends, whichever comes first.
        limit = min(
            generation.max_new_tokens, self.context_window - len(request.prefix.ids) - len(suffix_ids)
        )
        finish = "tool_calls" if calls else "stop" if assembler.stopped or produced < limit else "length"
        outcome.result = ReplayResult(
            text=text,
            evidence=chosen,
            usage=Usage(
                len(request.prefix.ids) + len(suffix_ids),
                produced,
                evidence_tokens,
                self._cached_tokens(request),
            ),
            timings=request.timings,
            model=self.model_name,
            finish_reason=finish,
            documents=request.prefix.documents or None,
            question=request.question or None,
            tool_calls=calls,
            parsed=parsed,
        )
        self._finish(request)
