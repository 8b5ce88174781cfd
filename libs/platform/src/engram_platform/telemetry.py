"""OpenTelemetry set-up and W3C trace-context propagation over gRPC metadata and NATS headers."""

from __future__ import annotations

from collections.abc import Mapping

from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

_configured = False


def configure_tracing(service: str, exporter: str) -> None:
    """Install a tracer provider once per process. `exporter` is "none" or "console"."""
    global _configured
    if _configured:
        return
    provider = TracerProvider(resource=Resource.create({"service.name": f"engram-{service}"}))
    if exporter == "console":
        provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
    trace.set_tracer_provider(provider)
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
