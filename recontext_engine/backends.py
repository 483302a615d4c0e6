"""Backend factory: a name (``"transformers"``, ``"vllm"``, or a registered one) to a ready runtime.

The contract and the registry live in :mod:`recontext_engine.protocol`; this module keeps the
names importable from where they always were and builds the transformers runtime.
"""

from __future__ import annotations

from typing import Any

from .protocol import Runtime, backend_factory, register_backend

__all__ = ["Runtime", "create_backend", "create_transformers_runtime", "register_backend"]


def create_transformers_runtime(model: str | None, **options: Any) -> Runtime:
    """The transformers backend: ``device`` defaults to ``"cpu"``; ``prefill_chunk`` tokens a chunk;
    ``progress`` draws a progress bar over long prefills."""
    from .loading import load_model
    from .readout.transformers import TransformersBackend

    prefill_chunk = options.pop("prefill_chunk", 1024)
    progress = options.pop("progress", False)
    options["device"] = options.get("device") or "cpu"
    loaded = load_model(model, **options)
    backend = TransformersBackend(
        loaded.model, prefill_chunk=prefill_chunk, progress=progress, tokenizer=loaded.tokenizer
    )
    return Runtime(backend, backend, loaded.tokenizer, loaded.model.config, loaded.name, loaded.source)


def create_backend(name: str, model: str | None, **options: Any) -> Runtime:
    """The runtime of backend ``name`` for ``model``; options go to that backend's factory."""
    return backend_factory(name)(model, **options)
