"""The attribute contract as a person reads it in a tracing UI: the verdict, its names, its values."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from latency_budget import _attributes as attr
from latency_budget._core.annotate import hint_attributes
from latency_budget._core.hints import Hint

from .helpers import at, op, pipeline

BUDGETS = """
version: 1
total_ms: 1000
first_token_ms: 300
stages:
  retrieval: {budget_ms: 100, severity: warn}
  model_call: {budget_ms: 500, first_token_ms: 200}
  tool_calls: {budget_ms: 200, max_calls: 2}
"""


def test_verdict_of_a_request_within_budget_says_so() -> None:
    """A request within every budget: the verdict is 'within budget' (its totals have attributes of their own)."""
    p = pipeline(BUDGETS)
    root = p.start("request", 0)
    p.run("chat", 0, 400, parent=root, attributes=op("chat"))
    root.end(end_time=at(450.25))
    attrs = dict(p.span("request").attributes or {})
    assert attrs[attr.VERDICT] == "within budget"
    assert attrs[attr.TOTAL_ACTUAL_MS] == 450.25
    assert attrs[attr.VIOLATED] is False
    assert attrs[attr.OVER_BUDGET_STAGES] == ()


def test_verdict_names_each_broken_budget_and_by_how_much_in_report_order() -> None:
    """Over budget: each broken error-level budget with +over (actual/budget), the stage's span count, then warns."""
    p = pipeline(BUDGETS)
    root = p.start("request", 0)
    p.run("retrieve", 0, 150, parent=root, attributes=op("retrieval"))
    p.run("chat 1", 150, 450, parent=root, attributes=op("chat"))
    p.run("chat 2", 450, 750.5, parent=root, attributes=op("chat"))
    for n in range(3):
        p.run(f"tool {n}", 750.5, 800, parent=root, attributes=op("execute_tool"))
    root.end(end_time=at(1_100))
    attrs = dict(p.span("request").attributes or {})
    assert attrs[attr.VERDICT] == (
        "OVER BUDGET: model_call +100.5 ms (600.5/500 ms, 2 calls), tool_calls 3 calls (max 2), "
        "total +100 ms (1100/1000 ms); warn: retrieval +50 ms (150/100 ms)"
    )
    assert attrs[attr.OVER_BUDGET_STAGES] == ("model_call", "tool_calls", "total")
    assert attrs[attr.WARN_STAGES] == ("retrieval",)


def test_verdict_of_first_token_budgets_says_first_token() -> None:
    """A stage's and the request's first-token budgets read 'model_call first token' and 'first token'."""
    p = pipeline(BUDGETS)
    root = p.start("request", 0)
    p.run("chat", 100, 500, parent=root, attributes={**op("chat"), "gen_ai.response.time_to_first_chunk": 0.25})
    root.end(end_time=at(600))
    attrs = dict(p.span("request").attributes or {})
    assert attrs[attr.VERDICT] == (
        "OVER BUDGET: model_call first token +50 ms (250/200 ms), first token +50 ms (350/300 ms)"
    )
    assert attrs[attr.TOTAL_FIRST_TOKEN_MS] == 350.0  # the request's: root start to the first token
    assert attrs[attr.stage_key("model_call", "worst_first_token_ms")] == 250.0  # the call's, from its own start


def test_verdict_names_at_most_five_budgets_then_counts_the_rest() -> None:
    """Seven broken budgets: the verdict names five and ends with '+2 more'."""
    stages = "\n".join(f"  s{n}: {{budget_ms: 10, match: {{name: 's{n}'}}}}" for n in range(6))
    p = pipeline(f"version: 1\ntotal_ms: 50\nstages:\n{stages}\n")
    root = p.start("request", 0)
    for n in range(6):
        p.run(f"s{n}", 20 * n, 20 * n + 20, parent=root)
    root.end(end_time=at(120))
    verdict = str(dict(p.span("request").attributes or {})[attr.VERDICT])
    assert verdict.startswith("OVER BUDGET: s0 +10 ms (20/10 ms), s1 +10 ms")
    assert verdict.count("/10 ms") == 5
    assert verdict.endswith("s4 +10 ms (20/10 ms), +2 more")


def test_only_a_request_level_budget_broken_names_total() -> None:
    """Every stage within budget but the request over total_ms: over_budget_stages is ('total',), not empty."""
    p = pipeline(BUDGETS)
    root = p.start("request", 0)
    p.run("chat", 0, 400, parent=root, attributes=op("chat"))
    root.end(end_time=at(1_200))
    attrs = dict(p.span("request").attributes or {})
    assert attrs[attr.VIOLATED] is True
    assert attrs[attr.OVER_BUDGET_STAGES] == ("total",)
    assert attrs[attr.VERDICT] == "OVER BUDGET: total +200 ms (1200/1000 ms)"


def test_a_warn_level_request_budget_names_total_in_warn_stages() -> None:
    """A warn-level total broken: warn_stages is ('total',), the request is not violated, the verdict says warn."""
    p = pipeline("version: 1\ntotal_ms: 100\nseverity: warn\nstages:\n  model_call: {budget_ms: 500}\n")
    root = p.start("request", 0)
    root.end(end_time=at(150))
    attrs = dict(p.span("request").attributes or {})
    assert attrs[attr.VIOLATED] is False
    assert attrs[attr.OVER_BUDGET_STAGES] == ()
    assert attrs[attr.WARN_STAGES] == ("total",)
    assert attrs[attr.VERDICT] == "within budget; warn: total +50 ms (150/100 ms)"


def test_ms_values_are_rounded_to_the_microsecond() -> None:
    """Durations with nanosecond parts are written with three decimals, on the root, its events and stage spans."""
    p = pipeline(BUDGETS)
    root = p.start("request", 0)
    p.run("chat", 0, 600.123456, parent=root, attributes=op("chat"))
    root.end(end_time=at(700.987654))
    attrs = dict(p.span("request").attributes or {})
    assert attrs[attr.stage_key("model_call", "actual_ms")] == 600.123
    assert attrs[attr.TOTAL_ACTUAL_MS] == 700.988
    (violation,) = [e for e in p.span("request").events if e.name == attr.VIOLATION_EVENT]
    assert violation.attributes is not None
    assert (violation.attributes[attr.OVER_MS], violation.attributes[attr.ACTUAL_MS]) == (100.123, 600.123)
    assert dict(p.span("chat").attributes or {})[attr.ACTUAL_MS] == 600.123
    assert attrs[attr.VERDICT] == "OVER BUDGET: model_call +100.123 ms (600.123/500 ms)"


def test_stage_spans_carry_the_stage_budget_under_its_own_name() -> None:
    """A stage span carries latency_budget.stage_budget_ms (the whole stage's budget), not a bare budget_ms."""
    p = pipeline(BUDGETS)
    root = p.start("request", 0)
    p.run("chat", 0, 100, parent=root, attributes=op("chat"))
    root.end(end_time=at(200))
    chat = dict(p.span("chat").attributes or {})
    assert chat[attr.STAGE] == "model_call"
    assert chat[attr.STAGE_BUDGET_MS] == 500.0
    assert attr.BUDGET_MS not in chat


def test_violation_event_attributes_put_how_much_first() -> None:
    """A violation event lists stage, kind, over_ms, actual_ms, budget_ms, severity, in that order (in OTLP)."""
    p = pipeline(BUDGETS)
    root = p.start("request", 0)
    p.run("chat", 0, 600, parent=root, attributes=op("chat"))
    root.end(end_time=at(700))
    (violation,) = [e for e in p.span("request").events if e.name == attr.VIOLATION_EVENT]
    assert list(violation.attributes or {}) == [
        attr.STAGE,
        attr.KIND,
        attr.OVER_MS,
        attr.ACTUAL_MS,
        attr.BUDGET_MS,
        attr.SEVERITY,
    ]


@given(st.floats(min_value=0, max_value=1e9, allow_nan=False))
def test_rounding_to_the_microsecond_is_within_half_a_microsecond_and_prints_three_decimals(ms: float) -> None:
    """A rounded ms value lies within 0.5 us (plus float error) of the exact one and prints with at most 3 decimals."""
    written = hint_attributes(Hint("iterations", "model_call", 2, ms))[attr.HINT_SAVINGS_MS]
    assert isinstance(written, float)
    assert abs(written - ms) <= 0.0005 + 1e-9 * max(1.0, ms)
    decimals = repr(written).split(".")[1] if "e" not in repr(written) else "0"
    assert len(decimals) <= 3
