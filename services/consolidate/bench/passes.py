"""How long each consolidation pass takes on the embedded stack, per N memories.

    uv run python services/consolidate/bench/passes.py --memories 10000

Starts the embedded stack (nats-server + the seven services) in a temporary
ENGRAM_HOME with the worker's schedule off, stores N memories through the gateway —
LoCoMo conversation turns (../shared/data/locomo), one per memory, tagged with their
session (PRECEDED_BY) and dated by it, the conversations repeated with other names and
400 days older per copy (decay; the copies are near-duplicates: associate and cluster
find them) — waits until ingest has applied them,
then runs each pass through AdminService.Consolidate and prints the duration the worker
reports (ConsolidationStatus), with what it changed. Each pass runs twice: the second
run is the steady state (decay: scores moved less than epsilon; associate, cluster:
edges and summaries already there); decay runs a third time once the graph holds the
edges. Forget runs with archive_below=0.05 and no "edited lately" protection, so it
archives the faded memories.

With ``--state`` it then times the latest-state log's uses on the same stack (after the
passes, so the log also holds their edges and MetaPatterns; ``--no-passes`` skips them):
Sync of each store while in step (the compare alone), Sync of vector and of lexical after
an empty generation was swapped in behind the system's back (every memory re-applied;
vector re-embeds), then Rebuild of lexical, vector (same model) and graph.
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
from engram_clients.lexical import LexicalClient
from engram_clients.vector import VectorClient
from engram_platform.convert import ts_to_proto
from engram_platform.grpc_client import open_channel
from engram_testing.devstack import DEV_TOKEN, DevStack, start_stack
from engram_testing.e2e import model_env, wait_kept

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
STORES = {
    "vector": admin_pb2.STORE_VECTOR,
    "lexical": admin_pb2.STORE_LEXICAL,
    "graph": admin_pb2.STORE_GRAPH,
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


async def run_store(
    admin: admin_pb2_grpc.AdminServiceStub, kind: str, store: int, run_id: str
) -> admin_pb2.StoreRun:
    while True:
        got = await admin.RebuildStatus(admin_pb2.RebuildStatusRequest(), metadata=AUTH)
        runs = got.rebuilds if kind == "rebuild" else got.syncs
        run = next(s for s in runs if s.store == store).last_run
        if run.run_id == run_id and run.state in (
            admin_pb2.PASS_STATE_SUCCEEDED,
            admin_pb2.PASS_STATE_FAILED,
        ):
            return run
        await asyncio.sleep(0.5)


def report(label: str, run: admin_pb2.StoreRun, n: int) -> None:
    if run.state == admin_pb2.PASS_STATE_FAILED:
        print(f"{label:<26} FAILED: {run.error}", flush=True)
        return
    changes = ", ".join(f"{c.kind}={c.count}" for c in run.changes) or "none"
    per_10k = run.duration_s * 10_000 / n
    print(f"{label:<26} {run.duration_s:>8.1f} {per_10k:>8.1f}  {changes}", flush=True)


async def empty_live(stack: DevStack, name: str) -> None:
    """Swap an empty generation in behind the system's back: the store lost everything."""
    channel = open_channel(f"127.0.0.1:{stack.ports[name]}")
    try:
        client = VectorClient(channel) if name == "vector" else LexicalClient(channel)
        made = await client.create_generation("")
        await client.swap_generation(made.name)
    finally:
        await channel.close()


async def bench_state(stack: DevStack, n: int) -> None:
    async with grpc.aio.insecure_channel(stack.gateway_address) as channel:
        memory = gateway_pb2_grpc.MemoryServiceStub(channel)
        admin = admin_pb2_grpc.AdminServiceStub(channel)
        stats = await memory.Stats(gateway_pb2.StatsRequest(), metadata=AUTH)
        await wait_applied(memory, stats.last_sequence)
        await wait_kept(stack.nats_url, stats.last_sequence, timeout_s=3600.0, poll_s=0.5)
        print(f"{'sync / rebuild':<26} {'seconds':>8} {'per 10k':>8}  changes  ({n} stored)")

        async def sync(label: str, name: str) -> None:
            reply = await admin.Sync(admin_pb2.SyncRequest(stores=[STORES[name]]), metadata=AUTH)
            report(label, await run_store(admin, "sync", STORES[name], reply.run_id), n)

        for name in STORES:
            await sync(f"sync {name} (in step)", name)
        for name in ("vector", "lexical"):
            await empty_live(stack, name)
            await sync(f"sync {name} (store empty)", name)
        for name in ("lexical", "vector", "graph"):
            reply = await admin.Rebuild(admin_pb2.RebuildRequest(store=STORES[name]), metadata=AUTH)
            run = await run_store(admin, "rebuild", STORES[name], reply.run_id)
            report(f"rebuild {name}", run, n)


async def bench(address: str, data: Path, n: int, batch: int, passes: bool = True) -> None:
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
        if not passes:
            return
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
    parser.add_argument("--state", action="store_true", help="then time Sync and Rebuild")
    parser.add_argument("--no-passes", action="store_true", help="store, skip the passes")
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="engram-bench-passes-"))
    models = model_env()
    # Sync and Rebuild re-embed with the worker's own embedder: the same model as ingest's.
    worker = {"ENGRAM_CONSOLIDATE_EMBED__MODEL_DIR": models["ENGRAM_VECTOR_EMBED__MODEL_DIR"]}
    stack = start_stack(home, gateway_port=0, extra_env={**models, **QUIET, **worker})
    try:
        address = stack.gateway_address
        asyncio.run(bench(address, args.data, args.memories, args.batch, not args.no_passes))
        if args.state:
            asyncio.run(bench_state(stack, args.memories))
    finally:
        stack.stop()
        if args.keep:
            print(f"logs in {home / 'logs'}")
        else:
            shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
