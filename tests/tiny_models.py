"""Tiny random causal LMs built from configs (no download), one per architecture family."""

from __future__ import annotations

import torch
import transformers

COMMON = dict(
    vocab_size=128,
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=512,
    pad_token_id=0,
    bos_token_id=1,
    eos_token_id=2,
)

ARCHITECTURES: dict[str, tuple[str, str, dict]] = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", {}),
    "mistral": ("MistralConfig", "MistralForCausalLM", {"sliding_window": 24}),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {}),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", {"head_dim": 16}),
    "gemma2": (
        "Gemma2Config",
        "Gemma2ForCausalLM",
        {"head_dim": 16, "sliding_window": 24, "attn_logit_softcapping": 20.0, "query_pre_attn_scalar": 24},
    ),
    "gemma3": (
        "Gemma3TextConfig",
        "Gemma3ForCausalLM",
        {"head_dim": 16, "sliding_window": 24, "query_pre_attn_scalar": 24, "layer_types": None},
    ),
    "phi3": ("Phi3Config", "Phi3ForCausalLM", {"pad_token_id": 0}),
}


def tiny_model(arch: str, attn_implementation: str = "sdpa", seed: int = 0):
    """A seeded random model; ``"sdpa"`` falls back to eager where the class has no SDPA."""
    config_name, model_name, extra = ARCHITECTURES[arch]
    options = {**COMMON, **{k: v for k, v in extra.items() if v is not None}}
    config = getattr(transformers, config_name)(**options)
    torch.manual_seed(seed)
    model = getattr(transformers, model_name)(config)
    # Random init gives near-uniform attention; sharpen it so the comparison is meaningful.
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith(("q_proj.weight", "k_proj.weight", "qkv_proj.weight")):
                param.mul_(6.0)
    if attn_implementation != "sdpa" or model._supports_sdpa:
        model.set_attn_implementation(attn_implementation)
    return model.eval()
