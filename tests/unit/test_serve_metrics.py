"""serve's counters and gauges are one table (stats.METRICS): the type, the docs and every output agree with it.

The docs table between the two markers is :func:`render_doc_table`; after a change to
``METRICS``, regenerate it with ``python -m tests.unit.test_serve_metrics``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.metrics import MeterProvider, ObservableCounter
from opentelemetry.sdk.metrics.export import AggregationTemporality, InMemoryMetricReader, MetricsData
from opentelemetry.sdk.resources import Resource

from latency_budget._serve.exposition import (
    OTEL_PREFIX,
    exposition,
    observe,
    otel_name,
    prometheus_name,
    render_doc_table,
)
from latency_budget._serve.stats import COUNTERS, GAUGES, METRICS, Counters
from latency_budget.export._bank import MetricBank

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "collector-tier.md"
BEGIN = "<!-- serve metrics: generated from METRICS by tests/unit/test_serve_metrics.py -->"
END = "<!-- end of serve metrics -->"
# The OpenTelemetry API's instrument name syntax.
OTEL_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.\-/]{0,254}")
PROMETHEUS_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


def test_the_table_has_a_row_for_each_counter_and_gauge_of_the_type() -> None:
    """Counter's and Gauge's names are the table's rows of that kind, in order, each once."""
    assert tuple(row.name for row in METRICS if row.kind == "counter") == COUNTERS
    assert tuple(row.name for row in METRICS if row.kind == "gauge") == GAUGES
    assert len({row.name for row in METRICS}) == len(METRICS)
    assert set(Counters().snapshot()) == set(COUNTERS)


def test_names_and_units_follow_opentelemetry_and_prometheus_rules() -> None:
    """OTLP names are latency_budget.serve.<name> with the unit apart; Prometheus names are distinct and valid."""
    for row in METRICS:
        name = otel_name(row)
        assert OTEL_NAME.fullmatch(name), name
        assert name.startswith(OTEL_PREFIX)
        assert not name.endswith(("_total", "_bytes", "_count")), f"{name}: the unit and kind are not in the name"
        assert row.unit == "By" or re.fullmatch(r"\{[a-z]+\}", row.unit), f"{name}: unit {row.unit!r}"
        assert row.description.endswith("."), name
        assert "\n" not in row.description, name
        assert PROMETHEUS_NAME.fullmatch(prometheus_name(row)), prometheus_name(row)
    names = [prometheus_name(row) for row in METRICS]
    assert len(set(names)) == len(names)
    by_name = {row.name: row for row in METRICS}
    assert prometheus_name(by_name["spans_received"]) == "latency_budget_serve_spans_received_total"
    assert prometheus_name(by_name["queued"]) == "latency_budget_serve_queued_bytes"
    assert prometheus_name(by_name["open_traces"]) == "latency_budget_serve_open_traces"


def test_the_docs_table_of_serve_metrics_is_the_codes_table() -> None:
    """docs/collector-tier.md's table of counters and gauges is the rendering of METRICS, row for row."""
    text = DOC.read_text(encoding="utf-8")
    assert BEGIN in text, "docs/collector-tier.md lost its generated metrics table's first marker"
    assert END in text, "docs/collector-tier.md lost its generated metrics table's last marker"
    block = text.split(BEGIN, 1)[1].split(END, 1)[0].strip()
    assert block == render_doc_table(), "regenerate it: python -m tests.unit.test_serve_metrics"


def test_every_series_and_otlp_name_the_docs_give_is_a_row() -> None:
    """Each latency_budget_serve_* and latency_budget.serve.* name in README and docs/ is one of the table's."""
    series = {prometheus_name(row) for row in METRICS}
    otlp = {otel_name(row) for row in METRICS}
    texts = {
        path.name: path.read_text(encoding="utf-8") for path in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]
    }
    named = {(name, found) for name, text in texts.items() for found in re.findall(r"latency_budget_serve_\w+", text)}
    dotted = {
        (name, found.rstrip("."))
        for name, text in texts.items()
        for found in re.findall(r"latency_budget\.serve\.[a-z_.]+", text)
    }

    assert {found for _, found in named} >= {"latency_budget_serve_open_traces", "latency_budget_serve_queued_bytes"}
    assert not {(name, found) for name, found in named if found not in series and not found.endswith("_")}
    assert not {(name, found) for name, found in dotted if found not in otlp}


def test_the_exposition_has_every_row_once_with_its_type_and_value() -> None:
    """Each row is a HELP, a TYPE and one sample line, its value read from the mapping by the row's name."""
    values = {row.name: index for index, row in enumerate(METRICS)}
    lines = exposition(values).splitlines()

    assert len(lines) == 3 * len(METRICS)
    for index, row in enumerate(METRICS):
        name = prometheus_name(row)
        assert lines[3 * index].startswith(f"# HELP {name} ")
        assert lines[3 * index + 1] == f"# TYPE {name} {row.kind}"
        assert lines[3 * index + 2] == f"{name} {index}"


def _points(data: MetricsData | None) -> dict[str, tuple[Any, ...]]:
    """name -> (unit, description, data type, temporality, monotonic, value): everything but timestamps."""
    assert data is not None
    out: dict[str, tuple[Any, ...]] = {}
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                (point,) = metric.data.data_points
                out[metric.name] = (
                    metric.unit,
                    metric.description,
                    type(metric.data).__name__,
                    getattr(metric.data, "aggregation_temporality", None),
                    getattr(metric.data, "is_monotonic", None),
                    point.value,  # type: ignore[union-attr]
                )
    return out


def _sdk(values: dict[str, int], temporality: AggregationTemporality) -> InMemoryMetricReader:
    """The SDK's own observable counters and gauges over ``values``, one per row."""
    reader = InMemoryMetricReader(preferred_temporality={ObservableCounter: temporality})
    meter = MeterProvider(metric_readers=[reader]).get_meter("latency_budget")
    for row in METRICS:

        def callback(_options: CallbackOptions, key: str = row.name) -> list[Observation]:
            return [Observation(values[key])]

        create = meter.create_observable_counter if row.kind == "counter" else meter.create_observable_gauge
        create(otel_name(row), callbacks=[callback], unit=row.unit, description=row.description.replace("`", ""))
    return reader


@pytest.mark.parametrize("temporality", [AggregationTemporality.CUMULATIVE, AggregationTemporality.DELTA])
def test_the_otlp_metrics_are_what_the_sdks_observable_instruments_send(temporality: AggregationTemporality) -> None:
    """Through the bank, every row goes out as the SDK's observable counter or gauge would send it."""
    values = {row.name: 3 for row in METRICS}
    reader = _sdk(values, temporality)
    bank = MetricBank(Resource.create({}), lambda kind: temporality)
    observe(bank, lambda: dict(values))

    first = _points(bank.collect())
    assert first == _points(reader.get_metrics_data())
    values.update(spans_received=10, open_traces=1)
    second = _points(bank.collect())
    assert second == _points(reader.get_metrics_data())
    assert set(first) == {otel_name(row) for row in METRICS}
    received = "latency_budget.serve.spans_received"
    assert second[received][-1] == (7 if temporality is AggregationTemporality.DELTA else 10)
    assert second["latency_budget.serve.open_traces"][2:] == ("Gauge", None, None, 1)


def test_a_failing_source_costs_its_numbers_not_the_budget_metrics() -> None:
    """When the server's values raise, that collection still sends the bank's other metrics."""

    def broken() -> Mapping[str, int]:
        raise RuntimeError("a bug")

    bank = MetricBank(Resource.create({}), lambda kind: AggregationTemporality.CUMULATIVE)
    bank.counter("latency_budget.violations", "{violation}", "d").add(1, {})
    observe(bank, broken)
    observe(bank, lambda: {"spans_received": 1})  # a row missing: that source's numbers are left out

    assert set(_points(bank.collect())) == {"latency_budget.violations"}


if __name__ == "__main__":
    text = DOC.read_text(encoding="utf-8")
    head, rest = text.split(BEGIN, 1)
    DOC.write_text(head + BEGIN + "\n" + render_doc_table() + "\n" + END + rest.split(END, 1)[1], encoding="utf-8")
