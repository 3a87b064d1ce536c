"""latency_budget.testing: budget assertions for users' own test suites."""

from __future__ import annotations

import json
import math
import random
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.util._once import Once

from latency_budget import load_budgets
from latency_budget.export.file import encode_otlp_json
from latency_budget.testing import (
    BudgetChecker,
    BudgetResult,
    LatencyBudgetWarning,
    assert_no_regression,
    assert_within_budget,
)

from .helpers import at, op

BUDGETS_YAML = """\
version: 1
total_ms: 1000
stages:
  retrieval: {budget_ms: 100}
  model_call: {budget_ms: 800}
  guardrails:
    budget_ms: 50
    severity: warn
    match: {name: "guardrail*"}
profiles:
  - name: voice
    when: {attributes: {app.channel: voice}}
    stages: {model_call: {budget_ms: 400}}
"""
BUDGETS = load_budgets(text=BUDGETS_YAML, source="budgets.yaml")
# For blocks that hold two requests: room for both.
RELAXED = load_budgets(text=BUDGETS_YAML.replace("800", "2000").replace("1000", "5000"), source="relaxed.yaml")


def pipeline(
    *,
    retrieval_ms: float = 50,
    model_ms: float = 500,
    guard_ms: float = 20,
    offset_ms: float = 0,
    root: str | None = "answer",
    channel: str = "chat",
    tracer: trace.Tracer | None = None,
) -> None:
    """A retrieval, a model call and a guardrail, one after another, with explicit timestamps.

    Uses the global tracer, as instrumented application code does; ``root=None`` leaves
    out the span around them.
    """
    tracer = tracer or trace.get_tracer("app")
    end = offset_ms + retrieval_ms + model_ms + guard_ms + 10
    parent = tracer.start_span(root, start_time=at(offset_ms), attributes={"app.channel": channel}) if root else None
    context = trace.set_span_in_context(parent) if parent is not None else None
    t = offset_ms
    for name, attributes, duration in (
        ("retrieve", op("retrieval"), retrieval_ms),
        ("chat", op("chat"), model_ms),
        ("guardrail output", {}, guard_ms),
    ):
        tracer.start_span(name, context=context, attributes=attributes, start_time=at(t)).end(end_time=at(t + duration))
        t += duration
    if parent is not None:
        parent.end(end_time=at(end))


@pytest.fixture(autouse=True)
def no_global_provider() -> Iterator[None]:
    """Each test starts with no global tracer provider, and the suite's global state comes back afterwards."""
    saved = (trace._TRACER_PROVIDER, trace._TRACER_PROVIDER_SET_ONCE)
    trace._TRACER_PROVIDER, trace._TRACER_PROVIDER_SET_ONCE = None, Once()
    yield
    trace._TRACER_PROVIDER, trace._TRACER_PROVIDER_SET_ONCE = saved


def sdk_provider() -> tuple[TracerProvider, InMemorySpanExporter]:
    """A user's own SDK provider exporting into memory."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


# -- pass, fail, warn -----------------------------------------------------------------------


def test_passing_pipeline_exposes_its_report() -> None:
    """A pipeline within its budgets passes; the result holds the report and the stage table."""
    with assert_within_budget(BUDGETS) as result:
        pipeline()
    report = result.report
    assert not result.violated
    assert not result.warned
    assert report.stage("model_call").actual_ms == 500.0
    assert report.total_actual_ms == 580.0
    assert report.root_name == "answer"
    assert "model_call | 800ms  | 500ms  | yes" in result.table()


def test_failing_pipeline_raises_with_the_stage_table() -> None:
    """An error-level budget exceeded raises AssertionError naming the stage, with the seed's stage table."""
    with pytest.raises(AssertionError) as failed, assert_within_budget(BUDGETS):
        pipeline(model_ms=900)
    message = str(failed.value)
    assert message.splitlines()[0] == "latency budget exceeded: model_call (budgets.yaml, profile default)"
    assert "Stage      | Budget | Actual | Within budget?" in message
    assert "model_call | 800ms  | 900ms  | NO  <-- over budget (duration)" in message
    assert "total      | 1000ms | 980ms  | yes" in message


def test_budget_file_path_is_accepted(tmp_path: Path) -> None:
    """A budget file's path works like a loaded config, and messages name that file."""
    path = tmp_path / "budgets.yaml"
    path.write_text(BUDGETS_YAML, encoding="utf-8")
    with pytest.raises(AssertionError, match=f"retrieval \\({path}, profile default\\)"), assert_within_budget(path):
        pipeline(retrieval_ms=150)


def test_warn_only_budget_warns_and_passes() -> None:
    """A warn-level budget exceeded issues LatencyBudgetWarning with the table; the check passes."""
    warns = pytest.warns(LatencyBudgetWarning, match=r"latency budget warning: guardrails \(budgets.yaml")
    with warns as caught, assert_within_budget(BUDGETS) as result:
        pipeline(guard_ms=80)
    assert result.warned
    assert not result.violated
    assert "guardrails | 50ms   | 80ms   | warn (duration)" in str(caught[0].message)
    assert caught[0].filename == __file__  # points at the test, not at the helper


def test_function_form_warning_points_at_the_caller() -> None:
    """The function form (and the fixture's) warn at the caller's line, like the block form."""
    with pytest.warns(LatencyBudgetWarning) as direct:
        assert_within_budget(BUDGETS, lambda: pipeline(guard_ms=80))
    with pytest.warns(LatencyBudgetWarning) as fixture:
        BudgetChecker(BUDGETS)(fn=lambda: pipeline(guard_ms=80))
    assert [warning.filename for warning in (*direct, *fixture)] == [__file__, __file__]


def test_profile_is_chosen_from_the_root_span() -> None:
    """The block's root picks the profile as in production: a voice request is held to voice budgets."""
    with (
        pytest.raises(AssertionError, match=r"model_call, total \(budgets.yaml, profile voice\)"),
        assert_within_budget(BUDGETS),
    ):
        pipeline(channel="voice")


def test_spans_without_a_common_root_are_judged_as_one_request() -> None:
    """Top-level spans of a block (no span around them) form one request spanning them all."""
    with assert_within_budget(BUDGETS) as result:
        pipeline(root=None)
    report = result.report
    assert report.root_name == "assert_within_budget"
    assert report.total_actual_ms == 570.0
    assert [stage.count for stage in report.stages] == [1, 1, 1]


def test_spans_on_other_threads_are_captured() -> None:
    """Spans started on another thread during the block count too (no context propagation needed)."""
    with assert_within_budget(BUDGETS) as result:
        worker = threading.Thread(target=pipeline, kwargs={"model_ms": 700})
        worker.start()
        worker.join()
    assert result.report.stage("model_call").actual_ms == 700.0


def test_nested_blocks_judge_their_own_spans() -> None:
    """An inner block judges only its spans; the outer one judges everything started inside it."""
    with assert_within_budget(RELAXED) as outer:
        pipeline()
        with assert_within_budget(BUDGETS) as inner:
            pipeline(offset_ms=1_000, model_ms=600)
    assert inner.report.stage("model_call").actual_ms == 600.0
    assert inner.report.root_name == "answer"
    assert outer.report.stage("model_call").actual_ms == 1_100.0
    assert outer.report.stage("model_call").count == 2
    assert outer.report.root_name == "assert_within_budget"


def test_failing_inner_block_fails_the_outer_one_without_judging_it() -> None:
    """An inner block's AssertionError propagates through the outer block unchanged."""

    def nested() -> None:
        with assert_within_budget(BUDGETS):
            pipeline()
            with assert_within_budget(BUDGETS):
                pipeline(model_ms=900)

    with pytest.raises(AssertionError, match="model_call") as failed:
        nested()
    assert str(failed.value).count("latency budget exceeded") == 1


# -- the tracer provider -----------------------------------------------------------------------


def test_existing_sdk_provider_keeps_exporting_and_stays_global() -> None:
    """With a global SDK provider, only spans started inside a block are judged, all still reach the
    user's exporter, and the global provider stays."""
    provider, exporter = sdk_provider()
    trace.set_tracer_provider(provider)
    tracer = trace.get_tracer("app")
    outside = tracer.start_span("started before the block", start_time=at(0))
    with assert_within_budget(BUDGETS) as first:
        pipeline()
        outside.end(end_time=at(5))
        straddling = tracer.start_span("ends after the block", start_time=at(0))
    straddling.end(end_time=at(5))
    with assert_within_budget(BUDGETS) as second:
        pipeline()
    pipeline_spans = {"answer", "retrieve", "chat", "guardrail output"}
    assert {span.name for span in first.spans} == {span.name for span in second.spans} == pipeline_spans
    assert len(second.spans) == 4
    assert trace.get_tracer_provider() is provider
    assert len(exporter.get_finished_spans()) == 4 + 4 + 2


def test_no_provider_installs_one_for_the_block_and_restores_the_global_state() -> None:
    """With no provider set, the block records through a temporary one; afterwards the global can be set as usual."""
    module_tracer = trace.get_tracer("app")  # as created at import time, before any provider
    with assert_within_budget(BUDGETS) as result:
        pipeline(tracer=module_tracer)
    assert result.report.stage("model_call").count == 1
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    assert not module_tracer.start_span("after the block").is_recording()

    provider, exporter = sdk_provider()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        trace.set_tracer_provider(provider)
    assert trace.get_tracer_provider() is provider
    module_tracer.start_span("with the real provider").end()
    assert [span.name for span in exporter.get_finished_spans()] == ["with the real provider"]


def test_nested_blocks_without_a_provider_share_the_temporary_one() -> None:
    """Nested blocks with no provider set record through one temporary provider, removed by the outer block."""
    with assert_within_budget(RELAXED) as outer:
        with assert_within_budget(BUDGETS):
            pipeline()
        assert not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
        pipeline(offset_ms=1_000)
    assert outer.report.stage("model_call").count == 2
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


def test_explicit_tracer_provider_is_used() -> None:
    """tracer_provider= collects from a provider that is not global, and leaves the global alone."""
    provider, _ = sdk_provider()
    with assert_within_budget(BUDGETS, tracer_provider=provider) as result:
        pipeline(tracer=provider.get_tracer("app"))
    assert result.report.stage("model_call").actual_ms == 500.0
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


def test_exception_in_the_block_propagates_unjudged_and_restores_state() -> None:
    """An exception inside the block propagates as it is (no budget verdict) and the global state is restored."""

    def failing() -> None:
        with assert_within_budget(BUDGETS):
            pipeline(model_ms=5_000)
            raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        failing()
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


def test_block_without_spans_fails_with_a_hint() -> None:
    """A block that starts no span fails, saying why, rather than passing vacuously."""
    with pytest.raises(AssertionError, match="no span was started inside the block"), assert_within_budget(BUDGETS):
        pass


def test_result_is_available_only_after_the_block() -> None:
    """Reading the result inside the block is an error: nothing has been judged yet."""
    with assert_within_budget(BUDGETS) as result:
        pipeline()
        with pytest.raises(RuntimeError, match="once the block has ended"):
            _ = result.report


# -- repetitions and percentiles -----------------------------------------------------------------


def test_percentile_over_runs_tolerates_a_rare_slow_run() -> None:
    """runs=20, percentile=95 judges the 19th-smallest figure: one slow run in twenty passes."""
    durations = iter([500.0] * 19 + [2_000.0])
    result = assert_within_budget(BUDGETS, lambda: pipeline(model_ms=next(durations)), runs=20, percentile=95)
    assert len(result.runs) == 20
    assert result.runs[-1].stage("model_call").actual_ms == 2_000.0
    assert result.report.stage("model_call").actual_ms == 500.0
    assert result.report.root_name == "p95 of 20 runs"
    assert result.table().startswith("p95 over 20 runs (budgets.yaml, profile default):\n")


def test_percentile_fails_when_too_many_runs_are_slow() -> None:
    """Two slow runs in twenty fail at p95, with the percentile in the message."""
    durations = iter([500.0] * 18 + [900.0, 2_000.0])
    with pytest.raises(AssertionError, match=r"exceeded: model_call p95 over 20 runs \(budgets.yaml"):
        assert_within_budget(BUDGETS, lambda: pipeline(model_ms=next(durations)), runs=20, percentile=95)


def test_single_run_function_form_judges_the_run() -> None:
    """The function form with the defaults judges one call like a block."""
    result = assert_within_budget(BUDGETS, pipeline)
    assert result.report is result.runs[0]
    assert result.percentile is None


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"runs": 0}, ValueError),
        ({"runs": 2.5}, ValueError),
        ({"percentile": 0}, ValueError),
        ({"percentile": 101}, ValueError),
    ],
)
def test_bad_repetition_options_are_rejected(options: dict[str, float], error: type[Exception]) -> None:
    """runs must be a positive whole number and percentile in (0, 100]."""
    with pytest.raises(error):
        assert_within_budget(BUDGETS, pipeline, **options)  # type: ignore[arg-type]


def test_runs_without_a_function_is_a_type_error() -> None:
    """A with-block runs once, so runs= and percentile= without a function are refused."""
    with pytest.raises(TypeError, match="need a function"):
        assert_within_budget(BUDGETS, runs=20)  # type: ignore[call-overload]


# -- the fixture's object ------------------------------------------------------------------------


def test_checker_uses_its_default_budgets(tmp_path: Path) -> None:
    """BudgetChecker (the pytest fixture) checks against its default file unless given other budgets."""
    path = tmp_path / "budgets.yaml"
    path.write_text(BUDGETS_YAML, encoding="utf-8")
    checker = BudgetChecker(path)
    with checker() as result:
        pipeline()
    assert result.config.source == str(path)
    relaxed = load_budgets(text=BUDGETS_YAML.replace("budget_ms: 800", "budget_ms: 5000"))
    with checker(relaxed) as other:
        pipeline(model_ms=900)
    assert not other.violated
    repeated = checker(fn=pipeline, runs=3, percentile=50)
    assert len(repeated.runs) == 3


def test_checker_without_budgets_says_how_to_configure_them() -> None:
    """With no default budget file, the fixture explains the option and the ini setting."""
    with pytest.raises(LookupError, match="--latency-budgets"):
        BudgetChecker()()


def _runs(model_ms: float, seed: int, runs: int = 40) -> BudgetResult:
    """``runs`` runs of the pipeline, the model call's time drawn around ``model_ms`` (seeded, explicit times)."""
    rng = random.Random(seed)
    return assert_within_budget(
        RELAXED, lambda: pipeline(model_ms=model_ms * math.exp(rng.gauss(0, 0.2))), runs=runs, percentile=50
    )


def test_assert_no_regression_fails_a_slower_stage_and_names_it() -> None:
    """A model call 60% slower than the baseline breaks max_regression model_call=10%: AssertionError naming it."""
    baseline, current = _runs(400, 1), _runs(640, 2)
    with pytest.raises(
        AssertionError, match=r"model_call, profile default: \+\d+\.\dms .* over the limit model_call=10%"
    ):
        assert_no_regression(baseline, current, max_regression={"model_call": "10%"})


def test_assert_no_regression_passes_the_same_traffic_and_returns_the_comparison() -> None:
    """Two samples of the same traffic pass any limit; the comparison is returned for further assertions."""
    found = assert_no_regression(_runs(400, 3), _runs(400, 4), max_regression={"total": "5%", "model_call": "5%"})
    assert found.row("model_call").verdict == "no change"
    assert (found.requests_before, found.requests_after) == (40, 40)


def test_assert_no_regression_reads_a_recording_baseline_by_the_current_side_s_budgets(tmp_path: Path) -> None:
    """A recording (OTLP JSON lines) as the baseline is judged by the current result's budgets, as report judges it."""
    baseline = _runs(400, 5)
    recording = tmp_path / "baseline.jsonl"
    recording.write_text(json.dumps(encode_otlp_json(list(baseline.spans))) + "\n", encoding="utf-8")
    found = assert_no_regression(recording, _runs(400, 6), max_regression="10%")
    assert found.requests_before == 40
    with pytest.raises(AssertionError, match="end to end: "):
        assert_no_regression(recording, _runs(800, 7), max_regression="10%")


def test_assert_no_regression_refuses_a_stage_the_budgets_do_not_have() -> None:
    """A limit on an unknown stage is a ValueError naming it, not a silent pass."""
    with pytest.raises(ValueError, match="no stage 'nowhere'"):
        assert_no_regression(_runs(400, 8, runs=10), _runs(400, 9, runs=10), max_regression={"nowhere": "5%"})
