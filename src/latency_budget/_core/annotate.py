"""Render a :class:`TraceReport` as span attributes and violation events (contract v2).

Every measured ``_ms`` value written is a float rounded to the microsecond (three
decimals), as a person reads it in a tracing UI; the report keeps full precision. The
rounding, half up, is ``(ms * 1000.0 + 0.5) // 1.0 / 1000.0``: the double nearest a whole
number of microseconds, which prints with at most three decimals. It is float arithmetic
only, with no call: a third of the cost of ``round(ms, 3)`` (a decimal conversion) and
cheaper than ``round(ms * 1000) / 1000``, on the root's end, on the application's thread.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from opentelemetry.sdk.trace import Event

from latency_budget import _attributes as attr
from latency_budget._core.hints import Hint
from latency_budget._core.report import TraceReport, Violation

if TYPE_CHECKING:
    from collections.abc import Mapping

    from opentelemetry.trace import SpanKind
    from opentelemetry.util.types import AttributeValue

    from latency_budget._core.inference import InferenceSplit
    from latency_budget._core.trace_state import TraceState

__all__ = [
    "event_time_ns",
    "hint_attributes",
    "root_attributes",
    "stage_span_attributes",
    "verdict_text",
    "violation_attributes",
]

AttributeMap = dict[str, "str | bool | int | float | tuple[str, ...]"]

# The verdict names at most this many broken budgets, then says how many more.
VERDICT_ENTRIES = 5


def root_attributes(report: TraceReport, *, truncated: bool = False) -> dict[str, AttributeValue]:
    """The attributes the local root span gains. All ``_ms`` values are floats.

    The verdicts (violated, over-budget and warn stages, critical stage) are the report's
    own; the attributes add ``total`` to the stages when a request-level budget broke.
    """
    # The verdict first (then updated in place): a UI that keeps insertion order shows it on top.
    out: dict[str, AttributeValue] = {
        attr.VERDICT: verdict_text(report),
        attr.VIOLATED: report.violated,
        attr.OVER_BUDGET_STAGES: (),
    }
    for stage in report.stages:
        name = stage.stage
        keys = _KEYS.get(name) or _stage_keys(name)
        if stage.count:
            out[keys[0]] = (stage.actual_ms * 1000.0 + 0.5) // 1.0 / 1000.0
            out[keys[1]] = (stage.busy_ms * 1000.0 + 0.5) // 1.0 / 1000.0
            out[keys[2]] = stage.count
            if stage.budget_ms is not None:
                out[keys[3]] = float(stage.budget_ms)
            if stage.first_token_ms is not None:
                out[keys[4]] = (stage.first_token_ms * 1000.0 + 0.5) // 1.0 / 1000.0
        if stage.critical_ms:
            out[keys[5]] = (stage.critical_ms * 1000.0 + 0.5) // 1.0 / 1000.0
    if report.violations:
        out[attr.OVER_BUDGET_STAGES] = report.broken_stages("error")
        warn = report.broken_stages("warn")
        if warn:
            out[attr.WARN_STAGES] = warn
    if report.total_budget_ms is not None:
        out[attr.TOTAL_BUDGET_MS] = float(report.total_budget_ms)
    out[attr.TOTAL_ACTUAL_MS] = (report.total_actual_ms * 1000.0 + 0.5) // 1.0 / 1000.0
    if report.first_token_ms is not None:
        out[attr.TOTAL_FIRST_TOKEN_MS] = (report.first_token_ms * 1000.0 + 0.5) // 1.0 / 1000.0
    critical_stage = report.critical_stage
    if critical_stage is not None:
        out[attr.CRITICAL_STAGE] = critical_stage
    out[attr.PROFILE] = report.profile
    if report.unattributed_ms is not None:
        out[attr.UNATTRIBUTED_MS] = (report.unattributed_ms * 1000.0 + 0.5) // 1.0 / 1000.0
    if truncated:
        out[attr.TRUNCATED] = True
    if report.inference is not None:
        _inference_attributes(report.inference, out)
    return out


# (the agent's own count on its root, the stage it counts, the attribute a disagreement is written under)
_AGENT_COUNTS = (
    ("gen_ai.invoke_agent.inference_calls", "model_call", attr.AGENT_INFERENCE_CALLS),
    ("gen_ai.invoke_agent.tool_calls", "tool_calls", attr.AGENT_TOOL_CALLS),
)


def _agent_counts(report: TraceReport, attributes: Mapping[str, Any], out: dict[str, AttributeValue]) -> None:
    """The agent's own call counts, where they differ from the counted calls of their stage (one of them is wrong)."""
    counted = {stage.stage: stage.count for stage in report.stages}
    for key, stage, written in _AGENT_COUNTS:
        said = attributes.get(key)
        if isinstance(said, int) and not isinstance(said, bool) and stage in counted and said != counted[stage]:
            out[written] = said


def _inference_attributes(split: InferenceSplit, out: dict[str, AttributeValue]) -> None:
    """Where the model calls' time went: the server's split where it traced, the client's figures where not."""
    if split.server_calls:
        out[attr.INFERENCE_SERVER_CALLS] = split.server_calls
        out[attr.INFERENCE_OVERHEAD_MS] = _rounded(split.overhead_ms)
        out[attr.INFERENCE_QUEUE_MS] = _rounded(split.queue_ms)
        out[attr.INFERENCE_PROMPT_MS] = _rounded(split.prompt_ms)
    if split.client_calls:
        out[attr.INFERENCE_CLIENT_CALLS] = split.client_calls
        out[attr.INFERENCE_BEFORE_FIRST_TOKEN_MS] = _rounded(split.before_first_token_ms)
    out[attr.INFERENCE_GENERATION_MS] = _rounded(split.generation_ms)
    if split.output_tokens_per_s is not None:
        out[attr.INFERENCE_OUTPUT_TOKENS_PER_S] = _rounded(split.output_tokens_per_s)


def _rounded(value: float) -> float:
    """Rounded to three decimals, as every ``_ms`` value of the contract."""
    return (value * 1000.0 + 0.5) // 1.0 / 1000.0


_FIELDS = ("actual_ms", "busy_ms", "count", "budget_ms", "worst_first_token_ms", "critical_ms")
_KEYS: dict[str, tuple[str, ...]] = {}


def _stage_keys(stage: str) -> tuple[str, ...]:
    """The per-stage attribute keys, built once per stage name (names come from the config)."""
    keys = _KEYS.get(stage)
    if keys is None:
        keys = _KEYS[stage] = tuple(attr.stage_key(stage, field) for field in _FIELDS)
    return keys


def verdict_text(report: TraceReport) -> str:
    """One line for people, the verdict first: what broke and by how much.

    ``OVER BUDGET: model_call +475.758 ms (3975.758/3500 ms, 5 calls), total +1110.8 ms
    (6610.8/5500 ms)``, or ``within budget``; warn-level breaks follow after ``warn:``.
    At most :data:`VERDICT_ENTRIES` budgets are named, then ``+N more``.
    """
    violations = report.violations
    if not violations:
        return "within budget"  # the common case: the totals are in their own attributes
    errors = [v for v in violations if v.severity == "error"]
    head = "OVER BUDGET: " if errors else "within budget; "
    warns = [v for v in violations if v.severity != "error"]
    counts = {stage.stage: stage.count for stage in report.stages if stage.violations}
    parts: list[str] = []
    room = VERDICT_ENTRIES
    for label, found in (("", errors), ("warn: ", warns)):
        if found and room > 0:
            parts.append(label + ", ".join(_entry(v, counts) for v in found[:room]))
            room -= len(found[:room])
    text = head + "; ".join(parts)
    hidden = len(violations) - (VERDICT_ENTRIES - room)
    return f"{text}, +{hidden} more" if hidden else text


def _entry(violation: Violation, counts: dict[str, int]) -> str:
    """One broken budget: ``model_call +475.758 ms (3975.758/3500 ms, 5 calls)``."""
    stage = violation.stage
    if violation.kind == "calls":
        return f"{stage} {violation.calls} calls (max {violation.max_calls})"
    if stage == attr.TOTAL:
        what = "first token" if violation.kind == "first_token" else attr.TOTAL
    else:
        what = f"{stage} first token" if violation.kind == "first_token" else stage
    figures = f"{_ms(violation.actual_ms)}/{_ms(violation.budget_ms)} ms"
    count = counts.get(stage, 0)
    if violation.kind == "duration" and count > 1:
        figures += f", {count} calls"  # their union broke it, though each may be within
    return f"{what} +{_ms(violation.over_ms)} ms ({figures})"


def _ms(value: float | None) -> str:
    """Milliseconds to the microsecond, without trailing zeros: ``3975.758``, ``3500``."""
    if value is None:
        return "?"
    return f"{value:.3f}".rstrip("0").rstrip(".")


def hint_attributes(hint: Hint) -> AttributeMap:
    """The attributes of one ``latency_budget.hint`` event.

    The span ids are hex, separated by spaces: pasted into the Find box of Jaeger's trace
    page, they highlight those spans on the timeline.
    """
    out: AttributeMap = {
        attr.HINT_KIND: hint.kind,
        attr.STAGE: hint.stage,
        attr.HINT_SAVINGS_MS: (hint.potential_savings_ms * 1000.0 + 0.5) // 1.0 / 1000.0,
        attr.HINT_SPAN_COUNT: hint.span_count,
    }
    if hint.span_ids:
        out[attr.HINT_SPAN_NAMES] = tuple(_bounded(name) for name in hint.span_names)
        out[attr.HINT_SPAN_IDS] = " ".join(f"{span_id:016x}" for span_id in hint.span_ids)
    if hint.basis_count is not None:
        out[attr.HINT_BASIS_COUNT] = hint.basis_count
    if hint.basis is not None:
        out[attr.HINT_BASIS] = hint.basis
    return out


# A span name in a hint keeps at most this many characters: span names come from the
# application, and an attribute value stays bounded whatever they hold.
NAME_CHARS = 120


def _bounded(name: str) -> str:
    return name if len(name) <= NAME_CHARS else name[: NAME_CHARS - 1] + "\u2026"


def violation_attributes(violation: Violation) -> AttributeMap:
    """The attributes of one ``latency_budget.violation`` event (or log record).

    What broke, then by how much, then the severity: the order a backend that keeps
    insertion order shows (Jaeger lists an event's fields alphabetically instead).
    """
    out: AttributeMap = {attr.STAGE: violation.stage, attr.KIND: violation.kind}
    if violation.kind == "calls":
        if violation.calls is not None:
            out[attr.CALLS] = violation.calls
        if violation.max_calls is not None:
            out[attr.MAX_CALLS] = violation.max_calls
    else:
        if violation.over_ms is not None:
            out[attr.OVER_MS] = (violation.over_ms * 1000.0 + 0.5) // 1.0 / 1000.0
        if violation.actual_ms is not None:
            out[attr.ACTUAL_MS] = (violation.actual_ms * 1000.0 + 0.5) // 1.0 / 1000.0
        if violation.budget_ms is not None:
            out[attr.BUDGET_MS] = float(violation.budget_ms)
    out[attr.SEVERITY] = violation.severity
    return out


def event_time_ns(start_ns: int, end_ns: int) -> int:
    """When to stamp the root's events: at its end, as every backend stores the span.

    Jaeger keeps whole microseconds and truncates the start and the duration apart, so a
    span from ``start_ns`` to ``end_ns`` ends there at ``start_us + duration_us``, up to
    2 us before ``end_ns``; an event stamped at ``end_ns`` can then fall after the span,
    and Jaeger's UI hides it. This instant is that truncated end, in ns: a whole
    microsecond, so any backend that truncates or rounds to microseconds (the start and
    the duration, or the start and the end) keeps it inside the span, and it never lies
    outside ``[start_ns, end_ns]``. A span shorter than 1 us gets its events at its start.
    """
    # Never after end_ns: it is end_ns less the sub-microsecond parts of start and duration.
    jaeger_end = (start_ns // 1000 + (end_ns - start_ns) // 1000) * 1000
    return jaeger_end if jaeger_end >= start_ns else start_ns


def stage_span_attributes(
    state: TraceState,
    stage: int,
    name: str,
    kind: SpanKind,
    scope: str,
    start: int,
    end: int,
    attributes: Mapping[str, Any],
) -> dict[str, AttributeValue]:
    """What an ended stage span gains: its label when matched late, a verdict when it alone broke its stage's budget."""
    budget = state.budgets.stages[stage]
    extra: dict[str, AttributeValue] = {}
    # Matched late: not labelled at start (a span its name alone puts in a stage was, unless
    # the span's attribute limits dropped the label: then it stays dropped).
    if (
        attributes.get(attr.STAGE) != budget.name
        and state.config.classifier.prepare(name, kind, scope).__class__ is not int
    ):
        extra[attr.STAGE] = budget.name
        if budget.budget_ms is not None:
            extra[attr.STAGE_BUDGET_MS] = float(budget.budget_ms)
    own_ms = (end - start) / 1e6
    if budget.budget_ms is not None and own_ms > budget.budget_ms:
        extra[attr.VIOLATED if budget.severity == "error" else attr.WARNED] = True
        extra[attr.ACTUAL_MS] = (own_ms * 1000.0 + 0.5) // 1.0 / 1000.0  # to the microsecond
    return extra


def root_annotation(
    state: TraceState,
    report: TraceReport,
    stage: int,
    name: str,
    kind: SpanKind,
    scope: str,
    start: int,
    end: int,
    attributes: Mapping[str, Any],
) -> tuple[dict[str, AttributeValue], list[Event]]:
    """What a judged root gains: its attributes (its own as a stage span first, when it is one) and events.

    The events (one per violation and hint) are stamped at :func:`event_time_ns`, inside
    the root's interval as every backend stores it.
    """
    extra = root_attributes(report, truncated=state.truncated)  # a new dict: no copy of it
    if _AGENT_COUNTS[0][0] in attributes or _AGENT_COUNTS[1][0] in attributes:
        _agent_counts(report, attributes, extra)
    if stage >= 0:
        extra = {**stage_span_attributes(state, stage, name, kind, scope, start, end, attributes), **extra}
    events: list[Event] = []
    if report.violations or report.hints:
        at = event_time_ns(start, end)  # the root's end as Jaeger stores it, so its UI shows them
        events.extend(Event(attr.VIOLATION_EVENT, violation_attributes(v), timestamp=at) for v in report.violations)
        events.extend(Event(attr.HINT_EVENT, hint_attributes(h), timestamp=at) for h in report.hints)
    return extra, events
