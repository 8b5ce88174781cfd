"""The worker's side of the log: the events it publishes (the gateway's, so ingest applies
them as any other), the stream of consolidation requests, and the tenants the log knows.

Names shared with the gateway (which publishes requests and reads the KV bucket):
stream ``ENGRAM_CONSOLIDATE`` with subjects ``engram.<tenant>.consolidate.v1``, KV bucket
``ENGRAM_CONSOLIDATE``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

from google.protobuf.field_mask_pb2 import FieldMask
from google.protobuf.message import Message
from nats.js import JetStreamContext
from nats.js.api import RetentionPolicy, StorageType, StreamConfig
from nats.js.errors import NotFoundError

from engram.events.v1 import events_pb2
from engram_consolidate.mapping import CONSOLIDATE_EVENT
from engram_core.errors import Unavailable
from engram_core.log_events import MemoryWritten
from engram_core.model import Memory, Relation, utcnow
from engram_platform import jetstream as jsm
from engram_platform.convert import memory_to_proto, relation_to_proto, ts_to_proto
from engram_platform.log_events import decode
from engram_platform.settings import NatsSettings
from engram_platform.telemetry import inject_context

log = logging.getLogger(__name__)

STREAM_CONSOLIDATE = jsm.STREAM_CONSOLIDATE
DURABLE_REQUESTS = "consolidate-requests"


async def ensure_request_stream(js: JetStreamContext, settings: NatsSettings) -> None:
    """The stream of consolidation requests: a work queue (a request is gone once acked)."""
    config = StreamConfig(
        name=STREAM_CONSOLIDATE,
        subjects=[jsm.subject("*", CONSOLIDATE_EVENT)],
        retention=RetentionPolicy.WORK_QUEUE,
        storage=StorageType.FILE,
        num_replicas=settings.stream_replicas,
        duplicate_window=settings.duplicate_window_s,
    )
    await jsm.ensure_stream(js, config, settings.ready_wait_s)


class LogEvents:
    """EventSink on JetStream: the gateway's event protos and subjects, Nats-Msg-Id = the
    event id (deterministic per run and change, so a republished event is dropped)."""

    def __init__(self, js: JetStreamContext, timeout_s: float) -> None:
        self._js = js
        self._timeout = timeout_s

    async def _publish(
        self,
        tenant: str,
        event: str,
        event_id: str,
        build: Callable[[events_pb2.Envelope], Message],
    ) -> bool:
        trace = inject_context()
        envelope = events_pb2.Envelope(
            event_id=event_id, tenant=tenant, occurred_at=ts_to_proto(utcnow()), trace_context=trace
        )
        subject = jsm.subject(tenant, event)
        headers = {jsm.EVENT_HEADER: event, **trace}
        try:
            ack = await asyncio.wait_for(
                self._js.publish(
                    subject,
                    build(envelope).SerializeToString(),
                    headers={"Nats-Msg-Id": event_id, **headers},
                ),
                self._timeout,
            )
        except Exception as exc:
            raise Unavailable(f"log publish to {subject} failed: {exc!r}") from exc
        return not ack.duplicate

    async def stored(self, tenant: str, memory: Memory, event_id: str) -> bool:
        proto = memory_to_proto(memory)
        return await self._publish(
            tenant,
            jsm.MEMORY_STORED,
            event_id,
            lambda e: events_pb2.MemoryStored(envelope=e, memory=proto),
        )

    async def updated(
        self, tenant: str, memory: Memory, mask: Sequence[str], event_id: str
    ) -> bool:
        proto = memory_to_proto(memory)
        return await self._publish(
            tenant,
            jsm.MEMORY_UPDATED,
            event_id,
            lambda e: events_pb2.MemoryUpdated(
                envelope=e, memory=proto, update_mask=FieldMask(paths=list(mask))
            ),
        )

    async def deleted(self, tenant: str, id: str, event_id: str) -> bool:
        return await self._publish(
            tenant,
            jsm.MEMORY_DELETED,
            event_id,
            lambda e: events_pb2.MemoryDeleted(envelope=e, id=id),
        )

    async def relation_added(self, tenant: str, relation: Relation, event_id: str) -> bool:
        proto = relation_to_proto(relation)
        return await self._publish(
            tenant,
            jsm.RELATION_ADDED,
            event_id,
            lambda e: events_pb2.RelationAdded(envelope=e, relation=proto),
        )

    async def relation_removed(self, tenant: str, relation: Relation, event_id: str) -> bool:
        return await self._publish(
            tenant,
            jsm.RELATION_REMOVED,
            event_id,
            lambda e: events_pb2.RelationRemoved(
                envelope=e,
                source_id=relation.source_id,
                target_id=relation.target_id,
                type=relation.type,
                origin=relation.origin,
            ),
        )


class LogTenants:
    """Every tenant that ever stored a memory: the tenant tokens of the memory stream's
    ``memory_stored`` subjects (kept while the stream keeps no age limit)."""

    def __init__(self, js: JetStreamContext) -> None:
        self._js = js

    async def tenants(self) -> set[str]:
        try:
            info = await self._js.stream_info(
                jsm.STREAM_MEMORY, subjects_filter=jsm.subject("*", jsm.MEMORY_STORED)
            )
        except Exception as exc:
            raise Unavailable(f"cannot list the log's tenants: {exc}") from exc
        subjects = info.state.subjects or {}
        return {parts[1] for s in subjects if len(parts := s.split(".")) == 4}


class LogMarks:
    """A tenant's applied log position: the sequence of its newest event on the memory
    stream (``engram.<tenant>.*.v1``: memories and relations), once the ingest consumer's
    ack floor — the sequence at and below which every store has applied every event —
    has reached it; and the memories written between two such positions (an ephemeral
    consumer on the tenant's stored and updated subjects, from the first one on)."""

    def __init__(self, js: JetStreamContext) -> None:
        self._js = js

    async def applied_mark(self, tenant: str) -> int:
        try:
            newest = await self._js.get_last_msg(jsm.STREAM_MEMORY, jsm.subject(tenant, "*"))
        except NotFoundError:
            return 0  # no event of the tenant
        except Exception as exc:
            raise Unavailable(f"cannot read the log position of {tenant}: {exc}") from exc
        seq = int(newest.seq or 0)
        return seq if await jsm.watermark(self._js) >= seq else 0

    async def written_ids(self, tenant: str, after: int, upto: int, limit: int) -> list[str] | None:
        try:
            first = int((await self._js.stream_info(jsm.STREAM_MEMORY)).state.first_seq or 0)
        except Exception as exc:
            raise Unavailable(f"cannot read the log of {tenant}: {exc!r}") from exc
        if first > after + 1:
            return None  # events after `after` were purged: the range cannot be read whole
        subjects = [jsm.subject(tenant, e) for e in _WRITTEN]
        ids: dict[str, None] = {}
        events = 0
        async for page in jsm.read_range(self._js, jsm.STREAM_MEMORY, subjects, after, upto, 256):
            events += len(page)
            if events > limit:
                return None
            for m in page:
                # As ingest reads it; an undecodable event is dead-lettered, in no store.
                event = decode(m.subject, m.data, m.metadata.sequence.stream).event
                if isinstance(event, MemoryWritten):
                    ids[event.memory.id] = None
        return list(ids)


_WRITTEN = (jsm.MEMORY_STORED, jsm.MEMORY_UPDATED)
