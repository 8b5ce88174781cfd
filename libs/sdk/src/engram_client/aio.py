"""AsyncEngram: the asyncio client (grpc.aio), with the same calls as Engram."""

from __future__ import annotations

import asyncio
import builtins
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Iterable
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


class AsyncEngram:
    """Like Engram, every call awaited; open it inside the event loop that uses it."""

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
            grpc.aio.secure_channel(address, creds, self.config.options)
            if creds
            else grpc.aio.insecure_channel(address)
        )
        self._stubs: dict[str, Any] = {
            "memory": gateway_pb2_grpc.MemoryServiceStub(self._channel),
            "admin": AdminServiceStub(self._channel),
        }
        self._session = ops.Session()

    @property
    def last_sequence(self) -> int:
        return self._session.sequence

    async def _run(self, op: ops.Op[T]) -> T:
        call = getattr(self._stubs[op.service], op.method)
        deadline = time.monotonic() + self.config.timeout_s
        attempt = 0
        while True:
            attempt += 1
            left = deadline - time.monotonic()
            try:
                reply = await call(op.request, timeout=left, metadata=self.config.metadata)
            except grpc.aio.AioRpcError as exc:
                err = from_call(cast(FailedCall, exc))
                wait = self.config.retry.pause(err, op.idempotent, attempt, left)
                if wait < 0:
                    raise err from None
                await asyncio.sleep(wait)
                continue
            if op.writes:
                self._session.saw(reply.sequence)
            return op.parse(reply)

    async def store(self, content: str, *, idempotency_key: str = "", **fields: Any) -> Stored:
        key = idempotency_key or uuid.uuid4().hex
        return await self._run(ops.store(content, key, fields))

    async def store_batch(self, items: Iterable[Item]) -> Batch:
        chunk = one_chunk(items)
        return await self._run(ops.store_batch(chunk.inputs, chunk.keys))

    async def store_stream(self, items: Iterable[Item]) -> Batch:
        requests = (
            gateway_pb2.StoreRequest(memory=c.inputs[0], idempotency_key=c.keys[0])
            for c in chunks(items, 1)
        )
        try:
            reply = await self._stubs["memory"].StoreStream(
                requests, timeout=self.config.timeout_s, metadata=self.config.metadata
            )
        except grpc.aio.AioRpcError as exc:
            raise from_call(cast(FailedCall, exc)) from None
        self._session.saw(reply.sequence)
        return Batch.of(reply)

    async def store_many(
        self,
        items: Iterable[Item],
        *,
        batch_size: int = 100,
        progress: ProgressCallback | None = None,
    ) -> StoreManyResult:
        out = StoreManyResult()
        for chunk in chunks(items, batch_size):
            await self._store_chunk(chunk)
            out.results.extend(chunk.done())
            if progress is not None:
                progress(out.progress())
        out.sequence = max((r.sequence for r in out.results), default=0)
        return out

    async def _store_chunk(self, chunk: Chunk) -> None:
        policy = self.config.retry
        for attempt in range(1, policy.attempts + 1):
            todo = chunk.pending()
            if attempt > 1 and todo:
                await asyncio.sleep(policy.delay(attempt - 1))
            if not todo:
                return
            inputs = [chunk.inputs[i] for i in todo]
            keys = [chunk.keys[i] for i in todo]
            chunk.take(todo, await self._run(ops.store_batch(inputs, keys)))

    async def recall(self, query: str = "", *, consistent: bool = True, **fields: Any) -> Recalled:
        return await self._run(ops.recall(query, self._floor(consistent), fields))

    def _floor(self, consistent: bool) -> int:
        return self._session.sequence if consistent else 0

    async def get(self, id: str, *, consistent: bool = True) -> Memory:
        return await self._run(ops.get(id, self._floor(consistent)))

    async def update(self, id: str, **fields: Any) -> Written:
        return await self._run(ops.update(id, fields))

    async def delete(self, id: str) -> Written:
        return await self._run(ops.delete(id))

    async def associate(
        self, source_id: str, target_id: str, type: str = "RELATES_TO", **fields: Any
    ) -> Written:
        return await self._run(ops.associate(source_id, target_id, type, fields))

    async def related(
        self, id: str, *, consistent: bool = True, **fields: Any
    ) -> builtins.list[Related]:
        return await self._run(ops.related(id, self._floor(consistent), fields))

    async def stats(self, tenant: str = "") -> Stats:
        return await self._run(ops.stats(tenant))

    async def list(self, **filters: Any) -> AsyncGenerator[Memory, None]:
        async for page in self.list_pages(**filters):
            for memory in page.memories:
                yield memory

    async def list_pages(self, **filters: Any) -> AsyncGenerator[Page, None]:
        cursor = str(filters.pop("cursor", "") or "")
        resume = ops.Resume(self.config.retry)
        while True:
            request = ops.list_request(filters, cursor)
            call = self._stubs["memory"].List(
                request, timeout=self.config.timeout_s, metadata=self.config.metadata
            )
            try:
                async for reply in call:
                    page = Page.of(reply)
                    resume.moved()
                    yield page
                    cursor = page.cursor
                    if not cursor:
                        return
                return
            except grpc.aio.AioRpcError as exc:
                await self._pause(resume, exc)
            finally:
                call.cancel()

    async def subscribe(
        self,
        *,
        tags: Iterable[str] = (),
        types: Iterable[str] = (),
        after_sequence: int | None = None,
    ) -> AsyncGenerator[Event, None]:
        tags, types = tuple(tags), tuple(types)
        resume = ops.Resume(self.config.retry)
        after = after_sequence
        while True:
            request = ops.subscribe_request(tags, types, after)
            call = self._stubs["memory"].Subscribe(request, metadata=self.config.metadata)
            try:
                async for reply in call:
                    event = Event.of(reply)
                    resume.moved()
                    after = event.sequence
                    yield event
                return
            except grpc.aio.AioRpcError as exc:
                await self._pause(resume, exc)
            finally:
                call.cancel()

    async def _pause(self, resume: ops.Resume, exc: grpc.aio.AioRpcError) -> None:
        err = from_call(cast(FailedCall, exc))
        wait = resume.pause(err)
        if wait < 0:
            raise err from None
        await asyncio.sleep(wait)

    async def dead_letters(
        self, *, tenant: str = "", page_size: int = 100, after: int = 0
    ) -> AsyncIterator[DeadLetter]:
        while True:
            letters, after = await self._run(ops.dead_letters(tenant, page_size, after))
            for letter in letters:
                yield letter
            if not after:
                return

    async def replay_dead_letters(
        self, sequences: Iterable[int] = (), *, tenant: str = ""
    ) -> Replayed:
        return await self._run(ops.replay_dead_letters(tenant, sequences))

    async def consolidate(
        self, mode: str = "all", *, dry_run: bool = False, tenant: str = ""
    ) -> Run:
        return await self._run(ops.consolidate(mode, dry_run, tenant))

    async def consolidation_status(self, tenant: str = "") -> admin_pb2.ConsolidationStatusResponse:
        return await self._run(ops.consolidation_status(tenant))

    async def sync(
        self, stores: Iterable[str] = (), *, dry_run: bool = False, tenant: str = ""
    ) -> Run:
        return await self._run(ops.sync(stores, dry_run, tenant))

    async def rebuild(self, store: str, *, embedding_model: str = "") -> Run:
        return await self._run(ops.rebuild(store, embedding_model))

    async def rebuild_status(self, tenant: str = "") -> admin_pb2.RebuildStatusResponse:
        return await self._run(ops.rebuild_status(tenant))

    async def delete_tenant(
        self, tenant: str, *, confirm: str = "", dry_run: bool = False
    ) -> TenantDeletion:
        return await self._run(ops.delete_tenant(tenant, confirm, dry_run))

    async def delete_tenant_status(self, tenant: str, sequence: int) -> DeletionStatus:
        return await self._run(ops.delete_tenant_status(tenant, sequence))

    async def close(self) -> None:
        await self._channel.close()

    async def __aenter__(self) -> AsyncEngram:
        return self

    async def __aexit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()
