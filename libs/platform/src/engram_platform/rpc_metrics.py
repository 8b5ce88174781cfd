"""RPC duration histograms after the OpenTelemetry RPC conventions: ``rpc.server.duration``
and ``rpc.client.duration`` in milliseconds, by service, method and status code."""

from __future__ import annotations

import time
from typing import Literal

import grpc
from opentelemetry import metrics

# Internal calls take well under a millisecond to tens of seconds (a rebuild page).
BUCKETS_MS = (0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000)
_VERB = {"server": "serves", "client": "makes"}


def duration_histogram(side: Literal["server", "client"]) -> metrics.Histogram:
    """Instruments of the global meter provider: recorded nowhere until one is installed
    (`engram_platform.metrics.configure_metrics`), then by it."""
    return metrics.get_meter("engram_platform.grpc").create_histogram(
        f"rpc.{side}.duration",
        unit="ms",
        description=f"Duration of the RPCs this process {_VERB[side]}.",
        explicit_bucket_boundaries_advisory=BUCKETS_MS,
    )


def rpc_attributes(full_method: str | bytes, code: grpc.StatusCode) -> dict[str, str | int]:
    """``/engram.vector.v1.VectorService/Search`` and its status as the convention's
    attributes. Only registered or generated method names reach here: bounded values."""
    if isinstance(full_method, bytes):
        full_method = full_method.decode()
    service, _, method = full_method.lstrip("/").rpartition("/")
    return {
        "rpc.system": "grpc",
        "rpc.service": service,
        "rpc.method": method,
        "rpc.grpc.status_code": code.value[0],
    }


def elapsed_ms(started: float) -> float:
    """Milliseconds since ``started``, a `time.perf_counter` reading."""
    return (time.perf_counter() - started) * 1000.0
