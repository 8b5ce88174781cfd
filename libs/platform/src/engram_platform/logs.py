"""Process-wide logging: one JSON object a line (or plain text for development), each
record carrying the service, the active span's trace and span ids and the tenant when
known, so a log line leads to its trace and a trace to its lines.

Messages name ids, counts and reasons, never memory content, queries or tokens: a line
is read by people who may see no tenant's data.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar, Token
from typing import Literal, TextIO

from opentelemetry import trace
from pythonjsonlogger.json import JsonFormatter

LogFormat = Literal["json", "text"]
FORMATS: tuple[LogFormat, ...] = ("json", "text")
# The fields a record gains from `ContextFilter`, in the order text lines show them.
CONTEXT_FIELDS = ("tenant", "trace_id", "span_id")

_tenant: ContextVar[str] = ContextVar("engram_log_tenant", default="")


def set_tenant(tenant: str) -> Token[str]:
    """Tag the log records of the current task (and the tasks it starts) with ``tenant``.

    A gRPC call runs in a task of its own, so a tenant set there ends with the call."""
    return _tenant.set(tenant)


def reset_tenant(token: Token[str]) -> None:
    _tenant.reset(token)


@contextmanager
def tenant_context(tenant: str) -> Iterator[None]:
    """``tenant`` on the records logged inside the block (a worker's event, say)."""
    token = _tenant.set(tenant)
    try:
        yield
    finally:
        _tenant.reset(token)


class ContextFilter(logging.Filter):
    """Adds ``service`` to every record, ``trace_id`` / ``span_id`` (W3C hex) while a span
    is active and ``tenant`` once one is set; a field that is not known is left out."""

    def __init__(self, service: str) -> None:
        super().__init__()
        self._service = f"engram-{service}"

    def filter(self, record: logging.LogRecord) -> bool:
        record.service = self._service
        span = trace.get_current_span().get_span_context()
        if span.is_valid:
            record.trace_id = trace.format_trace_id(span.trace_id)
            record.span_id = trace.format_span_id(span.span_id)
        if tenant := _tenant.get():
            record.tenant = tenant
        return True


class TextFormatter(logging.Formatter):
    """``<time> <LEVEL> engram-<service> <logger>: <message> [tenant=… trace_id=… span_id=…]``."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(service)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        if not hasattr(record, "service"):  # a handler without the filter
            record.service = "engram"
        line = super().format(record)
        tags = [f"{k}={v}" for k in CONTEXT_FIELDS if (v := getattr(record, k, None))]
        if not tags:
            return line
        # Tags go after the first line, so a traceback below it stays as it was.
        first, nl, rest = line.partition("\n")
        return f"{first} [{' '.join(tags)}]{nl}{rest}"


def json_formatter() -> JsonFormatter:
    """timestamp (ISO 8601, UTC), level, service, logger, message, then the context fields
    and any ``extra`` the call passed; a traceback as ``exc_info``."""
    return JsonFormatter(
        ["timestamp", "levelname", "service", "name", "message"],
        rename_fields={"levelname": "level", "name": "logger"},
        timestamp=True,
    )


def make_handler(
    service: str, fmt: LogFormat = "json", stream: TextIO | None = None
) -> logging.Handler:
    """A handler writing ``fmt`` lines with the context fields to ``stream`` (stderr)."""
    if fmt not in FORMATS:
        raise ValueError(f"log_format: unknown format {fmt!r}; one of {', '.join(FORMATS)}")
    handler = logging.StreamHandler(sys.stderr if stream is None else stream)
    handler.setFormatter(json_formatter() if fmt == "json" else TextFormatter())
    handler.addFilter(ContextFilter(service))
    return handler


def configure_logging(service: str, level: str = "INFO", fmt: LogFormat = "json") -> None:
    """Replace the root logger's handlers with one writing ``fmt`` lines to stderr."""
    logging.basicConfig(level=level.upper(), handlers=[make_handler(service, fmt)], force=True)
