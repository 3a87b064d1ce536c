"""The quality reader in process: evaluation span events, ERROR status, finish reasons and guardrail decisions
of recent requests feed the processor's baseline (``Baseline.quality``), bounded, and never hurt a span."""

from __future__ import annotations

from collections.abc import Mapping

from opentelemetry.trace import Status, StatusCode
from opentelemetry.util.types import AttributeValue

from latency_budget._core.call_facts import Call
from latency_budget._core.levers import RecordedBaseline
from latency_budget._core.quality import CallQuality, Evaluation
from latency_budget._core.quality_reader import MAX_EVALUATION_NAMES, QualityTally, evaluation_of

from .helpers import Pipeline, at, pipeline

BUDGETS = """
version: 1
stages:
  model_call: {budget_ms: 10000}
  validation: {budget_ms: 1000}
"""
REQUESTS = 40


def _chat(model: str, reasons: tuple[str, ...] = ("stop",)) -> dict[str, AttributeValue]:
    return {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": model,
        "gen_ai.response.finish_reasons": reasons,
    }


def _send(
    p: Pipeline,
    n: int,
    model: str,
    *,
    score: float | None = None,
    error: bool = False,
    reasons: tuple[str, ...] = ("stop",),
    decision: str | None = None,
    event: Mapping[str, AttributeValue] | None = None,
) -> None:
    """One request: a server root, a chat span (with an evaluation event when ``score``), then a guardrail."""
    begin = n * 1000.0
    root = p.start(f"request {n}", begin)
    chat = p.start(f"chat {model}", begin + 10, parent=root, attributes=_chat(model, reasons))
    if score is not None:
        chat.add_event(
            "gen_ai.evaluation.result",
            {"gen_ai.evaluation.name": "correctness", "gen_ai.evaluation.score.value": score},
            timestamp=at(begin + 300),
        )
    if event is not None:
        chat.add_event("gen_ai.evaluation.result", event, timestamp=at(begin + 300))
    if error:
        chat.set_status(Status(StatusCode.ERROR, "upstream 500"))
    chat.end(end_time=at(begin + 310))
    if decision is not None:
        p.run(
            "apply_guardrail output",
            begin + 320,
            begin + 340,
            parent=root,
            attributes={
                "gen_ai.operation.name": "apply_guardrail",
                "gen_ai.security.target.type": "llm_output",
                "gen_ai.security.decision.type": decision,
            },
        )
    root.end(end_time=at(begin + 400))


def test_span_events_errors_and_guardrails_reach_the_processors_baseline() -> None:
    """Planted: per model, the processor's baseline holds the evaluation mean and n, errors, cut and blocks."""
    p = pipeline(BUDGETS)
    for n in range(REQUESTS):
        big = n % 2 == 0
        _send(
            p,
            n,
            "gpt-4o" if big else "gpt-4o-mini",
            score=0.9 if big else 0.5,
            error=not big and n % 4 == 1,
            reasons=("length",) if n % 10 == 0 else ("stop",),
            decision="deny" if not big and n % 4 == 3 else "allow",
        )
    baseline = p.processor._recent
    big, mini = baseline.quality("model_call", "gpt-4o"), baseline.quality("model_call", "gpt-4o-mini")
    assert big is not None
    assert mini is not None
    assert (big.calls, mini.calls) == (REQUESTS // 2, REQUESTS // 2)
    assert big.evaluations["correctness"].n == REQUESTS // 2
    assert abs(big.evaluations["correctness"].mean - 0.9) < 1e-9
    assert abs(mini.evaluations["correctness"].mean - 0.5) < 1e-9
    assert (big.errors, mini.errors) == (0, REQUESTS // 4)
    assert (big.cut, mini.cut) == (REQUESTS // 10, 0)
    assert (big.guarded, big.blocked) == (REQUESTS // 2, 0)
    assert (mini.guarded, mini.blocked) == (REQUESTS // 2, REQUESTS // 4)
    assert mini.block_rate == 0.5


def test_no_quality_signal_gives_no_quality_in_process() -> None:
    """Null control: the same traffic with no evaluation, error, cut or guardrail says nothing of quality."""
    p = pipeline(BUDGETS)
    for n in range(REQUESTS):
        _send(p, n, "gpt-4o" if n % 2 == 0 else "gpt-4o-mini")
    assert p.processor._recent.quality("model_call", "gpt-4o") is None
    assert p.processor._recent.quality("model_call", "gpt-4o-mini") is None


def test_malformed_evaluation_events_are_ignored_and_every_span_is_forwarded() -> None:
    """Events with a non-string name, a string score, no score or label, or error.type are no evaluation;
    every span still reaches the exporter, once."""
    p = pipeline(BUDGETS)
    odd: list[Mapping[str, AttributeValue]] = [
        {"gen_ai.evaluation.name": 3, "gen_ai.evaluation.score.value": 1.0},
        {"gen_ai.evaluation.name": "x", "gen_ai.evaluation.score.value": "high"},
        {"gen_ai.evaluation.name": "x"},
        {"gen_ai.evaluation.name": "x", "gen_ai.evaluation.score.value": 1.0, "error.type": "timeout"},
        {"gen_ai.evaluation.name": "x", "gen_ai.evaluation.score.value": float("nan")},
    ]
    for n, event in enumerate(odd):
        _send(p, n, "gpt-4o", event=event)
    assert p.processor._recent.quality("model_call", "gpt-4o") is None
    names = [span.name for span in p.finished()]
    assert sorted(names) == sorted([f"request {n}" for n in range(len(odd))] + ["chat gpt-4o"] * len(odd))


def test_a_guardrail_on_the_prompt_judges_no_answer_in_process() -> None:
    """Null control: a guardrail that checked the prompt (llm_input) judges no model's answer."""
    p = pipeline(BUDGETS)
    for n in range(4):
        root = p.start(f"request {n}", n * 1000.0)
        p.run(
            "apply_guardrail input",
            n * 1000.0 + 320,
            n * 1000.0 + 340,
            parent=root,
            attributes={
                "gen_ai.operation.name": "apply_guardrail",
                "gen_ai.security.target.type": "llm_input",
                "gen_ai.security.decision.type": "deny",
            },
        )
        p.run("chat gpt-4o", n * 1000.0 + 10, n * 1000.0 + 310, parent=root, attributes=_chat("gpt-4o"))
        root.end(end_time=at(n * 1000.0 + 400))
    assert p.processor._recent.quality("model_call", "gpt-4o") is None


def _call(span_id: int, model: str, quality: CallQuality | None) -> Call:
    return Call(
        span_id, "model_call", 0, 1, None, model, None, None, True, False, False, None, None, None, model, None, quality
    )


def test_the_recorded_baseline_sums_its_calls_quality() -> None:
    """RecordedBaseline.quality counts every call of the model and the evidence of those that have any."""
    calls = [
        _call(1, "a", CallQuality((Evaluation("c", 1.0, None),))),
        _call(2, "a", CallQuality((Evaluation("c", 0.0, "fail"),), error=True)),
        _call(3, "a", None),
        _call(4, "b", None),
    ]
    baseline = RecordedBaseline(calls)
    stats = baseline.quality("model_call", "a")
    assert stats is not None
    assert stats.calls == 3
    assert stats.errors == 1
    assert stats.evaluations["c"].n == 2
    assert stats.evaluations["c"].mean == 0.5
    assert baseline.quality("model_call", "b") is None
    assert baseline.quality("model_call", "nope") is None


def test_a_tally_keeps_a_bounded_number_of_evaluations() -> None:
    """More evaluation names than MAX_EVALUATION_NAMES: the first are kept, the rest counted, none grows."""
    tally = QualityTally()
    for n in range(MAX_EVALUATION_NAMES + 10):
        tally.add(CallQuality((Evaluation(f"e{n}", 1.0, None),)))
    stats = tally.stats()
    assert stats is not None
    assert len(stats.evaluations) == MAX_EVALUATION_NAMES
    assert tally.unkept == 10


def test_an_evaluation_names_its_answer_and_its_long_name_is_cut() -> None:
    """evaluation_of reads the response id, and cuts a megabyte name to a bounded one."""
    found = evaluation_of(
        "gen_ai.evaluation.result",
        {
            "gen_ai.evaluation.name": "n" * 1_000_000,
            "gen_ai.evaluation.score.label": "pass",
            "gen_ai.response.id": "r1",
        },
    )
    assert found is not None
    evaluation, response = found
    assert len(evaluation.name) == 128
    assert (evaluation.score, evaluation.label, response) == (None, "pass", "r1")
    assert evaluation_of("something.else", {"gen_ai.evaluation.name": "x", "gen_ai.evaluation.score.value": 1}) is None
