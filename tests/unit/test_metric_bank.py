"""serve's metric bank sends what the SDK's instruments would have sent, from the same reports.

:class:`BudgetMetrics` on an SDK meter provider (an in-memory reader) and on a
:class:`MetricBank` get the same trace reports; every metric (name, unit, description,
kind, temporality) and every point (attributes, count, sum, min, max, buckets, value)
must be the same, cumulative and delta.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from opentelemetry.sdk.metrics import Counter, Histogram, MeterProvider, ObservableCounter
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    InMemoryMetricReader,
    MetricExporter,
    MetricExportResult,
    MetricsData,
)
from opentelemetry.sdk.metrics.export import Histogram as HistogramData
from opentelemetry.sdk.resources import Resource

from latency_budget._core.report import TraceReport
from latency_budget._sdk_internals import preferred_temporality
from latency_budget.export import BudgetMetrics
from latency_budget.export._bank import MAX_SERIES, MetricBank, MetricPusher

from .helpers import at, op, pipeline

BUDGETS = """
version: 1
total_ms: 1200
first_token_ms: 900
stages:
  retrieval: {budget_ms: 100}
  model_call: {budget_ms: 800, first_token_ms: 300, severity: warn}
  tool_calls: {budget_ms: 50}
"""

DELTA = {Counter: AggregationTemporality.DELTA, Histogram: AggregationTemporality.DELTA}
DELTA_ALL = {**DELTA, ObservableCounter: AggregationTemporality.DELTA}


def _reports(rounds: int, offset_ms: int = 0) -> list[TraceReport]:
    """Requests over and within budgets: violations of each kind, hints, stages on and off the critical path."""
    p = pipeline(BUDGETS)
    for i in range(rounds):
        base = offset_ms + i * 3000
        slow = p.start("request", base)
        p.run("retrieve", base, base + 45 + i, parent=slow, attributes=op("retrieval"))
        p.run("retrieve", base + 10, base + 180, parent=slow, attributes=op("retrieval"))
        chat = {**op("chat"), "gen_ai.response.time_to_first_chunk": 0.2 + i / 10}
        p.run("chat", base + 180, base + 1300 + 7 * i, parent=slow, attributes=chat)
        for call in range(3):
            start = base + 1300 + 7 * i + call * 60
            p.run("tool", start, start + 55, parent=slow, attributes=op("execute_tool"))
        slow.end(end_time=at(base + 1500 + 7 * i))
        fast = p.start("request", base + 2000)
        p.run("retrieve", base + 2000, base + 2050, parent=fast, attributes=op("retrieval"))
        fast.end(end_time=at(base + 2150 + i))
    return p.reports


def _points(data: MetricsData | None) -> dict[str, Any]:
    """name -> (unit, description, kind, temporality, {attributes: values}): everything but timestamps."""
    assert data is not None
    out: dict[str, Any] = {}
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            assert scope.scope.name == "latency_budget"
            for metric in scope.metrics:
                points: dict[frozenset[tuple[str, object]], tuple[object, ...]] = {}
                for point in metric.data.data_points:
                    key = frozenset((point.attributes or {}).items())
                    if isinstance(metric.data, HistogramData):
                        values: tuple[object, ...] = (
                            point.count,  # type: ignore[union-attr]
                            point.sum,  # type: ignore[union-attr]
                            point.min,  # type: ignore[union-attr]
                            point.max,  # type: ignore[union-attr]
                            tuple(point.bucket_counts),  # type: ignore[union-attr]
                            tuple(point.explicit_bounds),  # type: ignore[union-attr]
                        )
                    else:
                        values = (point.value,)  # type: ignore[union-attr]
                    points[key] = values
                out[metric.name] = (
                    metric.unit,
                    metric.description,
                    type(metric.data).__name__,
                    metric.data.aggregation_temporality,
                    getattr(metric.data, "is_monotonic", None),
                    points,
                )
    return out


def _both(
    preferred: dict[type, AggregationTemporality],
) -> tuple[InMemoryMetricReader, BudgetMetrics, MetricBank, BudgetMetrics]:
    reader = InMemoryMetricReader(preferred_temporality=preferred)  # type: ignore[arg-type]
    sdk = BudgetMetrics(MeterProvider(metric_readers=[reader]))
    bank = MetricBank(Resource.create({}), lambda kind: preferred.get(kind, AggregationTemporality.CUMULATIVE))
    return reader, sdk, bank, BudgetMetrics(bank=bank)


def test_the_bank_sends_what_the_sdk_would_cumulative() -> None:
    reports = _reports(6)
    reader, sdk, bank, banked = _both({})
    for report in reports:
        sdk(report)
        banked(report)
    expected = _points(reader.get_metrics_data())
    assert set(expected) == {
        "latency_budget.stage.duration",
        "latency_budget.stage.critical_duration",
        "latency_budget.violations",
        "latency_budget.hint.potential_savings",
        "latency_budget.trace.duration",
        "latency_budget.requests",
    }
    assert _points(bank.collect()) == expected
    # Cumulative: a second collection repeats the first, with what came since added.
    for report in reports[:3]:
        sdk(report)
        banked(report)
    assert _points(bank.collect()) == _points(reader.get_metrics_data())


@pytest.mark.parametrize("preferred", [DELTA, DELTA_ALL], ids=["lowmemory", "delta"])
def test_the_bank_sends_what_the_sdk_would_delta(preferred: dict[type, AggregationTemporality]) -> None:
    reader, sdk, bank, banked = _both(preferred)
    first, second = _reports(4), _reports(2, offset_ms=7)
    for report in first:
        sdk(report)
        banked(report)
    assert _points(bank.collect()) == _points(reader.get_metrics_data())
    for report in second:
        sdk(report)
        banked(report)
    assert _points(bank.collect()) == _points(reader.get_metrics_data())
    rest = bank.collect()  # nothing since, but what stays cumulative (the observable counter, under lowmemory)
    if preferred is DELTA_ALL:
        assert rest is None
    else:
        assert set(_points(rest)) == {"latency_budget.requests"}


def test_bucket_edges_min_max_and_dropped_values_as_the_sdk() -> None:
    values = [0.0, 5.0, 5.000001, 9.999, 10.0, 59_999.0, 60_000.0, 60_000.5, 1e12, -1.0, 0.25]
    reader = InMemoryMetricReader()
    bounds = (5.0, 10.0, 60_000.0)
    histogram = (
        MeterProvider(metric_readers=[reader])
        .get_meter("latency_budget")
        .create_histogram("h", unit="ms", description="d", explicit_bucket_boundaries_advisory=bounds)
    )
    bank = MetricBank(Resource.create({}), lambda kind: AggregationTemporality.CUMULATIVE)
    banked = bank.histogram("h", "ms", "d", bounds)
    for value in values:
        histogram.record(value, {"a": "x"})
        banked.record(value, {"a": "x"})
    banked.record(math.nan, {"a": "x"})  # never a duration; dropped rather than poisoning the sum
    expected = _points(reader.get_metrics_data())["h"]
    got = _points(bank.collect())["h"]
    assert got == expected
    (point,) = got[-1].values()
    assert point[0] == 10  # -1 dropped, as the SDK drops it (with a warning)
    assert point[1] == pytest.approx(1e12 + 180_029.749001)
    assert point[2:5] == (0.0, 1e12, (3, 3, 2, 2))  # upper bounds inclusive: 5 and 10 in the first two


def test_series_past_the_limit_share_the_overflow_series() -> None:
    bank = MetricBank(Resource.create({}), lambda kind: AggregationTemporality.CUMULATIVE)
    histogram = bank.histogram("h", "ms", "d", (1.0,))
    counter = bank.counter("c", "1", "d")
    for i in range(MAX_SERIES + 10):
        histogram.record(2.0, {"k": str(i)})
        counter.add(1, {"k": str(i)})
    points = _points(bank.collect())
    for name in ("h", "c"):
        series = points[name][-1]
        assert len(series) == MAX_SERIES
        overflow = series[frozenset({("otel.metric.overflow", True)})]
        assert overflow[0] == 11  # the 1,999 first series are kept; the 11 after them share one


class _Recording(MetricExporter):
    def __init__(self, result: MetricExportResult = MetricExportResult.SUCCESS) -> None:
        super().__init__(preferred_temporality={Histogram: AggregationTemporality.DELTA})
        self.exported: list[MetricsData] = []
        self.shut = False
        self._result = result

    def export(self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: object) -> MetricExportResult:
        self.exported.append(metrics_data)
        return self._result

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: object) -> None:
        self.shut = True


def test_the_pusher_exports_what_is_collected_and_the_rest_at_shutdown() -> None:
    exporter = _Recording()
    temporality = preferred_temporality(exporter)
    assert temporality(Histogram) is AggregationTemporality.DELTA
    assert temporality(Counter) is AggregationTemporality.CUMULATIVE
    bank = MetricBank(Resource.create({}), temporality)
    histogram = bank.histogram("h", "ms", "d", (1.0,))
    pusher = MetricPusher(bank, exporter, interval_s=3600)  # the timer never fires in this test
    assert pusher.export()  # nothing recorded: nothing sent
    assert exporter.exported == []
    histogram.record(0.5, {})
    assert pusher.export()
    histogram.record(2.0, {})
    assert pusher.shutdown(5.0)
    assert exporter.shut
    counts = [_points(data)["h"][-1][frozenset()][0] for data in exporter.exported]
    assert counts == [1, 1]  # delta: each export holds what came since the one before


def test_a_failed_export_is_reported() -> None:
    exporter = _Recording(MetricExportResult.FAILURE)
    bank = MetricBank(Resource.create({}), preferred_temporality(exporter))
    bank.counter("c", "1", "d").add(1, {})
    pusher = MetricPusher(bank, exporter, interval_s=3600)
    assert not pusher.shutdown(5.0)
    assert len(exporter.exported) == 1
