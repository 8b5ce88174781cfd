"""Builds the access tracker from settings: the three store clients.

Tests pass their own stores; whatever is not passed is built from settings.
"""

from __future__ import annotations

from dataclasses import dataclass

from engram_clients.graph import GraphClient
from engram_clients.lexical import LexicalClient
from engram_clients.vector import VectorClient
from engram_consolidate.config import Settings
from engram_consolidate.service import AccessStore, AccessTracker, AccessWriter
from engram_platform.grpc_client import Channels


@dataclass
class Consolidate:
    tracker: AccessTracker
    channels: Channels

    async def close(self) -> None:
        await self.channels.close()


def build(
    settings: Settings,
    *,
    vector: AccessStore | None = None,
    lexical: AccessWriter | None = None,
    graph: AccessWriter | None = None,
) -> Consolidate:
    channels = Channels(settings.max_message_bytes)

    tracker = AccessTracker(
        vector if vector is not None else VectorClient(channels.open(settings.vector_addr)),
        lexical if lexical is not None else LexicalClient(channels.open(settings.lexical_addr)),
        graph if graph is not None else GraphClient(channels.open(settings.graph_addr)),
        write_timeout_s=settings.write_timeout_s,
        read_chunk=settings.read_chunk,
    )
    return Consolidate(tracker=tracker, channels=channels)
