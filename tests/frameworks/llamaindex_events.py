"""A LlamaIndex instrumentation recorder for tests: every event, in order (the ``recorder`` fixture of
``tests/frameworks/conftest.py`` registers one with the root dispatcher for a test)."""

from __future__ import annotations

from typing import Any

from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.instrumentation.events.llm import LLMChatEndEvent


class Recorder(BaseEventHandler):
    """Every instrumentation event, in order."""

    events: list = []

    @classmethod
    def class_name(cls) -> str:
        return "Recorder"

    def handle(self, event: Any, **kwargs: Any) -> None:
        self.events.append(event)

    def responses(self) -> list[Any]:
        return [e.response for e in self.events if isinstance(e, LLMChatEndEvent)]
