"""Ingest's wiring: what its settings turn into."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import trustme

from engram_core.lexicon import LexiconError
from engram_embed.hashing import HashingEmbedder
from engram_ingest import bootstrap
from engram_ingest.config import Settings
from engram_platform.lexicons import EntitySettings
from engram_platform.rotating_channel import RotatingChannel
from engram_platform.settings import ClientTlsSettings


async def test_the_store_clients_speak_tls_when_client_tls_is_set(tmp_path: Path) -> None:
    ca_file = tmp_path / "ca.pem"
    trustme.CA().cert_pem.write_to_path(str(ca_file))
    ingest = bootstrap.build(
        Settings(client_tls=ClientTlsSettings(ca_file=ca_file)),
        embedder=HashingEmbedder(dimension=8),
    )
    try:
        # Only a TLS channel follows rotated files; a plaintext one is grpc's own.
        assert isinstance(ingest.channels.open("127.0.0.1:1"), RotatingChannel)
    finally:
        await ingest.close()


def test_a_bad_lexicon_file_fails_the_start_naming_the_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "places.txt").write_text("Paris\nLyon | \n", encoding="utf-8")
    settings = Settings(entities=EntitySettings(lexicon_dir=tmp_path))
    with pytest.raises(LexiconError, match=re.escape(f"{tmp_path / 'places.txt'} line 2:")):
        bootstrap.build(settings, embedder=HashingEmbedder(dimension=8))
