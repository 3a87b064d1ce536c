"""sequential_calls only where the calls are independent: data flow between them, tools with side effects.

Each planted case goes through the processor (its hint events) and ``report`` (its Where
to win), each with a null control that earns the hint the planted case must not.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from opentelemetry.util.types import AttributeValue

from latency_budget import BudgetConfigError, load_budgets
from latency_budget._core.levers import sequential_calls

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


def test_the_data_flow_check_compares_each_call_with_a_bounded_number_of_results(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A run of 2,000 calls that all record results costs at most MAX_RESULTS_COMPARED checks a call, not every pair."""
    checked = 0
    feeds = sequential_calls._feeds

    def counting(earlier: sequential_calls.CallText | None, later: sequential_calls.CallText | None) -> bool:
        nonlocal checked
        checked += 1
        return feeds(earlier, later)

    monkeypatch.setattr(sequential_calls, "_feeds", counting)
    calls = 2_000
    texts = {i: ("lookup", f'{{"id": "q{i:05d}"}}', f'{{"answer": "r{i:05d}"}}') for i in range(calls)}
    siblings: list[tuple[int, int, int, int, str | None, bool, object]] = [
        (i * 10, i * 10 + 5, i, 1, "execute_tool", False, None) for i in range(calls)
    ]
    runs = sequential_calls._sequential_runs(siblings, frozenset({1}), texts)  # type: ignore[arg-type]
    assert [len(run) for run in runs] == [calls]  # independent: one run of all of them
    assert checked <= calls * sequential_calls.MAX_RESULTS_COMPARED
    assert checked >= (calls - sequential_calls.MAX_RESULTS_COMPARED) * sequential_calls.MAX_RESULTS_COMPARED


def test_a_call_fed_by_a_recent_result_in_a_long_run_still_starts_a_run_of_its_own() -> None:
    """Within the results compared, a dependency found in a long run splits it there (the bound keeps the rule)."""
    calls = 500
    texts = {i: ("lookup", f'{{"id": "q{i:05d}"}}', f'{{"answer": "r{i:05d}"}}') for i in range(calls)}
    texts[300] = ("lookup", '{"id": "r00290"}', '{"answer": "r00300"}')  # needs call 290's result
    siblings: list[tuple[int, int, int, int, str | None, bool, object]] = [
        (i * 10, i * 10 + 5, i, 1, "execute_tool", False, None) for i in range(calls)
    ]
    runs = sequential_calls._sequential_runs(siblings, frozenset({1}), texts)  # type: ignore[arg-type]
    assert [len(run) for run in runs] == [300, 200]
