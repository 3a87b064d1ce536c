"""traceloop-sdk's decorators (OpenLLMetry), offline: ``Traceloop.init`` with the budget processor as its processor.

``@workflow`` > ``@agent`` > ``@task``, ``@tool``: only the tool is a call (``traceloop.span.kind=tool``);
workflows, agents and tasks contain calls and are in no stage.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from traceloop.sdk import Traceloop
from traceloop.sdk.decorators import agent, task, tool, workflow

from latency_budget import LatencyBudgetProcessor, load_budgets

from ...unit.helpers import RecordingProcessor
from ..stacks import Outcome, SettledPipeline, WatchedExporter, budgets


@tool(name="get_weather")
def get_weather(city: str) -> str:
    return f"sunny in {city}"


@task(name="lookup")
def lookup(city: str) -> str:
    return city.title()


@agent(name="assistant")
def assistant(city: str) -> list[str]:
    return [get_weather(lookup(city)), get_weather("Berlin")]


@workflow(name="answer")
def answer(city: str) -> list[str]:
    return assistant(city)


@pytest.fixture(scope="module")
def traceloop_pipe() -> Iterator[SettledPipeline]:
    """Traceloop initialised once for the module: no instrumentations, no metrics, no export but ours."""
    mp = pytest.MonkeyPatch()
    for name, value in {"TRACELOOP_METRICS_ENABLED": "false", "TRACELOOP_TELEMETRY": "false"}.items():
        mp.setenv(name, value)
    exporter = WatchedExporter()
    handed = RecordingProcessor()
    processor = LatencyBudgetProcessor(load_budgets(text=budgets(max_model_calls=1)), SimpleSpanProcessor(exporter))
    Traceloop.init(
        app_name="latency-budget-tests",
        api_endpoint="http://127.0.0.1:9",  # never reached: a processor is given, metrics are off
        processor=[handed, processor],
        telemetry_enabled=False,
        instruments=set(),
    )
    try:
        yield SettledPipeline(trace.get_tracer_provider(), processor, exporter, handed=handed)  # type: ignore[arg-type]
    finally:
        mp.undo()


def test_traceloop_tools_are_tool_calls_and_workflows_agents_tasks_are_not(traceloop_pipe: SettledPipeline) -> None:
    """Two @tool calls under @workflow > @agent are the request's tool_calls; @task, @agent, @workflow are not."""
    traceloop_pipe.exporter.clear()
    traceloop_pipe.handed.ended.clear()
    # An incoming request (a server span): a plain root with tool calls only and no model call
    # would be left alone by the default `requests` rule.
    with trace.get_tracer("app").start_as_current_span("request", kind=trace.SpanKind.SERVER):
        assert answer("paris") == ["sunny in Paris", "sunny in Berlin"]
    outcome = Outcome(traceloop_pipe)
    assert outcome.stage_names() == {"tool_calls": Counter({"get_weather.tool": 2})}
    kinds = {s.name: (s.attributes or {}).get("traceloop.span.kind") for s in outcome.spans}
    assert kinds == {
        "request": None,
        "answer.workflow": "workflow",
        "assistant.agent": "agent",
        "lookup.task": "task",
        "get_weather.tool": "tool",
    }
    assert outcome.counts() == {"tool_calls": 2}
    assert outcome.violation_kinds() == []
    outcome.assert_exported_once()


def test_traceloop_workflow_as_the_root_is_a_request(traceloop_pipe: SettledPipeline) -> None:
    """With no span around it, the @workflow span is the root: an invocation, judged by the default rule."""
    traceloop_pipe.exporter.clear()
    traceloop_pipe.handed.ended.clear()
    assert answer("paris") == ["sunny in Paris", "sunny in Berlin"]
    outcome = Outcome(traceloop_pipe, root_name="answer.workflow")
    assert outcome.counts() == {"tool_calls": 2}
    outcome.assert_exported_once()
