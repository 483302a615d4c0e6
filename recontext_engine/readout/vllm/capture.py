"""One worker's capture: the armed reads and the cue rows its attention layers produced for them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from ..paged import paged_cue_rows
from .layouts import PackedKeys

EXCLUSIVE = ""  # the read id of a read armed without one: it must run alone (see WorkerCapture)


class ArmedRead:
    """One read: which heads to score at which cue positions, and the rows scored so far."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.total = int(spec["total"])
        self.cue_window = int(spec["cue_window"])
        self.heads_by_layer: dict[int, list[int]] = {}
        for layer, head in spec["heads"]:
            self.heads_by_layer.setdefault(int(layer), []).append(int(head))
        self.rows: dict[tuple[int, int], torch.Tensor] = {}
        self.filled: dict[tuple[int, int], torch.Tensor] = {}
        self.error: str | None = None

    def holds(self, seq_len: int, q_len: int) -> bool:
        """Whether a sequence of ``seq_len`` keys computing ``q_len`` queries can be this read."""
        return q_len > 0 and self.total - self.cue_window < seq_len <= self.total

    def observe(
        self,
        layer: int,
        local: list[tuple[int, int]],
        query: torch.Tensor,
        key_cache: torch.Tensor | PackedKeys,
        block_table: torch.Tensor,
        seq_len: int,
        scaling: float,
        softcap: float | None,
        sliding_window: int | None,
    ) -> None:
        """Score the cue queries among this step's ``query`` (the sequence's last ``len(query)``
        positions); ``local``: (global head, this worker's head) pairs."""
        first = self.total - self.cue_window
        lo = max(seq_len - len(query), first)
        rows = paged_cue_rows(
            query[lo - (seq_len - len(query)) :],
            key_cache,
            block_table,
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
                self.rows[key] = torch.zeros(self.cue_window, self.total)
                self.filled[key] = torch.zeros(self.cue_window, dtype=torch.bool)
            self.rows[key][lo - first : seq_len - first, :seq_len] = rows[j]
            self.filled[key][lo - first : seq_len - first] = True

    def result(self) -> dict[str, Any]:
        """Complete rows as ``[layer, head, float32 bytes]`` (msgpack-friendly) and the error."""
        rows = [
            [layer, head, self.rows[(layer, head)].numpy().tobytes()]
            for (layer, head), filled in sorted(self.filled.items())
            if bool(filled.all())
        ]
        return {"rows": rows, "error": self.error}


class WorkerCapture:
    """One worker's capture state: the armed reads, each by the id of its vLLM request.

    ``observe`` is called after an attention layer ran on a batch. ``batch_request_ids()`` names the
    batch's sequences in order (the model runner's; None where it cannot tell): each sequence that
    is an armed read gets its cue queries of this step scored (chunked prefill may spread them over
    steps), so reads batch with each other and with generations. A read armed without an id, or a
    model runner that cannot name its sequences, leaves the sequence to be found by its length:
    the read must then run alone (:meth:`VLLMBackend._paged_reads` drains the engine first).
    """

    def __init__(self, batch_request_ids: Callable[[], Sequence[str] | None] | None = None) -> None:
        self.batch_request_ids = batch_request_ids or (lambda: None)
        self.reads: dict[str, ArmedRead] = {}

    @property
    def armed(self) -> bool:
        return bool(self.reads)

    def wants(self, layer: int) -> bool:
        return any(layer in read.heads_by_layer for read in self.reads.values())

    def arm(self, spec: dict[str, Any]) -> None:
        self.reads[str(spec.get("read_id", EXCLUSIVE))] = ArmedRead(spec)

    def fail(self, message: str) -> None:
        """A step could not be read: every armed read reports it."""
        for read in self.reads.values():
            read.error = message

    def _read_of(self, request_id: str) -> ArmedRead | None:
        # vLLM may add a suffix of its own to the id a request was added with
        for read_id, read in self.reads.items():
            if read_id != EXCLUSIVE and request_id.startswith(read_id):
                return read
        return None

    def _sequences(self, query_start_loc: list[int], seq_lens: list[int]) -> list[tuple[int, ArmedRead]]:
        """(batch index, read) of each sequence in this step that is an armed read."""
        count = min(len(query_start_loc) - 1, len(seq_lens))
        ids = self.batch_request_ids()
        found: list[tuple[int, ArmedRead]] = []
        if ids is not None:
            for i, request_id in enumerate(list(ids)[:count]):
                read = self._read_of(str(request_id))
                if read is not None:
                    found.append((i, read))
        exclusive = self.reads.get(EXCLUSIVE)
        if exclusive is None and (ids is not None or len(self.reads) != 1):
            return found
        read = exclusive or next(iter(self.reads.values()))
        matches = [
            i
            for i in range(count)
            if read.holds(seq_lens[i], query_start_loc[i + 1] - query_start_loc[i])
            and all(i != j for j, _ in found)
        ]
        if len(matches) > 1:
            read.error = f"{len(matches)} sequences could be the read"
            return found
        return found + [(matches[0], read)] if matches else found

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
        local_count = query.shape[1]
        for i, read in self._sequences(query_start_loc, seq_lens):
            wanted = read.heads_by_layer.get(layer, [])
            local = [(g, g - head_offset) for g in wanted if head_offset <= g < head_offset + local_count]
            if not local:
                continue
            seq_len, q_len = seq_lens[i], query_start_loc[i + 1] - query_start_loc[i]
            if not read.holds(seq_len, q_len):
                continue  # an earlier prefill chunk, before the cue window
            read.observe(
                layer,
                local,
                query[query_start_loc[i] : query_start_loc[i + 1]],
                key_cache,
                block_table[i],
                seq_len,
                scaling,
                softcap,
                sliding_window,
            )

    def collect(self, read_id: str = EXCLUSIVE) -> dict[str, Any]:
        """The read's complete rows as ``[layer, head, float32 bytes]`` and its error; disarms it."""
        read = self.reads.pop(read_id, None)
        return read.result() if read is not None else {"rows": [], "error": None}
