"""The key half of one layer's paged KV cache, in every layout vLLM has used, as one view.

Every reader returns a view of shape ``(num_blocks, block_size, kv_heads, head_dim)`` (token ``t``
of a sequence in block ``block_table[t // block_size]`` at offset ``t % block_size``), which
:func:`~recontext_engine.readout.paged.paged_cue_rows` scores. Layouts, as read from vLLM's source:

- ``"cpu"``: the CPU backend (``CPU_ATTN``), ``(num_blocks, kv_heads, block_size, 2 * head_dim)``
  viewed as ``(num_blocks, kv_heads, 2 * block_size, head_dim)``: keys are the first
  ``block_size * head_dim`` elements of each (block, head), values the next ones. Inside that
  region the CPU kernel packs the keys for its instruction set (``vec`` stores them transposed,
  ``(head_dim, block_size)``), so :func:`cpu_key_order` asks the kernel itself where each
  (token, dim) lands and :class:`PackedKeys` reads through that order.
- ``"heads_tokens_kv"``: FlashAttention and Triton from 0.26, ``(num_blocks, kv_heads, block_size,
  2 * head_dim)``: each token's key and value side by side in its last dimension.
- ``"blocks_2"``: ``(num_blocks, 2, block_size, kv_heads, head_dim)`` (FlashAttention/Triton 0.24-0.25).
- ``"2_blocks"``: ``(2, num_blocks, block_size, kv_heads, head_dim)`` (FlashAttention 0.11-0.22).

The two 4-D layouts have the same shape and differ only in where keys sit, so a reader that takes
one for the other reads wrong numbers silently: :func:`check_keys` compares the keys found at
``slot_mapping`` with the ones vLLM just wrote, at every captured step.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ...errors import UnsupportedModelError

READABLE_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
# Backends whose metadata or cache this readout cannot read, by the name of their impl class.
REFUSED = {
    "FlashInfer": "FlashInfer's metadata has no query_start_loc/seq_lens; pass attention_backend="
    "'FLASH_ATTN' (or 'TRITON_ATTN')",
    "MLA": "MLA caches a compressed latent, not per-head keys",
}


class PackedKeys:
    """Keys stored in a packed order inside each (block, head) region; indexed like a
    ``(num_blocks, block_size, kv_heads, head_dim)`` tensor with ``[blocks, offsets, heads]``.

    Args:
        region: (num_blocks, kv_heads, block_size * head_dim), the key half of each (block, head).
        order: (block_size, head_dim) long, where (token offset, dim) lives inside a region.
    """

    def __init__(self, region: torch.Tensor, order: torch.Tensor) -> None:
        self.region, self.order = region, order.to(region.device, torch.long)
        blocks, heads, _ = region.shape
        self.shape = torch.Size((blocks, *order.shape[:1], heads, order.shape[1]))
        self.device, self.dtype = region.device, region.dtype

    def __getitem__(self, index: tuple[torch.Tensor, ...]) -> torch.Tensor:
        blocks, offsets = index[0], index[1]
        heads = index[2] if len(index) > 2 else torch.arange(self.shape[2], device=self.device)
        return self.region[blocks[..., None], heads[..., None], self.order[offsets]]


def cpu_key_order(
    write: Callable[..., None], dtype: torch.dtype, block_size: int, head_size: int
) -> torch.Tensor:
    """(block_size, head_dim) offsets of each key element inside a (block, head) region, found by
    letting the CPU kernel ``write(key, value, key_cache, value_cache, slot_mapping)`` store coded
    keys into one block. Codes stay below 256, exact in every float dtype."""
    codes = (
        torch.arange(block_size)[:, None].expand(block_size, head_size),
        (torch.arange(head_size) % 128)[None, :].expand(block_size, head_size),
        (torch.arange(head_size) // 128)[None, :].expand(block_size, head_size),
    )
    found = []
    for code in codes:
        kv = torch.zeros(1, 1, 2 * block_size, head_size, dtype=dtype)
        key_half, value_half = kv.chunk(2, dim=2)
        key = (code + 1).to(dtype)[:, None, :]  # (block_size, 1 head, head_dim)
        write(key, torch.zeros_like(key), key_half, value_half, torch.arange(block_size))
        found.append(kv[0, 0, :block_size].reshape(-1).float().round().long() - 1)
    token, low, high = found
    dim = low + 128 * high
    order = torch.full((block_size, head_size), -1, dtype=torch.long)
    valid = (token >= 0) & (token < block_size) & (dim >= 0) & (dim < head_size)
    order[token[valid], dim[valid]] = torch.nonzero(valid).flatten()
    if bool((order < 0).any()) or len(set(order.flatten().tolist())) != order.numel():
        raise UnsupportedModelError("the CPU attention kernel's key packing could not be mapped")
    return order


def _cpu(kv: torch.Tensor, kv_heads: int, head_size: int, order: torch.Tensor | None = None) -> PackedKeys:
    blocks, heads, block_size, _ = kv.shape
    if order is None:  # keys stored plainly, (block_size, head_dim) per (block, head)
        order = torch.arange(block_size * head_size).view(block_size, head_size)
    return PackedKeys(kv.view(blocks, heads, 2, block_size * head_size)[:, :, 0], order)


def _heads_tokens_kv(
    kv: torch.Tensor, kv_heads: int, head_size: int, order: torch.Tensor | None = None
) -> torch.Tensor:
    return kv.transpose(1, 2)[..., :head_size]


def _blocks_2(
    kv: torch.Tensor, kv_heads: int, head_size: int, order: torch.Tensor | None = None
) -> torch.Tensor:
    return kv[:, 0]


def _2_blocks(
    kv: torch.Tensor, kv_heads: int, head_size: int, order: torch.Tensor | None = None
) -> torch.Tensor:
    return kv[0]


# name -> (does the shape fit, reader); the shape test takes (shape, kv_heads, head_size).
LAYOUTS: dict[str, tuple[Callable[..., bool], Callable[..., torch.Tensor | PackedKeys]]] = {
    "cpu": (lambda s, h, d: len(s) == 4 and s[1] == h and s[3] == 2 * d, _cpu),
    "heads_tokens_kv": (lambda s, h, d: len(s) == 4 and s[1] == h and s[3] == 2 * d, _heads_tokens_kv),
    "blocks_2": (lambda s, h, d: len(s) == 5 and s[1] == 2 and tuple(s[3:]) == (h, d), _blocks_2),
    "2_blocks": (lambda s, h, d: len(s) == 5 and s[0] == 2 and tuple(s[3:]) == (h, d), _2_blocks),
}


def refusal(impl_name: str) -> str | None:
    """Why the attention backend whose impl class is ``impl_name`` cannot be read, or None."""
    for marker, reason in REFUSED.items():
        if marker.lower() in impl_name.lower():
            return f"the paged readout cannot read vLLM's {impl_name}: {reason}"
    return None


def layout_of(impl_name: str, shape: tuple[int, ...], kv_heads: int, head_size: int) -> str:
    """The layout of a cache of ``shape`` kept by the backend whose impl class is ``impl_name``.

    Raises:
        UnsupportedModelError: a refused backend, or a shape no known layout has.
    """
    reason = refusal(impl_name)
    if reason:
        raise UnsupportedModelError(reason)
    if impl_name.upper().startswith("CPU"):
        candidates = ["cpu"]
    elif len(shape) == 5 and shape[0] == 2 and shape[1] == 2:
        # two blocks of a 5-D cache: both 5-D layouts fit; the older one is the (2, ...) one
        candidates = ["blocks_2", "2_blocks"]
    else:
        candidates = ["heads_tokens_kv", "blocks_2", "2_blocks"]
    for name in candidates:
        fits, _ = LAYOUTS[name]
        if fits(tuple(shape), kv_heads, head_size):
            return name
    raise UnsupportedModelError(
        f"unsupported paged KV layout {tuple(shape)} of {impl_name} "
        f"for {kv_heads} key heads of size {head_size}"
    )


def key_cache(
    kv_cache: torch.Tensor, layout: str, kv_heads: int, head_size: int, order: torch.Tensor | None = None
) -> torch.Tensor | PackedKeys:
    """(num_blocks, block_size, kv_heads, head_dim) view of the keys of ``kv_cache`` in ``layout``;
    ``order``: the CPU kernel's packing (:func:`cpu_key_order`), for ``"cpu"`` only."""
    if kv_cache.dtype not in READABLE_DTYPES:
        raise UnsupportedModelError(
            f"the paged readout cannot read a {kv_cache.dtype} (quantized) KV cache; "
            "use kv_cache_dtype='auto'"
        )
    fits, read = LAYOUTS[layout]
    if not fits(tuple(kv_cache.shape), kv_heads, head_size):
        raise UnsupportedModelError(
            f"a KV cache of shape {tuple(kv_cache.shape)} is not in layout {layout!r} "
            f"for {kv_heads} key heads of size {head_size}"
        )
    return read(kv_cache, kv_heads, head_size, order)


def check_keys(
    keys: torch.Tensor | PackedKeys,
    written: torch.Tensor,
    slot_mapping: torch.Tensor,
    layout: str,
    atol: float = 1e-3,
) -> None:
    """Compare the keys read at ``slot_mapping`` with those vLLM passed to ``forward``.

    Args:
        keys: (num_blocks, block_size, kv_heads, head_dim) from :func:`key_cache`.
        written: (>= n, kv_heads, head_dim) the step's keys (rows past ``n`` are padding).
        slot_mapping: (n,) slots ``block * block_size + offset``; negative slots are padding.

    Raises:
        UnsupportedModelError: they differ, so ``layout`` is not how this cache stores keys.
    """
    slots = slot_mapping.to(keys.device, torch.long).flatten()
    n = slots.shape[0]
    valid = slots >= 0
    if not bool(valid.any()):
        return
    slots = slots[valid]
    block_size = keys.shape[1]
    heads = torch.arange(keys.shape[2], device=keys.device)
    found = keys[(slots // block_size)[:, None], (slots % block_size)[:, None], heads[None, :]].float()
    expected = written[:n][valid.to(written.device)].reshape(found.shape).to(found.device).float()
    scale = float(expected.abs().max()) or 1.0
    diff = float((found - expected).abs().max())
    if diff > atol * scale:
        raise UnsupportedModelError(
            f"the keys read in layout {layout!r} differ from the keys vLLM wrote at slot_mapping "
            f"(max |diff| {diff:.3g}, max |key| {scale:.3g}): this vLLM stores its KV cache another way"
        )
