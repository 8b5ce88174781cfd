"""One tenant's flood of recalls and store batches, run as a process of its own.

The fault suite measures another tenant's recall latency while this runs. In the measuring
process, dozens of flooding coroutines would share its event loop and its channel, and the
measured latency would include waiting for them on the client side; in a process of its
own, the flood competes with the measurement only where a real second client would: at
the gateway and for the machine.

``python -m engram_testing.flood ADDRESS TOKEN RECALLERS STORERS`` floods until SIGTERM or
SIGINT, then prints its outcome counts as one JSON object on stdout (``ok`` for answered
recalls, ``stored`` for stored batches, a status code name for each refusal).
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from collections import Counter

import grpc

from engram.common.v1 import common_pb2
from engram.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from engram_testing.faults import Metadata, Stub, auth

WORDS = ("ledger", "Postgres", "hiking", "Alps", "chairs", "Berlin", "release", "plan")
BATCH = 50


async def _recaller(
    gateway: Stub, meta: Metadata, n: int, done: asyncio.Event, counts: Counter[str]
) -> None:
    i = 0
    while not done.is_set():
        i += 1
        try:
            await gateway.Recall(
                gateway_pb2.RecallRequest(query=f"flood {n} {i} {WORDS[i % 8]}", limit=20),
                metadata=meta,
                timeout=10,
            )
            counts["ok"] += 1
        except grpc.aio.AioRpcError as err:
            counts[err.code().name] += 1


async def _storer(
    gateway: Stub, meta: Metadata, n: int, done: asyncio.Event, counts: Counter[str]
) -> None:
    i = 0
    while not done.is_set():
        i += 1
        batch = [common_pb2.MemoryInput(content=f"flood {n} {i} {j}") for j in range(BATCH)]
        try:
            await gateway.StoreBatch(
                gateway_pb2.StoreBatchRequest(memories=batch), metadata=meta, timeout=10
            )
            counts["stored"] += 1
        except grpc.aio.AioRpcError as err:
            counts[f"store_{err.code().name}"] += 1
            await asyncio.sleep(0.1)


async def flood(address: str, token: str, recallers: int, storers: int) -> Counter[str]:
    """Until SIGTERM or SIGINT: ``recallers`` recalling and ``storers`` storing at once."""
    done = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, done.set)
    counts: Counter[str] = Counter()
    meta = auth(token)
    async with grpc.aio.insecure_channel(address) as channel:
        gateway = gateway_pb2_grpc.MemoryServiceStub(channel)
        print("flooding", flush=True)  # the parent waits for this line
        await asyncio.gather(
            *(_recaller(gateway, meta, n, done, counts) for n in range(recallers)),
            *(_storer(gateway, meta, n, done, counts) for n in range(storers)),
        )
    return counts


def main(argv: list[str]) -> None:
    address, token, recallers, storers = argv
    counts = asyncio.run(flood(address, token, int(recallers), int(storers)))
    print(json.dumps(dict(counts)), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
