"""The paged-KV scoring function against the transformers readout on tiny random models (CPU)."""

from __future__ import annotations

import sys
from functools import lru_cache

import pytest
import torch
import transformers
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, eager_mask, sdpa_mask

from recontext_engine import HeadSet
from recontext_engine.readout.paged import paged_cue_rows, paged_cue_rows_batch, scatter_to_paged
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


@pytest.fixture(scope="module", params=list(ARCHS))
def case(request):
    arch = request.param
    ids = random_ids(PREFIX + SUFFIX, seed=1)
    heads = all_heads()
    return arch, ids, heads, transformers_rows(arch, ids, heads), record_queries_keys(recorder(arch), ids)


def test_paged_rows_equal_transformers_readout(case):
    arch, ids, heads, expected, record = case
    n = len(ids)
    generator = torch.Generator().manual_seed(7)
    for layer, rec in record.items():
        # 9 blocks for 4 needed: the sequence sits at shuffled, non-contiguous blocks
        key_cache, table = scatter_to_paged(rec["key"], BLOCK, num_blocks=9, generator=generator)
        assert n % BLOCK != 0 and len(table) == n // BLOCK + 1
        layer_heads = torch.tensor([h for lay, h in heads.heads if lay == layer])
        rows = paged_cue_rows(
            rec["query"][n - CUE :],
            key_cache,
            table,
            n,
            layer_heads,
            rec["scaling"],
            rec["softcap"],
            rec["sliding_window"],
        )
        want = expected[[i for i, (lay, _) in enumerate(heads.heads) if lay == layer]]
        assert rows.shape == want.shape == (len(layer_heads), CUE, n)
        torch.testing.assert_close(rows, want, atol=1e-5, rtol=0)
    if arch in ("mistral", "gemma2"):  # the window really cut keys in some layer
        assert any(r["sliding_window"] for r in record.values())
        assert (expected[..., : n - CUE - 24] == 0).all(dim=(-1, -2)).any()


def test_batch_of_sequences_with_different_lengths():
    arch = "llama"
    lengths = [61, 40, 23]
    seqs = [random_ids(n, seed=10 + i) for i, n in enumerate(lengths)]
    heads = all_heads()
    records = [record_queries_keys(recorder(arch), ids) for ids in seqs]
    expected = [transformers_rows(arch, ids, heads, prefix=len(ids) - SUFFIX) for ids in seqs]
    layer = 1
    layer_heads = torch.tensor([h for lay, h in heads.heads if lay == layer])
    want_index = [i for i, (lay, _) in enumerate(heads.heads) if lay == layer]
    key_cache = torch.zeros(12, BLOCK, 2, 16)
    free = torch.randperm(12, generator=torch.Generator().manual_seed(3)).tolist()
    tables = []
    for rec in records:
        key_cache, table = scatter_to_paged(rec[layer]["key"], BLOCK, key_cache=key_cache, free_blocks=free)
        tables.append(table)
    padded = torch.full((3, 4), 999)  # padding entries past a sequence's blocks must be ignored
    for i, table in enumerate(tables):
        padded[i, : len(table)] = table
    queries = torch.stack([rec[layer]["query"][-CUE:] for rec in records])
    batch = paged_cue_rows_batch(
        queries, key_cache, padded, torch.tensor(lengths), layer_heads, records[0][layer]["scaling"]
    )
    assert batch.shape == (3, len(layer_heads), CUE, max(lengths))
    for i, n in enumerate(lengths):
        torch.testing.assert_close(batch[i, ..., :n], expected[i][want_index], atol=1e-5, rtol=0)
        assert (batch[i, ..., n:] == 0).all()
        single = paged_cue_rows(
            queries[i], key_cache, tables[i], n, layer_heads, records[0][layer]["scaling"], chunk_tokens=7
        )
        torch.testing.assert_close(single, batch[i, ..., :n], atol=1e-6, rtol=0)


def test_explicit_query_positions_match_the_full_cue(case):
    _, ids, _, _, record = case
    n, rec = len(ids), record[0]
    key_cache, table = scatter_to_paged(rec["key"], BLOCK, num_blocks=6)
    heads = torch.tensor([3, 0])
    args = (key_cache, table, n, heads, rec["scaling"], rec["softcap"], rec["sliding_window"])
    full = paged_cue_rows(rec["query"][n - CUE :], *args)
    # the first three cue queries, scored when only their prefix was in the cache (chunked prefill)
    early = paged_cue_rows(
        rec["query"][n - CUE : n - CUE + 3],
        key_cache,
        table,
        n - CUE + 3,
        heads,
        rec["scaling"],
        rec["softcap"],
        rec["sliding_window"],
        query_positions=torch.arange(n - CUE, n - CUE + 3),
    )
    torch.testing.assert_close(early, full[:, :3, : n - CUE + 3], atol=1e-6, rtol=0)
    assert (full[:, :3, n - CUE + 3 :] == 0).all()


def test_bad_inputs_raise():
    key_cache = torch.zeros(4, BLOCK, 2, 8)
    with pytest.raises(ValueError, match="blocks"):
        paged_cue_rows(torch.zeros(2, 4, 8), key_cache, torch.tensor([0]), 20, torch.tensor([0]), 1.0)
    with pytest.raises(ValueError, match="cue queries"):
        paged_cue_rows(torch.zeros(9, 4, 8), key_cache, torch.tensor([0]), 5, torch.tensor([0]), 1.0)
    with pytest.raises(ValueError, match="blocks"):
        scatter_to_paged(torch.zeros(40, 2, 8), BLOCK, num_blocks=2)
