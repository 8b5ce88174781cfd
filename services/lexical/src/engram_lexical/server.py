"""Runs the lexical gRPC server (health, reflection and error mapping come from the platform)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import grpc

from engram.lexical.v1 import lexical_pb2_grpc
from engram_lexical.bootstrap import build_service
from engram_lexical.handlers import SERVICE_NAME, LexicalHandlers
from engram_lexical.service import LexicalService
from engram_platform import grpc_server
from engram_platform.settings import ServiceSettings

if TYPE_CHECKING:
    from engram_lexical.config import Settings

NAME = "lexical"


def registrar(service: LexicalService) -> grpc_server.Register:
    handlers = LexicalHandlers(service)

    def register(server: grpc.aio.Server) -> None:
        lexical_pb2_grpc.add_LexicalServiceServicer_to_server(handlers, server)

    return register


async def start(settings: ServiceSettings, service: LexicalService) -> grpc_server.RunningServer:
    """In-process server (tests, benchmarks): port 0 in settings picks a free port."""
    return await grpc_server.start_server(NAME, settings, registrar(service), [SERVICE_NAME])


async def serve(settings: Settings) -> None:
    """Serve until SIGINT/SIGTERM, then close the index (its writer lock is released)."""
    service = build_service(settings)
    await grpc_server.serve(
        NAME, settings, registrar(service), [SERVICE_NAME], on_stop=service.close
    )
