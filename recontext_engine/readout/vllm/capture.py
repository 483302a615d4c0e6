"""One worker's capture: the armed read and the cue rows its attention layers produced so far."""

from __future__ import annotations

from typing import Any

import torch

from ..paged import paged_cue_rows
from .layouts import PackedKeys


class WorkerCapture:
    """One worker's capture state: the armed read and the cue rows collected so far.

    ``observe`` is called after an attention layer ran on a batch; it finds the read's sequence
    (the only one running, see :meth:`VLLMBackend._paged_read`), scores the cue queries of this step
    (chunked prefill may spread them over steps) and stores them by position.
    """

    def __init__(self) -> None:
        self.total = 0
        self.cue_window = 0
        self.heads_by_layer: dict[int, list[int]] = {}
        self.rows: dict[tuple[int, int], torch.Tensor] = {}
        self.filled: dict[tuple[int, int], torch.Tensor] = {}
        self.error: str | None = None

    @property
    def armed(self) -> bool:
        return bool(self.heads_by_layer)

    def arm(self, spec: dict[str, Any]) -> None:
        self.total = int(spec["total"])
        self.cue_window = int(spec["cue_window"])
        self.heads_by_layer = {}
        for layer, head in spec["heads"]:
            self.heads_by_layer.setdefault(int(layer), []).append(int(head))
        self.rows, self.filled, self.error = {}, {}, None

    def observe(
        self,
        layer: int,
        head_offset: int,
        query: torch.Tensor,
        key_cache: torch.Tensor | PackedKeys,
        query_start_loc: list[int],
        seq_lens: list[int],
        block_table: torch.Tensor,
        scaling: float,
        softcap: float | None,
        sliding_window: int | None,
    ) -> None:
        """Args: ``query`` (num_tokens, local_q_heads, head_dim) of this step; ``key_cache``
        (num_blocks, block_size, local_kv_heads, head_dim); ``block_table`` (num_reqs, max_blocks);
        ``head_offset``: global index of this worker's first query head (tensor parallelism)."""
        wanted = self.heads_by_layer.get(layer)
        if not wanted:
            return
        local_count = query.shape[1]
        local = [(g, g - head_offset) for g in wanted if head_offset <= g < head_offset + local_count]
        if not local:
            return
        total, first = self.total, self.total - self.cue_window
        matches = []
        for i in range(min(len(query_start_loc) - 1, len(seq_lens))):
            q_len = query_start_loc[i + 1] - query_start_loc[i]
            if q_len > 0 and first < seq_lens[i] <= total:
                matches.append(i)
        if len(matches) > 1:
            self.error = f"{len(matches)} sequences could be the read at layer {layer}"
            return
        if not matches:
            return
        i = matches[0]
        seq_len, q_len = seq_lens[i], query_start_loc[i + 1] - query_start_loc[i]
        lo = max(seq_len - q_len, first)
        start = query_start_loc[i] + lo - (seq_len - q_len)
        rows = paged_cue_rows(
            query[start : query_start_loc[i + 1]],
            key_cache,
            block_table[i],
            seq_len,
            torch.tensor([h for _, h in local]),
            scaling,
            softcap,
            sliding_window,
            query_positions=torch.arange(lo, seq_len),
        ).cpu()
        for j, (head, _) in enumerate(local):
            key = (layer, head)
            if key not in self.rows:
                self.rows[key] = torch.zeros(self.cue_window, total)
                self.filled[key] = torch.zeros(self.cue_window, dtype=torch.bool)
            self.rows[key][lo - first : seq_len - first, :seq_len] = rows[j]
            self.filled[key][lo - first : seq_len - first] = True

    def collect(self) -> dict[str, Any]:
        """Complete rows as ``[layer, head, float32 bytes]`` (msgpack-friendly), then disarm."""
        rows = [
            [layer, head, self.rows[(layer, head)].numpy().tobytes()]
            for (layer, head), filled in sorted(self.filled.items())
            if bool(filled.all())
        ]
        result = {"rows": rows, "error": self.error}
        self.heads_by_layer, self.rows, self.filled = {}, {}, {}
        return result
