"""Speed and scale through the public gRPC API on the embedded stack (BENCHMARKS.md §2).

Ingest N memories (LoCoMo turns recombined with other names and dates), time until the
watermark covers them, and in the same run the raw embedding throughput of the model on
the same texts. Then recall latency (1 client) and throughput (16 clients), trending (an
empty query) by each sort, and the in-process floor: the same query embedding, vector
search, BM25 and scoring in one process with no RPC, on the same data. Prints figures,
writes bench/results/perf-*.json and ends with the summary line.

With ``--client-vectors`` the memories carry random unit vectors of the model's size
(``MemoryInput.embedding``) and the queries too (``RecallRequest.embedding``): no model runs
on either path, so sizes the model would take hours to embed load in minutes. Recall's
speed is measured as usual; what it finds means nothing (the vectors are noise).

``--gateway-workers N`` runs the gateway as N processes on its port (ENGRAM_GATEWAY_WORKERS);
the CPU and peak RSS of a service are summed over its processes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import psutil  # type: ignore[import-untyped]  # no stubs in the lock

from bench.common import (
    LOCOMO,
    RESULTS,
    auth,
    model_path,
    new_home,
    pct,
    start_bench_stack,
    wait_passes,
    wait_watermark,
)
from engram.common.v1 import common_pb2
from engram.gateway.v1 import admin_pb2_grpc, gateway_pb2, gateway_pb2_grpc
from engram.vector.v1 import vector_pb2, vector_pb2_grpc
from engram_core.model import Filter
from engram_core.scoring import Candidate, Params, Query, StreamScore, rank
from engram_embed.factory import EmbedSettings, make_embedder
from engram_embed.paths import MODEL_NAME, MODELS
from engram_lexical import bootstrap as lexical_bootstrap
from engram_lexical.config import Settings as LexicalSettings
from engram_platform.convert import ts_to_proto
from engram_testing.devstack import DEV_TOKEN, DevStack
from engram_vector import bootstrap as vector_bootstrap
from engram_vector.config import Settings as VectorSettings

AUTH = auth(DEV_TOKEN)
NAMES = [
    "Avery",
    "Bashir",
    "Carmen",
    "Dmitri",
    "Eun-ji",
    "Fatima",
    "Gustavo",
    "Hiroshi",
    "Ingrid",
    "Jamal",
    "Keiko",
    "Luca",
    "Maya",
    "Nikhil",
    "Olga",
    "Pablo",
    "Quinn",
    "Rosa",
    "Sven",
    "Tariq",
]


Session = list[tuple[str, str]]  # (speaker, text) turns of one LoCoMo session


def load_sessions(path: Path) -> tuple[list[Session], list[str]]:
    """The sessions of the LoCoMo file, in order, and its questions."""
    data = json.loads(path.read_text())
    sessions: list[Session] = []
    questions: list[str] = []
    for item in data:
        conv = item["conversation"]
        for key, value in conv.items():
            if key.startswith("session_") and isinstance(value, list):
                sessions.append([(turn["speaker"], turn["text"]) for turn in value])
        questions += [qa["question"] for qa in item["qa"] if qa.get("category") != 5]
    return sessions, questions


SPAN_MINUTES = 3 * 365 * 1440  # the corpus covers three years


def corpus(
    sessions: list[Session], n: int, shape: str = "conversations", seed: int = 7
) -> list[tuple[str, datetime]]:
    """``n`` memories "<name>: <text>" made of LoCoMo turns with other names and dates.

    ``conversations``: whole sessions one after the other, each with two new names for its
    speakers, starting at a random minute and with 10 s to 2 min between turns, as an agent's
    chat is stored; so a memory has timeline neighbours and the context step real work.
    ``scattered``: every turn alone at a random minute, one name per turn (the corpus of the
    figures before 2026-12-02).
    """
    rng = random.Random(seed)
    start = datetime(2022, 1, 1, tzinfo=UTC)
    out: list[tuple[str, datetime]] = []
    if shape == "scattered":
        turns = [turn for session in sessions for turn in session]
        for i in range(n):
            speaker, text = turns[i % len(turns)]
            name = rng.choice(NAMES)
            at = start + timedelta(minutes=rng.randrange(SPAN_MINUTES))
            out.append((f"{name}: {text.replace(speaker, name)}", at))
        return out
    k = 0
    while len(out) < n:
        session = sessions[k % len(sessions)]
        k += 1
        speakers = sorted({s for s, _ in session})
        names = dict(zip(speakers, rng.sample(NAMES, len(speakers)), strict=True))
        at = start + timedelta(minutes=rng.randrange(SPAN_MINUTES))
        for speaker, text in session[: n - len(out)]:
            for old, new in names.items():
                text = text.replace(old, new)
            out.append((f"{names[speaker]}: {text}", at))
            at += timedelta(seconds=rng.randrange(10, 120))
    return out


async def raw_embedding(texts: list[str], model_dir: Path) -> float:
    embedder = make_embedder(EmbedSettings(model_dir=model_dir))
    await embedder.embed(texts[:64])
    started = time.perf_counter()
    for i in range(0, len(texts), 64):
        await embedder.embed(texts[i : i + 64])
    return len(texts) / (time.perf_counter() - started)


def unit_vectors(count: int, dimension: int, seed: int) -> list[list[float]]:
    """``count`` random unit vectors (float32), the same for the same seed."""
    values = np.random.default_rng(seed).standard_normal((count, dimension), dtype=np.float32)
    values /= np.linalg.norm(values, axis=1, keepdims=True)
    return values.tolist()  # type: ignore[no-any-return]


async def live_dimension(stack: DevStack) -> int:
    """The size of the live vector generation's vectors: what a client's own must have."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{stack.ports['vector']}") as channel:
        stub = vector_pb2_grpc.VectorServiceStub(channel)
        listed = await stub.ListGenerations(vector_pb2.ListGenerationsRequest(), timeout=30)
    [live] = [g for g in listed.generations if g.live]
    return int(live.dimension)


async def ingest(
    stub: Any, docs: list[tuple[str, datetime]], batch: int, dimension: int = 0
) -> tuple[float, int]:
    """With ``dimension``, every memory carries a random unit vector of that size, made
    per batch once the batch's turn to be sent came (a million of them at once would not fit
    in memory)."""
    started = time.perf_counter()
    sem = asyncio.Semaphore(4)

    async def send(start: int, chunk: list[tuple[str, datetime]]) -> int:
        async with sem:
            vectors = unit_vectors(len(chunk), dimension, start) if dimension else [[]] * len(chunk)
            memories = [
                common_pb2.MemoryInput(
                    content=c, timestamp=ts_to_proto(ts), tags=["bench"], embedding=vector
                )
                for (c, ts), vector in zip(chunk, vectors, strict=True)
            ]
            reply = await stub.StoreBatch(
                gateway_pb2.StoreBatchRequest(memories=memories), metadata=AUTH, timeout=120
            )
        if reply.failed:  # a partial batch would skew every figure after it
            raise RuntimeError(f"StoreBatch stored all but {reply.failed} of {len(memories)}")
        return int(reply.sequence)

    seqs = await asyncio.gather(*(send(i, docs[i : i + batch]) for i in range(0, len(docs), batch)))
    last = max(seqs)
    await wait_watermark(stub, last, AUTH)
    return time.perf_counter() - started, last


Asked = tuple[str, list[float]]  # the text, and the client's own vector ([] = none)
QUERY_SEED = 2**40  # of the queries' vectors; a batch's seed is its first memory's index


async def recall_once(stub: Any, query: Asked) -> float:
    text, vector = query
    request = gateway_pb2.RecallRequest(query=text, limit=10, embedding=vector)
    started = time.perf_counter()
    await stub.Recall(request, metadata=AUTH, timeout=30)
    return (time.perf_counter() - started) * 1000


async def recall_load(
    address: str, queries: list[Asked], clients: int, per_client: int
) -> dict[str, float]:
    """``clients`` agents, each on a connection of its own as a fleet's are (the kernel
    spreads connections, not calls, over the gateway's worker processes)."""
    latencies: list[float] = []
    own = [("grpc.use_local_subchannel_pool", 1)]

    async def client(k: int) -> None:
        async with grpc.aio.insecure_channel(address, options=own) as channel:
            stub = gateway_pb2_grpc.MemoryServiceStub(channel)
            await channel.channel_ready()
            for i in range(per_client):
                q = queries[(k * per_client + i) % len(queries)]
                latencies.append(await recall_once(stub, q))

    started = time.perf_counter()
    await asyncio.gather(*(client(k) for k in range(clients)))
    wall = time.perf_counter() - started
    return {
        "qps": len(latencies) / wall,
        "p50_ms": statistics.median(latencies),
        "p99_ms": pct(latencies, 99),
    }


async def trending(stub: Any, newest: datetime, repeat: int = 10) -> dict[str, Any]:
    """A recall without text (trending) per sort: p50 latency, and whether sort=recency
    listed the newest memories first."""
    out: dict[str, Any] = {}
    for sort in ("importance", "recency", "relevance", "access_count"):
        times: list[float] = []
        for _ in range(repeat):
            request = gateway_pb2.RecallRequest(query="", sort=sort, limit=10)
            started = time.perf_counter()
            reply = await stub.Recall(request, metadata=AUTH, timeout=60)
            times.append((time.perf_counter() - started) * 1000)
        out[f"{sort}_p50_ms"] = statistics.median(times)
        if sort == "recency":
            # Newest first, and none older than the corpus's newest (a reused home may also
            # hold memories stored since, which are newer).
            stamps = [r.memory.timestamp.ToDatetime(tzinfo=UTC) for r in reply.results]
            out["recency_lists_the_newest"] = (
                bool(stamps) and stamps[0] >= newest and stamps == sorted(stamps, reverse=True)
            )
    return out


def _pids(stack: DevStack) -> dict[str, list[int]]:
    """Each service's running process and its children (the worker processes, if any)."""
    out: dict[str, list[int]] = {}
    for service, proc in stack.processes.items():
        try:
            parent = psutil.Process(proc.popen.pid)
            out[service] = [parent.pid, *(c.pid for c in parent.children(recursive=True))]
        except psutil.NoSuchProcess:
            continue
    return out


def _proc(stack: DevStack, name: str) -> dict[str, list[str]]:
    """/proc/<pid>/<name> of each service's processes still running."""
    out: dict[str, list[str]] = {}
    for service, pids in _pids(stack).items():
        for pid in pids:
            try:
                out.setdefault(service, []).append(Path(f"/proc/{pid}/{name}").read_text())
            except OSError:
                continue
    return out


def peak_rss_mb(stack: DevStack) -> dict[str, float]:
    """Each service's peak RSS, summed over its processes (worker processes each peak)."""
    out: dict[str, float] = {}
    for service, statuses in _proc(stack, "status").items():
        for status in statuses:
            for line in status.splitlines():
                if line.startswith("VmHWM:"):
                    out[service] = out.get(service, 0.0) + int(line.split()[1]) / 1024
    return out


def cpu_s(stack: DevStack) -> dict[str, float]:
    """CPU seconds (user + system) each service's processes have used so far."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    for service, stats in _proc(stack, "stat").items():
        for stat in stats:
            fields = stat.rsplit(")", 1)[1].split()  # after "pid (comm)": state is field 3
            out[service] = out.get(service, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return out


def du_mb(path: Path) -> float:
    """Blocks on disk, not apparent size: the vector shard preallocates sparse files."""
    return sum(f.stat().st_blocks * 512 for f in path.rglob("*") if f.is_file()) / 1e6


async def floor(home: Path, model_dir: Path, queries: list[Asked]) -> float:
    """Median ms of the same recall work in one process: embed, vector, BM25, scoring.

    The stores are opened the way the services open them (their bootstrap, from settings),
    so the floor reads what the stack wrote, whatever layout the stores keep on disk."""
    embed = EmbedSettings(model_dir=model_dir)
    embedder = make_embedder(embed)
    data = home / "data"
    vectors = await vector_bootstrap.build_service(
        VectorSettings(data_dir=data, embed=embed), embedder=embedder
    )
    text = lexical_bootstrap.build_service(LexicalSettings(data_dir=data))
    flt = Filter(exclude_types=("MetaPattern",))
    timings = []
    try:
        for q, own in queries:
            started = time.perf_counter()
            [vec] = [own] if own else await embedder.embed([q])
            v_hits, t_hits = await asyncio.gather(
                vectors.search("default", flt, 40, vector=vec),
                text.search("default", q, flt, 40),
            )
            merged: dict[str, Candidate] = {}
            for stream, hits in (("vector", v_hits), ("keyword", t_hits)):
                for i, h in enumerate(hits):
                    assert h.memory is not None
                    prev = merged.get(h.id)
                    streams = dict(prev.streams) if prev else {}
                    streams[stream] = StreamScore(score=h.score, rank=i + 1)
                    merged[h.id] = Candidate(memory=h.memory, streams=streams)
            rank(list(merged.values()), Query(now=datetime.now(UTC), text=q), Params(limit=10))
            timings.append((time.perf_counter() - started) * 1000)
    finally:
        await vectors.close()
        await text.close()
    return statistics.median(timings)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000, help="memories to ingest")
    parser.add_argument("--queries", type=int, default=200, help="sequential recalls")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--per-client", type=int, default=25)
    parser.add_argument("--batch", type=int, default=500, help="memories per StoreBatch")
    parser.add_argument("--data", type=Path, default=LOCOMO)
    parser.add_argument(
        "--reuse",
        type=Path,
        default=None,
        help="ENGRAM_HOME of an earlier run holding the same --n memories: skip the ingest "
        "and measure recall on it (a 100k ingest takes about 12 minutes)",
    )
    parser.add_argument(
        "--corpus",
        choices=("conversations", "scattered"),
        default="conversations",
        help="whole sessions with timeline neighbours, or single turns at random times",
    )
    parser.add_argument(
        "--passes-timeout",
        type=float,
        default=3600.0,
        help="seconds to wait for the consolidation passes before measuring recall",
    )
    parser.add_argument(
        "--embed-model", choices=MODELS, default=MODEL_NAME, help="model built by make models"
    )
    parser.add_argument(
        "--client-vectors",
        action="store_true",
        help="memories and queries carry random unit vectors of the model's size: no model "
        "runs, so 300k-1M memories load without it (what recall finds means nothing)",
    )
    parser.add_argument(
        "--gateway-workers",
        type=int,
        default=1,
        help="gateway processes on its port (ENGRAM_GATEWAY_WORKERS)",
    )
    args = parser.parse_args()
    model_dir = model_path(args.embed_model)
    sessions, questions = load_sessions(args.data)
    docs = corpus(sessions, args.n, args.corpus)
    texts = [c for c, _ in docs]
    random.Random(3).shuffle(questions)

    raw = ingest_rate = 0.0
    if args.reuse is None and not args.client_vectors:
        print(f"raw embedding throughput on {min(2000, len(texts))} of the texts ...", flush=True)
        raw = await raw_embedding(texts[:2000], model_dir)
        print(f"  {raw:.0f} texts/s")
    home = args.reuse or new_home("perf-")
    print(f"starting the stack in {home} ...", flush=True)
    stack = start_bench_stack(
        home,
        model_dir,
        {
            "ENGRAM_GATEWAY_RECALL_CACHE_TTL_S": "0",
            "ENGRAM_GATEWAY_WORKERS": str(args.gateway_workers),
        },
    )
    report: dict[str, Any] = {
        "n": args.n,
        "embed_model": args.embed_model,
        "corpus": args.corpus,
        "client_vectors": args.client_vectors,
        "gateway_workers": args.gateway_workers,
        "date": datetime.now(UTC).isoformat(),
    }
    try:
        dimension = await live_dimension(stack) if args.client_vectors else 0
        own = unit_vectors(len(questions), dimension, QUERY_SEED) if dimension else []
        queries: list[Asked] = [(q, own[i] if own else []) for i, q in enumerate(questions)]
        async with grpc.aio.insecure_channel(stack.gateway_address) as channel:
            stub = gateway_pb2_grpc.MemoryServiceStub(channel)
            since = 0.0  # reused: any finished run of each pass will do
            if args.reuse is None:
                print(f"ingesting {args.n} memories ...", flush=True)
                since = time.time()
                took, _ = await ingest(stub, docs, args.batch, dimension)
                ingest_rate = args.n / took
                model = f"raw model {raw:.0f}/s" if raw else "client vectors, no model"
                print(f"  {ingest_rate:.0f} memories/s ({took:.1f}s), {model}")
            # Recall is measured with no consolidation pass beside it (a fresh tenant gets
            # its first decay, associate and cluster runs right after the ingest; a reused
            # home resumes an unfinished one)...
            print("waiting for the consolidation passes ...", flush=True)
            admin = admin_pb2_grpc.AdminServiceStub(channel)
            passes = await wait_passes(admin, AUTH, since, args.passes_timeout)
            print(
                "  "
                + "; ".join(
                    f"{n} {p['duration_s']:.1f}s "
                    + ("" if p["state"] == "PASS_STATE_SUCCEEDED" else f"{p['state']} ")
                    + " ".join(f"{k}={v}" for k, v in p["changes"].items())
                    for n, p in passes.items()
                )
            )
            # ... and with whatever the log holds beyond the watermark (e.g. the passes'
            # relations) applied.
            stats = await stub.Stats(gateway_pb2.StatsRequest(), metadata=AUTH, timeout=30)
            await wait_watermark(stub, stats.last_sequence, AUTH, label="catch-up")
            for q in queries[:20]:
                await recall_once(stub, q)
            single = [await recall_once(stub, q) for q in queries[20 : 20 + args.queries]]
            one = {
                "p50_ms": statistics.median(single),
                "p95_ms": pct(single, 95),
                "p99_ms": pct(single, 99),
            }
            print(
                f"recall, 1 client: p50 {one['p50_ms']:.1f} ms  p95 {one['p95_ms']:.1f}  "
                f"p99 {one['p99_ms']:.1f}"
            )
            used = cpu_s(stack)
            load = await recall_load(stack.gateway_address, queries, args.clients, args.per_client)
            recalls = args.clients * args.per_client
            cpu_ms = {
                k: (v - used[k]) * 1000 / recalls for k, v in cpu_s(stack).items() if k in used
            }
            print(
                f"recall, {args.clients} clients, {args.gateway_workers} gateway process(es): "
                f"{load['qps']:.1f} recalls/s  "
                f"p50 {load['p50_ms']:.1f} ms  p99 {load['p99_ms']:.1f}"
            )
            # CPU time per recall holds steadier than latency on a shared machine; it
            # includes the access statistics each recall makes consolidation write.
            print(
                "CPU ms per recall: "
                + ", ".join(f"{k} {v:.1f}" for k, v in sorted(cpu_ms.items()))
                + f"; total {sum(cpu_ms.values()):.1f}"
            )
            trend = await trending(stub, max(ts for _, ts in docs))
            print(
                "trending p50: "
                + ", ".join(f"{k[:-7]} {v:.1f} ms" for k, v in trend.items() if k.endswith("_ms"))
                + f"; recency lists the newest first: {trend['recency_lists_the_newest']}"
            )
        rss = peak_rss_mb(stack)
    finally:
        stack.stop()
    disk = {p.name: du_mb(p) for p in (home / "data").iterdir() if p.is_dir()}
    floor_ms = await floor(home, model_dir, queries[20 : 20 + args.queries])
    print(f"in-process floor p50 {floor_ms:.1f} ms; gateway/floor {one['p50_ms'] / floor_ms:.2f}")
    print("peak RSS MB: " + ", ".join(f"{k} {v:.0f}" for k, v in sorted(rss.items())))
    per_100k = {k: v * 100_000 / args.n for k, v in disk.items()}
    print("disk MB per 100k: " + ", ".join(f"{k} {v:.0f}" for k, v in sorted(per_100k.items())))
    report.update(
        reused=str(args.reuse) if args.reuse else None,
        passes=passes,
        ingest_per_s=ingest_rate or None,
        raw_embed_per_s=raw or None,
        recall_1_client=one,
        recall_load={"clients": args.clients, **load, "cpu_ms_per_recall": cpu_ms},
        trending=trend,
        floor_p50_ms=floor_ms,
        peak_rss_mb=rss,
        disk_mb_per_100k=per_100k,
        machine={"cores": os.cpu_count()},
    )
    out = RESULTS / f"perf-{datetime.now(UTC):%Y%m%dT%H%M%S}.json"
    out.write_text(json.dumps(report, indent=2))
    print(f"report: {out}")
    ingested = (
        f"ingest={ingest_rate:.0f} ingest_vs_raw={ingest_rate / raw:.2f}"
        if raw
        else f"ingest={f'{ingest_rate:.0f}' if ingest_rate else 'reused'} ingest_vs_raw=-"
    )
    print(
        f"perf n={args.n} {ingested} "
        f"recall_p50_ms={one['p50_ms']:.1f} recall_p99_ms={one['p99_ms']:.1f} "
        f"recall_vs_floor={one['p50_ms'] / floor_ms:.2f} "
        f"recalls_per_s={load['qps']:.1f} cpu_ms_per_recall={sum(cpu_ms.values()):.1f}"
    )


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
