"""Per-trace accounting state, kept while a local root is open.

Spans of the trace end on any thread. Recording one (:meth:`TraceState.end_span`, used
by the live processor and by the replay of recorded traces alike) is an append to a list
(atomic in CPython), so it takes no lock; the root's end takes a snapshot and works out
the per-stage tallies from it. Only past ``max_spans`` (a truncated trace) do stage spans
go to exact counters, updated under a lock the caller gives.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from latency_budget._attributes import STAGE
from latency_budget._config.genai_defaults import (
    INVOCATION_KEYS,
    REQUEST_STAGES,
    TOOL_CALLS_ONLY,
    invokes,
    plausible_request,
)
from latency_budget._config.model import BudgetConfig, BudgetSet
from latency_budget._core.accounting import LeverHints, StageMeasurement, busy_length, evaluate, union_length
from latency_budget._core.call_facts import Call, RawCall, recorded_calls
from latency_budget._core.calls import bookkeeping_calls, nested_calls, operation_of, repeated_operations
from latency_budget._core.critical_path import RecordedSpan, critical_path_ns
from latency_budget._core.first_token import answered_with_tool_calls_only, not_a_generation, time_to_first_token_ns
from latency_budget._core.hints import find_hints
from latency_budget._core.inference import ServerSpan, inference_split
from latency_budget._core.quality import CallQuality
from latency_budget._core.quality_reader import QUALITY_GATE, span_quality
from latency_budget._core.report import TraceReport

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import Event
    from opentelemetry.trace import SpanKind

__all__ = ["LATE_SPAN_BOUND_MS", "LATE_SPAN_GRACE_MS", "StageTally", "TraceState", "is_local_root"]

# How long after its local root a stage span that started before the root ended may end
# and still count in the root's judgment (span timestamps), and how long, in wall-clock
# time, the live processor holds a root back for such spans (the processor, the replay of
# recorded traces and serve alike: docs/reliability.md#late-spans).
LATE_SPAN_BOUND_MS = 20.0

# How long, in wall-clock time, the live processor holds every local root for spans that an
# instrumentation starts only after the call they describe, with the call's times (LiteLLM's
# callback writes `litellm_request` after the call: 1.6 to 1.9 ms after the root in issue
# 45's run, ~15 ms on the lab's loaded two-core machine). A few times the worst seen.
LATE_SPAN_GRACE_MS = 50.0

_NONE: frozenset[int] = frozenset()
# The scopes whose spans say "tool calls only" in an event (TOOL_CALLS_ONLY): read on every
# stage span of theirs, streamed or not; other spans' attributes say it, read when the root ends.
_EVENT_SCOPES = frozenset(row.scope for row in TOOL_CALLS_ONLY if row.event is not None and row.scope is not None)
Interval = tuple[int, int]
_NO_INVOCATION = INVOCATION_KEYS.isdisjoint  # bound once: a span with none of the keys invokes nothing
_NO_QUALITY = QUALITY_GATE.isdisjoint  # a span with none of these keys is no model call or guardrail decision
_TOOL_STAGE = "tool_calls"  # the stage whose bookkeeping spans (STOP_AND_HANDOFF) are left out


def is_local_root(parent_id: int | None, parent_is_remote: bool, parent_recorded: bool = True) -> bool:
    """Whether a span is a local root: no parent, a remote one (another process), or one the recording lacks.

    The one rule for the replay of recorded traces and the testing helper; the live
    processor, where a parent in this process is always there, applies it inline.
    """
    return parent_id is None or parent_is_remote or not parent_recorded


class StageTally:
    """Counters for the ended spans of one stage in one trace."""

    __slots__ = ("busy_ns", "count", "first_token_ns")

    def __init__(self) -> None:
        self.busy_ns = 0
        self.count = 0
        self.first_token_ns: int | None = None  # the worst (largest) of the stage's spans

    def add(self, start: int, end: int, first_token_ns: int | None) -> None:
        self.count += 1
        self.busy_ns += busy_length(((start, end),))
        if first_token_ns is not None and (self.first_token_ns is None or first_token_ns > self.first_token_ns):
            self.first_token_ns = first_token_ns


class TraceState:
    """Everything remembered about one local-root trace until its root ends."""

    __slots__ = (
        "budgets",
        "calls",
        "closed",
        "config",
        "deadline",
        "finished",
        "first_tokens",
        "held",
        "inner_calls",
        "invoked",
        "last_seen",
        "lock",
        "max_spans",
        "names",
        "opened",
        "overflow",
        "overflow_first_token_at",
        "owned",
        "quality",
        "read_events",
        "referenced",
        "root_id",
        "root_start",
        "scopes",
        "servers",
        "shared",
        "spans",
        "tools_only",
        "trace_id",
        "truncated",
    )

    def __init__(
        self,
        config: BudgetConfig,
        budgets: BudgetSet,
        root_id: int,
        root_start: int,
        trace_id: int,
        max_spans: int,
        lock: AbstractContextManager[object],
        read_events: Callable[[Any], Sequence[Event]],
    ) -> None:
        self.config = config  # the configuration in force when the root started
        self.budgets = budgets  # chosen once, when the root starts
        self.root_id = root_id
        self.root_start = root_start
        self.trace_id = trace_id
        # How ended spans are recorded: at most max_spans of them (then stage spans go to
        # exact counters, under lock when threads share the state), and how to read a
        # span's events when a time to first token is looked for there.
        self.max_spans = max_spans
        self.lock = lock
        self.read_events = read_events
        # Other active local roots of the same trace (kept on the first one), and the span
        # ids registered for this root while its trace had several: see the processor.
        self.shared: list[TraceState] = []
        self.owned: list[int] = []
        # Ended spans, in the order they ended, up to max_spans: appended without a lock.
        self.spans: list[RecordedSpan] = []
        # The names of the recorded stage spans, by span id, so that hints can name them, and
        # their instrumentation scopes (one instrumentation never writes one call twice).
        self.names: dict[int, str] = {}
        self.scopes: dict[int, str] = {}
        # (stage, span start, time to first token, whether the user saw it) of the recorded
        # stage spans that have one: a call that answered with tool calls only showed nothing.
        self.first_tokens: list[tuple[int, int, int, bool]] = []
        # The recorded stage spans other than the root, with their (frozen) attributes, for
        # the latency levers (call_facts.RawCall, their stage by name): read only when the root ends.
        self.calls: list[RawCall] = []
        # The span ids of recorded model calls that answered with tool calls only, as the
        # first-token rule found (it may read events, which the levers never do): made
        # when the first is found, so that their output stays out of the output-length rate.
        self.tools_only: set[int] | None = None
        # The span ids of recorded stage spans nested in a span of their own stage (part of
        # that call, see calls.py), found by report(); the levers skip them as hints do.
        self.inner_calls: AbstractSet[int] = _NONE
        # Stage spans past max_spans: exact counters per stage (under lock).
        self.overflow: list[StageTally | None] | None = None
        self.overflow_first_token_at: int | None = None
        # What the recorded stage spans say of answers' quality (quality_reader.span_quality),
        # made when the first says anything: model calls' CallQuality by span id, and the
        # guardrail decisions on answers as (start, end, flagged). Read when the root ends.
        self.quality: tuple[dict[int, CallQuality], list[tuple[int, int, bool]]] | None = None
        # Whether a recorded span below the root invokes an agent or a workflow (a request, by default).
        self.invoked = False
        self.last_seen = root_start  # span timestamps, not wall-clock reads
        # The live processor's late children: the ids of stage spans that started under the
        # root (labelled at their start) and of those that ended, appended without a lock
        # (atomic in CPython); and, once the root ended while some were open, the root held
        # back (the span, its stage, its ended view) until ``deadline`` (monotonic ns).
        # Inference servers' own spans in the trace (vLLM's `llm_request`), with their
        # ancestors: given by the replay of recorded traces, which sees other processes' spans.
        self.servers: Sequence[ServerSpan] = ()
        self.opened: list[int] = []
        self.closed: list[int] = []
        self.held: tuple[Any, int, Any] | None = None
        self.deadline = 0
        self.referenced = True
        self.truncated = False
        self.finished = False

    # Nine positional parameters, not one view of the span: end_span runs for every span of
    # an accounted trace, and under callgrind (CPython 3.11) a NamedTuple built per span
    # and unpacked here cost about 4,200 instructions more per span (its __new__ is a
    # Python-level call): standard 1.240 -> 1.268, web 1.114 -> 1.140. A plain tuple costs
    # about 600 more per span.
    def end_span(
        self,
        span_id: int,
        parent_id: int | None,
        name: str,
        kind: SpanKind,
        scope: str,
        start: int,
        end: int,
        attributes: Mapping[str, object],
        source: object,
    ) -> int:
        """Account one ended span of this trace, its local root included; its stage, or -1.

        The one rule for the live processor and for recorded traces. The stage is the one
        the span's label names (set when it started), else the first whose rules its final
        attributes match. A stage span's time to first token is read from its attributes,
        or from ``read_events(source)``, called only when an event source is reached.
        Past ``max_spans`` a stage span still counts, in exact counters, as a call of its
        own (its ancestors, which end after it, are not known yet); the root always fits
        (it ends last). A recorded stage span's name and kind of call are kept, for hints,
        and (but for the root's) its attributes, for the latency levers.
        """
        config = self.config
        named = attributes.get(STAGE)
        stage = config.stage_index.get(named, -1) if named.__class__ is str else -1
        if stage < 0 and ((gate := config.classifier.late_gate) is None or not gate.isdisjoint(attributes)):
            stage = config.classifier.classify(name, kind, scope, attributes)
            # Only a span with a dialect key gets here: one in no stage may invoke an agent.
            if stage < 0 and not self.invoked and not _NO_INVOCATION(attributes) and invokes(attributes):
                self.invoked = True
        self.referenced = True
        self.last_seen = end
        spans = self.spans
        if stage < 0:  # the common case
            if len(spans) < self.max_spans or span_id == self.root_id:
                spans.append((span_id, parent_id, start, end, -1))
            else:
                self.truncated = True
            return -1
        definition = config.stages[stage]
        sources = definition.first_token
        if sources and definition.first_token_keys.isdisjoint(attributes):
            sources = definition.first_token_events  # the attribute sources have nothing to read
        ttft = time_to_first_token_ns(sources, start, attributes, self.read_events, source, scope) if sources else None
        if ttft is not None and not_a_generation(attributes):
            ttft = None  # an embedding's or a tool's "first token" is no model's: not read
        seen = False
        if ttft is not None or scope in _EVENT_SCOPES:
            # Whether the user saw its first token; and, read anyway, whether it made tool calls only.
            tools = answered_with_tool_calls_only(attributes, self.read_events, source, scope)
            seen = ttft is not None and not tools
            if tools and span_id != self.root_id:
                if self.tools_only is None:
                    self.tools_only = set()
                self.tools_only.add(span_id)
        if len(spans) < self.max_spans or span_id == self.root_id:
            # Name and call before the append: a span in a snapshot has both, for the hints.
            self.names[span_id] = name
            self.scopes[span_id] = scope
            if span_id != self.root_id:
                self.calls.append((span_id, definition.name, start, end, ttft, attributes))
                # A model call or a guardrail decision (one set operation for any other span).
                if not _NO_QUALITY(attributes):
                    self.quality = span_quality(self.quality, span_id, start, end, attributes, self.read_events, source)
            spans.append((span_id, parent_id, start, end, stage))
            if ttft is not None:
                self.first_tokens.append((stage, start, ttft, seen))
        else:
            self.truncated = True
            with self.lock:
                self.record_overflow(stage, start, end, ttft, seen)
        return stage

    def record_overflow(self, stage: int, start: int, end: int, first_token_ns: int | None, seen: bool) -> None:
        """Count a stage span that did not fit in ``spans`` (it adds to counts, not to unions).

        ``seen``: its first token is one the user saw (it did not answer with tool calls only).
        """
        overflow = self.overflow
        if overflow is None:
            overflow = self.overflow = [None] * len(self.budgets.stages)
        tally = overflow[stage]
        if tally is None:
            tally = overflow[stage] = StageTally()
        tally.add(start, end, first_token_ns)
        if first_token_ns is not None and seen:
            instant = start + first_token_ns
            if self.overflow_first_token_at is None or instant < self.overflow_first_token_at:
                self.overflow_first_token_at = instant

    def judged_by_default(self, kind: SpanKind, remote_parent: bool, attributes: Mapping[str, object]) -> bool:
        """Whether the local root, ended with these properties, is judged under the default ``requests`` rule.

        Always true when the budget file's ``requests`` decides instead (or it has no
        ``model_call`` stage). Otherwise: when the root is plausibly a request by itself
        (``genai_defaults.plausible_request``), or when it contains a model call or a tool
        call (``REQUEST_STAGES``), or a span that invokes an agent or a workflow.
        """
        stage = self.config.default_rule_stage
        if stage < 0 or self.invoked or plausible_request(kind, remote_parent, attributes):
            return True
        index = self.config.stage_index
        wanted = {index[name] for name in REQUEST_STAGES if name in index}
        for span in self.spans:
            if span[4] in wanted:
                return True
        overflow = self.overflow
        return overflow is not None and any(overflow[i] is not None for i in wanted)

    def call_kinds(self) -> dict[int, str]:
        """What kind of call each recorded stage span but the root is (see calls.py), for hints."""
        names = self.names
        return {call[0]: operation_of(names.get(call[0], ""), call[5]) for call in self.calls[:]}

    def report(
        self,
        root_start: int,
        root_end: int,
        *,
        trace_id: int | None = None,
        root_name: str | None = None,
        levers: LeverHints | None = None,
    ) -> TraceReport:
        """Judge the trace, once its local root (``root_start`` to ``root_end``) has ended.

        Works on a snapshot: a span recorded by another thread meanwhile is not counted.
        The report carries the trace's outermost stage calls (``calls``), and ``levers``
        gives it lever hints from them (see :func:`evaluate`, which builds it).
        """
        # The steps: each stage's intervals (below), the nested calls (_find_nested), the
        # first tokens (below), the measurements (_measure), the critical path and hints,
        # and the verdict (evaluate). The two short steps stay inline: as methods, the four
        # steps cost 4 calls and about 100 bytecodes a trace (standard case 1.246, against
        # 1.240 before the split).
        spans = self.spans[:]
        stages = self.budgets.stages
        stage_count = len(stages)
        # What ran, not what was called a tool: a framework's stop signal, handoff or delegation
        # (STOP_AND_HANDOFF) is in no stage for the account; the calls inside a delegation count.
        skipped = bookkeeping_calls(self.calls, self.names, _TOOL_STAGE) if self.calls else _NONE
        if skipped:
            spans = [(s[0], s[1], s[2], s[3], -1) if s[0] in skipped else s for s in spans]
        intervals: list[list[Interval] | None] = [None] * stage_count
        repeated = False
        for _, _, start, end, stage in spans:
            if stage >= 0:
                found = intervals[stage]
                if found is None:
                    intervals[stage] = [(start, end)]
                else:
                    found.append((start, end))
                    repeated = True
        # One call is one call: spans nested in a span of their own stage are left out of
        # counts and busy time (and hints). Only a stage with several spans can have any.
        nested = self._find_nested(spans, intervals) if repeated else _NONE
        # The worst time to first token per stage, and the request's first token (an instant).
        worst_ttft: list[int | None] = [None] * stage_count
        first_token_at = self.overflow_first_token_at
        for stage, start, first_token, seen in self.first_tokens[:]:
            if intervals[stage] is None:  # recorded after the snapshot of spans: not counted
                continue
            worst = worst_ttft[stage]
            if worst is None or first_token > worst:
                worst_ttft[stage] = first_token
            # The request's first token is the first text the user sees: not a chunk of tool calls.
            if seen and (first_token_at is None or start + first_token < first_token_at):
                first_token_at = start + first_token
        measurements, counts = self._measure(spans, intervals, nested, worst_ttft)
        total_ms = max(0, root_end - root_start) / 1e6
        if measurements:
            critical, unattributed = critical_path_ns(self.root_id, root_start, root_end, spans, stage_count)
            critical_ms: dict[str, float] = {}
            for budget, ns in zip(stages, critical, strict=True):  # a loop: a comprehension is a call
                critical_ms[budget.name] = ns / 1e6
            unattributed_ms = unattributed / 1e6
            hints, left_out = find_hints(
                self.budgets,
                self.root_id,
                spans,
                counts,
                self.names,
                self.call_kinds,
                nested,
                critical,
                self.calls,
            )
        else:
            # No stage span: the whole critical path is unattributed, and nothing is hinted.
            critical_ms = {budget.name: 0.0 for budget in stages}
            unattributed_ms = total_ms
            hints, left_out = (), 0
        # One call is one call for the levers too: the stage calls but those nested in a call
        # of their stage (inner_calls, found above), inline (a call costs more than the test).
        calls: Sequence[Call] = ()
        inference = None
        if self.calls:
            inner = self.inner_calls
            if skipped:
                inner = {*inner, *skipped}
            raw = [call for call in self.calls if call[0] not in inner] if inner else self.calls
            calls = recorded_calls(raw, self.tools_only or _NONE)
            inference = inference_split(raw, self.servers)
        # The spans of protected stages (validation's, by default): the checks the levers must respect.
        protected_spans: tuple[tuple[str, int, int], ...] = ()
        protected = self.budgets.protected_indexes
        if protected:  # most budget files have no protected stage: no loop
            for index in protected:
                checks = intervals[index]
                if checks is not None:
                    name = stages[index].name
                    protected_spans += tuple([(name, start, end) for start, end in checks])
        first_token_ms = None
        if first_token_at is not None and first_token_at >= root_start:
            first_token_ms = (first_token_at - root_start) / 1e6
        return evaluate(
            self.budgets,
            measurements,
            total_actual_ms=total_ms,
            first_token_ms=first_token_ms,
            critical_ms=critical_ms,
            unattributed_ms=unattributed_ms,
            hints=hints,
            calls=calls,
            levers=levers,
            trace_id=trace_id,
            span_id=self.root_id,
            root_name=root_name,
            start_time_ns=root_start,
            end_time_ns=root_end,
            hints_left_out=left_out,
            inference=inference,
            protected_spans=protected_spans,
        )

    def _find_nested(
        self, spans: Sequence[RecordedSpan], intervals: Sequence[list[Interval] | None]
    ) -> AbstractSet[int]:
        """The positions in ``spans`` of stage spans nested in a call of their stage (their ids: ``inner_calls``)."""
        repeated = {index for index, found in enumerate(intervals) if found is not None and len(found) > 1}
        nested = nested_calls(self.root_id, spans, repeated)
        # One real operation, one call: two instrumentations' spans of one call side by side.
        attributes = {call[0]: call[5] for call in self.calls[:]}
        twins = repeated_operations(self.root_id, spans, nested, attributes, repeated, self.scopes)
        if twins:
            nested = nested | twins if nested else twins
        self.inner_calls = {spans[index][0] for index in nested} if nested else _NONE
        return nested

    def _measure(
        self,
        spans: Sequence[RecordedSpan],
        intervals: Sequence[list[Interval] | None],
        nested: AbstractSet[int],
        worst_ttft: Sequence[int | None],
    ) -> tuple[dict[str, StageMeasurement], list[int]]:
        """Each seen stage's union, busy time, calls and worst first token; and the calls per stage index."""
        stages = self.budgets.stages
        inner: list[list[Interval]] | None = None
        if nested:
            inner = [[] for _ in stages]
            for index in nested:
                _, _, start, end, stage = spans[index]
                inner[stage].append((start, end))
        overflow = self.overflow
        measurements: dict[str, StageMeasurement] = {}
        counts = [0] * len(stages)
        for index, recorded in enumerate(intervals):
            extra = overflow[index] if overflow is not None else None
            if recorded is None and extra is None:
                continue
            found = recorded or []
            count = len(found)
            if count == 1:  # the common case: one call of the stage, its union is its length
                # busy_length's rule, inline: a call per stage costs more than the rule.
                ((start, end),) = found
                busy = union = end - start if end > start else 0
            else:
                busy = busy_length(found)
                union = union_length(found)
                if inner is not None:
                    count -= len(inner[index])
                    busy -= busy_length(inner[index])
            ttft = worst_ttft[index]
            if extra is not None:
                count += extra.count
                busy += extra.busy_ns
                if extra.first_token_ns is not None and (ttft is None or extra.first_token_ns > ttft):
                    ttft = extra.first_token_ns
            counts[index] = count
            measurements[stages[index].name] = StageMeasurement(
                union / 1e6, busy / 1e6, count, ttft / 1e6 if ttft is not None else None
            )
        return measurements, counts
