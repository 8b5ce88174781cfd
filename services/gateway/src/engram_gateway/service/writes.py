"""The write path (DESIGN §3): validate everything, then publish events; reply after the ack."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from engram_core import validation as v
from engram_core.errors import EngramError, Internal, InvalidArgument, NotFound
from engram_core.model import Memory, Relation
from engram_core.ports import Cache
from engram_core.relations import ORIGIN_USER
from engram_gateway.service.deadline import Deadline
from engram_gateway.service.lookup import Lookup
from engram_gateway.service.ports import Envelope, EventLog
from engram_gateway.service.recall_cache import RecallCache
from engram_gateway.service.vector_size import LiveDimension
from engram_platform.telemetry import tracer

log = logging.getLogger(__name__)
_tracer = tracer(__name__)
# Namespace of event ids derived from idempotency keys (uuid5): fixed forever.
IDEMPOTENCY_NAMESPACE = uuid.UUID("7f3c2a9e-5d1b-4e8a-9c6f-2b0d4e1a8c37")
IDEMPOTENCY_PREFIX = "idem:"
# + tenant: the sequence of the tenant's latest deletion. Folded into the event ids derived
# from idempotency keys, so a key used before the deletion stores anew after it rather than
# being dropped as a duplicate of the deleted memory's event by the log's duplicate window.
IDEMPOTENCY_EPOCH = "idem-epoch:"


@dataclass(frozen=True, slots=True)
class StoreItem:
    input: v.MemoryInput
    idempotency_key: str = ""
    path: str = "memory"  # proto path of the input, for error fields
    key_path: str = "idempotency_key"


@dataclass(frozen=True, slots=True)
class ItemResult:
    """One item's outcome: stored (id, sequence), or the error of its publish."""

    id: str = ""
    sequence: int = 0
    duplicate: bool = False  # an earlier call with the same key stored it
    error: EngramError | None = None


@dataclass(frozen=True, slots=True)
class StoreOutcome:
    results: tuple[ItemResult, ...]  # per item, in request order

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(r.id for r in self.results)

    @property
    def sequence(self) -> int:
        """The highest sequence of the items stored."""
        return max((r.sequence for r in self.results if r.error is None), default=0)

    @property
    def failed(self) -> int:
        return sum(1 for r in self.results if r.error is not None)


@dataclass(frozen=True, slots=True)
class WriteConfig:
    limits: v.Limits
    idempotency_ttl_s: float
    publish_concurrency: int
    backend_timeout_s: float
    publish_timeout_s: float = 5.0  # cap of one publish's wait for the ack, within the deadline


@dataclass(slots=True)
class _Planned:
    memory: Memory
    event_id: str
    key: str  # idempotency key; "" when none
    cache_key: str
    sequence: int = 0  # known already when a retry is answered from the cache
    duplicate: bool = False
    error: EngramError | None = None
    embedding: tuple[float, ...] = ()  # the client's own vector, checked

    def result(self) -> ItemResult:
        if self.error is not None:
            return ItemResult(error=self.error)
        return ItemResult(self.memory.id, self.sequence, self.duplicate)


def event_id_for(tenant: str, key: str, epoch: str = "") -> str:
    name = f"{tenant}\n{key}" + (f"\n{epoch}" if epoch else "")
    return str(uuid.uuid5(IDEMPOTENCY_NAMESPACE, name))


def _idempotency_cache_key(tenant: str, key: str) -> str:
    return f"{IDEMPOTENCY_PREFIX}{tenant}:{hashlib.sha256(key.encode('utf-8')).hexdigest()}"


def _decode(value: bytes) -> tuple[str, int]:
    """Cache value "<id>" (publish pending) or "<id> <sequence>" (published)."""
    text = value.decode("ascii", "replace")
    mid, _, seq = text.partition(" ")
    return mid, int(seq) if seq.isdigit() else 0


def batch_items(
    inputs: Sequence[v.MemoryInput], batch_key: str, keys: Sequence[str], limits: v.Limits
) -> list[StoreItem]:
    """StoreBatch's items: item i's key is ``keys[i]``, else ``<batch_key>:<i>``, else none.

    A derived key names the item by its place, so a retry of the same batch (same items,
    same order) with the same batch key stores each item once."""
    if keys and len(keys) != len(inputs):
        raise InvalidArgument(
            "idempotency_keys", f"{len(keys)} keys for {len(inputs)} memories; give one per memory"
        )
    room = limits.max_idempotency_key_length - len(f":{max(0, len(inputs) - 1)}")
    if len(batch_key) > room:
        raise InvalidArgument(
            "idempotency_key",
            f"longer than {room} characters (each item's key <key>:<index> must fit in "
            f"{limits.max_idempotency_key_length})",
        )
    items = []
    for i, inp in enumerate(inputs):
        own = keys[i] if keys else ""
        key = own or (f"{batch_key}:{i}" if batch_key else "")
        path = f"idempotency_keys[{i}]" if own else "idempotency_key"
        items.append(StoreItem(inp, key, path=f"memories[{i}]", key_path=path))
    return items


def _vector(inp: v.MemoryInput, path: str, size: int) -> tuple[float, ...]:
    """The input's own vector, checked as a recall's is, against the live model's size."""
    return v.check_embedding(inp.embedding, f"{path}.embedding", dimension=size)


class Writer:
    def __init__(
        self,
        log_: EventLog,
        cache: Cache,
        lookup: Lookup,
        recall_cache: RecallCache,
        config: WriteConfig,
        clock: Callable[[], datetime],
        new_id: Callable[[], str],
        dimension: LiveDimension,
    ) -> None:
        self._log = log_
        self._dimension = dimension
        self._cache = cache
        self._lookup = lookup
        self._recall_cache = recall_cache
        self._config = config
        self._clock = clock
        self._new_id = new_id

    @property
    def limits(self) -> v.Limits:
        return self._config.limits

    def _publish_timeout(self, deadline: Deadline) -> float:
        """What is left of the caller's deadline, capped: a publish never outlives its call."""
        return deadline.cap(self._config.publish_timeout_s)

    # --- store --------------------------------------------------------------------

    async def store(
        self, tenant: str, items: Sequence[StoreItem], deadline: Deadline
    ) -> StoreOutcome:
        """Validate all items (nothing is published if one is bad), then publish each one.

        Each item gets its own result: one failed publish does not fail the items stored
        beside it. Only when no item was stored does the call fail, with the first error."""
        now = self._clock()
        limits = self._config.limits
        size = await self._vector_size(any(item.input.embedding for item in items), deadline)
        memories, vectors = [], []
        for item in items:
            v.check_idempotency_key(item.idempotency_key, item.key_path, limits)
            memories.append(
                v.new_memory(item.input, tenant=tenant, prefix=item.path, now=now, limits=limits)
            )
            vectors.append(_vector(item.input, item.path, size))
        keyed = any(item.idempotency_key for item in items)
        epoch = await self._key_epoch(tenant) if keyed else ""
        planned = await asyncio.gather(
            *(
                self._plan(tenant, m, item.idempotency_key, epoch)
                for m, item in zip(memories, items, strict=True)
            )
        )
        for p, vector in zip(planned, vectors, strict=True):
            p.embedding = vector
        sem = asyncio.Semaphore(self._config.publish_concurrency)
        # Pipelined: every publish is in flight at once (bounded), acks come back together.
        pending = [p for p in planned if not p.sequence]
        with _tracer.start_as_current_span("engram.gateway/log.publish") as span:
            span.set_attribute("engram.events", len(pending))
            await asyncio.gather(*(self._publish(tenant, now, p, sem, deadline) for p in pending))
        published = [p.sequence for p in pending if p.error is None]
        if published:
            await self._recall_cache.invalidate(tenant, max(published))
        outcome = StoreOutcome(tuple(p.result() for p in planned))
        if outcome.failed == len(planned):
            raise next(p.error for p in planned if p.error is not None)
        return outcome

    async def _publish(
        self,
        tenant: str,
        now: datetime,
        p: _Planned,
        sem: asyncio.Semaphore,
        deadline: Deadline,
    ) -> None:
        """Publish one planned item; its failure is kept on it, not raised."""
        env = Envelope(p.event_id, tenant, now)
        try:
            async with sem:
                ack = await self._log.stored(
                    env, p.memory, self._publish_timeout(deadline), p.embedding
                )
            if ack.duplicate and p.key:
                # A retry the log already holds: its first publish may carry another id
                # when the key→id entry was lost, and the first publish is what counts.
                first = await self._log.stored_memory_id(ack.sequence)
                if first:
                    p.memory = replace(p.memory, id=first)
        except EngramError as err:
            p.error = err
            return
        except Exception:  # a bug must not hide which of the other items are stored
            ref = uuid.uuid4().hex[:12]
            log.exception("publishing a memory failed (ref %s)", ref)
            p.error = Internal(f"internal error (ref {ref})")
            return
        p.sequence, p.duplicate = ack.sequence, ack.duplicate
        if p.key:
            value = f"{p.memory.id} {p.sequence}".encode("ascii")
            await self._cache.set(p.cache_key, value, self._config.idempotency_ttl_s)

    async def _vector_size(self, wanted: bool, deadline: Deadline) -> int:
        """The size a client's vector must have (0 when the request carries none)."""
        if not wanted:
            return 0
        return await self._dimension.get(deadline.cap(self._config.backend_timeout_s))

    async def _key_epoch(self, tenant: str) -> str:
        held = await self._cache.get(IDEMPOTENCY_EPOCH + tenant)
        return held.decode("ascii", "replace") if held else ""

    async def _plan(self, tenant: str, memory: Memory, key: str, epoch: str = "") -> _Planned:
        assigned = memory.id or self._new_id()
        if not key:
            return _Planned(replace(memory, id=assigned), self._new_id(), "", "")
        cache_key = _idempotency_cache_key(tenant, key)
        event_id = event_id_for(tenant, key, epoch)
        held = await self._cache.get(cache_key)
        if held is not None:
            mid, seq = _decode(held)
            if seq:  # published before: answer as then, publish nothing
                return _Planned(
                    replace(memory, id=mid), event_id, key, cache_key, seq, duplicate=True
                )
        else:
            held = await self._cache.set_if_absent(
                cache_key, assigned.encode("ascii"), self._config.idempotency_ttl_s
            )
        mid = _decode(held)[0] if held is not None else assigned
        # A client-given id wins over a remembered one: the request names it.
        return _Planned(replace(memory, id=memory.id or mid), event_id, key, cache_key)

    # --- update, delete, associate --------------------------------------------------

    async def update(
        self,
        tenant: str,
        id: str,
        inp: v.MemoryInput,
        mask: Sequence[str],
        deadline: Deadline,
    ) -> tuple[str, int]:
        limits = self._config.limits
        mid = v.check_id(id, "id")
        paths = v.check_update_mask(mask, inp)
        size = await self._vector_size("embedding" in paths and bool(inp.embedding), deadline)
        vector = _vector(inp, "memory", size) if "embedding" in paths else ()
        now = self._clock()
        # Check the new values before reading anything: bad input is refused as such
        # even for an id that does not exist.
        v.merge_update(
            Memory(id=mid, tenant=tenant, content="-"),
            inp,
            paths,
            prefix="memory",
            now=now,
            limits=limits,
        )
        current = await self._lookup.one(tenant, mid, deadline.cap(self._config.backend_timeout_s))
        merged = v.merge_update(current, inp, paths, prefix="memory", now=now, limits=limits)
        ack = await self._log.updated(
            Envelope(self._new_id(), tenant, now),
            merged,
            paths,
            self._publish_timeout(deadline),
            vector,
        )
        await self._recall_cache.invalidate(tenant, ack.sequence)
        return mid, ack.sequence

    async def delete(self, tenant: str, id: str, deadline: Deadline) -> tuple[str, int]:
        mid = v.check_id(id, "id")
        await self._lookup.one(tenant, mid, deadline.cap(self._config.backend_timeout_s))
        env = Envelope(self._new_id(), tenant, self._clock())
        ack = await self._log.deleted(env, mid, self._publish_timeout(deadline))
        await self._recall_cache.invalidate(tenant, ack.sequence)
        return mid, ack.sequence

    async def associate(
        self,
        tenant: str,
        source_id: str,
        target_id: str,
        type: str,
        strength: float,
        properties: Mapping[str, Any] | None,
        deadline: Deadline,
    ) -> int:
        limits = self._config.limits
        src = v.check_id(source_id, "source_id")
        dst = v.check_id(target_id, "target_id")
        if src == dst:
            raise InvalidArgument("target_id", "must differ from source_id")
        rel_type = v.check_user_relation_type(type, "type")
        weight = v.check_strength(strength, "strength")
        props = v.check_metadata(properties, "properties", limits)
        found = await self._lookup.many(
            tenant, [src, dst], deadline.cap(self._config.backend_timeout_s)
        )
        for name, mid in (("source_id", src), ("target_id", dst)):
            if mid not in found:
                raise NotFound(f"{name} {mid} not found")
        now = self._clock()
        relation = Relation(
            source_id=src,
            target_id=dst,
            type=rel_type.value,
            strength=weight,
            properties=props,
            origin=ORIGIN_USER,
            created_at=now,
        )
        ack = await self._log.relation_added(
            Envelope(self._new_id(), tenant, now), relation, self._publish_timeout(deadline)
        )
        await self._recall_cache.invalidate(tenant, ack.sequence)
        return ack.sequence
