"""The server interceptor maps catalog errors to status codes; the client maps them back."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from grpc_status import rpc_status

from engram.scoring.v1 import scoring_pb2, scoring_pb2_grpc
from engram_core.errors import InvalidArgument, NotFound, ResourceExhausted
from engram_platform.errors import RETRY_AFTER_KEY
from engram_platform.grpc_client import channel_options, open_channel, translate_errors
from engram_platform.grpc_server import RunningServer, start_server
from engram_platform.settings import ServiceSettings
from engram_testing import waiting


class _Servicer(scoring_pb2_grpc.ScoringServiceServicer):
    async def Rank(  # noqa: N802 - generated name
        self, request: scoring_pb2.RankRequest, context: object
    ) -> scoring_pb2.RankResponse:
        if request.query == "bad":
            raise InvalidArgument("limit", "must be in 1..1000")
        if request.query == "missing":
            raise NotFound("memory 42 not found")
        if request.query == "busy":
            raise ResourceExhausted("queue full; retry after 0.250s", retry_after_s=0.2501)
        if request.query == "boom":
            raise RuntimeError("secret stack detail")
        return scoring_pb2.RankResponse()


@pytest.fixture
async def server() -> AsyncIterator[RunningServer]:
    running = await start_server(
        "scoring",
        ServiceSettings(port=0),
        lambda s: scoring_pb2_grpc.add_ScoringServiceServicer_to_server(_Servicer(), s),
        [scoring_pb2.DESCRIPTOR.services_by_name["ScoringService"].full_name],
    )
    yield running
    await running.stop(0)


async def test_invalid_argument_names_the_field(server: RunningServer) -> None:
    async with open_channel(f"127.0.0.1:{server.port}") as channel:
        stub = scoring_pb2_grpc.ScoringServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as raw:
            await stub.Rank(scoring_pb2.RankRequest(query="bad"))
        assert raw.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "limit" in (raw.value.details() or "")
        with pytest.raises(InvalidArgument) as caught:
            async with translate_errors("scoring"):
                await stub.Rank(scoring_pb2.RankRequest(query="bad"))
        assert caught.value.field == "limit"
        assert caught.value.reason == "must be in 1..1000"


async def test_invalid_argument_carries_the_standard_bad_request_detail(
    server: RunningServer,
) -> None:
    async with open_channel(f"127.0.0.1:{server.port}") as channel:
        stub = scoring_pb2_grpc.ScoringServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as raw:
            await stub.Rank(scoring_pb2.RankRequest(query="bad"))
    # grpcio-status's reader checks the detail's code and message match the call's own.
    status = rpc_status.from_call(raw.value)
    assert status is not None
    assert len(status.details) == 1
    bad = error_details_pb2.BadRequest()
    assert status.details[0].Unpack(bad)
    assert [(v.field, v.description) for v in bad.field_violations] == [
        ("limit", "must be in 1..1000")
    ]


async def test_resource_exhausted_carries_when_to_retry(server: RunningServer) -> None:
    async with open_channel(f"127.0.0.1:{server.port}") as channel:
        stub = scoring_pb2_grpc.ScoringServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as raw:
            await stub.Rank(scoring_pb2.RankRequest(query="busy"))
        assert raw.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert (RETRY_AFTER_KEY, "251") in list(raw.value.trailing_metadata() or ())
        with pytest.raises(ResourceExhausted) as caught:
            async with translate_errors("scoring"):
                await stub.Rank(scoring_pb2.RankRequest(query="busy"))
        assert caught.value.retry_after_s == 0.251


async def test_not_found_and_internal_hide_details(server: RunningServer) -> None:
    async with open_channel(f"127.0.0.1:{server.port}") as channel:
        stub = scoring_pb2_grpc.ScoringServiceStub(channel)
        with pytest.raises(NotFound):
            async with translate_errors("scoring"):
                await stub.Rank(scoring_pb2.RankRequest(query="missing"))
        with pytest.raises(grpc.aio.AioRpcError) as raw:
            await stub.Rank(scoring_pb2.RankRequest(query="boom"))
        assert raw.value.code() == grpc.StatusCode.INTERNAL
        assert "secret" not in (raw.value.details() or "")
        assert "ref" in (raw.value.details() or "")


async def test_health_reports_serving(server: RunningServer) -> None:
    async with open_channel(f"127.0.0.1:{server.port}") as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for name in ("", "engram.scoring.v1.ScoringService"):
            reply = await health.Check(health_pb2.HealthCheckRequest(service=name))
            assert reply.status == health_pb2.HealthCheckResponse.SERVING


async def test_reflection_lists_the_service(server: RunningServer) -> None:
    async with open_channel(f"127.0.0.1:{server.port}") as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        names: set[str] = set()
        async for reply in stub.ServerReflectionInfo(iter([request])):
            names |= {s.name for s in reply.list_services_response.service}
        assert {"engram.scoring.v1.ScoringService", "grpc.health.v1.Health"} <= names


async def test_oversized_message_is_refused() -> None:
    running = await start_server(
        "scoring",
        ServiceSettings(port=0, max_message_bytes=1024),
        lambda s: scoring_pb2_grpc.add_ScoringServiceServicer_to_server(_Servicer(), s),
        ["engram.scoring.v1.ScoringService"],
    )
    try:
        async with open_channel(f"127.0.0.1:{running.port}") as channel:
            stub = scoring_pb2_grpc.ScoringServiceStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as raw:
                await stub.Rank(scoring_pb2.RankRequest(query="x" * 4096))
            assert raw.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    finally:
        await running.stop(0)


class _Peers(scoring_pb2_grpc.ScoringServiceServicer):
    """Records the client address of every call."""

    def __init__(self) -> None:
        self.peers: list[str] = []

    async def Rank(  # noqa: N802 - generated name
        self, request: scoring_pb2.RankRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> scoring_pb2.RankResponse:
        self.peers.append(context.peer())
        return scoring_pb2.RankResponse()


async def _start_peers(settings: ServiceSettings) -> tuple[RunningServer, _Peers]:
    servicer = _Peers()
    running = await start_server(
        "scoring",
        settings,
        lambda s: scoring_pb2_grpc.add_ScoringServiceServicer_to_server(servicer, s),
        [],
    )
    return running, servicer


async def test_a_channel_spreads_its_calls_over_every_address_of_the_target() -> None:
    # What a headless Service's DNS name gives a client: several addresses behind one target.
    started = [await _start_peers(ServiceSettings(port=0)) for _ in range(2)]
    try:
        target = "ipv4:" + ",".join(f"127.0.0.1:{running.port}" for running, _ in started)
        async with open_channel(target) as channel:
            stub = scoring_pb2_grpc.ScoringServiceStub(channel)
            for _ in range(50):  # until both connections are up (pick-first never gets there)
                await stub.Rank(scoring_pb2.RankRequest(query="q"), wait_for_ready=True)
                if all(servicer.peers for _, servicer in started):
                    break
            for _, servicer in started:
                servicer.peers.clear()
            for _ in range(10):
                await stub.Rank(scoring_pb2.RankRequest(query="q"))
        assert [len(servicer.peers) for _, servicer in started] == [5, 5]
        # A plain host:port is one connection (pick first), as before.
        for _, servicer in started:
            servicer.peers.clear()
        async with open_channel(f"127.0.0.1:{started[0][0].port}") as channel:
            stub = scoring_pb2_grpc.ScoringServiceStub(channel)
            for _ in range(4):
                await stub.Rank(scoring_pb2.RankRequest(query="q"))
        assert len(set(started[0][1].peers)) == 1
    finally:
        for running, _ in started:
            await running.stop(0)


async def test_max_connection_age_makes_a_client_connect_again() -> None:
    running, servicer = await _start_peers(
        ServiceSettings(port=0, max_connection_age_s=0.3, grace_s=0.1)
    )
    try:
        async with open_channel(f"127.0.0.1:{running.port}") as channel:
            stub = scoring_pb2_grpc.ScoringServiceStub(channel)
            await stub.Rank(scoring_pb2.RankRequest(query="q"))
            await asyncio.sleep(1.0)
            await stub.Rank(scoring_pb2.RankRequest(query="q"), wait_for_ready=True)
        first, second = servicer.peers
        assert first != second  # a new connection: another client port
    finally:
        await running.stop(0)


async def test_without_a_connection_age_a_client_keeps_its_connection() -> None:
    running, servicer = await _start_peers(ServiceSettings(port=0))
    try:
        async with open_channel(f"127.0.0.1:{running.port}") as channel:
            stub = scoring_pb2_grpc.ScoringServiceStub(channel)
            await stub.Rank(scoring_pb2.RankRequest(query="q"))
            await asyncio.sleep(1.0)
            await stub.Rank(scoring_pb2.RankRequest(query="q"))
        first, second = servicer.peers
        assert first == second
    finally:
        await running.stop(0)


async def _answered(stub: scoring_pb2_grpc.ScoringServiceStub) -> bool:
    """Whether a call failing fast (no wait_for_ready) gets through."""
    try:
        await stub.Rank(scoring_pb2.RankRequest(query="q"), timeout=1)
    except grpc.aio.AioRpcError:
        return False
    return True


def test_a_balanced_target_tries_a_lost_connection_again_within_a_second() -> None:
    # gRPC's own backoff grows towards two minutes; a restarted replica would wait for it.
    balanced = dict(channel_options("ipv4:127.0.0.1:1,127.0.0.1:2", 1024))
    assert balanced["grpc.max_reconnect_backoff_ms"] == 1_000
    assert balanced["grpc.dns_min_time_between_resolutions_ms"] == 1_000
    assert balanced["grpc.lb_policy_name"] == "round_robin"
    plain = dict(channel_options("127.0.0.1:1", 1024))
    assert "grpc.lb_policy_name" not in plain  # one connection, made again on the next call
    assert "grpc.max_reconnect_backoff_ms" not in plain


async def test_a_balanced_target_uses_a_restarted_server() -> None:
    # A pod that restarts: the server goes away for a while and comes back on the address.
    running, _ = await _start_peers(ServiceSettings(port=0))
    port = running.port
    async with open_channel(f"ipv4:127.0.0.1:{port}") as channel:
        stub = scoring_pb2_grpc.ScoringServiceStub(channel)
        await stub.Rank(scoring_pb2.RankRequest(query="q"))
        await running.stop(0)
        await asyncio.sleep(3.0)  # reconnection attempts fail meanwhile and back off
        assert not await _answered(stub)
        running, _ = await _start_peers(ServiceSettings(port=port))
        try:
            await waiting.until(lambda: _answered(stub), timeout_s=5.0, interval_s=0.05)
        finally:
            await running.stop(0)
