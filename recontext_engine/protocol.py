"""The backend contract (:class:`Backend`) and the name -> factory registry (a leaf module: it
imports no backend).

A backend runs the model for the engine: it keeps a request's context (``prefill``), reads the cue
attention rows of the selected heads (``read``) and generates (``generate``). The rest has defaults a
backend overrides where it can do better: ``read_branches`` (several suffixes over one shared start,
by default one ``read`` each), ``crop`` with ``can_crop`` (a read's tokens stay in the cache with
``read(..., keep=True)``, so the generation goes on from them), ``generate_batch`` with
``batches``, ``input_embeddings`` (for the embedding signal), ``eos_ids`` and ``admit`` (a call's
place among concurrent calls).
Factories are registered as ``"module:function"`` strings, so a backend's dependencies (vLLM, say)
are imported only when it is chosen.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from .errors import ReContextError
from .heads.headset import HeadSet

if TYPE_CHECKING:
    from .config import GenerationConfig


class Backend(ABC):
    """What :class:`~recontext_engine.engine.ReContextEngine` needs from a backend."""

    name: str = ""
    can_crop: bool = False
    """Whether :meth:`crop` works and ``read(..., keep=True)`` leaves the read tokens in the cache."""
    batches: bool = False
    """Whether :meth:`generate_batch` runs many prompts as one batch (else the engine goes one by one)."""

    @property
    @abstractmethod
    def window(self) -> int:
        """The model window in tokens (prompt plus generation)."""

    @abstractmethod
    def new_cache(self) -> Any:
        """An empty per-request cache."""

    @abstractmethod
    def prefill(self, ids: list[int], cache: Any = None) -> Any:
        """Take the context ``ids`` into ``cache`` (a new one when None) and return it."""

    @abstractmethod
    def read(
        self,
        cache: Any,
        prefix_len: int,
        suffix_ids: list[int],
        heads: HeadSet,
        cue_window: int,
        keep: bool = False,
    ) -> torch.Tensor:
        """(len(heads), w, prefix_len + len(suffix_ids)) float32 softmax rows of the last ``w`` tokens
        over every key, ``w = min(cue_window, len(suffix_ids))``; ``cache`` keeps ``prefix_len``
        (with ``keep`` and :attr:`can_crop`: ``prefix_len + len(suffix_ids)``)."""

    @abstractmethod
    def generate(
        self, cache: Any, suffix_ids: list[int], generation: GenerationConfig, eos_ids: set[int]
    ) -> Iterator[int]:
        """Token ids generated after ``[cache; suffix_ids]``, end tokens excluded."""

    def read_branches(
        self,
        cache: Any,
        prefix_len: int,
        shared_ids: list[int],
        branches: list[list[int]],
        heads: HeadSet,
        cue_window: int,
        keep: bool = False,
    ) -> list[torch.Tensor]:
        """``[read(cache, prefix_len, shared_ids + b, heads, cue_window) for b in branches]``; with
        ``keep`` the first branch stays in the cache. This default reads one after another."""
        later = [self.read(cache, prefix_len, shared_ids + b, heads, cue_window) for b in branches[1:]]
        # the kept branch is read last, so that it stays in the cache
        return [self.read(cache, prefix_len, shared_ids + branches[0], heads, cue_window, keep), *later]

    def cached_tokens(self, cache: Any) -> int | None:
        """Prompt tokens the backend's own prefix cache served to the request of ``cache`` (None:
        it keeps no such cache; the engine's context cache counts them)."""
        return None

    def admit(self, tokens: int) -> AbstractContextManager[None]:
        """Held by the engine around a call's read passes and generation, which take about ``tokens``
        tokens of KV; a backend that serves concurrent calls may make it wait for room. This default
        admits at once."""
        return nullcontext()

    def close(self) -> None:
        """Release what the backend runs outside this process (vLLM's engine core and workers); this
        default holds nothing."""
        return None

    def crop(self, cache: Any, length: int) -> None:
        """Keep the first ``length`` cached positions (backends with :attr:`can_crop`)."""
        raise NotImplementedError(f"the {self.name} backend cannot crop its cache")

    def generate_batch(
        self,
        prompts: Sequence[Sequence[int]],
        generation: GenerationConfig,
        eos_ids: Iterable[int] | None = None,
    ) -> list[list[int]]:
        """Continuations of many prompts in one batch (backends with :attr:`batches`)."""
        raise NotImplementedError(f"the {self.name} backend does not batch")

    def input_embeddings(self) -> torch.Tensor | None:
        """The model's (vocab, dim) input embeddings, for the embedding signal; None: not available."""
        return None

    @property
    def eos_ids(self) -> set[int]:
        """End-of-sequence token ids; empty: the engine uses the tokenizer's end token."""
        return set()


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
