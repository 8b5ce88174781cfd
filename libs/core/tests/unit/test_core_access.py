from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from engram_core.access import apply_access, is_newer_access, keep_access
from engram_core.model import AccessUpdate, Memory

T = datetime(2024, 5, 3, 9, 0, tzinfo=UTC)
EARLY, LATE = T, T + timedelta(hours=1)


def mem(last_accessed: datetime | None, access_count: int, content: str = "c") -> Memory:
    return Memory(
        id="a",
        tenant="t",
        content=content,
        timestamp=T,
        updated_at=T,
        last_accessed=last_accessed,
        access_count=access_count,
    )


@pytest.mark.parametrize(
    ("incoming", "stored", "newer"),
    [
        (None, None, True),
        (EARLY, None, True),
        (None, EARLY, False),
        (EARLY, LATE, False),
        (LATE, EARLY, True),
        (EARLY, EARLY, True),  # a tie goes to the incoming statistics
    ],
)
def test_is_newer_access(
    incoming: datetime | None, stored: datetime | None, *, newer: bool
) -> None:
    assert is_newer_access(incoming, stored) is newer


def test_an_upsert_with_older_statistics_keeps_the_stored_ones() -> None:
    got = keep_access(mem(EARLY, 1, "new"), mem(LATE, 9, "old"))
    assert (got.content, got.last_accessed, got.access_count) == ("new", LATE, 9)


def test_an_upsert_without_statistics_keeps_the_stored_ones() -> None:
    got = keep_access(mem(None, 0, "new"), mem(EARLY, 4, "old"))
    assert (got.content, got.last_accessed, got.access_count) == ("new", EARLY, 4)


@pytest.mark.parametrize("old", [mem(None, 0), mem(EARLY, 3), mem(LATE, 3)])
def test_an_upsert_with_newer_or_equal_statistics_is_taken_whole(old: Memory) -> None:
    new = mem(LATE, 5, "new")
    assert keep_access(new, old) is new


def test_an_update_applies_when_not_older() -> None:
    update = AccessUpdate(id="a", last_accessed=LATE, access_count=6)
    for stored in (mem(None, 0), mem(EARLY, 2), mem(LATE, 2)):
        got = apply_access(stored, update)
        assert got is not None
        assert (got.content, got.last_accessed, got.access_count) == ("c", LATE, 6)


def test_an_older_update_is_refused() -> None:
    update = AccessUpdate(id="a", last_accessed=EARLY, access_count=6)
    assert apply_access(mem(LATE, 9), update) is None
