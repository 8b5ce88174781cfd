"""RPC durations by method and status on both sides of a call, the process metrics, and
their Prometheus names as /metrics serves them."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import urllib.request
from collections import Counter
from collections.abc import AsyncIterator
from concurrent import futures
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from opentelemetry.proto.collector.metrics.v1 import (
    metrics_service_pb2,
    metrics_service_pb2_grpc,
)
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from engram.gateway.v1 import gateway_pb2, gateway_pb2_grpc
from engram.scoring.v1 import scoring_pb2, scoring_pb2_grpc
from engram_core.errors import InvalidArgument
from engram_platform.grpc_client import Channels, open_channel
from engram_platform.grpc_server import RunningServer, start_server
from engram_platform.metrics import make_meter_provider, serve_prometheus
from engram_platform.rpc_metrics import rpc_attributes
from engram_platform.settings import MetricsSettings, ServiceSettings
from engram_testing.metrics import collected

RANK = "/engram.scoring.v1.ScoringService/Rank"


class _Servicer(scoring_pb2_grpc.ScoringServiceServicer):
    def __init__(self) -> None:
        self.slow_started = asyncio.Event()
        self.slow_cancelled = asyncio.Event()

    async def Rank(  # noqa: N802 - generated name
        self, request: scoring_pb2.RankRequest, context: object
    ) -> scoring_pb2.RankResponse:
        if request.query == "slow":
            self.slow_started.set()
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                self.slow_cancelled.set()
                raise
        if request.query == "bad":
            raise InvalidArgument("limit", "must be in 1..1000")
        if request.query == "boom":
            raise RuntimeError("unexpected")
        return scoring_pb2.RankResponse()


@pytest.fixture
def servicer() -> _Servicer:
    return _Servicer()


@pytest.fixture
async def server(servicer: _Servicer) -> AsyncIterator[RunningServer]:
    running = await start_server(
        "scoring",
        ServiceSettings(port=0),
        lambda s: scoring_pb2_grpc.add_ScoringServiceServicer_to_server(servicer, s),
        [scoring_pb2.DESCRIPTOR.services_by_name["ScoringService"].full_name],
    )
    yield running
    await running.stop(0)


def _counts(points: list[Any]) -> Counter[tuple[str, str, str, int]]:
    counts: Counter[tuple[str, str, str, int]] = Counter()
    for point in points:
        a = point.attributes
        key = (a["rpc.system"], a["rpc.service"], a["rpc.method"], a["rpc.grpc.status_code"])
        counts[key] += point.count
    return counts


def _rank(code: grpc.StatusCode) -> tuple[str, str, str, int]:
    return ("grpc", "engram.scoring.v1.ScoringService", "Rank", code.value[0])


async def _rank_calls(channel: grpc.aio.Channel, queries: list[str]) -> None:
    stub = scoring_pb2_grpc.ScoringServiceStub(channel)
    for query in queries:
        with contextlib.suppress(grpc.aio.AioRpcError):
            await stub.Rank(scoring_pb2.RankRequest(query=query))


async def test_the_server_records_every_rpc_by_method_and_status(
    server: RunningServer, metric_reader: InMemoryMetricReader
) -> None:
    # A plain channel: what is recorded is the server's alone.
    async with grpc.aio.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        await _rank_calls(channel, ["ok", "bad", "ok", "boom"])
        await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())

    points = collected(metric_reader)
    assert "rpc.client.duration" not in points
    assert _counts(points["rpc.server.duration"]) == {
        _rank(grpc.StatusCode.OK): 2,
        _rank(grpc.StatusCode.INVALID_ARGUMENT): 1,
        _rank(grpc.StatusCode.INTERNAL): 1,
    }  # and no health checks: probes would drown the service's own calls


async def test_the_client_records_every_call_with_the_status_it_ended_with(
    server: RunningServer, metric_reader: InMemoryMetricReader
) -> None:
    async with open_channel(f"127.0.0.1:{server.port}") as channel:
        await _rank_calls(channel, ["ok", "bad"])
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        nobody = f"127.0.0.1:{unused.getsockname()[1]}"
        async with open_channel(nobody) as channel:
            await _rank_calls(channel, ["ok"])

    client = _counts(collected(metric_reader)["rpc.client.duration"])
    assert client == {
        _rank(grpc.StatusCode.OK): 1,
        _rank(grpc.StatusCode.INVALID_ARGUMENT): 1,
        _rank(grpc.StatusCode.UNAVAILABLE): 1,
    }


async def test_a_call_its_caller_gives_up_on_is_cancelled_and_recorded_so(
    server: RunningServer, servicer: _Servicer, metric_reader: InMemoryMetricReader
) -> None:
    # Waiting for the end of the call must not keep it running once nobody waits for it.
    async with open_channel(f"127.0.0.1:{server.port}") as channel:
        stub = scoring_pb2_grpc.ScoringServiceStub(channel)
        call = asyncio.ensure_future(stub.Rank(scoring_pb2.RankRequest(query="slow")))
        await asyncio.wait_for(servicer.slow_started.wait(), 15)
        call.cancel()
        await asyncio.wait_for(servicer.slow_cancelled.wait(), 15)

    points = collected(metric_reader)
    assert _counts(points["rpc.client.duration"]) == {_rank(grpc.StatusCode.CANCELLED): 1}
    assert _counts(points["rpc.server.duration"]) == {_rank(grpc.StatusCode.CANCELLED): 1}


async def test_a_client_stream_is_recorded_once_it_ends(
    metric_reader: InMemoryMetricReader,
) -> None:
    # StoreStream is the one client-streaming RPC; nobody serves it here, so it fails.
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        async with open_channel(f"127.0.0.1:{unused.getsockname()[1]}") as channel:
            stub = gateway_pb2_grpc.MemoryServiceStub(channel)
            with pytest.raises(grpc.aio.AioRpcError):
                await stub.StoreStream(iter([gateway_pb2.StoreRequest()]))

    (point,) = collected(metric_reader)["rpc.client.duration"]
    assert dict(point.attributes) == rpc_attributes(
        "/engram.gateway.v1.MemoryService/StoreStream", grpc.StatusCode.UNAVAILABLE
    )


async def test_process_metrics_count_cpu_memory_and_the_channels_held_open() -> None:
    reader = InMemoryMetricReader()
    provider = make_meter_provider("scoring", [reader])
    before = _process_values(reader)["engram.grpc.channels.open"]
    channels = Channels(1024)
    channels.open("127.0.0.1:1")
    channels.open("127.0.0.1:2")
    opened = _process_values(reader)
    await channels.close()
    closed = _process_values(reader)
    provider.shutdown()

    assert opened["engram.grpc.channels.open"] == before + 2
    assert closed["engram.grpc.channels.open"] == before
    assert opened["process.memory.usage"] > 10_000_000  # a Python process with grpc loaded
    assert opened["process.cpu.time user"] > 0


def _process_values(reader: InMemoryMetricReader) -> dict[str, float]:
    values: dict[str, float] = {}
    for name, points in collected(reader).items():
        for point in points:
            mode = point.attributes.get("cpu.mode")
            values[f"{name} {mode}" if mode else name] = point.value
    return values


def test_prometheus_serves_them_under_the_documented_names() -> None:
    settings = ServiceSettings(metrics=MetricsSettings(port=0))
    reader, http = serve_prometheus("scoring", settings)
    provider = make_meter_provider("scoring", [reader])
    try:
        duration = provider.get_meter("test").create_histogram("rpc.server.duration", unit="ms")
        duration.record(3.0, rpc_attributes(RANK, grpc.StatusCode.NOT_FOUND))
        url = f"http://127.0.0.1:{http.server_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as reply:
            text = reply.read().decode()
    finally:
        provider.shutdown()
        http.shutdown()

    assert (
        'rpc_server_duration_milliseconds_count{rpc_grpc_status_code="5",'
        'rpc_method="Rank",rpc_service="engram.scoring.v1.ScoringService",rpc_system="grpc"} 1.0'
    ) in text
    assert 'process_cpu_time_seconds_total{cpu_mode="user"}' in text
    assert "\nprocess_memory_usage_bytes " in text
    assert "\nengram_grpc_channels_open " in text
    assert 'service_name="engram-scoring"' in text  # target_info
    assert "python_gc" not in text  # prometheus_client's own collectors stay out


def test_a_taken_metrics_port_stops_the_start_naming_the_setting() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        settings = ServiceSettings(metrics=MetricsSettings(port=taken.getsockname()[1]))
        with pytest.raises(OSError, match="ENGRAM_SCORING_METRICS__PORT"):
            serve_prometheus("scoring", settings)


class _Collector(metrics_service_pb2_grpc.MetricsServiceServicer):
    def __init__(self) -> None:
        self.requests: list[metrics_service_pb2.ExportMetricsServiceRequest] = []

    def Export(  # noqa: N802 (the generated servicer's name)
        self, request: metrics_service_pb2.ExportMetricsServiceRequest, context: Any
    ) -> metrics_service_pb2.ExportMetricsServiceResponse:
        self.requests.append(request)
        return metrics_service_pb2.ExportMetricsServiceResponse()


def test_otlp_pushes_them_to_the_collector_at_the_latest_at_exit() -> None:
    collector = _Collector()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(collector, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    code = (
        "from engram_platform.metrics import configure_metrics\n"
        "from engram_platform.settings import MetricsSettings, ServiceSettings\n"
        "configure_metrics('ingest', ServiceSettings(metrics=MetricsSettings(exporter='otlp')))\n"
    )
    env = {
        **os.environ,
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{port}",
        "OTEL_EXPORTER_OTLP_INSECURE": "true",
    }
    try:
        subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=60)
    finally:
        server.stop(None)

    resources = [r for request in collector.requests for r in request.resource_metrics]
    names = {m.name for r in resources for s in r.scope_metrics for m in s.metrics}
    assert {"process.cpu.time", "process.memory.usage", "engram.grpc.channels.open"} <= names
    service = {
        a.value.string_value
        for r in resources
        for a in r.resource.attributes
        if a.key == "service.name"
    }
    assert service == {"engram-ingest"}


@pytest.mark.parametrize(("allowed", "attributes"), [(False, "{}"), (True, "{'tenant': 'acme'}")])
def test_a_tenant_is_a_label_only_where_the_settings_allow_it(
    allowed: bool, attributes: str
) -> None:
    code = (
        "from engram_platform.metrics import configure_metrics, tenant_attributes\n"
        "from engram_platform.settings import MetricsSettings, ServiceSettings\n"
        f"metrics = MetricsSettings(exporter='none', tenant_label={allowed})\n"
        "configure_metrics('gateway', ServiceSettings(metrics=metrics))\n"
        "print(tenant_attributes('acme'))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == attributes
