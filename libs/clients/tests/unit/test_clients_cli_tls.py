"""`engram --tls/--ca/--cert/--key`: the CLI against a gateway that speaks TLS or mTLS."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest
import trustme

from engram.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from engram_clients.cli import main


class Gateway(gateway_pb2_grpc.MemoryServiceServicer):
    def Stats(self, request: Any, context: Any) -> Any:  # noqa: N802
        return gateway_pb2.StatsResponse(tenant="acme")


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


def _serve(pki: Pki, require_client_auth: bool) -> Iterator[str]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    gateway_pb2_grpc.add_MemoryServiceServicer_to_server(Gateway(), server)
    pair = (pki.server.private_key_pem.bytes(), pki.server.cert_chain_pems[0].bytes())
    creds = grpc.ssl_server_credentials([pair], pki.ca.cert_pem.bytes(), require_client_auth)
    port = server.add_secure_port("127.0.0.1:0", creds)
    server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.stop(0)


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return Pki(tmp_path)


@pytest.fixture
def tls_gateway(pki: Pki) -> Iterator[str]:
    yield from _serve(pki, require_client_auth=False)


@pytest.fixture
def mtls_gateway(pki: Pki) -> Iterator[str]:
    yield from _serve(pki, require_client_auth=True)


def test_ca_flag_or_env_reaches_a_tls_gateway(
    tls_gateway: str, pki: Pki, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--addr", tls_gateway, "--ca", str(pki.ca_file), "stats"]) == 0
    assert '"tenant": "acme"' in capsys.readouterr().out
    assert main(["--addr", tls_gateway, "stats"]) == 1  # plaintext
    assert "UNAVAILABLE" in capsys.readouterr().err
    monkeypatch.setenv("ENGRAM_ADDRESS", tls_gateway)
    monkeypatch.setenv("ENGRAM_CA", str(pki.ca_file))
    assert main(["stats"]) == 0


def test_cert_and_key_reach_a_gateway_that_requires_them(
    mtls_gateway: str, pki: Pki, capsys: pytest.CaptureFixture[str]
) -> None:
    tls = ["--addr", mtls_gateway, "--ca", str(pki.ca_file)]
    assert main([*tls, "stats"]) == 1
    assert "UNAVAILABLE" in capsys.readouterr().err
    assert main([*tls, "--cert", str(pki.cert), "--key", str(pki.key), "stats"]) == 0


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--cert", "agent.crt"], "--cert and --key go together"),
        (["--ca", "/no/such/ca.pem"], "--ca: cannot read /no/such/ca.pem"),
        (["--key", "agent.key"], "--cert and --key go together"),
    ],
)
def test_a_bad_tls_flag_is_a_usage_error_naming_it(
    flags: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as done:
        main([*flags, "stats"])
    assert done.value.code == 2
    assert named in capsys.readouterr().err
