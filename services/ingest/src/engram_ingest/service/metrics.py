"""Ingest's own instruments (the README's "Metrics" table); batch sizes, settlements and
consumer lag are the pull worker's (``engram_platform.worker_metrics``).

On the API's global meter: no-ops until the process installs a MeterProvider.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable
from typing import TypeVar

from opentelemetry import metrics

T = TypeVar("T")

_meter = metrics.get_meter("engram.ingest")

apply_duration = _meter.create_histogram(
    "engram.ingest.apply.duration",
    unit="ms",
    description="Time of one store write of a batch (store: vector, lexical, graph, "
    "embedding; op: upsert, delete, add_relations, remove_relations, embed).",
)


async def timed(store: str, op: str, call: Awaitable[T]) -> T:
    """``call``'s answer, its time recorded whether it answered, failed or was cut off."""
    started = time.perf_counter()
    try:
        return await call
    finally:
        elapsed_ms = (time.perf_counter() - started) * 1000.0
        apply_duration.record(elapsed_ms, {"store": store, "op": op})
