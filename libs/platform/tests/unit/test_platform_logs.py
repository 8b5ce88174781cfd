"""Log lines: JSON fields, the active span's ids, the tenant, and the text switch."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider

from engram_platform import logs
from engram_platform.settings import ServiceSettings

LOGGER = "engram_test.logs"


@pytest.fixture
def tracer() -> Any:
    # An SDK provider of the test's own, not the global one: its spans are real and valid.
    return TracerProvider().get_tracer("test")


@pytest.fixture
def capture() -> Iterator[tuple[logging.Logger, io.StringIO, list[logging.Handler]]]:
    """A logger whose records go only to the handler(s) a test adds."""
    stream = io.StringIO()
    log = logging.getLogger(LOGGER)
    log.setLevel(logging.DEBUG)
    log.propagate = False
    added: list[logging.Handler] = []
    # No tenant from whatever this thread ran before.
    token = logs.set_tenant("")
    yield log, stream, added
    logs.reset_tenant(token)
    for handler in added:
        log.removeHandler(handler)
    log.propagate = True


def _attach(
    capture: tuple[logging.Logger, io.StringIO, list[logging.Handler]], fmt: logs.LogFormat
) -> tuple[logging.Logger, io.StringIO]:
    log, stream, added = capture
    handler = logs.make_handler("vector", fmt, stream)
    log.addHandler(handler)
    added.append(handler)
    return log, stream


def _lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_a_json_line_carries_the_active_spans_trace_and_span_ids(capture: Any, tracer: Any) -> None:
    log, stream = _attach(capture, "json")
    with tracer.start_as_current_span("recall") as span:
        log.warning("vector failed: %s", "timed out")
    ctx = span.get_span_context()
    [line] = _lines(stream)
    assert line["trace_id"] == f"{ctx.trace_id:032x}"
    assert line["span_id"] == f"{ctx.span_id:016x}"
    assert line["message"] == "vector failed: timed out"
    assert line["level"] == "WARNING"
    assert line["service"] == "engram-vector"
    assert line["logger"] == LOGGER
    assert line["timestamp"].endswith("+00:00")  # ISO 8601, UTC


def test_without_a_span_or_tenant_those_fields_are_left_out(capture: Any) -> None:
    log, stream = _attach(capture, "json")
    log.info("ready", extra={"port": 7})
    [line] = _lines(stream)
    assert list(line) == ["timestamp", "level", "service", "logger", "message", "port"]
    assert line["port"] == 7


def test_the_tenant_appears_while_set_and_only_then(capture: Any) -> None:
    log, stream = _attach(capture, "json")
    with logs.tenant_context("acme"):
        log.warning("inside")
    log.warning("after")
    inside, after = _lines(stream)
    assert inside["tenant"] == "acme"
    assert "tenant" not in after


def test_a_traceback_stays_inside_the_json_line(capture: Any) -> None:
    log, stream = _attach(capture, "json")
    try:
        raise KeyError("bug")
    except KeyError:
        log.exception("batch failed")
    [line] = _lines(stream)
    assert "KeyError: 'bug'" in line["exc_info"]


def test_text_lines_are_plain_with_the_context_as_tags(capture: Any, tracer: Any) -> None:
    log, stream = _attach(capture, "text")
    with logs.tenant_context("acme"), tracer.start_as_current_span("recall") as span:
        log.warning("vector failed")
    text = stream.getvalue()
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)
    trace_id = f"{span.get_span_context().trace_id:032x}"
    tags = f"[tenant=acme trace_id={trace_id} span_id="
    assert f"WARNING engram-vector {LOGGER}: vector failed {tags}" in text


def test_configure_logging_switches_the_root_handler_by_format(
    capsys: pytest.CaptureFixture[str],
) -> None:
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        with logs.tenant_context(""):  # whatever an earlier test left in this context
            logs.configure_logging("scoring", "info", "json")
            logging.getLogger(LOGGER).info("as json")
            logs.configure_logging("scoring", "info", "text")
            logging.getLogger(LOGGER).info("as text")
    finally:
        root.handlers[:], _ = saved
        root.setLevel(saved[1])
    first, second = capsys.readouterr().err.splitlines()
    assert json.loads(first)["message"] == "as json"
    assert second.endswith(f"INFO engram-scoring {LOGGER}: as text")


def test_an_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError, match="log_format"):
        logs.make_handler("vector", "xml")  # type: ignore[arg-type]


def test_the_format_setting_defaults_to_json_and_takes_text(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert ServiceSettings().log_format == "json"
    monkeypatch.setenv("ENGRAM_LOG_FORMAT", "text")
    assert ServiceSettings().log_format == "text"
    monkeypatch.setenv("ENGRAM_LOG_FORMAT", "yaml")
    with pytest.raises(ValueError, match="log_format"):
        ServiceSettings()
