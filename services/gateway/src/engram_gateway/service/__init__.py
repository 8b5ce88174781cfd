"""The gateway's logic over ports: no gRPC, no generated code."""

from __future__ import annotations

from dataclasses import dataclass, field

from engram_gateway.service.access import AccessRecorder
from engram_gateway.service.admin import Admin
from engram_gateway.service.dead_letters import DeadLetters
from engram_gateway.service.deadline import Budget, Deadline
from engram_gateway.service.feed import FeedConfig, FeedQuery, Subscriptions
from engram_gateway.service.listing import Lister, ListPage, ListRequest
from engram_gateway.service.rate_limit import RateLimitConfig, TenantRateLimit
from engram_gateway.service.reads import (
    ReadConfig,
    Reader,
    RecallMode,
    RecallRequest,
    RelatedItem,
    Stats,
)
from engram_gateway.service.stats import StatsView
from engram_gateway.service.tenants import TenantEraser
from engram_gateway.service.writes import (
    ItemResult,
    StoreItem,
    StoreOutcome,
    WriteConfig,
    Writer,
    batch_items,
)


@dataclass(frozen=True, slots=True)
class Gateway:
    writer: Writer
    reader: Reader
    access: AccessRecorder
    rate_limit: TenantRateLimit = field(default_factory=TenantRateLimit.off)
    write_rate: TenantRateLimit = field(default_factory=TenantRateLimit.off)  # per memory
    admin: Admin | None = None  # AdminService; None: not served
    stats: StatsView | None = None  # None: the reader's counts, no log positions
    dead_letters: DeadLetters | None = None  # AdminService's; None: UNAVAILABLE
    lister: Lister | None = None  # List; None: UNAVAILABLE
    feed: Subscriptions | None = None  # Subscribe; None: UNAVAILABLE
    tenants: TenantEraser | None = None  # AdminService.DeleteTenant; None: UNAVAILABLE


__all__ = [
    "Admin",
    "Budget",
    "DeadLetters",
    "Deadline",
    "FeedConfig",
    "FeedQuery",
    "Gateway",
    "ItemResult",
    "ListPage",
    "ListRequest",
    "Lister",
    "RateLimitConfig",
    "ReadConfig",
    "Reader",
    "RecallMode",
    "RecallRequest",
    "RelatedItem",
    "Stats",
    "StatsView",
    "StoreItem",
    "StoreOutcome",
    "Subscriptions",
    "TenantEraser",
    "TenantRateLimit",
    "WriteConfig",
    "Writer",
    "batch_items",
]
