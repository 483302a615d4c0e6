"""The langchain-tests standard suites for ChatReContext (unit: no model; integration: embedded model)."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("langchain_tests")

from langchain_tests.integration_tests import ChatModelIntegrationTests  # noqa: E402
from langchain_tests.unit_tests import ChatModelUnitTests  # noqa: E402

from recontext_integrations.langchain import ChatReContext  # noqa: E402


class TestChatReContextUnit(ChatModelUnitTests):
    @property
    def chat_model_class(self) -> type[ChatReContext]:
        return ChatReContext


@pytest.mark.model
class TestChatReContextIntegration(ChatModelIntegrationTests):
    shared_engine: Any = None

    @pytest.fixture(autouse=True)
    def _inject_engine(self, engine: Any) -> None:
        # autouse fixtures run before the suite's `model` fixture reads chat_model_params
        type(self).shared_engine = engine

    @property
    def chat_model_class(self) -> type[ChatReContext]:
        return ChatReContext

    @property
    def chat_model_params(self) -> dict[str, Any]:
        return {"engine": self.shared_engine, "max_tokens": 16}

    @property
    def supports_model_override(self) -> bool:
        return False  # one local model per instance; a per-call `model` other than it is an error
