"""A scripted fake gateway (MemoryService and AdminService) on a free port, in threads,
which both clients talk to; it records every request and its metadata."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest

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

    def Delete(self, request: Any, context: Any) -> Any:  # noqa: N802
        self.s.enter("Delete", request, context)
        return gateway_pb2.DeleteResponse(id=request.id, sequence=self.s.next_sequence())

    def Update(self, request: Any, context: Any) -> Any:  # noqa: N802
        self.s.enter("Update", request, context)
        return gateway_pb2.UpdateResponse(id=request.id, sequence=self.s.next_sequence())


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
