"""Runs the graph gRPC server (health, reflection and error mapping come from the platform)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import grpc

from engram.graph.v1 import graph_pb2_grpc
from engram_graph.bootstrap import build_service
from engram_graph.handlers import SERVICE_NAME, GraphHandlers
from engram_graph.service import GraphService
from engram_platform import grpc_server
from engram_platform.settings import ServiceSettings

if TYPE_CHECKING:
    from engram_graph.config import Settings

NAME = "graph"


def registrar(service: GraphService) -> grpc_server.Register:
    handlers = GraphHandlers(service)

    def register(server: grpc.aio.Server) -> None:
        graph_pb2_grpc.add_GraphServiceServicer_to_server(handlers, server)

    return register


async def start(settings: ServiceSettings, service: GraphService) -> grpc_server.RunningServer:
    """In-process server (tests, benchmarks): port 0 in settings picks a free port."""
    return await grpc_server.start_server(NAME, settings, registrar(service), [SERVICE_NAME])


async def serve(settings: Settings) -> None:
    """Serve until SIGINT/SIGTERM, then close the store (ladybug checkpoints and unlocks)."""
    service = build_service(settings)
    await grpc_server.serve(
        NAME, settings, registrar(service), [SERVICE_NAME], on_stop=service.close
    )
