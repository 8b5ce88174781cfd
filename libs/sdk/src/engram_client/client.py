"""Engram: the synchronous client."""

from __future__ import annotations

import builtins
import time
import uuid
from collections.abc import Generator, Iterable, Iterator
from types import TracebackType
from typing import Any, TypeVar, cast

import grpc

from engram.gateway.v1 import admin_pb2, gateway_pb2, gateway_pb2_grpc
from engram.gateway.v1.admin_pb2_grpc import AdminServiceStub
from engram_client import ops
from engram_client.batching import Chunk, Item, ProgressCallback, StoreManyResult, chunks, one_chunk
from engram_client.config import Config
from engram_client.errors import FailedCall, from_call
from engram_client.retry import RetryPolicy
from engram_client.types import (
    Batch,
    DeadLetter,
    DeletionStatus,
    Event,
    Memory,
    Page,
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


class Engram:
    """A connection to an Engram gateway. ``Engram()`` reads ENGRAM_ADDRESS, ENGRAM_TOKEN,
    ENGRAM_TLS, ENGRAM_CA, ENGRAM_CERT and ENGRAM_KEY, else talks to ``make run``'s stack."""

    def __init__(
        self,
        address: str | None = None,
        token: str | None = None,
        *,
        tls: bool | None = None,
        ca: str | None = None,
        cert: str | None = None,
        key: str | None = None,
        server_name: str | None = None,
        timeout: float | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        self.config = Config.resolve(
            address,
            token,
            tls=tls,
            ca=ca,
            cert=cert,
            key=key,
            server_name=server_name,
            timeout_s=timeout,
            retry=retry,
        )
        creds = self.config.credentials()
        address = self.config.address
        self._channel = (
            grpc.secure_channel(address, creds, self.config.options)
            if creds
            else grpc.insecure_channel(address)
        )
        self._stubs: dict[str, Any] = {
            "memory": gateway_pb2_grpc.MemoryServiceStub(self._channel),
            "admin": AdminServiceStub(self._channel),
        }
        self._session = ops.Session()

    @property
    def last_sequence(self) -> int:
        """The highest write sequence this client got (what its recalls wait for)."""
        return self._session.sequence

    def _run(self, op: ops.Op[T]) -> T:
        call = getattr(self._stubs[op.service], op.method)
        deadline = time.monotonic() + self.config.timeout_s
        attempt = 0
        while True:
            attempt += 1
            left = deadline - time.monotonic()
            try:
                reply = call(op.request, timeout=left, metadata=self.config.metadata)
            except grpc.RpcError as exc:
                err = from_call(cast(FailedCall, exc))
                wait = self.config.retry.pause(err, op.idempotent, attempt, left)
                if wait < 0:
                    raise err from None
                time.sleep(wait)
                continue
            if op.writes:
                self._session.saw(reply.sequence)
            return op.parse(reply)

    # MemoryService

    def store(self, content: str, *, idempotency_key: str = "", **fields: Any) -> Stored:
        """Store one memory: type, tags, importance, confidence, metadata (dict), timestamp,
        t_valid, t_invalid (datetime), id, embedding (the content's vector from the
        deployment's model: the server skips its model). Retried safely under a key made
        per call."""
        key = idempotency_key or uuid.uuid4().hex
        return self._run(ops.store(content, key, fields))

    def store_batch(self, items: Iterable[Item]) -> Batch:
        """One StoreBatch call (at most 1000 items), each item under its own key."""
        chunk = one_chunk(items)
        return self._run(ops.store_batch(chunk.inputs, chunk.keys))

    def store_stream(self, items: Iterable[Item]) -> Batch:
        """One client-streaming StoreStream call; not retried (the items are consumed)."""
        requests = (
            gateway_pb2.StoreRequest(memory=c.inputs[0], idempotency_key=c.keys[0])
            for c in chunks(items, 1)
        )
        try:
            reply = self._stubs["memory"].StoreStream(
                requests, timeout=self.config.timeout_s, metadata=self.config.metadata
            )
        except grpc.RpcError as exc:
            raise from_call(cast(FailedCall, exc)) from None
        self._session.saw(reply.sequence)
        return Batch.of(reply)

    def store_many(
        self,
        items: Iterable[Item],
        *,
        batch_size: int = 100,
        progress: ProgressCallback | None = None,
    ) -> StoreManyResult:
        """Store any number of items in StoreBatch calls of ``batch_size``; items that fail
        in a way a retry may fix are sent again under their keys. ``progress(Progress)``
        after each batch."""
        out = StoreManyResult()
        for chunk in chunks(items, batch_size):
            self._store_chunk(chunk)
            out.results.extend(chunk.done())
            if progress is not None:
                progress(out.progress())
        out.sequence = max((r.sequence for r in out.results), default=0)
        return out

    def _store_chunk(self, chunk: Chunk) -> None:
        policy = self.config.retry
        for attempt in range(1, policy.attempts + 1):
            todo = chunk.pending()
            if attempt > 1 and todo:
                time.sleep(policy.delay(attempt - 1))
            if not todo:
                return
            inputs = [chunk.inputs[i] for i in todo]
            chunk.take(todo, self._run(ops.store_batch(inputs, [chunk.keys[i] for i in todo])))

    def recall(self, query: str = "", *, consistent: bool = True, **fields: Any) -> Recalled:
        """Recall memories: limit, tags, tag_mode ("any"/"all"), types, start, end, mode
        ("hybrid", "vector", "bm25", ...), token_budget, ... (RecallRequest's fields).
        ``consistent`` (default) waits until this client's own writes are applied."""
        return self._run(ops.recall(query, self._floor(consistent), fields))

    def _floor(self, consistent: bool) -> int:
        return self._session.sequence if consistent else 0

    def get(self, id: str, *, consistent: bool = True) -> Memory:
        """The memory; ``consistent`` (default) waits until this client's writes are applied."""
        return self._run(ops.get(id, self._floor(consistent)))

    def update(self, id: str, **fields: Any) -> Written:
        """Change the given fields (content, tags, importance, ...) of a stored memory."""
        return self._run(ops.update(id, fields))

    def delete(self, id: str) -> Written:
        return self._run(ops.delete(id))

    def associate(
        self, source_id: str, target_id: str, type: str = "RELATES_TO", **fields: Any
    ) -> Written:
        """Relate two memories (strength, properties)."""
        return self._run(ops.associate(source_id, target_id, type, fields))

    def related(self, id: str, *, consistent: bool = True, **fields: Any) -> builtins.list[Related]:
        """Memories reachable over relations (depth, types, limit); ``consistent`` as get's."""
        return self._run(ops.related(id, self._floor(consistent), fields))

    def stats(self, tenant: str = "") -> Stats:
        return self._run(ops.stats(tenant))

    def list(self, **filters: Any) -> Generator[Memory, None, None]:
        """Every memory of the tenant that passes the filters (ListRequest's fields: tags,
        tag_mode, types, start, end, include_archived, page_size, cursor, ...), a page at a
        time, in log sequence order of each memory's last write: one updated meanwhile
        comes again at the end, and a page's cursor resumes with what changed since."""
        for page in self.list_pages(**filters):
            yield from page.memories

    def list_pages(self, **filters: Any) -> Generator[Page, None, None]:
        """The listing page by page, with each page's cursor (and its relations with
        include_relations=True): what an export writes. A stream that breaks is opened
        again after the last cursor received."""
        cursor = str(filters.pop("cursor", "") or "")
        resume = ops.Resume(self.config.retry)
        while True:
            request = ops.list_request(filters, cursor)
            call = self._stubs["memory"].List(
                request, timeout=self.config.timeout_s, metadata=self.config.metadata
            )
            try:
                for reply in call:
                    page = Page.of(reply)
                    resume.moved()
                    yield page
                    cursor = page.cursor
                    if not cursor:
                        return
                return
            except grpc.RpcError as exc:
                self._pause(resume, exc)
            finally:
                call.cancel()

    def subscribe(
        self,
        *,
        tags: Iterable[str] = (),
        types: Iterable[str] = (),
        after_sequence: int | None = None,
    ) -> Generator[Event, None, None]:
        """The tenant's memory events, live, until the iteration stops or the gateway ends
        the stream. With ``after_sequence`` the log's events after it come first (0: all
        of them); ``tags``/``types`` filter the events that carry a memory. A stream that
        breaks is opened again after the last event received."""
        tags, types = tuple(tags), tuple(types)
        resume = ops.Resume(self.config.retry)
        after = after_sequence
        while True:
            request = ops.subscribe_request(tags, types, after)
            call = self._stubs["memory"].Subscribe(request, metadata=self.config.metadata)
            try:
                for reply in call:
                    event = Event.of(reply)
                    resume.moved()
                    after = event.sequence
                    yield event
                return
            except grpc.RpcError as exc:
                self._pause(resume, exc)
            finally:
                call.cancel()

    def _pause(self, resume: ops.Resume, exc: grpc.RpcError) -> None:
        err = from_call(cast(FailedCall, exc))
        wait = resume.pause(err)
        if wait < 0:
            raise err from None
        time.sleep(wait)

    # AdminService: what a tenant admin may call for its own tenant.

    def dead_letters(
        self, *, tenant: str = "", page_size: int = 100, after: int = 0
    ) -> Iterator[DeadLetter]:
        """The tenant's dead letters after sequence ``after``, oldest first, fetched a page
        at a time."""
        while True:
            letters, after = self._run(ops.dead_letters(tenant, page_size, after))
            yield from letters
            if not after:
                return

    def replay_dead_letters(self, sequences: Iterable[int] = (), *, tenant: str = "") -> Replayed:
        return self._run(ops.replay_dead_letters(tenant, sequences))

    def consolidate(self, mode: str = "all", *, dry_run: bool = False, tenant: str = "") -> Run:
        return self._run(ops.consolidate(mode, dry_run, tenant))

    def consolidation_status(self, tenant: str = "") -> admin_pb2.ConsolidationStatusResponse:
        return self._run(ops.consolidation_status(tenant))

    def sync(self, stores: Iterable[str] = (), *, dry_run: bool = False, tenant: str = "") -> Run:
        return self._run(ops.sync(stores, dry_run, tenant))

    # AdminService: a cluster-admin token's (tenant "*").

    def rebuild(self, store: str, *, embedding_model: str = "") -> Run:
        """Rebuild "vector", "lexical" or "graph" from the log (a new embedding model with
        embedding_model, vector only)."""
        return self._run(ops.rebuild(store, embedding_model))

    def rebuild_status(self, tenant: str = "") -> admin_pb2.RebuildStatusResponse:
        return self._run(ops.rebuild_status(tenant))

    def delete_tenant(
        self, tenant: str, *, confirm: str = "", dry_run: bool = False
    ) -> TenantDeletion:
        """Erase every memory, relation and trace of ``tenant``; ``confirm`` repeats its
        name (a dry run needs none and only counts what would go)."""
        return self._run(ops.delete_tenant(tenant, confirm, dry_run))

    def delete_tenant_status(self, tenant: str, sequence: int) -> DeletionStatus:
        """Whether the deletion whose reply had ``sequence`` is applied in every store."""
        return self._run(ops.delete_tenant_status(tenant, sequence))

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> Engram:
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
