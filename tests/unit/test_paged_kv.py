"""The paged-KV scoring function against the transformers readout on tiny random models (CPU)."""

from __future__ import annotations

import pytest
import torch

from recontext_engine.readout.paged import paged_cue_rows, paged_cue_rows_batch, scatter_to_paged
from tests.paged_helpers import (
    ARCHS,
    BLOCK,
    CUE,
    PREFIX,
    SUFFIX,
    all_heads,
    random_ids,
    record_queries_keys,
    recorder,
    transformers_rows,
)


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
