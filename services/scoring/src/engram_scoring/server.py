"""Runs the scoring gRPC server (health, reflection and error mapping come from the platform)."""

from __future__ import annotations

import grpc

from engram.scoring.v1 import scoring_pb2_grpc
from engram_platform import grpc_server
from engram_platform.settings import ServiceSettings
from engram_scoring.bootstrap import build_ranker
from engram_scoring.config import Settings
from engram_scoring.handlers import SERVICE_NAME, ScoringHandlers
from engram_scoring.service import Ranker

NAME = "scoring"


def registrar(ranker: Ranker) -> grpc_server.Register:
    handlers = ScoringHandlers(ranker)

    def register(server: grpc.aio.Server) -> None:
        scoring_pb2_grpc.add_ScoringServiceServicer_to_server(handlers, server)

    return register


async def start(settings: ServiceSettings, ranker: Ranker) -> grpc_server.RunningServer:
    """In-process server (tests, benchmarks): port 0 in settings picks a free port."""
    return await grpc_server.start_server(NAME, settings, registrar(ranker), [SERVICE_NAME])


async def serve(settings: Settings) -> None:
    ranker = build_ranker(settings)
    await grpc_server.serve(NAME, settings, registrar(ranker), [SERVICE_NAME])
