"""The gateway over TLS and mTLS, and a start with a broken TLS setting."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import grpc
import pytest
import trustme

from engram.common.v1 import common_pb2
from engram.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from engram_gateway import server
from engram_gateway.auth import Authenticator
from engram_gateway.config import Settings
from engram_platform.settings import ServerTlsSettings
from engram_platform.tls import channel_credentials, labels

AUTH = (("authorization", "Bearer rw-token"),)


def _issue(ca: trustme.CA, root: Path, name: str) -> tuple[Path, Path]:
    leaf = ca.issue_cert("127.0.0.1", "localhost")
    cert, key = root / f"{name}.crt", root / f"{name}.key"
    leaf.cert_chain_pems[0].write_to_path(str(cert))
    leaf.private_key_pem.write_to_path(str(key))
    return cert, key


async def _store(port: int, credentials: grpc.ChannelCredentials) -> grpc.StatusCode:
    async with grpc.aio.secure_channel(f"127.0.0.1:{port}", credentials) as channel:
        stub = gateway_pb2_grpc.MemoryServiceStub(channel)
        request = gateway_pb2.StoreRequest(memory=common_pb2.MemoryInput(content="hello"))
        try:
            await stub.Store(request, metadata=AUTH, timeout=10)
        except grpc.aio.AioRpcError as err:
            return err.code()
    return grpc.StatusCode.OK


async def test_the_gateway_serves_mtls_and_still_asks_for_a_token(
    harness: Any, tmp_path: Path
) -> None:
    ca = trustme.CA()
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    cert, key = _issue(ca, tmp_path, "gateway")
    client_cert, client_key = _issue(ca, tmp_path, "agent")
    tls = ServerTlsSettings(cert_file=cert, key_file=key, ca_file=ca_file, client_auth="require")
    settings = harness.settings.model_copy(update={"tls": tls})
    auth = Authenticator.from_sources(settings.tokens.get_secret_value())
    running = await server.start(settings, harness.gateway, auth)
    names = labels("client")
    try:
        with_cert = channel_credentials(ca_file, client_cert, client_key, names)
        assert await _store(running.port, with_cert) == grpc.StatusCode.OK
        without = channel_credentials(ca_file, None, None, names)
        assert await _store(running.port, without) == grpc.StatusCode.UNAVAILABLE
    finally:
        await harness.gateway.access.drain()
        await running.stop(None)


def test_tls_settings_come_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENGRAM_GATEWAY_TLS__CERT_FILE", "/tls/tls.crt")
    monkeypatch.setenv("ENGRAM_GATEWAY_TLS__KEY_FILE", "/tls/tls.key")
    monkeypatch.setenv("ENGRAM_GATEWAY_CLIENT_TLS__CA_FILE", "/tls/ca.crt")
    monkeypatch.setenv("ENGRAM_GATEWAY_CLIENT_TLS__SERVER_NAME", "engram.internal")
    s = Settings()
    assert s.tls.on
    assert s.tls.key_file == Path("/tls/tls.key")
    assert s.client_tls.on
    assert s.client_tls.server_name == "engram.internal"


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"ENGRAM_GATEWAY_TLS__CERT_FILE": "/tls/tls.crt"}, "tls.key_file"),
        ({"ENGRAM_GATEWAY_CLIENT_TLS__CA_FILE": "/no/such/ca.pem"}, "client_tls.ca_file"),
    ],
)
async def test_a_broken_tls_setting_stops_the_start_naming_it(
    tmp_path: Path, env: dict[str, str], named: str
) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "engram_gateway",
        env={**os.environ, "ENGRAM_HOME": str(tmp_path), "ENGRAM_GATEWAY_PORT": "0", **env},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode != 0
    assert named in out.decode(errors="replace")
