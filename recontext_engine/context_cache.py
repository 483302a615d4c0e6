"""The KV caches of the last prompt prefixes, so that the next call on the same context skips its prefill.

A request takes the entry whose token ids share the longest start with its own prefix (at least half
of the entry: a shared chat-template start alone does not count), cropped to what they share, and
prefills only the rest; when the request is done its cache, cropped back to its prefix, goes in again.
Taking removes the entry, so two requests never write into one cache: a concurrent call on the same
context prefills its own. Several questions on one document, or a chat whose history only grows, then
pay the prefill of the new tokens only, as with vLLM's prefix cache.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .reads import common_start


@dataclass
class CachedPrefix:
    """A taken entry: a backend KV cache holding the first ``shared`` tokens of the new prefix."""

    cache: Any
    shared: int


class ContextCache:
    """A small thread-safe store of prefix KV caches, the most recently used last.

    ``crop(cache, length)`` is the backend's: it keeps the first ``length`` cached positions.
    """

    def __init__(self, crop: Any, max_entries: int = 1) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be >= 1, got {max_entries}")
        self.crop = crop
        self.max_entries = max_entries
        self._entries: list[tuple[tuple[int, ...], Any]] = []
        self._lock = threading.Lock()

    def take(self, ids: Sequence[int]) -> CachedPrefix | None:
        """Remove and return the entry sharing the longest start with ``ids``, cropped to it
        (None when no entry shares at least half of its tokens)."""
        with self._lock:
            best, best_shared = -1, 0
            for i, (entry_ids, _) in enumerate(self._entries):
                shared = common_start([entry_ids, ids], leave=0)
                if 2 * shared >= len(entry_ids) and shared > best_shared:
                    best, best_shared = i, shared
            if best < 0:
                return None
            _, cache = self._entries.pop(best)
        self.crop(cache, best_shared)
        return CachedPrefix(cache, best_shared)

    def put(self, ids: Sequence[int], cache: Any) -> None:
        """Keep ``cache`` (cropped to ``len(ids)`` positions) as the KV of ``ids``, evicting the oldest."""
        if not ids:
            return
        self.crop(cache, len(ids))
        key = tuple(ids)
        with self._lock:
            self._entries = [entry for entry in self._entries if entry[0] != key]
            self._entries.append((key, cache))
            del self._entries[: -self.max_entries]

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)
