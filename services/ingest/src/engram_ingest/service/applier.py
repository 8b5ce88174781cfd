"""Applies a batch of log events to the vector, lexical and graph stores.

Every write carries the event's log sequence as its version, so the stores keep the
newest state whatever the delivery order, and a redelivered event changes nothing.

Within a batch, events are applied in sequence order, in segments of one kind
(upserts, deletes, relations): a run of upserts goes out as one write per tenant and
store (cut into several when it would not fit a message, see ``chunks``), the three
stores at once, after ONE embedder call for the whole batch (for the memories without a
vector of the client's own: see ``_own``). When a segment fails, it and every later
segment are left for a retry, so this worker never applies a relation before the
memories it links or a delete out of turn. With an ``EmbedAhead`` (``ahead``), the contents
the worker read ahead are embedded while earlier batches are written, and that call only
embeds what was not ready.

A tenant's deletion (``TenantDeleted``) is its own segment too: every store drops the whole
tenant, in log order with the tenant's other events, so what the log wrote after it stays.

Relation events of a segment go out as one graph call per tenant (in chunks of
``RELATION_CHUNK``), each relation carrying its own event's sequence as its version; a
chunk naming a memory the graph does not hold falls back to one call per event. Such an
event waits (RETRY, at most ``endpoint_deliveries`` deliveries) while vector or lexical
holds the endpoint — the graph is only behind — and is dead-lettered once neither does
(deleted since the gateway checked it).

A new memory (``MemoryStored``) gets its first ``relevance_score`` here, from
``engram_core.relevance`` at age 0 and no access (its own importance and confidence), so
recall's relevance component means something before the first decay pass. Age 0 rather
than the wall clock keeps the score a function of the event: a replay writes the same.

With a second embedder (``next_embed``), a batch whose vector write is refused for its
``embedding_model`` (FailedPrecondition: vector swapped its live generation to another
model) switches the applier to the other embedder, once per call, re-embeds what is left
of the batch and retries the write at once; the switched embedder stays in use. If the
retry fails too, the batch is retried with backoff as any other failure.

Every failure is classified, so nothing accepted wedges the log (the ack floor is the
watermark of every tenant). What may pass later — UNAVAILABLE, DEADLINE_EXCEEDED,
RESOURCE_EXHAUSTED, a timeout, an unexpected exception, the embedding-model refusal above,
any embedder failure — is RETRY, with backoff. A store's refusal of the event itself —
INVALID_ARGUMENT, or FAILED_PRECONDITION other than the embedding model — is POISON: the
event is dead-lettered with the reason and the store (the pull worker adds the tenant) and
counts as decided. An event that is invalid on its own (:func:`engram_core.log_events.invalid`,
whose rules consolidate's state keeper follows too) is POISON before any store sees it.
Dead letters can be listed and replayed once the cause is fixed (a store's configuration,
say), so a refusal that was not the event's fault is recoverable, not lost.

A tenant's memories go out as one write per store, so one refused memory would fail the
whole group: a group refused for good is written again one memory at a time, and only the
memories refused alone are dead-lettered.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from itertools import groupby
from typing import Any, TypeVar

from engram_core.enrich import enrich
from engram_core.entities import EntityRules
from engram_core.errors import (
    DeadlineExceeded,
    EngramError,
    FailedPrecondition,
    Internal,
    InvalidArgument,
    NotFound,
)
from engram_core.log_events import (
    Event,
    MemoryRemoved,
    MemoryWritten,
    RelationLinked,
    RelationUnlinked,
    TenantErased,
    invalid,
)
from engram_core.model import Memory, Relation
from engram_core.outcomes import APPLIED, Outcome, Result
from engram_core.ports import Embedder
from engram_core.relations import parse_relation_type
from engram_core.relevance import DecaySettings, relevance_score
from engram_ingest.service.ahead import EmbedAhead
from engram_ingest.service.chunks import Ready, chunks
from engram_ingest.service.metrics import timed
from engram_ingest.service.ports import GraphWriter, TextWriter, VectorWriter

log = logging.getLogger(__name__)
T = TypeVar("T")
E = TypeVar("E", MemoryRemoved, RelationLinked, TenantErased)
# Relations per graph call: under the graph service's default MAX_BATCH (1000).
RELATION_CHUNK = 500
# Half the default gRPC message limit: the estimate is rough.
DEFAULT_WRITE_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Timeouts:
    embed_s: float = 30.0
    write_s: float = 10.0


class Applier:
    def __init__(
        self,
        embedder: Embedder,
        vector: VectorWriter,
        lexical: TextWriter,
        graph: GraphWriter,
        timeouts: Timeouts | None = None,
        initial_relevance: DecaySettings | None = None,
        next_embedder: Embedder | None = None,
        write_bytes: int = DEFAULT_WRITE_BYTES,
        endpoint_deliveries: int = 20,
        entity_rules: EntityRules | None = None,
        ahead: EmbedAhead | None = None,
    ) -> None:
        self._embedder = embedder
        self._configured = embedder  # the model a client's own vector is taken to be of
        self._other = next_embedder  # the one to switch to when vector wants another model
        self._vector = vector
        self._lexical = lexical
        self._graph = graph
        self._timeouts = timeouts or Timeouts()
        self._initial_relevance = initial_relevance  # None: new memories keep the score sent
        self._write_bytes = write_bytes  # most estimated bytes in one store write
        self._endpoint_deliveries = endpoint_deliveries
        self._entity_rules = entity_rules  # None: the conversation profile's
        self._ahead = ahead  # vectors embedded while earlier batches were written
        # Tenant -> the sequence of its latest deletion this applier applied: an event of the
        # tenant from before it (a retry redelivered after the deletion) is moot, not a
        # resurrection. Per replica; a Sync removes what another replica let through.
        self._erased: dict[str, int] = {}

    @property
    def embedding_model(self) -> str:
        return self._embedder.model_name

    @property
    def embedder(self) -> Embedder:
        """The embedder of the moment (the other one once switched to it)."""
        return self._embedder

    def offer(self, events: Iterable[Event]) -> None:
        """Events read ahead of their turn: their contents are embedded in the background
        (with an ``ahead``), so their batch finds the vectors ready."""
        if self._ahead is not None:
            self._ahead.offer(
                (e.sequence, e.memory.content)
                for e in events
                if isinstance(e, MemoryWritten) and not self._own(e, self._embedder)
            )

    async def close(self) -> None:
        if self._ahead is not None:
            await self._ahead.close()

    async def apply(self, events: Sequence[Event]) -> list[Result]:
        """One result per event, in the order given."""
        try:
            return await self._apply(events)
        finally:
            if self._ahead is not None:  # settled here: nothing of it is wanted again
                self._ahead.discard(e.sequence for e in events)

    async def _apply(self, events: Sequence[Event]) -> list[Result]:
        results: dict[int, Result] = {}
        valid: list[int] = []
        for i, event in enumerate(events):
            problem = invalid(event)
            if problem:
                results[i] = Result(Outcome.POISON, problem)
            elif event.sequence < self._erased.get(event.tenant, 0):
                results[i] = APPLIED  # the tenant was deleted after it
            else:
                valid.append(i)
        valid.sort(key=lambda i: events[i].sequence)

        written = {i: e for i in valid if isinstance(e := events[i], MemoryWritten)}
        embedder = self._embedder
        try:
            vectors = await self._embed(written, embedder)
        except Exception as exc:
            failure = retry(exc, "embedding", "embedding")
            return [results.get(i, failure) for i in range(len(events))]

        switched = False
        failed: Result | None = None
        for kind, group in groupby(valid, key=lambda i: type(events[i])):
            indices = list(group)
            if failed is not None:
                results.update(dict.fromkeys(indices, failed))
                continue
            if kind is MemoryWritten:
                segment = {i: written[i] for i in indices}
                outcome, refused = await self._upserts(segment, vectors, embedder.model_name)
                if refused is not None and not switched and self._switch(embedder, refused):
                    switched = True
                    embedder = self._embedder
                    left = {i: e for i, e in written.items() if i not in results}
                    try:
                        vectors = await self._embed(left, embedder)
                    except Exception as exc:
                        outcome = dict.fromkeys(indices, retry(exc, "embedding", "embedding"))
                    else:
                        outcome, _ = await self._upserts(segment, vectors, embedder.model_name)
            elif kind is MemoryRemoved:
                outcome = await self._each(events, indices, MemoryRemoved, self._delete)
            elif kind is TenantErased:
                outcome = await self._each(events, indices, TenantErased, self._erase)
            else:
                outcome = await self._relations(events, indices)
            results.update(outcome)
            first_failure = next((r for r in outcome.values() if r.outcome is Outcome.RETRY), None)
            if first_failure is not None:
                failed = Result(Outcome.RETRY, f"after an earlier failure: {first_failure.reason}")
        return [results.get(i, APPLIED) for i in range(len(events))]

    def _switch(self, used: Embedder, refused: FailedPrecondition) -> bool:
        """Make the other embedder the active one; False when there is none."""
        if self._other is None:
            return False
        if self._embedder is used:  # not already switched by a concurrent call
            self._embedder, self._other = self._other, self._embedder
            log.warning(
                "vector refused embedding model %s (%s): switching ingest's embedder from %s to %s",
                used.model_name,
                refused.reason,
                used.model_name,
                self._embedder.model_name,
            )
        return True

    async def _embed(
        self, written: dict[int, MemoryWritten], embedder: Embedder
    ) -> dict[int, list[float]]:
        """Every memory's vector, keyed by event index: the client's own where it sent one
        that ``embedder`` stands for, the rest from one embedder call."""
        own = {i: list(e.embedding) for i, e in written.items() if self._own(e, embedder)}
        rest = [i for i in written if i not in own]
        if rest and self._ahead is not None:
            wanted = {written[i].sequence: written[i].memory.content for i in rest}
            ready = await self._ahead.take(embedder, wanted)
            own |= {i: ready[written[i].sequence] for i in rest if written[i].sequence in ready}
            rest = [i for i in rest if i not in own]
        if not rest:
            return own
        texts = [written[i].memory.content for i in rest]
        vectors = await bounded(
            timed("embedding", "embed", embedder.embed(texts)), self._timeouts.embed_s, "embedding"
        )
        if len(vectors) != len(texts):
            raise Internal(f"embedder returned {len(vectors)} vectors for {len(texts)} texts")
        return own | dict(zip(rest, vectors, strict=True))

    def _own(self, event: MemoryWritten, embedder: Embedder) -> bool:
        """Whether the event's own vector is written as ``embedder``'s: the client promised
        the configured model's space. Switched to the next model (a rebuild onto another
        one), or when the size is not the model's (the gateway checked it against a live
        generation swapped since), the content is embedded instead."""
        return (
            bool(event.embedding)
            and embedder is self._configured
            and len(event.embedding) == embedder.dimension
        )

    async def _upserts(
        self, written: dict[int, MemoryWritten], vectors: dict[int, list[float]], model: str
    ) -> tuple[dict[int, Result], FailedPrecondition | None]:
        """The results, and vector's refusal of the embedding model if any tenant got one."""
        # One write per tenant and store (cut to fit a message); within it the newest event
        # of each id wins (an older one would be skipped by the version guard anyway).
        newest: dict[str, dict[str, int]] = {}
        for i, event in written.items():
            newest.setdefault(event.tenant, {})[event.memory.id] = i
        writes = [
            (tenant, chunk)
            for tenant, ids in newest.items()
            for chunk in chunks(
                [self._ready(written[i], vectors[i], model) for i in ids.values()],
                self._write_bytes,
            )
        ]
        outcomes = await asyncio.gather(
            *(self._write_memories(t, ready) for t, ready in writes), return_exceptions=True
        )
        by_id: dict[tuple[str, str], Result] = {}
        for (tenant, ready), outcome in zip(writes, outcomes, strict=True):
            verdict = APPLIED if outcome is None else classify(outcome, "upsert")
            if verdict.outcome is Outcome.POISON and len(ready) > 1:
                by_id |= await self._one_by_one(tenant, ready)
            else:
                by_id |= {(tenant, m.id): verdict for m, _, _ in ready}
        refused = next((e for o in outcomes if (e := _model_refusal(o)) is not None), None)
        return {i: by_id[(e.tenant, e.memory.id)] for i, e in written.items()}, refused

    async def _one_by_one(self, tenant: str, ready: list[Ready]) -> dict[tuple[str, str], Result]:
        """Each memory of a write a store refused, written alone: only the refused fail.

        What the stores took from the group before is skipped by their version guard."""
        outcomes = await asyncio.gather(
            *(self._write_memories(tenant, [item]) for item in ready), return_exceptions=True
        )
        return {
            (tenant, m.id): APPLIED if o is None else classify(o, "upsert")
            for (m, _, _), o in zip(ready, outcomes, strict=True)
        }

    def _ready(self, event: MemoryWritten, vector: list[float], model: str) -> Ready:
        enriched, entities = enrich(event.memory, event.sequence, model, self._entity_rules)
        if event.created:
            enriched = self._with_initial_relevance(enriched)
        return enriched, entities, vector

    async def _write_memories(self, tenant: str, ready: list[Ready]) -> None:
        await self._all(
            "upsert",
            self._vector.upsert(tenant, [(m, v) for m, _, v in ready]),
            self._lexical.upsert(tenant, [m for m, _, _ in ready]),
            self._graph.upsert(tenant, [(m, ents) for m, ents, _ in ready]),
        )

    def _with_initial_relevance(self, memory: Memory) -> Memory:
        if self._initial_relevance is None or memory.relevance_score > 0:
            return memory
        score = relevance_score(memory, 0, memory.timestamp, self._initial_relevance)
        return replace(memory, relevance_score=score)

    async def _each(
        self,
        events: Sequence[Event],
        indices: list[int],
        kind: type[E],
        write: Callable[[E], Awaitable[None]],
    ) -> dict[int, Result]:
        typed = [e for i in indices if isinstance(e := events[i], kind)]
        outcomes = await asyncio.gather(*(write(e) for e in typed), return_exceptions=True)
        return {
            i: APPLIED if o is None else classify(o, kind.__name__)
            for i, o in zip(indices, outcomes, strict=True)
        }

    async def _delete(self, event: MemoryRemoved) -> None:
        ids, version = [event.id], event.sequence
        await self._all(
            "delete",
            self._vector.delete(event.tenant, ids, version),
            self._lexical.delete(event.tenant, ids, version),
            self._graph.delete(event.tenant, ids, version),
        )

    async def _erase(self, event: TenantErased) -> None:
        await self._all(
            "delete_tenant",
            self._vector.delete_tenant(event.tenant),
            self._lexical.delete_tenant(event.tenant),
            self._graph.delete_tenant(event.tenant),
        )
        self._erased[event.tenant] = max(self._erased.get(event.tenant, 0), event.sequence)

    async def _relations(self, events: Sequence[Event], indices: list[int]) -> dict[int, Result]:
        """A segment of RelationAdded (or of RelationRemoved) events: one call per tenant."""
        by_tenant: dict[str, dict[int, RelationLinked | RelationUnlinked]] = {}
        for i in indices:
            event = events[i]
            if isinstance(event, RelationLinked | RelationUnlinked):
                by_tenant.setdefault(event.tenant, {})[i] = event
        tenants = list(by_tenant)
        outcomes = await asyncio.gather(
            *(self._relate(t, by_tenant[t]) for t in tenants), return_exceptions=True
        )
        what = type(events[indices[0]]).__name__
        results: dict[int, Result] = {}
        for t, o in zip(tenants, outcomes, strict=True):
            if isinstance(o, BaseException):
                results.update(dict.fromkeys(by_tenant[t], classify(o, what, "graph")))
            else:
                results.update(dict.fromkeys(by_tenant[t], APPLIED) | o)
        return results

    async def _relate(
        self, tenant: str, typed: dict[int, RelationLinked | RelationUnlinked]
    ) -> dict[int, Result]:
        """The events (by index) not applied because an endpoint is missing in the graph."""
        missing: dict[int, Result] = {}
        items = list(typed.items())
        for start in range(0, len(items), RELATION_CHUNK):
            chunk = items[start : start + RELATION_CHUNK]
            # The registry's spelling ("relates_to" → RELATES_TO); invalid() let no unknown in.
            relations = [_registry_type(e.relation) for _, e in chunk]
            versions = [e.sequence for _, e in chunk]
            if isinstance(chunk[0][1], RelationUnlinked):
                await self._graph_call(
                    "remove_relations",
                    self._graph.remove_relations(tenant, relations, max(versions), versions),
                )
                continue
            try:
                await self._graph_call(
                    "add_relations",
                    self._graph.add_relations(tenant, relations, max(versions), versions),
                )
            except NotFound:
                # The graph writes nothing of a batch with a missing end: apply the events
                # one by one, so only those naming a missing end wait or are dropped.
                for (i, _), relation, version in zip(chunk, relations, versions, strict=True):
                    result = await self._add_one(tenant, relation, version)
                    if result.outcome is not Outcome.APPLIED:
                        missing[i] = result
        return missing

    async def _add_one(self, tenant: str, relation: Relation, version: int) -> Result:
        try:
            await self._graph_call(
                "add_relations", self._graph.add_relations(tenant, [relation], version)
            )
        except NotFound as exc:
            return await self._missing_endpoint(tenant, relation, exc)
        return APPLIED

    async def _missing_endpoint(self, tenant: str, relation: Relation, exc: NotFound) -> Result:
        """The graph has no live node for an end of the relation; the gateway saw both ends
        in vector or lexical before publishing it. An end still in either store is late in
        the graph (its MemoryStored is being retried there): wait for it, redelivered with
        backoff, up to ``endpoint_deliveries``. An end in neither was deleted since (or
        never stored): the edge is moot, and dead-lettered with the reason."""
        ends = (relation.source_id, relation.target_id)
        held, unsure = await self._held(tenant, ends)
        edge = f"{relation.type} {ends[0]} -> {ends[1]}"
        gone = [i for i in ends if i not in held]
        if gone and not unsure:
            return Result(
                Outcome.POISON,
                f"relation {edge}: endpoint {gone[0]} is deleted or never stored",
                "graph",
            )
        late = [i for i in ends if i in exc.message] or gone or list(ends)
        reason = f"relation {edge}: endpoint {late[0]} not applied"
        if unsure:
            reason = f"{reason} ({unsure})"
        return Result(Outcome.RETRY, reason, "graph", self._endpoint_deliveries)

    async def _held(self, tenant: str, ids: Sequence[str]) -> tuple[set[str], str]:
        """The ids vector or lexical holds, and why the answer may be short ("" if sure)."""
        reads = await asyncio.gather(
            bounded(self._vector.get(tenant, ids), self._timeouts.write_s, "vector get"),
            bounded(self._lexical.get(tenant, ids), self._timeouts.write_s, "lexical get"),
            return_exceptions=True,
        )
        held = {m.id for r in reads if not isinstance(r, BaseException) for m in r}
        failed = [r for r in reads if isinstance(r, BaseException)]
        return held, (f"cannot tell if deleted: {failed[0]}" if failed else "")

    async def _graph_call(self, what: str, call: Awaitable[int]) -> int:
        return await bounded(timed("graph", what, call), self._timeouts.write_s, f"graph {what}")

    async def _all(self, what: str, *writes: Awaitable[Any]) -> None:
        """Run the stores' writes at once; raise the first failure, as a ``StoreFailed``
        naming its store, after all have ended."""
        names = ("vector", "lexical", "graph")
        outcomes = await asyncio.gather(
            *(
                bounded(timed(name, what, w), self._timeouts.write_s, f"{name} {what}")
                for name, w in zip(names, writes, strict=True)
            ),
            return_exceptions=True,
        )
        for name, outcome in zip(names, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                raise StoreFailed(name, outcome) from outcome


class StoreFailed(Exception):
    """A store's write failed with ``error``."""

    def __init__(self, store: str, error: BaseException) -> None:
        super().__init__(f"{store}: {error}")
        self.store = store
        self.error = error


def _model_refusal(outcome: object) -> FailedPrecondition | None:
    """Vector's refusal of the embedding model in a write's outcome, if it is one."""
    error = outcome.error if isinstance(outcome, StoreFailed) else outcome
    return error if isinstance(error, FailedPrecondition) and _model_refused(error) else None


def _model_refused(error: FailedPrecondition) -> bool:
    """Vector's answer to an upsert embedded with another model than its live generation's."""
    return error.field.endswith("embedding_model")


def _registry_type(relation: Relation) -> Relation:
    rel_type = parse_relation_type(relation.type)
    return replace(relation, type=rel_type.value if rel_type else "")


def classify(exc: BaseException, what: str, store: str = "") -> Result:
    """POISON when a store refused the event itself; RETRY for anything that may pass later."""
    if isinstance(exc, StoreFailed):
        store, exc = exc.store, exc.error
    where = f"{store} {what}" if store else what
    if isinstance(exc, InvalidArgument | FailedPrecondition) and _model_refusal(exc) is None:
        return Result(Outcome.POISON, f"{where}: {exc.code}: {exc.message}", store)
    return retry(exc, where, store)


def retry(exc: BaseException, what: str, store: str = "") -> Result:
    if isinstance(exc, EngramError):
        reason = f"{what}: {exc.code}: {exc.message}"
    else:
        reason = f"{what}: {type(exc).__name__}: {exc}"
    return Result(Outcome.RETRY, reason, store)


async def bounded(awaitable: Awaitable[T], timeout_s: float, what: str) -> T:
    """Await with a deadline; running out is DeadlineExceeded (retriable), like a slow RPC."""
    try:
        return await asyncio.wait_for(awaitable, timeout_s)
    except TimeoutError as exc:
        raise DeadlineExceeded(f"{what} took longer than {timeout_s}s") from exc
