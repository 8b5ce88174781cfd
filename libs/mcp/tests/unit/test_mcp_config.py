"""The server's gateway settings come from the environment (the SDK's Config), each wrong
one named."""

from __future__ import annotations

from pathlib import Path

import pytest

from engram_client.config import DEFAULT_ADDRESS, DEV_TOKEN
from engram_mcp.config import ConfigError, from_env


def test_defaults_talk_plaintext_to_make_run() -> None:
    config = from_env({})
    assert (config.address, config.token, config.tls) == (DEFAULT_ADDRESS, DEV_TOKEN, False)


def test_timeout_from_the_environment() -> None:
    assert from_env({"ENGRAM_TIMEOUT": "2.5"}).timeout_s == 2.5


def test_address_prefers_engram_address_over_the_cli_name() -> None:
    assert from_env({"ENGRAM_ADDR": "a:1"}).address == "a:1"
    assert from_env({"ENGRAM_ADDRESS": "b:2", "ENGRAM_ADDR": "a:1"}).address == "b:2"


def test_tls_from_system_roots_a_ca_or_a_client_certificate(tmp_path: Path) -> None:
    ca, cert, key = (tmp_path / n for n in ("ca.pem", "cert.pem", "key.pem"))
    for path in (ca, cert, key):
        path.write_bytes(path.name.encode())
    roots = from_env({"ENGRAM_TLS": "1"})
    assert (roots.tls, roots.ca, roots.cert, roots.key) == (True, None, None, None)
    mtls = from_env({"ENGRAM_CA": str(ca), "ENGRAM_CERT": str(cert), "ENGRAM_KEY": str(key)})
    assert (mtls.tls, mtls.ca, mtls.cert, mtls.key) == (True, str(ca), str(cert), str(key))


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"ENGRAM_CERT": "{cert}"}, "ENGRAM_KEY"),
        ({"ENGRAM_CA": "{missing}"}, "ENGRAM_CA"),
        ({"ENGRAM_TIMEOUT": "soon"}, "ENGRAM_TIMEOUT"),
        ({"ENGRAM_TIMEOUT": "0"}, "ENGRAM_TIMEOUT"),
    ],
)
def test_a_wrong_setting_names_its_variable(
    tmp_path: Path, env: dict[str, str], named: str
) -> None:
    cert = tmp_path / "cert.pem"
    cert.write_bytes(b"x")
    paths = {"cert": str(cert), "missing": str(tmp_path / "nope.pem")}
    with pytest.raises(ConfigError, match=named):
        from_env({k: v.format(**paths) for k, v in env.items()})
