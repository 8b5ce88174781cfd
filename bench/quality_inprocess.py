"""`make bench-quality` without gRPC: the same stores, gateway and ranker in one process.

The embedded adapters (Qdrant Edge, tantivy, ladybug) are opened through their services'
bootstrap, filled through the ingest worker's own Applier (so entity extraction and
embedding are the real ones), and queried through the gateway's own Reader with the
gateway's and the scoring service's default settings, in the ``conversation`` profile
throughout as `make bench-quality` runs it (``--profile`` names another). Only the
transport is missing, so the figures match `make bench-quality` while one run takes about
a minute, not five.

The filled stores are kept under
bench/results/inproc-store-<model>[-<variant>][-<profile>][-flat] (git-ignored; the
profile's entity rules decide the stores' entity tags) and reused
until ``--rebuild`` (needed after a change to what the stores index); query embeddings are
kept in a file cache beside them. Settings come from the environment exactly as the
services read them (``ENGRAM_SCORING_WEIGHTS__GRAPH=0.1 python -m bench.quality_inprocess``).

    uv run python -m bench.quality_inprocess [--modes bm25,vector,hybrid,hybrid_graph,hybrid_rerank]
        [--rebuild]
        [--embed-model all-MiniLM-L6-v2]
        [--fleet | --interleaved] [--scoped] [--profile default] [--storage tagged|flat]

``--fleet`` stores the six conversations in one tenant at once, as a fleet of agents writing
side by side (`interleaved`), and asks each question of the whole tenant; a result counts
only when it is of the question's conversation. ``--scoped`` asks with the conversation's
tag, as an agent recalling its own memories would. ``--interleaved`` gives the conversations
the fleet's calendar but a tenant each: what the new dates alone cost. ``--storage`` is
bench.quality's (speaker tags or none); a flat corpus is kept in stores of its own.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import pickle
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.common import LOCOMO, RESULTS, model_path
from bench.quality import (
    KS,
    LIMIT,
    RERANK_MODE,
    SESSION_K,
    STORAGES,
    Answer,
    Conversation,
    Question,
    Turn,
    aggregate,
    conv_tag,
    load,
    memory_tags,
    table,
)
from engram_core import validation as v
from engram_core.entities import builtin_rules
from engram_core.ids import new_id
from engram_core.log_events import MemoryWritten
from engram_core.model import Memory
from engram_core.profiles import CONVERSATION, PROFILES, profile_named
from engram_core.scoring import Fusion
from engram_embed.factory import EmbedSettings, make_embedder
from engram_embed.paths import MODEL_NAME, MODELS
from engram_gateway import bootstrap as gateway_bootstrap
from engram_gateway.config import Settings as GatewaySettings
from engram_gateway.service import Deadline, RecallMode, RecallRequest
from engram_gateway.service.ports import Ack, Envelope, RecallResult
from engram_graph import bootstrap as graph_bootstrap
from engram_graph.config import Settings as GraphSettings
from engram_ingest.service import Applier
from engram_lexical import bootstrap as lexical_bootstrap
from engram_lexical.config import Settings as LexicalSettings
from engram_platform.cache import MemoryCache
from engram_scoring import bootstrap as scoring_bootstrap
from engram_scoring.config import Settings as ScoringSettings
from engram_scoring.service import Ranker
from engram_vector import bootstrap as vector_bootstrap
from engram_vector.config import Settings as VectorSettings

MODE_OF: dict[str, RecallMode] = {
    "bm25": RecallMode.BM25,
    "vector": RecallMode.VECTOR,
    "hybrid": RecallMode.HYBRID,
    "hybrid_graph": RecallMode.HYBRID_GRAPH,
    RERANK_MODE: RecallMode.HYBRID,  # asked with rerank=True of the local cross-encoder
}


class NoTimeout:
    """A service object seen through a gateway port: the ports take ``timeout``, the
    in-process services do not (there is no RPC to bound)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Callable[..., Any]:
        fn = getattr(self._inner, name)

        def call(*args: Any, timeout: float | None = None, **kwargs: Any) -> Any:
            return fn(*args, **kwargs)

        return call


class LocalRanker:
    """The gateway's RankerPort over the scoring service's Ranker, as its handler calls it."""

    def __init__(self, ranker: Ranker) -> None:
        self._ranker = ranker

    async def rank(
        self,
        query: str,
        candidates: Sequence[Any],
        fusion: Any,
        limit: int,
        query_tags: Sequence[str],
        timeout: float | None = None,
        focus: Any = None,
        recency_bias: Any = None,
        profile: str = "",
    ) -> list[Any]:
        params = self._ranker.params(fusion, limit, {}, profile)
        return self._ranker.rank(
            candidates, params, text=query, tags=query_tags, focus=focus, recency_bias=recency_bias
        )


class NullLog:
    """Nothing is published in-process; the watermark is never waited on."""

    async def accessed(self, env: Envelope, ids: Sequence[str], at: datetime) -> Ack:
        return Ack(sequence=0)

    async def watermark(self) -> int:
        return 0

    async def last_sequence(self) -> int:
        return 0

    async def tenant_decided_through(self, tenant: str, after: int, until: int) -> int:
        return until

    async def tenant_last_sequence(self, tenant: str) -> int:
        return 0


class FileCache(MemoryCache):
    """Query embeddings kept across runs (the model and the questions do not change)."""

    def __init__(self, path: Path) -> None:
        super().__init__(1_000_000)
        self._path = path
        self._kept: dict[str, bytes] = pickle.loads(path.read_bytes()) if path.exists() else {}
        self._dirty = False

    async def get(self, key: str) -> bytes | None:
        return self._kept.get(key)

    async def set(self, key: str, value: bytes, ttl_s: float) -> None:
        self._kept[key] = value
        self._dirty = True

    async def close(self) -> None:
        if self._dirty:
            self._path.write_bytes(pickle.dumps(self._kept))


FLEET = "fleet"  # the one tenant of --fleet
FLEET_DAY = datetime(2024, 1, 1, 12, tzinfo=UTC)


def store_dir(model: str, variant: str = "") -> Path:
    """Where the filled stores of one embedding model (and corpus variant) are kept."""
    return RESULTS / f"inproc-store-{model}{'-' + variant if variant else ''}"


def interleaved(conversations: Sequence[Conversation]) -> list[Conversation]:
    """The conversations as if held at once: every one's session k on day k, 30 s between
    turns, conversation c c × 5 s behind the first. An hour around a turn then holds every
    conversation's session of that day: more than 64 memories on 28 of LoCoMo dev's 32 days."""
    out: list[Conversation] = []
    for c, conv in enumerate(conversations):
        seen: dict[int, int] = {}
        turns: list[Turn] = []
        for t in conv.turns:
            i = seen[t.session] = seen.get(t.session, -1) + 1
            at = FLEET_DAY + timedelta(days=t.session, seconds=30 * i + 5 * c)
            turns.append(replace(t, timestamp=at))
        out.append(replace(conv, turns=tuple(turns)))
    return out


def _settings(store: Path, model: str) -> dict[str, Any]:
    embed = EmbedSettings(model_dir=model_path(model))
    return {
        "vector": VectorSettings(data_dir=store, embed=embed),
        "lexical": LexicalSettings(data_dir=store),
        "graph": GraphSettings(data_dir=store),
        "embed": embed,
    }


async def open_services(store: Path, model: str) -> dict[str, Any]:
    s = _settings(store, model)
    return {
        "vector": await vector_bootstrap.build_service(
            s["vector"], cache=FileCache(store / "query-embeddings.pickle")
        ),
        "lexical": lexical_bootstrap.build_service(s["lexical"]),
        "graph": graph_bootstrap.build_service(s["graph"]),
    }


async def fill(
    services: dict[str, Any],
    conversations: Sequence[Conversation],
    embed: EmbedSettings,
    tenant: str = "",
    profile: str = CONVERSATION,
    storage: str = "tagged",
) -> None:
    """Every turn through the gateway's validation and the ingest worker's Applier, into
    ``tenant`` or else one tenant per conversation."""
    applier = Applier(
        make_embedder(embed),
        services["vector"],
        services["lexical"],
        services["graph"],
        entity_rules=builtin_rules(profile_named(profile)),
    )
    limits = GatewaySettings().limits()
    now = datetime.now(UTC)
    sequence = 0
    for conv in conversations:
        events: list[MemoryWritten] = []
        for turn in conv.turns:
            inp = v.MemoryInput(
                content=turn.content,
                timestamp=v.RawTimestamp(seconds=int(turn.timestamp.timestamp()), nanos=0),
                tags=memory_tags(conv.sample_id, turn, storage),
                metadata={"dia_id": turn.dia_id},
            )
            m: Memory = v.new_memory(
                inp, tenant=tenant or conv.sample_id, prefix="memory", now=now, limits=limits
            )
            sequence += 1
            events.append(MemoryWritten(replace(m, id=new_id()), sequence))
        for i in range(0, len(events), 100):
            results = await applier.apply(events[i : i + 100])
            bad = [r for r in results if r.outcome.name != "APPLIED"]
            if bad:
                raise RuntimeError(f"ingest failed: {bad[0]}")
        print(f"  filled {conv.sample_id}: {len(events)} turns", flush=True)


def filled_store(model: str, profile: str, storage: str, variant: str = "") -> Path:
    """The stores of one corpus: their own for what changes what is stored (the corpus
    variant, the profile's entity rules, the storage convention)."""
    p = "" if profile == CONVERSATION else profile
    s = "" if storage == "tagged" else storage
    return store_dir(model, "-".join(filter(None, [variant, p, s])))


async def open_filled(
    corpus: Sequence[Conversation],
    model: str,
    profile: str,
    storage: str,
    variant: str = "",
    rebuild: bool = False,
    tenant: str = "",
) -> dict[str, Any]:
    """The services over the kept stores of ``corpus``, filled first when they are not."""
    store = filled_store(model, profile, storage, variant)
    marker = store / "filled"
    if rebuild or not marker.exists():
        shutil.rmtree(store, ignore_errors=True)
        store.mkdir(parents=True)
    services = await open_services(store, model)
    if not marker.exists():
        print(f"filling the stores with {model} ...", flush=True)
        embed = EmbedSettings(model_dir=model_path(model))
        try:
            await fill(services, corpus, embed, tenant, profile, storage)
        except BaseException:
            await close_services(services)
            raise
        marker.write_text(datetime.now(UTC).isoformat())
    return services


async def close_services(services: dict[str, Any]) -> None:
    for s in services.values():
        await s.close()


def build_reader(
    services: dict[str, Any],
    rerank: bool = False,
    profile: str = CONVERSATION,
    ranker: Callable[[LocalRanker], Any] = lambda r: r,
    overrides: dict[str, Any] | None = None,
) -> Any:
    """The gateway's Reader over ``services``; ``ranker`` may wrap its RankerPort (to see
    what each recall asks scoring); ``overrides`` are gateway settings (nested as dicts) on
    top of the environment's, as bench.sweep varies them."""
    local = LocalRanker(scoring_bootstrap.build_ranker(ScoringSettings(profile=profile)))
    backends = gateway_bootstrap.Backends(
        vector=NoTimeout(services["vector"]),
        lexical=NoTimeout(services["lexical"]),
        graph=NoTimeout(services["graph"]),
        ranker=ranker(local),
    )
    # The local cross-encoder loads only when a mode asks for it (env settings still apply).
    given: dict[str, Any] = {
        k: dict(v) if isinstance(v, dict) else v for k, v in (overrides or {}).items()
    }
    if rerank:
        given["reranker"] = {"backend": "local", **given.get("reranker", {})}
    settings = GatewaySettings(recall_cache_ttl_s=0, profile=profile, **given)
    gateway = gateway_bootstrap.build_gateway(settings, backends, NullLog(), MemoryCache(1000))  # type: ignore[arg-type]
    return gateway.reader


def dia_ids(result: RecallResult, conv: str = "") -> list[str | None]:
    """Each result's dia_id; None for one of another conversation than ``conv`` (if given)."""
    out: list[str | None] = []
    for r in result.results:
        d = r.memory.metadata.get("dia_id")
        mine = not conv or conv_tag(conv) in r.memory.tags
        out.append(d if isinstance(d, str) and mine else None)
    return out


async def ask_all(
    reader: Any,
    questions: Sequence[Question],
    modes: Sequence[str],
    fusion: Fusion | None = None,
    fleet: bool = False,
    scoped: bool = False,
) -> tuple[dict[tuple[int, str], Answer], dict[tuple[int, str], RecallResult]]:
    answers: dict[tuple[int, str], Answer] = {}
    raw: dict[tuple[int, str], RecallResult] = {}
    started = time.perf_counter()
    for i, q in enumerate(questions):
        for mode in modes:
            req = RecallRequest(
                query=q.text,
                limit=LIMIT,
                mode=MODE_OF[mode],
                fusion=fusion,
                rerank=True if mode == RERANK_MODE else None,
                tags=(conv_tag(q.sample_id),) if scoped else (),
            )
            tenant = FLEET if fleet else q.sample_id
            result = await reader.recall(tenant, req, Deadline.within(60.0))
            ranked = dia_ids(result, q.sample_id if fleet else "")
            answers[(i, mode)] = Answer(ranked, result.query_ms, result.degraded)
            raw[(i, mode)] = result
        if (i + 1) % 300 == 0:
            print(
                f"  asked {i + 1}/{len(questions)} ({time.perf_counter() - started:.0f}s)",
                flush=True,
            )
    return answers, raw


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data", nargs="?", type=Path, default=LOCOMO, help="locomo_dev.json")
    parser.add_argument(
        "--modes", default="bm25,vector,hybrid", help=f"comma-separated, of {', '.join(MODE_OF)}"
    )
    parser.add_argument("--rebuild", action="store_true", help="refill the stores")
    parser.add_argument("--out", type=Path, default=None, help="write the answers as JSON here")
    parser.add_argument("--category", type=int, default=0, help="ask one category only")
    parser.add_argument(
        "--fusion", choices=[f.value for f in Fusion], default=None, help="a request's fusion"
    )
    parser.add_argument(
        "--embed-model", choices=MODELS, default=MODEL_NAME, help="model built by make models"
    )
    parser.add_argument(
        "--fleet", action="store_true", help="all conversations in one tenant, at once"
    )
    parser.add_argument(
        "--interleaved", action="store_true", help="the fleet's calendar, a tenant each"
    )
    parser.add_argument("--scoped", action="store_true", help="ask with the conversation's tag")
    parser.add_argument(
        "--profile",
        choices=sorted(PROFILES),
        default=CONVERSATION,
        help="the profile of ingest, recall and scoring (default: conversation, for chat turns)",
    )
    parser.add_argument(
        "--storage", choices=STORAGES, default="tagged", help="speaker tags on the turns or none"
    )
    args = parser.parse_args()
    if args.fleet and args.interleaved:
        parser.error("--fleet already interleaves; give one of them")
    variant = FLEET if args.fleet else "interleaved" if args.interleaved else ""
    modes = [m for m in args.modes.split(",") if m]
    if unknown := sorted(set(modes) - set(MODE_OF)):
        parser.error(f"unknown modes {unknown}; known: {', '.join(MODE_OF)}")
    started = time.perf_counter()

    conversations, questions, _ = load(args.data)
    if args.category:
        questions = [q for q in questions if q.category == args.category]
    corpus = interleaved(conversations) if variant else conversations
    services = await open_filled(
        corpus,
        args.embed_model,
        args.profile,
        args.storage,
        variant,
        rebuild=args.rebuild,
        tenant=FLEET if args.fleet else "",
    )
    try:
        reader = build_reader(services, rerank=RERANK_MODE in modes, profile=args.profile)
        fusion = Fusion(args.fusion) if args.fusion else None
        answers, raw = await ask_all(reader, questions, modes, fusion, args.fleet, args.scoped)
    finally:
        await close_services(services)

    report = aggregate(questions, answers, modes)
    print(table(report))
    if args.out:
        args.out.write_text(
            json.dumps(
                [
                    {
                        "sample_id": q.sample_id,
                        "category": q.category,
                        "question": q.text,
                        "gold": q.gold,
                        **{m: answers[(i, m)].ranked for m in modes},
                        **{
                            f"{m}_scores": [
                                {
                                    "score": r.score,
                                    "components": dict(r.components),
                                    "streams": {k: [s.score, s.rank] for k, s in r.streams.items()},
                                }
                                for r in raw[(i, m)].results
                            ]
                            for m in modes
                        },
                    }
                    for i, q in enumerate(questions)
                ],
                indent=None,
            )
        )
    print(f"total {time.perf_counter() - started:.0f}s")
    for mode in modes:
        o = report[mode]["overall"]
        print(
            f"{mode}: turn_r@10={o['r@10']:.3f} session_r@{SESSION_K}={o[f's_r@{SESSION_K}']:.3f} "
            f"session_hit@{SESSION_K}={o[f's_h@{SESSION_K}']:.3f} r@{KS[1]}={o['r@5']:.3f} "
            f"mrr={o['mrr']:.3f} p50_ms={report[mode]['server_query_ms_p50']:.0f} "
            f"storage={args.storage}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
