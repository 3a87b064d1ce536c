"""Judge recorded spans (from files or a tracing backend) with the processor's own accounting.

The CLI's ``check``, ``report`` and ``suggest`` read traces into :class:`SpanRecord`
values and call :func:`evaluate_spans`. Each span is recorded by
:meth:`TraceState.end_span`, the live processor's own rule (stage, first token, bounds),
and judged by the same :meth:`TraceState.report`, so a recorded trace gets the verdict it
got (or would have got) in production. As live, a span's ``latency_budget.stage`` label
(written when it started) decides its stage when it names a stage of this budget file;
other spans are classified by the file's rules on their final attributes. The one
difference: the live processor adds lever hints estimated from the calls of recent
traces; here each report gets its calls instead, and the CLI estimates the levers over the
whole recording (:mod:`latency_budget.cli._levers`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Protocol

from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

from latency_budget._config.model import BudgetConfig
from latency_budget._core.accounting import LeverHints
from latency_budget._core.inference import SERVER_E2E, ServerSpan
from latency_budget._core.report import TraceReport
from latency_budget._core.trace_state import LATE_SPAN_BOUND_MS, TraceState, is_local_root

__all__ = ["JudgedRoot", "Recorded", "SpanRecord", "evaluate_spans", "judge_roots", "record_of"]


@dataclass(frozen=True, slots=True)
class SpanRecord:
    """One ended span as a recording holds it.

    ``remote_parent`` is true when the parent ran in another process or service, which
    makes this span a local root, as a remote parent context does in the live processor.
    ``resource`` holds the attributes of the resource that made the span (``service.name``),
    which a rule's ``resource`` conditions read.
    """

    trace_id: int
    span_id: int
    parent_id: int | None
    name: str
    start_ns: int
    end_ns: int
    kind: SpanKind = SpanKind.INTERNAL
    scope: str = ""
    attributes: Mapping[str, object] = field(default_factory=dict)
    events: tuple[Event, ...] = ()
    remote_parent: bool = False
    resource: Mapping[str, object] = field(default_factory=dict)
    error: bool = False  # the span's status is ERROR (the quality reader counts a model call's errors)


class Recorded(Protocol):
    """What the judging reads of a recorded span: :class:`SpanRecord`'s fields (``serve`` keeps its own kind)."""

    @property
    def trace_id(self) -> int: ...
    @property
    def span_id(self) -> int: ...
    @property
    def parent_id(self) -> int | None: ...
    @property
    def name(self) -> str: ...
    @property
    def start_ns(self) -> int: ...
    @property
    def end_ns(self) -> int: ...
    @property
    def kind(self) -> SpanKind: ...
    @property
    def scope(self) -> str: ...
    @property
    def attributes(self) -> Mapping[str, object]: ...
    @property
    def events(self) -> tuple[Event, ...]: ...
    @property
    def remote_parent(self) -> bool: ...
    @property
    def resource(self) -> Mapping[str, object]: ...


@dataclass(slots=True)
class JudgedRoot:
    """One judged root: the span, its trace's account, the report and the root's own stage (or -1)."""

    root: Recorded
    state: TraceState
    report: TraceReport
    stage: int


def record_of(span: ReadableSpan) -> SpanRecord:
    """A finished SDK span as a replay record (what ``latency_budget.testing`` and the tests replay)."""
    context = span.context
    parent = span.parent
    start = span.start_time or 0
    return SpanRecord(
        trace_id=context.trace_id if context is not None else 0,
        span_id=context.span_id if context is not None else 0,
        parent_id=parent.span_id if parent is not None else None,
        name=span.name,
        start_ns=start,
        end_ns=span.end_time or start,
        kind=span.kind,
        scope=span.instrumentation_scope.name if span.instrumentation_scope is not None else "",
        attributes=dict(span.attributes or {}),
        events=tuple(span.events),
        remote_parent=bool(parent is not None and parent.is_remote),
        error=span.status.status_code is StatusCode.ERROR,
    )


def evaluate_spans(
    config: BudgetConfig, spans: Iterable[SpanRecord], *, max_spans_per_trace: int = 1_000, every_root: bool = False
) -> list[TraceReport]:
    """One report per local root among ``spans`` that is a request, ordered by the root's start time.

    A span whose parent is absent from the recording is treated as a local root. As in
    the live processor, spans that end after their local root are counted only when they
    started before it ended and ended within ``LATE_SPAN_BOUND_MS`` of its end, and
    whether the root is a request (the budget file's ``requests``) and its profile are
    decided from the root's name, kind and attributes (here, its final ones). With
    ``every_root``, every local root is judged, whatever ``requests`` says.
    Each report carries its stage calls (``calls``, outermost calls only) for the lever
    estimates.
    """
    # No lever hints here: the CLI estimates the levers over all requests, from each
    # report's calls.
    return [
        judged.report
        for judged in judge_roots(config, spans, max_spans_per_trace=max_spans_per_trace, every_root=every_root)
    ]


def judge_roots(
    config: BudgetConfig,
    spans: Iterable[Recorded],
    *,
    max_spans_per_trace: int = 1_000,
    every_root: bool = False,
    whole_trace: bool = False,
    levers: Callable[[TraceState], LeverHints] | None = None,
) -> list[JudgedRoot]:
    """Judge each root among ``spans`` that is a request, ordered by the root's start time.

    The roots are the local roots (see :func:`evaluate_spans`), or with ``whole_trace``
    one per trace: its span with no parent (the earliest, if several), whose account
    holds every span of the trace, whichever process made it; a trace with no such span
    is not judged. A span's stage is decided under ``config`` resolved for its own
    resource, the root's request and profile under the root's. ``levers``, when given,
    makes the lever estimate of each judged trace (as the live processor's).
    """
    by_id: dict[tuple[int, int], Recorded] = {}
    for span in spans:
        by_id[(span.trace_id, span.span_id)] = span  # a repeated id: the last one counts

    roots: dict[tuple[int, int], Recorded] = {}
    members: dict[tuple[int, int], list[Recorded]] = {}
    if whole_trace:
        first: dict[int, Recorded] = {}
        for span in by_id.values():
            if span.parent_id is None:
                known = first.get(span.trace_id)
                if known is None or (span.start_ns, span.span_id) < (known.start_ns, known.span_id):
                    first[span.trace_id] = span
        for span in first.values():
            roots[(span.trace_id, span.span_id)] = span
        for span in by_id.values():
            root = first.get(span.trace_id)
            if root is not None:
                members.setdefault((root.trace_id, root.span_id), []).append(span)
    else:
        owner: dict[tuple[int, int], tuple[int, int]] = {}

        def local_root(key: tuple[int, int]) -> tuple[int, int]:
            path = []
            while key not in owner:
                span = by_id[key]
                parent = (span.trace_id, span.parent_id or 0)
                recorded = span.parent_id is not None and parent in by_id
                if is_local_root(span.parent_id, span.remote_parent, recorded) or parent in path or parent == key:
                    roots[key] = span  # a parent among its own descendants (a cycle) makes a root too
                    owner[key] = key
                    break
                path.append(key)
                key = parent
            found = owner[key]
            for step in path:
                owner[step] = found
            return found

        for key, span in by_id.items():
            members.setdefault(local_root(key), []).append(span)

    servers = _server_spans(by_id)
    judged: list[JudgedRoot] = []
    late_ns = int(LATE_SPAN_BOUND_MS * 1e6)
    unshared = nullcontext()  # one thread: the overflow counters need no lock
    resolve = config.for_resource if config.resource_keys else None
    for root_key, root in sorted(roots.items(), key=lambda item: (item[1].start_ns, item[0])):
        root_config = resolve(root.resource) if resolve is not None else config
        if not every_root and not root_config.is_request(root.name, root.kind, root.scope, root.attributes):
            continue  # not a request: its spans are not accounted, as in the live processor
        budgets = root_config.budgets_for_root(root.name, root.kind, root.scope, root.attributes)
        state = TraceState(
            root_config, budgets, root.span_id, root.start_ns, root.trace_id, max_spans_per_trace, unshared, _events
        )
        # In the order they ended, the root last. As live (the processor's late children),
        # a span that started before its root ended and ended within LATE_SPAN_BOUND_MS
        # after it counts, up to the root's end; a span ending later, or starting after
        # the root ended, does not.
        root_end = root.end_ns
        latest = root_end + late_ns
        ended = [s for s in members[root_key] if s is not root and s.end_ns <= latest and s.start_ns <= root_end]
        ended.sort(key=lambda s: (s.end_ns, s.start_ns))
        ended.append(root)
        stage = -1
        for span in ended:
            parent = None if span is root else span.parent_id
            if resolve is not None:  # the stages are the same objects in every resolved config
                state.config = resolve(span.resource)
            stage = state.end_span(
                span.span_id,
                parent,
                span.name,
                span.kind,
                span.scope,
                span.start_ns,
                min(span.end_ns, root_end),
                span.attributes,
                span,
            )
        state.config = root_config
        state.servers = servers.get(root.trace_id, ())
        if not every_root and not state.judged_by_default(root.kind, root.remote_parent, root.attributes):
            continue  # start-up work, by the default rule: not judged, as in the live processor
        report = state.report(
            root.start_ns,
            root.end_ns,
            trace_id=root.trace_id,
            root_name=root.name,
            levers=levers(state) if levers is not None else None,
        )
        judged.append(JudgedRoot(root, state, report, stage))  # stage: the root's, recorded last
    return judged


def _server_spans(by_id: Mapping[tuple[int, int], Recorded]) -> dict[int, list[ServerSpan]]:
    """Per trace, the inference servers' own spans (``gen_ai.latency.e2e``), each with its ancestors' ids.

    The ancestors are followed across process boundaries (a remote parent that the
    recording holds): the server's span hangs under the client's HTTP call, in another
    local root, which is how a model call finds the server's side of it.
    """
    found: dict[int, list[ServerSpan]] = {}
    for (trace_id, _), span in by_id.items():
        if SERVER_E2E not in span.attributes:
            continue
        ancestors: list[int] = []
        parent = span.parent_id
        while parent is not None and len(ancestors) < 64:  # bounded: a loop of ids ends the walk
            ancestors.append(parent)
            above = by_id.get((trace_id, parent))
            parent = above.parent_id if above is not None else None
        found.setdefault(trace_id, []).append((tuple(ancestors), span.attributes))
    return found


def _events(span: Recorded) -> tuple[Event, ...]:
    return span.events
