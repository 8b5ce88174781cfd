"""Each public RPC as an Op: its request built from plain values, whether a repeat is
harmless, and how its reply becomes a result. The sync and async clients only run them."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

import grpc
from google.protobuf.field_mask_pb2 import FieldMask

from engram.gateway.v1 import admin_pb2, gateway_pb2
from engram_client import convert
from engram_client.errors import EngramError
from engram_client.retry import RetryPolicy
from engram_client.types import (
    Batch,
    DeadLetter,
    DeletionStatus,
    Memory,
    Recalled,
    Related,
    Replayed,
    Run,
    Stats,
    Stored,
    TenantDeletion,
    Written,
)

T = TypeVar("T")


@dataclass(frozen=True)
class Op(Generic[T]):
    service: Literal["memory", "admin"]
    method: str  # the RPC's name on the generated stub
    request: Any
    idempotent: bool  # a repeat changes nothing: retried on UNAVAILABLE too
    parse: Callable[[Any], T]
    writes: bool = False  # the reply's `sequence` is a write the next recall waits for


class Session:
    """The highest write sequence this client got: a recall passes it as min_sequence so
    it sees the client's own writes (the gateway waits until the stores applied it)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.sequence = 0

    def saw(self, sequence: int) -> None:
        with self._lock:
            self.sequence = max(self.sequence, sequence)


def store(content: str, key: str, fields: dict[str, Any]) -> Op[Stored]:
    request = gateway_pb2.StoreRequest(
        memory=convert.memory_input(content, **fields), idempotency_key=key
    )
    return Op("memory", "Store", request, True, Stored.of, writes=True)


def store_batch(inputs: Sequence[Any], keys: Sequence[str]) -> Op[Batch]:
    request = gateway_pb2.StoreBatchRequest(memories=inputs, idempotency_keys=keys)
    return Op("memory", "StoreBatch", request, True, Batch.of, writes=True)


def recall(query: str, min_sequence: int, fields: dict[str, Any]) -> Op[Recalled]:
    request = convert.fill(gateway_pb2.RecallRequest(query=query), fields)
    request.min_sequence = max(request.min_sequence, min_sequence)
    return Op("memory", "Recall", request, True, Recalled.of)


def get(id: str, min_sequence: int) -> Op[Memory]:
    request = gateway_pb2.GetRequest(id=id, min_sequence=min_sequence)
    return Op("memory", "Get", request, True, lambda r: Memory.of(r.memory))


def update(id: str, fields: dict[str, Any]) -> Op[Written]:
    """Only the fields given change (the update mask names them)."""
    memory = convert.fill(convert.memory_input(""), fields)
    mask = FieldMask(paths=sorted(k for k, v in fields.items() if v is not None))
    request = gateway_pb2.UpdateRequest(id=id, memory=memory, update_mask=mask)
    # Setting the same fields again leaves the same memory.
    return Op("memory", "Update", request, True, Written.of, writes=True)


def delete(id: str) -> Op[Written]:
    # Not repeated on UNAVAILABLE: a delete that went through answers NOT_FOUND the second time.
    return Op("memory", "Delete", gateway_pb2.DeleteRequest(id=id), False, Written.of, True)


def associate(source_id: str, target_id: str, type: str, fields: dict[str, Any]) -> Op[Written]:
    request = gateway_pb2.AssociateRequest(source_id=source_id, target_id=target_id, type=type)
    return Op("memory", "Associate", convert.fill(request, fields), False, Written.of, True)


def related(id: str, min_sequence: int, fields: dict[str, Any]) -> Op[list[Related]]:
    request = convert.fill(gateway_pb2.RelatedRequest(id=id), fields)
    request.min_sequence = max(request.min_sequence, min_sequence)

    def parse(r: gateway_pb2.RelatedResponse) -> list[Related]:
        return [Related(Memory.of(x.memory), x.type, x.strength, x.depth, x) for x in r.related]

    return Op("memory", "Related", request, True, parse)


def stats(tenant: str = "") -> Op[Stats]:
    return Op("memory", "Stats", gateway_pb2.StatsRequest(tenant=tenant), True, Stats.of)


# Server streams (List, Subscribe) are read as iterators; a stream that breaks is opened
# again from where it stopped (the last cursor or sequence), never from the start.


def list_request(fields: dict[str, Any], cursor: str) -> gateway_pb2.ListRequest:
    request = convert.fill(gateway_pb2.ListRequest(), fields)
    request.cursor = cursor
    return request


def subscribe_request(
    tags: Iterable[str], types: Iterable[str], after_sequence: int | None
) -> gateway_pb2.SubscribeRequest:
    request = gateway_pb2.SubscribeRequest(tags=list(tags), types=list(types))
    if after_sequence is not None:  # unset means "only what comes after the call"
        request.after_sequence = after_sequence
    return request


class Resume:
    """When to open a broken stream again. Only failures in a row count against the retry
    policy's attempts: a stream that delivered something since its last failure starts
    afresh. A deadline that ends a stream which was moving is no failure either (a long
    listing outlives one call's timeout), so it reopens at once."""

    def __init__(self, policy: RetryPolicy) -> None:
        self._policy = policy
        self._failures = 0
        self._moved = False

    def moved(self) -> None:
        self._moved = True

    def pause(self, err: EngramError) -> float:
        """Seconds to wait before opening the stream again, or -1 to give up."""
        moved, self._moved = self._moved, False
        if moved:
            self._failures = 0
            if err.code == grpc.StatusCode.DEADLINE_EXCEEDED:
                return 0.0
        self._failures += 1
        return self._policy.pause(err, True, self._failures, float("inf"))


def dead_letters(tenant: str, page_size: int, after: int) -> Op[tuple[list[DeadLetter], int]]:
    request = admin_pb2.ListDeadLettersRequest(tenant=tenant, page_size=page_size, after=after)

    def parse(r: admin_pb2.ListDeadLettersResponse) -> tuple[list[DeadLetter], int]:
        return [DeadLetter.of(d) for d in r.dead_letters], r.next_after

    return Op("admin", "ListDeadLetters", request, True, parse)


def replay_dead_letters(tenant: str, sequences: Iterable[int]) -> Op[Replayed]:
    request = admin_pb2.ReplayDeadLettersRequest(tenant=tenant, sequences=list(sequences))

    def parse(r: admin_pb2.ReplayDeadLettersResponse) -> Replayed:
        return Replayed(r.replayed, r.failed, r.remaining, r)

    # A retried replay republishes each letter once (the server's promise).
    return Op("admin", "ReplayDeadLetters", request, True, parse)


def consolidate(mode: str | int, dry_run: bool, tenant: str) -> Op[Run]:
    request = convert.fill(
        admin_pb2.ConsolidateRequest(), {"mode": mode, "dry_run": dry_run, "tenant": tenant}
    )
    # Each request starts its passes again: not repeated on an ambiguous failure.
    return Op("admin", "Consolidate", request, False, lambda r: Run(r.run_id, r))


def consolidation_status(tenant: str) -> Op[admin_pb2.ConsolidationStatusResponse]:
    request = admin_pb2.ConsolidationStatusRequest(tenant=tenant)
    return Op("admin", "ConsolidationStatus", request, True, lambda r: r)


def sync(stores: Iterable[str | int], dry_run: bool, tenant: str) -> Op[Run]:
    request = convert.fill(
        admin_pb2.SyncRequest(), {"stores": list(stores), "dry_run": dry_run, "tenant": tenant}
    )
    return Op("admin", "Sync", request, False, lambda r: Run(r.run_id, r))


def rebuild(store: str | int, embedding_model: str) -> Op[Run]:
    request = convert.fill(
        admin_pb2.RebuildRequest(), {"store": store, "embedding_model": embedding_model}
    )
    # A second request waits for the first and then rebuilds again: not repeated.
    return Op("admin", "Rebuild", request, False, lambda r: Run(r.run_id, r))


def rebuild_status(tenant: str) -> Op[admin_pb2.RebuildStatusResponse]:
    request = admin_pb2.RebuildStatusRequest(tenant=tenant)
    return Op("admin", "RebuildStatus", request, True, lambda r: r)


def delete_tenant(tenant: str, confirm: str, dry_run: bool) -> Op[TenantDeletion]:
    request = admin_pb2.DeleteTenantRequest(tenant=tenant, confirm=confirm, dry_run=dry_run)
    # A repeat writes a second tombstone: harmless, but not what one call asked for.
    return Op("admin", "DeleteTenant", request, dry_run, TenantDeletion.of)


def delete_tenant_status(tenant: str, sequence: int) -> Op[DeletionStatus]:
    request = admin_pb2.DeleteTenantStatusRequest(tenant=tenant, sequence=sequence)
    return Op("admin", "DeleteTenantStatus", request, True, DeletionStatus.of)
