"""The ladybug store's relations cache: an answer read before a write's invalidation is
never kept after it, and the cache stays within its size."""

from __future__ import annotations

from engram_core.model import Relation
from engram_graph.adapters.edge_cache import EdgeCache

AB = (Relation("a", "b", "RELATES_TO", 0.5),)


def test_an_answer_is_kept_when_nothing_was_invalidated_since_its_read() -> None:
    cache = EdgeCache(10)
    epoch = cache.epoch()
    assert cache.put(epoch, {"k:a": AB, "k:c": ()})
    assert cache.get(["k:a", "k:b", "k:c"]) == ({"k:a": AB, "k:c": ()}, ["k:b"])


def test_an_answer_read_before_an_invalidation_is_dropped() -> None:
    cache = EdgeCache(10)
    epoch = cache.epoch()  # a reader starts its query ...
    cache.invalidate(["k:z"])  # ... a write commits and invalidates, any key ...
    assert not cache.put(epoch, {"k:a": AB})  # ... the reader's answer may predate it
    assert cache.get(["k:a"]) == ({}, ["k:a"])


def test_invalidation_and_clear_drop_what_was_kept() -> None:
    cache = EdgeCache(10)
    cache.put(cache.epoch(), {"k:a": AB, "k:b": AB, "k:c": ()})
    cache.invalidate(["k:a", "k:b"])
    assert cache.get(["k:a", "k:b", "k:c"]) == ({"k:c": ()}, ["k:a", "k:b"])
    cache.clear()
    assert cache.get(["k:c"]) == ({}, ["k:c"])


def test_the_least_recently_used_keys_go_first() -> None:
    cache = EdgeCache(2)
    cache.put(cache.epoch(), {"k:a": (), "k:b": ()})
    cache.get(["k:a"])  # a is now the most recent
    cache.put(cache.epoch(), {"k:c": ()})
    assert cache.get(["k:a", "k:b", "k:c"]) == ({"k:a": (), "k:c": ()}, ["k:b"])


def test_a_cache_of_no_keys_keeps_nothing() -> None:
    cache = EdgeCache(0)
    assert not cache.put(cache.epoch(), {"k:a": AB})
    assert cache.get(["k:a"]) == ({}, ["k:a"])
