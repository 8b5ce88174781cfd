"""Where and how to connect: arguments first, then ENGRAM_* environment, then the dev stack."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from engram_client.retry import RetryPolicy

# `make run` (engram_testing.devstack): the gateway's port and its token for tenant
# "default" (read+write+admin). A server that is not the dev stack refuses this token
# (UNAUTHENTICATED), so defaulting to it only ever helps a local try-out.
DEFAULT_ADDRESS = "127.0.0.1:50051"
DEV_TOKEN = "dev-token"
DEFAULT_TIMEOUT_S = 30.0
_TRUE = {"1", "true", "yes", "on"}


@dataclass(frozen=True)
class Config:
    address: str = DEFAULT_ADDRESS
    token: str = DEV_TOKEN
    tls: bool = False  # with no ca: the system's root certificates
    ca: str | None = None  # PEM file of the roots to trust
    cert: str | None = None  # client certificate (PEM) for mTLS, with key
    key: str | None = None
    server_name: str | None = None  # what the server's certificate names, if not the host
    timeout_s: float = DEFAULT_TIMEOUT_S  # per call, retries included
    retry: RetryPolicy = field(default_factory=RetryPolicy)

    @classmethod
    def resolve(
        cls,
        address: str | None = None,
        token: str | None = None,
        *,
        tls: bool | None = None,
        ca: str | None = None,
        cert: str | None = None,
        key: str | None = None,
        server_name: str | None = None,
        timeout_s: float | None = None,
        retry: RetryPolicy | None = None,
        env: Mapping[str, str] | None = None,
    ) -> Config:
        """Each setting from its argument, else ENGRAM_ADDRESS (or ENGRAM_ADDR), ENGRAM_TOKEN,
        ENGRAM_TLS, ENGRAM_CA, ENGRAM_CERT, ENGRAM_KEY, ENGRAM_SERVER_NAME, ENGRAM_TIMEOUT,
        else the default."""
        env = os.environ if env is None else env
        ca = ca or env.get("ENGRAM_CA") or None
        cert = cert or env.get("ENGRAM_CERT") or None
        key = key or env.get("ENGRAM_KEY") or None
        if (cert is None) != (key is None):
            raise ValueError("mTLS needs both a client certificate (cert) and its key")
        if tls is None:
            tls = env.get("ENGRAM_TLS", "").lower() in _TRUE or bool(ca or cert)
        timeout = timeout_s if timeout_s is not None else float(env.get("ENGRAM_TIMEOUT") or 0)
        return cls(
            address=address
            or env.get("ENGRAM_ADDRESS")
            or env.get("ENGRAM_ADDR")
            or DEFAULT_ADDRESS,
            token=token or env.get("ENGRAM_TOKEN") or DEV_TOKEN,
            tls=tls,
            ca=ca,
            cert=cert,
            key=key,
            server_name=server_name or env.get("ENGRAM_SERVER_NAME") or None,
            timeout_s=timeout or DEFAULT_TIMEOUT_S,
            retry=retry or RetryPolicy(),
        )

    def credentials(self) -> grpc.ChannelCredentials | None:
        """TLS credentials, or None for plaintext."""
        if not self.tls:
            return None
        return grpc.ssl_channel_credentials(
            root_certificates=_read(self.ca),
            private_key=_read(self.key),
            certificate_chain=_read(self.cert),
        )

    @property
    def options(self) -> list[tuple[str, str]]:
        """Channel options: the name the server's certificate is checked against."""
        if self.tls and self.server_name:
            return [("grpc.ssl_target_name_override", self.server_name)]
        return []

    @property
    def metadata(self) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {self.token}"),)


def _read(path: str | None) -> bytes | None:
    return Path(path).read_bytes() if path else None
