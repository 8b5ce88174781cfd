"""The latest-state log (ENGRAM_STATE) and its keeper.

The log of memory events (ENGRAM_MEMORY) keeps every event; ENGRAM_STATE keeps, per memory
and per relation, one message: the state the newest event left. Stores can be checked
against it (Sync) and rebuilt from it (Rebuild) without replaying history.

ONE keeper writes it: the worker holding the lease ``consolidate:state-keeper`` reads
ENGRAM_MEMORY in log order from its checkpoint (the last sequence whose state is
published) and, per batch, publishes the newest state of every key the batch touched,
then moves the checkpoint (compare-and-set: the fence beside the lease). One writer in log
order, so the kept message of a key is always the newest. A crash redoes the batch in
flight from the checkpoint: the same states again, in the same order.

The keeper reads the events ingest reads and skips what ingest would never apply (one
definition of both: ``engram_core.log_events``), so the state agrees with what the stores
were told. Likewise a system edge never replaces a user edge, and a removal whose origin is
``system`` never removes one (the graph's rules): for those the keeper reads the key's kept
state first.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Protocol

from engram_consolidate.service import metrics
from engram_consolidate.service.ports import FenceLost
from engram_core.log_events import (
    Event,
    MemoryRemoved,
    MemoryWritten,
    RelationLinked,
    RelationUnlinked,
    TenantErased,
)
from engram_core.log_events import invalid as event_invalid
from engram_core.model import Memory, Relation
from engram_core.ports import Lease
from engram_core.relations import ORIGIN_SYSTEM, parse_relation_type

log = logging.getLogger(__name__)

KEEPER_LEASE = "consolidate:state-keeper"


# --- what ENGRAM_STATE holds -------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MemoryRecord:
    """The latest state of one memory. ``memory`` None: deleted at ``version`` (a tombstone)."""

    tenant: str
    id: str
    version: int
    memory: Memory | None

    @property
    def deleted(self) -> bool:
        return self.memory is None


@dataclass(frozen=True, slots=True)
class RelationRecord:
    tenant: str
    relation: Relation  # type in the registry's spelling
    version: int
    removed: bool = False


StateRecord = MemoryRecord | RelationRecord
StateKey = tuple[str, ...]


def key_of(record: StateRecord) -> StateKey:
    if isinstance(record, MemoryRecord):
        return (record.tenant, "memory", record.id)
    r = record.relation
    return (record.tenant, "relation", r.source_id, r.type, r.target_id)


# --- what the keeper reads ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Ignored:
    """A message of the log no store applies (undecodable, poison, another event kind)."""

    sequence: int
    reason: str


# The events themselves and their rules are ingest's (engram_core.log_events).
LogEvent = Event | Ignored


def invalid(event: LogEvent) -> str:
    """Why ingest would never apply ``event`` ("" when it would): the keeper keeps no state
    for those, so the log's state is what the stores were told."""
    return event.reason if isinstance(event, Ignored) else event_invalid(event)


def by_system(event: LogEvent) -> bool:
    """A relation event the graph ignores where a user edge stands."""
    return (
        isinstance(event, RelationLinked | RelationUnlinked)
        and event.relation.origin == ORIGIN_SYSTEM
    )


def _user_edge(record: StateRecord | None) -> bool:
    return (
        isinstance(record, RelationRecord)
        and not record.removed
        and record.relation.origin != ORIGIN_SYSTEM
    )


def state_of(event: LogEvent, held: StateRecord | None = None) -> StateRecord | None:
    """The state ``event`` leaves for its key (None: it changes no state); ``held`` is the
    key's state before it (read only for ``by_system`` events)."""
    if invalid(event) or isinstance(event, Ignored | TenantErased):
        return None
    if by_system(event) and _user_edge(held):
        return None
    if isinstance(event, MemoryWritten):
        memory = replace(event.memory, tenant=event.tenant, version=event.sequence)
        return MemoryRecord(event.tenant, memory.id, event.sequence, memory)
    if isinstance(event, MemoryRemoved):
        return MemoryRecord(event.tenant, event.id, event.sequence, None)
    rel_type = parse_relation_type(event.relation.type)
    assert rel_type is not None  # invalid() let no unknown type through
    if isinstance(event, RelationLinked):
        relation = replace(event.relation, type=rel_type.value)
        return RelationRecord(event.tenant, relation, event.sequence)
    # A removal's record names the edge and who removed it, nothing more.
    r = event.relation
    gone = Relation(r.source_id, r.target_id, rel_type.value, origin=r.origin)
    return RelationRecord(event.tenant, gone, event.sequence, removed=True)


def relation_key(event: LogEvent) -> StateKey | None:
    """The state key a relation event touches (None: not a valid relation event)."""
    if not isinstance(event, RelationLinked | RelationUnlinked) or invalid(event):
        return None
    r = event.relation
    rel_type = parse_relation_type(r.type)
    assert rel_type is not None  # invalid() let no unknown type through
    return (event.tenant, "relation", r.source_id, rel_type.value, r.target_id)


def erasures(events: Sequence[LogEvent]) -> dict[str, int]:
    """The tenants ``events`` delete, each with its last deletion's sequence."""
    erased: dict[str, int] = {}
    for e in events:
        if isinstance(e, TenantErased) and not invalid(e):
            erased[e.tenant] = max(erased.get(e.tenant, 0), e.sequence)
    return erased


def _erased_before(event: LogEvent, erased: dict[str, int]) -> bool:
    """An event of a tenant deleted later in the same batch: its state would be purged."""
    if isinstance(event, Ignored):
        return False
    return event.sequence < erased.get(event.tenant, 0)


def fold(
    events: Sequence[LogEvent], held: Mapping[StateKey, StateRecord] | None = None
) -> list[StateRecord]:
    """The newest state of every key ``events`` touch (events in log order): only the last
    one per key is worth publishing, the stream keeps one message per key anyway. In the
    order of each key's last event. ``held``: the kept state of the keys of ``by_system``
    events (before this batch)."""
    newest: dict[StateKey, StateRecord] = {}
    for event in sorted(events, key=lambda e: e.sequence):
        before: StateRecord | None = None
        if by_system(event):
            rkey = relation_key(event)
            if rkey is not None:
                before = newest.get(rkey) or (held or {}).get(rkey)
        record = state_of(event, before)
        if record is None:
            continue
        key = key_of(record)
        newest.pop(key, None)  # re-insert: dict order = order of the last event
        newest[key] = record
    return list(newest.values())


# --- the keeper ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class KeeperPosition:
    sequence: int = 0  # every ENGRAM_MEMORY event up to here has its state published
    events: int = 0
    states: int = 0
    holder: str = ""
    updated_at: datetime | None = None


class Batch(Protocol):
    @property
    def events(self) -> Sequence[LogEvent]:
        """Log events in log order, each after the position the source was opened at."""
        ...

    async def ack(self) -> None:
        """Tell the log these are done (after their states are published)."""
        ...


class KeeperSource(Protocol):
    """ENGRAM_MEMORY in log order from a position (a consumer of its own)."""

    async def open(self, after: int) -> None:
        """(Re)start reading at the event after sequence ``after`` (0: the first)."""
        ...

    async def fetch(self, limit: int, wait_s: float) -> Batch:
        """The next events (maybe none after ``wait_s``). Raises when the source lost its
        place (a gap): the keeper then reopens it at its checkpoint."""
        ...

    async def close(self) -> None:
        """Stop reading (the keeper lost its lease, or stops)."""
        ...


class StateSink(Protocol):
    async def publish(self, records: Sequence[StateRecord]) -> None:
        """Every record durable in ENGRAM_STATE on return (raises otherwise)."""
        ...

    async def purge_tenant(self, tenant: str) -> None:
        """Every state of the tenant gone from ENGRAM_STATE on return (raises otherwise)."""
        ...

    async def relations(self, keys: Sequence[StateKey]) -> dict[StateKey, RelationRecord]:
        """The kept state of these relation keys (those that have one)."""
        ...


class KeeperCheckpoints(Protocol):
    async def load(self) -> tuple[KeeperPosition, int | None]:
        """The position and its revision (None: no checkpoint yet)."""
        ...

    async def save(self, position: KeeperPosition, revision: int | None) -> int:
        """Compare-and-set on ``revision``; FenceLost when it moved."""
        ...


@dataclass(frozen=True, slots=True)
class KeeperConfig:
    batch_size: int = 512
    fetch_wait_s: float = 1.0
    lease_ttl_s: float = 30.0
    retry_s: float = 1.0  # wait after a failed batch before reopening at the checkpoint


@dataclass
class KeeperStats:
    events: int = 0
    states: int = 0
    batches: int = 0
    sequence: int = 0
    restarts: int = 0
    holding: bool = False
    errors: list[str] = field(default_factory=list)


class StateKeeper:
    def __init__(
        self,
        source: KeeperSource,
        sink: StateSink,
        checkpoints: KeeperCheckpoints,
        lease: Lease,
        holder: str,
        config: KeeperConfig,
        clock: Callable[[], datetime],
    ) -> None:
        self._source = source
        self._sink = sink
        self._checkpoints = checkpoints
        self._lease = lease
        self._holder = holder
        self._config = config
        self._clock = clock
        self.stats = KeeperStats()

    async def run(self, stop: asyncio.Event) -> None:
        """Keep the state while holding the lease; wait for it otherwise; until ``stop``."""
        ttl = self._config.lease_ttl_s
        while not stop.is_set():
            held = False
            try:
                held = await self._lease.try_acquire(KEEPER_LEASE, self._holder, ttl)
                if held:
                    self.stats.holding = True
                    metrics.leases_held.add(1, {"lease": metrics.STATE_KEEPER})
                    await self._keep(stop)
            except Exception as exc:
                self.stats.restarts += 1
                self.stats.errors = [*self.stats.errors[-9:], f"{type(exc).__name__}: {exc}"]
                log.warning("state keeper: %s; reopening at the checkpoint", exc)
            finally:
                self.stats.holding = False
                if held:
                    metrics.leases_held.add(-1, {"lease": metrics.STATE_KEEPER})
                    try:
                        await self._lease.release(KEEPER_LEASE, self._holder)
                    except Exception as exc:  # it expires by itself
                        log.warning("state keeper: lease release failed: %s", exc)
            await _wait(stop, self._config.retry_s if held else ttl / 3)

    async def _keep(self, stop: asyncio.Event) -> None:
        try:
            await self._run_from_checkpoint(stop)
        finally:
            await self._source.close()

    async def _run_from_checkpoint(self, stop: asyncio.Event) -> None:
        position, revision = await self._checkpoints.load()
        await self._source.open(position.sequence)
        self.stats.sequence = position.sequence
        log.info("state keeper: from log sequence %d", position.sequence + 1)
        renew_at = asyncio.get_running_loop().time() + self._config.lease_ttl_s / 3
        while not stop.is_set():
            now = asyncio.get_running_loop().time()
            if now >= renew_at:
                ttl = self._config.lease_ttl_s
                if not await self._lease.renew(KEEPER_LEASE, self._holder, ttl):
                    log.warning("state keeper: lease lost")
                    return
                renew_at = now + ttl / 3
            batch = await self._source.fetch(self._config.batch_size, self._config.fetch_wait_s)
            events = [e for e in batch.events if e.sequence > position.sequence]
            if not events:
                await batch.ack()  # redeliveries of what is already kept
                continue
            position, revision = await self.apply(events, position, revision)
            await batch.ack()

    async def apply(
        self, events: Sequence[LogEvent], position: KeeperPosition, revision: int | None
    ) -> tuple[KeeperPosition, int]:
        """Publish the batch's states, then move the checkpoint past it. A tenant's deletion
        purges the tenant's states first; only what the batch wrote after it is published."""
        erased = erasures(events)
        for tenant in erased:
            await self._sink.purge_tenant(tenant)
        events_kept = [e for e in events if not _erased_before(e, erased)]
        system = {k for e in events_kept if by_system(e) and (k := relation_key(e)) is not None}
        held = await self._sink.relations(sorted(system)) if system else {}
        records = fold(events_kept, held)
        if records:
            await self._sink.publish(records)
        moved = KeeperPosition(
            sequence=max(e.sequence for e in events),
            events=position.events + len(events),
            states=position.states + len(records),
            holder=self._holder,
            updated_at=self._clock(),
        )
        try:
            revision = await self._checkpoints.save(moved, revision)
        except FenceLost:
            log.warning("state keeper: another keeper moved the checkpoint; leaving it")
            raise
        self.stats.events += len(events)
        self.stats.states += len(records)
        self.stats.batches += 1
        self.stats.sequence = moved.sequence
        return moved, revision


async def _wait(stop: asyncio.Event, seconds: float) -> None:
    try:
        await asyncio.wait_for(stop.wait(), seconds)
    except TimeoutError:
        return
