"""The log: stream and subject names, connection, durable publish, the applied watermark."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence

import nats
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    DeliverPolicy,
    RetentionPolicy,
    StorageType,
    StreamConfig,
)
from nats.js.errors import APIError, NotFoundError, ServiceUnavailableError

from engram_core.errors import FailedPrecondition, Unavailable
from engram_platform.settings import NatsSettings

log = logging.getLogger(__name__)

STREAM_MEMORY = "ENGRAM_MEMORY"
STREAM_ACCESS = "ENGRAM_ACCESS"
STREAM_DEADLETTER = "ENGRAM_DEADLETTER"
# Consolidation requests (work queue, engram.<tenant>.consolidate.v1) and the KV bucket of
# pass status and checkpoints: written by the consolidate worker, read by the gateway.
STREAM_CONSOLIDATE = "ENGRAM_CONSOLIDATE"
CONSOLIDATE_EVENT = "consolidate"
CONSOLIDATE_BUCKET = "ENGRAM_CONSOLIDATE"
# The latest-state log: one message kept per memory and per relation (engram.<tenant>.state.…),
# written by the consolidate worker's state keeper; Sync and Rebuild read it.
STREAM_STATE = "ENGRAM_STATE"
# The state keeper's checkpoint (StateKeeperCheckpoint) in CONSOLIDATE_BUCKET.
KEEPER_KEY = "state.keeper"
# Which memory events ingest has decided (applied or dead-lettered), one key per event
# (<tenant>.<sequence>), so a tenant's read-your-writes wait need not wait for the ack
# floor, which any tenant's backlog holds. Kept as long as an ack floor may plausibly lag.
APPLIED_BUCKET = "ENGRAM_APPLIED"
APPLIED_MAX_AGE_S = 15 * 60.0
# Most events of one tenant a read-your-writes check looks up above the ack floor before
# it leaves the wait to the floor.
TENANT_LOOKUPS = 64

MEMORY_STORED = "memory_stored"
MEMORY_UPDATED = "memory_updated"
MEMORY_DELETED = "memory_deleted"
RELATION_ADDED = "relation_added"
RELATION_REMOVED = "relation_removed"
MEMORY_ACCESSED = "memory_accessed"
TENANT_DELETED = "tenant_deleted"
DEAD_LETTER = "dead_letter"

MEMORY_EVENTS = (
    MEMORY_STORED,
    MEMORY_UPDATED,
    MEMORY_DELETED,
    RELATION_ADDED,
    RELATION_REMOVED,
    TENANT_DELETED,
)
DURABLE_INGEST = "ingest-apply"
DURABLE_ACCESS = "consolidate-access"

EVENT_HEADER = "Engram-Event"
TENANT_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def subject(tenant: str, event: str) -> str:
    """engram.<tenant>.<event>.v1 — tenants are single subject tokens (see TENANT_RE)."""
    return f"engram.{tenant}.{event}.v1"


def event_of(subject_name: str) -> str:
    parts = subject_name.split(".")
    return parts[2] if len(parts) == 4 else ""


async def connect(settings: NatsSettings, name: str) -> tuple[Client, JetStreamContext]:
    """Connect, waiting as long as it takes for a server (a pod may start before NATS);
    each failed attempt and each lost or regained connection is one log line."""

    async def failed(exc: Exception) -> None:
        log.warning("NATS at %s: %s", settings.url, exc)

    async def lost() -> None:
        log.warning("NATS at %s: disconnected, reconnecting", settings.url)

    async def regained() -> None:
        log.info("NATS at %s: reconnected", settings.url)

    try:
        nc = await nats.connect(
            servers=[s.strip() for s in settings.url.split(",")],
            name=f"engram-{name}",
            connect_timeout=settings.connect_timeout_s,
            max_reconnect_attempts=-1,
            allow_reconnect=True,
            error_cb=failed,
            disconnected_cb=lost,
            reconnected_cb=regained,
        )
    except Exception as exc:
        raise Unavailable(f"cannot connect to NATS at {settings.url}: {exc}") from exc
    return nc, nc.jetstream()


async def ensure_streams(js: JetStreamContext, settings: NatsSettings) -> None:
    """Create or update the streams (idempotent; safe from every replica)."""
    streams = {
        STREAM_MEMORY: [subject("*", e) for e in MEMORY_EVENTS],
        STREAM_ACCESS: [subject("*", MEMORY_ACCESSED)],
        STREAM_DEADLETTER: [subject("*", DEAD_LETTER)],
    }
    for name, subjects in streams.items():
        config = StreamConfig(
            name=name,
            subjects=subjects,
            retention=RetentionPolicy.LIMITS,
            storage=StorageType.FILE,
            num_replicas=settings.stream_replicas,
            duplicate_window=settings.duplicate_window_s,
        )
        await ensure_stream(js, config, settings.ready_wait_s)
    await ensure_stream(js, _applied_bucket(settings), settings.ready_wait_s)


def _applied_bucket(settings: NatsSettings) -> StreamConfig:
    """The KV bucket APPLIED_BUCKET as the stream behind it (what `js.create_key_value`
    would make), so `ensure_stream` creates or updates it like the others."""
    return StreamConfig(
        name=f"KV_{APPLIED_BUCKET}",
        subjects=[f"$KV.{APPLIED_BUCKET}.>"],
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.FILE,
        num_replicas=settings.stream_replicas,
        max_msgs_per_subject=1,
        max_age=APPLIED_MAX_AGE_S,
    )


async def mark_decided(js: JetStreamContext, decided: Sequence[tuple[str, int]]) -> None:
    """Record (tenant, sequence) of memory events that ingest has decided; pipelined, and
    raising Unavailable when the log did not take every mark (the wait then falls back to
    the ack floor for them)."""
    try:
        futures = [await js.publish_async(_mark(tenant, seq), b"") for tenant, seq in decided]
        await asyncio.gather(*futures)
    except Exception as exc:
        raise Unavailable(f"cannot record decided events: {exc!r}") from exc


def _mark(tenant: str, sequence: int) -> str:
    return f"$KV.{APPLIED_BUCKET}.{tenant}.{sequence}"


async def tenant_decided(
    js: JetStreamContext, tenant: str, after: int, until: int, lookups: int = TENANT_LOOKUPS
) -> bool:
    """Whether every memory event of ``tenant`` with a sequence in (``after``, ``until``] is
    decided (`mark_decided`); False too when more than ``lookups`` of its events are in
    the range."""
    return await tenant_decided_through(js, tenant, after, until, lookups) >= until


async def tenant_decided_through(
    js: JetStreamContext, tenant: str, after: int, until: int, lookups: int = TENANT_LOOKUPS
) -> int:
    """How far every memory event of ``tenant`` from ``after`` on is decided
    (`mark_decided`): ``until`` when all in (``after``, ``until``] are, else the sequence
    before the first that is not, or the last of ``lookups`` looked up (a caller goes on
    from there). Walks the tenant's events by subject, not the whole log, so other
    tenants' events in between cost nothing."""
    seq = after + 1
    for _ in range(lookups):
        if seq > until:
            return until
        try:
            event = await js.get_msg(STREAM_MEMORY, seq, subject(tenant, "*"), next=True)
        except NotFoundError:
            return until  # none of the tenant's events at or after seq
        except Exception as exc:
            raise Unavailable(f"cannot read the log: {exc!r}") from exc
        if event.seq is None or event.seq > until:
            return until
        try:
            await js.get_msg(f"KV_{APPLIED_BUCKET}", subject=_mark(tenant, event.seq))
        except NotFoundError:
            return event.seq - 1
        except Exception as exc:
            raise Unavailable(f"cannot read the decided events: {exc!r}") from exc
        seq = event.seq + 1
    return seq - 1


async def ensure_stream(js: JetStreamContext, config: StreamConfig, wait_s: float = 0.0) -> None:
    """Create the stream, or bring an existing one to `config` (its messages stay); while
    JetStream does not answer, try again every second for up to `wait_s`."""
    if not config.name:
        raise ValueError("a stream configuration needs a name")
    deadline = time.monotonic() + wait_s
    while True:
        try:
            with setting_up(f"stream {config.name}", config.num_replicas or 1):
                try:
                    await js.stream_info(config.name)
                    await js.update_stream(config)
                except NotFoundError:
                    await js.add_stream(config)
            return
        except Unavailable as exc:
            if time.monotonic() >= deadline:
                raise
            log.warning("%s; trying again", exc)
            await asyncio.sleep(min(1.0, max(deadline - time.monotonic(), 0.0)))


@contextlib.contextmanager
def setting_up(what: str, replicas: int) -> Iterator[None]:
    """A stream or bucket configuration the server refuses — most often
    `NATS__STREAM_REPLICAS` above 1 on a server that is not clustered, or above its number
    of nodes — stops the start with the server's reason, not a bare API error; a server
    not ready yet (no answer, or a cluster electing its leader) is Unavailable."""
    try:
        yield
    except (ServiceUnavailableError, nats.errors.TimeoutError) as exc:
        raise Unavailable(f"JetStream could not set up {what}: {exc}") from exc
    except APIError as exc:
        raise FailedPrecondition(
            "NATS__STREAM_REPLICAS",
            f"JetStream refused {what} with {replicas} replica(s): {exc.description}",
        ) from exc


async def publish(
    js: JetStreamContext,
    subject_name: str,
    payload: bytes,
    msg_id: str,
    headers: Mapping[str, str] | None = None,
    timeout_s: float = 5.0,
) -> tuple[int, bool]:
    """Publish and wait for the server's ack (on disk). Returns (sequence, duplicate)."""
    all_headers = {"Nats-Msg-Id": msg_id, **(headers or {})}
    try:
        ack = await js.publish(subject_name, payload, timeout=timeout_s, headers=all_headers)
    except Exception as exc:
        raise Unavailable(f"log publish to {subject_name} failed: {exc}") from exc
    return int(ack.seq), bool(ack.duplicate)


async def watermark(js: JetStreamContext) -> int:
    """Highest sequence at and below which every memory event is applied in all stores.

    The ingest consumer acks an event only after all three stores have it, so the
    consumer's ack floor is exactly that watermark — kept by the server, correct
    however many ingest replicas finish out of order.
    """
    try:
        info = await js.consumer_info(STREAM_MEMORY, DURABLE_INGEST)
    except NotFoundError:
        return 0
    except Exception as exc:
        raise Unavailable(f"cannot read the watermark: {exc}") from exc
    return int(info.ack_floor.stream_seq or 0) if info.ack_floor else 0


async def last_sequence(js: JetStreamContext) -> int:
    try:
        info = await js.stream_info(STREAM_MEMORY)
    except Exception as exc:
        raise Unavailable(f"cannot read the log: {exc}") from exc
    return int(info.state.last_seq)


async def tenant_last_sequence(js: JetStreamContext, tenant: str) -> int:
    """The sequence of ``tenant``'s newest memory event, 0 when it has none: a position
    the tenant was given itself, so it tells nothing of other tenants' writes."""
    try:
        raw = await js.get_last_msg(STREAM_MEMORY, subject(tenant, "*"))
    except NotFoundError:
        return 0
    except Exception as exc:
        raise Unavailable(f"cannot read the log: {exc!r}") from exc
    return int(raw.seq or 0)


async def read_range(
    js: JetStreamContext,
    stream: str,
    subjects: Sequence[str],
    after: int,
    until: int,
    batch: int,
) -> AsyncIterator[list[Msg]]:
    """The messages of ``stream`` on ``subjects`` with sequences in (``after``, ``until``],
    in order, ``batch`` at a time (the end of the stream ends it early), through an
    ephemeral consumer deleted afterwards. A read that fails or skips a message raises
    Unavailable: read the range again."""
    if until <= after:
        return
    config = ConsumerConfig(
        ack_policy=AckPolicy.NONE,
        deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
        opt_start_seq=after + 1,
        filter_subjects=list(subjects),
        inactive_threshold=60.0,
        mem_storage=True,
    )
    try:
        info = await js.add_consumer(stream, config)
        sub = await js.pull_subscribe_bind(info.name, stream=stream)
    except Exception as exc:
        raise Unavailable(f"cannot read {stream}: {exc!r}") from exc
    delivered = 0
    try:
        while True:
            try:
                msgs = await sub.fetch(batch, timeout=2.0)
            except TimeoutError:
                return  # nothing after: the end of the stream
            except Exception as exc:
                raise Unavailable(f"cannot read {stream}: {exc!r}") from exc
            page: list[Msg] = []
            done = not msgs
            for m in msgs:
                meta = m.metadata
                if meta.sequence.consumer != delivered + 1:
                    raise Unavailable(f"{stream} read lost a message; read again")
                delivered = meta.sequence.consumer
                if meta.sequence.stream > until:
                    done = True
                    break
                page.append(m)
                if meta.sequence.stream >= until or not meta.num_pending:
                    done = True
            if page:
                yield page
            if done:
                return
    finally:
        try:  # else it lingers until inactive_threshold
            await sub.unsubscribe()
            await js.delete_consumer(stream, info.name)
        except Exception as exc:
            log.debug("range reader cleanup on %s: %s", stream, exc)
