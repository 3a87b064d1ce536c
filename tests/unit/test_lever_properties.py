"""Property tests of the lever estimates: never more than the time the request spent in the stage."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from latency_budget._config.model import DEFAULT_MIN_SAVING_MS
from latency_budget._core.accounting import union_length
from latency_budget._core.call_facts import Call, sample_of
from latency_budget._core.estimators import shrunk_saving_ns, theil_sen
from latency_budget._core.levers import LEVER_KINDS, RecordedBaseline, request_levers
from latency_budget._core.recent import RecentCalls

from .helpers import at, pipeline
from .test_levers import MS, call, report_for

STAGES = ("retrieval", "model_call", "tool_calls")
MODELS = ("a", "b", "c")


@st.composite
def calls(draw: st.DrawFn, *, max_size: int = 8) -> list[Call]:
    """Calls of random stages, models, sizes, tokens and streaming, possibly overlapping."""
    found = []
    for _ in range(draw(st.integers(1, max_size))):
        start = draw(st.integers(0, 3000))
        length = draw(st.integers(0, 3000))
        streamed = draw(st.booleans())
        found.append(
            call(
                start,
                start + length,
                stage=draw(st.sampled_from(STAGES)),
                model=draw(st.sampled_from((*MODELS, None))),
                ttft=draw(st.integers(0, length)) if streamed else None,
                generation=draw(st.booleans()),
                to_tools=draw(st.booleans()),
                inp=draw(st.one_of(st.none(), st.integers(0, 20_000))),
                out=draw(st.one_of(st.none(), st.integers(0, 2_000))),
                key=draw(st.one_of(st.none(), st.integers(0, 3))),
            )
        )
    found.sort(key=lambda c: (c.start_ns, c.end_ns, c.span_id))
    return found


@settings(max_examples=200, deadline=None, database=None)
@given(
    request=calls(),
    history=calls(max_size=40),
    earlier=st.sets(st.integers(0, 3)),
    cut=st.dictionaries(st.sampled_from(STAGES), st.floats(0, 1)),
    first_token=st.one_of(st.none(), st.integers(0, 6000)),
)
def test_no_lever_claims_more_than_the_stage_took(
    request: list[Call], history: list[Call], earlier: set[int], cut: dict[str, float], first_token: int | None
) -> None:
    """Each saving is at least min_saving_ms, within the stage time (critical time for total-time levers), or absent."""
    stage_ms = {
        stage: union_length([(c.start_ns, c.end_ns) for c in request if c.stage == stage]) / MS
        for stage in {c.stage for c in request}
    }
    critical = {stage: stage_ms[stage] * share for stage, share in cut.items() if stage in stage_ms}
    report = report_for(request, critical=critical, first_token_ms=first_token)
    baseline = RecordedBaseline(history + request)
    baseline.earlier.update(earlier)
    found = request_levers(request, report, baseline)
    assert found == request_levers(request, report, baseline)  # the same answer twice
    assert len({(f.kind, f.stage) for f in found}) == len(found)
    for finding in found:
        members = [c for c in request if c.stage == finding.stage]
        assert finding.kind in LEVER_KINDS
        assert 1 <= finding.spans <= len(members)
        assert finding.basis >= 0
        if finding.saving_ms is None:
            assert finding.kind == "streaming"
            continue
        assert math.isfinite(finding.saving_ms)
        assert DEFAULT_MIN_SAVING_MS <= finding.saving_ms <= stage_ms[finding.stage]
        if finding.kind == "streaming":
            assert finding.saving_ms <= max(c.duration_ns for c in members if not c.streamed) / MS
        else:
            assert finding.saving_ms <= critical.get(finding.stage, stage_ms[finding.stage])


@settings(max_examples=200, deadline=None, database=None)
@given(
    intervals=st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 1000)), min_size=1, max_size=8),
    data=st.data(),
)
def test_shrinking_calls_saves_between_nothing_and_the_whole_stage(
    intervals: list[tuple[int, int]], data: st.DataObject
) -> None:
    """Shortening calls saves at least 0 and at most the stage's union; removing every call saves all of it."""
    spans = [(start, start + length) for start, length in intervals]
    shorter = data.draw(st.dictionaries(st.integers(0, len(spans) - 1), st.integers(0, 1000)))
    saving = shrunk_saving_ns(spans, shorter)
    assert 0 <= saving <= union_length(spans)
    assert shrunk_saving_ns(spans, dict.fromkeys(range(len(spans)), 0)) == union_length(spans)


@settings(max_examples=200, deadline=None, database=None)
@given(
    xs=st.lists(st.integers(0, 50_000), min_size=10, max_size=60, unique=True),
    slope=st.floats(0.001, 50),
    intercept=st.floats(-1000, 1000),
)
def test_theil_sen_recovers_any_rising_line(xs: list[int], slope: float, intercept: float) -> None:
    """Points on y = a + bx with b > 0 give back b, within an interval that holds it."""
    fit = theil_sen([(x, intercept + slope * x) for x in xs])
    assert fit is not None
    assert math.isclose(fit.slope, slope, rel_tol=1e-6)
    assert fit.slope_low <= fit.slope <= fit.slope_high


@settings(max_examples=200, deadline=None, database=None)
@given(points=st.lists(st.tuples(st.integers(0, 100), st.floats(-1e6, 1e6)), max_size=40))
def test_a_fit_is_only_given_for_a_demonstrably_rising_relation(points: list[tuple[int, float]]) -> None:
    """Whatever the points, a returned fit has a positive lower bound and enough points and sizes behind it."""
    fit = theil_sen(points)
    if fit is not None:
        assert 0 < fit.slope_low <= fit.slope <= fit.slope_high
        assert fit.n >= 10
        assert len({x for x, _ in points}) >= 5
        assert 0.05 <= fit.r_squared <= 1


TWO_STAGES = """
version: 1
stages:
  model_call: {budget_ms: 1000}
  tool_calls: {budget_ms: 1000}
"""


@settings(max_examples=40, deadline=None, database=None)
@given(
    requests=st.lists(
        st.lists(
            st.tuples(
                st.sampled_from(("model_call", "tool_calls")),
                st.integers(0, 500),  # gap before the call
                st.integers(1, 2000),  # its length
                st.sampled_from(MODELS),
                st.booleans(),  # streamed
                st.integers(100, 9000),  # input tokens
                st.integers(1, 900),  # output tokens
                st.integers(0, 2),  # arguments
            ),
            min_size=1,
            max_size=6,
        ),
        min_size=1,
        max_size=25,
    )
)
def test_the_processors_hints_stay_within_each_stages_time(
    requests: list[list[tuple[str, int, int, str, bool, int, int, int]]],
) -> None:
    """Through the real processor, each hint's saving is within its stage's time on the root, with bounded keys."""
    p = pipeline(TWO_STAGES)
    base = 0
    for steps in requests:
        root = p.start("request", base)
        now = base
        for stage, gap, length, model, streamed, inp, out, args in steps:
            start = now + gap
            attributes: dict[str, str | int | bool | float] = (
                {
                    "gen_ai.operation.name": "chat",
                    "gen_ai.request.model": model,
                    "gen_ai.request.stream": streamed,
                    "gen_ai.usage.input_tokens": inp,
                    "gen_ai.usage.output_tokens": out,
                }
                if stage == "model_call"
                else {
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": model,
                    "gen_ai.tool.call.arguments": str(args),
                }
            )
            if streamed and stage == "model_call":
                attributes["gen_ai.response.time_to_first_chunk"] = length / 4000
            p.run(f"{stage} {model}", start, start + length, parent=root, attributes=attributes)
            now = start + length
        root.end(end_time=at(now + 10))
        base = now + 100
    roots = [s for s in p.finished() if s.name == "request"]
    assert len(roots) == len(requests)
    for root_span in roots:
        attributes = dict(root_span.attributes or {})
        for event in root_span.events:
            if event.name != "latency_budget.hint":
                continue
            hint = dict(event.attributes or {})
            stage = hint["latency_budget.stage"]
            assert (
                0
                < hint["latency_budget.hint.potential_savings_ms"]
                <= attributes[f"latency_budget.stages.{stage}.actual_ms"]
            )
            if hint["latency_budget.hint.kind"] in LEVER_KINDS:
                assert hint["latency_budget.hint.basis_count"] >= 1
            assert set(hint) <= {
                "latency_budget.hint.kind",
                "latency_budget.stage",
                "latency_budget.hint.span_count",
                "latency_budget.hint.potential_savings_ms",
                "latency_budget.hint.basis_count",
                "latency_budget.hint.basis",  # context_size only: what its fit is of
                "latency_budget.hint.span_names",
                "latency_budget.hint.span_ids",
            }


@settings(max_examples=200, deadline=None, database=None)
@given(request=calls(), history=st.lists(calls(max_size=6), max_size=12))
def test_the_processors_quick_test_never_skips_a_lever(request: list[Call], history: list[list[Call]]) -> None:
    """When the recent calls say no lever can apply, request_levers indeed finds none (the skip is safe)."""
    recent = RecentCalls()
    for earlier in history:
        recent.add([sample_of(c) for c in earlier])
        recent.remember([sample_of(c) for c in earlier])
    maybe = recent.add([sample_of(c) for c in request])
    found = request_levers(request, report_for(request), recent)
    assert maybe or found == []
