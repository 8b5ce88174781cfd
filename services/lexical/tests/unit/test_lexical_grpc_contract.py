"""The TextIndex contract through the whole chain: engram_clients.LexicalClient → gRPC →
handlers → service → tantivy. Catches what a lossy proto mapping would drop."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from engram_clients.lexical import LexicalClient
from engram_lexical import server
from engram_lexical.bootstrap import build_service
from engram_lexical.config import Settings
from engram_platform.grpc_client import open_channel
from engram_testing.contracts.lexical import TextIndexContract


class TestLexicalOverGrpc(TextIndexContract):
    @pytest.fixture
    async def index(self, tmp_path: Path) -> AsyncIterator[LexicalClient]:
        # The contract sends a 20,000-character query; the service's default limit is 4,096.
        settings = Settings(port=0, data_dir=tmp_path, writer_heap_mb=20, max_query_chars=32_768)
        service = build_service(settings)
        running = await server.start(settings, service)
        channel = open_channel(f"127.0.0.1:{running.port}")
        try:
            yield LexicalClient(channel)
        finally:
            await channel.close()
            await running.stop(0)
            await service.close()
