"""The vLLM backend: generation and context prefill on vLLM, with prefix caching.

Two readouts (``readout=``):

- ``"transformers"`` (default, the simplest correct design): read passes run through a
  :class:`~recontext_engine.readout.transformers.TransformersBackend` over the same weights; vLLM
  does the generation. The transformers context cache is computed lazily at the first read, so
  vanilla prompting (``rounds=0``) never touches it.
- ``"paged"``: read passes run on vLLM itself. A worker extension wraps each attention layer's
  backend ``forward``; while a read is armed it takes the cue queries as vLLM computed them and
  scores them against vLLM's paged key cache with :func:`~recontext_engine.readout.paged.paged_cue_rows`.
  With prefix caching each read recomputes only the evidence and the question.

``vllm`` is imported only here, at call time. The hooks target the V1 engine of vLLM 0.11 to 0.33
(``Attention.impl.forward(layer, query, key, value, kv_cache, attn_metadata, ...)`` with
FlashAttention metadata: ``query_start_loc``, ``seq_lens``, ``block_table``); see docs/vllm.md for
what is verified on the CPU and what only on a GPU.
"""

from __future__ import annotations

import importlib.util
import re
import threading
import uuid
import warnings
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..config import ReplayConfig
from ..errors import BackendUnavailableError, PromptTooLongError, ReContextError, UnsupportedModelError
from ..heads.headset import HeadSet
from .paged import paged_cue_rows

SUPPORTED_VLLM = ">=0.11,<0.34"
_SUPPORTED_RANGE = ((0, 11), (0, 34))
INSTALL_HINT = (
    f"install it with `pip install 'recontext[vllm]'` (Linux, a CUDA GPU; supported vllm {SUPPORTED_VLLM})"
)
EXTENSION = "recontext_engine.readout.vllm.ReadoutWorkerExtension"
READOUTS = ("transformers", "paged")
# Options consumed here; every other keyword goes to ``vllm.LLM`` unchanged.
RUNTIME_OPTIONS = (
    "device",
    "dtype",
    "gguf_file",
    "revision",
    "readout",
    "readout_device",
    "prefill_chunk",
    "engine_args",
)
# vLLM's own default (0.9) leaves too little room for the transformers readout's copy of the model.
TRANSFORMERS_READOUT_GPU_SHARE = 0.5


# -- availability and options (pure, tested on the CPU) ------------------------------------------


def _version_tuple(version: str) -> tuple[int, int]:
    numbers = re.findall(r"\d+", version)
    return (int(numbers[0]), int(numbers[1])) if len(numbers) >= 2 else (0, 0)


def version_supported(version: str) -> bool:
    """Whether ``version`` lies in :data:`SUPPORTED_VLLM`."""
    low, high = _SUPPORTED_RANGE
    return low <= _version_tuple(version) < high


def unavailable_reason(vllm_found: bool, cuda_available: bool) -> str | None:
    """Why the vLLM backend cannot run here, or None when it can."""
    if not vllm_found:
        return f"the vLLM backend needs the `vllm` package, which is not installed: {INSTALL_HINT}"
    if not cuda_available:
        return (
            "the vLLM backend needs a CUDA GPU and none is visible (torch.cuda.is_available() is False); "
            "use backend='transformers' on this machine"
        )
    return None


def split_options(options: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(options for recontext, engine arguments for ``vllm.LLM``)."""
    ours = {k: v for k, v in options.items() if k in RUNTIME_OPTIONS}
    engine_args = dict(ours.pop("engine_args", None) or {})
    for key, value in options.items():
        if key not in RUNTIME_OPTIONS:
            engine_args[key] = value
    return ours, engine_args


def engine_arguments(
    model_path: str,
    *,
    dtype: str | None = None,
    revision: str | None = None,
    readout: str = "transformers",
    engine_args: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Keyword arguments for ``vllm.LLM``: prefix caching on, ours first, the caller's on top.

    ``tensor_parallel_size``, ``max_model_len``, ``gpu_memory_utilization``, ``enforce_eager`` and
    any other engine argument pass through unchanged.
    """
    if readout not in READOUTS:
        raise ReContextError(f"unknown readout {readout!r}; choose one of {', '.join(READOUTS)}")
    extra = dict(engine_args or {})
    for key in ("model", "tokenizer"):
        if key in extra and str(extra[key]) != str(model_path):
            raise ReContextError(f"pass the model as the first argument, not as engine argument {key!r}")
    args: dict[str, Any] = {
        "model": str(model_path),
        "tokenizer": str(model_path),
        "dtype": dtype or "auto",
        "tensor_parallel_size": 1,
        "enable_prefix_caching": True,
    }
    if revision:
        args["revision"] = revision
    if readout == "paged":
        if extra.get("worker_extension_cls", EXTENSION) != EXTENSION:
            raise ReContextError(
                "readout='paged' installs its own worker_extension_cls; it cannot be combined with another"
            )
        args["worker_extension_cls"] = EXTENSION
    else:
        args["gpu_memory_utilization"] = TRANSFORMERS_READOUT_GPU_SHARE
    args.update(extra)
    if int(args["tensor_parallel_size"]) < 1:
        raise ReContextError("tensor_parallel_size must be >= 1")
    return args


def sampling_arguments(
    config: ReplayConfig, eos_ids: Iterable[int], max_tokens: int, stop: Sequence[str] = ()
) -> dict[str, Any]:
    """Keyword arguments for ``vllm.SamplingParams``: greedy at temperature 0, else seeded sampling."""
    args: dict[str, Any] = {
        "max_tokens": max(1, int(max_tokens)),
        "stop_token_ids": sorted({int(t) for t in eos_ids}),
        "detokenize": bool(stop),  # stop strings need text; token ids alone do not
    }
    if stop:
        args["stop"] = list(stop)
    if config.temperature == 0.0:
        args["temperature"] = 0.0
    else:
        args.update(temperature=config.temperature, top_p=config.top_p, seed=config.seed)
    return args


def resolve_model_folder(model: str | None, gguf_file: str | None = None) -> tuple[str, str, str]:
    """(folder or hub id vLLM can load, display name, source), as :func:`~recontext_engine.loading.load_model`
    resolves it: the embedded model and GGUF files are converted once to a cached folder."""
    from ..errors import ModelLoadError
    from ..loading import EMBEDDED_FILE, EMBEDDED_NAME, convert_gguf, embedded_gguf

    if model is None:
        return str(convert_gguf(embedded_gguf())), EMBEDDED_NAME, f"embedded:{EMBEDDED_FILE}"
    if str(model).endswith(".gguf") or gguf_file:
        path = Path(model, gguf_file) if gguf_file else Path(model)
        if not path.is_file():
            raise ModelLoadError(f"GGUF file not found: {path}")
        return str(convert_gguf(path)), path.stem, str(path)
    if not Path(model).is_dir() and (Path(model).is_absolute() or str(model).startswith(".")):
        raise ModelLoadError(f"model folder not found: {model}")
    return str(model), str(model), str(model)


# -- the runtime ---------------------------------------------------------------------------------


@dataclass
class ModelInfo:
    """What the engine reads from ``backend.model`` (the weights themselves live in vLLM)."""

    config: Any
    generation_config: Any


@dataclass
class VLLMCache:
    """A request's context: its token ids (vLLM caches their blocks) and, for the transformers
    readout, that backend's KV cache once the first read needs it."""

    prefix_ids: list[int] = field(default_factory=list)
    readout_cache: Any = None


def create_vllm_runtime(model: str | None, **options: Any):
    """Build a :class:`~recontext_engine.backends.Runtime` on vLLM.

    Options: ``readout`` (``"transformers"`` or ``"paged"``), ``readout_device`` (where the
    transformers readout's copy of the model runs; default ``"cuda"``), ``dtype``, ``revision``,
    ``gguf_file``, ``prefill_chunk``, ``engine_args`` (a dict); any other keyword
    (``tensor_parallel_size``, ``max_model_len``, ``gpu_memory_utilization``, ...) goes to
    ``vllm.LLM``. ``device`` is ignored: vLLM places itself on its GPUs (and
    ``from_pretrained`` passes ``device="cpu"`` by default).

    Raises:
        BackendUnavailableError: vLLM is not installed or no CUDA GPU is visible.
    """
    reason = unavailable_reason(importlib.util.find_spec("vllm") is not None, torch.cuda.is_available())
    if reason:
        raise BackendUnavailableError(reason)
    try:
        import vllm
    except ImportError as exc:  # installed but broken (CUDA libraries, a torch it does not pin)
        raise BackendUnavailableError(
            f"vllm is installed but cannot be imported ({exc}); {INSTALL_HINT}"
        ) from None
    if not version_supported(getattr(vllm, "__version__", "0.0")):
        warnings.warn(
            f"vllm {vllm.__version__} is outside the supported range {SUPPORTED_VLLM}; "
            "the paged readout's hooks may not match it",
            stacklevel=2,
        )
    from transformers import AutoConfig, AutoTokenizer, GenerationConfig

    from ..backends import Runtime

    ours, engine_args = split_options(options)
    readout = ours.get("readout") or "transformers"
    folder, name, source = resolve_model_folder(model, ours.get("gguf_file"))
    args = engine_arguments(
        folder,
        dtype=ours.get("dtype"),
        revision=ours.get("revision"),
        readout=readout,
        engine_args=engine_args,
    )
    tokenizer = AutoTokenizer.from_pretrained(folder, revision=ours.get("revision"))
    readout_backend = None
    if readout == "transformers":
        from ..loading import load_model
        from .transformers import TransformersBackend

        loaded = load_model(
            folder,
            device=ours.get("readout_device") or "cuda",
            dtype=ours.get("dtype"),
            revision=ours.get("revision"),
        )
        readout_backend = TransformersBackend(loaded.model, prefill_chunk=ours.get("prefill_chunk", 1024))
        config = loaded.model.config
        generation_config = loaded.model.generation_config
    else:
        config = AutoConfig.from_pretrained(folder, revision=ours.get("revision"))
        try:
            generation_config = GenerationConfig.from_pretrained(folder, revision=ours.get("revision"))
        except OSError:
            generation_config = GenerationConfig.from_model_config(config)
    llm = vllm.LLM(**args)
    backend = VLLMBackend(
        llm,
        ModelInfo(config, generation_config),
        readout=readout,
        transformers_backend=readout_backend,
        sampling_params=vllm.SamplingParams,
    )
    return Runtime(backend, readout_backend or backend, tokenizer, config, name, source)


# -- request routing over vLLM's engine ----------------------------------------------------------


class RequestRouter:
    """Drives ``LLMEngine.add_request/step/abort_request`` for several callers at once.

    Each ``step`` advances every running request (vLLM batches them); outputs go to the inbox of
    the request they belong to, so threads that stream different requests share the engine.
    """

    def __init__(self, engine: Any, lock: threading.RLock) -> None:
        self.engine = engine
        self.lock = lock
        self._inbox: dict[str, deque] = {}

    def add(self, prompt: dict[str, Any], params: Any) -> str:
        request_id = f"recontext-{uuid.uuid4().hex}"
        with self.lock:
            self.engine.add_request(request_id, prompt, params)
            self._inbox[request_id] = deque()
        return request_id

    def _owner(self, request_id: str) -> str | None:
        if request_id in self._inbox:
            return request_id
        # some versions report the id with a suffix of their own
        return next((rid for rid in self._inbox if request_id.startswith(rid)), None)

    def _step(self) -> None:
        if not self.engine.has_unfinished_requests():
            raise RuntimeError("vLLM has no running request, yet one of ours did not finish")
        for output in self.engine.step():
            owner = self._owner(output.request_id)
            if owner is not None:
                self._inbox[owner].append(output)

    def outputs(self, request_id: str) -> Iterator[Any]:
        """The request's outputs as vLLM produces them, the last one ``finished``."""
        while True:
            with self.lock:
                box = self._inbox[request_id]
                if not box:
                    self._step()
                items = list(box)
                box.clear()
            for output in items:
                yield output
                if output.finished:
                    with self.lock:
                        self._inbox.pop(request_id, None)
                    return

    def run(self, request_ids: Sequence[str]) -> dict[str, Any]:
        """Step until all ``request_ids`` finish; their final outputs."""
        final: dict[str, Any] = {}
        with self.lock:
            while len(final) < len(request_ids):
                for rid in request_ids:
                    box = self._inbox.get(rid)
                    while box:
                        output = box.popleft()
                        if output.finished:
                            final[rid] = output
                            self._inbox.pop(rid, None)
                            break
                if len(final) < len(request_ids):
                    self._step()
        return final

    def drain(self) -> None:
        """Step until no request is running (their outputs wait in the inboxes)."""
        with self.lock:
            while self.engine.has_unfinished_requests():
                self._step()

    def abort(self, request_id: str) -> None:
        with self.lock:
            if self._inbox.pop(request_id, None) is not None:
                self.engine.abort_request([request_id])


def new_token_ids(output: Any, seen: int) -> list[int]:
    """Token ids of a ``RequestOutput`` not yet seen (outputs are cumulative by default)."""
    ids = list(output.outputs[0].token_ids)
    return ids[seen:] if len(ids) >= seen else ids


class VLLMBackend:
    """Prefill, read passes and generation for the engine, on a ``vllm.LLM``.

    ``lock`` serializes engine steps; a paged read also waits until no other request runs, so the
    worker can tell its sequence apart.
    """

    name = "vllm"

    def __init__(
        self,
        llm: Any,
        model: ModelInfo,
        *,
        readout: str = "transformers",
        transformers_backend: Any = None,
        sampling_params: Any = None,
        window: int | None = None,
    ) -> None:
        if readout not in READOUTS:
            raise ReContextError(f"unknown readout {readout!r}; choose one of {', '.join(READOUTS)}")
        if readout == "transformers" and transformers_backend is None:
            raise ReContextError("readout='transformers' needs a TransformersBackend over the same weights")
        self.llm = llm
        self.model = model
        self.readout = readout
        self.transformers_backend = transformers_backend
        self.lock = threading.RLock()
        self.router = RequestRouter(llm.llm_engine, self.lock)
        if sampling_params is None:
            from vllm import SamplingParams as sampling_params
        self._sampling_params = sampling_params
        self._window = window
        eos = getattr(model.generation_config, "eos_token_id", None)
        eos = eos if eos is not None else getattr(model.config, "eos_token_id", None)
        self.eos_ids = set(eos if isinstance(eos, list) else [eos]) - {None}
        self._installed = False

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
        self, cache: VLLMCache, prefix_len: int, suffix_ids: list[int], heads: HeadSet, cue_window: int
    ) -> torch.Tensor:
        """(len(heads), w, prefix_len + len(suffix_ids)) float32 cue rows, as the transformers backend."""
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

    def _paged_read(self, ids: list[int], heads: HeadSet, w: int) -> torch.Tensor:
        spec = {"total": len(ids), "cue_window": w, "heads": [list(pair) for pair in heads.heads]}
        params = self._sampling_params(max_tokens=1, temperature=0.0, detokenize=False)
        with self.lock:
            if not self._installed:
                self.llm.collective_rpc("recontext_install_readout")
                self._installed = True
            self.router.drain()
            problems: list[str] = []
            # A prompt seen before may hit the prefix cache up to its last token, leaving cue queries
            # uncomputed; the retry salts the cache so the whole prompt is computed again.
            for salt in (None, uuid.uuid4().hex):
                self.llm.collective_rpc("recontext_arm", args=(spec,))
                prompt: dict[str, Any] = {"prompt_token_ids": ids}
                if salt:
                    prompt["cache_salt"] = salt
                self.router.run([self.router.add(prompt, params)])
                results = self.llm.collective_rpc("recontext_collect")
                rows, problems = merge_rank_results(results, heads, w, len(ids))
                if rows is not None:
                    return rows
        raise UnsupportedModelError(
            "the paged readout captured no cue rows: "
            + "; ".join(problems)
            + " (if vLLM replays whole-model CUDA graphs here, try enforce_eager=True)"
        )

    def generate(
        self, cache: VLLMCache, suffix_ids: list[int], config: ReplayConfig, eos_ids: set[int]
    ) -> Iterator[int]:
        """Generate after ``[context; suffix]``; yields token ids as vLLM produces them."""
        ids = list(cache.prefix_ids) + list(suffix_ids)
        room = self.window - len(ids)
        if room < 1:
            raise PromptTooLongError(
                f"prompt of {len(ids)} tokens leaves no room in the model window of {self.window}"
            )
        params = self._sampling_params(
            **sampling_arguments(config, eos_ids, min(config.max_new_tokens, room))
        )
        request_id = self.router.add({"prompt_token_ids": ids}, params)
        seen, finished = 0, False
        try:
            for output in self.router.outputs(request_id):
                fresh = new_token_ids(output, seen)
                seen += len(fresh)
                for token in fresh:
                    if token in eos_ids:
                        return
                    yield token
                finished = output.finished
        finally:
            if not finished:
                self.router.abort(request_id)

    def generate_batch(
        self, prompts: Sequence[Sequence[int]], config: ReplayConfig, eos_ids: Iterable[int] | None = None
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
            args = sampling_arguments(config, eos, min(config.max_new_tokens, room), config.stop)
            request_ids.append(
                self.router.add({"prompt_token_ids": list(ids)}, self._sampling_params(**args))
            )
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


# -- inside vLLM's worker ------------------------------------------------------------------------


def split_key_cache(kv_cache: torch.Tensor, num_kv_heads: int, head_size: int) -> torch.Tensor:
    """The key half of one layer's paged cache: (num_blocks, block_size, kv_heads, head_dim).

    FlashAttention keeps ``(2, num_blocks, block_size, kv_heads, head_dim)``; FlashInfer and
    Triton keep ``(num_blocks, 2, block_size, kv_heads, head_dim)``.
    """
    if kv_cache.dim() == 5 and tuple(kv_cache.shape[-2:]) == (num_kv_heads, head_size):
        if kv_cache.shape[0] == 2:
            key_cache = kv_cache[0]
        elif kv_cache.shape[1] == 2:
            key_cache = kv_cache[:, 0]
        else:
            key_cache = None
        if key_cache is not None:
            if key_cache.dtype not in (torch.float16, torch.bfloat16, torch.float32):
                raise UnsupportedModelError(
                    f"the paged readout cannot read a {key_cache.dtype} (quantized) KV cache; "
                    "use kv_cache_dtype='auto'"
                )
            return key_cache
    raise UnsupportedModelError(
        f"unsupported paged KV layout {tuple(kv_cache.shape)} "
        f"for {num_kv_heads} key heads of size {head_size}"
    )


def layer_index(name: str) -> int | None:
    """The decoder layer number in a module name such as ``model.layers.12.self_attn.attn``."""
    match = re.search(r"(?:^|\.)(\d+)(?:\.|$)", name)
    return int(match.group(1)) if match else None


class WorkerCapture:
    """One worker's capture state: the armed read and the cue rows collected so far.

    ``observe`` is called after an attention layer ran on a batch; it finds the read's sequence
    (the only one running, see :meth:`VLLMBackend._paged_read`), scores the cue queries of this step
    (chunked prefill may spread them over steps) and stores them by position.
    """

    def __init__(self) -> None:
        self.total = 0
        self.cue_window = 0
        self.heads_by_layer: dict[int, list[int]] = {}
        self.rows: dict[tuple[int, int], torch.Tensor] = {}
        self.filled: dict[tuple[int, int], torch.Tensor] = {}
        self.error: str | None = None

    @property
    def armed(self) -> bool:
        return bool(self.heads_by_layer)

    def arm(self, spec: dict[str, Any]) -> None:
        self.total = int(spec["total"])
        self.cue_window = int(spec["cue_window"])
        self.heads_by_layer = {}
        for layer, head in spec["heads"]:
            self.heads_by_layer.setdefault(int(layer), []).append(int(head))
        self.rows, self.filled, self.error = {}, {}, None

    def observe(
        self,
        layer: int,
        head_offset: int,
        query: torch.Tensor,
        key_cache: torch.Tensor,
        query_start_loc: list[int],
        seq_lens: list[int],
        block_table: torch.Tensor,
        scaling: float,
        softcap: float | None,
        sliding_window: int | None,
    ) -> None:
        """Args: ``query`` (num_tokens, local_q_heads, head_dim) of this step; ``key_cache``
        (num_blocks, block_size, local_kv_heads, head_dim); ``block_table`` (num_reqs, max_blocks);
        ``head_offset``: global index of this worker's first query head (tensor parallelism)."""
        wanted = self.heads_by_layer.get(layer)
        if not wanted:
            return
        local_count = query.shape[1]
        local = [(g, g - head_offset) for g in wanted if head_offset <= g < head_offset + local_count]
        if not local:
            return
        total, first = self.total, self.total - self.cue_window
        matches = []
        for i in range(min(len(query_start_loc) - 1, len(seq_lens))):
            q_len = query_start_loc[i + 1] - query_start_loc[i]
            if q_len > 0 and first < seq_lens[i] <= total:
                matches.append(i)
        if len(matches) > 1:
            self.error = f"{len(matches)} sequences could be the read at layer {layer}"
            return
        if not matches:
            return
        i = matches[0]
        seq_len, q_len = seq_lens[i], query_start_loc[i + 1] - query_start_loc[i]
        lo = max(seq_len - q_len, first)
        start = query_start_loc[i] + lo - (seq_len - q_len)
        rows = paged_cue_rows(
            query[start : query_start_loc[i + 1]],
            key_cache,
            block_table[i],
            seq_len,
            torch.tensor([h for _, h in local]),
            scaling,
            softcap,
            sliding_window,
            query_positions=torch.arange(lo, seq_len),
        ).cpu()
        for j, (head, _) in enumerate(local):
            key = (layer, head)
            if key not in self.rows:
                self.rows[key] = torch.zeros(self.cue_window, total)
                self.filled[key] = torch.zeros(self.cue_window, dtype=torch.bool)
            self.rows[key][lo - first : seq_len - first, :seq_len] = rows[j]
            self.filled[key][lo - first : seq_len - first] = True

    def collect(self) -> dict[str, Any]:
        """Complete rows as ``[layer, head, float32 bytes]`` (msgpack-friendly), then disarm."""
        rows = [
            [layer, head, self.rows[(layer, head)].numpy().tobytes()]
            for (layer, head), filled in sorted(self.filled.items())
            if bool(filled.all())
        ]
        result = {"rows": rows, "error": self.error}
        self.heads_by_layer, self.rows, self.filled = {}, {}, {}
        return result


def _sliding_window(impl: Any) -> int | None:
    window = getattr(impl, "sliding_window", None)
    if isinstance(window, (tuple, list)):  # FlashAttention keeps (left, right); left = window - 1
        return int(window[0]) + 1 if window[0] is not None and window[0] >= 0 else None
    return int(window) if window else None


class ReadoutWorkerExtension:
    """Methods vLLM mixes into its GPU worker (``worker_extension_cls``), called with
    ``LLM.collective_rpc``. Arguments and results are plain lists, numbers and bytes, so they
    cross vLLM's process boundary without pickling code.

    Each decoder attention layer's ``impl.forward`` is wrapped: vLLM calls it inside its opaque
    attention op (eagerly, also under torch.compile and piecewise CUDA graphs) as
    ``forward(layer, query, key, value, kv_cache, attn_metadata, ...)``. After the original runs,
    this step's keys are in ``kv_cache``; an armed capture then scores the cue queries.
    """

    def _recontext_capture(self) -> WorkerCapture:
        state = getattr(self, "_recontext_state", None)
        if state is None:
            state = WorkerCapture()
            self._recontext_state = state
        return state

    def recontext_install_readout(self) -> list[int]:
        """Wrap every decoder attention layer once; returns the layer numbers this worker holds."""
        try:
            from vllm.distributed import get_tensor_model_parallel_rank

            rank = get_tensor_model_parallel_rank()
        except Exception:  # pragma: no cover - single process
            rank = 0
        # vLLM registers every attention layer by name here; the module tree is the fallback.
        config = getattr(self, "vllm_config", None)
        context = getattr(getattr(config, "compilation_config", None), "static_forward_context", None)
        if context:
            modules = list(context.items())
        else:
            model = self.get_model() if hasattr(self, "get_model") else self.model_runner.model
            modules = list(model.named_modules())
        return install_capture(modules, self._recontext_capture(), rank)

    def recontext_arm(self, spec: dict[str, Any]) -> None:
        self._recontext_capture().arm(spec)

    def recontext_collect(self) -> dict[str, Any]:
        return self._recontext_capture().collect()


def install_capture(modules: Iterable[tuple[str, Any]], state: WorkerCapture, rank: int = 0) -> list[int]:
    """Wrap the ``impl.forward`` of each decoder attention layer among ``(name, module)`` pairs so
    that ``state`` sees its queries and cache; idempotent. Returns the layer numbers wrapped."""
    layers = []
    for name, module in modules:
        impl = getattr(module, "impl", None)
        index = layer_index(getattr(module, "layer_name", name))
        if (
            impl is None
            or index is None
            or not hasattr(module, "num_kv_heads")
            or "MLA" in type(module).__name__
        ):
            continue
        if not getattr(impl, "_recontext_wrapped", False):
            impl.forward = _wrap_forward(impl, impl.forward, state, index, rank * int(impl.num_heads))
            impl._recontext_wrapped = True
        layers.append(index)
    if not layers:
        raise UnsupportedModelError(
            "no attention layers with a paged-KV backend were found in the vLLM model"
        )
    return sorted(set(layers))


def _wrap_forward(impl: Any, original: Any, state: WorkerCapture, index: int, head_offset: int):
    def forward(layer, query, key, value, kv_cache, attn_metadata, *args, **kwargs):
        output = original(layer, query, key, value, kv_cache, attn_metadata, *args, **kwargs)
        if state.armed and attn_metadata is not None and index in state.heads_by_layer:
            try:
                if getattr(attn_metadata, "dcp_context_kv_lens", None) is not None:
                    raise UnsupportedModelError("decode context parallelism splits the KV cache across ranks")
                num_tokens = int(attn_metadata.num_actual_tokens)
                state.observe(
                    index,
                    head_offset,
                    query[:num_tokens].reshape(num_tokens, int(impl.num_heads), -1),
                    split_key_cache(kv_cache, int(impl.num_kv_heads), int(impl.head_size)),
                    attn_metadata.query_start_loc.tolist(),
                    attn_metadata.seq_lens.tolist(),
                    attn_metadata.block_table,
                    float(impl.scale),
                    float(getattr(impl, "logits_soft_cap", 0) or 0) or None,
                    _sliding_window(impl),
                )
            except Exception as exc:  # never break vLLM's forward; the read reports it instead
                state.error = f"layer {index}: {type(exc).__name__}: {exc}"
        return output

    return forward
