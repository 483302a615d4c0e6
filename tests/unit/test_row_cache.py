"""The pieces of shared read passes: common starts, the row LRU and its keys."""

from __future__ import annotations

import pytest
import torch

from recontext_engine.heads.headset import HeadSet
from recontext_engine.protocol import Backend
from recontext_engine.reads import RowCache, common_start, read_rows, rows_key

HEADS = HeadSet(((0, 1), (2, 3)))


def test_the_common_start_leaves_every_sequence_a_token_of_its_own() -> None:
    assert common_start([[1, 2, 3, 4], [1, 2, 5]]) == 2
    assert common_start([[1, 2, 3], [1, 2, 3, 4]]) == 2
    assert common_start([[7], [7]]) == 0
    assert common_start([[1, 2], [1, 2, 3]], leave=0) == 2 and common_start([[], [1]], leave=0) == 0


def test_keys_differ_by_prefix_suffix_heads_and_cue_window() -> None:
    key = rows_key([1, 2], [3], HEADS, 8)
    assert key == rows_key([1, 2], [3], HEADS, 8)
    others = {
        rows_key([1], [2, 3], HEADS, 8),
        rows_key([1, 2], [4], HEADS, 8),
        rows_key([1, 2], [3], HeadSet(((0, 1),)), 8),
        rows_key([1, 2], [3], HEADS, 4),
    }
    assert key not in others and len(others) == 4


def test_the_row_cache_evicts_the_least_recently_used() -> None:
    cache = RowCache(max_entries=2)
    cache.put("a", torch.ones(1))
    cache.put("b", torch.ones(1))
    assert cache.get("a") is not None  # "b" is now the oldest
    cache.put("c", torch.ones(1))
    assert cache.get("b") is None and len(cache) == 2


class _Backend(Backend):
    """Records read passes; rows encode the suffix so that mix-ups show. ``branches``: a
    ``read_branches`` of its own (one call), else the base class's (one read per branch)."""

    def __init__(self, branches: bool) -> None:
        self.calls: list[tuple] = []
        self.branches = branches

    window = 1 << 20

    def new_cache(self):
        return None

    def prefill(self, ids, cache=None):
        return cache

    def generate(self, cache, suffix_ids, generation, eos_ids):
        return iter(())

    def read(self, cache, prefix_len, suffix, heads, cue_window, keep=False):
        self.calls.append(("read", tuple(suffix), prefix_len, *(["keep"] if keep else [])))
        return torch.tensor([float(sum(suffix))])

    def read_branches(self, cache, prefix_len, shared, branches, heads, cue_window, keep=False):
        if not self.branches:
            return super().read_branches(cache, prefix_len, shared, branches, heads, cue_window, keep)
        self.calls.append(
            ("branches", tuple(shared), tuple(map(tuple, branches)), prefix_len, *(["keep"] if keep else []))
        )
        return [torch.tensor([float(sum(shared + b))]) for b in branches]


def test_read_rows_shares_the_common_start_and_caches_what_is_marked() -> None:
    backend, cache = _Backend(branches=True), RowCache()
    rows = read_rows(backend, None, [9, 9], [[1, 2, 3], [1, 2, 4]], HEADS, 8, cache, [False, True])
    assert [float(r) for r in rows] == [6.0, 7.0]
    assert backend.calls == [("branches", (1, 2), ((3,), (4,)), 2)]
    again = read_rows(backend, None, [9, 9], [[1, 5], [1, 2, 4]], HEADS, 8, cache, [False, True])
    assert [float(r) for r in again] == [6.0, 7.0] and backend.calls[-1] == ("read", (1, 5), 2)


def test_read_rows_falls_back_to_one_read_per_suffix() -> None:
    backend = _Backend(branches=False)
    rows = read_rows(backend, None, [9], [[1, 2], [1, 3]], HEADS, 8)
    assert [float(r) for r in rows] == [3.0, 4.0] and [c[0] for c in backend.calls] == ["read", "read"]


@pytest.mark.parametrize("branches", [False, True])
def test_read_rows_skips_what_the_cache_holds_and_keeps_the_question_pass_last(branches: bool) -> None:
    """``cached`` tokens of every suffix are not read again; ``keep`` goes to the first suffix's
    pass only, and without ``read_branches`` that pass comes last (what it keeps stays)."""
    backend = _Backend(branches)
    rows = read_rows(backend, None, [9], [[1, 2, 3], [1, 2, 4]], HEADS, 8, cached=1, keep=True)
    assert [float(r) for r in rows] == [5.0, 6.0]  # rows of the uncached tails
    if branches:
        assert backend.calls == [("branches", (2,), ((3,), (4,)), 2, "keep")]
    else:
        assert backend.calls == [("read", (2, 4), 2), ("read", (2, 3), 2, "keep")]
