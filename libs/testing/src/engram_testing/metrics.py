"""What the code under test records through the global meter provider, in memory.

The OpenTelemetry API lets a process install its meter provider once, and instruments
made before that (at import) follow it, so one provider is installed per test process,
with two readers: ``metric_reader`` reads deltas (each test sees only what happened since
it started, read once with `collected`), ``service_metrics`` reads cumulative values (a
test compares a value before and after what it does).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import metrics
from opentelemetry.sdk.metrics import Counter, Histogram, MeterProvider, ObservableCounter
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Gauge,
    HistogramDataPoint,
    InMemoryMetricReader,
    NumberDataPoint,
    Sum,
)
from opentelemetry.sdk.metrics.export import Histogram as HistogramData

Point = NumberDataPoint | HistogramDataPoint

_DELTA = InMemoryMetricReader(
    preferred_temporality={
        Counter: AggregationTemporality.DELTA,
        ObservableCounter: AggregationTemporality.DELTA,
        Histogram: AggregationTemporality.DELTA,
    }
)
_CUMULATIVE = InMemoryMetricReader()
_PROVIDER = MeterProvider(metric_readers=[_DELTA, _CUMULATIVE])


def _install() -> None:
    if metrics.get_meter_provider() is not _PROVIDER:
        metrics.set_meter_provider(_PROVIDER)
        if metrics.get_meter_provider() is not _PROVIDER:
            raise RuntimeError("another meter provider is installed in this test process")


@pytest.fixture
def metric_reader() -> InMemoryMetricReader:
    """The delta reader behind the global meter provider, emptied of what earlier tests
    recorded; read it once with `collected`."""
    _install()
    _DELTA.get_metrics_data()
    return _DELTA


def collected(reader: InMemoryMetricReader) -> dict[str, list[Any]]:
    """Collect once: each metric's data points by name (``.attributes``, and ``.count``
    and ``.sum`` of a histogram or ``.value`` of the others)."""
    points: dict[str, list[Any]] = defaultdict(list)
    data = reader.get_metrics_data()
    for resource in data.resource_metrics if data is not None else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                points[metric.name].extend(metric.data.data_points)
    return points


class ServiceMetrics:
    """The data points the process's instruments hold, by metric name (cumulative)."""

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
                    if metric.name == name and isinstance(metric.data, Sum | Gauge | HistogramData):
                        yield from metric.data.data_points


@pytest.fixture(scope="session")
def service_metrics() -> ServiceMetrics:
    _install()
    return ServiceMetrics(_CUMULATIVE)
