"""The OpenAPI document: the JSON bodies the POST routes parse themselves, and the error object.

The routes read raw bytes (:func:`.schemas.parse_body`), so FastAPI knows no body for them; each
declares one with :func:`json_body`, and :func:`describe_models` puts the models' JSON schemas,
with the models they nest (pydantic's ``$defs``), under ``components.schemas`` where the refs point.
Every operation's ``default`` response (any status not listed) is :class:`ErrorResponse`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel, ConfigDict

REF = "#/components/schemas/{model}"


class ErrorDetail(BaseModel):
    model_config = ConfigDict(extra="forbid")

    message: str
    type: str
    param: str | None
    code: str | None


class ErrorResponse(BaseModel):
    """An OpenAI error object: what every answer that is not a 2xx carries."""

    model_config = ConfigDict(extra="forbid")

    error: ErrorDetail


# Also keeps FastAPI from documenting a 422 the server never sends (validation errors are 400s).
ERRORS: dict[int | str, dict[str, Any]] = {
    "default": {"model": ErrorResponse, "description": "An OpenAI error object"}
}

# A chat completion with "stream": true is a stream of server-sent events.
STREAMS: dict[int | str, dict[str, Any]] = {
    200: {"content": {"text/event-stream": {"schema": {"type": "string"}}}}
}


def json_body(model: type[BaseModel]) -> dict[str, Any]:
    """``openapi_extra`` for a route whose body is ``model`` as JSON."""
    schema = {"$ref": REF.format(model=model.__name__)}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


def describe_models(app: FastAPI, models: Sequence[type[BaseModel]]) -> Callable[[], dict[str, Any]]:
    """Make ``app.openapi()`` list ``models`` among its component schemas; returns it."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = generate()  # FastAPI's, cached in app.openapi_schema: completed once, here
            components = document.setdefault("components", {}).setdefault("schemas", {})
            for model in models:
                schema = model.model_json_schema(ref_template=REF)
                components.update(schema.pop("$defs", {}))
                components[model.__name__] = schema
        return app.openapi_schema  # type: ignore[return-value]

    app.openapi = openapi  # type: ignore[method-assign]
    return openapi
