"""``streaming``: a model call that made the user wait for its whole answer.

The first model call of the request that produced output for the user without streaming
it (``gen_ai.request.stream`` not true and no first token recorded; not a call that
answered with tool calls), in a stage on the critical path, before the request's first
token. Streamed, its first token would have come after about the median time to first
token of streamed calls to the same model in the same stage: the saving is its duration
minus that median (first-token time, not total time).

Where a protected stage's span had not ended when the call started (an output check after
it, or a check running beside it), streaming would show the user text that check has not
passed: the saving is held back (``Finding.held_back_by``), and the advice says what would
have to change first, a check that keeps up with a stream.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from latency_budget._core.levers.baseline import MIN_STREAMED
from latency_budget._core.levers.finding import Finding
from latency_budget._core.levers.lever import Advice, AdviceFor, Lever
from latency_budget._core.report import format_ms

from ..wording import plural

if TYPE_CHECKING:
    from latency_budget._core.call_facts import Call
    from latency_budget._core.levers.baseline import Baseline
    from latency_budget._core.report import TraceReport

__all__ = ["LEVER", "find"]


def find(
    calls: Sequence[Call],
    report: TraceReport,
    baseline: Baseline,
    limits: Mapping[str, tuple[float, float]],
    protected: frozenset[str],
) -> Finding | None:
    """The streaming lever of one request, if its first unstreamed answer was on the critical path."""
    first_token_at = None
    if report.first_token_ms is not None and report.start_time_ns is not None:
        first_token_at = report.start_time_ns + round(report.first_token_ms * 1e6)
    candidates = [
        c
        for c in calls
        if c.generation
        and not c.streamed
        and not c.to_tools
        and c.model is not None
        and c.stage in limits
        and c.stage not in protected
        and limits[c.stage][1] > 0  # the stage is on the critical path
        and (first_token_at is None or c.start_ns < first_token_at)
    ]
    if not candidates:
        return None
    call = min(candidates, key=lambda c: (c.end_ns, c.start_ns))
    assert call.model is not None
    stats = baseline.stats(call.stage, call.model)
    streamed = stats.streamed if stats is not None else 0
    if stats is None or stats.first_token_p50_ms is None or streamed < MIN_STREAMED:
        return Finding("streaming", call.stage, 1, None, streamed, (call.model,), span_ids=(call.span_id,))
    test = f"at least {plural(MIN_STREAMED, 'streamed call')} of the model"
    duration = call.duration_ns / 1e6
    saving = min(duration - stats.first_token_p50_ms, limits[call.stage][0])
    if saving <= 0:  # not shorter than a streamed call's first token: streaming would not help
        return None
    check = _check_after(call, report)
    if check is not None:
        return Finding(
            "streaming",
            call.stage,
            1,
            None,
            streamed,
            (call.model,),
            span_ids=(call.span_id,),
            test=test,
            held_back_by=check,
            held_back_ms=saving,
        )
    return Finding("streaming", call.stage, 1, saving, streamed, (call.model,), span_ids=(call.span_id,), test=test)


def _check_after(call: Call, report: TraceReport) -> str | None:
    """The protected stage with a span still running when ``call`` started: a check its output would have to pass."""
    for stage, _, end in report.protected_spans:
        if end > call.start_ns:
            return stage
    return None


def advise(given: AdviceFor) -> Advice:
    """Streaming's basis and advice over a recording."""
    stats, main = given.stats, given.main
    basis = ""
    if stats is not None and stats.first_token_p50_ms is not None and stats.streamed >= MIN_STREAMED:
        median = format_ms(stats.first_token_p50_ms)
        basis = f"median first token of {plural(stats.streamed, 'streamed call')} of {main}: {median}"
    if given.unestimated:
        basis += ("; " if basis else "") + (
            f"no estimate in {plural(given.unestimated, 'request')}: "
            f"fewer than {plural(MIN_STREAMED, 'streamed call')} of the model"
        )
    advice = f"stream the responses of {given.named} (gen_ai.request.stream): the user sees the first token sooner"
    if given.held_back:
        checks = " and ".join(given.held_back_by)
        basis += ("; " if basis else "") + (
            f"no saving claimed in {plural(given.held_back, 'request')}: "
            f"a {checks} check was still to end when the model "
            "call started (it checks the output after it, or beside it)"
        )
        if given.held_back_by and not given.estimated:
            advice = (
                f"to stream the responses of {given.named}, first make {checks} a streaming-capable check (one "
                "that checks the text as it streams and stops what fails): streamed today, the user would see "
                "text it has not passed"
            )
    return basis, advice


LEVER = Lever(
    name="streaming",
    estimated=True,
    saves="first_token",
    text="streaming the response would bring the first token about {saving} sooner",
    unit="call",
    changes="stream",
    fits="the request's first model call that answered the user without streaming, on the critical path, "
    "before the request's first token",
    controls_for="compares with streamed calls of the same model in the same stage (their median time to first "
    "token), not with other models; calls that answered with tool calls only are not candidates",
    evidence="none for the answer (streaming does not change it); a protected check after the call must be able "
    "to check a stream",
    never="streaming output ahead of a protected stage that checks it (it says what that check would need instead)",
    needs=("guardrail_outcomes",),
    advise=advise,
    find_in_request=find,
)
