"""Property-based tests of the live server from its own OpenAPI document (schemathesis): whatever a
client sends, the server answers no 5xx, and every answer that is not a 2xx is an OpenAI error object.

Schema-valid bodies (positive) and schema-invalid ones (negative) are drawn for each operation with
Hypothesis (``operation.as_strategy``; schemathesis' fixture-based pytest loader does not run under
pytest 9.2: it sets ``node._nodeid``), and every check schemathesis has runs on each answer but
``positive_data_acceptance``: the schema cannot say what only the engine knows (text that is empty
once cleaned, a prompt over the window), so a schema-valid body may rightly get a 400.

Valid chat requests generate text on CPU, so the server defaults to 2 new tokens and generated
bodies asking for more are capped at 2 before they are sent; each operation gets 25 examples.
"""

from __future__ import annotations

import pytest

schemathesis = pytest.importorskip("schemathesis")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from schemathesis import Case, GenerationMode, Response  # noqa: E402
from schemathesis.checks import CheckContext  # noqa: E402
from schemathesis.specs.openapi.checks import positive_data_acceptance  # noqa: E402

from .conftest import running_server  # noqa: E402

pytestmark = pytest.mark.model
KEY = "schemathesis-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
MAX_TOKENS = 2
OPERATIONS = [
    "GET /health",
    "GET /v1/models",
    "GET /v1/models/{name}",
    "POST /v1/chat/completions",
    "POST /v1/evidence",
]
# Negative cases need something to get wrong: a body (any string is a valid model name).
WITH_BODIES = ["POST /v1/chat/completions", "POST /v1/evidence"]


@pytest.fixture(scope="module")
def server():
    with running_server("--api-key", KEY, "--max-tokens", str(MAX_TOKENS)) as process:
        yield process


@pytest.fixture(scope="module")
def api(server):
    loaded = schemathesis.openapi.from_url(f"{server.root_url}/openapi.json", headers=AUTH, timeout=30)
    loaded.config.update(request_timeout=120)
    return loaded


@schemathesis.check
def openai_error_object(ctx: CheckContext, response: Response, case: Case) -> bool | None:
    """Every answer that is not a 2xx is ``{"error": {"message", "type", "param", "code"}}``."""
    if response.status_code < 400:
        return None
    body = response.json()
    assert isinstance(body, dict) and set(body) == {"error"}, f"not an OpenAI error object: {body!r}"
    assert set(body["error"]) == {"message", "type", "param", "code"}, f"error fields: {body['error']!r}"
    assert isinstance(body["error"]["message"], str) and body["error"]["message"], "empty error message"
    return True


def capped(case: Case) -> Case:
    """A valid body asking for more than ``MAX_TOKENS`` new tokens asks for ``MAX_TOKENS``."""
    if isinstance(case.body, dict) and case.meta.generation.mode is GenerationMode.POSITIVE:
        for name in ("max_tokens", "max_completion_tokens"):
            value = case.body.get(name)
            if type(value) is int and value > MAX_TOKENS:
                case.body[name] = MAX_TOKENS
    return case


def test_the_document_lists_every_route(api) -> None:
    assert sorted(result.ok().label for result in api.get_all_operations()) == sorted(OPERATIONS)


@pytest.mark.parametrize(
    ("label", "mode"),
    [(label, GenerationMode.POSITIVE) for label in OPERATIONS]
    + [(label, GenerationMode.NEGATIVE) for label in WITH_BODIES],
    ids=lambda value: str(value),
)
def test_no_server_errors_and_every_error_is_an_error_object(api, label: str, mode: GenerationMode) -> None:
    operation = api.find_operation_by_label(label)

    @given(case=operation.as_strategy(mode))
    @settings(max_examples=25, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    def check(case: Case) -> None:
        capped(case).call_and_validate(
            headers=AUTH, additional_checks=[openai_error_object], excluded_checks=[positive_data_acceptance]
        )

    check()
