"""The comparison core of ``latency-budget compare``: planted changes found, null pairs quiet, mix shifts fair.

Requests are made in memory as judged :class:`TraceReport` values (the comparison reads
nothing else), from seeded log-normal stage times: retrieval, then the model call, with a
``prefetch`` stage running beside the model call (shorter than it, so off the critical path).
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping

import pytest

from latency_budget._core.bootstrap import percentile_draws, sorted_percentile, weighted_percentile
from latency_budget._core.call_facts import Call
from latency_budget._core.comparison import ALL_PROFILES, Comparison, compare
from latency_budget._core.quality import CallQuality, Evaluation
from latency_budget._core.report import StageReport, TraceReport
from latency_budget.cli._compare import gate, parse_limit, parse_quality_limit, quality_gate
from latency_budget.cli._compare_output import headline, verdict_text

STAGES = ("retrieval", "model_call", "prefetch")
# Median ms of each stage per profile; the spread (sigma of the log) is SIGMA.
MEDIANS = {"default": {"retrieval": 120.0, "model_call": 800.0, "prefetch": 300.0}}
SIGMA = 0.3


def _request(
    rng: random.Random,
    profile: str,
    medians: Mapping[str, float],
    *,
    model: str = "gpt-4o-mini",
    quality: tuple[float, float] | None = None,
) -> TraceReport:
    """One request: retrieval then the model call, the prefetch beside the model call (critical only past it)."""
    retrieval, model_call, prefetch = (medians[s] * math.exp(rng.gauss(0, SIGMA)) for s in STAGES)
    beside = max(model_call, prefetch)
    total = retrieval + beside + 5.0
    first_token = retrieval + 0.25 * model_call
    stages = (
        StageReport("retrieval", None, retrieval, retrieval, 1, critical_ms=retrieval),
        StageReport(
            "model_call",
            None,
            model_call,
            model_call,
            1,
            first_token_ms=0.25 * model_call,
            critical_ms=model_call if model_call >= prefetch else 0.0,
        ),
        StageReport("prefetch", None, prefetch, prefetch, 1, critical_ms=prefetch if prefetch > model_call else 0.0),
    )
    start = round(retrieval * 1e6)
    evidence = None
    if quality is not None:  # (error rate, mean relevance score): what the quality reader would have joined
        error_rate, relevance = quality
        score = min(1.0, max(0.0, rng.gauss(relevance, 0.1)))
        evidence = CallQuality((Evaluation("relevance", score, None),), error=rng.random() < error_rate)
    call = Call(
        1, "model_call", start, start + round(model_call * 1e6), round(0.25 * model_call * 1e6), model,
        model, "openai", True, True, False, 100, 50, None, model, quality=evidence,
    )  # fmt: skip
    return TraceReport(profile, stages, None, total, (), first_token_ms=first_token, calls=(call,))


def _traffic(
    seed: int,
    n: int,
    medians: Mapping[str, Mapping[str, float]],
    shares: Mapping[str, float] | None = None,
    quality: tuple[float, float] | None = None,
) -> list[TraceReport]:
    rng = random.Random(seed)
    names = list(medians)
    weights = [(shares or {}).get(name, 1.0) for name in names]
    return [_request(rng, p, medians[p], quality=quality) for p in rng.choices(names, weights, k=n)]


def _changes(found: Comparison) -> list[str]:
    """Every row (and the end to end) whose interval excludes zero, named."""
    named = [
        f"{row.profile}/{row.stage}/{row.model}: {what}"
        for row in (*found.rows, found.end_to_end)
        for what, change in (
            ("time", row.change),
            ("first token", row.first_token_change),
            ("critical", row.critical_change),
        )
        if change is not None and change.verdict != "no change"
    ]
    if found.end_to_end_verdict not in (None, "no change"):
        named.append(f"end to end {found.end_to_end_verdict}")
    return named


def test_planted_changes_are_found_with_their_sign_and_within_their_intervals() -> None:
    """A 25% faster model call and a 40% slower retrieval are found, each interval holding the planted change."""
    after_medians = {"default": {"retrieval": 120.0 * 1.4, "model_call": 800.0 * 0.75, "prefetch": 300.0}}
    found = compare(_traffic(1, 600, MEDIANS), _traffic(2, 600, after_medians), stages=STAGES)
    model, retrieval = found.row("model_call"), found.row("retrieval")
    assert model.change is not None
    assert retrieval.change is not None
    assert model.verdict == "faster"
    assert retrieval.verdict == "slower"
    # The medians of log-normal times are the planted medians: the true change of the p50.
    assert model.change.low <= 800.0 * 0.75 - 800.0 <= model.change.high
    assert retrieval.change.low <= 120.0 * 1.4 - 120.0 <= retrieval.change.high
    assert found.row("prefetch").verdict == "no change"
    assert model.reached_end_to_end is True
    assert retrieval.reached_end_to_end is True
    assert found.end_to_end_verdict == "faster"
    # The model call moved the end to end most; beside a shorter model call, prefetch is critical more often.
    assert next(row.stage for row in found.moved()) == "model_call"
    assert {row.stage for row in found.moved()} == {"model_call", "retrieval", "prefetch"}
    assert found.row("prefetch").critical_change is not None
    assert found.row("prefetch").critical_change.verdict == "slower"
    per_model = found.row("model_call", model="gpt-4o-mini")
    assert per_model.verdict == "faster"
    assert per_model.change is not None
    assert per_model.change.low <= -200.0 <= per_model.change.high


def test_a_faster_stage_off_the_critical_path_does_not_move_the_end_to_end_time() -> None:
    """Prefetch twice as fast, beside a longer model call: faster, and reported as not reaching the end to end."""
    after_medians = {"default": {"retrieval": 120.0, "model_call": 800.0, "prefetch": 150.0}}
    found = compare(_traffic(3, 500, MEDIANS), _traffic(4, 500, after_medians), stages=STAGES)
    prefetch = found.row("prefetch")
    assert prefetch.verdict == "faster"
    assert prefetch.reached_end_to_end is False
    assert found.not_reached() == [prefetch]
    assert found.end_to_end_verdict == "no change"
    assert prefetch.critical_before is not None
    assert prefetch.critical_before < 0.01


def test_a_mix_shift_with_no_stage_change_is_not_called_a_regression() -> None:
    """More requests of a slow profile after: the raw end to end is slower, reweighted to the before mix it is not,
    and the end-to-end gate does not fail."""
    medians = {
        "default": MEDIANS["default"],
        "research": {"retrieval": 400.0, "model_call": 2400.0, "prefetch": 300.0},
    }
    before = _traffic(5, 600, medians, {"default": 0.8, "research": 0.2})
    after = _traffic(6, 600, medians, {"default": 0.3, "research": 0.7})
    found = compare(before, after, stages=STAGES, profiles=("default", "research"))
    assert found.mix.profiles_shifted
    assert found.end_to_end.verdict == "slower"  # as measured: more slow requests
    assert found.reweighted is not None
    assert found.reweighted.verdict == "no change"
    assert found.end_to_end_verdict == "no change"
    assert [row for row in found.rows if row.verdict not in (None, "no change")] == []
    assert gate(found, [parse_limit("10%")]) == []  # the CI gate reads the reweighted change: no regression


def test_null_pairs_show_no_change_in_at_least_95_of_100_seeds() -> None:
    """Two samples of the same traffic (two profiles, two models): some row changes in at most 5 seeds of 100."""
    medians = {
        "default": MEDIANS["default"],
        "research": {"retrieval": 400.0, "model_call": 2400.0, "prefetch": 300.0},
    }
    flagged = []
    for seed in range(100):
        before = _traffic(1000 + seed, 200, medians, {"default": 0.7, "research": 0.3})
        after = _traffic(2000 + seed, 200, medians, {"default": 0.7, "research": 0.3})
        found = compare(before, after, stages=STAGES, profiles=("default", "research"), resamples=400, seed=seed)
        if _changes(found):
            flagged.append((seed, _changes(found)))
    assert len(flagged) <= 5, flagged


def test_too_few_requests_give_no_verdict() -> None:
    """A side with fewer than 10 requests of a stage gets figures but no change and no verdict."""
    found = compare(_traffic(7, 8, MEDIANS), _traffic(8, 200, MEDIANS), stages=STAGES)
    assert found.row("model_call").change is None
    assert found.row("model_call").verdict is None
    assert found.end_to_end_verdict is None


def test_the_same_seed_gives_the_same_intervals_and_another_seed_other_ones() -> None:
    """The bootstrap is seeded: the same seed repeats every interval exactly."""
    before, after = _traffic(9, 150, MEDIANS), _traffic(10, 150, MEDIANS)
    one = compare(before, after, stages=STAGES, seed=3)
    assert one == compare(before, after, stages=STAGES, seed=3)
    assert one.row("model_call").change != compare(before, after, stages=STAGES, seed=4).row("model_call").change


@pytest.mark.parametrize(("n", "q"), [(1, 50.0), (7, 50.0), (40, 95.0), (200, 99.0), (31, 12.5)])
def test_percentile_draws_follow_the_law_of_a_resampled_percentile(n: int, q: float) -> None:
    """Drawn order statistics match resampling and sorting (the slow oracle): mean and spread within 5%."""
    rng = random.Random(n)
    values = sorted(math.exp(rng.gauss(0, 1)) for _ in range(n))
    fast = percentile_draws(values, q, 20_000, random.Random(1))
    oracle_rng = random.Random(2)
    slow = [sorted_percentile(sorted(oracle_rng.choices(values, k=n)), q) for _ in range(20_000)]

    def spread(draws: list[float]) -> float:
        mean = sum(draws) / len(draws)
        return math.sqrt(sum((d - mean) ** 2 for d in draws) / len(draws))

    assert sum(fast) / len(fast) == pytest.approx(sum(slow) / len(slow), rel=0.05)
    assert spread(fast) == pytest.approx(spread(slow), rel=0.05, abs=1e-9)


def test_weighted_percentile_of_equal_weights_is_an_order_statistic() -> None:
    """With equal weights the weighted percentile is the least value whose share reaches q."""
    values = [(float(v), 1.0) for v in range(1, 11)]
    assert weighted_percentile(values, 50) == 5.0
    assert weighted_percentile(values, 51) == 6.0
    assert weighted_percentile([(1.0, 3.0), (2.0, 1.0)], 75) == 1.0


def test_rows_are_within_profile_and_the_end_to_end_counts_every_request() -> None:
    """Each profile has its own stage rows and total; the end to end row holds every request of a side."""
    medians = {"default": MEDIANS["default"], "research": MEDIANS["default"]}
    found = compare(
        _traffic(11, 60, medians), _traffic(12, 80, medians), stages=STAGES, profiles=("default", "research")
    )
    assert {(r.profile, r.stage) for r in found.rows if r.model is None} == {
        (p, s) for p in ("default", "research") for s in (*STAGES, "total")
    }
    assert found.end_to_end.profile == ALL_PROFILES
    assert (found.end_to_end.before.n, found.end_to_end.after.n) == (60, 80)


def test_a_faster_stage_with_worse_answers_is_marked_as_no_plain_win() -> None:
    """Model call faster, errors 2% → 20%, relevance 0.8 → 0.6: faster, but worse answers, in row and headline."""
    after_medians = {"default": {"retrieval": 120.0, "model_call": 600.0, "prefetch": 300.0}}
    before = _traffic(21, 400, MEDIANS, quality=(0.02, 0.8))
    after = _traffic(22, 400, after_medians, quality=(0.2, 0.6))
    found = compare(before, after, stages=STAGES)
    model = found.row("model_call")
    assert model.verdict == "faster"
    assert {q.metric for q in model.worse_quality} == {"errors", "score: relevance"}
    errors = next(q for q in model.quality if q.metric == "errors")
    assert errors.change.low <= 0.18 <= errors.change.high  # the planted rise of the error rate
    assert verdict_text(model) == "faster, but worse answers (errors, score: relevance)"
    assert any(line.startswith("Faster but worse answers, no plain win: model_call:") for line in headline(found))
    assert [q.metric for _, _, stage, q in quality_gate(found, [parse_quality_limit("model_call=10%")])] == [
        "errors",
        "score: relevance",
    ]
    assert quality_gate(found, [parse_quality_limit("model_call=30%")]) == []


def test_the_same_answers_show_no_quality_change() -> None:
    """Quality evidence of the same traffic on both sides: measured, and never worse or better."""
    found = compare(
        _traffic(23, 300, MEDIANS, quality=(0.05, 0.8)), _traffic(24, 300, MEDIANS, quality=(0.05, 0.8)), stages=STAGES
    )
    model = found.row("model_call")
    assert {q.metric for q in model.quality} == {"errors", "cut or refused", "score: relevance"}
    assert not any(q.worse or q.better for row in (*found.rows, found.end_to_end) for q in row.quality)
    assert verdict_text(model) == "no change the data can show"
