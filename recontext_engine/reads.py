"""Read passes of one selection round (:class:`RoundReader`): tokens the passes share are read
once, and rows that depend only on the context (round 1's null question) are kept for the next
question on the same context.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

import torch

from .heads.headset import HeadSet
from .prompt import PromptBuilder, Suffix
from .protocol import Backend
from .results import Evidence

if TYPE_CHECKING:
    from .config import GenerationConfig
    from .request import Request


def rows_key(prefix_ids: Sequence[int], suffix_ids: Sequence[int], heads: HeadSet, cue_window: int) -> str:
    """A digest of everything a read pass depends on, for one model."""
    digest = hashlib.blake2b(digest_size=16)
    for part in (prefix_ids, [-1], suffix_ids, [-1, cue_window], [x for pair in heads.heads for x in pair]):
        digest.update(torch.tensor(list(part), dtype=torch.int64).numpy().tobytes())
    return digest.hexdigest()


class RowCache:
    """A small thread-safe LRU of attention rows by :func:`rows_key`."""

    def __init__(self, max_entries: int = 8) -> None:
        self.max_entries = max_entries
        self._items: OrderedDict[str, torch.Tensor] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> torch.Tensor | None:
        with self._lock:
            rows = self._items.get(key)
            if rows is not None:
                self._items.move_to_end(key)
            return rows

    def put(self, key: str, rows: torch.Tensor) -> None:
        with self._lock:
            self._items[key] = rows
            self._items.move_to_end(key)
            while len(self._items) > self.max_entries:
                self._items.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()

    def __len__(self) -> int:
        return len(self._items)


def common_start(sequences: Sequence[Sequence[int]], leave: int = 1) -> int:
    """Length of the longest common start of ``sequences``, leaving each at least ``leave`` ids of its own."""
    limit = min(len(s) for s in sequences) - leave
    n = 0
    while n < limit and all(s[n] == sequences[0][n] for s in sequences):
        n += 1
    return n


def read_rows(
    backend: Backend,
    cache: Any,
    prefix_ids: Sequence[int],
    suffixes: Sequence[list[int]],
    heads: HeadSet,
    cue_window: int,
    row_cache: RowCache | None = None,
    cacheable: Sequence[bool] = (),
    *,
    cached: int = 0,
    keep: bool = False,
    pending: Sequence[int] = (),
) -> list[torch.Tensor]:
    """Rows of ``backend.read(cache, len(prefix_ids), s, heads, cue_window)`` for each suffix ``s``.

    Suffixes marked ``cacheable`` come from ``row_cache`` when they are there (and go into it when
    not). The others are read over their common start with ``read_branches`` (one pass where the
    backend can). ``cache`` may already hold the first ``cached`` tokens of every suffix after the
    prefix (they are not read again); with ``keep`` it holds ``[prefix; suffixes[0]]`` afterwards
    (backends that crop only). ``cache`` may also lack the prefix's last tokens, ``pending``
    (backends that crop only): the pass computes them with its own and keeps them, so the cache
    holds the whole prefix afterwards.
    """
    if pending and cached:
        raise ValueError("a cache lacking prefix tokens holds no suffix tokens")
    prefix_len = len(prefix_ids) - len(pending) + cached
    flags = list(cacheable) + [False] * (len(suffixes) - len(cacheable))
    keys = [
        rows_key(prefix_ids, s, heads, cue_window) if row_cache is not None and may_cache else None
        for s, may_cache in zip(suffixes, flags)
    ]
    found = [row_cache.get(k) if row_cache is not None and k else None for k in keys]
    todo = [i for i, r in enumerate(found) if r is None]
    # only the first suffix (the question's) is ever kept; the engine never caches its rows
    kept = keep and todo[:1] == [0]
    tails = [suffixes[i][cached:] for i in todo]
    fresh: list[torch.Tensor] = []
    head = list(pending)
    if not tails and head:
        backend.prefill(head, cache)
    elif len(tails) == 1:
        fresh = [backend.read(cache, prefix_len, head + tails[0], heads, cue_window, kept or bool(head))]
    elif tails:
        shared = common_start(tails)
        fresh = backend.read_branches(
            cache,
            prefix_len,
            head + tails[0][:shared],
            [t[shared:] for t in tails],
            heads,
            cue_window,
            kept or bool(head),
        )
    if head and not kept:
        backend.crop(cache, len(prefix_ids))  # the prefix stays; the question's tokens go
    for i, r in zip(todo, fresh):
        found[i] = r
        key = keys[i]
        if row_cache is not None and key:
            row_cache.put(key, r)
    return [r for r in found if r is not None]


@dataclass
class AttentionRead:
    """One round's read passes: their suffixes, the rows of their last ``cue_window`` tokens and, when
    asked for, the first pass's rows of the replayed evidence tokens."""

    suffixes: list[Suffix]
    rows: list[torch.Tensor]
    evidence_rows: torch.Tensor | None = None


class RoundReader:
    """The model side of selection: the read passes of a round and the model's input embeddings.

    Passes share the prefix cache and the evidence block, which is read once for all of them;
    without evidence, passes that depend on the context only (the null question's) come from
    ``row_cache``.
    """

    def __init__(
        self,
        backend: Backend,
        tokenizer: Any,
        prompts: PromptBuilder,
        heads: HeadSet,
        row_cache: RowCache | None,
    ) -> None:
        self.backend = backend
        self.tokenizer = tokenizer
        self.prompts = prompts
        self.heads = heads
        self.row_cache = row_cache

    @cached_property
    def input_embeddings(self) -> torch.Tensor | None:
        """The model's (vocab, dim) input embeddings, where the backend gives them."""
        return self.backend.input_embeddings()

    def tokenize(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def read(
        self,
        request: Request,
        evidence: list[Evidence],
        questions: list[str],
        cue_window: int,
        evidence_rows: bool = False,
    ) -> AttentionRead:
        """Rows of one pass per question, after the context and ``evidence``; with
        ``evidence_rows``, a cue window that reaches back over the evidence tokens as well."""
        prefix, config = request.prefix, request.config
        suffixes = [self.prompts.suffix(prefix, q, evidence, config, request.sentence_key) for q in questions]
        window = cue_window
        own = len(suffixes[0].ids)
        at = torch.nonzero(suffixes[0].token_sentence >= 0).squeeze(-1)
        if evidence_rows and len(at):
            # one window for all passes, so no longer than the shortest suffix
            window = max(window, min(own - int(at[0]), *(len(s.ids) for s in suffixes)))
        ids = [s.ids for s in suffixes]
        # With evidence, the question pass is kept in the cache: the next pass or the generation goes
        # on from the part of it that they share (the earlier rounds' evidence, in EXTENDING_ORDERS).
        keep = bool(evidence) and self.backend.can_crop
        rows = read_rows(
            self.backend,
            request.cache,
            prefix.ids,
            ids,
            self.heads,
            window,
            self.row_cache,
            cacheable=[False, not evidence],
            cached=self.reuse(request, ids, before=window),
            keep=keep,
            pending=request.pending,
        )
        request.pending = []
        if keep:
            request.kept = list(ids[0])
        if window == cue_window:
            return AttentionRead(suffixes, rows)
        at = at[at >= own - window] - (own - window)
        return AttentionRead(suffixes, [r[:, -cue_window:] for r in rows], rows[0][:, at])

    def reuse(self, request: Request, suffixes: Sequence[list[int]], before: int = 1) -> int:
        """How many leading tokens of every one of ``suffixes`` the cache already holds after the
        prefix (from a kept read pass), leaving at least the last ``before`` of each to compute;
        the cache is cropped to them."""
        if not self.backend.can_crop or request.pending:
            return 0  # a cache that lacks prefix tokens holds none of a suffix
        cached = common_start([request.kept, *suffixes]) if request.kept else 0
        cached = max(0, min(cached, *(len(s) - before for s in suffixes)))
        self.backend.crop(request.cache, len(request.prefix.ids) + cached)
        request.kept = request.kept[:cached]
        return cached


class BackendView(Backend):
    """A backend that passes every call to another one: subclasses change a call or two (tests,
    scripts: count reads, hide ``crop`` with ``can_crop = False``)."""

    def __init__(self, backend: Backend) -> None:
        self._backend = backend
        self.name, self.can_crop, self.batches = backend.name, backend.can_crop, backend.batches

    def __getattr__(self, name: str) -> Any:  # the wrapped backend's own attributes (``model``, ...)
        return getattr(self._backend, name)

    @property
    def window(self) -> int:
        return self._backend.window

    @property
    def eos_ids(self) -> set[int]:
        return self._backend.eos_ids

    def new_cache(self) -> Any:
        return self._backend.new_cache()

    def prefill(self, ids: list[int], cache: Any = None) -> Any:
        return self._backend.prefill(ids, cache)

    def read(
        self,
        cache: Any,
        prefix_len: int,
        suffix_ids: list[int],
        heads: HeadSet,
        cue_window: int,
        keep: bool = False,
    ) -> torch.Tensor:
        return self._backend.read(cache, prefix_len, suffix_ids, heads, cue_window, keep)

    def generate(
        self, cache: Any, suffix_ids: list[int], generation: GenerationConfig, eos_ids: set[int]
    ) -> Iterator[int]:
        return self._backend.generate(cache, suffix_ids, generation, eos_ids)

    def crop(self, cache: Any, length: int) -> None:
        self._backend.crop(cache, length)

    def cached_tokens(self, cache: Any) -> int | None:
        return self._backend.cached_tokens(cache)

    def generate_batch(
        self,
        prompts: Sequence[Sequence[int]],
        generation: GenerationConfig,
        eos_ids: Iterable[int] | None = None,
    ) -> list[list[int]]:
        return self._backend.generate_batch(prompts, generation, eos_ids)

    def input_embeddings(self) -> torch.Tensor | None:
        return self._backend.input_embeddings()

    def read_branches(
        self,
        cache: Any,
        prefix_len: int,
        shared_ids: list[int],
        branches: list[list[int]],
        heads: HeadSet,
        cue_window: int,
        keep: bool = False,
    ) -> list[torch.Tensor]:
        return self._backend.read_branches(cache, prefix_len, shared_ids, branches, heads, cue_window, keep)


class SeparateReads(BackendView):
    """A backend whose read passes are each their own forward (the base class's ``read_branches``).

    The engine then reads the question and the null question one after the other, as it does on
    backends that cannot share a pass; the overhead script and the tests compare both paths with it.
    """

    read_branches = Backend.read_branches
