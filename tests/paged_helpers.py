"""Shared by the paged-readout tests: tiny random models, their post-RoPE queries and keys as vLLM's
attention layer receives them, and the transformers readout's rows to compare with."""

from __future__ import annotations

import sys
from functools import lru_cache

import torch
import transformers
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, eager_mask, sdpa_mask

from recontext_engine import HeadSet
from recontext_engine.readout.transformers import TransformersBackend

COMMON = dict(
    vocab_size=128,
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=3,
    num_attention_heads=4,  # grouped-query: 2 query heads per key head
    num_key_value_heads=2,
    max_position_embeddings=512,
    pad_token_id=0,
    bos_token_id=1,
    eos_token_id=2,
)
ARCHS = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", {}),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", {"head_dim": 16}),  # q/k norm before RoPE
    "mistral": ("MistralConfig", "MistralForCausalLM", {"sliding_window": 24}),
    "gemma2": (
        "Gemma2Config",
        "Gemma2ForCausalLM",
        {"head_dim": 16, "sliding_window": 24, "attn_logit_softcapping": 20.0, "query_pre_attn_scalar": 24},
    ),
}
PREFIX, SUFFIX, CUE = 45, 16, 8
BLOCK = 16  # 61 tokens -> 3 full blocks and a partial one of 13


def tiny(arch: str):
    config_name, model_name, extra = ARCHS[arch]
    config = getattr(transformers, config_name)(**{**COMMON, **extra})
    torch.manual_seed(0)
    model = getattr(transformers, model_name)(config)
    with torch.no_grad():  # random init attends near-uniformly; sharpen so rows differ
        for name, param in model.named_parameters():
            if name.endswith(("q_proj.weight", "k_proj.weight")):
                param.mul_(6.0)
    return model.eval()


_RECORD: dict[int, dict] = {}


def _record(module, query, key, kwargs, scaling):
    _RECORD[module.layer_idx] = {
        "query": query[0].transpose(0, 1).clone(),  # (n, q_heads, d)
        "key": key[0].transpose(0, 1).clone(),  # (n, kv_heads, d)
        "scaling": scaling,
        "softcap": kwargs.get("softcap"),
        "sliding_window": kwargs.get("sliding_window"),
    }


def _record_sdpa(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    _record(module, query, key, kwargs, scaling)
    return sdpa_attention_forward(
        module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs
    )


def _record_eager(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    _record(module, query, key, kwargs, scaling)
    eager = sys.modules[type(module).__module__].eager_attention_forward
    return eager(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs)


def record_queries_keys(model, ids: list[int]) -> dict[int, dict]:
    """Post-RoPE queries and keys of every layer over ``ids`` (one full forward), with each layer's
    scale, soft cap and window: what vLLM's attention layer hands its backend."""
    AttentionInterface.register("paged_test_sdpa", _record_sdpa)
    AttentionMaskInterface.register("paged_test_sdpa", sdpa_mask)
    AttentionInterface.register("paged_test_eager", _record_eager)
    AttentionMaskInterface.register("paged_test_eager", eager_mask)
    softcap = getattr(model.config, "attn_logit_softcapping", None)
    model.set_attn_implementation("paged_test_eager" if softcap else "paged_test_sdpa")
    _RECORD.clear()
    with torch.inference_mode():
        model(input_ids=torch.tensor([ids]))
    return dict(_RECORD)


@lru_cache
def backend(arch: str) -> TransformersBackend:
    return TransformersBackend(tiny(arch))


@lru_cache
def recorder(arch: str):
    return tiny(arch)


def transformers_rows(arch: str, ids: list[int], heads: HeadSet, prefix: int = PREFIX) -> torch.Tensor:
    reader = backend(arch)
    return reader.read(reader.prefill(ids[:prefix]), prefix, ids[prefix:], heads, CUE)


def all_heads() -> HeadSet:
    return HeadSet(
        tuple(
            (layer, head)
            for layer in range(COMMON["num_hidden_layers"])
            for head in range(COMMON["num_attention_heads"])
        )
    )


def random_ids(n: int, seed: int) -> list[int]:
    return torch.randint(
        3, COMMON["vocab_size"], (n,), generator=torch.Generator().manual_seed(seed)
    ).tolist()
