"""The fault suite's stack and probes: the embedded stack with the hashing embedder (the
suite tests the log and the stores, not the model), two tenants, per-store scans and the
read-your-writes probe."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeAlias

import grpc

from engram.common.v1 import common_pb2
from engram.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from engram.graph.v1 import graph_pb2, graph_pb2_grpc
from engram.lexical.v1 import lexical_pb2, lexical_pb2_grpc
from engram.vector.v1 import vector_pb2, vector_pb2_grpc
from engram_testing.devstack import DEV_TOKEN, DevStack, start_stack

Stub: TypeAlias = "gateway_pb2_grpc.MemoryServiceAsyncStub"
Metadata: TypeAlias = tuple[tuple[str, str], ...]

STORES = ("vector", "lexical", "graph")
TENANT_A = "default"
TENANT_B = "tenant-b"
TOKEN_B = "token-b"


def auth(token: str) -> Metadata:
    return (("authorization", f"Bearer {token}"),)


AUTH_A = auth(DEV_TOKEN)
AUTH_B = auth(TOKEN_B)


def fault_env() -> dict[str, str]:
    """Hashing embedder everywhere, and a second tenant."""
    env = {
        f"ENGRAM_{svc}_EMBED__PROVIDER": "hashing" for svc in ("VECTOR", "INGEST", "CONSOLIDATE")
    }
    env["ENGRAM_GATEWAY_TOKENS"] = (
        f"{DEV_TOKEN}={TENANT_A}:read+write+admin;{TOKEN_B}={TENANT_B}:read+write+admin"
    )
    return env


def start_fault_stack(home: Path, extra_env: Mapping[str, str] | None = None) -> DevStack:
    return start_stack(home, gateway_port=0, extra_env={**fault_env(), **(extra_env or {})})


def is_code(err: BaseException, *codes: grpc.StatusCode) -> bool:
    return isinstance(err, grpc.aio.AioRpcError) and err.code() in codes


async def scan_store(stack: DevStack, store: str, tenant: str) -> list[common_pb2.Memory]:
    """Every memory of ``tenant`` in ``store``, read page by page from its internal Scan."""
    modules = {
        "vector": (vector_pb2, vector_pb2_grpc.VectorServiceStub),
        "lexical": (lexical_pb2, lexical_pb2_grpc.LexicalServiceStub),
        "graph": (graph_pb2, graph_pb2_grpc.GraphServiceStub),
    }
    pb2, stub_cls = modules[store]
    out: list[common_pb2.Memory] = []
    async with grpc.aio.insecure_channel(f"127.0.0.1:{stack.ports[store]}") as channel:
        stub = stub_cls(channel)
        cursor = ""
        while True:
            page = await stub.Scan(
                pb2.ScanRequest(tenant=tenant, cursor=cursor, limit=1000), timeout=30
            )
            out.extend(page.memories)
            cursor = page.next_cursor
            if not cursor:
                return out


@dataclass(frozen=True)
class StoreCount:
    """Of the acknowledged contents: how many one store holds, and how many it holds twice."""

    store: str
    found: int
    duplicates: int


async def count_in_stores(
    stack: DevStack, tenant: str, contents: set[str]
) -> dict[str, StoreCount]:
    counts: dict[str, StoreCount] = {}
    for store in STORES:
        seen = Counter(m.content for m in await scan_store(stack, store, tenant))
        found = sum(1 for c in contents if seen[c] >= 1)
        dup = sum(n - 1 for c, n in seen.items() if n > 1)
        counts[store] = StoreCount(store, found, dup)
    return counts


async def settle_counts(
    stack: DevStack, tenant: str, contents: set[str], timeout_s: float
) -> dict[str, StoreCount]:
    """Poll the stores until each holds every content or ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    while True:
        counts = await count_in_stores(stack, tenant, contents)
        if all(c.found == len(contents) for c in counts.values()):
            return counts
        if time.monotonic() > deadline:
            return counts
        await asyncio.sleep(1.0)


async def read_back_s(
    gateway: Stub, meta: Metadata, memory_id: str, sequence: int, bound_s: float
) -> float | None:
    """Seconds from now until a Recall with ``min_sequence`` answers and finds ``memory_id``
    by Get; None when that does not happen within ``bound_s``."""
    started = time.monotonic()
    while (left := bound_s - (time.monotonic() - started)) > 0:
        try:
            await gateway.Recall(
                gateway_pb2.RecallRequest(query="probe", limit=1, min_sequence=sequence),
                metadata=meta,
                timeout=min(left, 5.0),
            )
            await gateway.Get(gateway_pb2.GetRequest(id=memory_id), metadata=meta, timeout=5)
            return time.monotonic() - started
        except grpc.aio.AioRpcError:
            await asyncio.sleep(0.1)
    return None


async def store_one(
    gateway: Stub, meta: Metadata, content: str, **fields: object
) -> tuple[str, int]:
    reply = await gateway.Store(
        gateway_pb2.StoreRequest(memory=common_pb2.MemoryInput(content=content, **fields)),  # type: ignore[arg-type]
        metadata=meta,
        timeout=10,
    )
    return reply.id, reply.sequence


# Figures that must be zero: a non-zero total fails the run.
ZERO = ("lost", "duplicates", "internal", "leaks", "wedged")


@dataclass
class Figures:
    lines: list[str] = field(default_factory=list)
    totals: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ZERO, 0))
    answered: int = 0
    asked: int = 0
    max_ryw_stall_s: float = 0.0
    scenarios: int = 0

    def record(self, scenario: str, **figures: float) -> None:
        """One scenario's figures: the ZERO counts, ``answered``/``asked`` (degraded
        recalls), ``ryw_stall_s``; anything else is printed only."""
        self.scenarios += 1
        for name in ZERO:
            self.totals[name] += int(figures.get(name, 0))
        self.answered += int(figures.get("answered", 0))
        self.asked += int(figures.get("asked", 0))
        self.max_ryw_stall_s = max(self.max_ryw_stall_s, float(figures.get("ryw_stall_s", 0)))
        shown = " ".join(f"{k}={_fmt(v)}" for k, v in figures.items())
        self.lines.append(f"fault {scenario}: {shown}")

    def summary(self) -> str:
        ratio = f"{self.answered / self.asked:.3f}" if self.asked else "n/a"
        zeros = " ".join(f"{k}={v}" for k, v in self.totals.items())
        return (
            f"faults {zeros} degraded_answered={ratio} "
            f"max_ryw_stall_s={self.max_ryw_stall_s:.1f} scenarios={self.scenarios}"
        )


def _fmt(value: float) -> str:
    return f"{value:.3f}" if isinstance(value, float) else str(value)
