"""The gateway's logic over ports: no gRPC, no generated code."""

from __future__ import annotations

from dataclasses import dataclass

from engram_gateway.service.access import AccessRecorder
from engram_gateway.service.deadline import Budget, Deadline
from engram_gateway.service.reads import (
    ReadConfig,
    Reader,
    RecallMode,
    RecallRequest,
    RelatedItem,
    Stats,
)
from engram_gateway.service.writes import StoreItem, StoreOutcome, WriteConfig, Writer


@dataclass(frozen=True, slots=True)
class Gateway:
    writer: Writer
    reader: Reader
    access: AccessRecorder


__all__ = [
    "Budget",
    "Deadline",
    "Gateway",
    "ReadConfig",
    "Reader",
    "RecallMode",
    "RecallRequest",
    "RelatedItem",
    "Stats",
    "StoreItem",
    "StoreOutcome",
    "WriteConfig",
    "Writer",
]
