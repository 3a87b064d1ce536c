"""Budget-file rules with `unless` vetoes, and `requests: all`: what they match, and clear errors when malformed."""

from __future__ import annotations

import pytest
from opentelemetry.trace import SpanKind

from latency_budget import BudgetConfigError, load_budgets

from .helpers import at, op, pipeline

VETOED = """
version: 1
stages:
  tool_calls:
    match:
      - {attributes: {gen_ai.operation.name: execute_tool}, unless: {gen_ai.tool.name: ["(merged tools)", "<noop>"]}}
"""


def test_a_vetoed_span_is_in_no_stage_and_the_others_count() -> None:
    """`unless` leaves the bookkeeping span out: two real tool calls, the placeholder one in no stage."""
    p = pipeline(VETOED)
    root = p.start("POST /ask", 0, kind=SpanKind.SERVER)
    p.run("execute_tool a", 1, 10, parent=root, attributes={**op("execute_tool"), "gen_ai.tool.name": "a"})
    p.run("execute_tool b", 1, 12, parent=root, attributes={**op("execute_tool"), "gen_ai.tool.name": "b"})
    p.run(
        "execute_tool (merged)",
        12,
        12.2,
        parent=root,
        attributes={**op("execute_tool"), "gen_ai.tool.name": "(merged tools)"},
    )
    root.end(end_time=at(20))
    assert p.reports[0].stage("tool_calls").count == 2
    assert "latency_budget.stage" not in (p.span("execute_tool (merged)").attributes or {})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "version: 1\nstages:\n  db:\n    match: {name: 'SELECT *', unless: {a: b}}\n",
            "<text>:4: stages.db.match.unless: needs 'attributes' or 'exists' beside it in the rule",
        ),
        (
            "version: 1\nstages:\n  db:\n    match: {exists: [db.system], unless: {}}\n",
            "stages.db.match.unless: expected at least one attribute",
        ),
        ("version: 1\nrequests: every\n", "<text>:2: requests: expected all, a rule or a list of rules, got 'every'"),
    ],
)
def test_malformed_vetoes_and_requests_name_the_line_and_key(text: str, message: str) -> None:
    """A veto with nothing beside it, an empty veto, or `requests: every` is refused, naming line and key."""
    with pytest.raises(BudgetConfigError) as caught:
        load_budgets(text=text)
    assert message in str(caught.value)


def test_requests_all_is_every_root() -> None:
    """`requests: all` loads as every local root: no rules, and the default rule is off."""
    config = load_budgets(text="version: 1\nrequests: all\n")
    assert config.every_root
    assert config.requests is None
    assert config.default_rule_stage == -1
