"""The quality reader in process: evaluation span events, ERROR status, finish reasons and guardrail decisions
of recent requests feed the processor's baseline (``Baseline.quality``), bounded, and never hurt a span."""

from __future__ import annotations

from collections.abc import Mapping
from types import SimpleNamespace

from opentelemetry import trace
from opentelemetry._logs import Logger
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.trace import Status, StatusCode
from opentelemetry.util.types import AttributeValue

from latency_budget import EvaluationLogProcessor
from latency_budget._core.call_facts import Call
from latency_budget._core.levers import RecordedBaseline
from latency_budget._core.quality import CallQuality, Evaluation
from latency_budget._core.quality_reader import MAX_EVALUATION_NAMES, QualityTally, evaluation_of
from latency_budget._core.recent import MAX_PENDING

try:
    from opentelemetry._logs import LogRecord
except ImportError:  # pragma: no cover
    from opentelemetry.sdk._logs import LogRecord

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


def _logs(p: Pipeline) -> Logger:
    """A logger whose records go through an EvaluationLogProcessor joined to ``p``'s processor."""
    provider = LoggerProvider()
    provider.add_log_record_processor(EvaluationLogProcessor(p.processor))
    return provider.get_logger("evaluator")


def _emit(logger: Logger, attributes: Mapping[str, AttributeValue], *, trace_id: int = 0, span_id: int = 0) -> None:
    """An evaluation result as the conventions' log record, in the given span context (0: none)."""
    context = None
    if trace_id and span_id:
        context = trace.set_span_in_context(
            trace.NonRecordingSpan(trace.SpanContext(trace_id, span_id, is_remote=False))
        )
    logger.emit(
        LogRecord(
            timestamp=at(0),
            context=context,
            attributes={"event.name": "gen_ai.evaluation.result", **attributes},
        )
    )


def _ids(span: trace.Span) -> tuple[int, int]:
    context = span.get_span_context()
    return context.trace_id, context.span_id


def test_late_evaluation_log_records_join_their_calls_in_process() -> None:
    """Planted: results emitted after each request ended, by span context or by response id, join their model."""
    p = pipeline(BUDGETS)
    logger = _logs(p)
    for n in range(REQUESTS):
        model = "gpt-4o" if n % 2 == 0 else "gpt-4o-mini"
        root = p.start(f"request {n}", n * 1000.0)
        chat = p.start(
            f"chat {n}", n * 1000.0 + 10, parent=root, attributes={**_chat(model), "gen_ai.response.id": f"r{n}"}
        )
        chat.end(end_time=at(n * 1000.0 + 300))
        root.end(end_time=at(n * 1000.0 + 400))
        score = 0.9 if model == "gpt-4o" else 0.5
        result = {"gen_ai.evaluation.name": "correctness", "gen_ai.evaluation.score.value": score}
        if n % 4 < 2:
            trace_id, span_id = _ids(chat)
            _emit(logger, result, trace_id=trace_id, span_id=span_id)
        else:
            _emit(logger, {**result, "gen_ai.response.id": f"r{n}"})
    big = p.processor._recent.quality("model_call", "gpt-4o")
    mini = p.processor._recent.quality("model_call", "gpt-4o-mini")
    assert big is not None
    assert mini is not None
    assert big.evaluations["correctness"].n == REQUESTS // 2
    assert abs(big.evaluations["correctness"].mean - 0.9) < 1e-9
    assert abs(mini.evaluations["correctness"].mean - 0.5) < 1e-9
    assert p.processor._recent.unjoined == 0


def test_a_result_before_its_request_ended_waits_and_a_wrong_trace_joins_nothing() -> None:
    """A result emitted while its request is open joins when it ends; one under another trace id never joins."""
    p = pipeline(BUDGETS)
    logger = _logs(p)
    root = p.start("request", 0.0)
    chat = p.start("chat", 10.0, parent=root, attributes=_chat("gpt-4o"))
    chat.end(end_time=at(300))
    trace_id, span_id = _ids(chat)
    result = {"gen_ai.evaluation.name": "correctness", "gen_ai.evaluation.score.value": 1.0}
    _emit(logger, result, trace_id=trace_id, span_id=span_id)  # before the root ends
    _emit(logger, result, trace_id=trace_id ^ 1, span_id=span_id)  # the right span id, another trace
    assert p.processor._recent.quality("model_call", "gpt-4o") is None
    root.end(end_time=at(400))
    stats = p.processor._recent.quality("model_call", "gpt-4o")
    assert stats is not None
    assert stats.evaluations["correctness"].n == 1


def test_without_the_log_processor_late_results_say_nothing() -> None:
    """Null control: the same records through a logger without EvaluationLogProcessor reach no baseline."""
    p = pipeline(BUDGETS)
    provider = LoggerProvider()
    logger = provider.get_logger("evaluator")
    root = p.start("request", 0.0)
    chat = p.start("chat", 10.0, parent=root, attributes=_chat("gpt-4o"))
    chat.end(end_time=at(300))
    root.end(end_time=at(400))
    trace_id, span_id = _ids(chat)
    _emit(
        logger,
        {"gen_ai.evaluation.name": "c", "gen_ai.evaluation.score.value": 1.0},
        trace_id=trace_id,
        span_id=span_id,
    )
    assert p.processor._recent.quality("model_call", "gpt-4o") is None


def test_the_log_processor_never_raises_and_bounds_what_waits() -> None:
    """Records that are no results, or broken, pass; results for unknown calls wait, at most MAX_PENDING."""
    p = pipeline(BUDGETS)
    processor = EvaluationLogProcessor(p.processor)
    processor.on_emit(object())  # no record at all
    processor.on_emit(SimpleNamespace(log_record=SimpleNamespace(attributes={"event.name": 3}, event_name=None)))
    logger = _logs(p)
    for n in range(MAX_PENDING + 5):
        _emit(
            logger, {"gen_ai.evaluation.name": "c", "gen_ai.evaluation.score.value": 1.0}, trace_id=n + 1, span_id=n + 1
        )
    assert p.processor._recent.unjoined == 5
    assert processor.force_flush() is True


def test_a_guardrails_ai_validator_that_failed_blocks_the_answer_before_it() -> None:
    """guardrails-ai's validator span shape (read from its source): outcome `fail` flags, `pass` passes."""
    p = pipeline(BUDGETS)
    for n, outcome in enumerate(("fail", "pass", "pass", "fail")):
        root = p.start(f"request {n}", n * 1000.0)
        p.run("chat", n * 1000.0 + 10, n * 1000.0 + 300, parent=root, attributes=_chat("gpt-4o"))
        p.run(
            "ToxicLanguage.validate",
            n * 1000.0 + 310,
            n * 1000.0 + 330,
            parent=root,
            attributes={
                "openinference.span.kind": "GUARDRAIL",
                "type": "guardrails/guard/step/validator",
                "validator.name": "ToxicLanguage",
                "validator.validate.output.outcome": outcome,
            },
        )
        root.end(end_time=at(n * 1000.0 + 400))
    stats = p.processor._recent.quality("model_call", "gpt-4o")
    assert stats is not None
    assert (stats.guarded, stats.blocked) == (4, 2)


def test_the_requests_own_calls_carry_their_quality_in_its_report() -> None:
    """In process, each model call of the judged request carries what its spans said (Call.quality)."""
    p = pipeline(BUDGETS)
    _send(p, 0, "gpt-4o", score=0.75, reasons=("length",), decision="deny")
    (report,) = p.reports
    (call,) = [c for c in report.calls if c.model == "gpt-4o"]
    assert call.quality == CallQuality((Evaluation("correctness", 0.75, None),), False, True, True, False)
