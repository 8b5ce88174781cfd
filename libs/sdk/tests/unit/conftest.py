"""A scripted fake gateway (MemoryService and AdminService) on a free port, in threads,
which both clients talk to; it records every request and its metadata."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest

from engram.common.v1 import common_pb2
from engram.gateway.v1 import admin_pb2, admin_pb2_grpc, gateway_pb2, gateway_pb2_grpc


@dataclass
class Failure:
    code: grpc.StatusCode
    message: str
    trailers: tuple[tuple[str, str | bytes], ...] = ()


@dataclass
class Script:
    """What the fake answers: failures to raise first (per method), then its replies."""

    failures: dict[str, list[Failure]] = field(default_factory=dict)
    calls: list[tuple[str, Any, dict[str, str]]] = field(default_factory=list)
    sequence: int = 0
    # StoreBatch: item codes to answer per call (one list per call, "" = stored).
    item_codes: list[list[str]] = field(default_factory=list)
    letters: list[int] = field(default_factory=list)  # dead-letter sequences held
    held: list[str] = field(default_factory=list)  # memory ids List pages through, in order
    events: list[int] = field(default_factory=list)  # sequences Subscribe sends, in order
    # Per stream call, in order: how many messages it sends before breaking (UNAVAILABLE).
    breaks: dict[str, list[int]] = field(default_factory=dict)

    def stream(self, method: str, replies: list[Any], context: grpc.ServicerContext) -> Any:
        """The replies of a server stream, broken where the script says."""
        pending = self.breaks.get(method) or []
        cut = pending.pop(0) if pending else -1
        for i, reply in enumerate(replies):
            if i == cut:
                context.abort(grpc.StatusCode.UNAVAILABLE, "stream broke")
            yield reply

    def enter(self, method: str, request: Any, context: grpc.ServicerContext) -> None:
        self.calls.append((method, request, dict(context.invocation_metadata())))  # type: ignore[arg-type]
        pending = self.failures.get(method) or []
        if pending:
            f = pending.pop(0)
            if f.trailers:
                context.set_trailing_metadata(f.trailers)
            context.abort(f.code, f.message)

    def of(self, method: str) -> list[Any]:
        return [r for m, r, _ in self.calls if m == method]

    def next_sequence(self) -> int:
        self.sequence += 1
        return self.sequence


class FakeMemory(gateway_pb2_grpc.MemoryServiceServicer):
    def __init__(self, script: Script) -> None:
        self.s = script

    def Store(self, request: Any, context: Any) -> Any:  # noqa: N802 - generated name
        self.s.enter("Store", request, context)
        return gateway_pb2.StoreResponse(
            id=f"m{self.s.sequence + 1}", sequence=self.s.next_sequence()
        )

    def StoreBatch(self, request: Any, context: Any) -> Any:  # noqa: N802
        self.s.enter("StoreBatch", request, context)
        codes = self.s.item_codes.pop(0) if self.s.item_codes else []
        results = []
        for i, key in enumerate(request.idempotency_keys):
            code = codes[i] if i < len(codes) else ""
            if code:
                results.append(gateway_pb2.StoreResult(code=code, message="no ack"))
            else:
                seq = self.s.next_sequence()
                results.append(gateway_pb2.StoreResult(id=f"id-{key}", sequence=seq))
        failed = sum(1 for r in results if r.code)
        return gateway_pb2.StoreBatchResponse(
            ids=[r.id for r in results], results=results, failed=failed, sequence=self.s.sequence
        )

    def Recall(self, request: Any, context: Any) -> Any:  # noqa: N802
        self.s.enter("Recall", request, context)
        return gateway_pb2.RecallResponse()

    def Get(self, request: Any, context: Any) -> Any:  # noqa: N802
        self.s.enter("Get", request, context)
        return gateway_pb2.GetResponse()

    def Related(self, request: Any, context: Any) -> Any:  # noqa: N802
        self.s.enter("Related", request, context)
        return gateway_pb2.RelatedResponse()

    def Associate(self, request: Any, context: Any) -> Any:  # noqa: N802
        self.s.enter("Associate", request, context)
        return gateway_pb2.AssociateResponse(sequence=self.s.next_sequence())

    def Delete(self, request: Any, context: Any) -> Any:  # noqa: N802
        self.s.enter("Delete", request, context)
        return gateway_pb2.DeleteResponse(id=request.id, sequence=self.s.next_sequence())

    def Update(self, request: Any, context: Any) -> Any:  # noqa: N802
        self.s.enter("Update", request, context)
        return gateway_pb2.UpdateResponse(id=request.id, sequence=self.s.next_sequence())

    def List(self, request: Any, context: Any) -> Any:  # noqa: N802
        """Pages of page_size ids after the cursor (the previous page's last id)."""
        self.s.enter("List", request, context)
        held = self.s.held
        start = held.index(request.cursor) + 1 if request.cursor else 0
        size = request.page_size or 100
        pages = []
        for at in range(start, len(held), size):
            ids = held[at : at + size]
            last = at + size >= len(held)
            memories = [common_pb2.Memory(id=i) for i in ids]
            relations = [common_pb2.Relation(source_id=ids[0], target_id=ids[-1], type="LEADS_TO")]
            cursor = "" if last else ids[-1]
            page = gateway_pb2.ListResponse(memories=memories, relations=relations, cursor=cursor)
            pages.append(page)
        yield from self.s.stream("List", pages or [gateway_pb2.ListResponse()], context)

    def Subscribe(self, request: Any, context: Any) -> Any:  # noqa: N802
        """The scripted events after after_sequence (all when unset), then the end."""
        self.s.enter("Subscribe", request, context)
        after = request.after_sequence if request.HasField("after_sequence") else 0
        kind = gateway_pb2.SubscribeResponse.MEMORY_STORED
        replies = [
            gateway_pb2.SubscribeResponse(
                sequence=q, kind=kind, memory_id=f"m{q}", memory=common_pb2.Memory(id=f"m{q}")
            )
            for q in self.s.events
            if q > after
        ]
        yield from self.s.stream("Subscribe", replies, context)


class FakeAdmin(admin_pb2_grpc.AdminServiceServicer):
    def __init__(self, script: Script) -> None:
        self.s = script

    def ListDeadLetters(self, request: Any, context: Any) -> Any:  # noqa: N802
        self.s.enter("ListDeadLetters", request, context)
        rest = [q for q in self.s.letters if q > request.after]
        page = rest[: request.page_size]
        more = len(rest) > len(page)
        return admin_pb2.ListDeadLettersResponse(
            dead_letters=[admin_pb2.DeadLetter(sequence=q, reason="refused") for q in page],
            next_after=page[-1] if more else 0,
        )

    def DeleteTenant(self, request: Any, context: Any) -> Any:  # noqa: N802
        self.s.enter("DeleteTenant", request, context)
        counts = [admin_pb2.TenantCount(store="vector", count=3)]
        sequence = 0 if request.dry_run else self.s.next_sequence()
        return admin_pb2.DeleteTenantResponse(
            tenant=request.tenant, dry_run=request.dry_run, sequence=sequence, counts=counts
        )

    def DeleteTenantStatus(self, request: Any, context: Any) -> Any:  # noqa: N802
        self.s.enter("DeleteTenantStatus", request, context)
        counts = [admin_pb2.TenantCount(store="vector", count=0)]
        return admin_pb2.DeleteTenantStatusResponse(
            tenant=request.tenant, sequence=request.sequence, applied=True, counts=counts
        )

    def Rebuild(self, request: Any, context: Any) -> Any:  # noqa: N802
        self.s.enter("Rebuild", request, context)
        return admin_pb2.RebuildResponse(run_id="rb1")

    def RebuildStatus(self, request: Any, context: Any) -> Any:  # noqa: N802
        self.s.enter("RebuildStatus", request, context)
        return admin_pb2.RebuildStatusResponse(tenant=request.tenant)


def serve(script: Script, port_spec: str = "127.0.0.1:0", creds: Any = None) -> tuple[Any, int]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    gateway_pb2_grpc.add_MemoryServiceServicer_to_server(FakeMemory(script), server)  # type: ignore[abstract]
    admin_pb2_grpc.add_AdminServiceServicer_to_server(FakeAdmin(script), server)  # type: ignore[abstract]
    port = (
        server.add_secure_port(port_spec, creds) if creds else server.add_insecure_port(port_spec)
    )
    server.start()
    return server, port


@dataclass
class Fake:
    """Tests reach the fake through this fixture (importlib mode: no imports from here)."""

    script: Script
    address: str

    def fail(
        self,
        method: str,
        code: grpc.StatusCode,
        message: str = "refused",
        trailers: tuple[tuple[str, str | bytes], ...] = (),
        times: int = 1,
    ) -> None:
        pending = self.script.failures.setdefault(method, [])
        pending.extend(Failure(code, message, trailers) for _ in range(times))


@pytest.fixture
def fake() -> Iterator[Fake]:
    script = Script()
    server, port = serve(script)
    yield Fake(script, f"127.0.0.1:{port}")
    server.stop(None)


@pytest.fixture
def serve_fake() -> Iterator[Any]:
    """``serve_fake(creds)``: a fake on a TLS port; yields (script, port)."""
    servers: list[Any] = []

    def start(creds: Any) -> tuple[Script, int]:
        script = Script()
        server, port = serve(script, "127.0.0.1:0", creds)
        servers.append(server)
        return script, port

    yield start
    for server in servers:
        server.stop(None)
