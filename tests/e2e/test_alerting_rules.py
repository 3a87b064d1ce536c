"""End to end: the demo's budget metrics, through the real Collector, into a real Prometheus that
runs the rules `latency-budget rules` generated from the example budgets.

The demo runs twice with one seed and one meter provider: Prometheus computes rates, and a
counter's first sample is no increase, so the first run makes every series exist and the
second doubles it. Between them the increases are those of one run: the recorded ratios must
equal what the processor judged in-process, and each alert must fire exactly when its ratio
is above its burn-rate threshold. The windows are shortened (the workbook's burn rates, over
minutes instead of hours and days); both runs stay inside them while the test waits.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource

from latency_budget._config import BudgetConfig
from latency_budget._core.report import TraceReport
from latency_budget._demo import example_budgets, example_budgets_text, run_demo
from latency_budget.cli import main
from latency_budget.export import BudgetMetrics

from .services import CollectorService, PrometheusService, poll, start_prometheus

pytestmark = pytest.mark.e2e

SEED = 30  # a run in which the cache broke its budget once (healthy, not idle): 1 of 157 requests
REQUESTS = 200
# (severity, long window, short window, burn rate): the workbook's rates over short windows.
BURN_RATES = (("page", "5m", "2m", 14.4), ("page", "10m", "4m", 6.0), ("ticket", "20m", "8m", 1.0))
WINDOWS = ("2m", "4m", "5m", "8m", "10m", "20m")
DELIVERY_TIMEOUT_S = 30.0  # per wait; the test ends well inside the 2m window, which keeps the first run's samples

Key = tuple[str, str, str]  # (stage, kind, profile)


def _judged(reports: list[TraceReport | None]) -> tuple[Counter[Key], Counter[Key]]:
    """Per (stage, kind, profile): requests judged against the budget, and those over it (the oracle)."""
    judged: Counter[Key] = Counter()
    over: Counter[Key] = Counter()
    for report in reports:
        assert report is not None
        for stage in report.stages:
            budgeted = (stage.budget_ms, stage.first_token_budget_ms, stage.max_calls) != (None, None, None)
            if stage.seen and budgeted:
                judged[(stage.stage, "stage", report.profile)] += 1
                over[(stage.stage, "stage", report.profile)] += bool(stage.violations)
        kinds = {v.kind for v in report.violations if v.stage == "total"}
        if report.total_budget_ms is not None:
            judged[("total", "total", report.profile)] += 1
            over[("total", "total", report.profile)] += "total" in kinds
        if report.first_token_budget_ms is not None and report.first_token_ms is not None:
            judged[("total", "first_token", report.profile)] += 1
            over[("total", "first_token", report.profile)] += "first_token" in kinds
    return judged, over


def _objective(config: BudgetConfig, key: Key) -> float | None:
    stage, kind, profile = key
    budgets = config.budgets_by_profile(profile)
    if kind == "stage":
        return budgets.stage(stage).objective
    return budgets.total_objective if kind == "total" else budgets.first_token_objective


def _key(labels: dict[str, str]) -> Key:
    return labels["latency_budget_stage"], labels["latency_budget_kind"], labels["latency_budget_profile"]


@pytest.fixture
def rules_file(tmp_path: Path, service_name: str) -> Path:
    """The rules for the example budgets, for this test's service only, with short windows."""
    budgets = tmp_path / "budgets.example.yaml"
    budgets.write_text(example_budgets_text(), encoding="utf-8")
    out = tmp_path / "rules.yml"
    burn_rates = [f"--burn-rate={s}:{long}/{short}:{rate:g}" for s, long, short, rate in BURN_RATES]
    assert main(["rules", str(budgets), "--service", service_name, *burn_rates, "-o", str(out)]) == 0
    return out


@pytest.fixture
def prometheus(
    prometheus_binary: str, otel_collector: CollectorService, rules_file: Path, tmp_path: Path
) -> Iterator[PrometheusService]:
    """A Prometheus of this test's own, scraping the collector every second and evaluating the rules."""
    work = tmp_path / "prometheus"
    work.mkdir()
    service = start_prometheus(
        prometheus_binary, work, scrape_urls={"otelcol": otel_collector.prometheus_url}, rules_file=rules_file
    )
    try:
        yield service
    finally:
        service.process.stop()


def test_recorded_ratios_and_alerts_follow_the_demo_traffic(
    otel_collector: CollectorService, prometheus: PrometheusService, service_name: str
) -> None:
    """Recorded ratios equal the processor's verdicts; an over-budget stage's page fires, a healthy one's does not."""
    config = example_budgets()
    reader = PeriodicExportingMetricReader(
        OTLPMetricExporter(endpoint=otel_collector.otlp_grpc_endpoint, insecure=True),
        export_interval_millis=3_600_000,  # exported by force_flush only
    )
    provider = MeterProvider(resource=Resource.create({"service.name": service_name}), metric_readers=[reader])
    metrics = BudgetMetrics(provider)
    try:
        first = run_demo(config, requests=REQUESTS, seed=SEED, on_report=[metrics])
        judged, over = _judged(first.reports)
        assert over[("model_call", "stage", "default")] / judged[("model_call", "stage", "default")] > 0.144
        assert over[("cache", "stage", "default")] / judged[("cache", "stage", "default")] < 0.01
        assert provider.force_flush()

        # The counter exactly as collector-config.yaml exports it: its name, labels and values.
        expected_counts = {(*key, "false"): float(n) for key, n in over.items() if n}
        expected_counts |= {(*key, "true"): float(judged[key] - over[key]) for key in judged if judged[key] > over[key]}

        def first_run_scraped() -> bool | None:
            found = prometheus.query(f'latency_budget_requests_total{{service_name="{service_name}"}}')
            counts = {(*_key(labels), labels["latency_budget_within_budget"]): value for labels, value in found}
            return True if counts == expected_counts else None

        poll(first_run_scraped, timeout=DELIVERY_TIMEOUT_S, what=f"the first run's counts {expected_counts}")

        second = run_demo(config, requests=REQUESTS, seed=SEED, on_report=[metrics])
        assert _judged(second.reports) == (judged, over)
        assert provider.force_flush()
    finally:
        provider.shutdown()

    expected = {key: over[key] / judged[key] for key in judged}

    def ratios(window: str) -> dict[Key, float] | None:
        found = prometheus.query(
            f'latency_budget:requests_over_budget:ratio_rate{window}{{service_name="{service_name}"}}'
        )
        values = {_key(labels): value for labels, value in found}
        if values.keys() != expected.keys():
            return None
        return values if all(math.isclose(values[k], expected[k], rel_tol=1e-9) for k in expected) else None

    for window in WINDOWS:
        poll(lambda w=window: ratios(w), timeout=DELIVERY_TIMEOUT_S, what=f"the ratios over {window} to be {expected}")

    # Each alert fires exactly when its ratio is above burn rate x (1 - objective), in both windows.
    should_fire = {
        (*key, severity, long)
        for key, ratio in expected.items()
        for severity, long, _short, rate in BURN_RATES
        if (objective := _objective(config, key)) is not None and ratio > rate * (1 - objective)
    }
    assert ("model_call", "stage", "default", "page", "5m") in should_fire
    assert not any(alert[:3] == ("cache", "stage", "default") for alert in should_fire)

    def firing() -> set[tuple[str, ...]] | None:
        alerts = prometheus.api("alerts")["alerts"]
        mine = [a for a in alerts if a["labels"].get("service_name") == service_name]
        assert all(a["state"] == "firing" for a in mine), mine  # no `for`: an alert is firing or absent
        found = {(*_key(a["labels"]), a["labels"]["severity"], a["labels"]["window"]) for a in mine}
        return found if found == should_fire else None

    poll(firing, timeout=DELIVERY_TIMEOUT_S, what=f"exactly the alerts {sorted(should_fire)} firing")
    alerts = {
        (*_key(a["labels"]), a["labels"]["window"]): a
        for a in prometheus.api("alerts")["alerts"]
        if a["labels"].get("service_name") == service_name
    }
    page = alerts[("model_call", "stage", "default", "5m")]
    assert page["labels"]["alertname"] == "LatencyBudgetBurnRate"
    assert page["annotations"]["objective"] == "99%"
    assert page["annotations"]["budget"] == "3500ms, first token 800ms, at most 4 calls"
    assert page["annotations"]["ratio"] == f"{expected[('model_call', 'stage', 'default')] * 100:.4g}%"
    assert f"--service {service_name} --lookback 5m" in page["annotations"]["next"]
    assert not any(key[:3] == ("cache", "stage", "default") for key in alerts)
    assert expected[("cache", "stage", "default")] > 0  # healthy, not idle: it broke its budget once

    # Every rule evaluated without error (a PromQL mistake shows up here, not only as silence).
    groups = prometheus.api("rules")["groups"]
    unhealthy = [(r.get("name"), r.get("lastError")) for g in groups for r in g["rules"] if r["health"] != "ok"]
    assert unhealthy == []
