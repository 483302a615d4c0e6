"""The server as a real process: one per test module (and backend), on a free loopback port, always
stopped.

Modules that take the ``backend`` fixture run on every backend this virtualenv has: the transformers
backend, and vLLM where it is installed (``.ci/vllm``'s virtualenv, vLLM's CPU build).
``RECONTEXT_TEST_BACKENDS=vllm`` picks some of them by name.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from recontext_engine.serve.process import ServerProcess  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
MODEL = "SmolLM2-135M-Instruct"
# vLLM's CPU build as the vLLM tests run it: float32 (the transformers backend's dtype), no compile
VLLM_ARGS = ("--backend", "vllm", "--dtype", "float32", "--enforce-eager")


def backends() -> list[str]:
    chosen = os.environ.get("RECONTEXT_TEST_BACKENDS")
    if chosen:
        return [name.strip() for name in chosen.split(",") if name.strip()]
    return ["transformers"] + (["vllm"] if importlib.util.find_spec("vllm") is not None else [])


@pytest.fixture(scope="module", params=backends())
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@contextmanager
def running_server(*args: str, backend: str = "transformers") -> Iterator[ServerProcess]:
    """``recontext serve`` from this checkout (cwd = repo root, so its code is the code served)."""
    flags = VLLM_ARGS if backend == "vllm" else ()
    with ServerProcess(["--log-level", "warning", *flags, *args], cwd=ROOT) as server:
        yield server
