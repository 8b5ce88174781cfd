"""Who the server is to the gateway: the SDK's settings, read from the environment only, so
the model driving the tools can never pick another tenant or token. Checked at startup, so a
wrong setting stops the server naming its variable instead of failing the first tool call."""

from __future__ import annotations

import os
from collections.abc import Mapping

from engram_client import Config

_FILES = ("ENGRAM_CA", "ENGRAM_CERT", "ENGRAM_KEY")


class ConfigError(ValueError):
    """A setting in the environment is wrong; the message names the variable."""


def _timeout(env: Mapping[str, str]) -> float | None:
    raw = env.get("ENGRAM_TIMEOUT", "")
    if not raw:
        return None
    try:
        seconds = float(raw)
    except ValueError as err:
        raise ConfigError(f"ENGRAM_TIMEOUT: not a number of seconds: {raw!r}") from err
    if seconds <= 0:
        raise ConfigError("ENGRAM_TIMEOUT: must be > 0")
    return seconds


def _check_files(env: Mapping[str, str]) -> None:
    for name in _FILES:
        path = env.get(name, "")
        if path and not os.access(path, os.R_OK):
            raise ConfigError(f"{name}: cannot read {path}")
    if bool(env.get("ENGRAM_CERT")) != bool(env.get("ENGRAM_KEY")):
        raise ConfigError("ENGRAM_CERT and ENGRAM_KEY: set both for mTLS, or neither")


def from_env(env: Mapping[str, str] | None = None) -> Config:
    """The SDK's Config from ENGRAM_ADDRESS, ENGRAM_TOKEN, ENGRAM_TIMEOUT and the TLS
    variables (ENGRAM_TLS, ENGRAM_CA, ENGRAM_CERT + ENGRAM_KEY), each checked."""
    env = os.environ if env is None else env
    timeout = _timeout(env)
    _check_files(env)
    return Config.resolve(timeout_s=timeout, env=env)
