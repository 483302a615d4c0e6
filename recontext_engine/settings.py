"""Settings documented in place: the docs and ``--help`` read each field's ``metadata["help"]``."""

from __future__ import annotations

from dataclasses import MISSING, field
from typing import Any


def setting(text: str, default: Any = MISSING, **options: Any) -> Any:
    """A dataclass field documented in place (the docs and ``--help`` read ``metadata["help"]``)."""
    if "default_factory" in options:
        return field(metadata={"help": text}, **options)
    return field(default=default, metadata={"help": text})
