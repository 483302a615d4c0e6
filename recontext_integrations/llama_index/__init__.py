"""LlamaIndex adapters over the ReContext engine (needs `pip install recontext[llama-index]`).

``ReContextLLM`` answers with evidence replay; it is a ``FunctionCallingLLM`` (tools,
``predict_and_call``, ``FunctionAgent``, and ``structured_predict``/``as_structured_llm`` under
grammar-constrained decoding). ``ReContextEvidencePostprocessor`` adds evidence to (or reranks)
the retrieved nodes for any LLM; ``ReContextMemoryBlock`` replays a long session's evidence in a
``Memory`` (chat engines, agents); ``ReContextEvidenceEvent`` is the instrumentation event both
dispatch. Helpers and constants stay in their modules: ``postprocessor`` (``evidence_node``,
``sentence_node``, ``EVIDENCE_KEY``, ``SENTENCE_KEY``), ``tools`` (LlamaIndex's tool and call
forms to the engine's); the prompt split rules are the engine's
(``recontext_engine.split_messages``, ``SplitPattern``).
"""

try:
    import llama_index.core  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "recontext_integrations.llama_index needs llama-index-core: pip install 'recontext[llama-index]'"
    ) from exc

from .events import ReContextEvidenceEvent
from .llm import ReContextLLM
from .memory import ReContextMemoryBlock
from .postprocessor import ReContextEvidencePostprocessor

__all__ = ["ReContextEvidenceEvent", "ReContextEvidencePostprocessor", "ReContextLLM", "ReContextMemoryBlock"]
