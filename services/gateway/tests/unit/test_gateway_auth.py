"""Bearer tokens → tenant and scopes; UNAUTHENTICATED / PERMISSION_DENIED over gRPC."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import grpc
import pytest

from engram.common.v1 import common_pb2
from engram.gateway.v1 import gateway_pb2
from engram_core.errors import PermissionDenied, Unauthenticated
from engram_gateway.auth import Authenticator, Scope, hash_token, parse_token_string

UUID = "0190f3a4-7b1c-7d2e-8f00-123456789abc"


def test_token_string_parses_tenants_and_scopes() -> None:
    entries = parse_token_string(" a=t1:read+write ; b=t-2:admin;")
    assert [d for d, _ in entries] == [hash_token("a"), hash_token("b")]
    assert entries[0][1].tenant == "t1"
    assert entries[0][1].scopes == {Scope.READ, Scope.WRITE}


@pytest.mark.parametrize(
    "spec",
    ["nocolon=t1", "=t1:read", "a=t1:", "a=t1:fly", "a=bad.tenant:read", "a=t 1:read"],
)
def test_bad_token_string_is_refused_at_start(spec: str) -> None:
    with pytest.raises(ValueError, match="tokens entry 1"):
        parse_token_string(spec)


def test_token_file_holds_only_hashes(tmp_path: Path) -> None:
    path = tmp_path / "tokens.json"
    path.write_text(
        json.dumps([{"sha256": hash_token("s3cret"), "tenant": "acme", "scopes": ["read"]}])
    )
    auth = Authenticator.from_sources("dev=default:write", path)
    assert auth.identify("s3cret") is not None
    assert auth.identify("s3cret").tenant == "acme"  # type: ignore[union-attr]
    assert auth.identify("dev").tenant == "default"  # type: ignore[union-attr]
    assert auth.identify(hash_token("s3cret")) is None  # the hash itself is no token


@pytest.mark.parametrize(
    "content",
    [
        "{}",
        json.dumps([{"sha256": "abc", "tenant": "t", "scopes": ["read"]}]),
        json.dumps([{"sha256": "0" * 64, "tenant": "a:b", "scopes": ["read"]}]),
        json.dumps([{"sha256": "0" * 64, "tenant": "t", "scopes": "read"}]),
        json.dumps([{"sha256": "0" * 64, "tenant": "t", "scopes": []}]),
    ],
)
def test_bad_token_file_is_refused(tmp_path: Path, content: str) -> None:
    path = tmp_path / "tokens.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=r"tokens\.json"):
        Authenticator.from_sources("", path)


def test_authorize() -> None:
    auth = Authenticator.from_sources("r=acme:read;adm=ops:admin")
    assert auth.authorize([("authorization", "Bearer r")], Scope.READ).tenant == "acme"
    assert auth.authorize([("Authorization", "bearer  r ")], Scope.READ).tenant == "acme"
    # admin implies read and write
    assert auth.authorize([("authorization", "Bearer adm")], Scope.WRITE).tenant == "ops"
    with pytest.raises(PermissionDenied):
        auth.authorize([("authorization", "Bearer r")], Scope.WRITE)
    for metadata in ([], [("authorization", "Basic r")], [("authorization", "Bearer ")]):
        with pytest.raises(Unauthenticated):
            auth.authorize(metadata, Scope.READ)
    with pytest.raises(Unauthenticated):
        auth.authorize([("authorization", "Bearer nope")], Scope.READ)


def test_nothing_configured_refuses_everything() -> None:
    auth = Authenticator.from_sources("")
    assert not auth.configured
    with pytest.raises(Unauthenticated):
        auth.authorize([("authorization", "Bearer dev-token")], Scope.READ)


def _calls() -> list[tuple[str, Any, Scope]]:
    mem = common_pb2.MemoryInput(content="x")
    return [
        ("Store", gateway_pb2.StoreRequest(memory=mem), Scope.WRITE),
        ("StoreBatch", gateway_pb2.StoreBatchRequest(memories=[mem]), Scope.WRITE),
        ("Update", gateway_pb2.UpdateRequest(id=UUID, memory=mem), Scope.WRITE),
        ("Delete", gateway_pb2.DeleteRequest(id=UUID), Scope.WRITE),
        (
            "Associate",
            gateway_pb2.AssociateRequest(source_id=UUID, target_id=UUID, type="RELATES_TO"),
            Scope.WRITE,
        ),
        ("Recall", gateway_pb2.RecallRequest(query="x"), Scope.READ),
        ("Get", gateway_pb2.GetRequest(id=UUID), Scope.READ),
        ("Related", gateway_pb2.RelatedRequest(id=UUID), Scope.READ),
        ("Stats", gateway_pb2.StatsRequest(), Scope.READ),
    ]


@pytest.mark.parametrize(("rpc", "request_", "scope"), _calls())
async def test_every_rpc_checks_the_token(
    client: Any, rpc: str, request_: Any, scope: Scope
) -> None:
    method = getattr(client.stub, rpc)
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await method(request_)
    assert exc.value.code() == grpc.StatusCode.UNAUTHENTICATED
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await method(request_, metadata=client.auth("unknown"))
    assert exc.value.code() == grpc.StatusCode.UNAUTHENTICATED
    lacking = "r-token" if scope is Scope.WRITE else "w-token"
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await method(request_, metadata=client.auth(lacking))
    assert exc.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert client.harness.log.events == []


async def test_store_stream_checks_the_token(client: Any) -> None:
    async def one() -> Any:
        yield gateway_pb2.StoreRequest(memory=common_pb2.MemoryInput(content="x"))

    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await client.stub.StoreStream(one(), metadata=client.auth("r-token"))
    assert exc.value.code() == grpc.StatusCode.PERMISSION_DENIED


async def test_tenant_comes_from_the_token(client: Any) -> None:
    h = client.harness
    h.world.put(h.memory(UUID, "globex secret plans", tenant="globex"))
    with pytest.raises(grpc.aio.AioRpcError) as exc:
        await client.stub.Get(gateway_pb2.GetRequest(id=UUID), metadata=client.auth("r-token"))
    assert exc.value.code() == grpc.StatusCode.NOT_FOUND
    got = await client.stub.Get(gateway_pb2.GetRequest(id=UUID), metadata=client.auth("other"))
    assert got.memory.tenant == "globex"
    reply = await client.stub.Store(
        gateway_pb2.StoreRequest(memory=common_pb2.MemoryInput(content="mine")),
        metadata=client.auth("w-token"),
    )
    stored = h.log.of("stored")[-1]
    assert stored.env.tenant == "acme"
    assert stored.payload[0].tenant == "acme"
    assert stored.payload[0].id == reply.id
