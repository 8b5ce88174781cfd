"""Ingest logic over ports: decoded events in, per-event outcomes out. No NATS, no gRPC."""

from engram_ingest.service.applier import Applier, Timeouts, invalid
from engram_ingest.service.events import (
    Event,
    MemoryRemoved,
    MemoryWritten,
    Outcome,
    RelationLinked,
    RelationUnlinked,
    Result,
)
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
    "TextWriter",
    "Timeouts",
    "VectorWriter",
    "invalid",
]
