"""The context cache: which entry a prefix takes, what it is cropped to, and what is evicted."""

from __future__ import annotations

import pytest

from recontext_engine.context_cache import ContextCache


class FakeKV:
    """A cache that only knows its length, as ``backend.crop`` sees it."""

    def __init__(self, length: int) -> None:
        self.length = length


def crop(cache: FakeKV, length: int) -> None:
    cache.length = min(cache.length, length)


def test_the_same_prefix_takes_its_entry_once_and_it_is_cropped_to_the_prefix() -> None:
    cache = ContextCache(crop)
    kv = FakeKV(9)  # the prefix and what a request appended after it
    cache.put([1, 2, 3, 4], kv)
    assert kv.length == 4
    taken = cache.take([1, 2, 3, 4])
    assert taken is not None and taken.cache is kv and taken.shared == 4
    assert cache.take([1, 2, 3, 4]) is None  # taken entries are gone: no two requests share one


def test_a_grown_prefix_reuses_the_shared_start_and_an_unrelated_one_nothing() -> None:
    cache = ContextCache(crop)
    cache.put([1, 2, 3, 4], FakeKV(4))
    assert cache.take([1, 9, 9, 9]) is None  # one shared id (a template start) is not half of the entry
    taken = cache.take([1, 2, 3, 5, 6, 7])  # the history changed at its end and grew
    assert taken is not None and taken.shared == 3 and taken.cache.length == 3


def test_the_longest_shared_start_wins_and_the_oldest_entry_is_evicted() -> None:
    cache = ContextCache(crop, max_entries=2)
    cache.put([1, 2, 3, 4], FakeKV(4))
    cache.put([1, 2, 3, 8], FakeKV(4))
    cache.put([1, 2, 3, 8], FakeKV(4))  # the same prefix again replaces its entry
    assert len(cache) == 2
    taken = cache.take([1, 2, 3, 8, 9])  # shares 3 with the first entry, 4 with the second
    assert taken is not None and taken.shared == 4 and len(cache) == 1
    cache.put([1, 2, 3, 8, 9], taken.cache)
    cache.put([5, 6], FakeKV(2))  # evicts [1, 2, 3, 4], the least recently put
    assert len(cache) == 2
    rest = cache.take([1, 2, 3, 4])  # only the grown entry is left to share its start
    assert rest is not None and rest.shared == 3 and rest.cache is taken.cache
    cache.clear()
    assert len(cache) == 0 and cache.take([5, 6]) is None


def test_no_entries_is_refused() -> None:
    with pytest.raises(ValueError, match="max_entries"):
        ContextCache(crop, max_entries=0)
