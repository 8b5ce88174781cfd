"""The recall cache's written marker, shared by gateway replicas through one cache."""

from __future__ import annotations

from engram_gateway.adapters.recall_codec import ProtoRecallCodec
from engram_gateway.service.recall_cache import WRITTEN, RecallCache
from engram_platform.cache import MemoryCache

TTL_S = 30.0


def replicas(n: int) -> tuple[MemoryCache, list[RecallCache]]:
    shared = MemoryCache()
    return shared, [RecallCache(shared, ProtoRecallCodec(), TTL_S) for _ in range(n)]


async def test_a_replica_sees_the_newest_write_of_any_other() -> None:
    _, (a, b, reader) = replicas(3)
    await a.invalidate("acme", 10)
    await b.invalidate("acme", 12)
    assert await reader.written("acme") == 12


async def test_an_older_write_landing_last_does_not_lower_the_marker() -> None:
    # Replica a logged sequence 12 but reached the cache after b, which logged 10.
    shared, (a, b, reader) = replicas(3)
    await a.invalidate("acme", 12)
    await b.invalidate("acme", 10)
    assert await reader.written("acme") == 12
    assert await shared.get(WRITTEN + "acme") == b"12"


async def test_a_marker_of_an_older_format_reads_as_none_known() -> None:
    shared, (a,) = replicas(1)
    await shared.set(WRITTEN + "acme", (7).to_bytes(8, "big"), TTL_S)
    assert await a.written("acme") == 0
    await a.invalidate("acme", 3)
    assert await a.written("acme") == 3
