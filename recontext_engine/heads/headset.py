"""A head set: the (layer, head) pairs read as retrieval heads, with provenance and a model fingerprint."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import HeadSetError


def model_fingerprint(config: Any) -> str:
    """A short hash of the attention geometry: two models with equal fingerprints index heads alike."""
    text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
    keys = (
        "model_type",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "hidden_size",
        "vocab_size",
    )
    parts = [
        f"{k}={getattr(text_config, k, None) if k != 'model_type' else text_config.model_type}" for k in keys
    ]
    return hashlib.sha256(";".join(parts).encode()).hexdigest()[:16]


def model_shape(config: Any) -> tuple[int, int]:
    """(num_layers, num_query_heads) of a transformers config."""
    text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
    return int(text_config.num_hidden_layers), int(text_config.num_attention_heads)


@dataclass(frozen=True)
class HeadSet:
    """Retrieval heads, 0-indexed ``(layer, head)`` pairs in query-head numbering."""

    heads: tuple[tuple[int, int], ...]
    model: str = ""
    fingerprint: str | None = None
    provenance: dict[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        try:
            pairs = tuple((int(layer), int(head)) for layer, head in self.heads)
        except (TypeError, ValueError) as exc:
            raise HeadSetError(f"heads must be (layer, head) pairs of integers: {exc}") from None
        if not pairs:
            raise HeadSetError("a head set needs at least one (layer, head) pair")
        if len(set(pairs)) != len(pairs):
            raise HeadSetError("a head set lists the same (layer, head) twice")
        object.__setattr__(self, "heads", pairs)

    @property
    def max_layer(self) -> int:
        """The deepest layer read: read passes stop after it."""
        return max(layer for layer, _ in self.heads)

    def by_layer(self) -> dict[int, list[int]]:
        layers: dict[int, list[int]] = {}
        for layer, head in self.heads:
            layers.setdefault(layer, []).append(head)
        return layers

    def validate_for(self, config: Any, *, check_fingerprint: bool = True) -> None:
        """Raise :class:`HeadSetError` if these heads do not exist in (or were made for another) model."""
        num_layers, num_heads = model_shape(config)
        for layer, head in self.heads:
            if not (0 <= layer < num_layers and 0 <= head < num_heads):
                raise HeadSetError(
                    f"head ({layer}, {head}) is out of range for this model "
                    f"({num_layers} layers x {num_heads} heads, 0-indexed)"
                )
        if check_fingerprint and self.fingerprint and self.fingerprint != model_fingerprint(config):
            raise HeadSetError(
                f"head set {self.model or '(unnamed)'} was made for another model "
                f"(fingerprint {self.fingerprint}, this model {model_fingerprint(config)}); "
                "detect heads for this model with `recontext heads detect`"
            )

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "fingerprint": self.fingerprint,
            "heads": [list(h) for h in self.heads],
            "provenance": self.provenance,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> HeadSet:
        if not isinstance(data, dict) or "heads" not in data:
            raise HeadSetError("a head set file must be a JSON object with a 'heads' list")
        return cls(
            heads=tuple(tuple(h) for h in data["heads"]),
            model=data.get("model", ""),
            fingerprint=data.get("fingerprint"),
            provenance=data.get("provenance", {}),
        )

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=1) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> HeadSet:
        path = Path(path)
        if not path.is_file():
            raise HeadSetError(f"head set file not found: {path}")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise HeadSetError(f"head set file {path} is not valid JSON: {exc}") from None
        return cls.from_dict(data)

    @classmethod
    def of(cls, heads: Iterable[tuple[int, int]], model: str = "") -> HeadSet:
        return cls(heads=tuple(heads), model=model)
