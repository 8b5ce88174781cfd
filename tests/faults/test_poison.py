"""Inputs the gateway may accept but a store may refuse: each is refused at the gateway with
INVALID_ARGUMENT, or accepted and then applied or dead-lettered; the log moves past it, so
another tenant's later write is readable with its min_sequence, and a plain memory in the
same batch reaches every store."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import grpc
import pytest
from google.protobuf import struct_pb2
from nats.errors import TimeoutError as NatsTimeout

from engram.common.v1 import common_pb2
from engram.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from engram_platform import jetstream as jsm
from engram_platform.settings import NatsSettings
from engram_testing.devstack import DevStack
from engram_testing.faults import (
    AUTH_A,
    AUTH_B,
    STORES,
    TENANT_A,
    Figures,
    Stub,
    read_back_s,
    scan_store,
    store_one,
)

pytestmark = [pytest.mark.faults, pytest.mark.timeout(300)]

READ_BOUND_S = 45.0  # another tenant's write must be readable within this
DECIDE_BOUND_S = 30.0  # each accepted poison applied or dead-lettered within this
FIRST = ("Alice", "Bogdan", "Chen", "Dara", "Emeka", "Farah", "Goran", "Hana", "Ivo", "Jun")
LAST = ("Adams", "Brown", "Cruz", "Diaz", "Evans", "Fox", "Gray", "Hill")


def _nested(depth: int) -> struct_pb2.Struct:
    inner = struct_pb2.Struct()
    inner["leaf"] = "x"
    for _ in range(depth - 1):
        outer = struct_pb2.Struct()
        outer.get_or_create_struct("a").CopyFrom(inner)
        inner = outer
    return inner


def poison_inputs(n: int) -> list[common_pb2.MemoryInput]:
    """The four kinds, cycled: 64 tags and a named person; ~80 people named; a capitalised
    token of 120 characters; metadata nested 32 deep."""
    people = ", ".join(f"{f} {last}" for f in FIRST for last in LAST)
    kinds = [
        lambda i: common_pb2.MemoryInput(
            content=f"Priya Raman approved budget line {i}", tags=[f"t{j}" for j in range(64)]
        ),
        lambda i: common_pb2.MemoryInput(content=f"Attendees of meeting {i}: {people}."),
        lambda i: common_pb2.MemoryInput(
            content=f"Header {i} was X{'abcdefghij' * 12}Q in the request"
        ),
        lambda i: common_pb2.MemoryInput(content=f"Nested config {i}", metadata=_nested(32)),
    ]
    return [kinds[i % 4](i) for i in range(n)]


@dataclass
class Outcome:
    accepted: dict[str, str] = field(default_factory=dict)  # id -> kind
    refused: int = 0
    wrong_code: list[str] = field(default_factory=list)


async def _store_each(gateway: Stub, outcome: Outcome) -> None:
    for i, memory in enumerate(poison_inputs(4)):
        try:
            reply = await gateway.Store(
                gateway_pb2.StoreRequest(memory=memory), metadata=AUTH_A, timeout=10
            )
            outcome.accepted[reply.id] = f"single_{i}"
        except grpc.aio.AioRpcError as err:
            _refusal(outcome, err)


def _refusal(outcome: Outcome, err: grpc.aio.AioRpcError) -> None:
    if err.code() == grpc.StatusCode.INVALID_ARGUMENT:
        outcome.refused += 1
    else:
        outcome.wrong_code.append(f"{err.code().name}: {err.details()}")


async def _store_batch(gateway: Stub, outcome: Outcome) -> str | None:
    """1,000 poison memories with one plain one: the plain one's id if accepted."""
    memories = poison_inputs(999)
    memories.insert(500, common_pb2.MemoryInput(content="A plain note beside the poison"))
    try:
        reply = await gateway.StoreBatch(
            gateway_pb2.StoreBatchRequest(memories=memories), metadata=AUTH_A, timeout=60
        )
    except grpc.aio.AioRpcError as err:
        _refusal(outcome, err)
        return None
    for i, memory_id in enumerate(reply.ids):
        if i != 500:
            outcome.accepted[memory_id] = "batch"
    return reply.ids[500]


async def dead_lettered_ids(nats_url: str, ids: set[str]) -> set[str]:
    """Of ``ids``, those a dead letter on ENGRAM_DEADLETTER names (anywhere in its bytes)."""
    nc, js = await jsm.connect(NatsSettings(url=nats_url), "faults")
    found: set[str] = set()
    try:
        sub = await js.pull_subscribe(
            jsm.subject("*", jsm.DEAD_LETTER), stream=jsm.STREAM_DEADLETTER
        )
        while True:
            try:
                batch = await sub.fetch(500, timeout=1.0)
            except NatsTimeout:
                return found
            for msg in batch:
                found |= {i for i in ids if i.encode() in msg.data}
    finally:
        await nc.close()


async def _applied_ids(stack: DevStack) -> dict[str, set[str]]:
    return {s: {m.id for m in await scan_store(stack, s, TENANT_A)} for s in STORES}


async def _decided(stack: DevStack, accepted: set[str]) -> tuple[set[str], set[str]]:
    """(dead-lettered, undecided) once every accepted id is decided or the bound passes."""
    deadline = time.monotonic() + DECIDE_BOUND_S
    while True:
        applied = await _applied_ids(stack)
        everywhere = set.intersection(*applied.values())
        dead = await dead_lettered_ids(stack.nats_url, accepted - everywhere)
        undecided = accepted - everywhere - dead
        if not undecided or time.monotonic() > deadline:
            return dead, undecided
        await asyncio.sleep(2.0)


async def test_poison_inputs_never_wedge_the_log(fault_stack: DevStack, figures: Figures) -> None:
    outcome = Outcome()
    async with grpc.aio.insecure_channel(fault_stack.gateway_address) as channel:
        gateway = gateway_pb2_grpc.MemoryServiceStub(channel)
        await _store_each(gateway, outcome)
        plain_id = await _store_batch(gateway, outcome)
        other_id, other_seq = await store_one(gateway, AUTH_B, "tenant B writes after the poison")
        other_s = await read_back_s(gateway, AUTH_B, other_id, other_seq, READ_BOUND_S)
        dead, undecided = await _decided(fault_stack, set(outcome.accepted))
        applied = await _applied_ids(fault_stack)
    plain_missing = [s for s in STORES if plain_id is not None and plain_id not in applied[s]]
    figures.record(
        "poison",
        accepted=len(outcome.accepted),
        refused_invalid_argument=outcome.refused,
        other_code=len(outcome.wrong_code),
        dead_lettered=len(dead),
        undecided=len(undecided),
        plain_missing_in=len(plain_missing),
        wedged=int(other_s is None),
        other_tenant_read_s=other_s if other_s is not None else -1.0,
    )
    assert not outcome.wrong_code, outcome.wrong_code
    assert other_s is not None, "another tenant's write is not readable after the poison"
    assert not undecided, (
        f"{len(undecided)} accepted poison memories neither applied nor dead-lettered"
    )
    assert not plain_missing, f"the plain memory of the batch is missing in {plain_missing}"
