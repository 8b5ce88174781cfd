"""The tools reach the gateway through the SDK, so they get its retries, idempotency keys
and error mapping: a scripted stub gateway answers."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2
from mcp import Client
from mcp.types import CallToolResult

from engram.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from engram_mcp.config import from_env
from engram_mcp.gateway import Gateway
from engram_mcp.server import build


def _bad_request(field: str) -> bytes:
    detail = any_pb2.Any()
    violation = error_details_pb2.BadRequest.FieldViolation(field=field, description="too big")
    detail.Pack(error_details_pb2.BadRequest(field_violations=[violation]))
    status = status_pb2.Status(code=3, message="importance: too big", details=[detail])
    return bytes(status.SerializeToString())


class ScriptedGateway(gateway_pb2_grpc.MemoryServiceServicer):
    """Refuses each method's first calls as scripted, then answers; records the requests."""

    def __init__(self) -> None:
        self.refusals: dict[str, list[tuple[grpc.StatusCode, tuple[Any, ...]]]] = {}
        self.requests: list[tuple[str, Any]] = []

    def _enter(self, method: str, request: Any, context: Any) -> None:
        self.requests.append((method, request))
        pending = self.refusals.get(method) or []
        if pending:
            code, trailers = pending.pop(0)
            context.set_trailing_metadata(trailers)
            context.abort(code, "refused")

    def Store(self, request: Any, context: Any) -> Any:  # noqa: N802 - generated name
        self._enter("Store", request, context)
        return gateway_pb2.StoreResponse(id="m1", sequence=7)

    def Stats(self, request: Any, context: Any) -> Any:  # noqa: N802
        self._enter("Stats", request, context)
        return gateway_pb2.StatsResponse(tenant="acme", watermark=7, last_sequence=7)

    def Recall(self, request: Any, context: Any) -> Any:  # noqa: N802
        self._enter("Recall", request, context)
        return gateway_pb2.RecallResponse()

    def Get(self, request: Any, context: Any) -> Any:  # noqa: N802
        self._enter("Get", request, context)
        return gateway_pb2.GetResponse()

    def Related(self, request: Any, context: Any) -> Any:  # noqa: N802
        self._enter("Related", request, context)
        return gateway_pb2.RelatedResponse()

    def Update(self, request: Any, context: Any) -> Any:  # noqa: N802
        self._enter("Update", request, context)
        return gateway_pb2.UpdateResponse(id=request.id, sequence=8)

    def of(self, method: str) -> list[Any]:
        return [r for m, r in self.requests if m == method]


@pytest.fixture
def gateway() -> Iterator[tuple[ScriptedGateway, str]]:
    stub = ScriptedGateway()  # type: ignore[abstract]
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    gateway_pb2_grpc.add_MemoryServiceServicer_to_server(stub, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield stub, f"127.0.0.1:{port}"
    finally:
        server.stop(0)


async def _calls(address: str, *calls: tuple[str, dict[str, Any]]) -> list[CallToolResult]:
    gw = Gateway(from_env({"ENGRAM_ADDRESS": address, "ENGRAM_TIMEOUT": "10"}))
    try:
        async with Client(build(gw)) as client:
            return [await client.call_tool(tool, args) for tool, args in calls]
    finally:
        await gw.close()


async def test_an_unavailable_gateway_is_retried(gateway: tuple[ScriptedGateway, str]) -> None:
    stub, address = gateway
    stub.refusals["Stats"] = [(grpc.StatusCode.UNAVAILABLE, ())] * 2
    [answered] = await _calls(address, ("memory_stats", {}))
    assert not answered.is_error, answered.content
    assert len(stub.of("Stats")) == 3


async def test_a_retried_store_sends_the_same_idempotency_key(
    gateway: tuple[ScriptedGateway, str],
) -> None:
    stub, address = gateway
    stub.refusals["Store"] = [(grpc.StatusCode.UNAVAILABLE, ())]
    [stored] = await _calls(address, ("store_memory", {"content": "Ana likes tea"}))
    assert not stored.is_error, stored.content
    first, retried = stub.of("Store")
    assert first.idempotency_key
    assert retried.idempotency_key == first.idempotency_key


async def test_a_recall_after_a_store_waits_for_its_sequence(
    gateway: tuple[ScriptedGateway, str],
) -> None:
    stub, address = gateway
    await _calls(
        address, ("store_memory", {"content": "Ana likes tea"}), ("recall_memory", {"query": "tea"})
    )
    [recall] = stub.of("Recall")
    assert recall.min_sequence == 7


async def test_reads_and_writes_after_a_store_wait_for_its_sequence_without_polling(
    gateway: tuple[ScriptedGateway, str],
) -> None:
    stub, address = gateway
    await _calls(
        address,
        ("store_memory", {"content": "Ana likes tea"}),
        ("get_memory", {"id": "m1"}),
        ("related_memories", {"id": "m1"}),
        ("update_memory", {"id": "m1", "importance": 0.9}),
        ("update_memory", {"id": "m1", "importance": 0.8}),
    )
    assert [m for m, _ in stub.requests] == [
        "Store", "Get", "Related", "Related", "Update", "Related", "Update",
    ]  # fmt: skip
    assert [r.min_sequence for r in stub.of("Get")] == [7]
    # The first update waits for the store; the second for the first update.
    assert [r.min_sequence for r in stub.of("Related")] == [7, 7, 8]


async def test_the_field_comes_from_the_standard_bad_request_detail(
    gateway: tuple[ScriptedGateway, str],
) -> None:
    stub, address = gateway
    detail = (("grpc-status-details-bin", _bad_request("memory.importance")),)
    stub.refusals["Store"] = [(grpc.StatusCode.INVALID_ARGUMENT, detail)]
    [refused] = await _calls(address, ("store_memory", {"content": "x"}))
    assert refused.is_error
    assert refused.structured_content is not None
    assert refused.structured_content["code"] == "INVALID_ARGUMENT"
    assert refused.structured_content["field"] == "memory.importance"
