"""Reading the services' own instruments in unit tests.

OpenTelemetry lets a process set its global MeterProvider once, and the services create
their instruments on the global meter at import. So ``service_metrics`` installs one
provider with an in-memory reader for the whole session; values are cumulative over it,
and a test compares a value before and after what it does.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import metrics
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    Gauge,
    Histogram,
    HistogramDataPoint,
    InMemoryMetricReader,
    NumberDataPoint,
    Sum,
)

Point = NumberDataPoint | HistogramDataPoint


class ServiceMetrics:
    """The data points the process's instruments hold, by metric name."""

    def __init__(self, reader: InMemoryMetricReader) -> None:
        self._reader = reader

    def points(self, name: str) -> list[Point]:
        return list(self._points(name))

    def value(self, name: str, **attributes: Any) -> float:
        """The sum over the points whose attributes include ``attributes``: a counter's
        total, a gauge's value, a histogram's number of recordings; 0 when none."""
        total = 0.0
        for point in self._points(name):
            attrs = dict(point.attributes or {})
            if any(attrs.get(k) != v for k, v in attributes.items()):
                continue
            total += point.count if isinstance(point, HistogramDataPoint) else point.value
        return total

    def _points(self, name: str) -> Iterator[Point]:
        data = self._reader.get_metrics_data()
        for resource in data.resource_metrics if data else ():
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name == name and isinstance(metric.data, Sum | Gauge | Histogram):
                        yield from metric.data.data_points


@pytest.fixture(scope="session")
def service_metrics() -> ServiceMetrics:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    metrics.set_meter_provider(provider)
    if metrics.get_meter_provider() is not provider:
        pytest.fail("another MeterProvider was installed first; the test cannot read metrics")
    return ServiceMetrics(reader)
