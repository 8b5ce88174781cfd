"""The whole embedded stack (nats-server + seven services) on free ports, once per session."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import grpc
import pytest

from engram.gateway.v1 import gateway_pb2_grpc
from engram_platform.devstack import DevStack, start_stack


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevStack]:
    home = tmp_path_factory.mktemp("engram-home")
    # The model is built once by `make models` into the project's ENGRAM_HOME; the
    # stack's own state goes to a fresh temporary home.
    models = Path(os.environ.get("ENGRAM_HOME", ".engram")).resolve() / "models"
    extra = {
        "ENGRAM_VECTOR_EMBED__MODEL_DIR": str(models / "all-MiniLM-L6-v2"),
        "ENGRAM_INGEST_EMBED__MODEL_DIR": str(models / "all-MiniLM-L6-v2"),
    }
    running = start_stack(home, gateway_port=0, extra_env=extra)
    yield running
    running.stop()


@pytest.fixture
async def gateway(stack: DevStack) -> AsyncIterator[gateway_pb2_grpc.MemoryServiceStub]:
    async with grpc.aio.insecure_channel(stack.gateway_address) as channel:
        yield gateway_pb2_grpc.MemoryServiceStub(channel)
