"""Ask a server's standard gRPC health service how it is.

``python -m engram_platform.health ADDRESS [SERVICE]`` exits 0 when the answer is SERVING
and 1 otherwise, saying what it got: what the Helm chart's `helm test` runs against the
gateway, and a probe for anything that has no gRPC probe of its own. ``make run`` waits on
`status` for each service it starts.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from engram_platform.tls_flags import add_tls_flags, flag_credentials, flag_options

SERVING = "SERVING"


def status(
    address: str,
    service: str = "",
    timeout_s: float = 5.0,
    credentials: grpc.ChannelCredentials | None = None,
    options: list[tuple[str, str]] | None = None,
) -> str:
    """The status ``address`` gives ``service`` ("" is the server as a whole): SERVING or
    NOT_SERVING, else the call's error code (NOT_FOUND: the server does not serve that
    name; UNAVAILABLE: nothing answers there, or not in the TLS asked for;
    DEADLINE_EXCEEDED: too slow). TLS with ``credentials``."""
    if credentials is None:
        opened = grpc.insecure_channel(address, options)
    else:
        opened = grpc.secure_channel(address, credentials, options)
    with opened as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout_s)
        except grpc.RpcError as err:
            code = err.code() if isinstance(err, grpc.Call) else None
            return code.name if code is not None else "UNAVAILABLE"
    return str(health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Check a server's gRPC health service.")
    parser.add_argument("address", help="host:port")
    parser.add_argument("service", nargs="?", default="", help='service name ("": the server)')
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds to wait")
    add_tls_flags(parser)
    args = parser.parse_args(argv)
    try:
        credentials = flag_credentials(args)
    except ValueError as err:
        parser.error(str(err))
    got = status(args.address, args.service, args.timeout, credentials, flag_options(args))
    print(f"{args.address} {args.service or '(server)'}: {got}")
    return 0 if got == SERVING else 1


if __name__ == "__main__":
    sys.exit(main())
