"""Fixtures of the framework tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture
def recorder() -> Iterator[Any]:
    """A ``Recorder`` of every LlamaIndex instrumentation event during the test."""
    pytest.importorskip("llama_index.core")
    from llama_index.core.instrumentation import get_dispatcher

    from tests.frameworks.llamaindex_events import Recorder

    handler = Recorder(events=[])
    dispatcher = get_dispatcher()
    dispatcher.add_event_handler(handler)
    yield handler
    dispatcher.event_handlers.remove(handler)
