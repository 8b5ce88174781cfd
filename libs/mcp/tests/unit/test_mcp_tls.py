"""The server's gateway connection: TLS and mTLS from the environment, the token sent as the
bearer, a refusal's field carried into the tool error. A stub gateway answers."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest
import trustme
from mcp import Client
from mcp.types import CallToolResult

from engram.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from engram_mcp.config import from_env
from engram_mcp.gateway import Gateway
from engram_mcp.server import build


class StubGateway(gateway_pb2_grpc.MemoryServiceServicer):
    def __init__(self) -> None:
        self.bearers: list[str] = []

    def Stats(self, request: Any, context: Any) -> Any:  # noqa: N802
        metadata = dict(context.invocation_metadata())
        self.bearers.append(metadata.get("authorization", ""))
        return gateway_pb2.StatsResponse(tenant="acme")

    def Get(self, request: Any, context: Any) -> Any:  # noqa: N802
        context.set_trailing_metadata((("engram-field", "id"),))
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, "id: not a UUID")


class Pki:
    def __init__(self, root: Path) -> None:
        self.ca = trustme.CA()
        self.ca_file = root / "ca.pem"
        self.ca.cert_pem.write_to_path(str(self.ca_file))
        self.server = self.ca.issue_cert("127.0.0.1")
        client = self.ca.issue_cert("agent@example.com")
        self.cert, self.key = root / "agent.crt", root / "agent.key"
        client.cert_chain_pems[0].write_to_path(str(self.cert))
        client.private_key_pem.write_to_path(str(self.key))


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return Pki(tmp_path)


@pytest.fixture
def stub() -> StubGateway:
    return StubGateway()


@pytest.fixture
def mtls_address(pki: Pki, stub: StubGateway) -> Iterator[str]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    gateway_pb2_grpc.add_MemoryServiceServicer_to_server(stub, server)
    pair = (pki.server.private_key_pem.bytes(), pki.server.cert_chain_pems[0].bytes())
    creds = grpc.ssl_server_credentials([pair], pki.ca.cert_pem.bytes(), True)
    port = server.add_secure_port("127.0.0.1:0", creds)
    server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.stop(0)


async def _call(env: dict[str, str], tool: str, arguments: dict[str, Any]) -> CallToolResult:
    gateway = Gateway(from_env({"ENGRAM_TIMEOUT": "5", **env}))
    try:
        async with Client(build(gateway)) as client:
            return await client.call_tool(tool, arguments)
    finally:
        await gateway.close()


async def test_mtls_and_the_token_come_from_the_environment(
    mtls_address: str, pki: Pki, stub: StubGateway
) -> None:
    env = {"ENGRAM_ADDRESS": mtls_address, "ENGRAM_TOKEN": "agent-token"}
    tls = {"ENGRAM_CA": str(pki.ca_file), "ENGRAM_CERT": str(pki.cert), "ENGRAM_KEY": str(pki.key)}
    answered = await _call(env | tls, "memory_stats", {})
    assert not answered.is_error
    assert answered.structured_content is not None
    assert answered.structured_content["tenant"] == "acme"
    assert stub.bearers == ["Bearer agent-token"]
    no_cert = await _call(env | {"ENGRAM_CA": str(pki.ca_file)}, "memory_stats", {})
    plaintext = await _call(env, "memory_stats", {})
    assert no_cert.is_error
    assert plaintext.is_error
    assert stub.bearers == ["Bearer agent-token"]


async def test_a_refusal_names_its_field_in_the_tool_error(mtls_address: str, pki: Pki) -> None:
    tls = {"ENGRAM_CA": str(pki.ca_file), "ENGRAM_CERT": str(pki.cert), "ENGRAM_KEY": str(pki.key)}
    refused = await _call({"ENGRAM_ADDRESS": mtls_address} | tls, "get_memory", {"id": "x"})
    assert refused.is_error
    assert refused.structured_content == {
        "code": "INVALID_ARGUMENT",
        "message": "id: not a UUID",
        "field": "id",
    }
