"""The server as a real process: one per test module, on a free loopback port, always stopped."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from recontext_engine.serve.process import ServerProcess  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
MODEL = "SmolLM2-135M-Instruct"


@contextmanager
def running_server(*args: str) -> Iterator[ServerProcess]:
    """``recontext serve`` from this checkout (cwd = repo root, so its code is the code served)."""
    with ServerProcess(["--log-level", "warning", *args], cwd=ROOT) as server:
        yield server
