"""OpenTelemetry set-up and W3C trace-context propagation over gRPC metadata and NATS headers."""

from __future__ import annotations

from collections.abc import Mapping

from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

EXPORTERS = ("none", "console", "otlp")
_configured = False


def make_provider(service: str, exporter: str) -> TracerProvider:
    """A tracer provider for ``engram-<service>`` sending spans to ``exporter``: "none"
    (kept in the process: trace context still propagates), "console", or "otlp" (OTLP over
    gRPC, configured by the standard variables: OTEL_EXPORTER_OTLP_ENDPOINT, default
    localhost:4317, OTEL_EXPORTER_OTLP_INSECURE, _HEADERS, _CERTIFICATE…). The resource also
    takes OTEL_RESOURCE_ATTRIBUTES (a pod's name and namespace, say)."""
    if exporter not in EXPORTERS:
        raise ValueError(f"tracing: unknown exporter {exporter!r}; one of {', '.join(EXPORTERS)}")
    provider = TracerProvider(resource=Resource.create({"service.name": f"engram-{service}"}))
    if exporter == "console":
        provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
    elif exporter == "otlp":
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return provider


def configure_tracing(service: str, exporter: str) -> None:
    """Install `make_provider`'s provider once per process; it flushes at exit."""
    global _configured
    if _configured:
        return
    trace.set_tracer_provider(make_provider(service, exporter))
    _configured = True


def tracer(name: str) -> trace.Tracer:
    return trace.get_tracer(name)


def annotate(name: str, value: float | int | str | bool) -> None:
    """Set an attribute on the current span (nothing when none is recording)."""
    trace.get_current_span().set_attribute(name, value)


def inject_context() -> dict[str, str]:
    """The current trace context as a carrier (traceparent, tracestate)."""
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return carrier


def extract_context(carrier: Mapping[str, str]) -> Context:
    return propagate.extract(dict(carrier))
