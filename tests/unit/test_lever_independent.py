"""sequential_calls only where the calls are independent: data flow between them, tools with side effects.

Each planted case goes through the processor (its hint events) and ``report`` (its Where
to win), each with a null control that earns the hint the planted case must not.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from opentelemetry.util.types import AttributeValue

from latency_budget import BudgetConfigError, load_budgets

from .lever_traffic import Traffic, levers

BUDGETS = """
version: 1
stages:
  model_call: {budget_ms: 10000}
  tool_calls: {budget_ms: 1000}
"""
SIDE_EFFECTS = BUDGETS + "tools: {side_effects: [send_*, charge_card]}\n"


def tool(name: str, arguments: str | None = None, result: str | None = None) -> dict[str, AttributeValue]:
    """An execute_tool span's attributes, its arguments and result where given."""
    attributes: dict[str, AttributeValue] = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name}
    if arguments is not None:
        attributes["gen_ai.tool.call.arguments"] = arguments
    if result is not None:
        attributes["gen_ai.tool.call.result"] = result
    return attributes


def _savings(t: Traffic) -> list[object]:
    return [h["latency_budget.hint.potential_savings_ms"] for h in t.hints("sequential_calls")]


def test_a_call_that_needs_the_earlier_result_earns_no_parallel_hint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """find_order returns order 4711, get_invoice is asked for order 4711: the second needed the first."""
    t = Traffic(BUDGETS)
    t.send(
        ("tool find_order", 100, tool("find_order", '{"email": "a@b.c"}', '{"order_id": 4711, "status": "shipped"}')),
        ("tool get_invoice", 100, tool("get_invoice", '{"order_id": 4711}', '{"total": 12.5}')),
    )
    assert _savings(t) == []
    assert levers(t.report(tmp_path, capsys), "sequential_calls") == []


def test_independent_recorded_calls_earn_the_hint_and_say_it_was_checked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Null control: the invoice of another order: independent by their records, 100 ms saved, and report says so."""
    t = Traffic(BUDGETS)
    t.send(
        ("tool find_order", 100, tool("find_order", '{"email": "a@b.c"}', '{"order_id": 4711, "status": "shipped"}')),
        ("tool get_invoice", 100, tool("get_invoice", '{"order_id": 5200}', '{"total": 12.5}')),
    )
    assert _savings(t) == [100.0]
    (row,) = levers(t.report(tmp_path, capsys), "sequential_calls")
    assert row["savings_total_ms"] == 100.0
    assert "no call's recorded arguments held an earlier call's recorded result" in row["basis"]


def test_a_dependency_splits_a_run_and_the_rest_still_runs_together(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """a, then b that needs a's result, then c independent of both: b and c could run together (100 ms)."""
    t = Traffic(BUDGETS)
    t.send(
        ("tool a", 100, tool("a", '{"q": 1}', '"ticket-981"')),
        ("tool b", 100, tool("b", '{"ticket": "ticket-981"}', '"ok"')),
        ("tool c", 100, tool("c", '{"q": 2}', '"fine"')),
    )
    assert _savings(t) == [100.0]
    (row,) = levers(t.report(tmp_path, capsys), "sequential_calls")
    assert row["savings_total_ms"] == 100.0


def test_tools_with_side_effects_are_never_run_concurrently(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two send_email calls and a charge_card, back to back, under tools.side_effects: no parallel hint."""
    t = Traffic(SIDE_EFFECTS)
    t.send(*[(f"tool {name}", 100, tool(name)) for name in ("send_email", "send_email", "charge_card")])
    assert _savings(t) == []
    assert levers(t.report(tmp_path, capsys), "sequential_calls") == []


def test_the_same_calls_without_side_effects_listed_earn_the_hint_with_the_assumption_said(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Null control: the same three calls, no tools key: 200 ms, and report says it assumed them independent."""
    t = Traffic(BUDGETS)
    t.send(*[(f"tool {name}", 100, tool(name)) for name in ("send_email", "send_email", "charge_card")])
    assert _savings(t) == [200.0]
    (row,) = levers(t.report(tmp_path, capsys), "sequential_calls")
    assert row["savings_total_ms"] == 200.0
    assert "assumes the calls independent in 1 request (" in row["basis"]


def test_side_effects_are_globs_checked_at_load_time() -> None:
    """tools.side_effects takes a glob or a list of them; a bad one names its file, line and key."""
    assert [p.pattern for p in load_budgets(text=SIDE_EFFECTS).default.side_effects] == [
        load_budgets(text=BUDGETS + "tools: {side_effects: send_*}\n").default.side_effects[0].pattern,
        load_budgets(text=BUDGETS + "tools: {side_effects: charge_card}\n").default.side_effects[0].pattern,
    ]
    with pytest.raises(BudgetConfigError, match=r"<text>:7: tools.side_effects\[0\]: invalid glob"):
        load_budgets(text=BUDGETS + "tools:\n  side_effects: ['send_[']\n")
    with pytest.raises(BudgetConfigError, match=r"<text>:6: tools.sideeffects: unknown key"):
        load_budgets(text=BUDGETS + "tools: {sideeffects: [a]}\n")
