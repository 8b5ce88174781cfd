"""The TLS flags of the command lines (`engram`, the health probe): one spelling for both."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import grpc

from engram_platform.tls import channel_credentials

_NAMES = {"ca_file": "--ca", "cert_file": "--cert", "key_file": "--key"}


def _env_path(name: str) -> Path | None:
    value = os.environ.get(name, "")
    return Path(value) if value else None


def add_tls_flags(parser: argparse.ArgumentParser) -> None:
    t = parser.add_argument_group("TLS", "--ca, --cert and --key imply --tls")
    t.add_argument(
        "--tls", action="store_true", help="speak TLS; without --ca, trust the system's CAs"
    )
    t.add_argument(
        "--ca",
        type=Path,
        default=_env_path("ENGRAM_CA"),
        metavar="FILE",
        help="PEM CA bundle the server's certificate chains to ($ENGRAM_CA)",
    )
    t.add_argument(
        "--cert",
        type=Path,
        default=_env_path("ENGRAM_CERT"),
        metavar="FILE",
        help="PEM client certificate, for a server that requires one ($ENGRAM_CERT)",
    )
    t.add_argument(
        "--key",
        type=Path,
        default=_env_path("ENGRAM_KEY"),
        metavar="FILE",
        help="PEM private key of --cert ($ENGRAM_KEY)",
    )
    t.add_argument(
        "--server-name",
        default="",
        help="name the server's certificate is checked against, if not the host",
    )


def flag_credentials(args: argparse.Namespace) -> grpc.ChannelCredentials | None:
    """The TLS credentials the flags ask for; None: plaintext. A ValueError names the flag."""
    if (args.cert is None) != (args.key is None):
        raise ValueError("--cert and --key go together")
    if not (args.tls or args.ca or args.cert):
        return None
    return channel_credentials(args.ca, args.cert, args.key, _NAMES)


def flag_options(args: argparse.Namespace) -> list[tuple[str, str]]:
    return [("grpc.ssl_target_name_override", args.server_name)] if args.server_name else []
