"""Cue attention rows read from a paged KV cache (vLLM's layout), in plain torch.

vLLM keeps keys in fixed-size blocks; :mod:`recontext_engine.readout.vllm.layouts` turns each
version's and backend's cache into a ``(num_blocks, block_size, kv_heads, head_dim)`` key view, and
token ``t`` of a sequence lives in block ``block_table[t // block_size]`` at offset
``t % block_size``. These functions compute, for the selected query heads, the softmax attention
rows of the cue queries over every key of the sequence, exactly as
:func:`recontext_engine.readout.transformers.cue_attention_rows` does over a contiguous cache.
They run on any device and are tested on the CPU against the transformers readout.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from .vllm.layouts import PackedKeys


def _check_block_table(block_table: torch.Tensor, seq_len: int, block_size: int) -> None:
    needed = -(-seq_len // block_size)
    if block_table.shape[-1] < needed:
        raise ValueError(
            f"block table has {block_table.shape[-1]} blocks; {seq_len} tokens need {needed} "
            f"blocks of {block_size}"
        )


def gather_keys(
    key_cache: torch.Tensor | PackedKeys,
    block_table: torch.Tensor,
    start: int,
    end: int,
    kv_heads: torch.Tensor,
) -> torch.Tensor:
    """Keys of positions ``start..end-1`` of one sequence for some key heads.

    Args:
        key_cache: (num_blocks, block_size, num_kv_heads, head_dim).
        block_table: (num_blocks_of_sequence,) physical block ids.
        kv_heads: (u,) key-head indices.

    Returns:
        (u, end - start, head_dim) in the cache's dtype.
    """
    block_size = key_cache.shape[1]
    positions = torch.arange(start, end, device=key_cache.device)
    blocks = block_table.to(key_cache.device, torch.long)[positions // block_size]
    offsets = positions % block_size
    keys = key_cache[blocks[:, None], offsets[:, None], kv_heads.to(key_cache.device)[None, :]]  # (n, u, d)
    return keys.permute(1, 0, 2)


def _mask_scores(
    scores: torch.Tensor,
    q_pos: torch.Tensor,
    k_pos: torch.Tensor,
    softcap: float | None,
    sliding_window: int | None,
) -> torch.Tensor:
    """Soft-cap, then causal (and sliding-window) masking; ``q_pos`` (..., w, 1), ``k_pos`` (..., 1, n)."""
    if softcap:
        scores = torch.tanh(scores / softcap) * softcap
    allowed = k_pos <= q_pos
    if sliding_window:
        allowed = allowed & (k_pos > q_pos - sliding_window)
    return scores.masked_fill(~allowed, float("-inf"))


def paged_cue_rows(
    cue_queries: torch.Tensor,
    key_cache: torch.Tensor | PackedKeys,
    block_table: torch.Tensor,
    seq_len: int,
    heads: torch.Tensor,
    scaling: float,
    softcap: float | None = None,
    sliding_window: int | None = None,
    query_positions: torch.Tensor | None = None,
    chunk_tokens: int = 16384,
) -> torch.Tensor:
    """Attention rows of cue queries over one sequence's keys in a paged cache.

    Args:
        cue_queries: (w, num_q_heads, head_dim), post-RoPE (post q-norm), as the attention layer
            received them.
        key_cache: (num_blocks, block_size, num_kv_heads, head_dim), post-RoPE keys.
        block_table: (>= ceil(seq_len / block_size),) physical block ids of the sequence.
        seq_len: number of keys of the sequence in the cache.
        heads: (h,) query-head indices; grouped-query head ``q`` reads key head ``q // n_rep``.
        scaling: the layer's softmax scale (``head_dim ** -0.5`` for most models).
        softcap: logit soft-capping (Gemma 2), None or 0 for none.
        sliding_window: the layer's window (a query sees the last ``sliding_window`` keys), or None.
        query_positions: (w,) positions of the queries; default ``seq_len - w .. seq_len - 1``.
        chunk_tokens: keys are gathered and upcast this many at a time, to bound memory.

    Returns:
        (h, w, seq_len) float32 rows that each sum to 1.
    """
    w, num_q_heads, _ = cue_queries.shape
    if w > seq_len:
        raise ValueError(f"{w} cue queries but only {seq_len} keys")
    _check_block_table(block_table, seq_len, key_cache.shape[1])
    device = key_cache.device
    heads = heads.to(device, torch.long)
    n_rep = num_q_heads // key_cache.shape[2]
    if query_positions is None:
        query_positions = torch.arange(seq_len - w, seq_len, device=device)
    q = cue_queries.to(device)[:, heads].permute(1, 0, 2).float()  # (h, w, d)
    kv_of_head = heads // n_rep
    kv_heads, group = torch.unique(kv_of_head, return_inverse=True)  # (u,), (h,)
    scores = torch.empty(len(heads), w, seq_len, device=device, dtype=torch.float32)
    members = [torch.nonzero(group == j).flatten() for j in range(len(kv_heads))]
    for start in range(0, seq_len, chunk_tokens):
        end = min(seq_len, start + chunk_tokens)
        keys = gather_keys(key_cache, block_table, start, end, kv_heads).float()  # (u, n, d)
        for j, idx in enumerate(members):  # per key head: no copy of the keys per query head
            scores[idx, :, start:end] = torch.matmul(q[idx], keys[j].transpose(-1, -2)) * scaling
    q_pos = query_positions.to(device)[None, :, None]
    k_pos = torch.arange(seq_len, device=device)[None, None, :]
    return torch.softmax(_mask_scores(scores, q_pos, k_pos, softcap, sliding_window), dim=-1)


def paged_cue_rows_batch(
    cue_queries: torch.Tensor,
    key_cache: torch.Tensor,
    block_tables: torch.Tensor,
    seq_lens: torch.Tensor,
    heads: torch.Tensor,
    scaling: float,
    softcap: float | None = None,
    sliding_window: int | None = None,
) -> torch.Tensor:
    """:func:`paged_cue_rows` for several sequences at once (the last ``w`` tokens of each are the cue).

    Args:
        cue_queries: (S, w, num_q_heads, head_dim).
        key_cache: (num_blocks, block_size, num_kv_heads, head_dim).
        block_tables: (S, max_blocks); entries past a sequence's blocks are ignored (any value).
        seq_lens: (S,) keys per sequence, each >= w.

    Returns:
        (S, h, w, max(seq_lens)) float32; row entries past a sequence's length are 0.
    """
    num_seqs, w, num_q_heads, _ = cue_queries.shape
    device = key_cache.device
    seq_lens = seq_lens.to(device, torch.long)
    if int(seq_lens.min()) < w:
        raise ValueError(f"{w} cue queries but a sequence has only {int(seq_lens.min())} keys")
    block_size = key_cache.shape[1]
    max_len = int(seq_lens.max())
    _check_block_table(block_tables, max_len, block_size)
    heads = heads.to(device, torch.long)
    n_rep = num_q_heads // key_cache.shape[2]
    positions = torch.arange(max_len, device=device)
    blocks = block_tables.to(device, torch.long)[:, positions // block_size]  # (S, L)
    valid = positions[None, :] < seq_lens[:, None]  # (S, L)
    blocks = torch.where(valid, blocks, torch.zeros_like(blocks)).clamp(0, key_cache.shape[0] - 1)
    keys = key_cache[
        blocks[..., None], (positions % block_size)[None, :, None], (heads // n_rep)[None, None, :]
    ]
    keys = keys.permute(0, 2, 1, 3).float()  # (S, h, L, d)
    q = cue_queries.to(device)[:, :, heads].permute(0, 2, 1, 3).float()  # (S, h, w, d)
    scores = torch.matmul(q, keys.transpose(-1, -2)) * scaling  # (S, h, w, L)
    q_pos = (seq_lens[:, None] - w + torch.arange(w, device=device)[None, :])[:, None, :, None]
    k_pos = positions[None, None, None, :]
    scores = _mask_scores(scores, q_pos, k_pos, softcap, sliding_window)
    return torch.softmax(scores, dim=-1)


def scatter_to_paged(
    keys: torch.Tensor,
    block_size: int,
    num_blocks: int | None = None,
    key_cache: torch.Tensor | None = None,
    free_blocks: list[int] | None = None,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Write one sequence's keys into a paged cache at shuffled blocks, as vLLM's allocator might.

    Args:
        keys: (seq_len, num_kv_heads, head_dim).
        key_cache: an existing cache to write into (several sequences share one cache); else a new
            zero cache of ``num_blocks`` blocks.
        free_blocks: blocks this sequence may use (taken from the front); default all, shuffled.

    Returns:
        (key_cache, block_table): the cache and the sequence's (ceil(seq_len / block_size),) block ids.
    """
    seq_len, kv_heads, head_dim = keys.shape
    needed = -(-seq_len // block_size)
    if key_cache is None:
        num_blocks = num_blocks or needed
        key_cache = torch.zeros(
            num_blocks, block_size, kv_heads, head_dim, dtype=keys.dtype, device=keys.device
        )
    if free_blocks is None:
        free_blocks = torch.randperm(key_cache.shape[0], generator=generator).tolist()
    if len(free_blocks) < needed:
        raise ValueError(f"{seq_len} tokens need {needed} blocks; {len(free_blocks)} are free")
    table = torch.tensor(free_blocks[:needed], dtype=torch.long)
    del free_blocks[:needed]
    positions = torch.arange(seq_len)
    key_cache[
        table[positions // block_size].to(key_cache.device), (positions % block_size).to(key_cache.device)
    ] = keys.to(key_cache.dtype)
    return key_cache, table
