"""ReContext: recursive evidence replay for long-context LLM calls (arXiv 2607.02509).

``import recontext_engine`` needs only torch and transformers; models load on request.
"""

from .config import ReplayConfig
from .engine import ReContextEngine, ReplayStream
from .errors import (
    BackendUnavailableError,
    HeadSetError,
    InputError,
    ModelLoadError,
    PromptTooLongError,
    ReContextError,
    UnsupportedModelError,
)
from .heads.headset import HeadSet
from .results import Evidence, ReplayResult, Usage

__all__ = [
    "BackendUnavailableError",
    "Evidence",
    "HeadSet",
    "HeadSetError",
    "InputError",
    "ModelLoadError",
    "PromptTooLongError",
    "ReContextEngine",
    "ReContextError",
    "ReplayConfig",
    "ReplayResult",
    "ReplayStream",
    "Usage",
    "UnsupportedModelError",
]
__version__ = "0.1.0"
