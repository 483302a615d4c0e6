"""Request routing over vLLM's ``LLMEngine``: several callers stream through one engine."""

from __future__ import annotations

import threading
import uuid
from collections import deque
from collections.abc import Iterator, Sequence
from typing import Any


class RequestRouter:
    """Drives ``LLMEngine.add_request/step/abort_request`` for several callers at once.

    Each ``step`` advances every running request (vLLM batches them); outputs go to the inbox of
    the request they belong to, so threads that stream different requests share the engine.
    """

    def __init__(self, engine: Any, lock: threading.RLock) -> None:
        self.engine = engine
        self.lock = lock
        self._inbox: dict[str, deque] = {}

    @staticmethod
    def new_id() -> str:
        return f"recontext-{uuid.uuid4().hex}"

    def add(
        self, prompt: dict[str, Any], params: Any, request_id: str | None = None, priority: int = 0
    ) -> str:
        """Add a request (``priority``: lower runs first, under vLLM's ``scheduling_policy="priority"``)."""
        request_id = request_id or self.new_id()
        with self.lock:
            self.engine.add_request(
                request_id, prompt, params, **({"priority": priority} if priority else {})
            )
            self._inbox[request_id] = deque()
        return request_id

    def _owner(self, request_id: str) -> str | None:
        if request_id in self._inbox:
            return request_id
        # some versions report the id with a suffix of their own
        return next((rid for rid in self._inbox if request_id.startswith(rid)), None)

    def _step(self) -> None:
        if not self.engine.has_unfinished_requests():
            raise RuntimeError("vLLM has no running request, yet one of ours did not finish")
        for output in self.engine.step():
            owner = self._owner(output.request_id)
            if owner is not None:
                self._inbox[owner].append(output)

    def outputs(self, request_id: str) -> Iterator[Any]:
        """The request's outputs as vLLM produces them, the last one ``finished``."""
        while True:
            with self.lock:
                box = self._inbox[request_id]
                if not box:
                    self._step()
                items = list(box)
                box.clear()
            for output in items:
                yield output
                if output.finished:
                    with self.lock:
                        self._inbox.pop(request_id, None)
                    return

    def run(self, request_ids: Sequence[str]) -> dict[str, Any]:
        """Step until all ``request_ids`` finish; their final outputs. The lock is held one step at a
        time, so other callers add requests in between and vLLM batches them with these."""
        final: dict[str, Any] = {}
        while len(final) < len(request_ids):
            with self.lock:
                for rid in request_ids:
                    box = self._inbox.get(rid)
                    while box:
                        output = box.popleft()
                        if output.finished:
                            final[rid] = output
                            self._inbox.pop(rid, None)
                            break
                if len(final) < len(request_ids):
                    self._step()
        return final

    def drain(self) -> None:
        """Step until no request is running (their outputs wait in the inboxes)."""
        with self.lock:
            while self.engine.has_unfinished_requests():
                self._step()

    def abort(self, request_id: str) -> None:
        with self.lock:
            if self._inbox.pop(request_id, None) is not None:
                self.engine.abort_request([request_id])


def new_token_ids(output: Any, seen: int) -> list[int]:
    """Token ids of a ``RequestOutput`` not yet seen (outputs are cumulative by default)."""
    ids = list(output.outputs[0].token_ids)
    return ids[seen:] if len(ids) >= seen else ids
