"""Fake stores for access tracking: memories to read, every access write recorded."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from engram_core.model import AccessUpdate, Memory
from engram_platform.nats_server import NatsServer, start_nats


class FakeAccessStore:
    def __init__(self, name: str) -> None:
        self.name = name
        self.memories: dict[tuple[str, str], Memory] = {}
        self.updates: list[tuple[str, AccessUpdate]] = []  # every update written, in order
        self.calls: list[str] = []
        self.fail_next: list[BaseException] = []

    def hold(self, *memories: Memory) -> None:
        for m in memories:
            self.memories[(m.tenant, m.id)] = m

    def _enter(self, method: str) -> None:
        self.calls.append(method)
        if self.fail_next:
            raise self.fail_next.pop(0)

    async def get(self, tenant: str, ids: Sequence[str]) -> list[Memory]:
        self._enter("get")
        return [self.memories[(tenant, i)] for i in ids if (tenant, i) in self.memories]

    async def update_access(self, tenant: str, updates: Sequence[AccessUpdate]) -> int:
        self._enter("update_access")
        done = 0
        for u in updates:
            self.updates.append((tenant, u))
            m = self.memories.get((tenant, u.id))
            if m is None:
                continue
            self.memories[(tenant, u.id)] = replace(
                m, last_accessed=u.last_accessed, access_count=u.access_count
            )
            done += 1
        return done


@dataclass
class Stores:
    vector: FakeAccessStore = field(default_factory=lambda: FakeAccessStore("vector"))
    lexical: FakeAccessStore = field(default_factory=lambda: FakeAccessStore("lexical"))
    graph: FakeAccessStore = field(default_factory=lambda: FakeAccessStore("graph"))

    def all(self) -> tuple[FakeAccessStore, FakeAccessStore, FakeAccessStore]:
        return (self.vector, self.lexical, self.graph)

    def hold(self, *memories: Memory) -> None:
        for store in self.all():
            store.hold(*memories)


@pytest.fixture
def stores() -> Stores:
    return Stores()


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[NatsServer]:
    server = start_nats(tmp_path / "nats")
    yield server
    server.stop()
