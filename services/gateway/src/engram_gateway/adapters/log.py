"""EventLog on JetStream: one event per message, Nats-Msg-Id = event id, reply after the ack."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from datetime import datetime

from google.protobuf.field_mask_pb2 import FieldMask
from google.protobuf.message import Message
from nats.js import JetStreamContext

from engram.events.v1 import events_pb2
from engram_core.errors import Unavailable
from engram_core.model import Memory, Relation
from engram_gateway.service import metrics
from engram_gateway.service.metrics import published
from engram_gateway.service.ports import Ack, Envelope
from engram_platform import jetstream
from engram_platform.convert import memory_to_proto, relation_to_proto, ts_to_proto
from engram_platform.telemetry import inject_context

log = logging.getLogger(__name__)


class JetStreamLog:
    def __init__(self, js: JetStreamContext, timeout_s: float) -> None:
        self._js = js
        self._timeout = timeout_s

    async def _publish(
        self,
        env: Envelope,
        event: str,
        build: Callable[[events_pb2.Envelope], Message],
        timeout: float | None = None,
    ) -> Ack:
        trace = inject_context()
        envelope = events_pb2.Envelope(
            event_id=env.event_id,
            tenant=env.tenant,
            occurred_at=ts_to_proto(env.occurred_at),
            trace_context=trace,
        )
        subject = jetstream.subject(env.tenant, event)
        # The trace also rides in the headers, for consumers that trace before decoding.
        headers = {"Nats-Msg-Id": env.event_id, jetstream.EVENT_HEADER: event, **trace}
        wait = self._timeout if timeout is None else min(timeout, self._timeout)
        # publish_async + awaiting the ack future pipelines many publishes on one connection
        # (about 1.6x js.publish's rate here); the reply still waits for the ack.
        try:
            async with asyncio.timeout(wait):
                future = await self._js.publish_async(
                    subject, build(envelope).SerializeToString(), headers=headers
                )
                ack = await future
        except TimeoutError as exc:
            published(event, metrics.TIMEOUT)
            raise Unavailable(
                f"log publish to {subject} not acknowledged within {wait:.3f}s; the log may "
                "hold it all the same: retry with the same idempotency key"
            ) from exc
        except Exception as exc:
            published(event, metrics.failure_reason(exc))
            raise Unavailable(f"log publish to {subject} failed: {exc!r}") from exc
        published(event, "duplicate" if ack.duplicate else "ok")
        return Ack(int(ack.seq), bool(ack.duplicate))

    async def stored(
        self,
        env: Envelope,
        memory: Memory,
        timeout: float | None = None,
        embedding: Sequence[float] = (),
    ) -> Ack:
        proto = memory_to_proto(memory)
        return await self._publish(
            env,
            jetstream.MEMORY_STORED,
            lambda e: events_pb2.MemoryStored(envelope=e, memory=proto, embedding=embedding),
            timeout,
        )

    async def updated(
        self,
        env: Envelope,
        memory: Memory,
        mask: Sequence[str],
        timeout: float | None = None,
        embedding: Sequence[float] = (),
    ) -> Ack:
        proto = memory_to_proto(memory)
        return await self._publish(
            env,
            jetstream.MEMORY_UPDATED,
            lambda e: events_pb2.MemoryUpdated(
                envelope=e,
                memory=proto,
                update_mask=FieldMask(paths=list(mask)),
                embedding=embedding,
            ),
            timeout,
        )

    async def deleted(self, env: Envelope, id: str, timeout: float | None = None) -> Ack:
        return await self._publish(
            env,
            jetstream.MEMORY_DELETED,
            lambda e: events_pb2.MemoryDeleted(envelope=e, id=id),
            timeout,
        )

    async def relation_added(
        self, env: Envelope, relation: Relation, timeout: float | None = None
    ) -> Ack:
        proto = relation_to_proto(relation)
        return await self._publish(
            env,
            jetstream.RELATION_ADDED,
            lambda e: events_pb2.RelationAdded(envelope=e, relation=proto),
            timeout,
        )

    async def accessed(self, env: Envelope, ids: Sequence[str], at: datetime) -> Ack:
        return await self._publish(
            env,
            jetstream.MEMORY_ACCESSED,
            lambda e: events_pb2.MemoryAccessed(
                envelope=e, ids=list(ids), accessed_at=ts_to_proto(at)
            ),
        )

    async def tenant_deleted(self, env: Envelope, timeout: float | None = None) -> Ack:
        return await self._publish(
            env,
            jetstream.TENANT_DELETED,
            lambda e: events_pb2.TenantDeleted(envelope=e),
            timeout,
        )

    async def stored_memory_id(self, sequence: int) -> str | None:
        try:
            raw = await self._js.get_msg(jetstream.STREAM_MEMORY, sequence)
            return events_pb2.MemoryStored.FromString(raw.data or b"").memory.id or None
        except Exception as exc:  # the caller falls back to the id it has
            log.warning("cannot read the stored event at sequence %d: %s", sequence, exc)
            return None

    async def watermark(self) -> int:
        return await jetstream.watermark(self._js)

    async def tenant_decided_through(self, tenant: str, after: int, until: int) -> int:
        return await jetstream.tenant_decided_through(self._js, tenant, after, until)

    async def tenant_last_sequence(self, tenant: str) -> int:
        return await jetstream.tenant_last_sequence(self._js, tenant)

    async def last_sequence(self) -> int:
        return await jetstream.last_sequence(self._js)
