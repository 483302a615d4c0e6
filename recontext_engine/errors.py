"""Errors raised for bad input. Each one carries a single, human-readable message."""

from __future__ import annotations


class ReContextError(ValueError):
    """Base class for every error the engine raises on purpose."""


class InputError(ReContextError):
    """Empty, undecodable or otherwise unusable context or question."""


class PromptTooLongError(ReContextError):
    """The prompt does not fit the model's context window."""


class HeadSetError(ReContextError):
    """A head set that does not fit the model (bad index, wrong fingerprint, bad file)."""


class UnsupportedModelError(ReContextError):
    """A model whose attention the readout cannot read."""


class BackendUnavailableError(ReContextError):
    """An optional backend (vLLM, a GPU) that is not installed or not present."""


class ModelLoadError(ReContextError):
    """A model that cannot be found or loaded."""
