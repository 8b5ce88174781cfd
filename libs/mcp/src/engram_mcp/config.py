"""Where the gateway is and who the server is to it: read from the environment only, so the
model driving the tools can never pick another tenant or token."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

DEFAULT_ADDRESS = "127.0.0.1:50051"
DEFAULT_TIMEOUT_S = 30.0


class ConfigError(ValueError):
    """A setting in the environment is wrong; the message names the variable."""


@dataclass(frozen=True)
class TlsFiles:
    ca: bytes | None
    cert: bytes | None
    key: bytes | None


@dataclass(frozen=True)
class Config:
    address: str
    token: str
    tls: TlsFiles | None  # None: plaintext
    timeout_s: float


def _read(env: Mapping[str, str], name: str) -> bytes | None:
    path = env.get(name, "")
    if not path:
        return None
    try:
        return Path(path).read_bytes()
    except OSError as err:
        raise ConfigError(f"{name}: cannot read {path}: {err.strerror}") from err


def _tls(env: Mapping[str, str]) -> TlsFiles | None:
    wanted = env.get("ENGRAM_TLS", "").lower() in {"1", "true", "yes"}
    ca, cert, key = _read(env, "ENGRAM_CA"), _read(env, "ENGRAM_CERT"), _read(env, "ENGRAM_KEY")
    if (cert is None) != (key is None):
        raise ConfigError("ENGRAM_CERT and ENGRAM_KEY: set both for mTLS, or neither")
    if not wanted and ca is None and cert is None:
        return None
    return TlsFiles(ca, cert, key)


def from_env(env: Mapping[str, str] | None = None) -> Config:
    """ENGRAM_ADDRESS (or ENGRAM_ADDR), ENGRAM_TOKEN, ENGRAM_TIMEOUT (seconds) and TLS:
    ENGRAM_TLS=1 for the system roots, ENGRAM_CA for a CA file, ENGRAM_CERT + ENGRAM_KEY for a
    client certificate (any of them turns TLS on)."""
    env = os.environ if env is None else env
    address = env.get("ENGRAM_ADDRESS") or env.get("ENGRAM_ADDR") or DEFAULT_ADDRESS
    raw_timeout = env.get("ENGRAM_TIMEOUT", "")
    try:
        timeout = float(raw_timeout) if raw_timeout else DEFAULT_TIMEOUT_S
    except ValueError as err:
        raise ConfigError(f"ENGRAM_TIMEOUT: not a number of seconds: {raw_timeout!r}") from err
    if timeout <= 0:
        raise ConfigError("ENGRAM_TIMEOUT: must be > 0")
    return Config(address, env.get("ENGRAM_TOKEN", ""), _tls(env), timeout)
