"""The tantivy adapter passes the TextIndex contract, on disk, and survives a restart."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from engram_core.errors import Unavailable
from engram_core.model import AccessUpdate, Filter, UpsertResult
from engram_lexical.adapters.tantivy_index import TantivyTextIndex
from engram_testing.contracts.lexical import T, TextIndexContract, full_memory, mem

NOW = datetime(2025, 1, 1, tzinfo=UTC)


class TestTantivyTextIndex(TextIndexContract):
    @pytest.fixture
    async def index(self, tmp_path: Path) -> AsyncIterator[TantivyTextIndex]:
        index = TantivyTextIndex(tmp_path / "lexical", writer_heap_bytes=20_000_000)
        yield index
        await index.close()


async def test_in_memory_index_works(tmp_path: Path) -> None:
    index = TantivyTextIndex(None, writer_heap_bytes=20_000_000)
    await index.upsert(T, [mem("a", "in memory")])
    assert [h.id for h in await index.search(T, "memory", Filter(), 5)] == ["a"]
    await index.close()


async def test_index_persists_across_restart(tmp_path: Path) -> None:
    path = tmp_path / "lexical"
    first = TantivyTextIndex(path, writer_heap_bytes=20_000_000)
    m = full_memory()
    await first.upsert(T, [m, mem("gone", "deleted before the restart")])
    await first.delete(T, ["gone"], version=5)
    await first.close()

    second = TantivyTextIndex(path, writer_heap_bytes=20_000_000)
    assert await second.get(T, [m.id, "gone"]) == [m]
    assert await second.count(T) == 1
    # The tombstone survived too.
    assert (await second.upsert(T, [mem("gone", "again", version=4)])).skipped == 1
    assert [h.id for h in await second.search(T, "friday", Filter(include_archived=True), 5)] == [
        m.id
    ]
    await second.close()


async def test_a_second_writer_on_the_same_directory_is_refused(tmp_path: Path) -> None:
    first = TantivyTextIndex(tmp_path / "lexical", writer_heap_bytes=20_000_000)
    with pytest.raises(Unavailable):
        TantivyTextIndex(tmp_path / "lexical", writer_heap_bytes=20_000_000)
    await first.close()


async def test_writes_after_close_are_unavailable(tmp_path: Path) -> None:
    index = TantivyTextIndex(tmp_path / "lexical", writer_heap_bytes=20_000_000)
    await index.close()
    with pytest.raises(Unavailable):
        await index.upsert(T, [mem("a", "late")])


async def test_concurrent_writes_share_a_commit_and_see_each_other(tmp_path: Path) -> None:
    index = TantivyTextIndex(tmp_path / "lexical", writer_heap_bytes=20_000_000)
    # Queued together, these land in one commit; each is planned after the ones before it.
    results = await asyncio.gather(
        index.upsert(T, [mem("a", "first", version=1)]),
        index.delete(T, ["a"], version=2),
        index.upsert(T, [mem("a", "stale", version=1)]),
        index.upsert(T, [mem("b", "bee", version=1)]),
        index.update_access(T, [AccessUpdate(id="b", last_accessed=NOW, access_count=2)]),
    )
    assert results == [UpsertResult(1, 0), 1, UpsertResult(0, 1), UpsertResult(1, 0), 1]
    assert await index.get(T, ["a"]) == []
    assert [(m.content, m.access_count) for m in await index.get(T, ["b"])] == [("bee", 2)]
    await index.close()


async def test_many_concurrent_versions_keep_the_newest(tmp_path: Path) -> None:
    index = TantivyTextIndex(tmp_path / "lexical", writer_heap_bytes=20_000_000)
    versions = list(range(1, 31))
    random.Random(7).shuffle(versions)
    results = await asyncio.gather(
        *(index.upsert(T, [mem("a", f"version {v}", version=v)]) for v in versions)
    )
    assert sum(r.applied for r in results) + sum(r.skipped for r in results) == 30
    assert [m.version for m in await index.get(T, ["a"])] == [30]
    assert await index.count(T) == 1
    await index.close()


async def test_a_failing_write_fails_only_its_caller(tmp_path: Path) -> None:
    index = TantivyTextIndex(tmp_path / "lexical", writer_heap_bytes=20_000_000)
    unencodable = replace(mem("bad", "x"), metadata={"when": NOW})  # not JSON
    good, bad = await asyncio.gather(
        index.upsert(T, [mem("good", "fine")]),
        index.upsert(T, [unencodable]),
        return_exceptions=True,
    )
    assert good == UpsertResult(1, 0)
    assert isinstance(bad, TypeError)
    assert [m.id for m in await index.get(T, ["good", "bad"])] == ["good"]
    await index.close()


async def test_more_scans_at_once_than_rests_kept_all_complete(tmp_path: Path) -> None:
    # Twelve scans interleaved page by page: the eight rests kept between pages are pushed
    # out, and a scan whose rest is gone walks again from its cursor.
    index = TantivyTextIndex(tmp_path / "lexical", writer_heap_bytes=20_000_000)
    names = sorted(f"m{i:03d}" for i in range(40))
    await index.upsert(T, [mem(n) for n in names])
    cursors: list[str | None] = [None] * 12
    seen: list[list[str]] = [[] for _ in cursors]
    done = [False] * len(cursors)
    while not all(done):
        for k in random.Random(5).sample(range(len(cursors)), len(cursors)):
            if done[k]:
                continue
            page = await index.scan(T, cursors[k], 3)
            seen[k] += [m.id for m in page.memories]
            cursors[k] = page.next_cursor
            done[k] = page.next_cursor is None
    assert all(ids_ == names for ids_ in seen)
    await index.close()


def _counting_commits(index: TantivyTextIndex) -> list[int]:
    """Record the number of writes planned in each commit of ``index``."""
    commits: list[int] = []
    apply = index._apply

    def counted(plans: list[Any]) -> Any:
        commits.append(len(plans))
        return apply(plans)

    index._apply = counted  # type: ignore[method-assign]
    return commits


def _touch(id_: str, count: int) -> AccessUpdate:
    return AccessUpdate(id=id_, last_accessed=NOW, access_count=count)


async def test_access_updates_wait_for_the_interval_and_other_writes_end_it(
    tmp_path: Path,
) -> None:
    index = TantivyTextIndex(tmp_path / "lexical", access_commit_interval_s=30.0)
    commits = _counting_commits(index)
    await index.upsert(T, [mem("a", "alpha"), mem("b", "beta")])
    waiting = [
        asyncio.create_task(index.update_access(T, [_touch("a", 2)])),
        asyncio.create_task(index.update_access(T, [_touch("b", 3)])),
    ]
    await asyncio.sleep(0.3)
    assert not any(t.done() for t in waiting)  # within the interval of the upsert's commit
    assert commits == [1]
    await index.upsert(T, [mem("c", "gamma")])  # content never waits, and takes them along
    assert await asyncio.wait_for(asyncio.gather(*waiting), 5) == [1, 1]
    assert commits == [1, 3]
    got = {m.id: m.access_count for m in await index.get(T, ["a", "b", "c"])}
    assert got == {"a": 2, "b": 3, "c": 0}
    await index.close()


async def test_access_updates_after_the_interval_commit_at_once(tmp_path: Path) -> None:
    index = TantivyTextIndex(tmp_path / "lexical", access_commit_interval_s=1.0)
    await index.upsert(T, [mem("a", "alpha")])
    await asyncio.sleep(1.1)
    assert await asyncio.wait_for(index.update_access(T, [_touch("a", 2)]), 0.8) == 1
    await index.close()


async def test_closing_writes_the_access_updates_still_waiting(tmp_path: Path) -> None:
    path = tmp_path / "lexical"
    index = TantivyTextIndex(path, access_commit_interval_s=30.0)
    await index.upsert(T, [mem("a", "alpha")])
    waiting = asyncio.create_task(index.update_access(T, [_touch("a", 4)]))
    await asyncio.sleep(0.1)
    await asyncio.wait_for(index.close(), 5)
    assert await waiting == 1
    reopened = TantivyTextIndex(path)
    assert [m.access_count for m in await reopened.get(T, ["a"])] == [4]
    await reopened.close()
