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
from collections.abc import AsyncGenerator, Awaitable, Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field, fields
from typing import Any

from ..engine import ReplayStream
from ..results import ReplayResult

_END = object()
POLL_SECONDS = 0.25  # how often a request checks that its client is still there


class Cancelled(Exception):
    """The request was cancelled: its client went away, or the server is shutting down."""


@dataclass
class Failure:
    error: BaseException


@dataclass
class RequestTracker:
    """Request counts, reported by ``GET /health``, and the cancel flags of running requests (thread-safe)."""

    active: int = 0
    completed: int = 0
    cancelled: int = 0
    failed: int = 0
    generated_pieces: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _running: set[threading.Event] = field(default_factory=set, repr=False)

    def count(self, **changes: int) -> None:
        with self._lock:
            for name, delta in changes.items():
                setattr(self, name, getattr(self, name) + delta)

    def started(self, cancel: threading.Event) -> None:
        with self._lock:
            self.active += 1
            self._running.add(cancel)

    def finished(self, cancel: threading.Event, outcome: str) -> None:
        with self._lock:
            self.active -= 1
            setattr(self, outcome, getattr(self, outcome) + 1)
            self._running.discard(cancel)

    def cancel_all(self) -> None:
        """At shutdown: every running request stops at its next step."""
        with self._lock:
            for cancel in self._running:
                cancel.set()

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return {f.name: getattr(self, f.name) for f in fields(self) if not f.name.startswith("_")}


class ThreadedStream:
    """Runs ``start()`` and iterates its stream in ``executor``; ``pieces()`` yields text pieces.

    Call within a running event loop. ``result`` is set once the stream is exhausted.
    """

    def __init__(
        self, start: Callable[[], ReplayStream], executor: Executor, tracker: RequestTracker
    ) -> None:
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._cancel = threading.Event()
        self._tracker = tracker
        self._done = False
        self.result: ReplayResult | None = None
        tracker.started(self._cancel)
        self._future = self._loop.run_in_executor(executor, self._work, start)

    def _put(self, item: Any) -> None:
        try:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, item)
        except RuntimeError:  # the loop has closed (server shutdown)
            self._cancel.set()

    def _work(self, start: Callable[[], ReplayStream]) -> None:
        outcome = "failed"
        try:
            if self._cancel.is_set():  # the client left while the request waited for a worker
                outcome = "cancelled"
                self._put(Failure(Cancelled()))
                return
            stream = start()
            try:
                # Checked before each step: a client gone during prefill skips selection too.
                while not self._cancel.is_set():
                    piece = next(stream, None)
                    if piece is None:
                        break
                    self._tracker.count(generated_pieces=1)
                    self._put(piece)
                else:
                    outcome = "cancelled"
                    self._put(Failure(Cancelled()))  # a consumer still waiting ends too
                    return
            finally:
                stream.close()  # ends the engine's generation if it was not exhausted
            self.result = stream.result
            outcome = "completed"
            self._put(_END)
        except BaseException as exc:  # handed to the event loop, which answers with an error object
            self._put(Failure(exc))
        finally:
            self._tracker.finished(self._cancel, outcome)

    def cancel(self) -> None:
        self._cancel.set()

    async def pieces(
        self, disconnected: Callable[[], Awaitable[bool]] | None = None
    ) -> AsyncGenerator[str, None]:
        """Text pieces as they come; raises the engine's error, or :class:`Cancelled`.

        Leaving the iteration early (the consumer stopped, or the client went away) cancels the work.
        """
        getter: asyncio.Future[Any] | None = None
        loop = asyncio.get_running_loop()
        checked = loop.time()
        try:
            while True:
                # asyncio.wait leaves the getter running on timeout, so no piece is lost.
                getter = getter or asyncio.ensure_future(self._queue.get())
                done, _ = await asyncio.wait({getter}, timeout=POLL_SECONDS)
                # Checked on a clock, not only when pieces stall: a fast generation never stalls.
                if disconnected is not None and loop.time() - checked >= POLL_SECONDS:
                    checked = loop.time()
                    if await disconnected():
                        raise Cancelled
                if not done:
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


async def run_tracked(
    function: Callable[[], Any],
    executor: Executor,
    tracker: RequestTracker,
    disconnected: Callable[[], Awaitable[bool]] | None = None,
) -> Any:
    """``function()`` in a worker thread (a call that does not stream), counted by ``tracker``.

    Raises :class:`Cancelled` when the client goes away or the server shuts down first: a call
    still queued is skipped; a running one cannot be interrupted, so it finishes and its result is
    dropped (counted cancelled).
    """
    cancel = threading.Event()
    tracker.started(cancel)

    def work() -> Any:
        outcome = "failed"
        try:
            if cancel.is_set():
                outcome = "cancelled"
                raise Cancelled
            result = function()
            outcome = "cancelled" if cancel.is_set() else "completed"
            return result
        finally:
            tracker.finished(cancel, outcome)

    future = asyncio.get_running_loop().run_in_executor(executor, work)
    try:
        while not future.done():
            await asyncio.wait({future}, timeout=POLL_SECONDS)
            if not future.done() and disconnected is not None and await disconnected():
                raise Cancelled
        if cancel.is_set():  # set by tracker.cancel_all() while the call ran
            raise Cancelled
        return future.result()
    finally:
        if not future.done():
            cancel.set()
            # Nobody awaits it now: retrieve its outcome, so asyncio does not log it as lost.
            future.add_done_callback(lambda done: done.cancelled() or done.exception())
