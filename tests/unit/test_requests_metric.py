"""The ``latency_budget.requests`` counter: one count per budget a request was judged against, and its outcome."""

from __future__ import annotations

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, Sum

from latency_budget import _attributes as attr
from latency_budget.export import BudgetMetrics

from .helpers import at, op, pipeline

BUDGETS = """
version: 1
total_ms: 1200
first_token_ms: 900
stages:
  retrieval: {budget_ms: 100}
  model_call: {budget_ms: 800, first_token_ms: 300, severity: warn}
  tool_calls: {}
"""


def _requests_counter(reader: InMemoryMetricReader) -> dict[tuple[object, ...], int | float]:
    """(stage, kind, profile, within_budget) -> count, from the reader's one collection."""
    data = reader.get_metrics_data()
    assert data is not None
    counts: dict[tuple[object, ...], int | float] = {}
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name != "latency_budget.requests":
                    continue
                assert isinstance(metric.data, Sum)
                assert metric.data.is_monotonic
                assert metric.unit == "{request}"
                for point in metric.data.data_points:
                    a = point.attributes or {}
                    key = (a[attr.STAGE], a[attr.KIND], a[attr.PROFILE], a[attr.WITHIN_BUDGET])
                    assert set(a) == {attr.STAGE, attr.KIND, attr.PROFILE, attr.WITHIN_BUDGET}
                    counts[key] = point.value
    return counts


def test_requests_count_each_judged_budget_with_its_outcome() -> None:
    """Per request: each stage that ran with a budget, the total, and the first token when measured, within or not."""
    reader = InMemoryMetricReader()
    p = pipeline(BUDGETS, on_report=BudgetMetrics(MeterProvider(metric_readers=[reader])))
    # Over: model_call (a warn-level budget still counts as not within), and the total; first token in time.
    slow = p.start("request", 0)
    p.run("retrieve", 0, 45, parent=slow, attributes=op("retrieval"))
    p.run("chat", 45, 1295, parent=slow, attributes={**op("chat"), "gen_ai.response.time_to_first_chunk": 0.2})
    p.run("tool", 1295, 1445, parent=slow, attributes=op("execute_tool"))
    slow.end(end_time=at(1445))
    # Within everything, no model call, so no first token to judge.
    fast = p.start("request", 2000)
    p.run("retrieve", 2000, 2050, parent=fast, attributes=op("retrieval"))
    fast.end(end_time=at(2150))

    assert _requests_counter(reader) == {
        ("retrieval", "stage", "default", True): 2,
        ("model_call", "stage", "default", False): 1,
        ("total", "total", "default", False): 1,
        ("total", "total", "default", True): 1,
        ("total", "first_token", "default", True): 1,
    }


def test_a_stage_or_request_without_budgets_is_not_counted() -> None:
    """A tracked stage without any budget, and a file without total or first-token budgets, give no counts."""
    reader = InMemoryMetricReader()
    p = pipeline("version: 1\n", on_report=BudgetMetrics(MeterProvider(metric_readers=[reader])))
    root = p.start("request", 0)
    p.run("chat", 0, 100, parent=root, attributes=op("chat"))
    root.end(end_time=at(120))
    assert p.reports
    assert p.reports[0].stage("model_call").seen
    assert _requests_counter(reader) == {}
