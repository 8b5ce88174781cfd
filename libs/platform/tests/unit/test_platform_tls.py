"""TLS and mTLS of the platform's gRPC servers and channels, and rotation without restart."""

from __future__ import annotations

import asyncio
import os
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
import trustme
from grpc_health.v1 import health_pb2, health_pb2_grpc
from pydantic import ValidationError

from engram.common.v1 import common_pb2
from engram.scoring.v1 import scoring_pb2, scoring_pb2_grpc
from engram_core.errors import NotFound
from engram_platform import health
from engram_platform.grpc_client import Channels, open_channel, translate_errors
from engram_platform.grpc_server import RunningServer, start_server
from engram_platform.settings import ClientTlsSettings, ServerTlsSettings, ServiceSettings
from engram_platform.tls import TlsError, channel_credentials, labels

HOST = "127.0.0.1"


def _put(path: Path, blob: trustme.Blob) -> None:
    """Replace ``path`` the way a rotation does: a new file renamed over the old one."""
    staged = path.with_suffix(".new")
    blob.write_to_path(str(staged))
    os.replace(staged, path)


class Pki:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.ca = trustme.CA()
        self.ca_file = root / "ca.pem"
        self.ca.cert_pem.write_to_path(str(self.ca_file))

    def issue(self, name: str, ca: trustme.CA | None = None) -> trustme.LeafCert:
        """A certificate for this host, written to ``<name>.crt`` / ``<name>.key``."""
        leaf = (ca or self.ca).issue_cert(HOST, "localhost")
        _put(self.root / f"{name}.crt", leaf.cert_chain_pems[0])
        _put(self.root / f"{name}.key", leaf.private_key_pem)
        return leaf

    def server_tls(self, client_auth: str = "none") -> ServerTlsSettings:
        return ServerTlsSettings(
            cert_file=self.root / "server.crt",
            key_file=self.root / "server.key",
            ca_file=self.ca_file,
            client_auth=client_auth,
        )

    def client_creds(self, name: str | None = None) -> grpc.ChannelCredentials:
        cert = None if name is None else self.root / f"{name}.crt"
        key = None if name is None else self.root / f"{name}.key"
        return channel_credentials(self.ca_file, cert, key, labels("client_tls"))


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return Pki(tmp_path)


@pytest.fixture
async def servers() -> AsyncIterator[list[RunningServer]]:
    started: list[RunningServer] = []
    yield started
    for running in started:
        await running.stop(0)


async def _start(started: list[RunningServer], tls: ServerTlsSettings) -> int:
    settings = ServiceSettings(host=HOST, port=0, tls=tls)
    running = await start_server("test", settings, lambda _s: None, [])
    started.append(running)
    return running.port


async def _check(channel: grpc.aio.Channel) -> grpc.StatusCode:
    """OK when the health call went through, else its status."""
    try:
        await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
    except grpc.aio.AioRpcError as err:
        return err.code()
    return grpc.StatusCode.OK


async def _call(port: int, credentials: grpc.ChannelCredentials | None) -> grpc.StatusCode:
    async with open_channel(f"{HOST}:{port}", credentials=credentials) as channel:
        return await _check(channel)


async def _served_certificate(pki: Pki, port: int) -> bytes:
    """The certificate a new connection is shown (DER), from a plain TLS handshake."""
    context = ssl.create_default_context(cafile=str(pki.ca_file))
    context.set_alpn_protocols(["h2"])
    _reader, writer = await asyncio.open_connection(
        HOST, port, ssl=context, server_hostname="localhost"
    )
    der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    writer.close()
    return bytes(der)


def _der(leaf: trustme.LeafCert) -> bytes:
    return ssl.PEM_cert_to_DER_cert(leaf.cert_chain_pems[0].bytes().decode())


async def test_tls_server_answers_a_client_with_the_ca_and_refuses_plaintext(
    pki: Pki, servers: list[RunningServer]
) -> None:
    pki.issue("server")
    port = await _start(servers, pki.server_tls())
    assert await _call(port, pki.client_creds()) == grpc.StatusCode.OK
    assert await _call(port, None) == grpc.StatusCode.UNAVAILABLE
    stranger = channel_credentials(None, None, None, labels("x"))  # system CAs only
    assert await _call(port, stranger) == grpc.StatusCode.UNAVAILABLE


async def test_mtls_refuses_a_client_without_a_certificate_of_its_ca(
    pki: Pki, servers: list[RunningServer]
) -> None:
    pki.issue("server")
    pki.issue("client")
    pki.issue("outsider", ca=trustme.CA())
    port = await _start(servers, pki.server_tls(client_auth="require"))
    assert await _call(port, pki.client_creds()) == grpc.StatusCode.UNAVAILABLE
    assert await _call(port, pki.client_creds("outsider")) == grpc.StatusCode.UNAVAILABLE
    assert await _call(port, pki.client_creds("client")) == grpc.StatusCode.OK


async def test_a_rotated_certificate_is_served_to_new_connections(
    pki: Pki, servers: list[RunningServer]
) -> None:
    first = pki.issue("server")
    port = await _start(servers, pki.server_tls())
    assert await _served_certificate(pki, port) == _der(first)
    second = pki.issue("server")
    assert await _served_certificate(pki, port) == _der(second)
    assert await _call(port, pki.client_creds()) == grpc.StatusCode.OK


async def test_a_broken_rotation_keeps_the_last_good_certificate(
    pki: Pki, servers: list[RunningServer]
) -> None:
    first = pki.issue("server")
    port = await _start(servers, pki.server_tls())
    other = trustme.CA().issue_cert(HOST)
    _put(pki.root / "server.crt", other.cert_chain_pems[0])  # key not rotated yet
    assert await _served_certificate(pki, port) == _der(first)
    _put(pki.root / "server.key", other.private_key_pem)  # the pair is whole again
    with pytest.raises(ssl.SSLCertVerificationError):  # served, and not of our CA
        await _served_certificate(pki, port)


async def test_channels_follow_a_rotated_client_certificate(
    pki: Pki, servers: list[RunningServer]
) -> None:
    pki.issue("server")
    pki.issue("client", ca=trustme.CA())  # signed by a CA the server does not trust
    port = await _start(servers, pki.server_tls(client_auth="require"))
    tls = ClientTlsSettings(
        ca_file=pki.ca_file,
        cert_file=pki.root / "client.crt",
        key_file=pki.root / "client.key",
        reload_s=0,
    )
    channels = Channels(1024 * 1024, tls)
    channel = channels.open(f"{HOST}:{port}")
    try:
        assert await _check(channel) == grpc.StatusCode.UNAVAILABLE
        pki.issue("client")  # now one of the server's CA, same stub and channel object
        assert await _check(channel) == grpc.StatusCode.OK
    finally:
        await channels.close()


class _Scoring(scoring_pb2_grpc.ScoringServiceServicer):
    async def Rank(  # noqa: N802 - generated name
        self, request: scoring_pb2.RankRequest, context: object
    ) -> scoring_pb2.RankResponse:
        if request.query == "missing":
            raise NotFound("memory 42 not found")
        memory = common_pb2.Memory(id="m1", content=request.query)
        return scoring_pb2.RankResponse(results=[common_pb2.ScoredMemory(memory=memory)])


async def test_a_service_client_over_mtls_channels_keeps_its_error_mapping(
    pki: Pki, servers: list[RunningServer]
) -> None:
    pki.issue("server")
    pki.issue("client")
    settings = ServiceSettings(host=HOST, port=0, tls=pki.server_tls(client_auth="require"))
    service = scoring_pb2.DESCRIPTOR.services_by_name["ScoringService"].full_name
    running = await start_server(
        "scoring",
        settings,
        lambda s: scoring_pb2_grpc.add_ScoringServiceServicer_to_server(_Scoring(), s),
        [service],
    )
    servers.append(running)
    tls = ClientTlsSettings(
        ca_file=pki.ca_file, cert_file=pki.root / "client.crt", key_file=pki.root / "client.key"
    )
    channels = Channels(1024 * 1024, tls)
    stub = scoring_pb2_grpc.ScoringServiceStub(channels.open(f"{HOST}:{running.port}"))
    try:
        reply = await stub.Rank(scoring_pb2.RankRequest(query="q"), timeout=10)
        assert [r.memory.id for r in reply.results] == ["m1"]
        with pytest.raises(NotFound):
            async with translate_errors("scoring"):
                await stub.Rank(scoring_pb2.RankRequest(query="missing"), timeout=10)
    finally:
        await channels.close()


async def test_channels_without_tls_stay_plaintext(servers: list[RunningServer]) -> None:
    port = await _start(servers, ServerTlsSettings())
    channels = Channels(1024 * 1024, ClientTlsSettings())
    try:
        assert await _check(channels.open(f"{HOST}:{port}")) == grpc.StatusCode.OK
    finally:
        await channels.close()


@pytest.mark.parametrize(
    ("given", "named"),
    [
        ({"cert_file": "a.crt"}, "tls.key_file"),
        ({"key_file": "a.key"}, "tls.cert_file"),
        ({"cert_file": "a", "key_file": "b", "client_auth": "require"}, "tls.ca_file"),
        ({"ca_file": "ca.pem"}, "tls.ca_file"),
    ],
)
def test_half_configured_server_tls_is_refused(given: dict[str, str], named: str) -> None:
    with pytest.raises(ValidationError, match=named):
        ServerTlsSettings(**given)


def test_half_configured_client_tls_is_refused() -> None:
    with pytest.raises(ValidationError, match=r"client_tls\.key_file"):
        ClientTlsSettings(cert_file=Path("c.crt"))
    assert not ClientTlsSettings().on
    assert ClientTlsSettings(ca_file=Path("ca.pem")).on


async def test_a_start_with_an_unusable_file_names_the_setting(
    pki: Pki, servers: list[RunningServer]
) -> None:
    pki.issue("server")
    missing = pki.server_tls().model_copy(update={"cert_file": pki.root / "nope.crt"})
    with pytest.raises(TlsError, match=r"^tls\.cert_file: cannot read"):
        await _start(servers, missing)
    pki.issue("other")
    mismatched = pki.server_tls().model_copy(update={"key_file": pki.root / "other.key"})
    with pytest.raises(TlsError, match=r"^tls\.key_file: .* not a certificate and its"):
        await _start(servers, mismatched)
    (pki.root / "junk.pem").write_text("not a certificate")
    junk_ca = pki.server_tls().model_copy(update={"ca_file": pki.root / "junk.pem"})
    with pytest.raises(TlsError, match=r"^tls\.ca_file: .* no PEM block"):
        await _start(servers, junk_ca)
    with pytest.raises(TlsError, match=r"^client_tls\.ca_file: cannot read"):
        Channels(1024, ClientTlsSettings(ca_file=pki.root / "nope.pem"))
    assert servers == []


async def test_the_health_probe_speaks_tls_when_asked(
    pki: Pki, servers: list[RunningServer]
) -> None:
    pki.issue("server")
    pki.issue("client")
    port = await _start(servers, pki.server_tls(client_auth="require"))
    address = f"{HOST}:{port}"
    mtls = ["--ca", str(pki.ca_file), "--cert", str(pki.root / "client.crt")]
    mtls += ["--key", str(pki.root / "client.key")]
    # The probe blocks: off the loop, which serves the server it asks.
    assert await asyncio.to_thread(health.main, [address, *mtls]) == 0
    assert await asyncio.to_thread(health.main, [address, "--ca", str(pki.ca_file)]) == 1
    assert await asyncio.to_thread(health.main, [address]) == 1
