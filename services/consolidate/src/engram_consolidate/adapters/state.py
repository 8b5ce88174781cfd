"""The latest-state log on JetStream: stream ENGRAM_STATE, the keeper's consumer of
ENGRAM_MEMORY and its checkpoint (KV bucket ENGRAM_CONSOLIDATE, key ``state.keeper``), and
the readers Sync and Rebuild page through.

Subjects: ``engram.<tenant>.state.memory.<id>`` (MemoryState) and
``engram.<tenant>.state.relation.<source>.<TYPE>.<target>`` (RelationState); an id that is
not a safe subject token is written ``~`` + its UTF-8 in hex (``~`` is never in a safe one).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import datetime

from google.protobuf.message import DecodeError
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, StorageType, StreamConfig
from nats.js.errors import NotFoundError
from nats.js.kv import KeyValue

from engram.events.v1 import events_pb2
from engram_consolidate.adapters.checkpoints import read_entry, write_entry
from engram_consolidate.service.state import (
    Ignored,
    KeeperPosition,
    LogEvent,
    MemoryRecord,
    RelationRecord,
    StateKey,
    StateRecord,
)
from engram_consolidate.service.state_apply import MEMORIES, Positioned
from engram_core.errors import Unavailable
from engram_core.model import Memory
from engram_platform import jetstream as jsm
from engram_platform.convert import (
    memory_from_proto,
    memory_to_proto,
    relation_from_proto,
    relation_to_proto,
    ts_from_proto,
    ts_to_proto,
)
from engram_platform.log_events import decode
from engram_platform.settings import NatsSettings

log = logging.getLogger(__name__)

DURABLE_STATE = "consolidate-state"
_SAFE = re.compile(r"^[A-Za-z0-9_-]{1,200}$")


def token(id_: str) -> str:
    return id_ if _SAFE.match(id_) else "~" + id_.encode("utf-8").hex()


def state_subject(tenant: str, kind: str, *parts: str) -> str:
    return ".".join(("engram", tenant, "state", kind, *(token(p) for p in parts)))


def relation_subject(tenant: str, source: str, type_: str, target: str) -> str:
    return f"{state_subject(tenant, 'relation', source)}.{type_}.{token(target)}"


def record_subject(record: StateRecord) -> str:
    if isinstance(record, MemoryRecord):
        return state_subject(record.tenant, MEMORIES, record.id)
    r = record.relation
    return relation_subject(record.tenant, r.source_id, r.type, r.target_id)


async def last_record(
    js: JetStreamContext, gate: asyncio.Semaphore, subject: str
) -> StateRecord | None:
    """The kept message of one key (direct get), None when the key has none."""
    async with gate:
        try:
            raw = await js.get_last_msg(jsm.STREAM_STATE, subject, direct=True)
        except NotFoundError:
            return None
    return record_from_bytes(subject, raw.data or b"")


def filter_subject(tenant: str | None, kind: str) -> str:
    return f"engram.{tenant or '*'}.state.{kind}.>"


async def ensure_state_stream(js: JetStreamContext, settings: NatsSettings) -> None:
    """One message kept per subject, no age limit: the newest state of every key."""
    config = StreamConfig(
        name=jsm.STREAM_STATE,
        description="the latest state of every memory and relation (engram-consolidate)",
        subjects=["engram.*.state.>"],
        storage=StorageType.FILE,
        max_msgs_per_subject=1,
        num_replicas=settings.stream_replicas,
        allow_direct=True,
    )
    await jsm.ensure_stream(js, config, settings.ready_wait_s)


# --- records <-> bytes ------------------------------------------------------------------------


def record_to_bytes(record: StateRecord) -> bytes:
    if isinstance(record, MemoryRecord):
        if record.memory is None:
            tomb = Memory(id=record.id, tenant=record.tenant, content="", version=record.version)
            return events_pb2.MemoryState(
                memory=memory_to_proto(tomb), deleted=True
            ).SerializeToString()
        return events_pb2.MemoryState(memory=memory_to_proto(record.memory)).SerializeToString()
    return events_pb2.RelationState(
        relation=relation_to_proto(record.relation),
        version=record.version,
        removed=record.removed,
    ).SerializeToString()


def record_from_bytes(subject: str, data: bytes) -> StateRecord:
    parts = subject.split(".")
    tenant, kind = parts[1], parts[3]
    if kind == MEMORIES:
        msg = events_pb2.MemoryState.FromString(data)
        memory = memory_from_proto(msg.memory)
        if msg.deleted:
            return MemoryRecord(tenant, memory.id, memory.version, None)
        return MemoryRecord(tenant, memory.id, memory.version, memory)
    rel = events_pb2.RelationState.FromString(data)
    return RelationRecord(tenant, relation_from_proto(rel.relation), rel.version, rel.removed)


# --- ENGRAM_MEMORY as the keeper reads it ----------------------------------------------------


def decode_event(subject: str, data: bytes, sequence: int) -> LogEvent:
    """Decoded as ingest decodes it (``engram_platform.log_events``); poison is Ignored."""
    decoded = decode(subject, data, sequence)
    return decoded.event if decoded.event is not None else Ignored(sequence, decoded.problem)


# --- the keeper's side -------------------------------------------------------------------------


class Gap(Unavailable):
    """A delivery went missing: the keeper reopens at its checkpoint."""


@dataclass
class _Batch:
    events: list[LogEvent]
    msgs: list[Msg]

    async def ack(self) -> None:
        await asyncio.gather(*(m.ack() for m in self.msgs))


class NatsKeeperSource:
    """ENGRAM_MEMORY through the durable ``consolidate-state``, recreated at every open so
    it starts exactly after the checkpoint; deliveries are checked for gaps (each delivery
    has the next consumer sequence), so nothing is skipped silently."""

    def __init__(self, js: JetStreamContext, ack_wait_s: float, max_ack_pending: int) -> None:
        self._js = js
        self._ack_wait = ack_wait_s
        self._max_ack_pending = max_ack_pending
        self._sub: JetStreamContext.PullSubscription | None = None
        self._delivered = 0

    async def open(self, after: int) -> None:
        await self.close()
        with contextlib.suppress(NotFoundError):  # none yet
            await self._js.delete_consumer(jsm.STREAM_MEMORY, DURABLE_STATE)
        start = (
            {"deliver_policy": DeliverPolicy.BY_START_SEQUENCE, "opt_start_seq": after + 1}
            if after > 0
            else {"deliver_policy": DeliverPolicy.ALL}
        )
        config = ConsumerConfig(
            durable_name=DURABLE_STATE,
            ack_policy=AckPolicy.EXPLICIT,
            ack_wait=self._ack_wait,
            max_ack_pending=self._max_ack_pending,
            max_deliver=-1,
            **start,
        )
        await self._js.add_consumer(jsm.STREAM_MEMORY, config)
        self._sub = await self._js.pull_subscribe_bind(DURABLE_STATE, jsm.STREAM_MEMORY)
        self._delivered = 0

    async def fetch(self, limit: int, wait_s: float) -> _Batch:
        if self._sub is None:
            raise Unavailable("the keeper's consumer is not open")
        try:
            msgs = await self._sub.fetch(limit, timeout=wait_s)
        except TimeoutError:
            return _Batch([], [])
        events = []
        for m in msgs:
            meta = m.metadata
            if meta.sequence.consumer != self._delivered + 1:
                raise Gap(f"delivery {meta.sequence.consumer} after {self._delivered}")
            self._delivered = meta.sequence.consumer
            events.append(decode_event(m.subject, m.data, meta.sequence.stream))
        return _Batch(events, msgs)

    async def close(self) -> None:
        if self._sub is not None:
            try:
                await self._sub.unsubscribe()
            except Exception as exc:  # the connection may be gone already
                log.debug("keeper unsubscribe: %s", exc)
            self._sub = None


class NatsStateSink:
    def __init__(self, js: JetStreamContext, timeout_s: float, concurrency: int = 256) -> None:
        self._js = js
        self._timeout = timeout_s
        self._gate = asyncio.Semaphore(concurrency)

    async def _one(self, record: StateRecord) -> None:
        subject = record_subject(record)
        async with self._gate:
            await self._js.publish(subject, record_to_bytes(record), timeout=self._timeout)

    async def publish(self, records: Sequence[StateRecord]) -> None:
        outcomes = await asyncio.gather(*(self._one(r) for r in records), return_exceptions=True)
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise Unavailable(f"state publish failed: {outcome!r}") from outcome

    async def purge_tenant(self, tenant: str) -> None:
        try:
            await self._js.purge_stream(jsm.STREAM_STATE, subject=state_subject(tenant, ">"))
        except Exception as exc:
            raise Unavailable(f"state purge of {tenant} failed: {exc!r}") from exc

    async def relations(self, keys: Sequence[StateKey]) -> dict[StateKey, RelationRecord]:
        async def one(key: StateKey) -> RelationRecord | None:
            tenant, _, source, type_, target = key
            got = await last_record(
                self._js, self._gate, relation_subject(tenant, source, type_, target)
            )
            return got if isinstance(got, RelationRecord) else None

        try:
            found = await asyncio.gather(*(one(k) for k in keys))
        except Exception as exc:
            raise Unavailable(f"cannot read {jsm.STREAM_STATE}: {exc!r}") from exc
        return {k: r for k, r in zip(keys, found, strict=True) if r is not None}


def _position_to_bytes(p: KeeperPosition) -> bytes:
    msg = events_pb2.StateKeeperCheckpoint(
        sequence=p.sequence, events=p.events, states=p.states, holder=p.holder
    )
    if p.updated_at is not None:
        msg.updated_at.CopyFrom(ts_to_proto(p.updated_at))
    return msg.SerializeToString()


def _position_from_bytes(data: bytes) -> KeeperPosition:
    msg = events_pb2.StateKeeperCheckpoint.FromString(data)
    at: datetime | None = ts_from_proto(msg.updated_at) if msg.HasField("updated_at") else None
    return KeeperPosition(msg.sequence, msg.events, msg.states, msg.holder, at)


class KvKeeperCheckpoints:
    def __init__(self, kv: KeyValue) -> None:
        self._kv = kv

    async def load(self) -> tuple[KeeperPosition, int | None]:
        got = await read_entry(self._kv, jsm.KEEPER_KEY)
        return (KeeperPosition(), None) if got is None else (_position_from_bytes(got[0]), got[1])

    async def save(self, position: KeeperPosition, revision: int | None) -> int:
        return await write_entry(self._kv, jsm.KEEPER_KEY, _position_to_bytes(position), revision)


# --- readers: Sync and Rebuild -------------------------------------------------------------


class NatsStateLog:
    def __init__(self, js: JetStreamContext, kv: KeyValue, concurrency: int = 64) -> None:
        self._js = js
        self._kv = kv
        self._gate = asyncio.Semaphore(concurrency)

    async def last_sequence(self) -> int:
        try:
            info = await self._js.stream_info(jsm.STREAM_STATE)
        except Exception as exc:
            raise Unavailable(f"cannot read {jsm.STREAM_STATE}: {exc!r}") from exc
        return int(info.state.last_seq)

    async def size(self, tenant: str | None, kind: str) -> int:
        """The pending count of a throwaway consumer over the records."""
        config = ConsumerConfig(
            filter_subject=filter_subject(tenant, kind),
            ack_policy=AckPolicy.NONE,
            deliver_policy=DeliverPolicy.ALL,
            inactive_threshold=5.0,
            mem_storage=True,
        )
        try:
            info = await self._js.add_consumer(jsm.STREAM_STATE, config)
            if info.name:
                await self._js.delete_consumer(jsm.STREAM_STATE, info.name)
        except Exception as exc:
            raise Unavailable(f"cannot count {jsm.STREAM_STATE}: {exc!r}") from exc
        return int(info.num_pending or 0)

    async def records(
        self, tenant: str | None, kind: str, after: int, until: int, batch: int
    ) -> AsyncIterator[list[Positioned]]:
        subjects = [filter_subject(tenant, kind)]
        async for msgs in jsm.read_range(self._js, jsm.STREAM_STATE, subjects, after, until, batch):
            page: list[Positioned] = []
            for m in msgs:
                try:
                    record = record_from_bytes(m.subject, m.data)
                except (DecodeError, ValueError, IndexError) as exc:
                    log.warning("bad state record on %s: %s", m.subject, exc)
                    continue
                page.append(Positioned(m.metadata.sequence.stream, record))
            if page:
                yield page

    async def _last(self, tenant: str, id_: str) -> MemoryRecord | None:
        record = await last_record(self._js, self._gate, state_subject(tenant, MEMORIES, id_))
        return record if isinstance(record, MemoryRecord) else None

    async def memory_states(self, tenant: str, ids: Sequence[str]) -> dict[str, MemoryRecord]:
        try:
            got = await asyncio.gather(*(self._last(tenant, i) for i in ids))
        except Exception as exc:
            raise Unavailable(f"cannot read {jsm.STREAM_STATE}: {exc!r}") from exc
        return {r.id: r for r in got if r is not None}

    async def keeper_sequence(self) -> int:
        position, _ = await KvKeeperCheckpoints(self._kv).load()
        return position.sequence

    async def log_sequence(self) -> int:
        return await jsm.last_sequence(self._js)

    async def applied_sequence(self) -> int:
        return await jsm.watermark(self._js)
