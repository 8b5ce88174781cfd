"""TLS with a CA file, and mTLS with a client certificate (trustme certificates)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import grpc
import pytest
import trustme

from engram_client import Engram, RetryPolicy, Unavailable


@pytest.fixture
def ca() -> trustme.CA:
    return trustme.CA()


def _server_creds(ca: trustme.CA, require_client: bool) -> grpc.ServerCredentials:
    cert = ca.issue_cert("127.0.0.1", "localhost")
    return grpc.ssl_server_credentials(
        [(cert.private_key_pem.bytes(), cert.cert_chain_pems[0].bytes())],
        root_certificates=ca.cert_pem.bytes() if require_client else None,
        require_client_auth=require_client,
    )


def test_tls_with_a_ca_file(ca: trustme.CA, serve_fake: Any, tmp_path: Path) -> None:
    script, port = serve_fake(_server_creds(ca, require_client=False))
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    with Engram(f"localhost:{port}", ca=str(ca_file)) as engram:
        engram.store("over tls")
    assert len(script.of("Store")) == 1


def test_mtls_needs_the_client_certificate(ca: trustme.CA, serve_fake: Any, tmp_path: Path) -> None:
    script, port = serve_fake(_server_creds(ca, require_client=True))
    ca_file, cert_file, key_file = tmp_path / "ca.pem", tmp_path / "c.pem", tmp_path / "k.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    client = ca.issue_cert("agent@example.com")
    client.cert_chain_pems[0].write_to_path(str(cert_file))
    client.private_key_pem.write_to_path(str(key_file))
    once = RetryPolicy(attempts=1)
    with (
        Engram(f"localhost:{port}", ca=str(ca_file), retry=once, timeout=5) as bare,
        pytest.raises(Unavailable),
    ):
        bare.store("refused without a client certificate")
    with Engram(
        f"localhost:{port}", ca=str(ca_file), cert=str(cert_file), key=str(key_file)
    ) as engram:
        engram.store("over mtls")
    assert len(script.of("Store")) == 1


def test_server_name_checks_the_certificate_against_another_name(
    ca: trustme.CA, serve_fake: Any, tmp_path: Path
) -> None:
    cert = ca.issue_cert("gateway.internal")  # not the address dialled
    creds = grpc.ssl_server_credentials(
        [(cert.private_key_pem.bytes(), cert.cert_chain_pems[0].bytes())]
    )
    script, port = serve_fake(creds)
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    once = RetryPolicy(attempts=1)
    with (
        Engram(f"127.0.0.1:{port}", ca=str(ca_file), retry=once, timeout=5) as plain,
        pytest.raises(Unavailable),
    ):
        plain.store("refused: the certificate names another host")
    with Engram(f"127.0.0.1:{port}", ca=str(ca_file), server_name="gateway.internal") as named:
        named.store("accepted")
    assert len(script.of("Store")) == 1
