"""The order of a listing without text: by the sort's value, then newer, then id."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from engram_core.model import Filter, Memory
from engram_core.ordering import Sort, best, order_key, ordered, sort_value

T0 = datetime(2025, 3, 1, tzinfo=UTC)


def _m(id_: str, **changes: object) -> Memory:
    base = Memory(id=id_, tenant="t", content=id_, timestamp=T0, updated_at=T0)
    fields = {**{f: getattr(base, f) for f in base.__dataclass_fields__}, **changes}
    return Memory(**fields)  # type: ignore[arg-type]


MS = [
    _m("a", importance=0.9, access_count=1, relevance_score=0.2),
    _m("b", importance=0.5, timestamp=T0 + timedelta(days=2), access_count=9),
    _m("c", importance=0.7, timestamp=T0 + timedelta(days=1), relevance_score=0.8),
    _m("d", importance=1.0, archived=True),
    _m("e", importance=0.95, tags=("secret",), tag_prefixes=("secret",)),
]
NO_SECRETS = Filter(exclude_tags=("secret",))


def test_each_sort_orders_by_its_value_and_the_filter_applies() -> None:
    by = {sort: [m.id for m in best(MS, NO_SECRETS, sort, 10)] for sort in Sort}
    assert by == {
        Sort.IMPORTANCE: ["a", "c", "b"],
        Sort.RECENCY: ["b", "c", "a"],
        Sort.RELEVANCE: ["c", "a", "b"],
        Sort.ACCESS_COUNT: ["b", "a", "c"],
    }
    assert [m.id for m in best(MS, Filter(include_archived=True), Sort.IMPORTANCE, 2)] == ["d", "e"]
    assert best(MS, NO_SECRETS, Sort.IMPORTANCE, 0) == []


def test_ties_list_newer_first_then_by_id() -> None:
    tied = [
        _m("y", timestamp=T0 + timedelta(hours=1)),
        _m("x", timestamp=T0 + timedelta(hours=1)),
        _m("new", timestamp=T0 + timedelta(hours=2)),
        _m("old"),
    ]
    assert [m.id for m in ordered(tied, Sort.IMPORTANCE, 10)] == ["new", "x", "y", "old"]
    assert [m.id for m in ordered(tied, Sort.RECENCY, 2)] == ["new", "x"]


def test_recency_lists_by_the_timestamp_to_the_microsecond() -> None:
    a, b = _m("a"), _m("b", timestamp=T0 + timedelta(microseconds=1))
    assert sort_value(Sort.RECENCY, b) > sort_value(Sort.RECENCY, a)
    assert order_key(Sort.RECENCY, b) < order_key(Sort.RECENCY, a)
