"""Quality beside every lever: planted quality statistics, each case with its null control, at the lever level.

A :class:`Baseline` whose ``quality()`` returns planted
:class:`~latency_budget._core.quality.QualityStats` stands for what the quality reader
will read from the traces: a faster model with worse answers is not recommended (the
trade said instead), one with answers as good is, and with no quality data a lever that
changes answers says so; fewer agent loops that succeed less earn no iterations claim.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from latency_budget import load_budgets
from latency_budget._config.model import QualityPolicy
from latency_budget._core.call_facts import Call
from latency_budget._core.hints import Hint
from latency_budget._core.levers import LEVERS, Finding, RecordedBaseline, request_levers
from latency_budget._core.levers.weigh import NO_QUALITY_DATA
from latency_budget._core.quality import CallQuality, Evaluation, QualityStats, Scores
from latency_budget._core.report import StageReport, TraceReport
from latency_budget.cli._levers import analyse_levers
from latency_budget.cli._where import levers_json, where_lines

MS = 1_000_000
STAGE = "model_call"


class PlantedBaseline(RecordedBaseline):
    """A recording's baseline whose quality statistics are planted per model."""

    def __init__(self, calls: Iterable[Call], quality: Mapping[str, QualityStats]) -> None:
        super().__init__(calls)
        self.planted = dict(quality)

    def quality(self, stage: str, model: str) -> QualityStats | None:
        return self.planted.get(model) if stage == STAGE else None


def _call(span_id: int, model: str, start_ms: float, duration_ms: float, **facts: object) -> Call:
    values: dict[str, object] = {
        "first_token_ns": None,
        "response_model": None,
        "provider": None,
        "generation": True,
        "streamed": True,
        "to_tools": False,
        "input_tokens": None,
        "output_tokens": None,
        "key": None,
        "target": model,
    }
    values.update(facts)
    return Call(span_id, STAGE, round(start_ms * MS), round((start_ms + duration_ms) * MS), model=model, **values)  # type: ignore[arg-type]


def _history() -> list[Call]:
    """Ten calls each of fast (100 ms) and slow (500 ms) in model_call."""
    return [_call(i + 1, "fast" if i % 2 else "slow", 1000.0 * i, 100 if i % 2 else 500) for i in range(20)]


def _report(
    calls: Sequence[Call], count: int | None = None, max_calls: int | None = None, hints: tuple[Hint, ...] = ()
) -> TraceReport:
    start = min(c.start_ns for c in calls)
    end = max(c.end_ns for c in calls)
    actual = (end - start) / MS
    stage = StageReport(STAGE, None, actual, actual, count or len(calls), max_calls=max_calls, critical_ms=actual)
    return TraceReport("default", (stage,), None, actual, (), hints=hints, calls=tuple(calls), start_time_ns=start)


def _quality(calls: int, **scores: tuple[float, float]) -> QualityStats:
    """Statistics of ``calls`` calls with each named evaluation's (mean, standard deviation) over all of them."""
    return QualityStats(
        calls, {name: Scores(calls, mean, sd * sd * (calls - 1)) for name, (mean, sd) in scores.items()}
    )


def _model_choice(quality: Mapping[str, QualityStats], policy: QualityPolicy | None = None) -> list[Finding]:
    history = _history()
    request = [_call(100, "slow", 50_000.0, 500)]
    baseline = PlantedBaseline(history, quality)
    found = request_levers(request, _report(request), baseline, quality=policy or QualityPolicy())
    return [f for f in found if f.kind == "model_choice"]


def test_a_faster_but_worse_model_is_not_recommended_and_the_trade_is_said() -> None:
    """fast scores 0.58 against slow's 0.91 on correctness (n 120/118): no saving, the trade in words."""
    (finding,) = _model_choice(
        {"fast": _quality(120, correctness=(0.58, 0.2)), "slow": _quality(118, correctness=(0.91, 0.1))}
    )
    assert finding.saving_ms is None
    assert finding.trade == "saves 400ms p50; correctness 0.58 vs 0.91, n 120/118: not recommended"


def test_a_faster_and_equal_model_is_recommended_with_the_test_it_passed() -> None:
    """Null control: both score 0.91 (sd 0.1, n 120/118): 500 ms becomes 100 ms, the quality test named."""
    (finding,) = _model_choice(
        {"fast": _quality(120, correctness=(0.91, 0.1)), "slow": _quality(118, correctness=(0.91, 0.1))}
    )
    assert finding.saving_ms == 400.0
    assert finding.trade is None
    assert not finding.unweighed
    assert finding.rests_on == "quality_checked"
    assert "correctness 0.91 vs 0.91, n 120/118" in finding.test


def test_the_tolerance_comes_from_the_budget_file() -> None:
    """0.88 against 0.91: within a max_drop of 0.1 (recommended), not within one of 0.01 (the trade)."""
    quality = {"fast": _quality(120, correctness=(0.88, 0.1)), "slow": _quality(118, correctness=(0.91, 0.1))}
    loose = load_budgets(text="version: 1\nquality: {max_drop: 0.1}\n").default.quality
    strict = load_budgets(text="version: 1\nquality: {evaluations: {correctness: {max_drop: 0.01}}}\n").default.quality
    (kept,) = _model_choice(quality, loose)
    (refused,) = _model_choice(quality, strict)
    assert kept.saving_ms == 400.0
    assert refused.saving_ms is None


def test_an_evaluation_that_does_not_count_is_not_weighed() -> None:
    """Only the evaluations the budget file names count: a worse 'style' score, not listed, stops nothing."""
    quality = {
        "fast": _quality(120, correctness=(0.91, 0.1), style=(0.2, 0.1)),
        "slow": _quality(118, correctness=(0.91, 0.1), style=(0.9, 0.1)),
    }
    listed = load_budgets(text="version: 1\nquality: {evaluations: [correct*]}\n").default.quality
    (finding,) = _model_choice(quality, listed)
    assert finding.saving_ms == 400.0
    (every,) = _model_choice(quality)
    assert every.saving_ms is None
    assert "style 0.20 vs 0.90" in every.trade


def test_without_quality_data_the_saving_stands_with_the_caveat() -> None:
    """No quality statistics at all: the 400 ms saving is given, marked unweighed (basis quality_not_recorded)."""
    (finding,) = _model_choice({})
    assert finding.saving_ms == 400.0
    assert finding.unweighed
    assert finding.rests_on == "quality_not_recorded"


def test_every_lever_that_changes_answers_says_when_it_had_no_quality_data() -> None:
    """output_length with no quality data is unweighed; with planted evaluations of its model it is not."""
    history = [
        _call(i + 1, "m", 3000.0 * i, 100 + 10 * out, first_token_ns=100 * MS, output_tokens=out)
        for i, out in enumerate([10, 20, 30, 40, 50, 60, 70, 80, 90, 100])
    ]
    request = [_call(100, "m", 90_000.0, 100 + 10 * 300, first_token_ns=100 * MS, output_tokens=300)]
    bare = request_levers(request, _report(request), PlantedBaseline(history, {}))
    (cut,) = [f for f in bare if f.kind == "output_length"]
    assert cut.unweighed
    known = PlantedBaseline(history, {"m": _quality(10, correctness=(0.9, 0.1))})
    (weighed,) = [f for f in request_levers(request, _report(request), known) if f.kind == "output_length"]
    assert not weighed.unweighed
    answer_changing = {name for name, lever in LEVERS.items() if lever.changes_answers}
    assert answer_changing == {"model_choice", "context_size", "output_length", "reasoning", "iterations"}


def _loops(within_ok: bool, known: bool = True) -> list[TraceReport]:
    """20 requests within max_calls 2 (2 calls) and 20 past it (4 calls, an iterations hint of 300 ms each).

    Those past it all succeed; those within it succeed only when ``within_ok`` (else 10 of
    20 end with a call in error). ``known`` false: no call carries quality.
    """
    reports: list[TraceReport] = []
    for i in range(40):
        over = i % 2 == 0
        count = 4 if over else 2
        start = 10_000.0 * i
        failed = not over and not within_ok and i % 4 == 1
        quality = CallQuality((Evaluation("correctness", 0.9, None),), error=failed) if known else None
        calls = [_call(1000 * i + k, "m", start + 100 * k, 100, quality=quality) for k in range(count)]
        hints = (Hint("iterations", STAGE, count, 200.0),) if over else ()
        reports.append(_report(calls, count, max_calls=2, hints=hints))
    return reports


def _iterations(reports: list[TraceReport]) -> dict[str, object]:
    analysis = analyse_levers(reports, load_budgets(text="version: 1\nstages: {model_call: {max_calls: 2}}\n"))
    (row,) = [row for row in levers_json(analysis)["where_to_win"] if row["kind"] == "iterations"]
    return row


def test_fewer_loops_that_succeed_less_earn_no_iterations_claim() -> None:
    """Requests within max_calls succeed 10 of 20 times, those past it 20 of 20: no saving claimed, the trade said."""
    row = _iterations(_loops(within_ok=False))
    assert row["requests"] == 0
    assert row["savings_total_ms"] == 0
    assert row["not_recommended"] == 20
    assert row["quality"] == "fewer loops: success 0.50 vs 1.00, n 20/20: no saving claimed"


def test_fewer_loops_that_succeed_as_often_earn_the_claim() -> None:
    """Null control: every request succeeds: the 20 requests past max_calls claim 200 ms each, with no caveat."""
    row = _iterations(_loops(within_ok=True))
    assert row["requests"] == 20
    assert row["savings_total_ms"] == 4000.0
    assert "quality" not in row


def test_loops_without_quality_data_carry_the_caveat() -> None:
    """No call carries quality: the claim stands with the one caveat clause, in JSON and in the text."""
    reports = _loops(within_ok=False, known=False)
    row = _iterations(reports)
    assert row["savings_total_ms"] == 4000.0
    assert row["quality"] == NO_QUALITY_DATA
    text = "\n".join(
        where_lines(analyse_levers(reports, load_budgets(text="version: 1\nstages: {model_call: {max_calls: 2}}\n")))
    )
    assert f"Quality: {NO_QUALITY_DATA}." in text
