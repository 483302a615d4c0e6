"""Settings documented in place: the docs and ``--help`` read each field's ``metadata["help"]``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import MISSING, field
from typing import Any

from .errors import ReContextError


def setting(text: str, default: Any = MISSING, **options: Any) -> Any:
    """A dataclass field documented in place (the docs and ``--help`` read ``metadata["help"]``)."""
    if "default_factory" in options:
        return field(metadata={"help": text}, **options)
    return field(default=default, metadata={"help": text})


def check(checks: Sequence[tuple[bool, str]]) -> None:
    """Raise the first failed ``(ok, message)`` check's message as a :class:`ReContextError`."""
    for ok, message in checks:
        if not ok:
            raise ReContextError(message)
