"""splunk-otel-util-genai-evals, offline: a real evaluation pipeline whose results are read with no rules.

The GenAI utilities' ``TelemetryHandler`` writes each model call as a ``chat`` span (the
conventions' keys: ``model_call``, no ``match`` rule) and hands the finished call to its
evaluation manager, which runs the configured evaluators on a worker thread after the call
ended and emits each result as a ``gen_ai.evaluation.result`` log record in the call's span
context. The evaluator is the test's own (a word list, no model, no network), registered
through the library's evaluator registry; what it returned is the truth the report is held
to. Spans and log records are written as OTLP/JSON by the OTLP exporters' own encoders
(protobuf JSON: base64 ids, enum names), read back by ``report --logs``, and, live, joined
by :class:`~latency_budget.EvaluationLogProcessor`.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from google.protobuf.json_format import MessageToJson
from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.trace import SpanKind
from opentelemetry.util.genai.evals.base import Evaluator
from opentelemetry.util.genai.evals.registry import register_evaluator
from opentelemetry.util.genai.handler import get_telemetry_handler
from opentelemetry.util.genai.types import EvaluationResult, InputMessage, LLMInvocation, OutputMessage, Text

from latency_budget import EvaluationLogProcessor
from latency_budget.cli import main

from ..stacks import SettledPipeline, budget_pipeline

try:
    from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter
except ImportError:  # SDK < 1.39 names it InMemoryLogExporter
    from opentelemetry.sdk._logs.export import InMemoryLogExporter as InMemoryLogRecordExporter

REQUESTS = 12
MODELS = ("gpt-4o", "gpt-4o-mini")
BAD_WORD = "darn"
TRUTH: list[tuple[str, float]] = []  # (model, score) of every result the evaluator returned


class WatchedLogExporter(InMemoryLogRecordExporter):  # type: ignore[misc,valid-type]
    """Keeps exported log records, and lets the test wait (bounded) for those the evaluator's thread emits."""

    def __init__(self) -> None:
        super().__init__()
        self._exported = threading.Condition()

    def export(self, batch: Any) -> Any:
        result = super().export(batch)
        with self._exported:
            self._exported.notify_all()
        return result

    def wait_for(self, count: int, timeout_s: float = 60.0) -> bool:
        with self._exported:
            return self._exported.wait_for(lambda: len(self.get_finished_logs()) >= count, timeout_s)


class WordList(Evaluator):  # type: ignore[misc]
    """Toxicity as the share of a word list's hits, at most 1: deterministic, offline."""

    def default_metrics(self) -> Sequence[str]:
        return ("toxicity",)

    def evaluate_llm(self, invocation: LLMInvocation) -> list[EvaluationResult]:
        text = " ".join(p.content for m in invocation.output_messages for p in m.parts if isinstance(p, Text))
        score = min(1.0, text.split().count(BAD_WORD) / 4)
        TRUTH.append((invocation.request_model, score))
        return [EvaluationResult(metric_name="toxicity", score=score, label="toxic" if score else "clean")]


@pytest.fixture(scope="module")
def handled() -> Iterator[tuple[SettledPipeline, WatchedLogExporter, EvaluationLogProcessor]]:
    """REQUESTS requests through the library's handler, under a budget pipeline; every evaluation emitted."""
    register_evaluator(
        "wordlist",
        lambda metrics=None, invocation_type=None, options=None: WordList(
            metrics, invocation_type=invocation_type, options=options
        ),
    )
    saved = os.environ.get("OTEL_INSTRUMENTATION_GENAI_EVALS_EVALUATORS")
    os.environ["OTEL_INSTRUMENTATION_GENAI_EVALS_EVALUATORS"] = "wordlist"
    pipe = budget_pipeline(max_model_calls=1)
    logs = WatchedLogExporter()
    joined = EvaluationLogProcessor(pipe.processor)
    logger_provider = LoggerProvider()
    logger_provider.add_log_record_processor(joined)
    logger_provider.add_log_record_processor(SimpleLogRecordProcessor(logs))
    try:
        handler = get_telemetry_handler(tracer_provider=pipe.provider, logger_provider=logger_provider)
        tracer = pipe.provider.get_tracer("app")
        for n in range(REQUESTS):
            model = MODELS[n % 2]
            with tracer.start_as_current_span("request", kind=SpanKind.SERVER):
                invocation = LLMInvocation(
                    request_model=model, input_messages=[InputMessage(role="user", parts=[Text(content="hi")])]
                )
                handler.start_llm(invocation)
                words = ["ok"] * 4 + ([BAD_WORD] * (n % 5) if model == "gpt-4o-mini" else [])
                invocation.output_messages = [
                    OutputMessage(role="assistant", parts=[Text(content=" ".join(words))], finish_reason="stop")
                ]
                invocation.response_id = f"chatcmpl-{n}"
                handler.stop_llm(invocation)
        assert logs.wait_for(REQUESTS), "the evaluator's results were not all emitted"
        yield pipe, logs, joined
    finally:
        if saved is None:
            os.environ.pop("OTEL_INSTRUMENTATION_GENAI_EVALS_EVALUATORS", None)
        else:
            os.environ["OTEL_INSTRUMENTATION_GENAI_EVALS_EVALUATORS"] = saved


def _truth() -> dict[str, tuple[int, float]]:
    """model -> (results, mean score) of what the evaluator really returned."""
    found: dict[str, tuple[int, float]] = {}
    for model in MODELS:
        scores = [score for m, score in TRUTH if m == model]
        found[model] = (len(scores), sum(scores) / len(scores))
    return found


def test_the_calls_are_staged_with_no_rules(
    handled: tuple[SettledPipeline, WatchedLogExporter, EvaluationLogProcessor],
) -> None:
    """Each of the handler's chat spans is a model_call by the built-in table, every span exported once."""
    pipe, _, _ = handled
    spans = pipe.finished()
    chats = [s for s in spans if (s.attributes or {}).get("gen_ai.operation.name") == "chat"]
    assert len(chats) == REQUESTS
    assert {(s.attributes or {}).get("latency_budget.stage") for s in chats} == {"model_call"}
    assert sorted(s.context.span_id for s in spans if s.context) == sorted(
        s.context.span_id for s in pipe.handed.ended if s.context
    )


def test_the_evaluators_results_arrive_as_late_log_records_of_the_calls(
    handled: tuple[SettledPipeline, WatchedLogExporter, EvaluationLogProcessor],
) -> None:
    """Every result is a gen_ai.evaluation.result record in the span context of a chat span, emitted after it ended."""
    pipe, logs, _ = handled
    chats = {s.context.span_id: s for s in pipe.finished() if s.name.startswith("chat") and s.context}
    records = [data.log_record for data in logs.get_finished_logs()]
    assert len(records) == REQUESTS
    for record in records:
        assert record.event_name == "gen_ai.evaluation.result"
        assert record.span_id in chats
        emitted = record.timestamp or record.observed_timestamp or 0  # the library sets only the observed time
        assert emitted >= (chats[record.span_id].end_time or 0)


def test_the_processor_joins_the_late_results_live(
    handled: tuple[SettledPipeline, WatchedLogExporter, EvaluationLogProcessor],
) -> None:
    """Through EvaluationLogProcessor, the processor's baseline holds each model's n and mean as returned."""
    pipe, _, _ = handled
    for model, (count, mean) in _truth().items():
        stats = pipe.processor._recent.quality("model_call", model)
        assert stats is not None, model
        assert stats.evaluations["toxicity"].n == count
        assert abs(stats.evaluations["toxicity"].mean - mean) < 1e-9


def _otlp_json(handled: tuple[SettledPipeline, WatchedLogExporter, EvaluationLogProcessor]) -> tuple[str, str]:
    """The spans and the log records as OTLP/JSON lines, by the OTLP exporters' own encoders."""
    pipe, logs, _ = handled
    traces = MessageToJson(encode_spans(pipe.finished()), indent=None)
    records = MessageToJson(encode_logs(logs.get_finished_logs()), indent=None)
    return traces, records


def _report(*args: str) -> dict[tuple[str, str], Any]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["report", *args, "--format", "json"]) == 0
    return {(row["stage"], row["model"]): row["quality"] for row in json.loads(out.getvalue())["models"]}


def test_report_reads_the_results_from_a_logs_file_and_from_one_file_of_both(
    handled: tuple[SettledPipeline, WatchedLogExporter, EvaluationLogProcessor], tmp_path: Path
) -> None:
    """report --logs, and report on one file of both signals, give each model the evaluator's n and mean."""
    traces, records = _otlp_json(handled)
    (tmp_path / "traces.jsonl").write_text(traces + "\n", encoding="utf-8")
    (tmp_path / "logs.jsonl").write_text(records + "\n", encoding="utf-8")
    (tmp_path / "both.jsonl").write_text(records + "\n" + traces + "\n", encoding="utf-8")
    for models in (
        _report(str(tmp_path / "traces.jsonl"), "--logs", str(tmp_path / "logs.jsonl")),
        _report(str(tmp_path / "both.jsonl")),
    ):
        for model, (count, mean) in _truth().items():
            quality = models[("model_call", model)]
            assert quality is not None, model
            (evaluation,) = quality["evaluations"]
            assert evaluation["name"] == "toxicity"
            assert evaluation["n"] == count
            assert abs(evaluation["mean"] - mean) < 1e-9


def test_without_the_logs_the_report_knows_nothing_of_quality(
    handled: tuple[SettledPipeline, WatchedLogExporter, EvaluationLogProcessor], tmp_path: Path
) -> None:
    """Null control: the same spans without their log records give no quality."""
    traces, _ = _otlp_json(handled)
    (tmp_path / "traces.jsonl").write_text(traces + "\n", encoding="utf-8")
    assert set(_report(str(tmp_path / "traces.jsonl")).values()) == {None}
