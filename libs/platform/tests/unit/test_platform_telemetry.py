"""Trace export: the OTLP exporter reaches a collector named by the standard variables."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from engram_platform.telemetry import make_provider


class _Collector(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self) -> None:
        self.requests: list[trace_service_pb2.ExportTraceServiceRequest] = []

    def Export(  # noqa: N802 (the generated servicer's name)
        self, request: trace_service_pb2.ExportTraceServiceRequest, context: Any
    ) -> trace_service_pb2.ExportTraceServiceResponse:
        self.requests.append(request)
        return trace_service_pb2.ExportTraceServiceResponse()


@pytest.fixture
def collector() -> Iterator[tuple[_Collector, int]]:
    servicer = _Collector()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield servicer, port
    server.stop(None)


def test_otlp_sends_spans_with_the_service_name_and_resource_attributes(
    collector: tuple[_Collector, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    servicer, port = collector
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_INSECURE", "true")
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "k8s.pod.name=gateway-0")
    provider = make_provider("gateway", "otlp")
    with provider.get_tracer("test").start_as_current_span("Recall"):
        pass
    assert provider.force_flush(10_000)
    provider.shutdown()

    spans = [
        (resource.resource, span.name)
        for request in servicer.requests
        for resource in request.resource_spans
        for scope in resource.scope_spans
        for span in scope.spans
    ]
    assert [name for _, name in spans] == ["Recall"]
    attributes = {a.key: a.value.string_value for a in spans[0][0].attributes}
    assert attributes["service.name"] == "engram-gateway"
    assert attributes["k8s.pod.name"] == "gateway-0"


@pytest.mark.parametrize("exporter", ["none", "console"])
def test_other_exporters_send_nothing_over_otlp(
    exporter: str, collector: tuple[_Collector, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    servicer, port = collector
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{port}")
    provider = make_provider("vector", exporter)
    with provider.get_tracer("test").start_as_current_span("Search"):
        pass
    assert provider.force_flush(10_000)
    provider.shutdown()
    assert servicer.requests == []


def test_unknown_exporter_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="tracing: unknown exporter 'jaeger'"):
        make_provider("vector", "jaeger")
