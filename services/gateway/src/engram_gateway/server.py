"""Runs the gateway's gRPC server (health, reflection, error mapping come from the platform)."""

from __future__ import annotations

import grpc

from engram.gateway.v1 import gateway_pb2_grpc
from engram_gateway.auth import Authenticator
from engram_gateway.bootstrap import build_authenticator, open_gateway
from engram_gateway.config import Settings
from engram_gateway.handlers import SERVICE_NAME, MemoryHandlers
from engram_gateway.service import Gateway
from engram_platform import grpc_server

NAME = "gateway"


def registrar(gateway: Gateway, auth: Authenticator, settings: Settings) -> grpc_server.Register:
    handlers = MemoryHandlers(gateway, auth, settings.default_deadline_s, settings.max_stream)

    def register(server: grpc.aio.Server) -> None:
        gateway_pb2_grpc.add_MemoryServiceServicer_to_server(handlers, server)

    return register


async def start(
    settings: Settings, gateway: Gateway, auth: Authenticator
) -> grpc_server.RunningServer:
    """In-process server (tests): port 0 in settings picks a free port."""
    return await grpc_server.start_server(
        NAME, settings, registrar(gateway, auth, settings), [SERVICE_NAME]
    )


async def serve(settings: Settings) -> None:
    auth = build_authenticator(settings)
    gateway, close = await open_gateway(settings)
    try:
        await grpc_server.serve(
            NAME, settings, registrar(gateway, auth, settings), [SERVICE_NAME], on_stop=close
        )
    except BaseException:
        await close()
        raise
