"""Builds the access tracker from settings: the three store clients.

Tests pass their own stores; whatever is not passed is built from settings.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import grpc

from engram_clients.graph import GraphClient
from engram_clients.lexical import LexicalClient
from engram_clients.vector import VectorClient
from engram_consolidate.config import Settings
from engram_consolidate.service import AccessStore, AccessTracker, AccessWriter
from engram_platform.grpc_client import open_channel


@dataclass
class Consolidate:
    tracker: AccessTracker
    channels: list[grpc.aio.Channel] = field(default_factory=list)

    async def close(self) -> None:
        for channel in self.channels:
            await channel.close()


def build(
    settings: Settings,
    *,
    vector: AccessStore | None = None,
    lexical: AccessWriter | None = None,
    graph: AccessWriter | None = None,
) -> Consolidate:
    channels: list[grpc.aio.Channel] = []

    def channel(target: str) -> grpc.aio.Channel:
        opened = open_channel(target, max_message_bytes=settings.max_message_bytes)
        channels.append(opened)
        return opened

    tracker = AccessTracker(
        vector if vector is not None else VectorClient(channel(settings.vector_addr)),
        lexical if lexical is not None else LexicalClient(channel(settings.lexical_addr)),
        graph if graph is not None else GraphClient(channel(settings.graph_addr)),
        write_timeout_s=settings.write_timeout_s,
        read_chunk=settings.read_chunk,
    )
    return Consolidate(tracker=tracker, channels=channels)
