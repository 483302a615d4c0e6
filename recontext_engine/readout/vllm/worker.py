"""Code that runs inside vLLM's worker processes: the worker extension and the wrapped attention.

``worker_extension_cls`` names :class:`ReadoutWorkerExtension`; vLLM mixes it into each worker and
``LLM.collective_rpc`` calls its methods. Arguments and results are plain lists, numbers and bytes,
so they cross vLLM's process boundary without pickling code.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

import torch

from ...errors import UnsupportedModelError
from .capture import WorkerCapture
from .layouts import check_keys, cpu_key_order, key_cache, layout_of, refusal


def layer_index(name: str) -> int | None:
    """The decoder layer number in a module name such as ``model.layers.12.self_attn.attn``."""
    match = re.search(r"(?:^|\.)(\d+)(?:\.|$)", name)
    return int(match.group(1)) if match else None


def sliding_window(impl: Any) -> int | None:
    """The layer's window (a query sees its last ``window`` keys), None for full attention.

    FlashAttention keeps ``(left, right)`` with ``left = window - 1`` and ``(-1, -1)`` for none; the
    CPU backend keeps the window itself and ``-1`` for none.
    """
    window = getattr(impl, "sliding_window", None)
    if isinstance(window, (tuple, list)):
        return int(window[0]) + 1 if window[0] is not None and window[0] >= 0 else None
    return int(window) if window is not None and int(window) > 0 else None


def _cache_dtype_refusal(impl: Any) -> str | None:
    dtype = str(getattr(impl, "kv_cache_dtype", "auto") or "auto")
    if dtype in ("auto", "bfloat16", "float16", "float32", "half", "float"):
        return None
    return f"the paged readout cannot read a {dtype} (quantized) KV cache; use kv_cache_dtype='auto'"


class ReadoutWorkerExtension:
    """Methods vLLM mixes into its worker (``worker_extension_cls``), called with ``collective_rpc``.

    Each decoder attention layer's ``impl.forward`` is wrapped: vLLM calls it inside its opaque
    attention op (eagerly, also under torch.compile and piecewise CUDA graphs) as
    ``forward(layer, query, key, value, kv_cache, attn_metadata, ...)``. The step's keys are in
    ``kv_cache`` by then (vLLM writes them first); an armed capture then scores the cue queries.
    """

    model_runner: Any  # vLLM's worker, which this class is mixed into, provides it

    def _recontext_capture(self) -> WorkerCapture:
        state = getattr(self, "_recontext_state", None)
        if state is None:
            state = WorkerCapture(lambda: batch_request_ids(self.model_runner))
            self._recontext_state = state
        return state

    def recontext_install_readout(self) -> dict[str, Any]:
        """Wrap every decoder attention layer once: ``{"layers": [...], "error": str | None,
        "batch_ids": bool}`` (whether reads can be told apart by request id, so batched)."""
        try:
            from vllm.distributed import get_tensor_model_parallel_rank

            rank = get_tensor_model_parallel_rank()
        except Exception:  # single process, or a vLLM without the helper
            rank = 0
        # vLLM registers every attention layer by name here; the module tree is the fallback.
        config = getattr(self, "vllm_config", None)
        context = getattr(getattr(config, "compilation_config", None), "static_forward_context", None)
        if context:
            modules = list(context.items())
        else:
            model = self.get_model() if hasattr(self, "get_model") else self.model_runner.model
            modules = list(model.named_modules())
        try:
            layers = install_capture(modules, self._recontext_capture(), rank)
        except UnsupportedModelError as exc:
            return {"layers": [], "error": str(exc), "batch_ids": False}
        named = batch_request_ids(self.model_runner) is not None
        return {"layers": layers, "error": None, "batch_ids": named}

    def recontext_arm(self, spec: dict[str, Any]) -> None:
        self._recontext_capture().arm(spec)

    def recontext_collect(self, read_id: str = "") -> dict[str, Any]:
        return self._recontext_capture().collect(read_id)


def batch_request_ids(model_runner: Any) -> list[str] | None:
    """The request ids of the batch being run, in the order of its attention metadata: vLLM's V1
    model runner keeps them in ``input_batch.req_ids`` (on the GPU and the CPU build); None where a
    runner does not (the V2 model runner), and reads then run alone."""
    ids = getattr(getattr(model_runner, "input_batch", None), "req_ids", None)
    return list(ids) if isinstance(ids, list) else None


def install_capture(modules: Iterable[tuple[str, Any]], state: WorkerCapture, rank: int = 0) -> list[int]:
    """Wrap the ``impl.forward`` of each decoder attention layer among ``(name, module)`` pairs so
    that ``state`` sees its queries and cache; idempotent. Returns the layer numbers wrapped.

    Raises:
        UnsupportedModelError: an attention backend or cache this readout cannot read (FlashInfer,
            MLA, a quantized cache), or no attention layer at all.
    """
    layers = []
    for name, module in modules:
        impl = getattr(module, "impl", None)
        index = layer_index(getattr(module, "layer_name", name))
        if impl is None or index is None or not hasattr(module, "num_kv_heads"):
            continue
        reason = refusal(type(module).__name__) or refusal(type(impl).__name__) or _cache_dtype_refusal(impl)
        if reason:
            raise UnsupportedModelError(reason)
        if not getattr(impl, "_recontext_wrapped", False):
            impl.forward = _wrap_forward(impl, impl.forward, state, index, rank * int(impl.num_heads))
            impl._recontext_wrapped = True
        layers.append(index)
    if not layers:
        raise UnsupportedModelError(
            "no attention layers with a paged-KV backend were found in the vLLM model"
        )
    return sorted(set(layers))


def _cpu_order(layer: Any, dtype: Any, block_size: int, head_size: int) -> torch.Tensor | None:
    """The CPU kernel's key packing for this layer's instruction set (``layer.isa``)."""
    from vllm import _custom_ops as ops

    isa = getattr(layer, "isa", None)
    if isa is None:
        return None  # a CPU backend without per-ISA packing: keys stored plainly

    def write(
        key: torch.Tensor,
        value: torch.Tensor,
        key_cache: torch.Tensor,
        value_cache: torch.Tensor,
        slots: torch.Tensor,
    ) -> None:
        ops.cpu_attn_reshape_and_cache(key, value, key_cache, value_cache, slots, isa)

    return cpu_key_order(write, dtype, block_size, head_size)


def _wrap_forward(
    impl: Any, original: Any, state: WorkerCapture, index: int, head_offset: int
) -> Callable[..., Any]:
    found: dict[str, Any] = {}  # the layout (and the CPU kernel's key order), at the first captured step

    def forward(layer, query, key, value, kv_cache, attn_metadata, *args, **kwargs):
        output = original(layer, query, key, value, kv_cache, attn_metadata, *args, **kwargs)
        if state.armed and attn_metadata is not None and state.wants(index):
            try:
                if getattr(attn_metadata, "dcp_context_kv_lens", None) is not None:
                    raise UnsupportedModelError("decode context parallelism splits the KV cache across ranks")
                kv_heads, head_size = int(impl.num_kv_heads), int(impl.head_size)
                if not found:
                    found["layout"] = layout_of(
                        type(impl).__name__, tuple(kv_cache.shape), kv_heads, head_size
                    )
                    if found["layout"] == "cpu":
                        found["order"] = _cpu_order(layer, kv_cache.dtype, kv_cache.shape[2], head_size)
                layout = found["layout"]
                keys = key_cache(kv_cache, layout, kv_heads, head_size, found.get("order"))
                num_tokens = int(attn_metadata.num_actual_tokens)
                if key is not None:
                    slots = attn_metadata.slot_mapping[:num_tokens]
                    check_keys(keys, key.reshape(key.shape[0], kv_heads, head_size), slots, layout)
                state.observe(
                    index,
                    head_offset,
                    query[:num_tokens].reshape(num_tokens, int(impl.num_heads), -1),
                    keys,
                    attn_metadata.query_start_loc.tolist(),
                    attn_metadata.seq_lens.tolist(),
                    attn_metadata.block_table,
                    float(impl.scale),
                    float(getattr(impl, "logits_soft_cap", 0) or 0) or None,
                    sliding_window(impl),
                )
            except Exception as exc:  # never break vLLM's forward; the read reports it instead
                state.fail(f"layer {index}: {type(exc).__name__}: {exc}")
        return output

    return forward


__all__ = ["ReadoutWorkerExtension", "install_capture", "layer_index", "sliding_window"]
