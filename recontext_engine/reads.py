"""Read passes of one selection round: tokens the passes share are read once, and rows that depend
only on the context (round 1's null question) are kept for the next question on the same context.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import torch

from .heads.headset import HeadSet


def rows_key(prefix_ids: Sequence[int], suffix_ids: Sequence[int], heads: HeadSet, cue_window: int) -> str:
    """A digest of everything a read pass depends on, for one model."""
    digest = hashlib.blake2b(digest_size=16)
    for part in (prefix_ids, [-1], suffix_ids, [-1, cue_window], [x for pair in heads.heads for x in pair]):
        digest.update(torch.tensor(list(part), dtype=torch.int64).numpy().tobytes())
    return digest.hexdigest()


class RowCache:
    """A small thread-safe LRU of attention rows by :func:`rows_key`."""

    def __init__(self, max_entries: int = 8) -> None:
        self.max_entries = max_entries
        self._items: OrderedDict[str, torch.Tensor] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> torch.Tensor | None:
        with self._lock:
            rows = self._items.get(key)
            if rows is not None:
                self._items.move_to_end(key)
            return rows

    def put(self, key: str, rows: torch.Tensor) -> None:
        with self._lock:
            self._items[key] = rows
            self._items.move_to_end(key)
            while len(self._items) > self.max_entries:
                self._items.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()

    def __len__(self) -> int:
        return len(self._items)


def common_start(sequences: Sequence[Sequence[int]], leave: int = 1) -> int:
    """Length of the longest common start of ``sequences``, leaving each at least ``leave`` ids of its own."""
    limit = min(len(s) for s in sequences) - leave
    n = 0
    while n < limit and all(s[n] == sequences[0][n] for s in sequences):
        n += 1
    return n


def read_rows(
    backend: Any,
    cache: Any,
    prefix_ids: Sequence[int],
    suffixes: Sequence[list[int]],
    heads: HeadSet,
    cue_window: int,
    row_cache: RowCache | None = None,
    cacheable: Sequence[bool] = (),
    *,
    cached: int = 0,
    keep: bool = False,
) -> list[torch.Tensor]:
    """Rows of ``backend.read(cache, len(prefix_ids), s, heads, cue_window)`` for each suffix ``s``.

    Suffixes marked ``cacheable`` come from ``row_cache`` when they are there (and go into it when
    not). The others are read in one pass over their common start where the backend offers
    ``read_branches``, else one after another with ``read``. ``cache`` may already hold the first
    ``cached`` tokens of every suffix after the prefix (they are not read again); with ``keep`` it
    holds ``[prefix; suffixes[0]]`` afterwards (backends with ``crop`` only).
    """
    prefix_len = len(prefix_ids) + cached
    keys = [
        rows_key(prefix_ids, s, heads, cue_window) if row_cache is not None and may_cache else None
        for s, may_cache in zip(suffixes, list(cacheable) + [False] * (len(suffixes) - len(cacheable)))
    ]
    rows: list[torch.Tensor | None] = [row_cache.get(k) if k else None for k in keys]  # type: ignore[union-attr]
    todo = [i for i, r in enumerate(rows) if r is None]
    if not todo:
        return rows  # type: ignore[return-value]
    # only the first suffix (the question's) is ever kept; the engine never caches its rows
    options = {"keep": True} if keep and todo[:1] == [0] else {}
    tails = [suffixes[i][cached:] for i in todo]
    if len(todo) > 1 and hasattr(backend, "read_branches"):
        shared = common_start(tails)
        fresh = backend.read_branches(
            cache, prefix_len, tails[0][:shared], [t[shared:] for t in tails], heads, cue_window, **options
        )
    else:
        # the kept suffix is read last, so that it stays in the cache
        later = [backend.read(cache, prefix_len, t, heads, cue_window) for t in tails[1:]]
        fresh = [backend.read(cache, prefix_len, tails[0], heads, cue_window, **options), *later]
    for i, r in zip(todo, fresh):
        rows[i] = r
        if keys[i]:
            row_cache.put(keys[i], r)  # type: ignore[union-attr]
    return rows  # type: ignore[return-value]


class SeparateReads:
    """A view of a backend without ``read_branches``: every read pass is its own forward.

    The engine then reads the question and the null question one after the other, as it does on
    backends that cannot share a pass; the overhead script and the tests compare both paths with it.
    """

    def __init__(self, backend: Any) -> None:
        self._backend = backend

    def __getattr__(self, name: str) -> Any:
        if name == "read_branches":
            raise AttributeError(name)
        return getattr(self._backend, name)
