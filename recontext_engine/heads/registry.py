"""Bundled head sets, looked up by model fingerprint, and the rules for the ``heads=`` argument."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from importlib import resources
from pathlib import Path
from typing import Any, cast

from ..errors import HeadSetError
from .headset import HeadSet, model_fingerprint

HeadsArg = str | os.PathLike[str] | HeadSet | Sequence[Sequence[int]]


def bundled_head_sets() -> list[HeadSet]:
    """Every head set shipped in ``recontext_engine/heads/data``."""
    folder = resources.files(__package__) / "data"
    return [
        HeadSet.load(Path(str(item)))
        for item in sorted(folder.iterdir(), key=str)
        if item.name.endswith(".json")
    ]


def lookup(config: Any) -> HeadSet | None:
    """The bundled or cached head set made for a model with this config's fingerprint, if any."""
    from ..loading import cache_root

    fingerprint = model_fingerprint(config)
    for head_set in bundled_head_sets():
        if head_set.fingerprint == fingerprint:
            return head_set
    cached = cache_root() / "heads" / f"{fingerprint}.json"
    return HeadSet.load(cached) if cached.is_file() else None


def cache_path(config: Any) -> Path:
    from ..loading import cache_root

    return cache_root() / "heads" / f"{model_fingerprint(config)}.json"


def resolve_heads(heads: HeadsArg, config: Any, detect: Callable[[], HeadSet] | None = None) -> HeadSet:
    """Turn the ``heads=`` argument into a head set that fits the model.

    ``"auto"``: the registry, else a cached detection, else ``detect()`` (cached afterwards);
    a path: a JSON head set; a list of ``(layer, head)``: those heads; a :class:`HeadSet`: itself.
    """
    if isinstance(heads, HeadSet):
        head_set = heads
    elif isinstance(heads, str) and heads == "auto":
        known = lookup(config)
        if known is None:
            if detect is None:
                raise HeadSetError(
                    "no head set is known for this model; run `recontext heads detect --model ...` "
                    "or pass heads=[(layer, head), ...]"
                )
            known = detect()
            path = cache_path(config)
            path.parent.mkdir(parents=True, exist_ok=True)
            known.save(path)
        head_set = known
    elif isinstance(heads, (str, os.PathLike)):
        head_set = HeadSet.load(heads)
    else:
        # HeadSet.__post_init__ checks that each is a (layer, head) pair of integers (else HeadSetError)
        head_set = HeadSet(heads=cast("tuple[tuple[int, int], ...]", tuple(tuple(h) for h in heads)))
    head_set.validate_for(config)
    return head_set
