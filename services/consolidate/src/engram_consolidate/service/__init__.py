"""Consolidation logic over ports: access tracking, and the scheduled passes (decay,
associate, cluster, forget) with their runner and scheduler. No NATS, no gRPC."""

from engram_consolidate.service.access import AccessStats, AccessTracker
from engram_consolidate.service.events import Accessed, Outcome, Result
from engram_consolidate.service.passes import PassSettings, Stores, pass_factory
from engram_consolidate.service.ports import (
    AccessStore,
    AccessWriter,
    Checkpoints,
    EventSink,
    FenceLost,
    GraphStore,
    RelevanceWriter,
    TenantSource,
    VectorStore,
)
from engram_consolidate.service.records import (
    GLOBAL,
    PASS_ORDER,
    REBUILDS,
    Change,
    Key,
    PassName,
    RunRecord,
    RunState,
    Trigger,
)
from engram_consolidate.service.runner import PassRunner, RunnerConfig
from engram_consolidate.service.scheduler import Request, Schedule, Scheduler, pass_names

__all__ = [
    "GLOBAL",
    "PASS_ORDER",
    "REBUILDS",
    "AccessStats",
    "AccessStore",
    "AccessTracker",
    "AccessWriter",
    "Accessed",
    "Change",
    "Checkpoints",
    "EventSink",
    "FenceLost",
    "GraphStore",
    "Key",
    "Outcome",
    "PassName",
    "PassRunner",
    "PassSettings",
    "RelevanceWriter",
    "Request",
    "Result",
    "RunRecord",
    "RunState",
    "RunnerConfig",
    "Schedule",
    "Scheduler",
    "Stores",
    "TenantSource",
    "Trigger",
    "VectorStore",
    "pass_factory",
    "pass_names",
]
