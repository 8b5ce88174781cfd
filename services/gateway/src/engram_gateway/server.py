"""Runs the gateway's gRPC server (health, reflection, error mapping come from the platform)."""

from __future__ import annotations

import grpc

from engram.gateway.v1 import admin_pb2_grpc, gateway_pb2_grpc
from engram_gateway.admin_handlers import ADMIN_SERVICE_NAME, AdminHandlers
from engram_gateway.auth import Authenticator
from engram_gateway.bootstrap import build_authenticator, open_gateway
from engram_gateway.config import Settings
from engram_gateway.handlers import SERVICE_NAME, MemoryHandlers
from engram_gateway.service import Gateway
from engram_platform import grpc_server

NAME = "gateway"


def registrar(gateway: Gateway, auth: Authenticator, settings: Settings) -> grpc_server.Register:
    handlers = MemoryHandlers(gateway, auth, settings.default_deadline_s, settings.max_stream)
    admin = gateway.admin

    def register(server: grpc.aio.Server) -> None:
        gateway_pb2_grpc.add_MemoryServiceServicer_to_server(handlers, server)
        if admin is not None:
            admin_pb2_grpc.add_AdminServiceServicer_to_server(
                AdminHandlers(
                    admin,
                    auth,
                    gateway.rate_limit,
                    settings.default_deadline_s,
                    gateway.dead_letters,
                    gateway.tenants,
                ),
                server,
            )

    return register


def service_names(gateway: Gateway) -> list[str]:
    return [SERVICE_NAME] + ([ADMIN_SERVICE_NAME] if gateway.admin is not None else [])


async def start(
    settings: Settings, gateway: Gateway, auth: Authenticator
) -> grpc_server.RunningServer:
    """In-process server (tests): port 0 in settings picks a free port."""
    return await grpc_server.start_server(
        NAME, settings, registrar(gateway, auth, settings), service_names(gateway)
    )


async def serve(settings: Settings) -> None:
    auth = build_authenticator(settings)
    gateway, close = await open_gateway(settings)
    try:
        await grpc_server.serve(
            NAME,
            settings,
            registrar(gateway, auth, settings),
            service_names(gateway),
            on_stop=close,
        )
    except BaseException:
        await close()
        raise
