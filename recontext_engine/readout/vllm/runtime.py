"""Build the vLLM runtime: check the platform, start ``vllm.LLM``, wire the readout."""

from __future__ import annotations

import importlib.util
import math
import warnings
from typing import Any

from ...errors import BackendUnavailableError
from ...protocol import Runtime
from .backend import ModelInfo, VLLMBackend
from .options import (
    DEFAULT_READOUT,
    INSTALL_HINT,
    SUPPORTED_VLLM,
    check_readout,
    engine_arguments,
    resolve_model_folder,
    split_options,
    unavailable_reason,
    version_supported,
)


def _import_vllm():
    """vLLM and the platform it runs on ("cuda", "cpu", ...), or BackendUnavailableError."""
    found = importlib.util.find_spec("vllm") is not None
    reason = unavailable_reason(found, "cuda") if not found else None
    if reason:
        raise BackendUnavailableError(reason)
    try:
        import vllm
        from vllm.platforms import current_platform
    except ImportError as exc:  # installed but broken (CUDA libraries, a torch it does not pin)
        raise BackendUnavailableError(
            f"vllm is installed but cannot be imported ({exc}); {INSTALL_HINT}"
        ) from None
    platform = getattr(current_platform, "device_type", None) or None
    reason = unavailable_reason(True, platform)
    if reason:
        raise BackendUnavailableError(reason)
    if not version_supported(getattr(vllm, "__version__", "0.0")):
        warnings.warn(
            f"vllm {vllm.__version__} is outside the supported range {SUPPORTED_VLLM}; "
            "the paged readout's hooks may not match it",
            stacklevel=3,
        )
    return vllm, platform


def serving_defaults(engine_args: dict[str, Any]) -> dict[str, Any]:
    """The scheduler's batch limits ``vllm serve`` starts with, and priority scheduling by call,
    where ``engine_args`` set none.

    ``vllm.LLM`` takes vLLM's offline defaults (on the CPU build 4096 tokens and 256 sequences a
    step, twice a server's), which suit one batch sent at once; a server's requests arrive over
    time, and the smaller step lets the earlier ones finish first, as under ``vllm serve``.
    """
    try:
        from vllm.engine.arg_utils import EngineArgs
        from vllm.usage.usage_lib import UsageContext

        sizes = (int(engine_args.get(f"{kind}_parallel_size", 1)) for kind in ("tensor", "pipeline"))
        tokens, sequences = EngineArgs.get_batch_defaults(math.prod(sizes))
        chosen = {
            "max_num_batched_tokens": tokens[UsageContext.OPENAI_API_SERVER],
            "max_num_seqs": sequences[UsageContext.OPENAI_API_SERVER],
            "scheduling_policy": "priority",  # a call's passes keep its place (VLLMBackend.new_cache)
        }
    except (ImportError, AttributeError, KeyError, TypeError):  # a vLLM without these defaults: its own
        return {}
    return {key: value for key, value in chosen.items() if key not in engine_args}


def create_vllm_runtime(model: str | None, **options: Any) -> Runtime:
    """Build a :class:`~recontext_engine.protocol.Runtime` on vLLM (its CUDA or its CPU build).

    Options: ``readout`` (``"paged"``, the default, or ``"transformers"``), ``readout_device``
    (where the transformers readout's copy of the model runs; default: where vLLM runs),
    ``dtype``, ``revision``, ``gguf_file``, ``prefill_chunk``, ``engine_args`` (a dict), ``serving``
    (``vllm serve``'s scheduler batch limits, see :func:`serving_defaults`); any other
    keyword (``tensor_parallel_size``, ``max_model_len``, ``kv_cache_memory_bytes``, ...) goes to
    ``vllm.LLM``. ``device`` is ignored: vLLM places itself.

    Raises:
        BackendUnavailableError: vLLM is not installed, cannot be imported or runs on a platform
            other than CUDA or CPU.
    """
    vllm, platform = _import_vllm()
    from transformers import AutoConfig, AutoTokenizer, GenerationConfig

    ours, engine_args = split_options(options)
    if ours.get("serving"):
        engine_args = {**serving_defaults(engine_args), **engine_args}
    readout = check_readout(ours.get("readout") or DEFAULT_READOUT)
    folder, name, source = resolve_model_folder(model, ours.get("gguf_file"))
    args = engine_arguments(
        folder,
        dtype=ours.get("dtype"),
        revision=ours.get("revision"),
        readout=readout,
        platform=platform,
        engine_args=engine_args,
    )
    tokenizer = AutoTokenizer.from_pretrained(folder, revision=ours.get("revision"))
    readout_backend = None
    if readout == "transformers":
        from ...loading import load_model
        from ..transformers import TransformersBackend

        loaded = load_model(
            folder,
            device=ours.get("readout_device") or platform,
            dtype=ours.get("dtype"),
            revision=ours.get("revision"),
        )
        readout_backend = TransformersBackend(
            loaded.model, prefill_chunk=ours.get("prefill_chunk", 1024), tokenizer=loaded.tokenizer
        )
        config, generation_config = loaded.model.config, loaded.model.generation_config
    else:
        config = AutoConfig.from_pretrained(folder, revision=ours.get("revision"))
        try:
            # the ignore: transformers annotates ``revision: str = "main"``, yet passes it on to
            # resolve_revision, for which None is the repository's default branch (not always main)
            generation_config = GenerationConfig.from_pretrained(
                folder,
                revision=ours.get("revision"),  # type: ignore[arg-type]
            )
        except OSError:
            generation_config = GenerationConfig.from_model_config(config)
    llm = vllm.LLM(**args)
    backend = VLLMBackend(
        llm,
        ModelInfo(config, generation_config, folder, ours.get("revision")),
        readout=readout,
        transformers_backend=readout_backend,
        sampling_params=vllm.SamplingParams,
    )
    return Runtime(backend, readout_backend or backend, tokenizer, config, name, source)
