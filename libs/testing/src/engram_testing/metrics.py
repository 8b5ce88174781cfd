"""What the code under test records through the global meter provider, in memory.

The OpenTelemetry API lets a process install its meter provider once, and instruments
made before that (at import) follow it, so the provider is installed once per test
process and every test reads only what happened since it started: counters and
histograms as deltas, up-down counters and gauges as their current value.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pytest
from opentelemetry import metrics
from opentelemetry.sdk.metrics import Counter, Histogram, MeterProvider, ObservableCounter
from opentelemetry.sdk.metrics.export import AggregationTemporality, InMemoryMetricReader

_READER = InMemoryMetricReader(
    preferred_temporality={
        Counter: AggregationTemporality.DELTA,
        ObservableCounter: AggregationTemporality.DELTA,
        Histogram: AggregationTemporality.DELTA,
    }
)
_PROVIDER = MeterProvider(metric_readers=[_READER])


@pytest.fixture
def metric_reader() -> InMemoryMetricReader:
    """The reader behind the global meter provider, emptied of what earlier tests recorded;
    read it once with `collected`."""
    if metrics.get_meter_provider() is not _PROVIDER:
        metrics.set_meter_provider(_PROVIDER)
        if metrics.get_meter_provider() is not _PROVIDER:
            raise RuntimeError("another meter provider is installed in this test process")
    _READER.get_metrics_data()
    return _READER


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
