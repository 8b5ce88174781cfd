"""Builds the ingest service from settings: the embedder(s) and the three store clients.

Tests pass their own embedder and writers; whatever is not passed is built from settings.
"""

from __future__ import annotations

from dataclasses import dataclass

from engram_clients.graph import GraphClient
from engram_clients.lexical import LexicalClient
from engram_clients.vector import VectorClient
from engram_core.ports import Embedder
from engram_core.relevance import DecaySettings
from engram_embed.factory import make_embedder
from engram_ingest.config import Settings
from engram_ingest.service import Applier, GraphWriter, TextWriter, Timeouts, VectorWriter
from engram_ingest.service.ahead import EmbedAhead
from engram_platform.grpc_client import Channels


@dataclass
class Ingest:
    applier: Applier
    channels: Channels

    async def close(self) -> None:
        await self.applier.close()
        await self.channels.close()


def build(
    settings: Settings,
    *,
    embedder: Embedder | None = None,
    next_embedder: Embedder | None = None,
    vector: VectorWriter | None = None,
    lexical: TextWriter | None = None,
    graph: GraphWriter | None = None,
) -> Ingest:
    """The applier over the given or configured parts. The local model(s) load here."""
    entity_rules = settings.entities.rules()  # a bad lexicon file fails here, first
    channels = Channels(settings.max_message_bytes, settings.client_tls)
    if next_embedder is None and settings.next_embed is not None:
        next_embedder = make_embedder(settings.next_embed)
    ahead = None
    if settings.embed_ahead:
        ahead = EmbedAhead(
            lambda: applier.embedder,
            settings.batch_size,
            max(settings.embed_ahead, settings.batch_size),
            settings.embed_timeout_s,
            held_max=settings.read_ahead,
        )
    applier = Applier(
        embedder if embedder is not None else make_embedder(settings.embed),
        vector if vector is not None else VectorClient(channels.open(settings.vector_addr)),
        lexical if lexical is not None else LexicalClient(channels.open(settings.lexical_addr)),
        graph if graph is not None else GraphClient(channels.open(settings.graph_addr)),
        Timeouts(embed_s=settings.embed_timeout_s, write_s=settings.write_timeout_s),
        DecaySettings() if settings.initial_relevance else None,
        next_embedder,
        write_bytes=settings.max_message_bytes // 2,
        endpoint_deliveries=settings.endpoint_deliveries,
        entity_rules=entity_rules,
        ahead=ahead,
    )
    return Ingest(applier=applier, channels=channels)
