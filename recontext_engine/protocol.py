"""The backend contract and the name -> factory registry (a leaf module: it imports no backend).

A backend runs the model for the engine: it keeps a request's context (``prefill``), reads the cue
attention rows of the selected heads (``read``) and generates (``generate``). Optional: ``read_branches``
(several suffixes over one shared start in one pass), ``crop(cache, length)`` together with
``read(..., keep=True)`` (the read's tokens stay in the cache, so the generation goes on from them), and
``input_embeddings()`` (the model's (vocab, dim) input embeddings, for ``ReplayConfig.semantic_weight``;
without it selection runs without the semantic signal).
Factories are registered as ``"module:function"`` strings, so a backend's dependencies (vLLM, say)
are imported only when it is chosen.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import torch

from .config import ReplayConfig
from .errors import ReContextError
from .heads.headset import HeadSet


@runtime_checkable
class Backend(Protocol):
    """What :class:`~recontext_engine.engine.ReContextEngine` needs from a backend."""

    name: str
    eos_ids: set[int]  # optional: the engine falls back to the tokenizer's end token

    @property
    def window(self) -> int:
        """The model window in tokens (prompt plus generation)."""
        ...

    def new_cache(self) -> Any:
        """An empty per-request cache."""
        ...

    def prefill(self, ids: list[int], cache: Any = None) -> Any:
        """Take the context ``ids`` into ``cache`` (a new one when None) and return it."""
        ...

    def read(
        self, cache: Any, prefix_len: int, suffix_ids: list[int], heads: HeadSet, cue_window: int
    ) -> torch.Tensor:
        """(len(heads), w, prefix_len + len(suffix_ids)) float32 softmax rows of the last ``w`` tokens
        over every key, ``w = min(cue_window, len(suffix_ids))``; ``cache`` keeps ``prefix_len``."""
        ...

    def generate(
        self, cache: Any, suffix_ids: list[int], config: ReplayConfig, eos_ids: set[int]
    ) -> Iterator[int]:
        """Token ids generated after ``[cache; suffix_ids]``, end tokens excluded."""
        ...


@runtime_checkable
class BatchBackend(Backend, Protocol):
    """A backend that also generates for many prompts in one batch (used by ``answer_batch``)."""

    def generate_batch(
        self, prompts: Sequence[Sequence[int]], config: ReplayConfig, eos_ids: Iterable[int] | None = None
    ) -> list[list[int]]: ...


@dataclass
class Runtime:
    """A ready backend with what the engine needs around it."""

    backend: Backend
    readout: Backend  # the backend head detection reads (transformers, or vLLM's paged readout)
    tokenizer: Any
    config: Any  # the transformers model config
    name: str
    source: str


Factory = Callable[..., Runtime]  # factory(model: str | None, **options) -> Runtime

_REGISTRY: dict[str, str | Factory] = {
    "transformers": "recontext_engine.backends:create_transformers_runtime",
    "vllm": "recontext_engine.readout.vllm.runtime:create_vllm_runtime",
}


def register_backend(name: str, factory: str | Factory, *, replace: bool = False) -> None:
    """Add a backend: ``factory`` is a callable or a lazy ``"module:function"`` string."""
    if name in _REGISTRY and not replace:
        raise ReContextError(f"backend {name!r} is already registered")
    _REGISTRY[name] = factory


def backend_names() -> tuple[str, ...]:
    return tuple(_REGISTRY)


def backend_factory(name: str) -> Factory:
    """The factory registered under ``name``, imported on first use."""
    if name not in _REGISTRY:
        raise ReContextError(f"unknown backend {name!r}; choose one of {', '.join(map(repr, _REGISTRY))}")
    factory = _REGISTRY[name]
    if isinstance(factory, str):
        module, _, attribute = factory.partition(":")
        factory = getattr(importlib.import_module(module), attribute)
        _REGISTRY[name] = factory
    return factory
