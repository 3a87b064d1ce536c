"""Protected stages: no lever caches, skips, shortens or moves their work, or streams output ahead of their checks.

Each planted case goes through the processor (its hint events) and ``report`` (its Where
to win), each with a null control that earns the hint the protected case must not.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from opentelemetry.util.types import AttributeValue

from latency_budget import load_budgets

from .lever_traffic import Traffic, levers
from .test_lever_hints import chat

BUDGETS = """
version: 1
stages:
  model_call: {budget_ms: 10000}
  tool_calls: {budget_ms: 1000}
  validation: {budget_ms: 1000}
"""
UNPROTECTED = BUDGETS.replace("validation: {budget_ms: 1000}", "validation: {budget_ms: 1000, protected: false}")
GUARDRAIL: dict[str, AttributeValue] = {"gen_ai.operation.name": "apply_guardrail"}
# A guardrail that records what it checked (OpenInference's input.value): identical checks repeat.
CHECK: dict[str, AttributeValue] = {"openinference.span.kind": "GUARDRAIL", "input.value": "is this answer safe?"}


def _streamed_before(t: Traffic) -> None:
    """Three streamed calls of m with their first chunk at 250 ms: the basis of a streaming estimate."""
    for _ in range(3):
        t.send(("chat m", 1000, chat("m", stream=True, ttft_s=0.25)))


def test_validation_is_protected_by_default_and_can_be_unprotected() -> None:
    """A stage named validation is protected with no key; protected: false unprotects it, protected: true any stage."""
    assert load_budgets(text=BUDGETS).default.protected_stages == {"validation"}
    assert load_budgets(text=UNPROTECTED).default.protected_stages == set()
    mine = BUDGETS.replace("tool_calls: {budget_ms: 1000}", "tool_calls: {budget_ms: 1000, protected: true}")
    assert load_budgets(text=mine).default.protected_stages == {"validation", "tool_calls"}


def test_no_streaming_claim_ahead_of_an_output_guardrail(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An unstreamed answer that a guardrail checks after it: no streaming hint; report says what the check needs."""
    t = Traffic(BUDGETS)
    _streamed_before(t)
    t.send(("chat m", 1500, chat("m", stream=False)), ("guardrail output", 100, GUARDRAIL))
    assert t.hints("streaming") == []
    (row,) = levers(t.report(tmp_path, capsys), "streaming")
    assert row["requests"] == 0
    assert row["savings_total_ms"] == 0
    assert row["held_back"] == 1
    assert row["held_back_by"] == ["validation"]
    assert "streaming-capable check" in row["try"]


def test_the_same_answer_without_the_guardrail_earns_the_streaming_hint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Null control: the same traffic with no guardrail after the answer: 1500 - 250 = 1250 ms sooner, both ways."""
    t = Traffic(BUDGETS)
    _streamed_before(t)
    t.send(("chat m", 1500, chat("m", stream=False)))
    (hint,) = t.hints("streaming")
    assert hint["latency_budget.hint.potential_savings_ms"] == 1250.0
    (row,) = levers(t.report(tmp_path, capsys), "streaming")
    assert row["savings_total_ms"] == 1250.0
    assert "held_back" not in row


def test_an_input_guardrail_that_ended_before_the_answer_holds_nothing_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A check of the question, over before the model call starts, checks no streamed text: the hint stands."""
    t = Traffic(BUDGETS)
    _streamed_before(t)
    t.send(("guardrail input", 100, GUARDRAIL), ("chat m", 1500, chat("m", stream=False)))
    (hint,) = t.hints("streaming")
    assert hint["latency_budget.hint.potential_savings_ms"] == 1250.0
    (row,) = levers(t.report(tmp_path, capsys), "streaming")
    assert row["savings_total_ms"] == 1250.0


def test_an_unprotected_output_check_does_not_hold_streaming_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Null control: validation with protected: false: the output check no longer holds the saving back."""
    t = Traffic(UNPROTECTED)
    _streamed_before(t)
    t.send(("chat m", 1500, chat("m", stream=False)), ("guardrail output", 100, GUARDRAIL))
    (hint,) = t.hints("streaming")
    assert hint["latency_budget.hint.potential_savings_ms"] == 1250.0
    (row,) = levers(t.report(tmp_path, capsys), "streaming")
    assert row["savings_total_ms"] == 1250.0


def test_no_cache_hint_for_a_repeated_guardrail_call(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The same check twice in a request, and again in the next: a protected stage's calls are never cached."""
    t = Traffic(BUDGETS)
    t.send(("check a", 100, CHECK), ("chat m", 10, chat("m", stream=True, ttft_s=0.005)), ("check b", 100, CHECK))
    t.send(("check c", 100, CHECK))
    assert t.hints("cache") == []
    assert levers(t.report(tmp_path, capsys), "cache") == []


def test_the_same_repeated_check_unprotected_earns_a_cache_hint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Null control: the same traffic with protected: false: the repeats are cached (100 ms in each request)."""
    t = Traffic(UNPROTECTED)
    t.send(("check a", 100, CHECK), ("chat m", 10, chat("m", stream=True, ttft_s=0.005)), ("check b", 100, CHECK))
    t.send(("check c", 100, CHECK))
    assert [h["latency_budget.hint.potential_savings_ms"] for h in t.hints("cache")] == [100.0, 100.0]
    (row,) = levers(t.report(tmp_path, capsys), "cache")
    assert row["stage"] == "validation"
    assert row["savings_total_ms"] == 200.0


@pytest.mark.parametrize("protected", [True, False])
def test_the_shape_levers_leave_a_protected_stage_alone(
    protected: bool, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Three back-to-back checks over max_calls 1 in a parallelizable stage: hints only when it is unprotected."""
    budgets = BUDGETS.replace(
        "validation: {budget_ms: 1000}",
        f"validation: {{budget_ms: 1000, max_calls: 1, parallelizable: true, protected: {str(protected).lower()}}}",
    )
    t = Traffic(budgets)
    t.send(
        ("chat m", 10, chat("m", stream=True, ttft_s=0.005)), *[(f"guardrail {n}", 100, GUARDRAIL) for n in range(3)]
    )
    report = t.report(tmp_path, capsys)
    if protected:
        assert t.hints("sequential_calls") == t.hints("iterations") == []
        assert levers(report, "sequential_calls") == levers(report, "iterations") == []
    else:
        assert [h["latency_budget.hint.potential_savings_ms"] for h in t.hints("sequential_calls")] == [200.0]
        assert [h["latency_budget.hint.potential_savings_ms"] for h in t.hints("iterations")] == [200.0]
        assert [row["savings_total_ms"] for row in levers(report, "sequential_calls")] == [200.0]
        assert [row["savings_total_ms"] for row in levers(report, "iterations")] == [200.0]
