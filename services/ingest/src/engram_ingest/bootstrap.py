"""Builds the ingest service from settings: the embedder and the three store clients.

Tests pass their own embedder and writers; whatever is not passed is built from settings.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import grpc

from engram_clients.graph import GraphClient
from engram_clients.lexical import LexicalClient
from engram_clients.vector import VectorClient
from engram_core.ports import Embedder
from engram_embed.factory import make_embedder
from engram_ingest.config import Settings
from engram_ingest.service import Applier, GraphWriter, TextWriter, Timeouts, VectorWriter
from engram_platform.grpc_client import open_channel


@dataclass
class Ingest:
    applier: Applier
    channels: list[grpc.aio.Channel] = field(default_factory=list)

    async def close(self) -> None:
        for channel in self.channels:
            await channel.close()


def build(
    settings: Settings,
    *,
    embedder: Embedder | None = None,
    vector: VectorWriter | None = None,
    lexical: TextWriter | None = None,
    graph: GraphWriter | None = None,
) -> Ingest:
    """The applier over the given or configured parts. The local model loads here."""
    channels: list[grpc.aio.Channel] = []

    def channel(target: str) -> grpc.aio.Channel:
        opened = open_channel(target, max_message_bytes=settings.max_message_bytes)
        channels.append(opened)
        return opened

    applier = Applier(
        embedder if embedder is not None else make_embedder(settings.embed),
        vector if vector is not None else VectorClient(channel(settings.vector_addr)),
        lexical if lexical is not None else LexicalClient(channel(settings.lexical_addr)),
        graph if graph is not None else GraphClient(channel(settings.graph_addr)),
        Timeouts(embed_s=settings.embed_timeout_s, write_s=settings.write_timeout_s),
    )
    return Ingest(applier=applier, channels=channels)
