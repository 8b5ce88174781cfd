"""Retrieval quality on LoCoMo through the public gRPC API (BENCHMARKS.md §1).

Each conversation goes to a tenant of its own, one turn per memory, through StoreBatch on
the embedded stack; once the watermark covers every write, each question of categories 1-4
is asked through Recall (default settings, limit 20) in four modes side by side: BM25
alone, vector alone, the default hybrid and hybrid_graph (hybrid + personalised PageRank);
``--modes`` asks fewer (hybrid always). Results map back to turns through the memory's
``dia_id`` metadata. Prints a table per mode and category, writes
bench/results/quality-*.json and ends with the summary line of the default hybrid. The
stack runs the ``conversation`` profile (LoCoMo is chat turns) unless ``--profile`` names
another.

``--storage`` says how the turns are written down: ``tagged`` (a ``speaker:<name>`` tag on
each turn) or ``flat`` (no speaker tag). Either way every turn of a session carries the
session's date-time and its content starts with the speaker's name, so the difference
between the two is what a tagging convention is worth to recall.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import shutil
import statistics
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc

from bench.common import (
    LOCOMO,
    RESULTS,
    auth,
    model_path,
    new_home,
    profile_env,
    start_bench_stack,
    wait_watermark,
)
from engram.common.v1 import common_pb2
from engram.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from engram_core.profiles import CONVERSATION, PROFILES
from engram_embed.paths import MODEL_NAME, MODELS, RERANKER
from engram_platform.convert import dict_to_struct, ts_to_proto

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
# Name in the report → RecallRequest.mode. Hybrid is sent as the unset default, the way a
# client that never heard of modes calls it.
MODES: dict[str, gateway_pb2.RecallMode.ValueType] = {
    "bm25": gateway_pb2.RECALL_MODE_BM25,
    "vector": gateway_pb2.RECALL_MODE_VECTOR,
    "hybrid": gateway_pb2.RECALL_MODE_UNSPECIFIED,
    "hybrid_graph": gateway_pb2.RECALL_MODE_HYBRID_GRAPH,
}
DEFAULT_MODE = "hybrid"
# Hybrid asked with rerank=True, the gateway running its local cross-encoder (``--rerank``).
RERANK_MODE = "hybrid_rerank"
KS = (1, 5, 10, 20)
LIMIT = max(KS)
SESSION_K = 5
METRICS = (
    *(f"r@{k}" for k in KS),
    *(f"h@{k}" for k in KS),
    "mrr",
    f"s_r@{SESSION_K}",
    f"s_h@{SESSION_K}",
    f"s_max@{SESSION_K}",
)
_EVIDENCE = re.compile(r"D\d+:\d+")
_SESSION_KEY = re.compile(r"session_(\d+)")
_DATE_FORMAT = "%I:%M %p on %d %B, %Y"  # "1:56 pm on 8 May, 2023"


@dataclass(frozen=True, slots=True)
class Turn:
    dia_id: str
    session: int
    speaker: str
    content: str
    timestamp: datetime


@dataclass(frozen=True, slots=True)
class Conversation:
    sample_id: str
    turns: tuple[Turn, ...]

    @property
    def token(self) -> str:
        return token_of(self.sample_id)


@dataclass(frozen=True, slots=True)
class Question:
    sample_id: str
    category: int
    text: str
    gold: tuple[str, ...]


@dataclass
class Answer:
    ranked: list[str | None]  # dia_id per result, in rank order
    query_ms: float = 0.0
    degraded: tuple[str, ...] = ()
    error: str = ""


@dataclass
class Tally:
    """Sums of per-question metrics for one (mode, category)."""

    n: int = 0
    sums: dict[str, float] = field(default_factory=lambda: dict.fromkeys(METRICS, 0.0))

    def add(self, values: Mapping[str, float]) -> None:
        self.n += 1
        for k, v in values.items():
            self.sums[k] += v

    def means(self) -> dict[str, float]:
        return {k: (v / self.n if self.n else 0.0) for k, v in self.sums.items()}


# --- data ---------------------------------------------------------------------------------


def token_of(sample_id: str) -> str:
    """The bearer token of a conversation's tenant (the tenant is its sample_id)."""
    return f"bench-{sample_id}"


def parse_date(text: str) -> datetime:
    return datetime.strptime(text.strip(), _DATE_FORMAT).replace(tzinfo=UTC)


def content_of(turn: Mapping[str, Any]) -> str:
    text = f"{turn['speaker']}: {turn['text']}"
    caption = turn.get("blip_caption")
    return f"{text} [image: {caption}]" if caption else text


def load(path: Path) -> tuple[list[Conversation], list[Question], dict[str, int]]:
    """Conversations, the questions that are asked, and why the others are not."""
    data = json.loads(path.read_text(encoding="utf-8"))
    conversations: list[Conversation] = []
    questions: list[Question] = []
    skipped = {"category_5": 0, "no_gold": 0, "evidence_dropped": 0}
    for item in data:
        sample_id = item["sample_id"]
        conv = item["conversation"]
        turns: list[Turn] = []
        for key, value in conv.items():
            match = _SESSION_KEY.fullmatch(key)
            if not match or not isinstance(value, list):
                continue
            session = int(match.group(1))
            when = parse_date(conv[f"{key}_date_time"])
            turns += [Turn(t["dia_id"], session, t["speaker"], content_of(t), when) for t in value]
        conversations.append(Conversation(sample_id, tuple(turns)))
        known = {t.dia_id for t in turns}
        for qa in item["qa"]:
            category = int(qa["category"])
            if category not in CATEGORIES:
                skipped["category_5"] += 1
                continue
            found = [e for raw in qa.get("evidence", []) for e in _EVIDENCE.findall(raw)]
            gold = tuple(dict.fromkeys(e for e in found if e in known))
            skipped["evidence_dropped"] += len(set(found)) - len(gold)
            if not gold:
                skipped["no_gold"] += 1
                continue
            questions.append(Question(sample_id, category, qa["question"], gold))
    return conversations, questions, skipped


STORAGES = ("tagged", "flat")


def speaker_tag(name: str) -> str:
    return "speaker:" + "-".join(name.lower().split())


def conv_tag(sample_id: str) -> str:
    """The tag of a conversation's memories (a fleet run reads a result's conversation)."""
    return f"conv:{sample_id}"


def memory_tags(sample_id: str, turn: Turn, storage: str = "tagged") -> tuple[str, ...]:
    """A turn's tags as ``storage`` writes them: the conversation and session tags always
    (the bench reads a result's conversation from them), the speaker's under ``tagged``."""
    if storage not in STORAGES:
        raise ValueError(f"storage {storage!r}: expected one of {', '.join(STORAGES)}")
    tags = (conv_tag(sample_id), f"session:{turn.session}")
    return (*tags, speaker_tag(turn.speaker)) if storage == "tagged" else tags


def memory_input(conv: Conversation, turn: Turn, storage: str = "tagged") -> common_pb2.MemoryInput:
    return common_pb2.MemoryInput(
        content=turn.content,
        timestamp=ts_to_proto(turn.timestamp),
        tags=memory_tags(conv.sample_id, turn, storage),
        metadata=dict_to_struct({"dia_id": turn.dia_id}),
    )


# --- metrics ------------------------------------------------------------------------------


def session_of(dia_id: str) -> int:
    return int(dia_id[1:].split(":", 1)[0])


def metrics(ranked: Sequence[str | None], gold: Sequence[str]) -> dict[str, float]:
    """Turn recall@k and hit@k, MRR over the top LIMIT, session recall and hit@SESSION_K."""
    wanted = set(gold)
    out: dict[str, float] = {}
    for k in KS:
        found = wanted.intersection(ranked[:k])
        out[f"r@{k}"] = len(found) / len(wanted)
        out[f"h@{k}"] = 1.0 if found else 0.0
    first = next((i for i, d in enumerate(ranked[:LIMIT], 1) if d in wanted), 0)
    out["mrr"] = 1.0 / first if first else 0.0
    gold_sessions = {session_of(d) for d in wanted}
    top_sessions = {session_of(d) for d in ranked[:SESSION_K] if d}
    out[f"s_r@{SESSION_K}"] = len(gold_sessions & top_sessions) / len(gold_sessions)
    # 1 when any gold session is among them: the reading under which a plain BM25 gives
    # BENCHMARKS.md's reference figure (bench/reference_bm25.py).
    out[f"s_h@{SESSION_K}"] = 1.0 if gold_sessions & top_sessions else 0.0
    # The best session recall any SESSION_K of the top LIMIT could give, gold known: what
    # reordering alone can reach, as against finding other candidates.
    pool_sessions = {session_of(d) for d in ranked[:LIMIT] if d}
    reachable = min(len(gold_sessions & pool_sessions), SESSION_K)
    out[f"s_max@{SESSION_K}"] = reachable / len(gold_sessions)
    return out


def aggregate(
    questions: Sequence[Question],
    answers: Mapping[tuple[int, str], Answer],
    modes: Sequence[str] = tuple(MODES),
) -> dict[str, dict[str, Any]]:
    report: dict[str, dict[str, Any]] = {}
    for mode in modes:
        by_cat: defaultdict[int, Tally] = defaultdict(Tally)
        overall = Tally()
        latencies: list[float] = []
        degraded: Counter[str] = Counter()
        errors = 0
        for i, q in enumerate(questions):
            a = answers[(i, mode)]
            values = metrics(a.ranked, q.gold)
            by_cat[q.category].add(values)
            overall.add(values)
            latencies.append(a.query_ms)
            degraded.update(a.degraded)
            errors += bool(a.error)
        report[mode] = {
            "overall": {"n": overall.n, **overall.means()},
            "by_category": {
                f"{c} {CATEGORIES[c]}": {"n": by_cat[c].n, **by_cat[c].means()}
                for c in sorted(by_cat)
            },
            "degraded": dict(degraded),  # answers per stream or step that failed
            "errors": errors,
            "server_query_ms_p50": statistics.median(latencies) if latencies else 0.0,
        }
    return report


def table(report: Mapping[str, Mapping[str, Any]]) -> str:
    head = f"{'mode':<7} {'category':<14} {'n':>4} " + " ".join(f"{m:>7}" for m in METRICS)
    lines = [head, "-" * len(head)]
    for mode, r in report.items():
        rows = [*r["by_category"].items(), ("all", r["overall"])]
        for name, values in rows:
            cells = " ".join(f"{values[m]:7.3f}" for m in METRICS)
            lines.append(f"{mode:<7} {name:<14} {values['n']:>4} {cells}")
        lines.append("")
    return "\n".join(lines).rstrip()


# --- the run ------------------------------------------------------------------------------


async def ingest(
    stub: Any,
    conversations: Sequence[Conversation],
    batch: int,
    in_flight: int,
    storage: str = "tagged",
) -> tuple[float, int]:
    """StoreBatch every turn; seconds until the watermark covers them, and the memory count.

    Each conversation is stored in order, batch after batch, as a client writing a
    conversation down would (ids are time-ordered, so the order of storing is the timeline
    the context step reads); conversations go in parallel.
    """
    started = time.perf_counter()
    total = sum(len(c.turns) for c in conversations)
    sem = asyncio.Semaphore(in_flight)
    sent = 0

    async def send(conv: Conversation) -> int:
        nonlocal sent
        last = 0
        async with sem:
            for i in range(0, len(conv.turns), batch):
                turns = conv.turns[i : i + batch]
                request = gateway_pb2.StoreBatchRequest(
                    memories=[memory_input(conv, t, storage) for t in turns]
                )
                reply = await stub.StoreBatch(request, metadata=auth(conv.token), timeout=120)
                if reply.failed:  # a partial batch would skew every figure after it
                    raise RuntimeError(f"StoreBatch stored all but {reply.failed} of {len(turns)}")
                sent += len(turns)
                last = int(reply.sequence)
                print(f"  ingest: stored {sent}/{total} (sequence {last})", flush=True)
        return last

    last = max(await asyncio.gather(*(send(c) for c in conversations)))
    await wait_watermark(stub, last, auth(conversations[0].token))
    return time.perf_counter() - started, total


async def check_counts(stub: Any, conversations: Iterable[Conversation]) -> dict[str, Any]:
    """Each tenant's per-store counts; a store short of the turns would skew every figure."""
    out: dict[str, Any] = {}
    for conv in conversations:
        stats = await stub.Stats(gateway_pb2.StatsRequest(), metadata=auth(conv.token), timeout=30)
        counts = dict(stats.counts)
        out[conv.sample_id] = counts
        short = {k: v for k, v in counts.items() if v != len(conv.turns)}
        if short:
            print(f"  WARNING {conv.sample_id}: {len(conv.turns)} turns but {short}", flush=True)
    return out


def dia_id_of(result: common_pb2.ScoredMemory) -> str | None:
    field_ = result.memory.metadata.fields.get("dia_id")
    return field_.string_value if field_ is not None else None


async def ask(stub: Any, token: str, text: str, mode: str, timeout: float) -> Answer:
    request = gateway_pb2.RecallRequest(
        query=text, limit=LIMIT, mode=MODES.get(mode, gateway_pb2.RECALL_MODE_UNSPECIFIED)
    )
    if mode == RERANK_MODE:
        request.rerank = True
    try:
        reply = await stub.Recall(request, metadata=auth(token), timeout=timeout)
    except grpc.aio.AioRpcError as exc:
        return Answer([], error=f"{exc.code().name}: {exc.details()}")
    return Answer([dia_id_of(r) for r in reply.results], reply.query_ms, tuple(reply.degraded))


async def ask_all(
    stub: Any, questions: Sequence[Question], modes: Sequence[str], clients: int, timeout: float
) -> dict[tuple[int, str], Answer]:
    """Every question in every mode; modes interleaved so each sees the same load."""
    jobs = [(i, mode) for i in range(len(questions)) for mode in modes]
    queue: asyncio.Queue[tuple[int, str]] = asyncio.Queue()
    for job in jobs:
        queue.put_nowait(job)
    answers: dict[tuple[int, str], Answer] = {}
    started = time.perf_counter()

    async def client() -> None:
        while not queue.empty():
            i, mode = queue.get_nowait()
            q = questions[i]
            token = token_of(q.sample_id)
            answers[(i, mode)] = await ask(stub, token, q.text, mode, timeout)
            done = len(answers)
            if done % 150 == 0 or done == len(jobs):
                rate = done / (time.perf_counter() - started)
                print(f"  recall: {done}/{len(jobs)} ({rate:.1f}/s)", flush=True)

    await asyncio.gather(*(client() for _ in range(clients)))
    return answers


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", nargs="?", type=Path, default=LOCOMO, help="locomo_dev.json")
    parser.add_argument("--clients", type=int, default=4, help="concurrent Recall clients")
    parser.add_argument("--batch", type=int, default=100, help="memories per StoreBatch")
    parser.add_argument("--timeout", type=float, default=30.0, help="Recall deadline (s)")
    parser.add_argument("--keep", action="store_true", help="keep the stack's data directory")
    parser.add_argument(
        "--storage", choices=STORAGES, default="tagged", help="speaker tags on the turns or none"
    )
    parser.add_argument(
        "--embed-model", choices=MODELS, default=MODEL_NAME, help="model built by make models"
    )
    parser.add_argument(
        "--rerank",
        action="store_true",
        help=f"add {RERANK_MODE}: the gateway's local cross-encoder (make models builds it)",
    )
    parser.add_argument(
        "--modes",
        default=",".join(MODES),
        help=f"comma-separated, of {', '.join(MODES)} (the summary line is {DEFAULT_MODE}'s)",
    )
    parser.add_argument(
        "--profile",
        choices=sorted(PROFILES),
        default=CONVERSATION,
        help="the profile the whole stack runs (default: conversation, for chat turns)",
    )
    args = parser.parse_args()
    run_started = time.perf_counter()
    modes = [m for m in args.modes.split(",") if m]
    if set(modes) - set(MODES) or DEFAULT_MODE not in modes:
        parser.error(f"--modes {args.modes}: of {', '.join(MODES)}, with {DEFAULT_MODE}")
    modes += [RERANK_MODE] if args.rerank else []

    conversations, questions, skipped = load(args.data)
    n_turns = sum(len(c.turns) for c in conversations)
    print(
        f"{len(conversations)} conversations, {n_turns} turns, {len(questions)} questions "
        f"(skipped: {skipped})",
        flush=True,
    )
    home = new_home("quality-")
    tokens = ";".join(f"{c.token}={c.sample_id}:read+write" for c in conversations)
    print(f"starting the stack in {home} with {args.embed_model} ...", flush=True)
    env = {"ENGRAM_GATEWAY_TOKENS": tokens, **profile_env(args.profile)}
    if args.rerank:  # the reranker's workers are shared: under four clients reranks queue
        env |= {
            "ENGRAM_GATEWAY_RERANKER__BACKEND": "local",
            "ENGRAM_GATEWAY_RERANKER__MODEL_DIR": str(model_path(RERANKER)),
            "ENGRAM_GATEWAY_RERANKER__TIMEOUT_S": str(args.timeout),
        }
    stack = start_bench_stack(home, model_path(args.embed_model), env)
    try:
        async with grpc.aio.insecure_channel(stack.gateway_address) as channel:
            stub = gateway_pb2_grpc.MemoryServiceStub(channel)
            print(f"ingesting {n_turns} memories into {len(conversations)} tenants ...")
            ingest_s, _ = await ingest(
                stub, conversations, args.batch, in_flight=4, storage=args.storage
            )
            print(f"  {n_turns / ingest_s:.0f} memories/s ({ingest_s:.1f}s)", flush=True)
            counts = await check_counts(stub, conversations)
            print(f"asking {len(questions)} questions x {len(modes)} modes ...", flush=True)
            ask_started = time.perf_counter()
            answers = await ask_all(stub, questions, modes, args.clients, args.timeout)
            ask_s = time.perf_counter() - ask_started
    finally:
        stack.stop()
    if not args.keep:
        shutil.rmtree(home / "data", ignore_errors=True)  # logs stay

    report = aggregate(questions, answers, modes)
    print()
    print(table(report))
    for mode, r in report.items():
        print(
            f"{mode}: server p50 {r['server_query_ms_p50']:.0f} ms, "
            f"degraded {r['degraded'] or 0}, errors {r['errors']}"
        )
    first_error = next((a.error for a in answers.values() if a.error), "")
    if first_error:
        print(f"first error: {first_error}")
    # A stream or step that failed changes the figures: say so above the summary line.
    # (`relations` timing out does not: the relation component needs edges between
    # candidates, and LoCoMo turns get none.)
    suspect = {
        mode: {k: v for k, v in r["degraded"].items() if k != "relations"}
        for mode, r in report.items()
    }
    failed = sum(r["errors"] for r in report.values())
    if failed or any(suspect.values()):
        print(f"WARNING: figures are not clean: {failed} recalls failed, degraded {suspect}")
    total_s = time.perf_counter() - run_started
    print(f"ingest {ingest_s:.0f}s, recall {ask_s:.0f}s, total {total_s:.0f}s")

    out = RESULTS / f"quality-{datetime.now(UTC):%Y%m%dT%H%M%S}.json"
    out.write_text(
        json.dumps(
            {
                "date": datetime.now(UTC).isoformat(),
                "data": str(args.data),
                "turns": n_turns,
                "questions": len(questions),
                "skipped": skipped,
                "limit": LIMIT,
                "clients": args.clients,
                "embed_model": args.embed_model,
                "profile": args.profile,
                "storage": args.storage,
                "counts": counts,
                "seconds": {"ingest": ingest_s, "recall": ask_s, "total": total_s},
                "modes": report,
                "answers": [
                    {
                        "sample_id": q.sample_id,
                        "category": q.category,
                        "question": q.text,
                        "gold": q.gold,
                        **{mode: answers[(i, mode)].ranked for mode in modes},
                    }
                    for i, q in enumerate(questions)
                ],
            },
            indent=1,
        )
    )
    print(f"report: {out}")
    hybrid = report[DEFAULT_MODE]["overall"]
    print(
        f"quality turn_r@10={hybrid['r@10']:.3f} "
        f"session_hit@{SESSION_K}={hybrid[f's_h@{SESSION_K}']:.3f} "
        f"session_r@{SESSION_K}={hybrid[f's_r@{SESSION_K}']:.3f} mrr={hybrid['mrr']:.3f} "
        f"questions={len(questions)} profile={args.profile} storage={args.storage}"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
