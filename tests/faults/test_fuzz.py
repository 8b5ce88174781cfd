"""Fuzzed requests over every public RPC (MemoryService and AdminService): mutated valid
requests and raw byte damage, sent through a generic channel. Input is never answered
INTERNAL or UNKNOWN, and the stack still applies writes afterwards."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import AsyncIterator, Callable

import grpc
import pytest
from google.protobuf import struct_pb2
from google.protobuf.message import Message

from engram.common.v1 import common_pb2
from engram.gateway.v1 import admin_pb2, gateway_pb2, gateway_pb2_grpc
from engram_testing.devstack import DevStack
from engram_testing.faults import AUTH_A, Figures, read_back_s, store_one
from engram_testing.fuzz import Mutator

pytestmark = [pytest.mark.faults, pytest.mark.timeout(400)]

REQUESTS = 10_000
CONCURRENCY = 16
SEED = 30
CALL_TIMEOUT_S = 5.0


def _seeds(ids: list[str]) -> dict[str, Callable[[], Message]]:
    """Each public RPC's full method name -> a valid request for it."""
    meta = struct_pb2.Struct()
    meta.update({"project": "atlas", "score": 1.5, "nested": {"a": [1, "b"]}})
    memory = common_pb2.MemoryInput(
        content="Sarah prefers Postgres", tags=["project:atlas"], importance=0.5, metadata=meta
    )
    a, b = ids[0], ids[1]
    mem = "/engram.gateway.v1.MemoryService/"
    adm = "/engram.gateway.v1.AdminService/"
    return {
        mem + "Store": lambda: gateway_pb2.StoreRequest(memory=memory, idempotency_key="k"),
        mem + "StoreBatch": lambda: gateway_pb2.StoreBatchRequest(memories=[memory, memory]),
        mem + "StoreStream": lambda: gateway_pb2.StoreRequest(memory=memory),
        mem + "Recall": lambda: gateway_pb2.RecallRequest(
            query="what does Sarah prefer?", limit=5, time_query="last 7 days", timezone="UTC"
        ),
        mem + "Get": lambda: gateway_pb2.GetRequest(id=a),
        mem + "Update": lambda: gateway_pb2.UpdateRequest(id=a, memory=memory),
        mem + "Delete": lambda: gateway_pb2.DeleteRequest(id=b),
        mem + "Associate": lambda: gateway_pb2.AssociateRequest(
            source_id=a, target_id=b, type="RELATES_TO", strength=0.5, properties=meta
        ),
        mem + "Related": lambda: gateway_pb2.RelatedRequest(id=a, depth=1, limit=5),
        mem + "Stats": lambda: gateway_pb2.StatsRequest(),
        adm + "Consolidate": lambda: admin_pb2.ConsolidateRequest(
            mode=admin_pb2.CONSOLIDATION_MODE_DECAY, dry_run=True
        ),
        adm + "ConsolidationStatus": lambda: admin_pb2.ConsolidationStatusRequest(),
        adm + "Sync": lambda: admin_pb2.SyncRequest(dry_run=True),
        adm + "Rebuild": lambda: admin_pb2.RebuildRequest(store=admin_pb2.STORE_LEXICAL),
        adm + "RebuildStatus": lambda: admin_pb2.RebuildStatusRequest(),
    }


async def _send(
    channel: grpc.aio.Channel, method: str, payload: bytes
) -> tuple[grpc.StatusCode, str]:
    try:
        if method.endswith("/StoreStream"):
            call: grpc.aio.StreamUnaryMultiCallable[bytes, bytes] = channel.stream_unary(method)

            async def items() -> AsyncIterator[bytes]:
                for _ in range(2):
                    yield payload

            await call(items(), metadata=AUTH_A, timeout=CALL_TIMEOUT_S)
        else:
            unary: grpc.aio.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(method)
            await unary(payload, metadata=AUTH_A, timeout=CALL_TIMEOUT_S)
    except grpc.aio.AioRpcError as err:
        return err.code(), err.details() or ""
    return grpc.StatusCode.OK, ""


async def _fuzz(
    channel: grpc.aio.Channel, seeds: dict[str, Callable[[], Message]], mutator: Mutator
) -> tuple[Counter[str], list[str]]:
    rng = random.Random(SEED)
    codes: Counter[str] = Counter()
    internal: list[str] = []
    queue: asyncio.Queue[tuple[str, bytes, str]] = asyncio.Queue()
    methods = sorted(seeds)
    for _ in range(REQUESTS):
        method = rng.choice(methods)
        request = mutator.mutate(seeds[method]())
        try:
            payload = request.SerializeToString()
        except Exception:  # a mutation the client library cannot encode: damage the seed
            payload = seeds[method]().SerializeToString()
        raw = rng.random() < 0.3
        if raw:
            payload = mutator.damage(payload)
        queue.put_nowait((method, payload, f"{'raw ' if raw else ''}{request}"[:300]))

    async def worker() -> None:
        while not queue.empty():
            method, payload, shown = queue.get_nowait()
            code, details = await _send(channel, method, payload)
            codes[code.name] += 1
            if code in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN):
                rpc = method.rsplit("/", 1)[1]
                internal.append(f"{rpc} {code.name}: [{details[:100]}] {shown!r}")

    await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    return codes, internal


async def test_fuzzed_requests_are_never_internal(fault_stack: DevStack, figures: Figures) -> None:
    async with grpc.aio.insecure_channel(fault_stack.gateway_address) as channel:
        gateway = gateway_pb2_grpc.MemoryServiceStub(channel)
        ids = [(await store_one(gateway, AUTH_A, f"fuzz seed {i}"))[0] for i in range(4)]
        codes, internal = await _fuzz(channel, _seeds(ids), Mutator(SEED, ids))
        memory_id, seq = await store_one(gateway, AUTH_A, "written after the fuzz")
        after_s = await read_back_s(gateway, AUTH_A, memory_id, seq, 60.0)
    raw = sum(1 for line in internal if "] 'raw " in line)
    figures.record(
        "fuzz",
        requests=sum(codes.values()),
        internal=len(internal),
        internal_from_damaged_bytes=raw,
        internal_from_mutated_fields=len(internal) - raw,
        wedged=int(after_s is None),
        **{f"code_{k.lower()}": v for k, v in sorted(codes.items())},
    )
    by_rpc = Counter(line.split(":", 1)[0] for line in internal)
    print("INTERNAL/UNKNOWN by rpc:", dict(by_rpc.most_common()))
    by_cause = Counter(line.split("] ", 1)[0] + "]" for line in internal)
    for cause, n in by_cause.most_common(40):
        print(f"{n:5d} {cause}")
    assert not internal, f"{len(internal)} INTERNAL/UNKNOWN answers, e.g. {internal[:5]}"
    assert after_s is not None, "the stack no longer applies writes after the fuzz"
