"""The lever estimators against hand-computed cases: Theil-Sen, stage savings, and each lever."""

from __future__ import annotations

import pytest

from latency_budget import load_budgets
from latency_budget._core.accounting import StageMeasurement, evaluate, union_length
from latency_budget._core.call_facts import Call, call_of
from latency_budget._core.estimators import fit_or_reason, median, shrunk_saving_ns, theil_sen
from latency_budget._core.levers import Finding, RecordedBaseline, request_levers, summarise
from latency_budget._core.report import TraceReport

MS = 1_000_000
BUDGETS = load_budgets(text="version: 1\nstages:\n  retrieval: {}\n  model_call: {}\n  tool_calls: {}\n").default


def call(
    start: float,
    end: float,
    *,
    stage: str = "model_call",
    model: str | None = "m",
    ttft: float | None = None,
    generation: bool = True,
    streamed: bool | None = None,
    to_tools: bool = False,
    inp: int | None = None,
    out: int | None = None,
    key: int | None = None,
    target: str | None = None,
) -> Call:
    """A call from ``start`` to ``end`` ms; streamed when it has a first token unless told."""
    first = round(ttft * MS) if ttft is not None else None
    return Call(
        span_id=round(start * 1000) + 1,
        stage=stage,
        start_ns=round(start * MS),
        end_ns=round(end * MS),
        first_token_ns=first,
        model=model,
        response_model=None,
        provider=None,
        generation=generation,
        streamed=streamed if streamed is not None else first is not None,
        to_tools=to_tools,
        input_tokens=inp,
        output_tokens=out,
        key=key,
        target=target if target is not None else model,
    )


def report_for(
    calls: list[Call], *, critical: dict[str, float] | None = None, first_token_ms: float | None = None
) -> TraceReport:
    """The report of a request made of ``calls`` (root from 0 to the last end); stages fully critical unless told."""
    measurements = {}
    for stage in {c.stage for c in calls}:
        intervals = [(c.start_ns, c.end_ns) for c in calls if c.stage == stage]
        union = union_length(intervals) / MS
        measurements[stage] = StageMeasurement(union, union, len(intervals))
    total = max(c.end_ns for c in calls) / MS
    crit = {name: m.actual_ms for name, m in measurements.items()} | (critical or {})
    return evaluate(
        BUDGETS,
        measurements,
        total_actual_ms=total,
        first_token_ms=first_token_ms,
        critical_ms=crit,
        start_time_ns=0,
        end_time_ns=round(total * MS),
    )


def levers(calls: list[Call], history: list[Call], **report: object) -> dict[str, Finding]:
    """The findings of one request against a baseline of ``history``, by kind."""
    baseline = RecordedBaseline(history)
    found = request_levers(calls, report_for(calls, **report), baseline)  # type: ignore[arg-type]
    by_kind = {f.kind: f for f in found}
    assert len(by_kind) == len(found)
    return by_kind


# -- estimators ----------------------------------------------------------------------------


def test_median_of_odd_and_even_counts() -> None:
    """The middle value, or the mean of the middle two."""
    assert median([3.0, 1.0, 2.0]) == 2.0
    assert median([4.0, 1.0, 3.0, 2.0]) == 2.5
    with pytest.raises(ValueError, match="no values"):
        median([])


def test_theil_sen_recovers_an_exact_line() -> None:
    """Ten points on y = 5 + 2x: slope 2, intercept 5, a zero-width interval and R² 1."""
    fit = theil_sen([(x, 5 + 2 * x) for x in range(1, 11)])
    assert fit is not None
    assert (fit.slope, fit.intercept, fit.slope_low, fit.slope_high, fit.n) == (2.0, 5.0, 2.0, 2.0, 10)
    assert fit.r_squared == pytest.approx(1.0)
    assert (fit.x_low, fit.x_high) == (1.0, 10.0)
    assert fit.predict(20) == 45.0


def test_theil_sen_ignores_an_outlier_that_least_squares_would_follow() -> None:
    """y = 2x with y(10) = 100: 36 of 45 pairwise slopes are 2, so the median is 2; R² by hand 1 - 6400/7530."""
    points = [(x, 2.0 * x) for x in range(1, 10)] + [(10, 100.0)]
    fit = theil_sen(points)
    assert fit is not None
    assert fit.slope == 2.0
    assert fit.intercept == 0.0  # median of nine 0s and one 80
    assert (fit.slope_low, fit.slope_high) == (2.0, 2.0)  # ranks 11 and 35 of the 45 sorted slopes
    assert fit.r_squared == pytest.approx(1 - 6400 / 7530)


def test_theil_sen_refuses_data_that_cannot_support_a_fit() -> None:
    """Too few points, too few distinct sizes, no slope, a falling slope: no fit."""
    assert theil_sen([(x, 2.0 * x) for x in range(1, 10)]) is None  # 9 points
    assert theil_sen([(x % 4, 2.0 * (x % 4) + x / 100) for x in range(20)]) is None  # 4 distinct x
    assert theil_sen([(x, 7.0 + (x % 2)) for x in range(20)]) is None  # flat: the interval holds 0
    assert theil_sen([(x, 100.0 - x) for x in range(20)]) is None  # y falls as x grows


def test_theil_sen_refuses_a_line_that_explains_almost_nothing() -> None:
    """y = x +/- 1000 alternately: the slope 1 is clear, but R² is 1 - 4e7 / 40,045,330 = 0.001, below 0.05."""
    points = [(x, x + (1000.0 if x % 2 else -1000.0)) for x in range(40)]
    assert theil_sen(points) is None
    assert fit_or_reason(points) == "the line explains too little (R² 0.00)"
    assert fit_or_reason(points[:9]) == "9 calls, fewer than 10"


def test_theil_sen_thins_many_points_evenly() -> None:
    """A thousand points on a line are thinned to 400 and still give the line, and say so; 400 are not thinned."""
    fit = theil_sen([(x, 3.0 * x + 1) for x in range(1000)])
    assert fit is not None
    assert (fit.n, fit.of, fit.slope, fit.x_low, fit.x_high) == (400, 1000, 3.0, 0.0, 999.0)
    assert fit.thinned
    assert fit.sample_note() == " (of 1,000, thinned evenly by size)"
    whole = theil_sen([(x, 3.0 * x + 1) for x in range(400)])
    assert whole is not None
    assert (whole.n, whole.of, whole.thinned, whole.sample_note()) == (400, 400, False, "")


def test_shrunk_saving_counts_wall_clock_time_only() -> None:
    """Back to back the whole call is saved; in parallel nothing; overlapping only the uncovered part."""
    assert shrunk_saving_ns([(0, 100), (100, 300)], {1: 0}) == 200
    assert shrunk_saving_ns([(0, 100), (0, 100)], {1: 0}) == 0
    assert shrunk_saving_ns([(0, 100), (50, 200)], {1: 10}) == 100  # 200 before, [0,100] + [50,60] after
    assert shrunk_saving_ns([(0, 100), (100, 300)], {}) == 0


# -- what a span says -----------------------------------------------------------------------


def test_a_span_becomes_a_call_with_its_model_tokens_and_identity() -> None:
    """A non-streamed chat span that answered with tool calls; a tool span's arguments give it an identity."""
    chat = call_of(
        1,
        "model_call",
        0,
        500 * MS,
        None,
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": "gpt-4o",
            "gen_ai.response.model": "gpt-4o-2024-08-06",
            "gen_ai.provider.name": "openai",
            "gen_ai.request.stream": False,
            "gen_ai.usage.input_tokens": 812,
            "gen_ai.usage.output_tokens": 40,
            "gen_ai.response.finish_reasons": ("tool_calls",),
        },
    )
    assert (chat.model, chat.response_model, chat.provider) == ("gpt-4o", "gpt-4o-2024-08-06", "openai")
    assert (chat.generation, chat.streamed, chat.to_tools) == (True, False, True)
    assert (chat.input_tokens, chat.output_tokens, chat.key, chat.duration_ns) == (812, 40, None, 500 * MS)
    tool = {"gen_ai.tool.name": "lookup_order", "gen_ai.tool.call.arguments": '{"id": 7}'}
    first = call_of(2, "tool_calls", 0, 1, None, tool)
    again = call_of(3, "tool_calls", 5, 9, None, dict(tool))
    other = call_of(4, "tool_calls", 5, 9, None, {**tool, "gen_ai.tool.call.arguments": '{"id": 8}'})
    assert first.key is not None
    assert first.key == again.key != other.key
    assert (first.model, first.target, first.generation) == (None, "lookup_order", False)


def test_wrong_types_count_as_absent_and_a_first_token_means_streamed() -> None:
    """Tokens given as strings or booleans are ignored; a recorded first token makes a call streamed."""
    found = call_of(
        1,
        "model_call",
        0,
        10,
        3,
        {"gen_ai.request.model": "m", "gen_ai.usage.input_tokens": "812", "gen_ai.usage.output_tokens": True},
    )
    assert (found.input_tokens, found.output_tokens, found.streamed) == (None, None, True)


# -- the levers --------------------------------------------------------------------------------


def streamed_history() -> list[Call]:
    return [call(0, 1000, ttft=ttft) for ttft in (200, 300, 400)]


def test_streaming_saves_the_duration_minus_the_models_median_first_token() -> None:
    """A 1500 ms non-streamed answer of a model whose streamed calls give their first token at p50 300 ms: 1200 ms."""
    found = levers([call(0, 1500)], streamed_history())["streaming"]
    assert (found.stage, found.spans, found.saving_ms, found.basis, found.targets) == (
        "model_call",
        1,
        1200.0,
        3,
        ("m",),
    )


def test_streaming_has_no_estimate_without_enough_streamed_calls() -> None:
    """With two streamed calls of the model, the lever applies but gives no figure, and says on what it failed."""
    found = levers([call(0, 1500)], streamed_history()[:2])["streaming"]
    assert (found.saving_ms, found.basis) == (None, 2)


def test_streaming_skips_calls_whose_output_is_not_for_the_user() -> None:
    """A call that answered with tool calls, or one after the request's first token, earns no streaming hint."""
    assert "streaming" not in levers([call(0, 1500, to_tools=True)], streamed_history())
    later = [call(0, 500, ttft=100), call(600, 2100)]
    assert "streaming" not in levers(later, streamed_history(), first_token_ms=100)


def test_cache_saves_identical_calls_within_and_across_requests() -> None:
    """t(a) twice in a row within the request saves the second's 150 ms; t(b) seen before saves its 50 ms too."""
    calls = [
        call(0, 100, stage="tool_calls", model=None, key=1, target="t"),
        call(100, 250, stage="tool_calls", model=None, key=1, target="t"),
        call(250, 300, stage="tool_calls", model=None, key=2, target="t"),
    ]
    baseline = RecordedBaseline([])
    (within,) = request_levers(calls, report_for(calls), baseline)
    assert (within.kind, within.spans, within.saving_ms, within.repeated_within, within.targets) == (
        "cache",
        1,
        150.0,
        1,
        ("t",),
    )
    baseline.earlier.add(2)
    (both,) = request_levers(calls, report_for(calls), baseline)
    assert (both.spans, both.saving_ms, both.repeated_within) == (2, 200.0, 1)


def test_cache_saves_nothing_for_identical_calls_run_in_parallel() -> None:
    """Two identical calls side by side: removing one leaves the stage as long (or 0.4 ms shorter), so no hint."""
    calls = [call(0, 100, model=None, key=1, stage="tool_calls"), call(0, 100, model=None, key=1, stage="tool_calls")]
    assert request_levers(calls, report_for(calls), RecordedBaseline([])) == []
    nearly = [
        call(0, 100, model=None, key=1, stage="tool_calls"),
        call(0.5, 100.4, model=None, key=1, stage="tool_calls"),
    ]
    assert request_levers(nearly, report_for(nearly), RecordedBaseline([])) == []  # under min_saving_ms (5 ms)


def model_history(fast_calls: int = 10) -> list[Call]:
    fast = [call(0, 100, model="fast") for _ in range(fast_calls)]
    return fast + [call(0, 400, model="slow") for _ in range(10)]


def test_model_choice_scales_slow_calls_by_the_ratio_of_medians() -> None:
    """A 400 ms call of a model whose median is 400 ms, where another's is 100 ms: it would take 100 ms, saving 300."""
    calls = [call(0, 400, model="slow"), call(400, 500, model="fast")]
    found = levers(calls, model_history())["model_choice"]
    assert (found.spans, found.saving_ms, found.basis, found.targets, found.instead) == (
        1,
        300.0,
        10,
        ("slow", "fast"),
        "fast",
    )


def test_model_choice_needs_enough_calls_of_each_model() -> None:
    """With nine calls of the faster model, models are not compared."""
    assert "model_choice" not in levers([call(0, 400, model="slow")], model_history(fast_calls=9))


def context_history() -> list[Call]:
    return [call(0, 100 + 0.05 * tokens, inp=tokens) for tokens in range(1000, 10_001, 1000)]


def test_context_size_trims_to_the_median_at_the_fitted_slope() -> None:
    """Duration = 100 ms + 0.05 ms/token over 1000..10000 tokens (median 5500): 8000 tokens save 0.05 x 2500 ms."""
    found = levers([call(0, 500, inp=8000)], context_history())["context_size"]
    assert (found.spans, found.saving_ms, found.basis) == (1, 125.0, 10)
    assert "context_size" not in levers([call(0, 500, inp=5000)], context_history())


def output_history() -> list[Call]:
    return [call(0, 100 + 10 * out, ttft=100, out=out) for out in (100, 200, 300, 400, 500)]


def test_output_length_trims_to_the_median_at_the_time_per_output_token() -> None:
    """Streamed calls take 10 ms per output token past their first token (median 300 tokens): 500 tokens save 2 s."""
    stats = summarise(output_history())
    assert (stats.ms_per_output_token, stats.rate_calls, stats.rate_from, stats.output_p50) == (
        10.0,
        5,
        "streamed",
        300.0,
    )
    found = levers([call(0, 5100, ttft=100, out=500)], output_history())["output_length"]
    assert (found.spans, found.saving_ms, found.basis) == (1, 2000.0, 5)


def test_total_time_savings_stop_at_the_stages_critical_path_time() -> None:
    """A stage with 50 ms on the critical path saves at most 50 ms, whatever the lever estimates."""
    calls = [call(0, 400, model="slow")]
    found = levers(calls, model_history(), critical={"model_call": 50.0})["model_choice"]
    assert found.saving_ms == 50.0


def test_summary_of_a_model_in_a_stage() -> None:
    """Counts, medians and fits of one model's calls, by hand."""
    stats = summarise(context_history())
    assert (stats.n, stats.streamed, stats.first_token_p50_ms, stats.input_p50) == (10, 0, None, 5500.0)
    assert stats.duration_p50_ms == pytest.approx(100 + 0.05 * 5500)
    assert stats.duration_fit is not None
    assert stats.duration_fit.slope == pytest.approx(0.05)
    assert stats.first_token_fit is None


def test_an_operation_name_of_the_wrong_type_counts_as_absent() -> None:
    """A list as gen_ai.operation.name (replayed JSON) reads as no operation, never a TypeError that drops the hints."""
    call = call_of(
        1,
        "model_call",
        0,
        1_000_000,
        None,
        {"gen_ai.operation.name": ["chat"], "gen_ai.request.model": "gpt-4o", "gen_ai.usage.output_tokens": 7},
    )
    assert call.model == "gpt-4o"
    assert not call.generation
