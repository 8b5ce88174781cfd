"""OpenSearch fixtures shared by the lexical contract suites: each test gets its own index
prefix (so its own template, indices and alias), deleted afterwards."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
from opensearchpy import AsyncOpenSearch

from engram_lexical.adapters import opensearch_schema as schema


@pytest.fixture
def prefix() -> str:
    return f"engram-test-{uuid.uuid4().hex[:12]}"


@pytest.fixture
async def admin(opensearch_url: str, prefix: str) -> AsyncIterator[AsyncOpenSearch]:
    """A raw client for assertions and for removing the test's indices and template."""
    client = AsyncOpenSearch(hosts=[opensearch_url], timeout=30)
    yield client
    await client.indices.delete(index=f"{schema.alias_name(prefix)}-v*", ignore_unavailable=True)
    await client.indices.delete_index_template(name=schema.template_name(prefix), ignore=[404])
    await client.close()
