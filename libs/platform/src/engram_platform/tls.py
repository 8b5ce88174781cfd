"""TLS credentials of the gRPC servers and channels, from PEM files read again on change.

Every file is checked when read (readable, PEM, the key belongs to the certificate, the CA
bundle parses), so a broken setting stops a start with the setting's name, and a broken
rotation keeps the previous credentials (`reloading.Reloading`) instead of refusing every
new connection.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import grpc

from engram_platform.reloading import Reloading
from engram_platform.settings import ClientTlsSettings, ServerTlsSettings

FILES = ("cert_file", "key_file", "ca_file")


class TlsError(ValueError):
    """A TLS file that cannot be used; the message starts with the setting that names it."""


def labels(where: str) -> dict[str, str]:
    """How errors name the files: ``tls.cert_file`` for ``where="tls"``."""
    return {f: f"{where}.{f}" for f in FILES}


@dataclass(frozen=True, slots=True)
class Pem:
    cert: bytes | None
    key: bytes | None
    ca: bytes | None


def _read(path: Path, label: str) -> bytes:
    try:
        data = path.read_bytes()
    except OSError as err:
        raise TlsError(f"{label}: cannot read {path}: {err.strerror or err}") from err
    if b"-----BEGIN " not in data:
        raise TlsError(f"{label}: {path} holds no PEM block")
    return data


def _no_password() -> bytes:
    # Without a callback OpenSSL would prompt on the terminal for an encrypted key.
    return b""


def read_pem(
    cert_file: Path | None, key_file: Path | None, ca_file: Path | None, names: Mapping[str, str]
) -> Pem:
    """The three files, each checked; only those given are read."""
    cert = key = ca = None
    if ca_file is not None:
        ca = _read(ca_file, names["ca_file"])
        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(
                cadata=ca.decode("utf-8", "replace")
            )
        except (ssl.SSLError, ValueError) as err:
            raise TlsError(f"{names['ca_file']}: {ca_file} holds no CA certificate: {err}") from err
    if cert_file is not None and key_file is not None:
        cert = _read(cert_file, names["cert_file"])
        key = _read(key_file, names["key_file"])
        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(
                cert_file, key_file, password=_no_password
            )
        except ssl.SSLError as err:
            raise TlsError(
                f"{names['key_file']}: {key_file} and {names['cert_file']}: {cert_file} are "
                f"not a certificate and its unencrypted key ({err.reason or err})"
            ) from err
    return Pem(cert, key, ca)


def _paths(*files: Path | None) -> list[Path]:
    return [f for f in files if f is not None]


def server_credentials(tls: ServerTlsSettings, where: str = "tls") -> grpc.ServerCredentials:
    """Credentials whose certificate, key and client CA are read again when the files
    change: gRPC asks before every new connection's handshake, so a rotated certificate
    is what the next connection sees; open connections keep theirs."""
    names = labels(where)

    def load() -> grpc.ServerCertificateConfiguration:
        pem = read_pem(tls.cert_file, tls.key_file, tls.ca_file, names)
        if pem.cert is None or pem.key is None:
            raise TlsError(f"{names['cert_file']} and {names['key_file']} are required")
        return grpc.ssl_server_certificate_configuration([(pem.key, pem.cert)], pem.ca)

    source = Reloading(_paths(tls.cert_file, tls.key_file, tls.ca_file), load)
    served = [source.get()]

    def fetch() -> grpc.ServerCertificateConfiguration | None:
        config = source.get()
        if config is served[0]:
            return None  # unchanged: gRPC keeps what it has
        served[0] = config
        return config

    return grpc.dynamic_ssl_server_credentials(
        served[0],
        fetch,  # type: ignore[arg-type]  # the stubs miss that None means "unchanged"
        require_client_authentication=tls.client_auth == "require",
    )


def channel_credentials(
    ca_file: Path | None,
    cert_file: Path | None,
    key_file: Path | None,
    names: Mapping[str, str],
) -> grpc.ChannelCredentials:
    """TLS credentials of a channel: the server checked against ``ca_file`` (else the
    system's CAs), ``cert_file`` and ``key_file`` presented when given (mTLS)."""
    pem = read_pem(cert_file, key_file, ca_file, names)
    return grpc.ssl_channel_credentials(
        root_certificates=pem.ca, private_key=pem.key, certificate_chain=pem.cert
    )


def reloading_channel_credentials(
    tls: ClientTlsSettings, where: str = "client_tls"
) -> Reloading[grpc.ChannelCredentials]:
    names = labels(where)
    return Reloading(
        _paths(tls.ca_file, tls.cert_file, tls.key_file),
        lambda: channel_credentials(tls.ca_file, tls.cert_file, tls.key_file, names),
        tls.reload_s,
    )
