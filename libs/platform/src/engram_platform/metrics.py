"""The process's meter provider: Prometheus ``/metrics`` on a port of its own, or OTLP push;
and the process metrics every service exports (CPU time, RSS, open channels)."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from wsgiref.simple_server import WSGIServer

import psutil  # type: ignore[import-untyped]  # no stubs in the lock
from opentelemetry import metrics
from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from prometheus_client import CollectorRegistry, start_http_server

from engram_platform.grpc_client import open_channels
from engram_platform.settings import ServiceSettings

log = logging.getLogger(__name__)
_configured = False
_tenant_label = False


def serve_prometheus(
    service: str, settings: ServiceSettings
) -> tuple[PrometheusMetricReader, WSGIServer]:
    """A reader behind ``/metrics`` on the metrics port (serving from a thread of its own);
    its own registry, so what is served is this process's OpenTelemetry metrics and
    nothing prometheus_client adds."""
    registry = CollectorRegistry(auto_describe=True)
    reader = PrometheusMetricReader(scope_info_enabled=False, registry=registry)
    host = settings.metrics.host or settings.host
    try:
        server, _ = start_http_server(settings.metrics.port, addr=host, registry=registry)
    except OSError as err:
        raise OSError(
            f"engram-{service}: metrics cannot listen on {host}:{settings.metrics.port} ({err}); "
            f"set ENGRAM_{service.upper()}_METRICS__PORT (0: a free port)"
        ) from err
    log.info("engram-%s metrics on http://%s:%d/metrics", service, host, server.server_port)
    return reader, server


def make_meter_provider(service: str, readers: Iterable[MetricReader]) -> MeterProvider:
    """A provider for ``engram-<service>`` (OTEL_RESOURCE_ATTRIBUTES adds to the resource)
    with the process metrics registered on it."""
    provider = MeterProvider(
        metric_readers=list(readers),
        resource=Resource.create({"service.name": f"engram-{service}"}),
    )
    observe_process(provider.get_meter("engram_platform.process"))
    return provider


def configure_metrics(service: str, settings: ServiceSettings) -> None:
    """Install the process's meter provider once, as ``settings.metrics`` says: Prometheus
    (served from here on), OTLP (OTEL_EXPORTER_OTLP_ENDPOINT; every
    OTEL_METRIC_EXPORT_INTERVAL ms, 60 s by default, and at exit) or none (nothing recorded).
    """
    global _configured, _tenant_label
    if _configured:
        return
    _configured = True
    _tenant_label = settings.metrics.tenant_label
    exporter = settings.metrics.exporter
    if exporter == "none":
        return
    if exporter == "prometheus":
        reader: MetricReader = serve_prometheus(service, settings)[0]
    else:
        reader = PeriodicExportingMetricReader(OTLPMetricExporter())
    metrics.set_meter_provider(make_meter_provider(service, [reader]))


def tenant_attributes(tenant: str) -> dict[str, str]:
    """``{"tenant": tenant}`` where the settings allow a tenant label, else nothing: the
    attributes of a per-tenant measurement."""
    return {"tenant": tenant} if _tenant_label else {}


def observe_process(meter: metrics.Meter) -> None:
    """``process.cpu.time`` (s, by ``cpu.mode``), ``process.memory.usage`` (RSS, bytes)
    and ``engram.grpc.channels.open``, read when the metrics are collected."""
    process = psutil.Process()

    def cpu(_: CallbackOptions) -> Iterable[Observation]:
        times = process.cpu_times()
        yield Observation(times.user, {"cpu.mode": "user"})
        yield Observation(times.system, {"cpu.mode": "system"})

    def rss(_: CallbackOptions) -> Iterable[Observation]:
        yield Observation(process.memory_info().rss)

    def channels(_: CallbackOptions) -> Iterable[Observation]:
        yield Observation(open_channels())

    meter.create_observable_counter(
        "process.cpu.time", [cpu], unit="s", description="CPU time this process used."
    )
    meter.create_observable_up_down_counter(
        "process.memory.usage", [rss], unit="By", description="Resident memory (RSS)."
    )
    meter.create_observable_up_down_counter(
        "engram.grpc.channels.open",
        [channels],
        unit="{channel}",
        description="gRPC channels this process holds open to the other services.",
    )
