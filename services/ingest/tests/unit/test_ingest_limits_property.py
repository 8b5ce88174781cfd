"""Property: any memory the gateway accepts is applied by every store.

Random valid ``MemoryInput``s — many tags, long capitalised tokens, many names, deep
metadata, any unicode — go the whole write path: the gateway's validation, the event's
encoding and ingest's decoding of it, then ingest's applier (enrichment, then one upsert
per store) into the three stores' real gRPC servers on their embedded backends (their
request checks, services and adapters), and into the contract suites' fakes. Every event
must be APPLIED: a store refusing one would have it dead-lettered instead.
"""

from __future__ import annotations

import asyncio
import itertools
import string
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from engram.events.v1 import events_pb2
from engram_clients.graph import GraphClient
from engram_clients.lexical import LexicalClient
from engram_clients.vector import VectorClient
from engram_core.ids import new_id
from engram_core.limits import MAX_METADATA_DEPTH, MAX_TAG_LENGTH, MAX_TAGS
from engram_core.outcomes import Outcome
from engram_core.tags import normalise_tag
from engram_core.validation import (
    MAX_TIMESTAMP_SECONDS,
    MIN_TIMESTAMP_SECONDS,
    Limits,
    MemoryInput,
    RawTimestamp,
    new_memory,
)
from engram_embed.hashing import HashingEmbedder
from engram_graph import bootstrap as graph_bootstrap
from engram_graph import server as graph_server
from engram_graph.config import Settings as GraphSettings
from engram_ingest.service import Applier, Event
from engram_lexical import bootstrap as lexical_bootstrap
from engram_lexical import server as lexical_server
from engram_lexical.config import Settings as LexicalSettings
from engram_platform import jetstream as jsm
from engram_platform.convert import memory_to_proto
from engram_platform.log_events import decode
from engram_testing.fakes.graph import FakeGraphStore
from engram_testing.fakes.lexical import FakeTextIndex
from engram_testing.fakes.vector import FakeVectorIndex
from engram_testing.in_process import serving
from engram_vector import bootstrap as vector_bootstrap
from engram_vector import server as vector_server
from engram_vector.config import Settings as VectorSettings

DIM = 16
EMBEDDER = HashingEmbedder(DIM)
LIMITS = Limits()
NOW = datetime(2025, 6, 1, tzinfo=UTC)
SEQUENCES = itertools.count(1)

# --- valid inputs --------------------------------------------------------------------

names = st.sampled_from(
    ["Sarah", "Bruno Okafor", "Chiara", "Dmitri Novak", "Élodie", "Jürgen", "Zoë", "Ines"]
)
long_tokens = st.text(string.ascii_letters + string.digits + "+/=", min_size=90, max_size=200).map(
    lambda t: "Q" + t
)
words = st.text(st.characters(blacklist_categories=["Cs"]), min_size=1, max_size=20)
content = (
    st.lists(st.one_of(names, long_tokens, words), min_size=1, max_size=120)
    .map(" ".join)
    .filter(lambda c: bool(c.strip()) and len(c.encode()) <= LIMITS.max_content_bytes)
)
segment = st.text(
    st.characters(blacklist_categories=("Cs", "Zs", "Zl", "Zp", "Cc"), blacklist_characters=":/"),
    min_size=1,
    max_size=40,
).filter(lambda s: not any(ch.isspace() for ch in s))
tag = (
    st.lists(segment, min_size=1, max_size=4)
    .map(":".join)
    .filter(lambda t: len(normalise_tag(t)) <= MAX_TAG_LENGTH)
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**53), 2**53),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=30),
)


@st.composite
def metadata(draw: st.DrawFn) -> dict[str, Any]:
    """A JSON object up to the depth limit: a chain that deep, with random JSON beside it."""
    depth = draw(st.integers(1, MAX_METADATA_DEPTH))
    value: Any = draw(scalars)
    for _ in range(depth - 1):
        value = [value] if draw(st.booleans()) else {draw(st.text(max_size=8)): value}
    side = st.recursive(
        scalars,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner),
        max_leaves=8,
    )
    return {"chain": value, **draw(st.dictionaries(st.text(max_size=8), side, max_size=4))}


timestamps = st.builds(
    RawTimestamp,
    st.integers(MIN_TIMESTAMP_SECONDS, MAX_TIMESTAMP_SECONDS),
    st.integers(0, 10**9 - 1),
)
inputs = st.builds(
    MemoryInput,
    content=content,
    type=st.sampled_from(["", "Decision", "Preference", "Memory_2"]),
    tags=st.lists(tag, max_size=MAX_TAGS).map(tuple),
    importance=st.none() | st.floats(0, 1),
    confidence=st.none() | st.floats(0, 1),
    metadata=st.none() | metadata(),
    timestamp=st.none() | timestamps,
)


def events_of(batch: list[MemoryInput], tenant: str) -> list[Event]:
    """Validated as the gateway does, published as its events, decoded as ingest does."""
    out = []
    for i, inp in enumerate(batch):
        memory = new_memory(inp, tenant=tenant, prefix=f"memories[{i}]", now=NOW, limits=LIMITS)
        memory = replace(memory, id=new_id())
        envelope = events_pb2.Envelope(event_id=new_id(), tenant=tenant)
        data = events_pb2.MemoryStored(envelope=envelope, memory=memory_to_proto(memory))
        subject = jsm.subject(tenant, jsm.MEMORY_STORED)
        decoded = decode(subject, data.SerializeToString(), next(SEQUENCES))
        assert decoded.event is not None, decoded.problem
        out.append(decoded.event)
    return out


# --- the stores ----------------------------------------------------------------------


@asynccontextmanager
async def embedded(tmp: Path) -> AsyncIterator[Applier]:
    """Ingest's applier over the three stores' gRPC servers on their embedded backends."""
    async with AsyncExitStack() as stack:
        vs = VectorSettings(port=0, data_dir=tmp / "vector", dimension=DIM)
        ls = LexicalSettings(port=0, data_dir=tmp / "lexical", writer_heap_mb=16)
        gs = GraphSettings(port=0, data_dir=tmp / "graph", buffer_pool_mb=64)
        vector = await vector_bootstrap.build_service(vs, embedder=EMBEDDER)
        channels = [
            await stack.enter_async_context(serving(vector_server.start, vs, vector)),
            await stack.enter_async_context(
                serving(lexical_server.start, ls, lexical_bootstrap.build_service(ls))
            ),
            await stack.enter_async_context(
                serving(graph_server.start, gs, graph_bootstrap.build_service(gs))
            ),
        ]
        yield Applier(
            EMBEDDER,
            VectorClient(channels[0]),
            LexicalClient(channels[1]),
            GraphClient(channels[2]),
        )


class Loop:
    """The stores outlive every example, so they live on a loop of the module's own."""

    def __init__(self, tmp: Path) -> None:
        self.loop = asyncio.new_event_loop()
        self._stack = AsyncExitStack()
        self.appliers = [
            self.run(self._stack.enter_async_context(embedded(tmp))),
            Applier(EMBEDDER, FakeVectorIndex(DIM), FakeTextIndex(), FakeGraphStore()),
        ]

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def close(self) -> None:
        self.run(self._stack.aclose())
        self.loop.close()


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Loop]:
    loop = Loop(tmp_path_factory.mktemp("stores"))
    yield loop
    loop.close()


def _deepest() -> dict[str, Any]:
    value: dict[str, Any] = {"leaf": "x"}
    for _ in range(MAX_METADATA_DEPTH - 1):
        value = {"k": value}
    return value


EDGES = [  # the inputs that once had a store refuse what the gateway accepted
    MemoryInput(content="Lunch with Sarah.", tags=tuple(f"t{i}" for i in range(MAX_TAGS))),
    MemoryInput(
        content="We met "
        + ", ".join(f"Person{chr(65 + i // 26)}{chr(97 + i % 26)} Lee" for i in range(80))
    ),
    MemoryInput(content="Lunch with Sarah, who pasted Q" + "x" * 125 + " into it."),
    MemoryInput(content="deep", metadata=_deepest()),
]


@settings(
    max_examples=40,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(batch=st.lists(inputs, min_size=1, max_size=4), tenant=st.sampled_from(["t1", "t-2"]))
@example(batch=EDGES, tenant="t1")
def test_every_store_applies_what_the_gateway_accepts(
    stores: Loop, batch: list[MemoryInput], tenant: str
) -> None:
    events = events_of(batch, tenant)
    for applier in stores.appliers:
        results = stores.run(applier.apply(events))
        assert [(r.outcome, r.reason) for r in results] == [(Outcome.APPLIED, "")] * len(events)
