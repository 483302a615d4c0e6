"""Admission of calls by KV room: as many calls run at once as vLLM's KV cache holds together.

A ReContext call is several vLLM requests over one context (read passes, then the generation), which
find the context's blocks in vLLM's prefix cache only while nothing evicted them in between. Under
load (16 calls over 4K-token contexts in a 23K-token cache) new calls' first passes evicted the
contexts of calls still running, and each of their passes computed the context again. Calls admitted
only while their contexts fit together keep their blocks until they end; the others wait, first come
first served, before their first pass (as ``vllm serve`` keeps requests waiting that do not fit).

Room is kept for one more call besides: vLLM evicts cached blocks least recently used first, and the
blocks of a call that just ended are newer than those of a call between two of its passes, so the next
call's first pass must find room in blocks older than both. Measured (4K-token calls, 16 clients, a 23K-
token cache): admitting while the calls fit exactly (5 at once) left R=2 at 0.69x `vllm serve`'s
throughput; before admission it was 0.35x.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager


class KVAdmission:
    """Admits a call of ``tokens`` while ``held + 2 * tokens <= capacity``: room for it, and for the
    next call's first pass without evicting it (see the module's docstring).

    A call larger than half of ``capacity`` is admitted once nothing else runs; ``capacity=None``
    admits every call at once. Admission is not re-entrant: a call must not start another call of the
    same engine before it ends (it would wait for room it holds itself).
    """

    def __init__(self, capacity: int | None) -> None:
        self.capacity = capacity
        self.held = 0  # KV tokens held by the admitted calls
        self.running = 0  # admitted calls
        self._line: deque[object] = deque()
        self._changed = threading.Condition()

    @property
    def waiting(self) -> int:
        """Calls waiting for room."""
        with self._changed:
            return len(self._line)

    def _fits(self, ticket: object, tokens: int) -> bool:
        assert self.capacity is not None
        return self._line[0] is ticket and (self.running == 0 or self.held + 2 * tokens <= self.capacity)

    @contextmanager
    def admitted(self, tokens: int) -> Iterator[None]:
        """Hold ``tokens`` of KV room for the body; waits in line until they fit."""
        if self.capacity is None:
            yield
            return
        ticket = object()
        with self._changed:
            self._line.append(ticket)
            try:
                self._changed.wait_for(lambda: self._fits(ticket, tokens))
            finally:
                self._line.remove(ticket)
                self._changed.notify_all()  # the next in line may fit now, or move up after an error
            self.held += tokens
            self.running += 1
        try:
            yield
        finally:
            with self._changed:
                self.held -= tokens
                self.running -= 1
                self._changed.notify_all()
