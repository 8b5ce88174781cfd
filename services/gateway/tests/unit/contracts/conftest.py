"""The real adapters behind the gateway's read ports, each over its service started in this
process on port 0 with its embedded backend (no outside server, so `make test` runs them)."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from engram_clients.graph import GraphClient
from engram_clients.lexical import LexicalClient
from engram_clients.scoring import ScoringClient
from engram_clients.vector import VectorClient
from engram_embed.hashing import HashingEmbedder
from engram_gateway.adapters.ranker import ScoringRanker
from engram_graph import server as graph_server
from engram_graph.bootstrap import build_service as build_graph
from engram_graph.config import Settings as GraphSettings
from engram_lexical import server as lexical_server
from engram_lexical.bootstrap import build_service as build_lexical
from engram_lexical.config import Settings as LexicalSettings
from engram_platform.grpc_client import open_channel
from engram_scoring import server as scoring_server
from engram_scoring.bootstrap import build_ranker
from engram_scoring.config import Settings as ScoringSettings
from engram_testing.in_process import serving
from engram_vector import server as vector_server
from engram_vector.bootstrap import build_service as build_vector
from engram_vector.config import Settings as VectorSettings

# The real vector service embeds with this (and takes client vectors of its size).
REAL_DIMENSION = 64
EMBEDDER = HashingEmbedder(REAL_DIMENSION)


@pytest.fixture
async def vector_client(tmp_path: Path) -> AsyncIterator[VectorClient]:
    settings = VectorSettings(port=0, data_dir=tmp_path, dimension=REAL_DIMENSION)
    service = await build_vector(settings, embedder=EMBEDDER)
    async with serving(vector_server.start, settings, service) as channel:
        yield VectorClient(channel)


@pytest.fixture
async def lexical_client(tmp_path: Path) -> AsyncIterator[LexicalClient]:
    settings = LexicalSettings(port=0, data_dir=tmp_path, writer_heap_mb=20)
    async with serving(lexical_server.start, settings, build_lexical(settings)) as channel:
        yield LexicalClient(channel)


@pytest.fixture
async def graph_client(tmp_path: Path) -> AsyncIterator[GraphClient]:
    settings = GraphSettings(port=0, data_dir=tmp_path, buffer_pool_mb=64)
    async with serving(graph_server.start, settings, build_graph(settings)) as channel:
        yield GraphClient(channel)


@pytest.fixture
async def scoring_ranker(tmp_path: Path) -> AsyncIterator[ScoringRanker]:
    settings = ScoringSettings(port=0, data_dir=tmp_path)
    running = await scoring_server.start(settings, build_ranker(settings))
    channel = open_channel(f"127.0.0.1:{running.port}")
    try:
        yield ScoringRanker(ScoringClient(channel))
    finally:
        await channel.close()
        await running.stop(0)


@pytest.fixture
async def closed_channel() -> AsyncIterator[grpc.aio.Channel]:
    """A channel to a port nothing listens on: a service that is down."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    channel = open_channel(f"127.0.0.1:{port}")
    try:
        yield channel
    finally:
        await channel.close()


@pytest.fixture
def embedder() -> HashingEmbedder:
    """What the real vector service embeds with: vectors for its upserts."""
    return EMBEDDER
