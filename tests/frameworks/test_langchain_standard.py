"""The langchain-tests standard suites for ChatReContext (unit: no model; integration: embedded model)."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("langchain_tests")

from langchain_tests.integration_tests import ChatModelIntegrationTests  # noqa: E402
from langchain_tests.unit_tests import ChatModelUnitTests  # noqa: E402

from recontext_integrations.langchain import ChatReContext  # noqa: E402

# Tests that ask more of the embedded 135M model than it can do; the features themselves are tested
# (schema-valid objects, forced calls, ToolMessage round trips) in test_langchain_tools.py.
_RAMBLES = "SmolLM2-135M rambles on in a free-text joke and does not close the JSON within max_tokens"
_WRONG_ARGUMENT = "SmolLM2-135M does not copy the number from the question into the call's arguments"
MODEL_LIMITS = {
    "test_structured_output[pydantic]": _RAMBLES,
    "test_structured_output_async[pydantic]": _RAMBLES,
    "test_structured_output_pydantic_2_v1": _RAMBLES,
    "test_json_mode": "SmolLM2-135M does not write the keys a prompt asks for (json_mode fixes no keys)",
    "test_agent_loop": "SmolLM2-135M does not decide by itself to call a tool (tool_choice='auto')",
    # the call is valid and forced; its argument is the model's pick: {"input": 100}, not 3
    "test_tool_calling": _WRONG_ARGUMENT,
    "test_tool_calling_async": _WRONG_ARGUMENT,
    "test_unicode_tool_call_integration": "SmolLM2-135M rambles on in the free-text description "
    "(it copies the tool's docstring) and does not close the call within max_tokens",
}


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

    @property
    def has_tool_calling(self) -> bool:
        return True

    @property
    def has_tool_choice(self) -> bool:
        return True  # "any" and a tool's name force a call, constrained to its argument schema

    @property
    def has_structured_output(self) -> bool:
        return True

    @property
    def structured_output_kwargs(self) -> dict[str, Any]:
        return {"method": "json_schema"}  # the default: grammar-constrained to the schema

    @property
    def supports_json_mode(self) -> bool:
        return True


class TestChatReContextUnit(ReContextSuiteSettings, ChatModelUnitTests):
    pass


@pytest.mark.model
class TestChatReContextIntegration(ReContextSuiteSettings, ChatModelIntegrationTests):
    shared_engine: Any = None

    max_tokens = 16

    @pytest.fixture(autouse=True)
    def _inject_engine(self, engine: Any, request: pytest.FixtureRequest) -> None:
        # autouse fixtures run before the suite's `model` fixture reads chat_model_params
        type(self).shared_engine = engine
        # Free text stops early at 16 tokens; a tool call's or an object's JSON needs room to close.
        shaped = ("tool", "structured", "json_mode", "agent")
        type(self).max_tokens = 64 if any(word in request.node.name for word in shaped) else 16
        reason = MODEL_LIMITS.get(request.node.name, MODEL_LIMITS.get(request.node.originalname))
        if reason:
            request.applymarker(pytest.mark.xfail(reason=reason))

    @property
    def chat_model_params(self) -> dict[str, Any]:
        return {"engine": self.shared_engine, "max_tokens": self.max_tokens}

    @property
    def supports_model_override(self) -> bool:
        return False  # one local model per instance; a per-call `model` other than it is an error
