"""Engram's Python SDK: ``Engram`` (sync) and ``AsyncEngram`` (asyncio).

from engram_client import Engram
with Engram() as engram:  # ENGRAM_ADDRESS / ENGRAM_TOKEN, else `make run`'s stack
    engram.store("Postgres is the primary database", tags=["db"])
    print(engram.recall("which database?").results[0].content)
"""

from engram_client.aio import AsyncEngram
from engram_client.batching import Progress, StoreManyResult
from engram_client.client import Engram
from engram_client.config import Config
from engram_client.errors import (
    DeadlineExceeded,
    EngramError,
    FailedPrecondition,
    Internal,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    ResourceExhausted,
    Unauthenticated,
    Unavailable,
)
from engram_client.retry import RetryPolicy
from engram_client.types import (
    Batch,
    DeadLetter,
    DeletionStatus,
    Event,
    Hit,
    Memory,
    Page,
    Recalled,
    Related,
    Relation,
    Replayed,
    Run,
    Stats,
    Stored,
    TenantDeletion,
    Written,
)

__all__ = [
    "AsyncEngram",
    "Batch",
    "Config",
    "DeadLetter",
    "DeadlineExceeded",
    "DeletionStatus",
    "Engram",
    "EngramError",
    "Event",
    "FailedPrecondition",
    "Hit",
    "Internal",
    "InvalidArgument",
    "Memory",
    "NotFound",
    "Page",
    "PermissionDenied",
    "Progress",
    "Recalled",
    "Related",
    "Relation",
    "Replayed",
    "ResourceExhausted",
    "RetryPolicy",
    "Run",
    "Stats",
    "StoreManyResult",
    "Stored",
    "TenantDeletion",
    "Unauthenticated",
    "Unavailable",
    "Written",
]
