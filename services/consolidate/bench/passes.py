"""How long each consolidation pass takes on the embedded stack, per N memories.

    uv run python services/consolidate/bench/passes.py --memories 10000

Starts the embedded stack (nats-server + the seven services) in a temporary
ENGRAM_HOME with the worker's schedule off, stores N memories through the gateway —
LoCoMo conversation turns (/work/shared/data/locomo), one per memory, tagged with their
session (PRECEDED_BY) and dated by it, the conversations repeated with other names and
400 days older per copy (decay; the copies are near-duplicates: associate and cluster
find them) — waits until ingest has applied them,
then runs each pass through AdminService.Consolidate and prints the duration the worker
reports (ConsolidationStatus), with what it changed. Each pass runs twice: the second
run is the steady state (decay: scores moved less than epsilon; associate, cluster:
edges and summaries already there); decay runs a third time once the graph holds the
edges. Forget runs with archive_below=0.05 and no "edited lately" protection, so it
archives the faded memories.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import shutil
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import grpc

from engram.common.v1 import common_pb2
from engram.gateway.v1 import admin_pb2, admin_pb2_grpc, gateway_pb2, gateway_pb2_grpc
from engram_platform.convert import ts_to_proto
from engram_platform.devstack import DEV_TOKEN, start_stack
from engram_testing.e2e import model_env

AUTH = (("authorization", f"Bearer {DEV_TOKEN}"),)
QUIET = {
    "ENGRAM_CONSOLIDATE_SCHEDULE__DECAY_INTERVAL_S": "0",
    "ENGRAM_CONSOLIDATE_SCHEDULE__ASSOCIATE_INTERVAL_S": "0",
    "ENGRAM_CONSOLIDATE_SCHEDULE__CLUSTER_INTERVAL_S": "0",
    "ENGRAM_CONSOLIDATE_FORGET__ARCHIVE_BELOW": "0.05",
    # The memories are stored now with old timestamps: by updated_at they are all "edited
    # lately", which would protect every one of them from forgetting.
    "ENGRAM_CONSOLIDATE_FORGET__PROTECT_UPDATED_WITHIN_DAYS": "0",
}
NAMES = ["Avery", "Bashir", "Carmen", "Dmitri", "Eun-ji", "Fatima", "Gustavo", "Hiroshi"]
DATA = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "locomo" / "locomo_dev.json"
PASSES = [
    ("decay", admin_pb2.CONSOLIDATION_MODE_DECAY),
    ("decay (again)", admin_pb2.CONSOLIDATION_MODE_DECAY),
    ("associate", admin_pb2.CONSOLIDATION_MODE_ASSOCIATE),
    ("associate (again)", admin_pb2.CONSOLIDATION_MODE_ASSOCIATE),
    ("cluster", admin_pb2.CONSOLIDATION_MODE_CLUSTER),
    ("cluster (again)", admin_pb2.CONSOLIDATION_MODE_CLUSTER),
    ("decay (edges)", admin_pb2.CONSOLIDATION_MODE_DECAY),
    ("forget", admin_pb2.CONSOLIDATION_MODE_FORGET),
]


def memories(path: Path, n: int, seed: int = 7) -> list[common_pb2.MemoryInput]:
    """LoCoMo conversation turns, one memory each, tagged with their session and dated by
    it; the conversations are repeated with other speaker names, each copy 400 days older
    than the one before, until there are ``n``."""
    rng = random.Random(seed)
    data = json.loads(path.read_text())
    out: list[common_pb2.MemoryInput] = []
    copy = 0
    while len(out) < n:
        for c, item in enumerate(data):
            conv = item["conversation"]
            names = {conv["speaker_a"]: NAMES[copy % 8], conv["speaker_b"]: NAMES[(copy + 3) % 8]}
            for key, turns in conv.items():
                if not (key.startswith("session_") and isinstance(turns, list)):
                    continue
                when = datetime.strptime(conv[f"{key}_date_time"], "%I:%M %p on %d %B, %Y")
                when = when.replace(tzinfo=UTC) - timedelta(days=400 * copy)
                for i, turn in enumerate(turns):
                    name = names.get(turn["speaker"], turn["speaker"])
                    text = turn["text"]
                    for speaker, other in names.items():
                        text = text.replace(speaker, other)
                    out.append(
                        common_pb2.MemoryInput(
                            content=f"{name}: {text}",
                            tags=[f"session:c{c}-{key}-r{copy}", f"person:{name.lower()}"],
                            importance=round(rng.uniform(0.1, 0.9), 2),
                            timestamp=ts_to_proto(when + timedelta(minutes=i)),
                        )
                    )
        copy += 1
    return out[:n]


async def wait_applied(memory: gateway_pb2_grpc.MemoryServiceStub, sequence: int) -> None:
    while True:
        stats = await memory.Stats(gateway_pb2.StatsRequest(), metadata=AUTH, timeout=30)
        if stats.watermark >= sequence:
            return
        await asyncio.sleep(0.5)


async def run_pass(admin: admin_pb2_grpc.AdminServiceStub, mode: int) -> admin_pb2.PassRun:
    started = await admin.Consolidate(admin_pb2.ConsolidateRequest(mode=mode), metadata=AUTH)
    while True:
        reply = await admin.ConsolidationStatus(
            admin_pb2.ConsolidationStatusRequest(), metadata=AUTH
        )
        run = next(p for p in reply.passes if p.mode == mode).last_run
        if run.run_id == started.run_id and run.state in (
            admin_pb2.PASS_STATE_SUCCEEDED,
            admin_pb2.PASS_STATE_FAILED,
        ):
            return run
        await asyncio.sleep(0.2)


async def bench(address: str, data: Path, n: int, batch: int) -> None:
    async with grpc.aio.insecure_channel(address) as channel:
        memory = gateway_pb2_grpc.MemoryServiceStub(channel)
        admin = admin_pb2_grpc.AdminServiceStub(channel)
        items = memories(data, n)
        began = time.monotonic()
        last = 0
        for start in range(0, n, batch):
            reply = await memory.StoreBatch(
                gateway_pb2.StoreBatchRequest(memories=items[start : start + batch]),
                metadata=AUTH,
                timeout=120,
            )
            last = reply.sequence
        await wait_applied(memory, last)
        print(f"stored and applied {n} memories in {time.monotonic() - began:.1f}s", flush=True)
        print(f"{'pass':<18} {'seconds':>8} {'per 10k':>8}  changes")
        for label, mode in PASSES:
            run = await run_pass(admin, mode)
            if run.state == admin_pb2.PASS_STATE_FAILED:
                print(f"{label:<18} FAILED: {run.error}", flush=True)
            else:
                changes = ", ".join(f"{c.kind}={c.count}" for c in run.changes) or "none"
                per_10k = run.duration_s * 10_000 / n
                print(f"{label:<18} {run.duration_s:>8.1f} {per_10k:>8.1f}  {changes}", flush=True)
            # The next pass starts once ingest has applied this one's events.
            waited = time.monotonic()
            stats = await memory.Stats(gateway_pb2.StatsRequest(), metadata=AUTH)
            events = stats.last_sequence - stats.watermark
            await wait_applied(memory, stats.last_sequence)
            if events:
                took = time.monotonic() - waited
                print(f"{'':<18} ingest applied its last {events} events {took:.1f}s later")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--data", type=Path, default=DATA, help="LoCoMo json")
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--keep", action="store_true", help="keep the temporary home (logs)")
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="engram-bench-passes-"))
    stack = start_stack(home, gateway_port=0, extra_env={**model_env(), **QUIET})
    try:
        asyncio.run(bench(stack.gateway_address, args.data, args.memories, args.batch))
    finally:
        stack.stop()
        if args.keep:
            print(f"logs in {home / 'logs'}")
        else:
            shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
