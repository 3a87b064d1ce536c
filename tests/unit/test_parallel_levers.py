"""Savings are wall-clock: runs in concurrent sub-agents, and levers over them, never add up past the stage's time."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

try:
    from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter
except ImportError:  # SDK < 1.39 (tests/constraints-sdk-min.txt) names it InMemoryLogExporter
    from opentelemetry.sdk._logs.export import InMemoryLogExporter as InMemoryLogRecordExporter

from latency_budget import TraceReport, load_budgets
from latency_budget import _attributes as attr
from latency_budget._core.kinds import KINDS
from latency_budget._replay import evaluate_spans, record_of
from latency_budget.cli._levers import analyse_levers
from latency_budget.export import report_sinks

from .helpers import Pipeline, at, pipeline

BUDGETS = """
version: 1
hints: {min_saving_ms: 0}
stages:
  model_call: {budget_ms: 10000, max_calls: 2}
  tool_calls: {budget_ms: 1000, parallelizable: true, max_calls: 2}
"""
TOOL = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup", "gen_ai.tool.call.arguments": "{}"}


def _request(p: Pipeline, agents: list[tuple[float, list[float]]], name: str = "request") -> None:
    """A root with one sub-agent per (start ms, call durations ms): each agent calls the tool back to back."""
    end = max(start + sum(calls) for start, calls in agents) + 10
    root = p.start(name, 0)
    for n, (start, calls) in enumerate(agents):
        agent = p.start(f"agent {n}", start, parent=root)
        cursor = start
        for m, duration in enumerate(calls):
            p.run(f"tool {n}.{m}", cursor, cursor + duration, parent=agent, attributes=TOOL)
            cursor += duration
        agent.end(end_time=at(cursor))
    root.end(end_time=at(end))


def test_three_concurrent_sub_agents_save_one_runs_worth() -> None:
    """Three agents at once, each calling 100, 200 and 300 ms in turn: 300 ms saved, in the hint, logs and histogram."""
    logs = InMemoryLogRecordExporter()
    logger_provider = LoggerProvider()
    logger_provider.add_log_record_processor(SimpleLogRecordProcessor(logs))
    reader = InMemoryMetricReader()
    sinks = report_sinks(logger_provider=logger_provider, meter_provider=MeterProvider([reader]))
    p = pipeline(BUDGETS, on_report=lambda report: [sink(report) for sink in sinks])
    _request(p, [(0, [100, 200, 300])] * 3)
    report = p.reports[-1]
    tools = next(stage for stage in report.stages if stage.stage == "tool_calls")
    assert tools.actual_ms == 600.0
    sequential = [h for h in report.hints if h.kind == "sequential_calls"]
    assert [(h.stage, h.span_count, h.potential_savings_ms) for h in sequential] == [("tool_calls", 9, 300.0)]
    records = [item.log_record for item in logs.get_finished_logs()]
    logged = [r for r in records if (r.attributes or {}).get(attr.HINT_KIND) == "sequential_calls"]
    assert sum(float((r.attributes or {})[attr.HINT_SAVINGS_MS]) for r in logged) == 300.0  # type: ignore[arg-type]
    data = reader.get_metrics_data()
    assert data is not None
    histogram = {
        str((point.attributes or {})[attr.HINT_KIND]): point.sum
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name == "latency_budget.hint.potential_savings"
        for point in metric.data.data_points
        if (point.attributes or {})[attr.STAGE] == "tool_calls"
    }
    assert histogram["sequential_calls"] == 300.0
    # report/check and the HTML page rest on analyse_levers over the replayed spans: 300 ms too.
    replayed = evaluate_spans(load_budgets(text=BUDGETS), [record_of(span) for span in p.finished()])
    levers = analyse_levers(replayed).levers
    (lever,) = [lv for lv in levers if (lv.kind, lv.stage) == ("sequential_calls", "tool_calls")]
    assert lever.savings_ms == (300.0,)


agents = st.lists(
    st.tuples(
        st.integers(0, 400).map(float),
        st.lists(st.integers(1, 300).map(float), min_size=1, max_size=4),
    ),
    min_size=1,
    max_size=4,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests=st.lists(agents, min_size=1, max_size=3))
def test_no_lever_saves_more_than_its_stage_time_or_critical_path(
    requests: list[list[tuple[float, list[float]]]],
) -> None:
    """For random requests of concurrent agents, each lever's total per request is within the stage's union
    and, for end-to-end levers, within the stage's critical-path time (processor and report alike)."""
    reports: list[TraceReport] = []
    p = pipeline(BUDGETS, on_report=reports.append)
    for n, request in enumerate(requests):
        _request(p, request, name=f"request {n}")
    replayed = evaluate_spans(load_budgets(text=BUDGETS), [record_of(span) for span in p.finished()])
    for report in [*reports, *replayed]:
        stages = {stage.stage: stage for stage in report.stages}
        totals: dict[tuple[str, str], float] = {}
        for hint in report.hints:
            key = (hint.kind, hint.stage)
            totals[key] = totals.get(key, 0.0) + hint.potential_savings_ms
        for (kind, stage), total in totals.items():
            assert total <= stages[stage].actual_ms + 1e-9
            critical = stages[stage].critical_ms
            if KINDS[kind].saves == "end_to_end" and critical is not None:  # type: ignore[index]
                assert total <= critical + 1e-9
    per_request = max(
        (stage.actual_ms for report in replayed for stage in report.stages if stage.stage == "tool_calls"), default=0.0
    )
    for lever in analyse_levers(replayed).levers:
        assert all(saving <= per_request + 1e-9 for saving in lever.savings_ms)
