"""Quality beside the levers end to end: planted traffic through the processor (its hints) and ``report``.

The answers' quality is what instrumentations emit: ``gen_ai.evaluation.result`` span
events on the evaluated chat span (read by the quality reader when the span ends), and
``content_filter`` finish reasons. Each planted case has its null control.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.util.types import AttributeValue

from latency_budget import EvaluationLogProcessor
from latency_budget._core.levers.weigh import NO_QUALITY_DATA
from latency_budget._core.recent import MIN_MODEL_CALLS_IN_PROCESS
from latency_budget.cli import main

try:
    from opentelemetry._logs import LogRecord
except ImportError:  # pragma: no cover  (older SDKs: the record is the SDK's)
    from opentelemetry.sdk._logs import LogRecord  # type: ignore[attr-defined,no-redef]

from .lever_traffic import Child, Traffic, levers
from .test_lever_hints import chat

SCOPE = "evals"
EVALUATION = "gen_ai.evaluation.result"


def _scored(model: str, duration_ms: float, score: float | None) -> Child:
    """A streamed chat call of ``model``, with a correctness evaluation event when ``score`` is given."""
    events: list[tuple[str, dict[str, AttributeValue]]] = []
    if score is not None:
        events.append((EVALUATION, {"gen_ai.evaluation.name": "correctness", "gen_ai.evaluation.score.value": score}))
    return (f"chat {model}", duration_ms, chat(model, stream=True, ttft_s=0.05), SCOPE, events)


def two_models(fast_scores: tuple[float, float] | None) -> Traffic:
    """A full window of fast (100 ms) and slow (400 ms) calls, then one more slow call.

    slow scores 0.81 and 1.0 in turn (mean 0.905); fast the two scores given, or no
    evaluation of either model when ``None``.
    """
    t = Traffic()
    for n in range(MIN_MODEL_CALLS_IN_PROCESS):
        slow = None if fast_scores is None else (0.81, 1.0)[n % 2]
        fast = None if fast_scores is None else fast_scores[n % 2]
        t.send(_scored("fast", 100, fast))
        t.send(_scored("slow", 400, slow))
    t.send(_scored("slow", 400, None))  # its answer not yet evaluated
    return t


def test_a_faster_but_worse_model_earns_no_hint_and_report_says_the_trade(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """fast scores 0.48/0.68 (mean 0.58) against slow's 0.81/1.0: no model_choice hint; report says the trade."""
    t = two_models((0.48, 0.68))
    assert t.hints("model_choice") == []
    (row,) = levers(t.report(tmp_path, capsys), "model_choice")
    assert row["requests"] == 0
    assert row["not_recommended"] > 0
    assert re.fullmatch(r"saves 300ms p50; correctness 0\.58 vs 0\.91, n \d+/\d+: not recommended", row["quality"])
    assert row["try"].startswith("keep slow in model_call")


def test_a_faster_and_equal_model_earns_the_hint_weighed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Null control: fast scores as slow does: the hint says quality_checked, report names the comparison."""
    t = two_models((0.81, 1.0))
    hints = t.hints("model_choice")
    assert hints
    assert {hint["latency_budget.hint.basis"] for hint in hints} == {"quality_checked"}
    (row,) = levers(t.report(tmp_path, capsys), "model_choice")
    assert row["requests"] > 0
    assert "quality" not in row
    assert re.search(r"correctness 0\.91 vs 0\.91, n \d+/\d+", row["test"])


def test_with_no_evaluation_the_hint_stands_with_the_caveat(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """No evaluation events at all: the hint says quality_not_recorded; report adds the one caveat clause."""
    t = two_models(None)
    hints = t.hints("model_choice")
    assert hints
    assert {hint["latency_budget.hint.basis"] for hint in hints} == {"quality_not_recorded"}
    (row,) = levers(t.report(tmp_path, capsys), "model_choice")
    assert row["requests"] > 0
    assert row["quality"] == NO_QUALITY_DATA


def _late(fast_scores: tuple[float, float]) -> Traffic:
    """The traffic of two_models, its evaluations emitted as log records after each request ended (by response id)."""
    t = Traffic()
    provider = LoggerProvider()
    provider.add_log_record_processor(EvaluationLogProcessor(t.p.processor))
    logger = provider.get_logger("evaluator")
    for n in range(MIN_MODEL_CALLS_IN_PROCESS):
        for model, duration, score in (("fast", 100, fast_scores[n % 2]), ("slow", 400, (0.81, 1.0)[n % 2])):
            answer = f"{model}-{n}"
            t.send((f"chat {model}", duration, chat(model, stream=True, ttft_s=0.05, **{"gen_ai.response.id": answer})))
            result = {"gen_ai.evaluation.name": "correctness", "gen_ai.evaluation.score.value": score}
            logger.emit(LogRecord(attributes={"event.name": EVALUATION, "gen_ai.response.id": answer, **result}))
    t.send(_scored("slow", 400, None))
    return t


def test_late_evaluation_log_records_stop_a_faster_but_worse_model_in_process() -> None:
    """Evaluations that arrive as log records after their request (joined by response id): no hint for worse."""
    assert _late((0.48, 0.68)).hints("model_choice") == []


def test_late_evaluation_log_records_let_a_faster_and_equal_model_through() -> None:
    """Null control: the same late records with equal scores: the hint, weighed (quality_checked)."""
    hints = _late((0.81, 1.0)).hints("model_choice")
    assert hints
    assert {hint["latency_budget.hint.basis"] for hint in hints} == {"quality_checked"}


LOOPS = """
version: 1
stages:
  model_call: {budget_ms: 10000, max_calls: 2}
"""


def _loops(fewer_fail: bool) -> Traffic:
    """20 requests of 2 calls (within max_calls) and 20 of 4, each call's answer evaluated 0.9 for correctness.

    With ``fewer_fail``, every other short request ends in a content filter.
    """
    evaluated = [(EVALUATION, {"gen_ai.evaluation.name": "correctness", "gen_ai.evaluation.score.value": 0.9})]

    def call(reason: str = "stop") -> Child:
        reasons: tuple[str, ...] = (reason,)
        attributes = chat("m", stream=True, ttft_s=0.05, **{"gen_ai.response.finish_reasons": reasons})
        return ("chat m", 100, attributes, SCOPE, evaluated)

    t = Traffic(LOOPS)
    for n in range(40):
        if n % 2:
            t.send(*(call() for _ in range(4)))
        else:
            t.send(call(), call("content_filter" if fewer_fail and n % 4 == 0 else "stop"))
    return t


def test_fewer_loops_with_lower_success_earn_no_iterations_claim(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Half the requests within max_calls end in a content filter, none past it: no iterations saving claimed."""
    (row,) = levers(_loops(fewer_fail=True).report(tmp_path, capsys), "iterations")
    assert row["requests"] == 0
    assert row["not_recommended"] == 20
    assert row["quality"] == "fewer loops: success 0.50 vs 1.00, n 20/20: no saving claimed"


def test_fewer_loops_that_succeed_as_often_earn_the_iterations_claim(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Null control: every request succeeds, as well evaluated: the 20 requests past max_calls claim their 200 ms."""
    (row,) = levers(_loops(fewer_fail=False).report(tmp_path, capsys), "iterations")
    assert row["requests"] == 20
    assert row["savings_total_ms"] == 4000.0
    assert "quality" not in row


def _loops_in_order(fewer_fail: bool) -> Traffic:
    """20 requests of 2 calls first (every other one refused when ``fewer_fail``), then 20 of 4 calls."""
    evaluated = [(EVALUATION, {"gen_ai.evaluation.name": "correctness", "gen_ai.evaluation.score.value": 0.9})]

    def call(reason: str = "stop") -> Child:
        reasons: tuple[str, ...] = (reason,)
        return (
            "chat m",
            100,
            chat("m", stream=True, ttft_s=0.05, **{"gen_ai.response.finish_reasons": reasons}),
            SCOPE,
            evaluated,
        )

    t = Traffic(LOOPS)
    for n in range(20):
        t.send(call(), call("content_filter" if fewer_fail and n % 2 == 0 else "stop"))
    for _ in range(20):
        t.send(*(call() for _ in range(4)))
    return t


def test_the_processor_gives_no_iterations_hint_where_fewer_loops_succeed_less() -> None:
    """In process: after 20 short requests, half refused, none of the 20 long ones gets an iterations hint."""
    assert _loops_in_order(fewer_fail=True).hints("iterations") == []


def test_the_processor_gives_the_iterations_hint_where_fewer_loops_succeed_as_often() -> None:
    """Null control: the short requests all succeed: each of the 20 long ones gets its 200 ms iterations hint."""
    hints = _loops_in_order(fewer_fail=False).hints("iterations")
    assert [hint["latency_budget.hint.potential_savings_ms"] for hint in hints] == [200.0] * 20


class _Points(HTMLParser):
    """The latency-versus-quality chart's points: model -> on the Pareto front."""

    def __init__(self) -> None:
        super().__init__()
        self.front: dict[str, bool] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "circle" and found.get("data-front") is not None:
            self.front[found.get("data-model") or ""] = found["data-front"] == "true"


def html_page(t: Traffic, tmp_path: Path) -> str:
    """``report --html`` of the traffic's spans."""
    traces, budgets = t.traces(tmp_path)
    page = tmp_path / "report.html"
    assert main(["report", str(traces), "--budgets", str(budgets), "--html", str(page)]) == 0
    return page.read_text(encoding="utf-8")


@pytest.mark.parametrize(("fast_scores", "front"), [((0.48, 0.68), {"fast", "slow"}), ((0.81, 1.0), {"fast"})])
def test_the_html_chart_marks_the_pareto_front(
    fast_scores: tuple[float, float], front: set[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A point per model; fast worse: both on the front (a trade); fast as good: slow is off it (beaten on both)."""
    points = _Points()
    points.feed(html_page(two_models(fast_scores), tmp_path))
    assert set(points.front) == {"fast", "slow"}
    assert {model for model, on in points.front.items() if on} == front
