"""The synchronous engine in worker threads, its pieces handed to the event loop, with cancellation.

The engine is shared: the transformers backend holds one lock per model call (prefill chunk,
read pass, decoded token), so requests in different threads interleave step by step; the vLLM
backend batches their steps in its engine. A request whose client goes away is cancelled: its
worker closes the :class:`~recontext_engine.ReplayStream` at the next generated piece, which
ends its generation (and aborts the vLLM request).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field, fields
from typing import Any

from ..engine import ReplayStream
from ..results import ReplayResult

_END = object()
POLL_SECONDS = 0.25  # how often a waiting request checks that its client is still there


class ClientGone(Exception):
    """The client disconnected; its generation was cancelled."""


@dataclass
class Failure:
    error: BaseException


@dataclass
class ServerStats:
    """Request counts, reported by ``GET /health`` (thread-safe)."""

    active: int = 0
    completed: int = 0
    cancelled: int = 0
    failed: int = 0
    generated_pieces: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def count(self, **changes: int) -> None:
        with self._lock:
            for name, delta in changes.items():
                setattr(self, name, getattr(self, name) + delta)

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return {f.name: getattr(self, f.name) for f in fields(self) if not f.name.startswith("_")}


class ThreadedStream:
    """Runs ``start()`` and iterates its stream in ``executor``; ``pieces()`` yields text pieces.

    Call within a running event loop. ``result`` is set once the stream is exhausted.
    """

    def __init__(self, start: Callable[[], ReplayStream], executor: Executor, stats: ServerStats) -> None:
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._cancel = threading.Event()
        self._stats = stats
        self._done = False
        self.result: ReplayResult | None = None
        stats.count(active=1)
        self._future = self._loop.run_in_executor(executor, self._work, start)

    def _put(self, item: Any) -> None:
        try:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, item)
        except RuntimeError:  # the loop has closed (server shutdown)
            self._cancel.set()

    def _work(self, start: Callable[[], ReplayStream]) -> None:
        outcome = "failed"
        try:
            stream = start()
            try:
                for piece in stream:
                    if self._cancel.is_set():
                        outcome = "cancelled"
                        return
                    self._stats.count(generated_pieces=1)
                    self._put(piece)
            finally:
                stream.close()  # ends the engine's generation if it was not exhausted
            self.result = stream.result
            outcome = "completed"
            self._put(_END)
        except BaseException as exc:  # handed to the event loop, which answers with an error object
            self._put(Failure(exc))
        finally:
            self._stats.count(active=-1, **{outcome: 1})

    def cancel(self) -> None:
        self._cancel.set()

    async def pieces(self, disconnected: Callable[[], Awaitable[bool]] | None = None) -> AsyncIterator[str]:
        """Text pieces as they come; raises the engine's error, or :class:`ClientGone`.

        Leaving the iteration early (the consumer stopped, or the client went away) cancels the work.
        """
        getter: asyncio.Future[Any] | None = None
        try:
            while True:
                # asyncio.wait leaves the getter running on timeout, so no piece is lost.
                getter = getter or asyncio.ensure_future(self._queue.get())
                done, _ = await asyncio.wait({getter}, timeout=POLL_SECONDS)
                if not done:
                    if disconnected is not None and await disconnected():
                        raise ClientGone
                    continue
                item, getter = getter.result(), None
                if item is _END:
                    self._done = True
                    return
                if isinstance(item, Failure):
                    self._done = True
                    raise item.error
                yield item
        finally:
            if getter is not None:
                getter.cancel()
            if not self._done:
                self.cancel()


async def run_in_worker(function: Callable[[], Any], executor: Executor) -> Any:
    """``function()`` in a worker thread (for calls that do not stream)."""
    return await asyncio.get_running_loop().run_in_executor(executor, function)
