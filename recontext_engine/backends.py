"""Backend factory: a name (``"transformers"``, ``"vllm"``) to a ready runtime."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .errors import ReContextError


@dataclass
class Runtime:
    backend: Any  # prefill / read / generate / window
    readout: Any  # the backend used for head detection (transformers even under vLLM)
    tokenizer: Any
    config: Any  # the transformers model config
    name: str
    source: str


def create_backend(name: str, model: str | None, **options: Any) -> Runtime:
    if name == "transformers":
        from .loading import load_model
        from .readout.transformers import TransformersBackend

        prefill_chunk = options.pop("prefill_chunk", 1024)
        progress = options.pop("progress", False)
        options["device"] = options.get("device") or "cpu"
        loaded = load_model(model, **options)
        backend = TransformersBackend(loaded.model, prefill_chunk=prefill_chunk, progress=progress)
        return Runtime(backend, backend, loaded.tokenizer, loaded.model.config, loaded.name, loaded.source)
    if name == "vllm":
        from .readout.vllm import create_vllm_runtime

        options.pop("progress", None)  # vLLM draws its own progress bars
        return create_vllm_runtime(model, **options)
    raise ReContextError(f"unknown backend {name!r}; choose 'transformers' or 'vllm'")
