"""The vLLM backend, one concern a module; ``vllm`` itself is imported only when a runtime is built.

- :mod:`.options`: supported versions and platforms, ``vllm.LLM``/``SamplingParams`` arguments.
- :mod:`.runtime`: :func:`create_vllm_runtime` (the registry's factory for ``backend="vllm"``).
- :mod:`.router`: request routing over vLLM's engine, several streams at once.
- :mod:`.backend`: :class:`VLLMBackend`, prefill/read/generate on ``vllm.LLM``.
- :mod:`.layouts`: the key half of vLLM's paged cache in each layout, checked against ``slot_mapping``.
- :mod:`.capture` and :mod:`.worker`: what runs inside vLLM's workers (the paged readout).
"""

from .backend import ModelInfo, VLLMBackend, VLLMCache, merge_rank_results
from .options import EXTENSION, READOUTS, SUPPORTED_VLLM, engine_arguments, sampling_arguments
from .runtime import create_vllm_runtime

__all__ = [
    "EXTENSION",
    "READOUTS",
    "SUPPORTED_VLLM",
    "ModelInfo",
    "VLLMBackend",
    "VLLMCache",
    "create_vllm_runtime",
    "engine_arguments",
    "merge_rank_results",
    "sampling_arguments",
]
