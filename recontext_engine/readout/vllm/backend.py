"""The vLLM backend: context prefill, read passes and generation on a ``vllm.LLM``, prefix-cached."""

from __future__ import annotations

import itertools
import threading
import uuid
from collections import OrderedDict, deque
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

import torch

from ...config import GenerationConfig
from ...errors import PromptTooLongError, ReContextError, UnsupportedModelError
from ...heads.headset import HeadSet
from ...protocol import Backend
from .admission import KVAdmission
from .options import DEFAULT_READOUT, check_readout, sampling_arguments
from .router import RequestRouter, new_token_ids

Read = tuple[list[int], HeadSet, int]  # a read pass: prompt ids, heads, cue window


@dataclass
class ModelInfo:
    """What the engine reads from ``backend.model`` (the weights themselves live in vLLM)."""

    config: Any
    generation_config: Any
    source: str | None = None  # the checkpoint (folder or hub id), for the input embeddings
    revision: str | None = None


@dataclass
class VLLMCache:
    """A request's context: its token ids (vLLM caches their blocks) and, for the transformers
    readout, that backend's KV cache once the first read needs it."""

    prefix_ids: list[int] = field(default_factory=list)
    readout_cache: Any = None
    cached_tokens: int | None = None  # prompt tokens the prefix cache served to the first pass
    priority: int = 0  # the call's place in line: every pass of it keeps it (see VLLMBackend.new_cache)


class VLLMBackend(Backend):
    """Prefill, read passes and generation for the engine, on a ``vllm.LLM``.

    ``lock`` serializes engine steps, one at a time: requests of several threads (reads and
    generations) run in vLLM's batches together (see :meth:`_submit_reads`).
    """

    name = "vllm"
    batches = True
    RECENT_READS = 8  # rows of the last reads, kept: a repeated read would hit the prefix cache

    def __init__(
        self,
        llm: Any,
        model: ModelInfo,
        *,
        readout: str = DEFAULT_READOUT,
        transformers_backend: Any = None,
        sampling_params: Any = None,
        structured_outputs: Any = None,
        tokens_prompt: Any = None,
        window: int | None = None,
    ) -> None:
        check_readout(readout)
        if readout == "transformers" and transformers_backend is None:
            raise ReContextError("readout='transformers' needs a TransformersBackend over the same weights")
        self.llm = llm
        self.model = model
        self.readout = readout
        self.transformers_backend = transformers_backend
        self.lock = threading.RLock()
        self.router = RequestRouter(llm.llm_engine, self.lock)
        if sampling_params is None:
            from vllm import SamplingParams

            sampling_params = SamplingParams
        if structured_outputs is None and sampling_params.__module__.startswith("vllm"):
            from vllm.sampling_params import StructuredOutputsParams

            structured_outputs = StructuredOutputsParams
        self._structured_outputs = structured_outputs or dict
        if tokens_prompt is None:
            from vllm.inputs import TokensPrompt

            tokens_prompt = TokensPrompt
        self._sampling_params = sampling_params
        self._prompt = tokens_prompt
        self._window = window
        eos = getattr(model.generation_config, "eos_token_id", None)
        eos = eos if eos is not None else getattr(model.config, "eos_token_id", None)
        self._eos_ids = set(eos if isinstance(eos, list) else [eos]) - {None}
        self._installed = False
        self._embeddings: torch.Tensor | None = None
        self._recent: OrderedDict[tuple, torch.Tensor] = OrderedDict()
        self.salted_reads = 0  # reads that needed the salted retry
        self.batched_reads = False  # whether reads batch with other requests (set at install)
        self._arrivals = itertools.count()
        scheduler = getattr(getattr(llm.llm_engine, "vllm_config", None), "scheduler_config", None)
        self.prioritized = str(getattr(scheduler, "policy", "fcfs")) == "priority"
        # (kind, prompt tokens, tokens vLLM took from its prefix cache) of the latest requests
        self.prefix_hits: deque[tuple[str, int, int]] = deque(maxlen=64)
        self.kv_admission = KVAdmission(kv_capacity(llm.llm_engine))

    def admit(self, tokens: int) -> AbstractContextManager[None]:
        """A call runs once its ``tokens`` fit in vLLM's KV cache beside the calls running (see
        :mod:`.admission`): its passes then find its context in the prefix cache."""
        return self.kv_admission.admitted(tokens)

    def close(self) -> None:
        """Stop vLLM's engine core and its workers (processes of their own); best effort."""
        core = getattr(self.llm.llm_engine, "engine_core", None)
        try:
            if core is not None:
                core.shutdown()
        except Exception:  # already stopping, or a vLLM without it: the process group ends them
            pass

    def input_embeddings(self) -> torch.Tensor | None:
        """The (vocab, dim) input embeddings (the embedding signal): the transformers
        readout's, else read once from the checkpoint; None without either."""
        if self.transformers_backend is not None:
            return self.transformers_backend.input_embeddings()
        if self._embeddings is None and self.model.source is not None:
            from .embeddings import load_input_embeddings

            self._embeddings = load_input_embeddings(
                self.model.source, self.model.config, self.model.revision
            )
        return self._embeddings

    @property
    def eos_ids(self) -> set[int]:
        """End-of-sequence token ids from the model's generation config."""
        return self._eos_ids

    @property
    def window(self) -> int:
        if self._window is None:
            engine = self.llm.llm_engine
            model_config = getattr(engine, "model_config", None) or engine.vllm_config.model_config
            self._window = int(model_config.max_model_len)
        return self._window

    def new_cache(self) -> VLLMCache:
        """A call's context. Under vLLM's priority scheduling each call takes the next place in line
        and all its passes keep it: a call's later reads and its generation run before the first
        reads of calls that came after it, while its context is still in the prefix cache. (First
        come, first served by request instead lets new calls' contexts evict it between passes when
        the KV cache is full, and every pass computes the context again.)"""
        return VLLMCache(priority=next(self._arrivals) if self.prioritized else 0)

    def prefill(self, ids: list[int], cache: VLLMCache | None = None) -> VLLMCache:
        """Record the context. vLLM computes it in the first pass that needs it and keeps its blocks
        in the prefix cache, so later passes over the same context reuse them."""
        cache = cache if cache is not None else self.new_cache()
        cache.prefix_ids = list(cache.prefix_ids) + list(ids)
        cache.readout_cache = None
        return cache

    def read(
        self,
        cache: VLLMCache,
        prefix_len: int,
        suffix_ids: list[int],
        heads: HeadSet,
        cue_window: int,
        keep: bool = False,
    ) -> torch.Tensor:
        """(len(heads), w, prefix_len + len(suffix_ids)) float32 cue rows, as the transformers backend
        (``keep`` is ignored: vLLM keeps the blocks in its own prefix cache)."""
        self._check_window(prefix_len + len(suffix_ids))
        if self.readout == "transformers":
            if cache.readout_cache is None:
                cache.readout_cache = self.transformers_backend.prefill(cache.prefix_ids[:prefix_len])
            return self.transformers_backend.read(
                cache.readout_cache, prefix_len, suffix_ids, heads, cue_window
            )
        ids = cache.prefix_ids[:prefix_len] + list(suffix_ids)
        return self._paged_reads([ids], heads, [min(cue_window, len(suffix_ids))], cache)[0]

    def _record_hit(self, kind: str, length: int, output: Any, cache: VLLMCache | None = None) -> None:
        cached = int(getattr(output, "num_cached_tokens", 0) or 0)
        self.prefix_hits.append((kind, length, cached))
        if cache is not None and cache.cached_tokens is None:
            cache.cached_tokens = cached  # the request's first pass: what earlier calls had computed

    def cached_tokens(self, cache: VLLMCache) -> int | None:
        """Prompt tokens vLLM's prefix cache served to the request's first pass."""
        return cache.cached_tokens

    def _install(self) -> None:
        """Wrap vLLM's attention layers in every worker (once); refuse what cannot be read."""
        if self._installed:
            return
        results = self.llm.collective_rpc("recontext_install_readout")
        errors = sorted({r["error"] for r in results if r.get("error")})
        if errors:
            raise UnsupportedModelError("; ".join(errors))
        self.batched_reads = all(r.get("batch_ids") for r in results)
        self._installed = True

    def read_branches(
        self,
        cache: VLLMCache,
        prefix_len: int,
        shared_ids: list[int],
        branches: list[list[int]],
        heads: HeadSet,
        cue_window: int,
        keep: bool = False,
    ) -> list[torch.Tensor]:
        """The branches' reads as requests added together, so vLLM runs them in one batch."""
        if self.readout == "transformers":
            return super().read_branches(cache, prefix_len, shared_ids, branches, heads, cue_window, keep)
        prompts = [cache.prefix_ids[:prefix_len] + shared_ids + b for b in branches]
        for ids in prompts:
            self._check_window(len(ids))
        windows = [min(cue_window, len(shared_ids) + len(b)) for b in branches]
        return self._paged_reads(prompts, heads, windows, cache)

    def _check_window(self, total: int) -> None:
        if total > self.window:
            raise PromptTooLongError(f"prompt of {total} tokens exceeds the model window of {self.window}")

    def _paged_reads(
        self, prompts: list[list[int]], heads: HeadSet, windows: list[int], cache: VLLMCache | None = None
    ) -> list[torch.Tensor]:
        """Cue rows of each prompt's last ``windows[i]`` tokens, the reads added to vLLM together."""
        found: list[torch.Tensor | None] = [None] * len(prompts)
        keys = [(tuple(ids), heads.heads, w) for ids, w in zip(prompts, windows)]
        with self.lock:
            self._install()
            for i, key in enumerate(keys):
                if key in self._recent:  # the same read again (a null-question read, say): same rows
                    self._recent.move_to_end(key)
                    found[i] = self._recent[key].clone()
        problems: list[str] = []
        # A prompt computed before (by a generation, say) may hit the prefix cache up to its last
        # block, leaving cue queries uncomputed; the retry salts the cache so that the whole prompt
        # is computed again.
        for salt in (None, uuid.uuid4().hex):
            todo = [i for i, rows in enumerate(found) if rows is None]
            if not todo:
                break
            reads = [(prompts[i], heads, windows[i]) for i in todo]
            for i, (rows, trouble) in zip(todo, self._submit_reads(reads, salt, cache)):
                problems += trouble
                if rows is not None:
                    self.salted_reads += salt is not None
                    with self.lock:
                        self._recent[keys[i]] = rows
                        while len(self._recent) > self.RECENT_READS:
                            self._recent.popitem(last=False)
                    found[i] = rows.clone()
        if any(rows is None for rows in found):
            raise UnsupportedModelError(
                "the paged readout captured no cue rows: "
                + "; ".join(sorted(set(problems)))
                + " (if vLLM replays whole-model CUDA graphs here, try enforce_eager=True)"
            )
        return [rows for rows in found if rows is not None]

    def _submit_reads(
        self, reads: list[Read], salt: str | None, cache: VLLMCache | None
    ) -> list[tuple[torch.Tensor | None, list[str]]]:
        """Run one-token requests over the ``(ids, heads, cue window)`` reads, each armed in every
        worker under its request id; (rows or None, problems) of each.

        Where the workers can name the sequences of a batch, the reads join whatever vLLM is running
        (other reads, generations) and the lock is held a step at a time; elsewhere each read runs
        alone, the engine drained first, and the capture finds it by its length.
        """
        params = self._sampling_params(max_tokens=1, temperature=0.0, detokenize=False)
        extra = {"cache_salt": salt} if salt else {}
        if not self.batched_reads:
            with self.lock:
                self.router.drain()
                return [self._exclusive_read(read, params, extra, cache) for read in reads]
        request_ids: list[str] = []
        try:
            with self.lock:  # armed before vLLM can schedule them
                for ids, heads, w in reads:
                    read_id = self.router.new_id()
                    self.llm.collective_rpc("recontext_arm", args=(read_spec(ids, heads, w, read_id),))
                    prompt = self._prompt(prompt_token_ids=ids, **extra)
                    priority = cache.priority if cache is not None else 0
                    request_ids.append(self.router.add(prompt, params, read_id, priority))
            final = self.router.run(request_ids)
            for rid, (ids, _, _) in zip(request_ids, reads):
                self._record_hit("read", len(ids), final[rid], cache)
        finally:
            with self.lock:
                for rid in request_ids:
                    self.router.abort(rid)  # only those that did not finish (an error, say)
                collected = [self.llm.collective_rpc("recontext_collect", args=(rid,)) for rid in request_ids]
        return [
            merge_rank_results(results, heads, w, len(ids))
            for results, (ids, heads, w) in zip(collected, reads)
        ]

    def _exclusive_read(
        self, read: Read, params: Any, extra: dict[str, Any], cache: VLLMCache | None
    ) -> tuple[torch.Tensor | None, list[str]]:
        ids, heads, w = read
        self.llm.collective_rpc("recontext_arm", args=(read_spec(ids, heads, w),))
        request_id = self.router.add(self._prompt(prompt_token_ids=ids, **extra), params)
        try:
            self._record_hit("read", len(ids), self.router.run([request_id])[request_id], cache)
        finally:
            self.router.abort(request_id)
            results = self.llm.collective_rpc("recontext_collect")
        return merge_rank_results(results, heads, w, len(ids))

    def _params(self, args: dict[str, Any]) -> Any:
        """``SamplingParams`` from :func:`sampling_arguments`, the structured outputs as vLLM's own class."""
        if "structured_outputs" in args:
            args = {**args, "structured_outputs": self._structured_outputs(**args["structured_outputs"])}
        return self._sampling_params(**args)

    def generate(
        self, cache: VLLMCache, suffix_ids: list[int], generation: GenerationConfig, eos_ids: set[int]
    ) -> Iterator[int]:
        """Generate after ``[context; suffix]``; yields token ids as vLLM produces them."""
        ids = list(cache.prefix_ids) + list(suffix_ids)
        room = self.window - len(ids)
        if room < 1:
            raise PromptTooLongError(
                f"prompt of {len(ids)} tokens leaves no room in the model window of {self.window}"
            )
        params = self._params(sampling_arguments(generation, eos_ids, min(generation.max_new_tokens, room)))
        request_id = self.router.add(self._prompt(prompt_token_ids=ids), params, priority=cache.priority)
        seen, finished = 0, False
        try:
            for output in self.router.outputs(request_id):
                if not seen:  # the prompt was computed in the first step
                    self._record_hit("generate", len(ids), output, cache)
                fresh = new_token_ids(output, seen)
                seen += len(fresh)
                finished = output.finished
                for token in fresh:
                    if token in eos_ids:
                        return
                    yield token
        finally:
            if not finished:
                self.router.abort(request_id)

    def generate_batch(
        self,
        prompts: Sequence[Sequence[int]],
        generation: GenerationConfig,
        eos_ids: Iterable[int] | None = None,
    ) -> list[list[int]]:
        """Greedy or sampled continuations of many prompts in one vLLM batch; end tokens dropped."""
        eos = set(self.eos_ids if eos_ids is None else eos_ids)
        request_ids = []
        for ids in prompts:
            room = self.window - len(ids)
            if room < 1:
                raise PromptTooLongError(
                    f"prompt of {len(ids)} tokens leaves no room in the model window of {self.window}"
                )
            args = sampling_arguments(generation, eos, min(generation.max_new_tokens, room), generation.stop)
            request_ids.append(self.router.add(self._prompt(prompt_token_ids=list(ids)), self._params(args)))
        final = self.router.run(request_ids)
        results = []
        for rid in request_ids:
            tokens = list(final[rid].outputs[0].token_ids)
            while tokens and tokens[-1] in eos:
                tokens.pop()
            results.append(tokens)
        return results


def kv_capacity(engine: Any) -> int | None:
    """Tokens vLLM's KV cache holds (blocks times block size, per engine); None where unknown."""
    cache_config = getattr(getattr(engine, "vllm_config", None), "cache_config", None)
    blocks = getattr(cache_config, "num_gpu_blocks", None)
    size = getattr(cache_config, "block_size", None)
    if not isinstance(blocks, int) or not isinstance(size, int) or blocks <= 0 or size <= 0:
        return None
    return blocks * size


def read_spec(ids: Sequence[int], heads: HeadSet, w: int, read_id: str | None = None) -> dict[str, Any]:
    """What a worker's capture is armed with for one read (plain lists and numbers: it crosses vLLM's
    process boundary); without ``read_id`` the read runs alone."""
    spec: dict[str, Any] = {"total": len(ids), "cue_window": w, "heads": [list(p) for p in heads.heads]}
    return spec if read_id is None else {**spec, "read_id": read_id}


def merge_rank_results(
    results: Sequence[dict[str, Any]], heads: HeadSet, w: int, total: int
) -> tuple[torch.Tensor | None, list[str]]:
    """Join the rows every worker captured into (len(heads), w, total); None and the problems if
    any head is missing."""
    found: dict[tuple[int, int], torch.Tensor] = {}
    problems = [r["error"] for r in results if r.get("error")]
    for result in results:
        for layer, head, payload in result.get("rows", []):
            found[(int(layer), int(head))] = torch.frombuffer(bytearray(payload), dtype=torch.float32).view(
                w, total
            )
    missing = [pair for pair in heads.heads if pair not in found]
    if missing or problems:
        if missing:
            problems.append(f"no complete rows for heads {missing[:4]}{' ...' if len(missing) > 4 else ''}")
        return None, problems
    return torch.stack([found[pair] for pair in heads.heads]), []
