"""docs/configuration.md is generated from the settings' help texts and kept in step with them."""

from __future__ import annotations

import importlib.util
from dataclasses import fields
from pathlib import Path

from recontext_engine import GenerationConfig, ReplayConfig
from recontext_engine.selection import SIGNALS

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "config_reference.py"


def _script():
    spec = importlib.util.spec_from_file_location("config_reference", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_setting_is_documented_in_place() -> None:
    for cls in (ReplayConfig, GenerationConfig, *SIGNALS.values()):
        for f in fields(cls):
            assert f.metadata.get("help", "").strip(), f"{cls.__name__}.{f.name} has no help text"


def test_the_reference_page_is_the_rendered_help_texts() -> None:
    script = _script()
    page = script.PAGE.read_text(encoding="utf-8")
    assert page == script.render(), "docs/configuration.md is stale: run python scripts/config_reference.py"
    for name in ("null_calibration", "max_new_tokens", "evidence_order", "recursive", "parts"):
        assert f"| `{name}` |" in page
