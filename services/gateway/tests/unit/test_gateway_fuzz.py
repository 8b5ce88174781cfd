"""Seeded fuzzing of every public RPC in-process: random requests built from the descriptors,
valid requests with a few fields made wrong, and byte mutations of encoded ones. No answer may
be INTERNAL or UNKNOWN (bad input is INVALID_ARGUMENT or the like), and the gateway still
stores and recalls afterwards. Deterministic: one seed, a fixed number of calls."""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import grpc
import pytest
from google.protobuf import struct_pb2
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from engram.common.v1 import common_pb2
from engram.gateway.v1 import admin_pb2, gateway_pb2
from engram_gateway import server
from engram_gateway.auth import Authenticator
from engram_gateway.bootstrap import build_admin
from engram_gateway.service.admin import PassRun, PassStatus, RunState

if TYPE_CHECKING:
    from conftest import Harness

SEED = 20_240_530
CALLS_PER_RPC = 160
CONCURRENCY = 16
TOKENS = "rw=acme:read+write;admin=acme:admin;root=*:admin"
RW = (("authorization", "Bearer rw"),)
ADMIN = (("authorization", "Bearer admin"),)
ROOT = (("authorization", "Bearer root"),)  # every tenant's admin: `tenant` fields are read
FORBIDDEN = {grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN}
UUIDS = ["0190f3a4-7b1c-7d2e-8f00-123456789abc", "0190f3a4-7b1c-7d2e-8f00-0000000000ff"]
NOW = datetime(2026, 6, 1, tzinfo=UTC)

# Values that reach deeper than random text: valid ones and the edges of each kind.
STRINGS = [
    "",
    " ",
    *UUIDS,
    "Memory",
    "Decision",
    "RELATES_TO",
    "PART_OF",
    "a:b",
    "today",
    "last 7 days",
    "between 0001-01-01 and 9999-12-31",
    "0001-01-01T00:00:00+05:00",
    "9999-12-31T23:59:59-05:00",
    "9999-12-31",
    "2025-02-30",
    "America",
    "Europe/Paris",
    "+14:00",
    "-99:99",
    "*",
    "acme",
    "globex",
    "importance",
    "content",
    "metadata",
    "vector",
    "\x00",
    "é" * 70,
    "x" * 20_000,
]
NUMBERS = [0.0, -0.0, 0.5, 1.0, -1.0, 1.5, math.nan, math.inf, -math.inf, 1e308, 5e-324]
INT_EDGES = [0, 1, -1, 2, 3, 7, 99, 101, 1000, 1001, 10**6, 2**31 - 1, -(2**31), 2**63 - 1]


@dataclass
class Mutator:
    rng: random.Random

    def text(self) -> str:
        if self.rng.random() < 0.6:
            return self.rng.choice(STRINGS)
        length = self.rng.choice([1, 5, 40, 300])
        # Any code point but surrogates (protobuf refuses to hold them; bytes test those).
        points = [self.rng.choice([(32, 127), (0xE000, 0x10FFFF)]) for _ in range(length)]
        return "".join(chr(self.rng.randrange(lo, hi)) for lo, hi in points)

    def integer(self, fd: Any) -> int:
        unsigned = fd.type in (FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_UINT64)
        wide = fd.type in (
            FieldDescriptor.TYPE_INT64,
            FieldDescriptor.TYPE_UINT64,
            FieldDescriptor.TYPE_SINT64,
            FieldDescriptor.TYPE_SFIXED64,
            FieldDescriptor.TYPE_FIXED64,
        )
        lo, hi = (0, 2**64 - 1 if wide else 2**32 - 1) if unsigned else (-(2**63), 2**63 - 1)
        if not wide and not unsigned:
            lo, hi = -(2**31), 2**31 - 1
        value = self.rng.choice([*INT_EDGES, self.rng.randint(lo, hi), lo, hi])
        return min(max(value, lo), hi)

    def json(self, depth: int) -> Any:
        kind = self.rng.randrange(6 if depth < 4 else 4)
        if kind == 0:
            return self.rng.choice(NUMBERS)
        if kind == 1:
            return self.text()[:50]
        if kind == 2:
            return self.rng.random() < 0.5
        if kind == 3:
            return None
        if kind == 4:
            return [self.json(depth + 1) for _ in range(self.rng.randrange(4))]
        return {self.text()[:20]: self.json(depth + 1) for _ in range(self.rng.randrange(4))}

    def struct(self) -> struct_pb2.Struct:
        out = struct_pb2.Struct()
        for _ in range(self.rng.randrange(4)):
            value = self.json(0)
            key = self.text()[:20]
            if isinstance(value, float):  # update() refuses nothing, but keep NaN explicit
                out.fields[key].number_value = value
            else:
                out.update({key: value})
        return out

    def scalar(self, fd: Any) -> Any:
        t = fd.type
        if t == FieldDescriptor.TYPE_STRING:
            return self.text()
        if t == FieldDescriptor.TYPE_BYTES:
            return self.rng.randbytes(self.rng.randrange(20))
        if t == FieldDescriptor.TYPE_BOOL:
            return self.rng.random() < 0.5
        if t in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
            value = self.rng.choice([*NUMBERS, self.rng.uniform(-2, 2)])
            return value if t == FieldDescriptor.TYPE_DOUBLE or abs(value) < 1e38 else 0.0
        if t == FieldDescriptor.TYPE_ENUM:
            return self.rng.choice([*fd.enum_type.values_by_number, -1, 99, 2**31 - 1])
        return self.integer(fd)

    def fill(self, msg: Message, fd: Any, depth: int) -> None:
        """Set ``fd`` of ``msg`` to something random (replacing what it held)."""
        msg.ClearField(fd.name)
        if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
            entries = getattr(msg, fd.name)
            value_fd = fd.message_type.fields_by_name["value"]
            for _ in range(self.rng.randrange(4)):
                key = self.text()[:20]
                if value_fd.message_type is None:
                    entries[key] = self.scalar(value_fd)
                else:
                    self.randomise(entries[key], depth + 1)
            return
        count = self.rng.choice([0, 1, 2, 3, 9, 65, 101]) if fd.is_repeated else 1
        for _ in range(count):
            if fd.message_type is None:
                if fd.is_repeated:
                    getattr(msg, fd.name).append(self.scalar(fd))
                else:
                    setattr(msg, fd.name, self.scalar(fd))
                continue
            child = getattr(msg, fd.name).add() if fd.is_repeated else getattr(msg, fd.name)
            self.randomise(child, depth + 1)

    def randomise(self, msg: Message, depth: int = 0) -> None:
        name = msg.DESCRIPTOR.full_name
        if name == "google.protobuf.Struct":
            msg.CopyFrom(self.struct())
            return
        if name in ("google.protobuf.Value", "google.protobuf.ListValue") or depth > 3:
            return
        if name == "google.protobuf.Timestamp":
            msg.seconds = self.rng.choice([0, -1, 253_402_300_800, -62_135_596_801, 1_700_000_000])
            msg.nanos = self.rng.choice([0, -1, 999_999_999, 1_000_000_000])
            return
        for fd in msg.DESCRIPTOR.fields:
            if self.rng.random() < 0.5:
                self.fill(msg, fd, depth)

    def mutate(self, seed: Message) -> Message:
        """``seed`` with one to three fields made random."""
        out = type(seed)()
        out.CopyFrom(seed)
        fields = list(out.DESCRIPTOR.fields)
        if fields:
            for fd in self.rng.sample(fields, min(len(fields), self.rng.randint(1, 3))):
                self.fill(out, fd, 0)
        return out

    def bytes_of(self, msg: Message) -> bytes:
        raw = bytearray(msg.SerializeToString())
        for _ in range(self.rng.randint(1, 4)):
            op = self.rng.randrange(4)
            at = self.rng.randrange(len(raw) + 1)
            if op == 0 and raw:
                raw[min(at, len(raw) - 1)] = self.rng.randrange(256)
            elif op == 1:
                raw[at:at] = self.rng.randbytes(self.rng.randint(1, 4))
            elif op == 2:
                del raw[at : at + self.rng.randint(1, 4)]
            else:
                raw = raw[:at]
        return bytes(raw)

    def request(self, seeds: Sequence[Message]) -> bytes:
        seed = self.rng.choice(seeds)
        roll = self.rng.random()
        if roll < 0.2:
            fresh = type(seed)()
            self.randomise(fresh)
            return fresh.SerializeToString()
        msg = self.mutate(seed) if roll < 0.7 else seed
        return self.bytes_of(msg) if self.rng.random() < 0.4 else msg.SerializeToString()


def _memory(**kw: Any) -> common_pb2.MemoryInput:
    meta = struct_pb2.Struct()
    meta.update({"source": "fuzz", "n": 1})
    return common_pb2.MemoryInput(
        **{"content": "a note about the fuzzing of requests", "tags": ["a:b"], "metadata": meta}
        | kw
    )


MEMORY_SEEDS: dict[str, list[Message]] = {
    "Store": [gateway_pb2.StoreRequest(memory=_memory(), idempotency_key="k")],
    "StoreBatch": [gateway_pb2.StoreBatchRequest(memories=[_memory(), _memory(type="Decision")])],
    "StoreStream": [gateway_pb2.StoreRequest(memory=_memory())],
    "Recall": [
        gateway_pb2.RecallRequest(query="fuzzing requests", limit=5),
        gateway_pb2.RecallRequest(
            query="note", time_query="last 7 days", timezone="Europe/Paris", start="2020-01-01"
        ),
        gateway_pb2.RecallRequest(query="*", sort="trending", tags=["a"]),
    ],
    "Get": [gateway_pb2.GetRequest(id=UUIDS[0])],
    "Update": [gateway_pb2.UpdateRequest(id=UUIDS[0], memory=_memory(importance=0.7))],
    "Delete": [gateway_pb2.DeleteRequest(id=UUIDS[1])],
    "Associate": [
        gateway_pb2.AssociateRequest(source_id=UUIDS[0], target_id=UUIDS[1], type="RELATES_TO")
    ],
    "Related": [gateway_pb2.RelatedRequest(id=UUIDS[0], depth=2, types=["RELATES_TO"])],
    "Stats": [gateway_pb2.StatsRequest()],
}
ADMIN_SEEDS: dict[str, list[Message]] = {
    "Consolidate": [
        admin_pb2.ConsolidateRequest(mode=admin_pb2.CONSOLIDATION_MODE_DECAY),
        admin_pb2.ConsolidateRequest(mode=admin_pb2.CONSOLIDATION_MODE_ALL, dry_run=True),
    ],
    "ConsolidationStatus": [admin_pb2.ConsolidationStatusRequest()],
    "Sync": [admin_pb2.SyncRequest(stores=[admin_pb2.STORE_VECTOR], dry_run=True)],
    "Rebuild": [admin_pb2.RebuildRequest(store=admin_pb2.STORE_VECTOR, embedding_model="m")],
    "RebuildStatus": [admin_pb2.RebuildStatusRequest()],
}


@dataclass
class InstantControl:
    """Consolidation control whose runs, dry ones included, finish as soon as asked."""

    last: dict[tuple[str, str], str] = field(default_factory=dict)

    async def request(
        self,
        tenant: str,
        run_id: str,
        passes: Sequence[str],
        dry_run: bool,
        at: datetime,
        params: str = "",
    ) -> None:
        for p in passes:
            self.last[(tenant, p)] = run_id

    async def status(self, tenant: str, passes: Sequence[str]) -> list[PassStatus]:
        out = []
        for p in passes:
            run_id = self.last.get((tenant, p))
            done = None if run_id is None else PassRun(p, run_id, RunState.SUCCEEDED, True)
            out.append(PassStatus(p, last_run=done, last_dry_run=done))
        return out


@dataclass
class Served:
    channel: grpc.aio.Channel
    harness: Harness


@pytest.fixture
async def served(new_harness: Callable[..., Harness]) -> AsyncIterator[Served]:
    harness = new_harness(tokens=TOKENS)
    ids = iter(f"run-{n}" for n in range(1_000_000))
    gateway = replace(
        harness.gateway,
        admin=build_admin(harness.settings, InstantControl(), lambda: NOW, ids.__next__),
    )
    harness.world.put(harness.memory(UUIDS[0], "a note about fuzzing"))
    harness.world.put(harness.memory(UUIDS[1], "another note"))
    running = await server.start(harness.settings, gateway, Authenticator.from_sources(TOKENS))
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{running.port}")
    try:
        yield Served(channel, harness)
    finally:
        await channel.close()
        await gateway.access.drain()
        await running.stop(None)


def _identity(b: bytes) -> bytes:
    return b


async def _call(
    served: Served, service: str, method: str, payload: list[bytes]
) -> tuple[grpc.StatusCode, str]:
    """The call's status code, and what it was about when that code is a forbidden one."""
    path = f"/engram.gateway.v1.{service}/{method}"
    # Every other admin call as the admin of every tenant, whose requests name a tenant.
    auth = (ROOT if len(payload[0]) % 2 else ADMIN) if service == "AdminService" else RW
    try:
        if method == "StoreStream":
            call = served.channel.stream_unary(path, _identity, _identity)

            async def stream() -> AsyncIterator[bytes]:
                for item in payload:
                    yield item

            await call(stream(), metadata=auth, timeout=5)
        else:
            await served.channel.unary_unary(path, _identity, _identity)(
                payload[0], metadata=auth, timeout=5
            )
    except grpc.aio.AioRpcError as err:
        code: grpc.StatusCode = err.code()
        about = f"{method} {payload!r:.300}: {code.name} {err.details()}"
        return code, about if code in FORBIDDEN else ""
    return grpc.StatusCode.OK, ""


def _plan(rng: random.Random) -> list[tuple[str, str, list[bytes]]]:
    mutator = Mutator(rng)
    calls = []
    for service, seeds in (("MemoryService", MEMORY_SEEDS), ("AdminService", ADMIN_SEEDS)):
        for method, examples in seeds.items():
            for _ in range(CALLS_PER_RPC):
                count = rng.randrange(4) if method == "StoreStream" else 1
                calls.append((service, method, [mutator.request(examples) for _ in range(count)]))
    rng.shuffle(calls)
    return calls


async def test_fuzzed_requests_are_never_internal_or_unknown(served: Served) -> None:
    calls = _plan(random.Random(SEED))
    codes: dict[grpc.StatusCode, int] = {}
    forbidden: list[str] = []
    for start in range(0, len(calls), CONCURRENCY):
        batch = calls[start : start + CONCURRENCY]
        for code, about in await asyncio.gather(*(_call(served, *c) for c in batch)):
            codes[code] = codes.get(code, 0) + 1
            if about:
                forbidden.append(about)
    assert not forbidden, "\n".join(forbidden[:20])
    # The fuzzing reached past validation and was refused for input, both many times.
    assert codes.get(grpc.StatusCode.OK, 0) > len(calls) // 10, codes
    assert codes.get(grpc.StatusCode.INVALID_ARGUMENT, 0) > len(calls) // 4, codes

    store = gateway_pb2.StoreRequest(memory=_memory(content="still working after the fuzz"))
    reply = gateway_pb2.StoreResponse.FromString(
        await served.channel.unary_unary(
            "/engram.gateway.v1.MemoryService/Store", _identity, _identity
        )(store.SerializeToString(), metadata=RW, timeout=5)
    )
    recall = gateway_pb2.RecallRequest(query="still working", min_sequence=reply.sequence)
    found = gateway_pb2.RecallResponse.FromString(
        await served.channel.unary_unary(
            "/engram.gateway.v1.MemoryService/Recall", _identity, _identity
        )(recall.SerializeToString(), metadata=RW, timeout=5)
    )
    assert reply.id in [r.memory.id for r in found.results]


def _edges(fd: Any) -> list[Any]:
    """The edge values of a scalar field's kind (and a few valid ones)."""
    t = fd.type
    if t == FieldDescriptor.TYPE_STRING:
        return STRINGS
    if t == FieldDescriptor.TYPE_BOOL:
        return [True]
    if t in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
        return NUMBERS if t == FieldDescriptor.TYPE_DOUBLE else [-1.0, 2.0, math.nan, math.inf]
    if t == FieldDescriptor.TYPE_ENUM:
        return [*fd.enum_type.values_by_number, -1, 99, 2**31 - 1]
    if t in (FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_UINT64):
        top = 2**64 - 1 if t == FieldDescriptor.TYPE_UINT64 else 2**32 - 1
        return [1, 101, 1001, 2**31 - 1, top]
    if t == FieldDescriptor.TYPE_INT64:
        return [-1, 1, 101, 1001, 2**63 - 1, -(2**63)]
    return [-1, 1, 3, 101, 1001, 2**31 - 1, -(2**31)]


def _sweep(seed: Message) -> list[bytes]:
    """``seed`` with each scalar field (top level and its memory) set to each edge value
    (a repeated one holding it twice, or thousands of times)."""
    out = []
    parts: list[Message] = [seed]
    if "memory" in seed.DESCRIPTOR.fields_by_name:
        parts.append(seed.memory)
    for part in parts:
        for fd in part.DESCRIPTOR.fields:
            if fd.message_type is not None:
                continue
            for i, value in enumerate(_edges(fd)):
                copy = type(seed)()
                copy.CopyFrom(seed)
                holder = copy if part is seed else copy.memory
                holder.ClearField(fd.name)
                if fd.is_repeated:
                    # Twice, and for the first edges thousands of times.
                    getattr(holder, fd.name).extend([value] * (3000 if i < 3 else 2))
                else:
                    setattr(holder, fd.name, value)
                out.append(copy.SerializeToString())
    return out


async def test_every_scalar_field_at_its_edges_is_never_internal(served: Served) -> None:
    calls = [
        (service, method, [raw])
        for service, seeds in (("MemoryService", MEMORY_SEEDS), ("AdminService", ADMIN_SEEDS))
        for method, examples in seeds.items()
        for example in examples
        for raw in _sweep(example)
    ]
    forbidden: list[str] = []
    for start in range(0, len(calls), CONCURRENCY):
        batch = calls[start : start + CONCURRENCY]
        forbidden += [a for _, a in await asyncio.gather(*(_call(served, *c) for c in batch)) if a]
    assert not forbidden, "\n".join(forbidden[:20])
