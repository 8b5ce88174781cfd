"""Runs the vector gRPC server (health, reflection and error mapping come from the platform)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import grpc

from engram.vector.v1 import vector_pb2_grpc
from engram_platform import grpc_server
from engram_platform.settings import ServiceSettings
from engram_vector.bootstrap import build_service
from engram_vector.handlers import SERVICE_NAME, VectorHandlers
from engram_vector.service import VectorService

if TYPE_CHECKING:
    from engram_vector.config import Settings

NAME = "vector"


def registrar(service: VectorService) -> grpc_server.Register:
    handlers = VectorHandlers(service)

    def register(server: grpc.aio.Server) -> None:
        vector_pb2_grpc.add_VectorServiceServicer_to_server(handlers, server)

    return register


async def start(settings: ServiceSettings, service: VectorService) -> grpc_server.RunningServer:
    """In-process server (tests, benchmarks): port 0 in settings picks a free port."""
    return await grpc_server.start_server(NAME, settings, registrar(service), [SERVICE_NAME])


async def serve(settings: Settings) -> None:
    service = await build_service(settings)
    try:
        await grpc_server.serve(NAME, settings, registrar(service), [SERVICE_NAME])
    finally:
        await service.close()
