"""Generations through the lexical service's gRPC surface (LexicalClient against the in-process
server on tantivy): a write bound to a generation stays out of live search until the swap."""

from __future__ import annotations

from pathlib import Path

import pytest

from engram_clients.lexical import LexicalClient
from engram_core.errors import FailedPrecondition, InvalidArgument, NotFound
from engram_core.model import Filter, Memory
from engram_lexical import server
from engram_lexical.bootstrap import build_service
from engram_lexical.config import Settings
from engram_testing.in_process import serving

T = "tenant-a"
ALL = Filter(include_archived=True)


def memory(n: int, content: str) -> Memory:
    return Memory(id=f"00000000-0000-0000-0000-{n:012d}", tenant=T, content=content, version=1)


async def test_generations_over_grpc(tmp_path: Path) -> None:
    settings = Settings(port=0, data_dir=tmp_path, writer_heap_mb=16)
    async with serving(server.start, settings, build_service(settings)) as channel:
        live = LexicalClient(channel)
        a, b = memory(1, "orchard apples"), memory(2, "orchard bananas")
        await live.upsert(T, [a])
        created = await live.create_generation("ignored-model")
        assert (created.name, created.embedding_model) == ("v2", "")
        staged = live.in_generation("v2")
        assert (await staged.upsert(T, [b])).applied == 1
        assert [m.id for m in (await staged.scan(T, None, 10)).memories] == [b.id]
        assert [h.id for h in await live.search(T, "orchard", ALL, 5)] == [a.id]
        assert (await live.swap_generation("v2")).name == "v1"
        assert [h.id for h in await live.search(T, "orchard", ALL, 5)] == [b.id]
        assert await live.in_generation("v1").get(T, [a.id, b.id]) == [a]
        with pytest.raises(FailedPrecondition):
            await live.drop_generation("v2")
        with pytest.raises(NotFound):
            await live.in_generation("v5").delete(T, [a.id], 9)
        with pytest.raises(InvalidArgument):
            await live.drop_generation(" ")
        await live.drop_generation("v1")
        assert [(g.name, g.live, g.count) for g in await live.list_generations()] == [
            ("v2", True, 1)
        ]
    assert (tmp_path / "lexical-generations.json").is_file()
