"""The local engine settings and lazy loading that the LlamaIndex LLM and postprocessor share."""

from __future__ import annotations

from typing import Any, ClassVar

from llama_index.core.bridge.pydantic import BaseModel, Field, PrivateAttr, model_validator

from recontext_engine import ReContextEngine

from ..common import checked_settings, load_engine, refuse_pickling_an_engine, shared_engine_memo


class LocalEngine(BaseModel):
    """``model``/``heads``/``device`` fields, or a ready ``engine=``; the model loads on first use.

    Components with the same settings share one loaded model (see ``common.load_engine``). Unknown
    constructor arguments are an error (naming the closest field). Copies share an ``engine=``; a
    component built with one cannot be pickled (build it with ``model=`` instead).
    """

    setting_aliases: ClassVar[dict[str, str]] = {}
    # Settings an earlier version took -> what to write now (said in the error that refuses them).
    replaced_settings: ClassVar[dict[str, str]] = {}

    model: str | None = Field(default=None, description="Hub id, local folder or .gguf; None = embedded.")
    heads: str | list[tuple[int, int]] = Field(
        default="auto", description="Head set: 'auto', a JSON path or pairs."
    )
    device: str = Field(default="cpu", description="Torch device for a lazily loaded model.")

    _engine: ReContextEngine | None = PrivateAttr(default=None)  # only one passed as engine=

    def __init__(self, engine: ReContextEngine | None = None, **data: Any) -> None:
        super().__init__(**data)
        self._engine = engine

    @model_validator(mode="before")
    @classmethod
    def _refuse_unknown_settings(cls, data: Any) -> Any:
        return checked_settings(data, cls.model_fields, cls.setting_aliases, cls.replaced_settings)

    @property
    def engine(self) -> ReContextEngine:
        """The ``engine=`` passed in, or the shared one for these settings (loaded on first use)."""
        if self._engine is not None:
            return self._engine
        return load_engine(self.model, heads=self.heads, device=self.device)

    def __deepcopy__(self, memo: dict[int, Any] | None = None) -> LocalEngine:
        return super().__deepcopy__(shared_engine_memo(self._engine, memo))

    def __getstate__(self) -> dict[Any, Any]:
        refuse_pickling_an_engine(self, self._engine)
        return super().__getstate__()
