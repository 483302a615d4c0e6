"""The local engine settings and lazy loading that the LlamaIndex LLM and postprocessor share."""

from __future__ import annotations

from typing import Any

from llama_index.core.bridge.pydantic import BaseModel, Field, PrivateAttr

from recontext_engine import ReContextEngine

from ..common import load_engine


class LocalEngine(BaseModel):
    """``model``/``heads``/``device`` fields, or a ready ``engine=``; the model loads on first use.

    Components with the same settings share one loaded model (see ``common.load_engine``).
    """

    model: str | None = Field(default=None, description="Hub id, local folder or .gguf; None = embedded.")
    heads: str | list[tuple[int, int]] = Field(
        default="auto", description="Head set: 'auto', a JSON path or pairs."
    )
    device: str = Field(default="cpu", description="Torch device for a lazily loaded model.")

    _engine: ReContextEngine | None = PrivateAttr(default=None)

    def __init__(self, engine: ReContextEngine | None = None, **data: Any) -> None:
        super().__init__(**data)
        self._engine = engine

    @property
    def engine(self) -> ReContextEngine:
        """The engine (loaded now if it is not yet)."""
        if self._engine is None:
            self._engine = load_engine(self.model, heads=self.heads, device=self.device)
        return self._engine
