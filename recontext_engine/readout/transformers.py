"""Attention readout on transformers, through a registered attention function (no copied model files).

The model runs its usual SDPA attention. For the selected layers, while a capture is active,
the wrapper also computes the attention rows of the last ``w`` queries (post-RoPE, post q/k-norm,
exactly as the model computed them) over every cached key, for the selected query heads only:
memory O(|H| * w * n), never O(n^2). After the deepest selected layer the pass stops (unless
it keeps its tokens in the cache for the generation: then it runs every layer).
"""

from __future__ import annotations

import inspect
import sys
import threading
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import torch
from tqdm.auto import tqdm
from transformers import AttentionInterface, DynamicCache
from transformers.cache_utils import CacheLayerMixin, DynamicLayer
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, eager_mask, sdpa_mask

from ..config import GenerationConfig
from ..decoding import next_token
from ..errors import PromptTooLongError, ReContextError, UnsupportedModelError
from ..grammar import SchemaCompiler
from ..heads.headset import HeadSet
from ..protocol import Backend

IMPLEMENTATION = "recontext"


@dataclass
class ReadoutCapture:
    """What one read pass collects: per selected layer, rows of shape (heads, w, total_len)."""

    heads_by_layer: dict[int, torch.Tensor]
    cue_window: int
    total_len: int
    stop_layer: int
    rows: dict[int, torch.Tensor] = field(default_factory=dict)
    cue_index: torch.Tensor | None = None  # (q,) query positions to read instead of the last w


class _StopForward(Exception):
    """Raised after the deepest selected layer: the rest of the network is not needed."""


_ACTIVE: ContextVar[ReadoutCapture | None] = ContextVar("recontext_capture", default=None)


def cue_attention_rows(
    query: torch.Tensor,
    key: torch.Tensor,
    heads: torch.Tensor,
    cue_window: int,
    scaling: float,
    attention_mask: torch.Tensor | None = None,
    softcap: float | None = None,
    sliding_window: int | None = None,
    cue_index: torch.Tensor | None = None,
) -> torch.Tensor:
    """Softmax attention rows of the last ``cue_window`` queries for some query heads.

    Args:
        query: (1, num_heads, q_len, head_dim), post-RoPE.
        key: (1, num_kv_heads, kv_len, head_dim), post-RoPE, the whole cache.
        heads: (h,) query-head indices; grouped-query heads map to key head ``head // n_rep``.
        attention_mask: (1, 1|num_heads, q_len, kv_len), bool (True = attend) or additive float;
            None means causal.
        cue_index: (c,) query positions to read instead of the last ``cue_window`` (needs
            ``attention_mask``).

    Returns:
        (h, w, kv_len) float32 rows that each sum to 1 (w = c with ``cue_index``).
    """
    q_len, kv_len = query.shape[2], key.shape[2]
    w = min(cue_window, q_len)
    n_rep = query.shape[1] // key.shape[1]
    if cue_index is None:
        cue_index = torch.arange(q_len - w, q_len, device=query.device)
    elif attention_mask is None:
        raise ValueError("cue_index needs an attention mask")
    q = query[0, heads][:, cue_index].float()  # (h, w, d)
    k = key[0, heads // n_rep].float()  # (h, kv_len, d)
    scores = torch.matmul(q, k.transpose(-1, -2)) * scaling  # (h, w, kv_len)
    if softcap is not None:
        scores = torch.tanh(scores / softcap) * softcap
    if attention_mask is not None:
        mask = attention_mask[0, :, cue_index, :kv_len]
        if mask.shape[0] != 1:
            mask = mask[heads]
        if mask.dtype == torch.bool:
            scores = scores.masked_fill(~mask, float("-inf"))
        else:
            scores = scores + mask.float()
    else:
        q_pos = torch.arange(kv_len - w, kv_len, device=key.device)[:, None]
        k_pos = torch.arange(kv_len, device=key.device)[None, :]
        allowed = k_pos <= q_pos
        if sliding_window:
            allowed &= k_pos > q_pos - sliding_window
        scores = scores.masked_fill(~allowed, float("-inf"))
    return torch.softmax(scores, dim=-1)


def _capture(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None,
    kwargs: dict[str, Any],
) -> None:
    capture = _ACTIVE.get()
    layer = getattr(module, "layer_idx", None)
    if capture is None or layer not in capture.heads_by_layer:
        return
    rows = cue_attention_rows(
        query,
        key,
        capture.heads_by_layer[layer].to(query.device),
        capture.cue_window,
        scaling if scaling is not None else query.shape[-1] ** -0.5,
        attention_mask,
        kwargs.get("softcap"),
        kwargs.get("sliding_window"),
        None if capture.cue_index is None else capture.cue_index.to(query.device),
    )
    if rows.shape[-1] < capture.total_len:  # a cache that kept only the recent keys
        rows = torch.nn.functional.pad(rows, (capture.total_len - rows.shape[-1], 0))
    capture.rows[layer] = rows.cpu()
    if layer == capture.stop_layer:
        raise _StopForward


def _sdpa_readout(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    _capture(module, query, key, attention_mask, scaling, kwargs)
    if _grouped_on_cpu(module, query, attention_mask, dropout, kwargs):
        # transformers copies every cached key and value once per query head of a group (repeat_kv)
        # whenever a mask is given; on CPU, SDPA reads the groups itself: the same output, 8% less time
        # for a read pass over a 4K-token cache (0.429 -> 0.394 s, SmolLM2-135M, 2 cores).
        output = torch.nn.functional.scaled_dot_product_attention(
            query, key, value, attn_mask=attention_mask, scale=scaling, enable_gqa=True
        )
        return output.transpose(1, 2).contiguous(), None
    return sdpa_attention_forward(
        module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs
    )


def _grouped_on_cpu(
    module: torch.nn.Module,
    query: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float,
    kwargs: dict[str, Any],
) -> bool:
    """Whether SDPA can take the grouped keys and the mask as they are: CPU, several query tokens
    (one token already skips the copy), no dropout and nothing SDPA would have to fold into the mask."""
    groups = getattr(module, "num_key_value_groups", 1)
    return (
        query.device.type == "cpu"
        and groups > 1
        and query.shape[2] > 1
        and attention_mask is not None
        and not dropout
        and all(kwargs.get(name) is None for name in ("softcap", "position_bias", "s_aux", "sinks"))
    )


def _eager_readout(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """For models SDPA cannot run (logit soft-capping): the model's own eager attention."""
    _capture(module, query, key, attention_mask, scaling, kwargs)
    eager = sys.modules[type(module).__module__].eager_attention_forward
    return eager(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs)


_IMPLEMENTATIONS: dict[str, tuple[Callable[..., Any], Callable[..., Any]]] = {
    IMPLEMENTATION: (_sdpa_readout, sdpa_mask),
    IMPLEMENTATION + "_eager": (_eager_readout, eager_mask),
}


def install_readout(model: Any) -> None:
    """Switch ``model`` to the readout attention (its usual kernel plus capture); never on import."""
    for name, (attention, mask) in _IMPLEMENTATIONS.items():
        AttentionInterface.register(name, attention)
        AttentionMaskInterface.register(name, mask)
    text_config = model.config.get_text_config()
    needs_eager = not model._supports_sdpa or getattr(text_config, "attn_logit_softcapping", None)
    model.set_attn_implementation(IMPLEMENTATION + "_eager" if needs_eager else IMPLEMENTATION)


class ReservedLayer(DynamicLayer):
    """A cache layer that appends in place into a buffer with ``RESERVE`` spare positions.

    ``DynamicLayer`` concatenates, copying the whole layer at every read pass and every decoded
    token; here the buffer grows (by the needed size plus the reserve) only when it is full. Keys
    and values are views of the buffer, so cropping them and appending again reuses the space.
    """

    RESERVE = 256

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
            self._buffers: tuple[torch.Tensor, torch.Tensor] | None = None
        assert self.keys is not None and self.values is not None  # set by lazy_initialization
        start = self.keys.shape[-2] if self.keys.dim() == 4 else 0
        end = start + key_states.shape[-2]
        if self._buffers is None or end > self._buffers[0].shape[-2]:
            self._buffers = (
                _grown(self.keys, key_states, start, end + self.RESERVE),
                _grown(self.values, value_states, start, end + self.RESERVE),
            )
        keys, values = self._buffers
        keys[..., start:end, :] = key_states
        values[..., start:end, :] = value_states
        self.keys, self.values = keys[..., :end, :], values[..., :end, :]
        return self.keys, self.values

    def reserve(self, capacity: int) -> None:
        """Grow the buffer to hold ``capacity`` positions (exactly; no spare beyond it)."""
        buffers = getattr(self, "_buffers", None)
        if not self.is_initialized or buffers is None or capacity <= buffers[0].shape[-2]:
            return
        assert self.keys is not None and self.values is not None  # the layer is initialized
        length = self.keys.shape[-2]
        self._buffers = (
            _grown(self.keys, self.keys, length, capacity),
            _grown(self.values, self.values, length, capacity),
        )
        keys, values = self._buffers
        self.keys, self.values = keys[..., :length, :], values[..., :length, :]


def _grown(current: torch.Tensor, incoming: torch.Tensor, length: int, capacity: int) -> torch.Tensor:
    shape = (*incoming.shape[:-2], capacity, incoming.shape[-1])
    buffer = torch.empty(shape, dtype=incoming.dtype, device=incoming.device)
    if length:
        buffer[..., :length, :] = current[..., :length, :]
    return buffer


class ReservedCache(DynamicCache):
    """A ``DynamicCache`` of :class:`ReservedLayer` (no config: every layer keeps all positions)."""

    def __init__(self) -> None:
        super().__init__()
        self.layer_class_to_replicate = ReservedLayer

    def reserve(self, capacity: int) -> None:
        """Make every layer hold ``capacity`` positions without growing again (one layer copied at a time)."""
        for layer in self.layers:
            if isinstance(layer, ReservedLayer):
                layer.reserve(capacity)


def truncate_cache(cache: DynamicCache, length: int) -> None:
    """Drop cached positions from ``length`` on; layers a stopped pass never reached are untouched."""
    for layer in cache.layers:
        if (  # a linear-attention layer keeps no keys; a DummyLayer's are None
            isinstance(layer, CacheLayerMixin)
            and layer.is_initialized
            and layer.keys is not None
            and layer.values is not None
            and layer.keys.shape[-2] > length
        ):
            layer.keys = layer.keys[..., :length, :]
            layer.values = layer.values[..., :length, :]


class TransformersBackend(Backend):
    """Prefill, read passes and decoding on a transformers causal LM.

    Every model call holds ``lock``; each request keeps its own cache, so requests from several
    threads interleave safely step by step.
    """

    name = "transformers"
    can_crop = True

    def __init__(
        self, model: Any, prefill_chunk: int = 1024, progress: bool = False, tokenizer: Any = None
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer  # for grammar-constrained decoding (GenerationConfig.json_schema)
        self.lock = threading.RLock()
        self.prefill_chunk = prefill_chunk
        self.progress = progress  # a bar on stderr for prefills of more than one chunk
        install_readout(model)
        # transformers 5.24 renamed ``past_key_values`` to ``cache``; accept both generations.
        accepts_cache = "cache" in inspect.signature(model.forward).parameters
        self._cache_kw = "cache" if accepts_cache else "past_key_values"
        self.device = next(model.parameters()).device
        self._check_readable()

    @property
    def window(self) -> int:
        config = self.model.config.get_text_config()
        return int(getattr(config, "max_position_embeddings", 0) or 0) or 1 << 30

    def input_embeddings(self) -> torch.Tensor:
        """The (vocab, dim) input-embedding matrix (for the embedding signal)."""
        return self.model.get_input_embeddings().weight.detach()

    @property
    def eos_ids(self) -> set[int]:
        """End-of-sequence token ids from the model's generation config."""
        eos = getattr(self.model.generation_config, "eos_token_id", None)
        eos = eos if eos is not None else getattr(self.model.config, "eos_token_id", None)
        return set(eos if isinstance(eos, list) else [eos]) - {None}

    def _check_readable(self) -> None:
        """Read one head of a 4-token probe; refuse the model by name if nothing comes back."""
        name = type(self.model).__name__
        try:
            rows = self.read(self.prefill([]), 0, [1, 2, 3, 4], HeadSet(((0, 0),)), cue_window=2)
        except Exception as exc:
            raise UnsupportedModelError(f"the attention of {name} cannot be read: {exc}") from None
        if rows.shape != (1, 2, 4):
            raise UnsupportedModelError(
                f"the attention of {name} cannot be read (rows of shape {tuple(rows.shape)})"
            )

    def new_cache(self) -> DynamicCache:
        return ReservedCache()

    @torch.inference_mode()
    def prefill(self, ids: list[int], cache: DynamicCache | None = None) -> DynamicCache:
        """Run ``ids`` through the model in chunks, returning the KV cache (no logits computed)."""
        cache = cache if cache is not None else self.new_cache()
        decoder = self.model.get_decoder()
        quiet = not self.progress or len(ids) <= self.prefill_chunk
        with tqdm(total=len(ids), desc="recontext: prefill", unit="tok", leave=False, disable=quiet) as bar:
            for start in range(0, len(ids), self.prefill_chunk):
                chunk = torch.tensor([ids[start : start + self.prefill_chunk]], device=self.device)
                with self.lock:
                    decoder(input_ids=chunk, **{self._cache_kw: cache}, use_cache=True)
                bar.update(chunk.shape[1])
        return cache

    @torch.inference_mode()
    def read(
        self,
        cache: DynamicCache,
        prefix_len: int,
        suffix_ids: list[int],
        heads: HeadSet,
        cue_window: int,
        keep: bool = False,
    ) -> torch.Tensor:
        """Attention rows of the last ``cue_window`` tokens of ``[prefix; suffix]`` for ``heads``.

        The cache holds the prefix; it is restored to ``prefix_len`` positions afterwards, or with
        ``keep`` it holds ``[prefix; suffix]`` (the pass then runs every layer), for a later pass or
        the generation to go on from (see :meth:`crop`).

        Returns:
            (len(heads), w, prefix_len + len(suffix_ids)) float32 rows, in ``heads`` order.
        """
        kept = len(suffix_ids) if keep else 0
        return self._read_pass(cache, prefix_len, suffix_ids, heads, cue_window, keep=kept)

    def crop(self, cache: DynamicCache, length: int) -> None:
        """Keep the first ``length`` cached positions (what a ``keep`` read left beyond them goes)."""
        truncate_cache(cache, length)

    @property
    def shares_reads(self) -> bool:
        """Whether :meth:`read_branches` runs as one forward (no sliding-window layers to mask)."""
        config = self.model.config.get_text_config()
        layer_types = getattr(config, "layer_types", None) or ()
        return not getattr(config, "sliding_window", None) and "sliding_attention" not in layer_types

    @torch.inference_mode()
    def read_branches(
        self,
        cache: DynamicCache,
        prefix_len: int,
        shared_ids: list[int],
        branches: list[list[int]],
        heads: HeadSet,
        cue_window: int,
        keep: bool = False,
    ) -> list[torch.Tensor]:
        """``[read(cache, prefix_len, shared_ids + b, heads, cue_window) for b in branches]`` in one pass.

        The shared tokens are computed once and every branch attends to them and to itself only
        (a tree mask, with each branch's positions restarting after the shared tokens), so the
        rows equal those of separate reads to float tolerance. Models with sliding-window layers
        read the branches one after another. With ``keep`` the cache holds
        ``[prefix; shared; branches[0]]`` afterwards, as after ``read(..., keep=True)``.

        Returns:
            Per branch, (len(heads), w, prefix_len + len(shared_ids) + len(branch)) float32 rows.
        """
        if not branches or any(not branch for branch in branches):
            raise ValueError("read_branches needs at least one branch, each with at least one token")
        if not self.shares_reads or len(branches) == 1:
            return super().read_branches(cache, prefix_len, shared_ids, branches, heads, cue_window, keep)
        shared = len(shared_ids)
        lengths = [len(b) for b in branches]
        # Forward order: shared, branch 0, branch 1, ...; ``owner`` -1 marks the shared tokens.
        owner = torch.cat([torch.full((shared,), -1)] + [torch.full((n,), i) for i, n in enumerate(lengths)])
        offset = torch.cat([torch.arange(shared)] + [shared + torch.arange(n) for n in lengths])
        order = torch.arange(len(owner))
        allowed = (order[None, :] <= order[:, None]) & (
            (owner[None, :] == -1) | (owner[None, :] == owner[:, None])
        )  # (m, m): query i may see new token j
        starts = [shared + sum(lengths[:i]) for i in range(len(lengths))]
        # Per branch, its tokens in forward order: the shared ones, then its own.
        own = [
            torch.cat([torch.arange(shared), start + torch.arange(n)]) for start, n in zip(starts, lengths)
        ]
        cues = [tokens[-cue_window:] for tokens in own]
        dtype = next(self.model.parameters()).dtype
        mask = torch.zeros(1, 1, len(owner), prefix_len + len(owner), dtype=dtype)
        mask[0, 0, :, prefix_len:].masked_fill_(~allowed, torch.finfo(dtype).min)
        rows = self._read_pass(
            cache,
            prefix_len,
            shared_ids + [t for b in branches for t in b],
            heads,
            cue_window,
            attention_mask=mask.to(self.device),
            position_ids=(prefix_len + offset)[None].to(self.device),
            cue_index=torch.cat(cues),
            keep=shared + lengths[0] if keep else 0,
        )  # (h, sum of cue lengths, prefix_len + m)
        results, row = [], 0
        for tokens, cue in zip(own, cues):
            columns = torch.cat([torch.arange(prefix_len), prefix_len + tokens])
            results.append(rows[:, row : row + len(cue)][..., columns])
            row += len(cue)
        return results

    def _read_pass(
        self,
        cache: DynamicCache,
        prefix_len: int,
        suffix_ids: list[int],
        heads: HeadSet,
        cue_window: int,
        keep: int = 0,
        **tree: torch.Tensor,
    ) -> torch.Tensor:
        """One forward of ``suffix_ids`` after the cached prefix; the cache keeps ``keep`` of them."""
        total = prefix_len + len(suffix_ids)
        if total > self.window:
            raise PromptTooLongError(f"prompt of {total} tokens exceeds the model window of {self.window}")
        by_layer = heads.by_layer()
        capture = ReadoutCapture(
            heads_by_layer={layer: torch.tensor(hs) for layer, hs in by_layer.items()},
            cue_window=cue_window,
            total_len=total,
            # kept tokens need their keys and values in every layer
            stop_layer=-1 if keep else heads.max_layer,
            cue_index=tree.pop("cue_index", None),
        )
        token = _ACTIVE.set(capture)
        try:
            with self.lock:
                self.model.get_decoder()(
                    input_ids=torch.tensor([suffix_ids], device=self.device),
                    **{self._cache_kw: cache},
                    use_cache=True,
                    **tree,
                )
        except _StopForward:
            pass
        finally:
            _ACTIVE.reset(token)
            truncate_cache(cache, prefix_len + keep)
        missing = sorted(set(by_layer) - set(capture.rows))
        if missing:
            raise UnsupportedModelError(f"no attention was captured at layer(s) {missing}")
        order = {layer: {h: i for i, h in enumerate(hs)} for layer, hs in by_layer.items()}
        return torch.stack([capture.rows[layer][order[layer][head]] for layer, head in heads.heads])

    @torch.inference_mode()
    def next_logits(self, cache: DynamicCache, ids: list[int]) -> torch.Tensor:
        """Append ``ids`` to the cache and return the logits of the last position, (vocab,) float32."""
        with self.lock:
            out = self.model(
                input_ids=torch.tensor([ids], device=self.device),
                **{self._cache_kw: cache},
                use_cache=True,
                logits_to_keep=1,
            )
        return out.logits[0, -1].float()

    @torch.inference_mode()
    def generate(
        self, cache: DynamicCache, suffix_ids: list[int], generation: GenerationConfig, eos_ids: set[int]
    ) -> Iterator[int]:
        """Generate after ``[cache; suffix]``; yields token ids, stops at an end token or the length limit."""
        if cache.get_seq_length() + len(suffix_ids) + 1 > self.window:
            raise PromptTooLongError(
                f"prompt of {cache.get_seq_length() + len(suffix_ids)} tokens leaves no room in the "
                f"model window of {self.window}"
            )
        generator = torch.Generator().manual_seed(generation.seed) if generation.temperature > 0 else None
        ids = suffix_ids
        room = self.window - cache.get_seq_length() - len(suffix_ids)
        if isinstance(cache, ReservedCache):
            # Grow once to what this generation can use: growing by the reserve mid-way would leave
            # the whole cache that much larger (a replayed prompt plus the answer often passes it).
            cache.reserve(cache.get_seq_length() + len(suffix_ids) + min(generation.max_new_tokens, room))
        schema = generation.json_schema
        mask = self.schemas.mask(schema, eos_ids) if schema is not None else None
        for _ in range(min(generation.max_new_tokens, room)):
            logits = self.next_logits(cache, ids)
            token = next_token(mask.apply(logits) if mask is not None else logits, generation, generator)
            if token in eos_ids:
                return
            if mask is not None:
                mask.accept(token)
            yield token
            ids = [token]

    @cached_property
    def schemas(self) -> SchemaCompiler:
        """JSON Schemas compiled to token masks for this model's tokenizer."""
        if self.tokenizer is None:
            raise ReContextError("json_schema needs the tokenizer: TransformersBackend(tokenizer=...)")
        vocab = int(self.model.get_output_embeddings().weight.shape[0])
        return SchemaCompiler(self.tokenizer, vocab)
