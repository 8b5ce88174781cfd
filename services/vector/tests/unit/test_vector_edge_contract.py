"""The Qdrant Edge adapter passes the VectorIndex contract."""

from __future__ import annotations

import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from engram_testing.contracts.vector import DIM, VectorIndexContract
from engram_vector.adapters.edge import EdgeOptions, EdgeVectorIndex

# Every shard write is fsynced; on tmpfs the ~100 shards this suite creates take seconds,
# not a minute. Durability itself is covered by test_vector_edge.py on the real disk.
_SHM = Path("/dev/shm")


@pytest.fixture
def fast_dir(tmp_path: Path) -> Iterator[Path]:
    if not _SHM.is_dir():
        yield tmp_path
        return
    with tempfile.TemporaryDirectory(dir=_SHM, prefix="engram-vector-") as d:
        yield Path(d)


class TestEdgeVectorIndex(VectorIndexContract):
    @pytest.fixture
    async def index(self, fast_dir: Path) -> AsyncIterator[EdgeVectorIndex]:
        options = EdgeOptions(dimension=DIM, optimize_enabled=False)
        index = await EdgeVectorIndex.open(fast_dir / "vector", options)
        yield index
        await index.close()
