"""The vLLM backend: context prefill, read passes and generation on a ``vllm.LLM``, prefix-cached."""

from __future__ import annotations

import threading
import uuid
from collections import OrderedDict, deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from ...config import GenerationConfig
from ...errors import PromptTooLongError, ReContextError, UnsupportedModelError
from ...heads.headset import HeadSet
from ...protocol import Backend
from .options import DEFAULT_READOUT, check_readout, sampling_arguments
from .router import RequestRouter, new_token_ids


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


class VLLMBackend(Backend):
    """Prefill, read passes and generation for the engine, on a ``vllm.LLM``.

    ``lock`` serializes engine steps; a paged read also waits until no other request runs, so the
    worker can tell its sequence apart.
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
        # (kind, prompt tokens, tokens vLLM took from its prefix cache) of the latest requests
        self.prefix_hits: deque[tuple[str, int, int]] = deque(maxlen=64)

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
        return VLLMCache()

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
        total = prefix_len + len(suffix_ids)
        if total > self.window:
            raise PromptTooLongError(f"prompt of {total} tokens exceeds the model window of {self.window}")
        if self.readout == "transformers":
            if cache.readout_cache is None:
                cache.readout_cache = self.transformers_backend.prefill(cache.prefix_ids[:prefix_len])
            return self.transformers_backend.read(
                cache.readout_cache, prefix_len, suffix_ids, heads, cue_window
            )
        return self._paged_read(
            cache.prefix_ids[:prefix_len] + list(suffix_ids), heads, min(cue_window, len(suffix_ids))
        )

    def _record_hit(self, kind: str, length: int, output: Any) -> None:
        self.prefix_hits.append((kind, length, int(getattr(output, "num_cached_tokens", 0) or 0)))

    def _install(self) -> None:
        """Wrap vLLM's attention layers in every worker (once); refuse what cannot be read."""
        if self._installed:
            return
        results = self.llm.collective_rpc("recontext_install_readout")
        errors = sorted({r["error"] for r in results if r.get("error")})
        if errors:
            raise UnsupportedModelError("; ".join(errors))
        self._installed = True

    def _paged_read(self, ids: list[int], heads: HeadSet, w: int) -> torch.Tensor:
        spec = {"total": len(ids), "cue_window": w, "heads": [list(pair) for pair in heads.heads]}
        key = (tuple(ids), heads.heads, w)
        params = self._sampling_params(max_tokens=1, temperature=0.0, detokenize=False)
        with self.lock:
            if key in self._recent:  # the same read again (a null-question read, say): same rows
                self._recent.move_to_end(key)
                return self._recent[key].clone()
            self._install()
            self.router.drain()
            problems: list[str] = []
            # A prompt computed before (by a generation, say) may hit the prefix cache up to its last
            # block, leaving cue queries uncomputed; the retry salts the cache so that the whole
            # prompt is computed again.
            for salt in (None, uuid.uuid4().hex):
                self.llm.collective_rpc("recontext_arm", args=(spec,))
                prompt = self._prompt(prompt_token_ids=ids, **({"cache_salt": salt} if salt else {}))
                request_id = self.router.add(prompt, params)
                self._record_hit("read", len(ids), self.router.run([request_id])[request_id])
                results = self.llm.collective_rpc("recontext_collect")
                rows, problems = merge_rank_results(results, heads, w, len(ids))
                if rows is not None:
                    self.salted_reads += salt is not None
                    self._recent[key] = rows
                    while len(self._recent) > self.RECENT_READS:
                        self._recent.popitem(last=False)
                    return rows.clone()
        raise UnsupportedModelError(
            "the paged readout captured no cue rows: "
            + "; ".join(problems)
            + " (if vLLM replays whole-model CUDA graphs here, try enforce_eager=True)"
        )

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
        request_id = self.router.add(self._prompt(prompt_token_ids=ids), params)
        seen, finished = 0, False
        try:
            for output in self.router.outputs(request_id):
                if not seen:  # the prompt was computed in the first step
                    self._record_hit("generate", len(ids), output)
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
