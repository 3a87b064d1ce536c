"""serve's counters and gauges (:data:`~.stats.METRICS`) for other programs: Prometheus' text and OTLP.

Names follow OpenTelemetry's rules: ``latency_budget.serve.<name>``, the unit in the unit
field (``By``, ``{span}``), never in the name, no ``_total``. The Prometheus names are the
ones OpenTelemetry's Prometheus compatibility rules (and the Collector's ``prometheus``
exporter) make of them: dots as underscores, ``_bytes`` for ``By``, a unit in braces
dropped, ``_total`` after a counter. So a dashboard or alert reads the same series whether
Prometheus scrapes ``GET /metrics`` or the Collector that the OTLP metrics went to.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from latency_budget._encode import exposition_help
from latency_budget._serve.stats import METRICS, ServeMetric
from latency_budget.export._bank import MetricBank, Observed

__all__ = ["CONTENT_TYPE", "OTEL_PREFIX", "exposition", "observe", "otel_name", "prometheus_name", "render_doc_table"]

OTEL_PREFIX = "latency_budget.serve."
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# A unit's Prometheus suffix (OpenTelemetry's compatibility table); a unit in braces has none.
_UNIT_SUFFIXES = {"By": "bytes"}


def otel_name(row: ServeMetric) -> str:
    """The OTLP metric's name: ``latency_budget.serve.<name>``."""
    return OTEL_PREFIX + row.name


def prometheus_name(row: ServeMetric) -> str:
    """The series' name in Prometheus: ``latency_budget_serve_<name>``, its unit's suffix, ``_total`` for a counter."""
    name = otel_name(row).replace(".", "_")
    if not row.unit.startswith("{"):
        name += "_" + _UNIT_SUFFIXES[row.unit]
    return name + "_total" if row.kind == "counter" else name


def _help(row: ServeMetric) -> str:
    return exposition_help(row.description.replace("`", ""))


def exposition(values: Mapping[str, int]) -> str:
    """Every row of METRICS in Prometheus' text format (0.0.4), from ``values`` by name."""
    lines: list[str] = []
    for row in METRICS:
        name = prometheus_name(row)
        lines += (f"# HELP {name} {_help(row)}", f"# TYPE {name} {row.kind}", f"{name} {int(values[row.name])}")
    return "\n".join(lines) + "\n"


def observe(bank: MetricBank, values: Callable[[], Mapping[str, int]]) -> None:
    """Send every row of METRICS with the bank's metrics: ``values`` read once a collection."""
    numbers = [
        Observed(row.name, otel_name(row), row.unit, row.description.replace("`", ""), row.kind == "counter")
        for row in METRICS
    ]
    bank.observe(numbers, values)


def render_doc_table() -> str:
    """docs/collector-tier.md's table of counters and gauges: one line per row of :data:`METRICS`."""
    lines = ["| name | kind | unit | in Prometheus | |", "| --- | --- | --- | --- | --- |"]
    for row in METRICS:
        cells = (f"`{row.name}`", row.kind, f"`{row.unit}`", f"`{prometheus_name(row)}`", row.description)
        lines.append("| " + " | ".join(" ".join(cell.replace("|", "\\|").split()) for cell in cells) + " |")
    return "\n".join(lines)
