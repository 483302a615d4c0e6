"""The langchain-tests standard suites for ChatReContext (unit: no model; integration: embedded model)."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("langchain_tests")

from langchain_tests.integration_tests import ChatModelIntegrationTests  # noqa: E402
from langchain_tests.unit_tests import ChatModelUnitTests  # noqa: E402

from recontext_integrations.langchain import ChatReContext  # noqa: E402


class ReContextSuiteSettings:
    """What both suites must know about ChatReContext."""

    @property
    def chat_model_class(self) -> type[ChatReContext]:
        return ChatReContext

    @property
    def standard_chat_model_params(self) -> dict[str, Any]:
        # The suites pass an API client's settings, which a local model refuses: it sends no
        # request to time out or retry, and needs no API key.
        params = dict(super().standard_chat_model_params)  # type: ignore[misc]
        for name in ("timeout", "max_retries", "api_key"):
            params.pop(name, None)
        return params

    # bind_tools and with_structured_output are overridden only to raise a clear error; the
    # suites would read the overrides as support.
    @property
    def has_tool_calling(self) -> bool:
        return False

    @property
    def has_tool_choice(self) -> bool:
        return False

    @property
    def has_structured_output(self) -> bool:
        return False


class TestChatReContextUnit(ReContextSuiteSettings, ChatModelUnitTests):
    pass


@pytest.mark.model
class TestChatReContextIntegration(ReContextSuiteSettings, ChatModelIntegrationTests):
    shared_engine: Any = None

    @pytest.fixture(autouse=True)
    def _inject_engine(self, engine: Any) -> None:
        # autouse fixtures run before the suite's `model` fixture reads chat_model_params
        type(self).shared_engine = engine

    @property
    def chat_model_params(self) -> dict[str, Any]:
        return {"engine": self.shared_engine, "max_tokens": 16}

    @property
    def supports_model_override(self) -> bool:
        return False  # one local model per instance; a per-call `model` other than it is an error
