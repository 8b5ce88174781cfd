"""Ingest logic over ports: decoded events in, per-event outcomes out. No NATS, no gRPC."""

from engram_core.log_events import (
    Event,
    MemoryRemoved,
    MemoryWritten,
    RelationLinked,
    RelationUnlinked,
    TenantErased,
    invalid,
)
from engram_core.outcomes import Outcome, Result
from engram_ingest.service.applier import Applier, Timeouts
from engram_ingest.service.ports import GraphWriter, TextWriter, VectorWriter

__all__ = [
    "Applier",
    "Event",
    "GraphWriter",
    "MemoryRemoved",
    "MemoryWritten",
    "Outcome",
    "RelationLinked",
    "RelationUnlinked",
    "Result",
    "TenantErased",
    "TextWriter",
    "Timeouts",
    "VectorWriter",
    "invalid",
]
