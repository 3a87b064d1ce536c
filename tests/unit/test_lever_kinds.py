"""One table of hint kinds: every consumer (processor, log text, metrics, CLI, demo) handles every kind in it."""

from __future__ import annotations

from collections.abc import Callable
from typing import get_args

import pytest
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor

try:
    from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter
except ImportError:  # SDK < 1.39 (tests/constraints-sdk-min.txt) names it InMemoryLogExporter
    from opentelemetry.sdk._logs.export import InMemoryLogExporter as InMemoryLogRecordExporter

from latency_budget import TraceReport, load_budgets
from latency_budget import _attributes as attr
from latency_budget._core.kinds import HINT_KINDS, KINDS, LEVER_KINDS, HintKind, LeverKind
from latency_budget._core.recent import MIN_MODEL_CALLS_IN_PROCESS, WINDOW
from latency_budget._replay import evaluate_spans, record_of
from latency_budget.cli._levers import analyse_levers
from latency_budget.export import HintLogEmitter
from latency_budget.export.logs import describe_hint

from .helpers import pipeline
from .test_lever_hints import BUDGETS, Requests, chat, hints

TOOL = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "t", "gen_ai.tool.call.arguments": "{}"}
LIMITED = BUDGETS.replace("model_call: {budget_ms: 10000}", "model_call: {budget_ms: 10000, max_calls: 1}").replace(
    "tool_calls: {budget_ms: 1000}", "tool_calls: {budget_ms: 1000, parallelizable: true}"
)


def _streaming(r: Requests) -> None:
    for _ in range(3):
        r.send(("chat m", 1000, chat("m", stream=True, ttft_s=0.25)))
    r.send(("chat m", 1500, chat("m", stream=False)))


def _cache(r: Requests) -> None:
    r.send(("tool a", 100, TOOL), ("chat m", 10, chat("m", stream=True, ttft_s=0.005)), ("tool b", 100, TOOL))


def _model_choice(r: Requests) -> None:
    for _ in range(MIN_MODEL_CALLS_IN_PROCESS):  # in process, models are compared on full windows
        r.send(("chat fast", 100, chat("fast", stream=True, ttft_s=0.0625)))
        r.send(("chat slow", 400, chat("slow", stream=True, ttft_s=0.0625)))
    r.send(("chat slow", 400, chat("slow", stream=True, ttft_s=0.0625)))


def _context_size(r: Requests) -> None:
    for n in range(WINDOW - 1):  # fits are tested once a window is full
        tokens = 1000 * (1 + n % 10)
        r.send(("chat m", 100 + 0.05 * tokens, chat("m", stream=False, **{"gen_ai.usage.input_tokens": tokens})))
    r.send(("chat m", 500, chat("m", stream=False, **{"gen_ai.usage.input_tokens": 8000})))


def _output_length(r: Requests) -> None:
    for n in range(WINDOW - 1):
        out = 100 * (1 + n % 12)
        r.send(("chat m", 250 + 10 * out, chat("m", stream=True, ttft_s=0.25, **{"gen_ai.usage.output_tokens": out})))
    r.send(("chat m", 12250, chat("m", stream=True, ttft_s=0.25, **{"gen_ai.usage.output_tokens": 1200})))


def _reasoning(r: Requests) -> None:
    for n in range(WINDOW - 1):
        thought, answer = 200 * (1 + n % 5), 100 * (1 + n % 3)
        tokens = {"gen_ai.usage.output_tokens": thought + answer, "gen_ai.usage.reasoning.output_tokens": thought}
        r.send(("chat m", 200 + 2 * (thought + answer), chat("m", stream=False, **tokens)))
    tokens = {"gen_ai.usage.output_tokens": 1800, "gen_ai.usage.reasoning.output_tokens": 1600}
    r.send(("chat m", 3800, chat("m", stream=False, **tokens)))


def _sequential_calls(r: Requests) -> None:
    tool = {"gen_ai.operation.name": "execute_tool"}
    r.send(("tool a", 100, {**tool, "gen_ai.tool.name": "a"}), ("tool b", 100, {**tool, "gen_ai.tool.name": "b"}))


def _iterations(r: Requests) -> None:
    r.send(("chat a", 100, chat("a", stream=True, ttft_s=0.01)), ("chat b", 100, chat("b", stream=True, ttft_s=0.01)))


# One scenario per kind, each ending in a request that earns a hint of that kind.
SCENARIOS: dict[HintKind, Callable[[Requests], None]] = {
    "sequential_calls": _sequential_calls,
    "iterations": _iterations,
    "streaming": _streaming,
    "cache": _cache,
    "model_choice": _model_choice,
    "context_size": _context_size,
    "output_length": _output_length,
    "reasoning": _reasoning,
}


def test_the_table_the_literals_and_the_scenarios_name_the_same_kinds() -> None:
    """HintKind, LeverKind, KINDS and this file's scenarios agree: a new kind fails here until it has one."""
    assert HINT_KINDS == get_args(HintKind) == tuple(KINDS)
    assert set(LEVER_KINDS) == set(get_args(LeverKind)) == {k for k, info in KINDS.items() if info.estimated}
    assert set(SCENARIOS) == set(HINT_KINDS)


@pytest.mark.parametrize("kind", HINT_KINDS)
def test_every_kind_reaches_the_trace_the_log_records_and_the_cli(kind: HintKind) -> None:
    """Each kind passes the processor's gate, becomes a hint event and a log record in the table's words, and advice."""
    logs = InMemoryLogRecordExporter()
    logger_provider = LoggerProvider()
    logger_provider.add_log_record_processor(SimpleLogRecordProcessor(logs))
    emitter = HintLogEmitter(logger_provider)
    reports: list[TraceReport] = []

    def both(report: TraceReport) -> None:
        reports.append(report)
        emitter(report)

    r = Requests()
    r.p = pipeline(LIMITED, on_report=both)
    SCENARIOS[kind](r)
    last = r.p.finished()[-1]
    assert kind in hints(last)
    assert last.context is not None
    (record,) = [
        item.log_record
        for item in logs.get_finished_logs()
        if (item.log_record.attributes or {})[attr.HINT_KIND] == kind
        and item.log_record.span_id == last.context.span_id
    ]
    (hint,) = [h for h in reports[-1].hints if h.kind == kind]
    assert record.body == describe_hint(hint)
    words = KINDS[kind].text.split("{saving}")[0].split("{calls}")[-1]
    assert words
    assert words in str(record.body)
    # The CLI, over the same spans replayed: a ranked lever of the kind, with advice and a basis.
    replayed = evaluate_spans(load_budgets(text=LIMITED), [record_of(span) for span in r.p.finished()])
    analysis = analyse_levers(replayed)
    (lever,) = [lever for lever in analysis.levers if lever.kind == kind]
    assert lever.advice
    assert lever.basis
    assert lever.saves == KINDS[kind].saves
