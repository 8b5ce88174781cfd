"""What the gateway relies on from its EventLog, asserted of the unit tests' fake and of the
real adapter (adapters.log.JetStreamLog on a local nats-server with the engram streams).

No ingest runs in either: nothing is applied or decided, the watermark stays 0. Each
subclass provides ``log`` (an empty EventLog) and ``down`` (one whose log cannot be reached).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from engram_core.errors import Unavailable
from engram_core.model import Memory, Relation
from engram_gateway.adapters.log import JetStreamLog
from engram_gateway.service.ports import Ack, Envelope, EventLog
from engram_platform import jetstream
from engram_platform.settings import NatsSettings

NOW = datetime(2025, 6, 1, tzinfo=UTC)
T, OTHER = "acme", "globex"


def env(event_id: str, tenant: str = T) -> Envelope:
    return Envelope(event_id, tenant, NOW)


def memory(id: str, tenant: str = T) -> Memory:
    return Memory(id=id, tenant=tenant, content=f"memory {id}", timestamp=NOW, updated_at=NOW)


class EventLogContract:
    @pytest.fixture
    def log(self) -> EventLog:
        raise NotImplementedError

    @pytest.fixture
    def down(self) -> EventLog:
        raise NotImplementedError

    async def test_memory_events_take_the_next_sequences(self, log: EventLog) -> None:
        acks = [
            await log.stored(env("e1"), memory("m1")),
            await log.updated(env("e2"), memory("m1"), ["content"]),
            await log.relation_added(env("e3"), Relation("m1", "m2", "LEADS_TO")),
            await log.deleted(env("e4"), "m1"),
            await log.tenant_deleted(env("e5", OTHER)),
        ]
        assert acks == [Ack(1), Ack(2), Ack(3), Ack(4), Ack(5)]
        assert await log.last_sequence() == 5

    async def test_an_event_id_again_is_the_same_event(self, log: EventLog) -> None:
        first = await log.stored(env("e1"), memory("m1"))
        again = await log.stored(env("e1"), memory("m1"))
        assert (first, again) == (Ack(1), Ack(1, duplicate=True))
        assert await log.last_sequence() == 1

    async def test_access_events_are_a_stream_of_their_own(self, log: EventLog) -> None:
        await log.stored(env("e1"), memory("m1"))
        accessed = await log.accessed(env("a1"), ["m1"], NOW)
        assert accessed == Ack(1)  # the access stream's first
        assert await log.stored(env("e2"), memory("m2")) == Ack(2)
        assert (await log.last_sequence(), await log.tenant_last_sequence(T)) == (2, 2)

    async def test_stored_memory_id_answers_only_a_stored_event(self, log: EventLog) -> None:
        await log.stored(env("e1"), memory("m1"))
        await log.deleted(env("e2"), "m1")
        assert await log.stored_memory_id(1) == "m1"
        assert await log.stored_memory_id(2) is None
        assert await log.stored_memory_id(99) is None

    async def test_tenant_last_sequence_is_the_tenants_own(self, log: EventLog) -> None:
        await log.stored(env("e1"), memory("m1"))
        await log.stored(env("e2", OTHER), memory("o1", OTHER))
        await log.accessed(env("a1"), ["m1"], NOW)
        assert await log.tenant_last_sequence(T) == 1
        assert await log.tenant_last_sequence(OTHER) == 2
        assert await log.tenant_last_sequence("nobody") == 0

    async def test_without_ingest_nothing_is_decided(self, log: EventLog) -> None:
        await log.stored(env("e1"), memory("m1"))
        await log.stored(env("e2", OTHER), memory("o1", OTHER))
        assert await log.watermark() == 0
        # How far the tenant's events are decided: not past its undecided first one.
        assert await log.tenant_decided_through(T, 0, 2) == 0
        # Only the tenant's own events count: OTHER's undecided one holds nothing of T's.
        assert await log.tenant_decided_through(T, 1, 2) == 2
        assert await log.tenant_decided_through("nobody", 0, 2) == 2

    async def test_an_unreachable_log_is_unavailable(self, down: EventLog) -> None:
        with pytest.raises(Unavailable):
            await down.stored(env("e1"), memory("m1"), timeout=5.0)
        with pytest.raises(Unavailable):
            await down.last_sequence()
        with pytest.raises(Unavailable):
            await down.watermark()


class TestFakeLog(EventLogContract):
    @pytest.fixture
    def log(self, harness: Any) -> EventLog:
        harness.log.auto_watermark = False  # no ingest
        fake: EventLog = harness.log
        return fake

    @pytest.fixture
    def down(self, harness: Any) -> EventLog:
        harness.log.fail = Unavailable("log: connection refused")
        fake: EventLog = harness.log
        return fake


class TestJetStreamLog(EventLogContract):
    @pytest.fixture
    def log(self, js: Any) -> EventLog:
        return JetStreamLog(js, timeout_s=5)

    @pytest.fixture
    async def down(self, nats_server: Any) -> EventLog:
        settings = NatsSettings(url=nats_server.url)
        nc, ctx = await jetstream.connect(settings, "gateway-test-down")
        await jetstream.ensure_streams(ctx, settings)
        await nc.close()
        return JetStreamLog(ctx, timeout_s=5)
